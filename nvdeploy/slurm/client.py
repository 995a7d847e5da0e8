"""The Slurm commands nvdeploy runs, each under a timeout, each an argv (never a shell string).

Slurm's client commands block for ~10 s retrying when slurmctld is down (and minutes with an unresolvable
controller name), so every call is bounded; what Slurm printed on stderr is kept verbatim in :class:`SlurmError`
because it is the message an operator knows (``Unable to contact slurm controller (connect failure)``).
Reasons and other values from node output go in as ONE argv word each: quotes and ``$(...)`` stay text.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from nvdeploy.slurm.nodes import SlurmNode, SlurmParseError, parse_json, parse_text

DEFAULT_TIMEOUT_S = 30.0


class SlurmError(Exception):
    """A Slurm command failed or timed out; ``message`` is Slurm's own words where it printed any."""

    def __init__(self, command: Sequence[str], message: str, rc: Optional[int] = None) -> None:
        self.command = tuple(command)
        self.message = message
        self.rc = rc
        super().__init__(f"{shlex.join(self.command)}: {message}")


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str


Runner = Callable[[Sequence[str], float], Completed]


def run_command(argv: Sequence[str], timeout_s: float) -> Completed:
    """Run one Slurm command; a timeout or a missing binary is a SlurmError, a non-zero exit is data."""
    try:
        done = subprocess.run(list(argv), stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout_s,
                              env=os.environ.copy(), start_new_session=True)
    except FileNotFoundError:
        raise SlurmError(argv, f"{argv[0]} not found: is the Slurm client installed and on PATH?") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(argv, f"no answer within {timeout_s:g} s (is slurmctld up and reachable?)") from None
    return Completed(tuple(argv), done.returncode, done.stdout.decode("utf-8", "replace"),
                     done.stderr.decode("utf-8", "replace"))


def _message(done: Completed) -> str:
    text = (done.stderr.strip() or done.stdout.strip() or f"exit status {done.rc}").splitlines()
    # The last line is Slurm's conclusion; earlier ones are retries of the same connect.
    return " / ".join(dict.fromkeys(line.strip() for line in text if line.strip()))[-600:]


@dataclass
class SlurmClient:
    """sinfo / scontrol / squeue / scancel with timeouts. ``runner`` is replaceable for unit tests."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    runner: Runner = field(default=run_command)
    dry_run: bool = False
    printed: list[str] = field(default_factory=list)

    def _run(self, argv: Sequence[str], check: bool = True) -> Completed:
        done = self.runner(argv, self.timeout_s)
        if check and done.rc != 0:
            raise SlurmError(argv, _message(done), done.rc)
        return done

    def _change(self, argv: Sequence[str]) -> Optional[Completed]:
        """A command that changes the scheduler's state: printed, not run, under --dry-run."""
        if self.dry_run:
            self.printed.append(shlex.join(argv))
            return None
        return self._run(argv)

    # ---- reading ----
    def nodes(self, names: Optional[str] = None) -> list[SlurmNode]:
        """Every node (or those of the hostlist ``names``): JSON where this Slurm has it, text otherwise."""
        argv = ["sinfo", "--json"] + (["-n", names] if names else [])
        done = self._run(argv, check=False)
        if done.rc == 0:
            try:
                return parse_json(done.stdout)
            except SlurmParseError:
                # Slurm 23.02+: sinfo's JSON groups nodes, scontrol's JSON has the node list. Or slurmctld is down
                # (22.05 then exits 0 with "Unspecified error"): the text command below says it in Slurm's words.
                pass
            has_list = '"nodes"' in done.stdout  # 22.05's shape (then an error above is slurmctld's)
            json_argv = ["scontrol", "--json", "show", "node"] + ([names] if names else [])
            done23 = None if has_list else self._run(json_argv, check=False)
            if done23 is not None and done23.rc == 0:
                try:
                    return parse_json(done23.stdout)
                except SlurmParseError:
                    pass
        elif "unrecognized option" not in done.stderr and "invalid option" not in done.stderr:
            raise SlurmError(argv, _message(done), done.rc)
        text = self._run(["scontrol", "-o", "show", "node"] + ([names] if names else []))
        try:
            return parse_text(text.stdout)
        except SlurmParseError as exc:
            raise SlurmError(text.argv, str(exc)) from None

    def ping(self) -> None:
        self._run(["scontrol", "ping"])

    def jobs_on(self, nodes: Sequence[str]) -> dict[str, list[str]]:
        """Running or starting jobs per node (``squeue -w``): job id and user, for a busy node's message."""
        if not nodes:
            return {}
        done = self._run(["squeue", "-h", "-t", "RUNNING,CONFIGURING,COMPLETING", "-w", ",".join(nodes),
                          "-o", "%i|%u|%N"])
        out: dict[str, list[str]] = {}
        wanted = set(nodes)
        for line in done.stdout.splitlines():
            parts = line.split("|")
            if len(parts) != 3:
                continue
            for node in self.expand(parts[2]) if parts[2] else []:
                if node in wanted:
                    out.setdefault(node, []).append(f"{parts[0]} ({parts[1]})")
        return out

    def expand(self, hostlist: str) -> list[str]:
        from nvdeploy.config.hostrange import HostRangeError, expand

        names: list[str] = []
        try:
            for part in _split_hostlist(hostlist):
                names.extend(expand(part))
        except HostRangeError:
            done = self._run(["scontrol", "show", "hostnames", hostlist])
            names = done.stdout.split()
        return names

    # ---- changing ----
    def drain(self, node: str, reason: str) -> Optional[Completed]:
        return self._change(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"])

    def resume(self, node: str) -> Optional[Completed]:
        return self._change(["scontrol", "update", f"nodename={node}", "state=resume"])

    def create_reservation(self, name: str, nodes: Sequence[str], minutes: int, user: str) -> Optional[Completed]:
        return self._change(["scontrol", "create", "reservation", f"reservationname={name}", "starttime=now",
                             f"duration={minutes}", f"nodes={','.join(nodes)}", "flags=maint,ignore_jobs",
                             f"users={user}"])

    def delete_reservation(self, name: str) -> Optional[Completed]:
        return self._change(["scontrol", "delete", f"reservationname={name}"])

    def cancel_job(self, job_id: str) -> None:
        self._run(["scancel", "--full", job_id], check=False)

    def steps_of(self, job_id: str) -> list[str]:
        done = self._run(["squeue", "-h", "-j", job_id, "-o", "%i|%T"], check=False)
        return [line for line in done.stdout.splitlines() if line.strip()]


def _split_hostlist(text: str) -> list[str]:
    """``a[1-3],b,c[01-02]`` -> ``["a[1-3]", "b", "c[01-02]"]`` (commas inside brackets stay)."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if current:
        parts.append(current)
    return [p for p in (x.strip() for x in parts) if p]
