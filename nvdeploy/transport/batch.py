"""One round trip for many commands: a POSIX sh script that runs them side by side, then frames the outputs.

Each command runs under ``timeout -k`` (so a hung tool is killed on the node, not left behind), with
``LC_ALL=C`` and stdin from /dev/null. Outputs are written to a private temp dir and sent back length-prefixed,
so arbitrary bytes (NUL, invalid UTF-8, a fake sentinel printed by the tool) cannot break the framing. The
script ends with an end marker: a batch whose marker is missing was cut off.

The run's lifetime on the node (issue 9):

- **Nothing outlives the batch.** The script's stdin is the SSH channel (or the local transport's pipe), and the
  controller keeps it open, sending nothing, until it has read the whole answer. A watcher process reads that
  stdin; it returns only at EOF, which happens whatever ends the work early: the controller closes the channel
  (command timeout, ``--deadline``, Ctrl-C, SIGTERM), the controller dies (the kernel closes its socket), or the
  connection drops (sshd closes the pipe). The watcher then signals every process of the batch's session (TERM,
  then KILL after a grace) and removes the temp folder. The session, not a process group: sshd (and the local
  transport) start the command in a session of its own, and ``timeout(1)`` moves each tool into a process group
  of its own, so a group kill would miss the tools. The processes are found through /proc (field 6 of
  /proc/PID/stat), by the shell's ``read`` builtin, so no procps is needed. When every command is done, the
  script signals what is left of its session the same way (a tool's stray background child) before it answers.
  Limits: a process that starts a session of its own (a daemon) escapes; root processes under ``sudo`` get the
  TERM through sudo (which relays it) but not a KILL.
- **Output is capped on the node as it is written**: each stream goes through ``head -c CAP`` (GNU head never
  reads past CAP, so the rest is counted exactly by ``wc -c`` and discarded), or for ``keep_tail`` specs through
  ``tail -c CAP`` with a FIFO to ``wc -c`` for the true size. A flooding tool cannot fill the node's /tmp.
- **One run per node at a time**: the batch takes ``flock -n`` on the folder ``$NVDEPLOY_LOCK_DIR`` (default
  ``/tmp/nvdeploy.lock``, created mode 1777 so every user's run shares it) and writes its holder info (user,
  run id, start time, pid) to ``holder.<pid>`` inside it. A folder rather than a file: with
  ``fs.protected_regular`` (the systemd default) nobody can open another user's file in /tmp with O_CREAT, so a
  lock file created by one operator would be unusable for the next. A batch that cannot take the lock prints
  ``__NVD_BUSY__`` with the live holder's info and runs nothing. flock releases with the last process holding
  it, so a lock whose holder is gone is simply taken. Without flock(1) (util-linux) the batch runs unlocked.
- **sudo: one password attempt per node.** With a password, the script first runs ``sudo -S -p '' -- true``
  alone and prints its outcome early (``__NVD_SUDO__``, so the controller's sudo gate can let the other nodes
  go on). Only when it succeeded do the sudo commands start; otherwise they are reported ``rc=s<N>`` (not run)
  and the non-sudo commands run as usual.
"""

from __future__ import annotations

import re
import shlex
from typing import Callable, Optional, Sequence

from nvdeploy.results import CommandResult, ErrorReason
from nvdeploy.transport.base import CommandSpec
from nvdeploy.transport.sudo_gate import SudoGate, SudoTicket

END_MARKER = b"__NVD_BATCH_END__"
BUSY_MARKER = b"__NVD_BUSY__"
_HEADER = re.compile(
    rb"__NVD_CMD (\d+) rc=(\d+|x|s\d+) out=(\d+)/(\d+) err=(\d+)/(\d+)__\n"
)
_SUDO = re.compile(rb"__NVD_SUDO__ rc=(\d+) err=(\d+)\n")
_BUSY = re.compile(rb"__NVD_BUSY__ ([^\n]*)\n")
# timeout(1) exits 124 when it had to stop the command and 137 when it had to kill it after the grace period.
TIMEOUT_RCS = (124, 137)
KILL_GRACE_S = 3
# The transports send one byte (HEARTBEAT) on the batch's stdin every HEARTBEAT_S seconds; a batch that hears
# nothing for HEARTBEAT_LOST_S ends itself as at EOF. This covers a connection that went silent without closing
# (a network partition: sshd would notice only after its ClientAlive or TCP keepalive, often hours).
HEARTBEAT = b"."
HEARTBEAT_S = 10.0
HEARTBEAT_LOST_S = 60
SUDO_CHECK_TIMEOUT_S = 20
DEFAULT_LOCK_DIR = "/tmp/nvdeploy.lock"
# What sudo says (LC_ALL=C) when it did not accept the password.
_REJECTED = (b"incorrect password", b"Sorry, try again", b"Authentication failure", b"authentication failure")
# What it says when the password was right but sudoers does not let the user run the command.
_POLICY = (b"is not in the sudoers file", b"is not allowed to execute", b"is not allowed to run sudo")

# Shell functions of the script. Names start with nvd_ so a tool's environment cannot collide with them.
_PRELUDE = r"""
nvd_sid=
nvd_pg=
IFS= read -r nvd_l 2>/dev/null </proc/$$/stat && { nvd_l=${nvd_l##*) }; set -- $nvd_l; nvd_pg=$3; nvd_sid=$4; set --; }
nvd_ours=
nvd_only_tools=
# Sweep only a session that is this batch's own: we lead it (local transport), or our parent does and is the
# login shell sshd started for this channel. Never a session we were merely started from.
if [ -n "$nvd_sid" ] && [ "$nvd_sid" = "$$" ]; then nvd_ours=1
elif [ -n "$nvd_sid" ] && [ "$nvd_sid" = "$PPID" ] && IFS= read -r nvd_l 2>/dev/null </proc/$PPID/stat; then
  nvd_l=${nvd_l##*) }; set -- $nvd_l; nvd_gp=$2; set --
  IFS= read -r nvd_c 2>/dev/null </proc/$nvd_gp/comm && case $nvd_c in sshd*) nvd_ours=1 ;; esac
fi
nvd_sweep() {
  # Sends $nvd_sig (0: just count) to every process of our session but the pids in $nvd_spare and, when
  # $nvd_only_tools is set, but our own process group (the shells and cappers; each tool runs under timeout(1),
  # which gives it a group of its own). nvd_n: how many were signalled.
  nvd_n=0
  [ -n "$nvd_ours" ] || return 0
  for nvd_p in /proc/[0-9]*; do
    nvd_p=${nvd_p#/proc/}
    case " $nvd_spare " in *" $nvd_p "*) continue ;; esac
    IFS= read -r nvd_l 2>/dev/null <"/proc/$nvd_p/stat" || continue
    nvd_l=${nvd_l##*) }
    set -- $nvd_l
    [ "$4" = "$nvd_sid" ] || continue
    case $1 in Z|X) continue ;; esac
    [ -n "$nvd_only_tools" ] && [ "$3" = "$nvd_pg" ] && continue
    kill -"$nvd_sig" "$nvd_p" 2>/dev/null && nvd_n=$((nvd_n + 1))
  done
}
nvd_end() {
  # Signal what is left of the session: TERM, up to the grace for it to go, then KILL.
  nvd_sig=TERM; nvd_sweep
  nvd_i=0
  while [ "$nvd_i" -lt {grace_ticks} ]; do
    nvd_sig=0; nvd_sweep; [ "$nvd_n" = 0 ] && return 0
    sleep 0.1 2>/dev/null || sleep 1; nvd_i=$((nvd_i + 1))
  done
  nvd_sig=KILL; nvd_sweep
}
nvd_head() { head -c "$2" >"$1"; wc -c >"$1.n"; }
nvd_tail() {
  rm -f "$1.f"
  if ! mkfifo "$1.f" 2>/dev/null; then  # no FIFO: keep the head instead, still with the true size
    head -c "$2" >"$1"; nvd_r=$(wc -c); nvd_size "$1"; echo $((nvd_v + nvd_r)) >"$1.t"; return
  fi
  wc -c <"$1.f" >"$1.t" &
  tee "$1.f" | tail -c "$2" >"$1"
  wait
}
nvd_size() { nvd_v=$(wc -c <"$1" 2>/dev/null) || nvd_v=0; nvd_v=$((nvd_v + 0)); }
nvd_count() { nvd_v=$(cat "$1" 2>/dev/null) || nvd_v=0; nvd_v=$((${nvd_v:-0} + 0)); }
"""

_WATCHER = r"""
exec 3<&0
(
  trap '' INT HUP PIPE
  {wait_for_end}
  IFS= read -r nvd_l </proc/self/stat; nvd_spare=${nvd_l%% *}
  nvd_end
  rm -rf "$d"; [ -n "$nvd_hf" ] && rm -f "$nvd_hf"
) <&3 3<&- >/dev/null 2>&1 &
nvd_w=$!
exec 3<&-
"""

_LOCK = r"""
nvd_ld=${NVDEPLOY_LOCK_DIR:-{default_lock}}
if command -v flock >/dev/null 2>&1; then
  mkdir -m 1777 "$nvd_ld" 2>/dev/null
  if [ -d "$nvd_ld" ] && [ ! -L "$nvd_ld" ] && command exec 9<"$nvd_ld"; then
    if flock -n 9; then
      for nvd_f in "$nvd_ld"/holder.*; do
        [ -d "/proc/${nvd_f##*.}" ] || rm -f "$nvd_f" 2>/dev/null
      done
      nvd_hf="$nvd_ld/holder.$$"
      printf 'user=%s run=%s since=%s pid=%s\n' "$(id -un 2>/dev/null || id -u)" {run_id} \
        "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$$" >"$nvd_hf" 2>/dev/null || nvd_hf=
    else
      nvd_info=
      for nvd_f in "$nvd_ld"/holder.*; do
        [ -d "/proc/${nvd_f##*.}" ] && IFS= read -r nvd_info 2>/dev/null <"$nvd_f" && break
      done
      printf '__NVD_BUSY__ %s\n' "${nvd_info:-holder unknown (no holder info in $nvd_ld)}"
      printf '{end}\n'
      exit 0
    fi
  fi
fi
"""


def _timeout(seconds: float) -> str:
    return f"timeout -k {KILL_GRACE_S} {max(1, int(round(seconds)))} "


def _command_line(spec: CommandSpec, sudo_password: bool) -> str:
    argv = list(spec.argv)
    prefix = ""
    if spec.sudo and sudo_password:
        # The password goes to sudo on a pipe, never in argv; the command itself gets /dev/null as stdin, so
        # it never sees the password even when sudo did not ask for it.
        argv = ["sudo", "-S", "-p", "", "--", "sh", "-c", 'exec "$@" </dev/null', "sh", *argv]
        prefix = "printf '%s\\n' \"$NVD_SUDO_PW\" | "
    elif spec.sudo:
        argv = ["sudo", "-n", "--", *argv]
    # The timeout is ours, the argv is quoted word by word: nothing from a node or an inventory reaches the
    # shell unquoted.
    return prefix + _timeout(spec.timeout_s) + shlex.join(argv)


def _launch(index: int, spec: CommandSpec, sudo_password: bool) -> str:
    cap = max(0, int(spec.max_bytes))
    keep = "nvd_tail" if spec.keep_tail else "nvd_head"
    f = f'"$d/{index}'
    # stdout -> fd 4 -> the stdout capper; stderr -> the stderr capper. The braces matter: a redirection after
    # "printf pw | sudo ..." would bind to sudo alone and replace the pipe that carries the password.
    return (
        f"( {{ {{ {{ {_command_line(spec, sudo_password)}; echo $? >{f}.r\"; }} 2>&1 1>&4 4>&- "
        f"| nvd_head {f}.e\" {cap} 4>&-; }} 4>&1 | {keep} {f}.o\" {cap}; }} </dev/null >/dev/null 2>&1 ) &\n"
        "nvd_p=\"$nvd_p $!\""
    )


def _not_run(index: int) -> str:
    """A sudo command skipped because the password check failed: its stderr is sudo's answer to that check."""
    f = f'"$d/{index}'
    return (f'echo "s$nvd_s" >{f}.r"; : >{f}.o"; echo 0 >{f}.o.n"; echo 0 >{f}.o.t"; '
            f'head -c 65536 "$d/s.e" >{f}.e" 2>/dev/null; echo 0 >{f}.e.n"')


def _frame(index: int, spec: CommandSpec) -> str:
    f = f'"$d/{index}'
    total = f"nvd_count {f}.o.t\"; ot=$nvd_v" if spec.keep_tail else f"nvd_count {f}.o.n\"; ot=$((o + nvd_v))"
    return (
        f'rc=$(cat {f}.r" 2>/dev/null) || rc=x; [ -n "$rc" ] || rc=x; '
        f'nvd_size {f}.o"; o=$nvd_v; {total}; nvd_size {f}.e"; e=$nvd_v; nvd_count {f}.e.n"; et=$((e + nvd_v)); '
        f"printf '__NVD_CMD {index} rc=%s out=%s/%s err=%s/%s__\\n' \"$rc\" \"$o\" \"$ot\" \"$e\" \"$et\"; "
        f'head -c "$o" {f}.o"; head -c "$e" {f}.e"'
    )


def build_script(commands: Sequence[CommandSpec], sudo_password: bool = False, run_id: str = "",
                 lock: bool = True, heartbeat_lost_s: Optional[float] = None) -> str:
    """The sh script that runs ``commands`` in parallel and prints framed results.

    With ``sudo_password`` the script first reads one line (the password) from its stdin into a shell
    variable; the caller sends it there, so it never appears in a command line or in the script text. The
    caller must keep stdin open (and send nothing more) until it has read the answer: EOF on stdin means the
    run ended, and the batch kills its processes. ``run_id`` is written next to the node lock (``lock``).
    With ``heartbeat_lost_s``, the caller also sends :data:`HEARTBEAT` every :data:`HEARTBEAT_S` seconds, and
    ``heartbeat_lost_s`` seconds of silence end the batch too.
    """
    lines = ["export LC_ALL=C LANG=C"]
    if sudo_password:
        lines.append("IFS= read -r NVD_SUDO_PW || NVD_SUDO_PW=")
    lines += [
        "command -v timeout >/dev/null 2>&1 || { echo 'nvdeploy: timeout(1) not found on node' >&2; exit 96; }",
        'd=$(mktemp -d "${TMPDIR:-/tmp}/nvd.XXXXXX") || exit 97',
        "nvd_hf=",
        "trap 'rm -rf \"$d\"; [ -n \"$nvd_hf\" ] && rm -f \"$nvd_hf\"' EXIT",
        _PRELUDE.replace("{grace_ticks}", str(KILL_GRACE_S * 10)).strip(),
    ]
    if lock:  # before anything runs: a refused batch starts nothing, and sends no password
        lines.append(_LOCK.replace("{default_lock}", DEFAULT_LOCK_DIR).replace("{run_id}", shlex.quote(run_id or "-"))
                     .replace("{end}", END_MARKER.decode()).strip())
    if heartbeat_lost_s:
        # head -c 1 reads one byte (GNU head reads no more than asked); empty: EOF, or silence for too long.
        wait_for_end = (f'while nvd_x=$(timeout {max(1, int(heartbeat_lost_s))} head -c 1 2>/dev/null) && '
                        '[ -n "$nvd_x" ]; do :; done')
    else:
        wait_for_end = "while IFS= read -r nvd_x; do :; done"
    lines.append(_WATCHER.replace("{wait_for_end}", wait_for_end).strip())
    gate = sudo_password and any(spec.sudo for spec in commands)
    if gate:
        # One password attempt per node: alone, before anything else that uses sudo.
        lines.append(
            "{ printf '%s\\n' \"$NVD_SUDO_PW\" | " + _timeout(SUDO_CHECK_TIMEOUT_S) + "sudo -S -p '' -- true; }"
            ' >"$d/s.o" 2>"$d/s.e" </dev/null; nvd_s=$?\n'
            "nvd_size \"$d/s.e\"; [ \"$nvd_v\" -gt 4096 ] && nvd_v=4096\n"
            "printf '__NVD_SUDO__ rc=%s err=%s\\n' \"$nvd_s\" \"$nvd_v\"; head -c \"$nvd_v\" \"$d/s.e\""
        )
    lines.append("nvd_p=")
    for index, spec in enumerate(commands):
        if gate and spec.sudo:
            lines.append(f'if [ "$nvd_s" = 0 ]; then\n{_launch(index, spec, sudo_password)}\n'
                         f"else {_not_run(index)}; fi")
        else:
            lines.append(_launch(index, spec, sudo_password))
    results = " ".join(f'"$d/{index}.r"' for index in range(len(commands)))
    lines += [
        # Wait for every tool to end (its exit status written), polling: the capper behind a tool can wait on
        # for EOF when the tool left a process holding its output. Then end whatever the tools left (outside
        # our own process group), so the cappers see EOF, and reap the rest.
        "nvd_t=0",
        "while :; do",
        f"  nvd_all=1; for nvd_r in {results}; do [ -s \"$nvd_r\" ] || {{ nvd_all=; break; }}; done",
        '  [ -n "$nvd_all" ] && break',
        '  nvd_all=1; for nvd_x in $nvd_p; do kill -0 "$nvd_x" 2>/dev/null && { nvd_all=; break; }; done',
        '  [ -n "$nvd_all" ] && break',
        '  if [ "$nvd_t" -lt 100 ]; then sleep 0.1 2>/dev/null || sleep 1; nvd_t=$((nvd_t + 1)); else sleep 1; fi',
        "done",
        # The watcher goes first: it must not take the end of its own heartbeat reader for the end of the run
        # and sweep us. From here on this shell finishes the clean-up itself.
        'kill "$nvd_w" 2>/dev/null',
        'nvd_only_tools=1; nvd_spare="$$ $PPID"; nvd_end; nvd_only_tools=',
        "[ -n \"$nvd_p\" ] && wait $nvd_p",
        # Then anything else left in the session. A closed channel must not kill us by SIGPIPE before the EXIT
        # trap removed the temp folder.
        "nvd_end; trap '' PIPE",
    ]
    for index, spec in enumerate(commands):
        lines.append(_frame(index, spec))
    lines.append(f"printf '{END_MARKER.decode()}\\n'")
    return "\n".join(lines) + "\n"


def sudo_outcome(raw: bytes) -> Optional[tuple[int, bytes]]:
    """The node's password check (exit status, sudo's stderr), once its early line has arrived; else None."""
    match = _SUDO.match(raw)  # printed before any frame, so a tool's output cannot fake it
    if match is None:
        return None
    length = int(match.group(2))
    err = raw[match.end() : match.end() + length]
    if len(err) < length:
        return None
    return int(match.group(1)), err


def password_rejected(rc: int, err: bytes) -> Optional[bool]:
    """True: sudo refused the password. False: it accepted it (rc 0, or a sudoers refusal, which sudo gives only
    after the password was checked). None: no answer about the password (timed out, sudo missing, anything else):
    the run's gate then lets the next node try, rather than send the password everywhere at once."""
    if rc == 0:
        return False
    if rc in TIMEOUT_RCS:
        return None
    if any(word in err for word in _REJECTED):
        return True
    if any(word in err for word in _POLICY):
        return False
    return None


def _sudo_detail(rc: int, err: bytes) -> str:
    if password_rejected(rc, err):
        return "sudo refused the password; no sudo command was run on this node (one password attempt per node)"
    if rc in TIMEOUT_RCS:
        return f"the sudo password check timed out after {SUDO_CHECK_TIMEOUT_S} s; sudo commands not run"
    first = _clean(err.decode("utf-8", "replace").strip().splitlines()[0]) if err.strip() else f"exit {rc}"
    return f"sudo failed ({first}); sudo commands not run"


def _clean(text: str, limit: int = 200) -> str:
    """Node-supplied text for a message: printable, one line, bounded."""
    return "".join(c if c.isprintable() else "?" for c in text)[:limit]


def busy_holder(raw: bytes) -> Optional[str]:
    """The holder the node named when another run's lock refused this batch; None when it was not refused."""
    match = _BUSY.match(raw)  # the first thing a refused batch prints, and the only one
    if match is None:
        return None
    info = match.group(1).decode("utf-8", "replace")
    fields = dict(part.split("=", 1) for part in info.split() if "=" in part)
    if {"user", "run", "since"} <= fields.keys():
        run = fields["run"] if fields["run"] != "-" else "(no run id)"
        return _clean(f"another nvdeploy run holds the node lock: run {run} of user {fields['user']} since "
                      f"{fields['since']} (pid {fields.get('pid', '?')})", 300)
    return _clean(f"another nvdeploy run holds the node lock: {info}", 300)


def parse_output(
    commands: Sequence[CommandSpec],
    raw: bytes,
    duration_s: float,
    batch_error: Optional[ErrorReason] = None,
    batch_detail: str = "",
) -> list[CommandResult]:
    """Split a batch's framed output back into one CommandResult per command.

    A command whose frame is missing (the batch was cut off, timed out or the connection dropped) gets an
    ERROR-carrying result with ``rc=None``; it is never mistaken for success. A batch refused by another run's
    node lock gives every command ERROR ``busy`` naming the holder.
    """
    holder = busy_holder(raw)
    if holder is not None:
        return [CommandResult(name=spec.name, command=spec.display, rc=None, duration_s=duration_s,
                              error=ErrorReason.BUSY, error_detail=holder) for spec in commands]
    results: dict[int, CommandResult] = {}
    sudo = _SUDO.match(raw)
    position = sudo.end() + int(sudo.group(2)) if sudo else 0
    while True:
        match = _HEADER.search(raw, position)
        if not match:
            break
        index = int(match.group(1))
        out_len, out_total = int(match.group(3)), int(match.group(4))
        err_len, err_total = int(match.group(5)), int(match.group(6))
        start = match.end()
        stdout = raw[start : start + out_len]
        stderr = raw[start + out_len : start + out_len + err_len]
        position = start + out_len + err_len
        if index >= len(commands):
            continue
        spec = commands[index]
        cut_off = len(stdout) < out_len or len(stderr) < err_len
        rc_text = match.group(2).decode()
        skipped = rc_text.startswith("s")
        rc = None if rc_text == "x" or skipped else int(rc_text)
        timed_out = rc in TIMEOUT_RCS
        error = None
        detail = ""
        if cut_off:
            error, detail = batch_error or ErrorReason.INCOMPLETE, batch_detail or "output cut off in transfer"
        elif skipped:
            error, detail = ErrorReason.SUDO, _sudo_detail(int(rc_text[1:]), stderr)
        elif rc is None:
            error, detail = ErrorReason.INCOMPLETE, "command left no exit status"
        elif timed_out:
            error, detail = ErrorReason.TIMEOUT, f"timed out after {spec.timeout_s:g} s"
        results[index] = CommandResult(
            name=spec.name,
            command=spec.display,
            rc=None if timed_out else rc,
            stdout=stdout,
            stderr=stderr,
            duration_s=duration_s,
            timed_out=timed_out,
            truncated=out_total > out_len or err_total > err_len,
            stdout_total=out_total,
            stderr_total=err_total,
            error=error,
            error_detail=detail,
        )
    complete = END_MARKER in raw[position:]
    out: list[CommandResult] = []
    for index, spec in enumerate(commands):
        if index in results:
            out.append(results[index])
            continue
        reason = batch_error or (ErrorReason.INCOMPLETE if not complete else ErrorReason.UNPARSEABLE)
        detail = batch_detail or "no result frame for this command (batch output cut off)"
        out.append(
            CommandResult(
                name=spec.name,
                command=spec.display,
                rc=None,
                duration_s=duration_s,
                timed_out=reason is ErrorReason.TIMEOUT,
                error=reason,
                error_detail=detail,
            )
        )
    return out


def not_sent(commands: Sequence[CommandSpec], reason: ErrorReason, detail: str) -> list[CommandResult]:
    """Results for commands the controller did not send (the run's sudo gate is closed, or the run stopped)."""
    return [CommandResult(name=spec.name, command=spec.display, rc=None, error=reason, error_detail=detail,
                          timed_out=reason is ErrorReason.TIMEOUT) for spec in commands]


Execute = Callable[[Sequence[CommandSpec], Optional[str], Callable[[bytes], None]], list[CommandResult]]


def run_gated(node: str, gate: Optional[SudoGate], commands: Sequence[CommandSpec], wait_s: float,
              stopped: Callable[[], bool], execute: Execute) -> list[CommandResult]:
    """Run ``commands`` through ``execute`` under the run's sudo gate; the transports' common ``run_batch`` part.

    ``execute(specs, password, on_output)`` runs one batch (``password`` None: none is sent, sudo runs with
    ``-n``) and calls ``on_output`` with the output read so far as it grows, and once at the end: the node's
    password check is reported to the gate as soon as it arrives, so nodes waiting on it go on at once. When the
    gate is closed (the password was rejected on another node) the sudo commands are not sent at all.
    """
    ticket = SudoTicket(None)
    if gate is not None and any(spec.sudo for spec in commands):
        ticket = gate.claim(node, wait_s, stopped)
    held = {i for i, spec in enumerate(commands) if spec.sudo and ticket.reason is not None}
    send = [spec for i, spec in enumerate(commands) if i not in held]
    reported = ticket.password is None

    def on_output(raw: bytes) -> None:
        nonlocal reported
        if reported or gate is None:
            return
        outcome = sudo_outcome(raw)
        if outcome is not None:
            reported = True
            gate.report(node, password_rejected(*outcome))

    try:
        ran = iter(execute(send, ticket.password, on_output) if send else [])
    finally:
        if not reported and gate is not None:
            gate.release(node)  # the batch ended without an answer about the password: another node may try
    out = []
    for i, spec in enumerate(commands):
        if i in held:
            out += not_sent([spec], ticket.reason or ErrorReason.SUDO, ticket.detail)
        else:
            out.append(next(ran))
    return out
