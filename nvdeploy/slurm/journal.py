"""What a run did to the scheduler, on disk before it does it: ``slurm-state.json`` in the run folder.

Before the first change (the reservation, a node resumed inside it, a drain or a resume at the end) the run
writes the nodes' prior state and reason, then each intent before the command that carries it out, durably
(fsync, atomic rename). Whatever ends the run, :func:`recover` reads it back and puts the scheduler in a safe
state: the reservation deleted, every node the run resumed for validation drained again with its old reason
unless this run judged it fit to resume, the drains the run decided done. ``finished`` says nothing is left.
The CLI's ``finally`` runs it (an error, Ctrl-C, SIGTERM, SIGHUP); after a SIGKILL, ``nvdeploy slurm recover
RUN_DIR`` does, and the next run on the same output folder names the folder to recover.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from nvdeploy.files import OutputError, write_atomic
from nvdeploy.slurm.client import SlurmClient, SlurmError
from nvdeploy.slurm.nodes import SlurmNode

FILE = "slurm-state.json"
VERSION = 1


class JournalError(Exception):
    """The state file is missing or not one nvdeploy wrote: the message names the file and what is wrong."""


@dataclass
class SchedulerJournal:
    path: Path
    run_id: str
    prior: dict[str, dict[str, Any]] = field(default_factory=dict)
    reservation: Optional[str] = None
    reopened: dict[str, str] = field(default_factory=dict)
    plan: Optional[list[dict[str, str]]] = None
    finished: bool = False
    recovered: list[str] = field(default_factory=list)
    pid: int = field(default_factory=os.getpid)
    host: str = field(default_factory=socket.gethostname)

    # ---- writing ----
    def save(self) -> None:
        data = {"version": VERSION, "run_id": self.run_id, "pid": self.pid, "host": self.host,
                "saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "prior": self.prior,
                "reservation": self.reservation, "reopened": self.reopened, "plan": self.plan,
                "finished": self.finished, "recovered": self.recovered}
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # the run folder, made early
        except OSError as exc:
            raise OutputError(f"cannot create the run folder {self.path.parent}: {exc.strerror or exc}") from None
        write_atomic(self.path, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())

    def begin(self, nodes: Sequence[SlurmNode]) -> None:
        """The prior state of every node of the run: written before anything changes."""
        self.prior = {n.name: {"state": n.short_state, "drained": n.drained, "reason": n.reason} for n in nodes}
        self.save()

    def will_reserve(self, name: str) -> None:
        self.reservation = name
        self.save()

    def will_reopen(self, node: str, reason: str) -> None:
        self.reopened[node] = reason
        self.save()

    def will_apply(self, actions: Sequence[Any]) -> None:
        """The drains and resumes the run decided (Actions), before the first of them runs."""
        self.plan = [{"node": a.node, "action": a.action, "reason": a.reason} for a in actions
                     if a.action in ("drain", "resume")]
        self.save()

    def finish(self) -> None:
        self.finished = True
        self.save()

    # ---- reading ----
    @classmethod
    def load(cls, run_dir: Path) -> SchedulerJournal:
        path = run_dir / FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise JournalError(f"{path}: no such file (this run changed nothing in Slurm, or is not a run "
                               "folder)") from None
        except (OSError, ValueError) as exc:
            raise JournalError(f"{path}: not readable as JSON: {exc}") from None
        if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("prior"), dict):
            raise JournalError(f"{path}: not an nvdeploy scheduler state file (version {VERSION})")
        plan = data.get("plan")
        return cls(path, str(data.get("run_id", "")), dict(data["prior"]), data.get("reservation") or None,
                   {str(k): str(v) for k, v in (data.get("reopened") or {}).items()},
                   list(plan) if isinstance(plan, list) else None, bool(data.get("finished")),
                   list(data.get("recovered") or []), int(data.get("pid") or 0), str(data.get("host", "")))

    def alive(self) -> bool:
        """The process that wrote it still runs (on this host): recovering now would race with it."""
        if self.host != socket.gethostname() or self.pid <= 0:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def _is_gone(exc: SlurmError) -> bool:
    """Slurm's answer for a reservation that does not exist (never created, or deleted already)."""
    text = exc.message.lower()
    return any(words in text for words in ("reservation is invalid", "invalid reservation", "not found"))


def _step_for(name: str, node: SlurmNode, reopened: Optional[str], planned: Optional[dict[str, str]],
              is_ours: Callable[[str], bool]) -> Optional[tuple[str, str]]:
    """What recovery does to one node: (drain, reason), (resume, ""), or None (nothing left to do)."""
    if reopened is not None and (planned is None or planned["action"] != "resume"):
        # Resumed only so that the run could reach it, and not judged fit to stay: back to a drain (the run's
        # new reason when it decided one, else the old one).
        return None if node.drained else ("drain", planned["reason"] if planned else reopened)
    if planned is not None and planned["action"] == "drain":
        if node.drained and (node.reason == planned["reason"] or not is_ours(node.reason)):
            return None  # done already, or drained by someone else since: their reason counts
        return "drain", planned["reason"]
    if planned is not None and planned["action"] == "resume" and node.drained and is_ours(node.reason):
        return "resume", ""
    return None


def recover(journal: SchedulerJournal, client: SlurmClient, echo: Callable[[str], None] = lambda text: None
            ) -> list[str]:
    """Put the scheduler back in a safe state from ``journal``; returns what failed (empty: all done, and the
    journal is marked finished). Idempotent: a second call finds nothing left to do."""
    from nvdeploy.slurm.drain import is_ours

    if journal.finished:
        return []
    failed: list[str] = []
    done: list[str] = []
    planned = {p["node"]: p for p in journal.plan or []}
    names = sorted(set(journal.reopened) | set(planned))
    current: dict[str, SlurmNode] = {}
    try:
        current = {n.name: n for n in client.nodes(",".join(names))} if names else {}
    except SlurmError as exc:
        failed.append(f"could not read the nodes' states: {exc.message}")
        names = []
    # The nodes first, while the reservation still keeps other users' jobs off them.
    for name in names:
        node = current.get(name)
        if node is None:
            failed.append(f"{name}: Slurm does not list it")
            continue
        step = _step_for(name, node, journal.reopened.get(name), planned.get(name), is_ours)
        if step is None:
            continue
        action, reason = step
        try:
            if action == "drain":
                client.drain(name, reason)
            else:
                client.resume(name)
            done.append(f"{action} {name}" + (f" ({reason})" if reason else ""))
        except SlurmError as exc:
            failed.append(f"{action} {name}: {exc.message}")
    if journal.reservation:
        try:
            client.delete_reservation(journal.reservation)
            done.append(f"reservation {journal.reservation} deleted")
        except SlurmError as exc:
            if not _is_gone(exc):
                failed.append(f"could not delete reservation {journal.reservation}: {exc.message}")
    for line in done:
        echo(f"slurm recover: {line}")
    journal.recovered = journal.recovered + done
    if not failed:
        journal.finished = True
    journal.save()
    return failed


def unfinished_runs(cluster_dir: Path, skip: str = "") -> list[Path]:
    """Run folders under ``cluster_dir`` whose scheduler steps were left half done by a run no longer alive."""
    found = []
    for path in sorted(cluster_dir.glob(f"*/{FILE}")):
        if path.parent.name == skip:
            continue
        try:
            journal = SchedulerJournal.load(path.parent)
        except JournalError:
            continue
        if not journal.finished and not journal.alive():
            found.append(path.parent)
    return found
