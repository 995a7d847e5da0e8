"""The Slurm busy guard at the transport: on a node where Slurm shows running jobs (and that is not drained and
empty), heavy collectors (DCGM diag, nccl-tests) are not sent at all; each comes back as ERROR ``busy`` naming
the jobs, so the checks reading them are ERROR busy and the light checks are judged as usual. A draining node
whose job list could not be read gets ERROR ``not_run`` the same way: unknown is never idle. ``--allow-busy``
(the engine's flag) lifts it: the window then marks no host."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from nvdeploy.results import CommandResult, ErrorReason
from nvdeploy.transport.base import CommandSpec, Transport


def _heavy(spec: CommandSpec) -> bool:
    from nvdeploy.collect.catalog import COLLECTORS

    collector = COLLECTORS.get(spec.name)
    return bool(collector is not None and collector.heavy)


class BusyGuardTransport(Transport):
    def __init__(self, inner: Transport, busy: str, reason: ErrorReason = ErrorReason.BUSY) -> None:
        self.inner = inner
        self.busy = busy
        self.reason = reason
        self.name = inner.name

    def bind(self, node: str, run_id: str = "", sudo_gate: Any = None) -> Transport:
        self.inner.bind(node, run_id, sudo_gate)
        return super().bind(node, run_id, sudo_gate)

    def connect(self) -> None:
        self.inner.connect()

    def run_batch(self, commands: Sequence[CommandSpec], deadline_s: Optional[float] = None) -> list[CommandResult]:
        allowed = [c for c in commands if not _heavy(c)]
        ran = iter(self.inner.run_batch(allowed, deadline_s) if allowed else [])
        return [next(ran) if not _heavy(c) else
                CommandResult(c.name, c.display, None, error=self.reason, error_detail=self.busy)
                for c in commands]

    def close(self) -> None:
        self.inner.close()


def slurm_transport(host: Any, make: Any) -> Transport:
    """The engine's hook: srun for ``--via slurm`` hosts, the busy guard around any transport of a busy host.
    ``make(host)`` builds the host's ordinary transport."""
    from dataclasses import replace

    from nvdeploy.slurm.srun import POOL_VAR, transport_for
    from nvdeploy.slurm.window import BUSY_REASON_VAR, BUSY_VAR

    busy = host.vars.get(BUSY_VAR)
    plain = {k: v for k, v in host.vars.items() if k not in (BUSY_VAR, BUSY_REASON_VAR)}
    inner = transport_for(host) if host.vars.get(POOL_VAR) else make(replace(host, vars=plain))
    if not busy:
        return inner
    return BusyGuardTransport(inner, str(busy), ErrorReason(host.vars.get(BUSY_REASON_VAR) or "busy"))
