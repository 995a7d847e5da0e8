"""A Slurm maintenance reservation around a validation run: ``flags=maint,ignore_jobs`` on the run's nodes,
named after the run, for the current user only (so ``--via slurm`` steps run inside it and nobody else's jobs
start), deleted at the end of the run even on Ctrl-C."""

from __future__ import annotations

import getpass
import math
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from nvdeploy.slurm.client import SlurmClient

POLL_S = 2.0


def reservation_name(run_id: str) -> str:
    return f"nvdeploy-{run_id}"


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry in some containers
        return "root"


@dataclass
class Reservation:
    name: str
    nodes: tuple[str, ...]
    duration_s: float
    created: bool = False
    deleted: bool = False
    error: str = ""
    created_at: float = 0.0  # time.monotonic() when Slurm accepted it: the run's deadline counts from here

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "nodes": list(self.nodes), "duration_s": self.duration_s,
                "created": self.created, "deleted": self.deleted, "error": self.error}


def create(client: SlurmClient, run_id: str, nodes: Sequence[str], duration_s: float) -> Reservation:
    """Create it (raises SlurmError with Slurm's message: the run must not start without its window)."""
    res = Reservation(reservation_name(run_id), tuple(nodes), duration_s)
    res.created_at = time.monotonic()
    client.create_reservation(res.name, nodes, max(1, math.ceil(duration_s / 60)), _user())
    res.created = not client.dry_run
    return res


def delete(client: SlurmClient, res: Optional[Reservation]) -> None:
    """Delete it; a failure is recorded on the reservation (the report shows it), never raised."""
    from nvdeploy.slurm.client import SlurmError

    if res is None or not res.created or res.deleted:
        return
    try:
        client.delete_reservation(res.name)
        res.deleted = True
    except SlurmError as exc:
        res.error = f"could not delete reservation {res.name}: {exc.message}"


def wait_for_jobs(client: SlurmClient, nodes: Sequence[str], wait_s: float,
                  sleep: Callable[[float], None] = time.sleep) -> dict[str, list[str]]:
    """Poll until no job runs on ``nodes`` or ``wait_s`` passed; returns the jobs still running per node."""
    deadline = time.monotonic() + wait_s
    while True:
        running = client.jobs_on(nodes)
        if not running or time.monotonic() >= deadline:
            return running
        sleep(min(POLL_S, max(0.1, deadline - time.monotonic())))
