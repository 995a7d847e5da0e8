"""One round trip for many commands: a POSIX sh script that runs them side by side, then frames the outputs.

Each command runs under ``timeout -k`` (so a hung tool is killed on the node, not left behind), with
``LC_ALL=C`` and stdin from /dev/null. Outputs are written to a private temp dir and sent back length-prefixed,
so arbitrary bytes (NUL, invalid UTF-8, a fake sentinel printed by the tool) cannot break the framing. The
script ends with an end marker: a batch whose marker is missing was cut off.
"""

from __future__ import annotations

import re
import shlex
from typing import Optional, Sequence

from nvdeploy.results import CommandResult, ErrorReason
from nvdeploy.transport.base import CommandSpec

END_MARKER = b"__NVD_BATCH_END__"
_HEADER = re.compile(
    rb"__NVD_CMD (\d+) rc=(\d+|x) out=(\d+)/(\d+) err=(\d+)/(\d+)__\n"
)
# timeout(1) exits 124 when it had to stop the command and 137 when it had to kill it after the grace period.
TIMEOUT_RCS = (124, 137)
KILL_GRACE_S = 3


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
    return prefix + f"timeout -k {KILL_GRACE_S} {max(1, int(round(spec.timeout_s)))} " + shlex.join(argv)


def build_script(commands: Sequence[CommandSpec], sudo_password: bool = False) -> str:
    """The sh script that runs ``commands`` in parallel and prints framed results.

    With ``sudo_password`` the script first reads one line (the password) from its stdin into a shell
    variable; the caller sends it there, so it never appears in a command line or in the script text.
    """
    lines = [
        "export LC_ALL=C LANG=C",
        "command -v timeout >/dev/null 2>&1 || { echo 'nvdeploy: timeout(1) not found on node' >&2; exit 96; }",
        'd=$(mktemp -d "${TMPDIR:-/tmp}/nvd.XXXXXX") || exit 97',
        "trap 'rm -rf \"$d\"' EXIT",
    ]
    if sudo_password:
        lines.insert(0, "IFS= read -r NVD_SUDO_PW || NVD_SUDO_PW=")
    for index, spec in enumerate(commands):
        lines.append(
            # The braces matter: a redirection after "printf pw | sudo ..." would bind to sudo alone and
            # replace the pipe that carries the password with /dev/null.
            f'( {{ {_command_line(spec, sudo_password)}; }} >"$d/{index}.o" 2>"$d/{index}.e" </dev/null; '
            f'echo $? >"$d/{index}.r" ) &'
        )
    lines.append("wait")
    for index, spec in enumerate(commands):
        cap = int(spec.max_bytes)
        lines.append(
            f'rc=$(cat "$d/{index}.r" 2>/dev/null || echo x); '
            f'o=$(wc -c <"$d/{index}.o"); e=$(wc -c <"$d/{index}.e"); '
            f'os=$o; [ "$os" -gt {cap} ] && os={cap}; es=$e; [ "$es" -gt {cap} ] && es={cap}; '
            f"printf '__NVD_CMD {index} rc=%s out=%s/%s err=%s/%s__\\n' \"$rc\" \"$os\" \"$o\" \"$es\" \"$e\"; "
            f'head -c "$os" "$d/{index}.o"; head -c "$es" "$d/{index}.e"'
        )
    lines.append(f"printf '{END_MARKER.decode()}\\n'")
    return "\n".join(lines) + "\n"


def parse_output(
    commands: Sequence[CommandSpec],
    raw: bytes,
    duration_s: float,
    batch_error: Optional[ErrorReason] = None,
    batch_detail: str = "",
) -> list[CommandResult]:
    """Split a batch's framed output back into one CommandResult per command.

    A command whose frame is missing (the batch was cut off, timed out or the connection dropped) gets an
    ERROR-carrying result with ``rc=None``; it is never mistaken for success.
    """
    results: dict[int, CommandResult] = {}
    position = 0
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
        rc = None if rc_text == "x" else int(rc_text)
        timed_out = rc in TIMEOUT_RCS
        error = None
        detail = ""
        if cut_off:
            error, detail = batch_error or ErrorReason.INCOMPLETE, batch_detail or "output cut off in transfer"
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
