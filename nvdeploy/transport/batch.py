"""One round trip for many commands: a script that runs them side by side on the node, then frames the outputs.

The node runs one of two batches that behave alike and print the same lines, so the controller cannot tell them
apart: on a node with a system Python (``/usr/bin/python3``, or RHEL 8's ``platform-python``), the Python batch
(``batch_runner.py``, sent in the script and run with ``-I -S``: one process for the whole batch); on a node
without one, the shell batch (``batch.sh``: POSIX sh, shipped as package data and checked by shellcheck). This
module writes the script: the commands once (as its positional parameters, read by either batch), the Python
batch's start, and the shell batch with its settings, commands, waits and frames. A Python too old for the Python
batch (< 3.6) or one that does not start leaves it to the shell batch; one that fails once it began does not (the
commands would run twice): the batch then has no end marker, and every command is ERROR.

Each command runs under ``timeout -k`` (so a hung tool is killed on the node, not left behind), with
``LC_ALL=C`` and stdin from /dev/null. Outputs are sent back length-prefixed, so arbitrary bytes (NUL, invalid
UTF-8, a fake sentinel printed by the tool) cannot break the framing. The script ends with an end marker: a batch
whose marker is missing was cut off.

The run's lifetime on the node:

- **Nothing outlives the batch.** The script's stdin is the SSH channel (or the local transport's pipe), and the
  controller keeps it open, sending nothing but the heartbeat, until it has read the whole answer. A watcher (the
  Python batch's poll loop; the shell batch's subshell with a ``read`` loop) sees EOF, which happens whatever ends
  the work early: the controller closes the channel (command timeout, ``--deadline``, Ctrl-C, SIGTERM), the
  controller dies (the kernel closes its socket), or the connection drops (sshd closes the pipe). It then signals
  every process of the batch's session (TERM, then KILL after a grace) and removes what the batch made. The
  session, not a process group: sshd (and the local transport) start the command in a session of its own, and
  ``timeout(1)`` moves each tool into a process group of its own, so a group kill would miss the tools. The
  session's processes are found from /proc, no procps needed: the Python batch asks ``getsid(2)`` of each pid; the
  shell batch runs ONE ``grep`` over /proc/*/stat (field 6, the session; each hit checked again after the comm's
  last ``)``). When every command is done, the batch signals what is left of its session outside its own process
  group (a tool's stray background child) the same way before it answers. Limits: a process that starts a session
  of its own (a daemon) escapes; root processes under ``sudo`` get the TERM through sudo (which relays it) but not
  a KILL.
- **Output is capped on the node as it is written**: at most CAP bytes of each stream are kept (the head, or for
  ``keep_tail`` specs the tail), and the rest is drained and counted, so the true size is known and the tool is
  never cut short by a closed pipe. The Python batch reads every command's pipes in one ``poll`` loop and keeps
  what it keeps in memory (at most the caps: a flooding tool costs the node no disk). The shell batch sends each
  stream through a FIFO in a private temp folder to its shell cappers: ``head -c CAP`` (GNU head never reads
  past CAP) then ``wc -c`` for the rest, or ``dd`` (which passes everything on and reports the true size) to
  ``tail -c CAP``; a flooding tool cannot fill the node's /tmp.
- **One run per node at a time**: the batch takes ``flock`` (non-blocking) on a folder: ``$NVDEPLOY_LOCK_DIR``,
  else ``/run/lock/nvdeploy`` (or ``/var/lock``'s) when it is there for this user (root's, or a group folder an
  admin made) or root may make it, else ``$XDG_RUNTIME_DIR/nvdeploy``; every folder on the path is checked (owner,
  mode, no links) before it is used. The holder info (user, run id, start time, pid) goes to a ``holder.<pid>.*``
  file made with O_EXCL inside it, written as one line. A batch that cannot take the lock prints
  ``__NVD_BUSY__`` with the live holder's info (re-read for up to 2 s while the holder's file has no whole line
  yet: it is being written) and runs nothing. flock releases with the last process holding it (fd 9, inherited
  by the tools), so a lock whose holder is gone is simply taken; a tool that outlived its batch still holds it,
  and the node stays busy. The batch releases it (and removes its holder info and temp folder) before it prints
  the end marker: the controller may send the node its next batch the moment that marker arrives. The shell batch
  without flock(1) (util-linux) runs unlocked.
- **The controller knows how far the node got** (what it waits for, see :mod:`nvdeploy.transport.batch_budget`):
  the batch prints ``__NVD_STARTED__`` once every command has been started (after the lock and the password
  check) and ``__NVD_RAN__`` once every command has ended, before the frames; the controller's time for each
  stage counts from the line that began it, not from when the batch was sent (a loaded node's shell may start
  seconds late, and the node's own ``timeout`` must be what stops a hung command). Both lines come before any
  tool output, which is sent only inside frames at the end, so no tool can fake them.
- **sudo: one password attempt per node.** With a password, the batch first runs ``sudo -S -p '' -- true``
  alone and prints its outcome early (``__NVD_SUDO__``, so the controller's sudo gate can let the other nodes
  go on). Only when it succeeded do the sudo commands start; otherwise they are reported ``rc=s<N>`` (not run)
  and the non-sudo commands run as usual. The password reaches sudo on its stdin (a pipe), never in argv or in an
  environment.

The cost on the node: every process the wrapper adds is a fork and, for a tool, an exec with its dynamic loading,
on every node of the fleet. Per command, both batches run ``timeout`` (the per-command limit; it also gives the
tool the process group the stray sweep relies on) and the tool itself. Per batch, the Python batch adds itself
(~8 ms of CPU to start and ~3 ms to compile the ~13 KB it is sent as, without docstrings and comments) and
nothing else: the lock, the holder info, the heartbeat's clock, the sweep, the frames are its own work, with no
temp folder. The shell batch adds, per stream, a subshell that runs ``head -c CAP`` and then becomes (``exec``)
the ``wc -c`` that drains and counts the rest (for ``keep_tail``, a ``dd`` and a ``tail``), and per batch
``mktemp``, ``ls`` for the folder checks, ``mkfifo``, ``flock``, ``date``, the watcher subshell (with a heartbeat,
a clock subshell and its ``sleep``: a POSIX ``read`` has no timeout), the sweep's ``grep``, one ``wc -c``, one
``cat`` that sends every frame and the ``rm`` of the temp folder. Measured in bench/bench_batch.py and
bench/bench_validate.py (bench/README.md).
"""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path
from typing import Callable, Optional, Sequence

from nvdeploy.results import CommandResult, ErrorReason
from nvdeploy.transport.base import CommandSpec
from nvdeploy.transport.node_paths import SAFE_DIR_SH, SYSTEM_PYTHONS, UNSAFE_MARKER
from nvdeploy.transport.sudo_gate import SudoGate, SudoTicket

END_MARKER = b"__NVD_BATCH_END__"
BUSY_MARKER = b"__NVD_BUSY__"
# Printed when every command has been started, and when every command has ended (before the frames).
STARTED_MARKER = b"__NVD_STARTED__"
RAN_MARKER = b"__NVD_RAN__"
# How far a batch got, from those lines (see stage_of).
NOT_STARTED, STARTED, RAN = 0, 1, 2
_HEADER = re.compile(
    rb"__NVD_CMD (\d+) rc=(\d+|x|s\d+) out=(\d+)/(\d+) err=(\d+)/(\d+)__\n"
)
_SUDO = re.compile(rb"__NVD_SUDO__ rc=(\d+) err=(\d+)\n")
_BUSY = re.compile(rb"__NVD_BUSY__ ([^\n]*)\n")
_UNSAFE = re.compile(UNSAFE_MARKER.encode() + rb" ([^\n]*)\n")
# The folder check's words (node_paths.py, batch_runner.py) for a folder another user made.
_PLANTED = re.compile(r"^run lock folder: (/\S*) is owned by another user \(owner (\S+), uid")
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
# Where the run lock goes by default: the first of these that is a real folder, in its ``nvdeploy`` folder.
LOCK_BASES = ("/run/lock", "/var/lock")
# Root's lock when no root-made ``nvdeploy`` folder is in the system lock folder: ``/run`` is root's (0755), so nobody
# else can make this name before root's first run after boot, as anyone can in ``/run/lock`` (1777).
ROOT_LOCK_DIR = "/run/nvdeploy"
# What sudo says (LC_ALL=C) when it did not accept the password.
_REJECTED = (b"incorrect password", b"Sorry, try again", b"Authentication failure", b"authentication failure")
# What it says when the password was right but sudoers does not let the user run the command.
_POLICY = (b"is not in the sudoers file", b"is not allowed to execute", b"is not allowed to run sudo")
_PW_END = "NVD_PW_END"  # the here-document delimiter that carries the sudo password

# The fixed part of the node-side script, shipped as package data and checked by shellcheck (batch.sh): its
# "# @part NAME" sections, in file order. Names in it start with nvd_ so a tool's environment cannot collide.
_SCRIPT_PATH = Path(__file__).with_name("batch.sh")
# The node-side Python batch (batch_runner.py) as the script carries it: its code, without the module docstring.
def _compact(source: str) -> str:
    """Python source without its docstrings and comments, indented by one space a level: it travels in every batch's
    script (see MAX_SCRIPT_BYTES) and the node compiles it each time, a cost that grows with its size."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
    lines = ast.unparse(tree).splitlines()  # no string spans lines: unparse writes each with escapes
    return "\n".join(" " * ((len(line) - len(line.lstrip(" "))) // 4) + line.lstrip(" ") for line in lines) + "\n"


RUNNER_CODE = _compact(Path(__file__).with_name("batch_runner.py").read_text(encoding="utf-8"))
# The runner's exit statuses the script acts on: 0 ran; 90 and up (or a signal) failed once it had begun, so the
# shell batch must not run the commands again; anything else, it did nothing (too old a Python, or one that does not
# start) and the shell batch runs.
RUNNER_FAILED = 90
# The script travels as one argument of the node's login shell (``sh -c SCRIPT`` in the SSH exec request), which
# Linux holds to 128 KiB (MAX_ARG_STRLEN): a batch whose script with the Python batch would not fit below this is
# sent with the shell batch alone.
MAX_SCRIPT_BYTES = 124 * 1024


def _script_parts(text: str) -> dict[str, str]:
    parts: dict[str, list[str]] = {}
    current: Optional[list[str]] = None
    for line in text.splitlines():
        if line.startswith("# @part "):
            current = parts.setdefault(line[len("# @part "):].strip(), [])
        elif current is not None:
            current.append(line)
    return {name: "\n".join(body).strip("\n") for name, body in parts.items()}


_PARTS = _script_parts(_SCRIPT_PATH.read_text(encoding="utf-8"))


def _timeout(seconds: float) -> str:
    return f"timeout -k {KILL_GRACE_S} {max(1, int(round(seconds)))} "


def _argv(spec: CommandSpec, sudo_password: bool) -> list[str]:
    """The command's argv under its timeout, with its sudo; the password (when sent) goes to sudo's stdin, never in
    argv, and the command itself gets /dev/null as stdin, so it never sees the password even when sudo did not ask."""
    argv = list(spec.argv)
    if spec.sudo and sudo_password:
        argv = ["sudo", "-S", "-p", "", "--", "sh", "-c", 'exec "$@" </dev/null', "sh", *argv]
    elif spec.sudo:
        argv = ["sudo", "-n", "--", *argv]
    return _timeout(spec.timeout_s).split() + argv


def _command_words(commands: Sequence[CommandSpec], sudo_password: bool, gate: bool) -> tuple[list[str], list[int]]:
    """The commands as the script's positional parameters, read by both batches: their count, then per command
    its cap, flags (``t`` stdout keeps its tail, ``p`` the password on its stdin, ``g`` only when the sudo check
    passed; ``-`` none), argv count and argv. Also where each argv starts in them (1-based, as ``$N``)."""
    words = [str(len(commands))]
    starts = []
    for spec in commands:
        flags = ("t" if spec.keep_tail else "") + ("p" if spec.sudo and sudo_password else "") + \
            ("g" if gate and spec.sudo else "")
        argv = _argv(spec, sudo_password)
        words += [str(max(0, int(spec.max_bytes))), flags or "-", str(len(argv))]
        starts.append(len(words) + 1)
        words += argv
    return words, starts


def _runner_line(sudo_password: bool, run_id: str, lock: bool, period: int, gate: bool) -> str:
    """The script's start of batch_runner.py on a system Python: its settings, then the commands ("$@")."""
    check = (_timeout(SUDO_CHECK_TIMEOUT_S).split() + ["sudo", "-S", "-p", "", "--", "true"]) if gate else []
    words = [str(KILL_GRACE_S * 10), str(period), run_id or "-", "1" if lock else "", " ".join(LOCK_BASES),
             ROOT_LOCK_DIR, "1" if sudo_password else "", str(len(check)), *check]
    return (f"for nvd_x in {' '.join(SYSTEM_PYTHONS)}; do\n"
            '  [ -x "$nvd_x" ] || continue\n'
            f'  "$nvd_x" -I -S -c {shlex.quote(RUNNER_CODE)} "$nvd_ours" "$PPID" {shlex.join(words)} "$@"\n'
            f'  nvd_x=$?; {{ [ "$nvd_x" = 0 ] || [ "$nvd_x" -ge {RUNNER_FAILED} ]; }} && exit "$nvd_x"; break\n'
            "done")


def _fifos(index: int, spec: CommandSpec) -> list[str]:
    return [f"{index}.po", f"{index}.pe"] + ([f"{index}.pt"] if spec.keep_tail else [])


def _cap_words(index: int, spec: CommandSpec) -> str:
    """The command's cap as the cappers take it: INDEX CAP, then t when stdout keeps its tail."""
    return f"{index} {max(0, int(spec.max_bytes))}" + (" t" if spec.keep_tail else "")


def _launch(index: int, spec: CommandSpec, sudo_password: bool, start: int) -> str:
    """The command as one background job (timeout execs in the forked shell: no subshell) whose pid is kept for
    ``wait``: its argv is the script's positional parameters from ``start`` on, each quoted as one word, so nothing
    from a node or an inventory reaches the shell as code. Its stdout and stderr are fds 5 and 6, its FIFOs as
    ``nvd_cap`` opened them; the shell closes them once the command has them."""
    command = " ".join(f'"${{{k}}}"' for k in range(start, start + len(_argv(spec, sudo_password))))
    here = spec.sudo and sudo_password
    # The password goes to sudo as a here-document (a pipe the shell fills), which follows the line that opens it;
    # a later </dev/null would replace it.
    stdin, body = (f" <<{_PW_END}", f"\n$NVD_SUDO_PW\n{_PW_END}") if here else (" </dev/null", "")
    return (f"nvd_cap {_cap_words(index, spec)}\n"
            f"{command}{stdin} >&5 2>&6 5>&- 6>&- & nvd_p{index}=$!{body}\n"
            "exec 5>&- 6>&-")


def _wait(index: int) -> str:
    return f'wait "$nvd_p{index}"; nvd_r{index}=$?'


def _not_run(index: int) -> str:
    """A sudo command skipped because the password check failed: its stderr is sudo's answer to that check."""
    f = f'"$d/{index}'
    return f'nvd_r{index}="s$nvd_s"; : >{f}.o"; head -c 65536 "$d/s.e" >{f}.e" 2>/dev/null'


def build_script(commands: Sequence[CommandSpec], sudo_password: bool = False, run_id: str = "",
                 lock: bool = True, heartbeat_lost_s: Optional[float] = None,
                 python_runner: bool = True) -> str:
    """The sh script that runs ``commands`` in parallel and prints framed results.

    With ``sudo_password`` the batch first reads one line (the password) from its stdin; the caller sends it
    there, so it never appears in a command line or in the script text. The caller must keep stdin open (and send
    nothing more) until it has read the answer: EOF on stdin means the run ended, and the batch kills its
    processes. ``run_id`` is written next to the node lock (``lock``). With ``heartbeat_lost_s``, the caller also
    sends :data:`HEARTBEAT` every :data:`HEARTBEAT_S` seconds, and at most ``heartbeat_lost_s`` seconds of silence
    (at least half of it) end the batch too. With ``python_runner`` (the default), a node with a system Python
    (:data:`SYSTEM_PYTHONS`) runs the batch in one Python process (batch_runner.py); otherwise, and without it, the
    shell batch (batch.sh) does, with two shell cappers per stream; so does a batch whose script would not fit
    in :data:`MAX_SCRIPT_BYTES` with the Python batch.
    """
    if python_runner and commands:
        with_runner = _assemble(commands, sudo_password, run_id, lock, heartbeat_lost_s, True)
        if len(with_runner.encode()) <= MAX_SCRIPT_BYTES:
            return with_runner
    return _assemble(commands, sudo_password, run_id, lock, heartbeat_lost_s, False)


def _assemble(commands: Sequence[CommandSpec], sudo_password: bool, run_id: str, lock: bool,
              heartbeat_lost_s: Optional[float], python_runner: bool) -> str:
    period = max(1, int(heartbeat_lost_s) // 2) if heartbeat_lost_s else 0
    gate = sudo_password and any(spec.sudo for spec in commands)
    words, starts = _command_words(commands, sudo_password, bool(gate))
    lines = [
        "export LC_ALL=C LANG=C",
        _PARTS["isolate"],
        "command -v timeout >/dev/null 2>&1 || { echo 'nvdeploy: timeout(1) not found on node' >&2; exit 96; }",
        # The commands, once, for whichever batch runs them: the script travels as one argument of the login
        # shell, which Linux holds to 128 KiB (MAX_ARG_STRLEN), and the NVML probe alone is ~75 KB of it.
        "set -- " + shlex.join(words),
        _PARTS["session"],
    ]
    if python_runner:  # the Python batch first; the shell batch runs only when it did not
        lines.append(_runner_line(sudo_password, run_id, lock, period, bool(gate)))
    if sudo_password:
        lines.append("IFS= read -r NVD_SUDO_PW || NVD_SUDO_PW=")
    lines += [
        SAFE_DIR_SH.strip(),
        # A refused batch names the folder and runs nothing (and sends no password anywhere).
        f"nvd_refuse() {{ printf '{UNSAFE_MARKER} %s: %s\\n' \"$1\" \"$nvd_unsafe\"; "
        f"printf '{END_MARKER.decode()}\\n'; exit 0; }}",
        'nvd_t=${TMPDIR:-/tmp}; [ "$nvd_t" = / ] || nvd_t=${nvd_t%/}',
        'nvd_safe "$nvd_t" || nvd_refuse "temp folder parent"',
        'd=$(mktemp -d "$nvd_t/nvd.XXXXXX") || exit 97',
        "nvd_hf=",
        "trap 'rm -rf \"$d\" ${nvd_hf:+\"$nvd_hf\"}' EXIT",
        # batch.sh's settings (its header lists them): plain words, quoted all the same
        f"nvd_grace_ticks={KILL_GRACE_S * 10} nvd_period={period} nvd_endm={shlex.quote(END_MARKER.decode())} "
        f"nvd_run={shlex.quote(run_id or '-')} nvd_lock_bases={shlex.quote(' '.join(LOCK_BASES))} "
        f"nvd_root_lock={shlex.quote(ROOT_LOCK_DIR)}",
        _PARTS["prelude"],
    ]
    if lock:  # before anything runs: a refused batch starts nothing, and sends no password
        lines.append(_PARTS["lock"])
    lines.append(_PARTS["watcher"])
    if gate:
        # One password attempt per node: alone, before anything else that uses sudo.
        lines.append(
            _timeout(SUDO_CHECK_TIMEOUT_S) + f"sudo -S -p '' -- true <<{_PW_END}"
            ' >"$d/s.o" 2>"$d/s.e"\n'
            f"$NVD_SUDO_PW\n{_PW_END}\n"
            "nvd_s=$?\n"
            'nvd_v=$(wc -c <"$d/s.e" 2>/dev/null) || nvd_v=0; nvd_v=$((nvd_v + 0))\n'
            '[ "$nvd_v" -gt 4096 ] && nvd_v=4096\n'
            "printf '__NVD_SUDO__ rc=%s err=%s\\n' \"$nvd_s\" \"$nvd_v\"; head -c \"$nvd_v\" \"$d/s.e\""
        )
    fifos = " ".join(name for index, spec in enumerate(commands) for name in _fifos(index, spec))
    lines.append("nvd_c=")
    if fifos:
        lines.append(f'(cd "$d" && exec mkfifo {fifos}) || '
                     '{ echo "nvdeploy: cannot make FIFOs in $d" >&2; exit 97; }')
    skipped = set()
    for index, spec in enumerate(commands):
        if gate and spec.sudo:
            skipped.add(index)
            lines.append(f'if [ "$nvd_s" = 0 ]; then\n{_launch(index, spec, sudo_password, starts[index])}\n'
                         f"else {_not_run(index)}; fi")
        else:
            lines.append(_launch(index, spec, sudo_password, starts[index]))
    # Every command's own timeout is running now: the controller counts the commands' limit from this line.
    lines.append(f"printf '{STARTED_MARKER.decode()}\\n'")
    for index in range(len(commands)):
        if index in skipped:
            lines.append(f'[ "$nvd_s" = 0 ] && {{ {_wait(index)}; }}')
        else:
            lines.append(_wait(index))
    # From here on only the sweep, the frames and their transfer are left: the controller gives them their own time.
    lines.append(f"printf '{RAN_MARKER.decode()}\\n'")
    kept = " ".join(f"{index}.o {index}.e" for index in range(len(commands)))
    frames = " ".join(f"{index}.h {index}.o {index}.e" for index in range(len(commands)))
    lines += [
        # Every command has ended (timeout(1) returned). End what the tools left (outside our own process group),
        # so the cappers see EOF, then wait for the cappers. The watcher stays up until then: if a capper still
        # hangs (a stray that cannot be killed holds its FIFO), the controller's EOF still ends the batch.
        'nvd_only_tools=1; nvd_spare="$$ $PPID"; nvd_end; nvd_only_tools=',
        '[ -z "$nvd_c" ] || wait $nvd_c',
        # Then the watcher (it stops its clock before it goes). A closed channel must not kill us by SIGPIPE
        # before the EXIT trap removed the temp folder.
        'kill "$nvd_w" 2>/dev/null; wait "$nvd_w"; trap \'\' PIPE',
    ]
    if commands:
        lines.append(f'set -- $(cd "$d" && exec wc -c {kept} 2>/dev/null)')
        lines.append('while [ $# -ge 2 ]; do case $2 in [0-9]*.[oe]) eval "nvd_k_${2%.*}_${2#*.}=\\$1" ;; esac; '
                     "shift 2; done")
        for index, spec in enumerate(commands):
            lines.append(f'nvd_fr {index} "$nvd_r{index}"' + (" t" if spec.keep_tail else ""))
        lines.append(f'(cd "$d" && exec cat {frames})')
    # The end marker tells the controller it may send this node its next batch at once: the lock must be free by
    # then (closed here; the watcher and its clock never held it), and the holder info and temp folder gone.
    lines.append('rm -rf "$d" ${nvd_hf:+"$nvd_hf"}; trap - EXIT; exec 9<&-')
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


def _after_sudo(raw: bytes) -> Optional[int]:
    """Where the output after the password check's early line starts (0 without one); None while it is cut."""
    sudo = _SUDO.match(raw)
    if sudo is None:
        return 0
    end = sudo.end() + int(sudo.group(2))
    return end if len(raw) >= end else None


def stage_of(raw: bytes) -> int:
    """How far the batch whose output starts with ``raw`` got: NOT_STARTED, STARTED (every command started) or RAN
    (every command ended). Read only where those lines can be: after the password check's line, before any frame.
    """
    position = _after_sudo(raw)
    if position is None or not raw.startswith(STARTED_MARKER + b"\n", position):
        return NOT_STARTED
    position += len(STARTED_MARKER) + 1
    return RAN if raw.startswith(RAN_MARKER + b"\n", position) else STARTED


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


def unsafe_folder(raw: bytes) -> Optional[str]:
    """What the node named when it refused the batch because a folder it would use is not safe; else None."""
    match = _UNSAFE.match(raw)  # the first thing such a batch prints, and the only one
    if match is None:
        return None
    text = match.group(1).decode("utf-8", "replace")
    planted = _PLANTED.search(text)
    if planted is not None:
        # Not nvdeploy's doing and not the node's health: someone made a folder nvdeploy must use. Say who, and
        # how to clear it.
        text += (f"; made by {planted.group(2)}, not by nvdeploy: once checked, remove it as root "
                 f"(rm -rf -- {shlex.quote(planted.group(1))}) or set NVDEPLOY_LOCK_DIR")
    return _clean("node folder not safe to use, nothing run: " + text, 600)


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
    node lock gives every command ERROR ``busy`` naming the holder; one refused for an unsafe node folder (see
    :mod:`nvdeploy.transport.node_paths`), ERROR ``lock`` naming the folder, its owner and mode.
    """
    holder = busy_holder(raw)
    if holder is not None:
        return [CommandResult(name=spec.name, command=spec.display, rc=None, duration_s=duration_s,
                              error=ErrorReason.BUSY, error_detail=holder) for spec in commands]
    unsafe = unsafe_folder(raw)
    if unsafe is not None:
        return [CommandResult(name=spec.name, command=spec.display, rc=None, duration_s=duration_s,
                              error=ErrorReason.LOCK, error_detail=unsafe) for spec in commands]
    results: dict[int, CommandResult] = {}
    sudo = _SUDO.match(raw)
    position = sudo.end() + int(sudo.group(2)) if sudo else 0
    for marker in (STARTED_MARKER, RAN_MARKER):  # how far the node got: for the controller's clock, not results
        if raw.startswith(marker + b"\n", position):
            position += len(marker) + 1
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
