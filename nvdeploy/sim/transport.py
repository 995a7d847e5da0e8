"""In-process simulated nodes: the same byte formats as the real tools, no network, no subprocess."""

from __future__ import annotations

import threading
import time
from typing import Optional, Sequence

from nvdeploy.config.profiles import Profile
from nvdeploy.results import CommandResult, ErrorReason
from nvdeploy.sim.scenario import NodeScenario
from nvdeploy.sim.tools import run_tool
from nvdeploy.transport.base import CommandSpec, Transport, TransportError


def sim_transport(name: str, profile: Profile, faults: Sequence[str], sku: Optional[Profile], cluster: str,
                  peers: Sequence[tuple[str, Sequence[str]]], connect_timeout_s: float,
                  rack: Optional[str] = None) -> SimTransport:
    """A simulated node (an inventory host with ``connection: sim``): the profile it is expected to match, its
    faults, the SKU it really is, the cluster its mutable state is keyed by (install, then validate, see the same)
    and its peers (address, faults) for the multi-node tools; ``rack`` (the inventory var) puts an NVL72 tray in
    its rack's NVLink domain."""
    scenario = NodeScenario(name, profile, tuple(faults), sku, cluster=cluster,
                            peers=tuple((address, tuple(f)) for address, f in peers),
                            rack=str(rack) if rack is not None else None)
    return SimTransport(scenario, connect_timeout_s)


class SimTransport(Transport):
    name = "sim"

    def __init__(self, scenario: NodeScenario, connect_timeout_s: float = 10.0) -> None:
        self.scenario = scenario
        self.connect_timeout_s = connect_timeout_s
        self._abort = threading.Event()
        self._connected = False

    def connect(self) -> None:
        if self.scenario.has("unreachable"):
            raise TransportError(ErrorReason.UNREACHABLE, f"connection to {self.scenario.name} timed out "
                                 f"after {self.connect_timeout_s:g} s (simulated)")
        if self.scenario.has("auth_fail"):
            raise TransportError(ErrorReason.AUTH, "authentication refused (publickey) (simulated)")
        self._connected = True

    def _one(self, spec: CommandSpec) -> tuple[CommandResult, float]:
        argv = ("sudo", "-n", "--", *spec.argv) if spec.sudo else spec.argv
        output = run_tool(self.scenario, argv)
        if output.virtual_s > spec.timeout_s:
            # Longer in simulated time than its limit (a burn-in cut by --deadline): ended there, without the wait.
            return (CommandResult(name=spec.name, command=spec.display, rc=None, timed_out=True,
                                  duration_s=spec.timeout_s, error=ErrorReason.TIMEOUT,
                                  error_detail=f"timed out after {spec.timeout_s:g} s"), 0.0)
        if output.hang or output.repeat is not None or output.delay_s >= spec.timeout_s:
            return (CommandResult(name=spec.name, command=spec.display, rc=None, timed_out=True,
                                  duration_s=spec.timeout_s, error=ErrorReason.TIMEOUT,
                                  error_detail=f"timed out after {spec.timeout_s:g} s"), spec.timeout_s)
        cap = spec.max_bytes
        truncated = len(output.stdout) > cap or len(output.stderr) > cap
        stdout = output.stdout[-cap:] if spec.keep_tail and cap else output.stdout[:cap]  # as batch.py keeps it
        return (CommandResult(name=spec.name, command=spec.display, rc=output.rc, stdout=stdout,
                              stderr=output.stderr[:cap], truncated=truncated, stdout_total=len(output.stdout),
                              stderr_total=len(output.stderr)), output.delay_s)

    def run_batch(self, commands: Sequence[CommandSpec], deadline_s: Optional[float] = None) -> list[CommandResult]:
        if not self._connected:
            raise TransportError(ErrorReason.NOT_RUN, "not connected")
        started = time.monotonic()
        results = [self._one(spec) for spec in commands]
        # Commands of a batch run side by side: the batch lasts as long as its slowest (hung or slow) command.
        wait = max((w for _, w in results), default=0.0)
        if deadline_s is not None:
            wait = min(wait, max(deadline_s, 0.0))
        if wait and self._abort.wait(wait):
            # A command still running (hung, or slow and not done yet) when the run was aborted has no result.
            elapsed = time.monotonic() - started
            return [CommandResult(name=r.name, command=r.command, rc=None, error=ErrorReason.INTERRUPTED,
                                  error_detail="run interrupted") if r.timed_out or w > elapsed else r
                    for r, w in results]
        elapsed = time.monotonic() - started
        return [r if r.timed_out else _with_duration(r, elapsed) if w <= wait else _cut(r, elapsed)
                for r, w in results]

    def close(self) -> None:
        self._abort.set()


def _cut(result: CommandResult, elapsed: float) -> CommandResult:
    """A slow command still running when the global deadline stopped the batch."""
    return CommandResult(name=result.name, command=result.command, rc=None, duration_s=elapsed, timed_out=True,
                         error=ErrorReason.TIMEOUT,
                         error_detail=f"stopped at the global deadline after {elapsed:.0f} s")


def _with_duration(result: CommandResult, duration: float) -> CommandResult:
    from dataclasses import replace

    return replace(result, duration_s=duration)
