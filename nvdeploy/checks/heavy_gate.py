"""Whether a node's heavy collectors (``dcgmi diag``, nccl-tests) may start, decided from its light batch (pure).

Heavy tests take 20 minutes to hours and stress every GPU. They do not start when:

- the node cannot run GPU work (fail fast): nvidia-smi hung or exited non-zero, the driver is not loaded, a GPU
  is lost (NVML/nvidia-smi say so, or lspci lists more NVIDIA GPUs than the driver), or the kernel log has Xid 79
  (a GPU fell off the bus). A stress test there would only wait for its own timeout;
- the node is busy (the busy guard): ``nvidia-smi --query-compute-apps`` lists compute processes, i.e. somebody's
  job runs there; a stress test would slow, kill or corrupt it. ``--allow-busy`` lifts this guard (not the
  others). When the list cannot be read, the node counts as possibly busy: unknown is never "idle". A heavy
  collector that loads no GPU (``Collector.loads_gpu`` False: storage) is not held by this guard;
- the global ``--deadline`` passed (decided by the engine before each heavy collector).

The checks that read a skipped collector are ERROR (``not_run``, or ``busy`` for the busy guard) with the reason,
e.g. ``skipped: nvidia-smi hung``; the light (quick) checks of the node are judged as usual.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from nvdeploy.results import CommandResult, ErrorReason

SMI = "nvidia_smi_xml"
PROBE = "nvml_probe"
COMPUTE_APPS = "compute_apps"
# Light collectors the decision reads: the engine adds them to the light batch whenever heavy collectors are planned.
GUARD_COLLECTORS = (SMI, COMPUTE_APPS)
# Shown by ``nvdeploy checks show`` for every check that reads a heavy collector.
HEAVY_RULE = ("Heavy check: it does not start (ERROR with the reason) when the node's light batch shows it cannot "
              "run GPU work (nvidia-smi hung or non-zero, driver not loaded, a GPU lost, Xid 79): 'skipped: "
              "nvidia-smi hung'; when GPU compute processes run there (ERROR busy naming them; --allow-busy runs "
              "it anyway); or after the global --deadline.")
# The same for a heavy check whose collector loads no GPU (storage): a GPU job on the node does not stop it.
HEAVY_RULE_NO_GPU = ("Heavy check: it does not start (ERROR with the reason) when the node's light batch shows it "
                     "cannot run GPU work (nvidia-smi hung or non-zero, driver not loaded, a GPU lost, Xid 79), or "
                     "after the global --deadline. It loads no GPU: GPU compute processes on the node (somebody's "
                     "job) do not keep it off, it waits for the node lock like every batch.")
DEADLINE_SUMMARY = "skipped: the global --deadline passed"

_SMI_RC = {
    6: "no GPU found (nvidia-smi exit 6)",
    9: "driver not loaded (nvidia-smi exit 9)",
    12: "NVML library not found (nvidia-smi exit 12)",
    14: "infoROM corrupted (nvidia-smi exit 14)",
    15: "a GPU fell off the bus (nvidia-smi exit 15)",
    18: "driver/library version mismatch (nvidia-smi exit 18)",
    127: "nvidia-smi not found (driver not installed?)",
}
_INHERITED = (ErrorReason.CONNECTION_LOST, ErrorReason.INTERRUPTED)
_NO_DRIVER = "couldn't communicate with the NVIDIA driver"
_LOST_RE = re.compile(r"GPU[ _]IS[ _]LOST|fallen off the bus", re.IGNORECASE)


@dataclass(frozen=True)
class HeavySkip:
    """Why the heavy collectors of a node do not start: the checks reading them get this ERROR."""

    reason: ErrorReason
    summary: str


DEADLINE_SKIP = HeavySkip(ErrorReason.NOT_RUN, DEADLINE_SUMMARY)
INTERRUPTED_SKIP = HeavySkip(ErrorReason.INTERRUPTED, "not started: run interrupted")


def unfit_reason(results: Mapping[str, CommandResult], facts: Mapping[str, Any]) -> Optional[str]:
    """Why the light batch shows the node cannot run GPU work; None when nothing says so."""
    smi = results.get(SMI)
    if smi is not None:
        if smi.timed_out or smi.error is ErrorReason.TIMEOUT:
            return f"nvidia-smi hung ({smi.error_detail or 'timed out'})"
        if smi.error is not None:
            return f"nvidia-smi did not complete ({smi.error_detail or smi.error.value})"
        if smi.rc in _SMI_RC:
            return _SMI_RC[smi.rc]  # type: ignore[index]
        if smi.rc not in (0, None):
            return f"nvidia-smi exited {smi.rc}"
        if _NO_DRIVER in smi.text or _NO_DRIVER in smi.err_text:
            return "driver not loaded (nvidia-smi could not communicate with the driver)"
        lost = _LOST_RE.search(smi.text + "\n" + smi.err_text)
        if lost:
            return f"a GPU is lost (nvidia-smi: {lost.group(0)})"
    probe = results.get(PROBE)
    if probe is not None and probe.error is None:
        lost = _LOST_RE.search(probe.text)
        if lost:
            return f"a GPU is lost (NVML: {lost.group(0)})"
    lspci, smi_facts, status = facts.get("lspci"), facts.get("smi"), facts.get("smi_status")
    lost_gpus = [g for g in getattr(smi_facts, "gpus", ()) if getattr(g, "lost", False)]
    if lost_gpus:
        return f"a GPU is lost (GPU_IS_LOST: GPU {', '.join(str(g.index) for g in lost_gpus)})"
    if lspci is not None and smi_facts is not None and (status is None or status.usable):
        on_bus, seen = len(lspci.gpus), len(smi_facts.gpus)
        if on_bus > seen:
            return f"a GPU is lost ({on_bus} NVIDIA GPUs on the PCIe bus, the driver lists {seen})"
    kmsg = facts.get("kmsg")
    if kmsg is not None and kmsg.xid_counts.get("79"):
        return "Xid 79 in the kernel log (a GPU fell off the bus)"
    return None


def busy_skip(results: Mapping[str, CommandResult], facts: Mapping[str, Any]) -> Optional[HeavySkip]:
    """ERROR ``busy`` naming the compute processes (the parsed list, ``facts["compute_apps"]``); ERROR ``not_run``
    when the list could not be read."""
    result = results.get(COMPUTE_APPS)
    query = "nvidia-smi --query-compute-apps"
    unknown = "skipped: could not tell whether GPU compute processes run ({}); --allow-busy runs the heavy tests anyway"
    if result is None:
        return HeavySkip(ErrorReason.NOT_RUN, unknown.format(f"{query} was not run"))
    if result.error is not None or result.timed_out:
        return HeavySkip(ErrorReason.NOT_RUN, unknown.format(
            f"{query}: {result.error_detail or (result.error.value if result.error else 'timed out')}"))
    if result.rc != 0:
        first = next((line.strip() for line in (result.text + "\n" + result.err_text).splitlines() if line.strip()),
                     "no output")
        return HeavySkip(ErrorReason.NOT_RUN, unknown.format(f"{query} exited {result.rc}: {first[:160]}"))
    apps = facts.get("compute_apps")
    if apps is None:
        return HeavySkip(ErrorReason.NOT_RUN, unknown.format(f"{query}: its output was not parsed"))
    if apps.processes:
        shown = ", ".join(p.label() for p in apps.processes[:8])
        more = f" and {len(apps.processes) - 8} more" if len(apps.processes) > 8 else ""
        return HeavySkip(ErrorReason.BUSY, f"skipped: the node is busy: {len(apps.processes)} GPU compute "
                         f"process(es) run: {shown}{more}; heavy tests would disturb them (--allow-busy runs them "
                         "anyway)")
    if result.truncated:
        return HeavySkip(ErrorReason.NOT_RUN, unknown.format(f"{query}: output exceeded the capture limit"))
    if apps.warnings:
        return HeavySkip(ErrorReason.NOT_RUN, unknown.format(f"{query} output not understood: {apps.warnings[0]}"))
    return None


def compute_processes(results: Mapping[str, CommandResult], facts: Mapping[str, Any]) -> Optional[list[str]]:
    """The compute processes the light batch listed, as labels; None when the list was not read."""
    result = results.get(COMPUTE_APPS)
    apps = facts.get("compute_apps")
    if result is None or not result.ok or apps is None:
        return None
    return [p.label() for p in apps.processes]


def heavy_skip(results: Mapping[str, CommandResult], facts: Mapping[str, Any],
               allow_busy: bool = False, loads_gpu: bool = True) -> Optional[HeavySkip]:
    """Why the node's heavy collectors may not start (those that load a GPU, or with ``loads_gpu`` False those
    that do not: the busy guard does not hold them); None when they may."""
    unfit = unfit_reason(results, facts)
    if unfit is not None:
        smi = results.get(SMI)
        # A light batch lost with the connection (or to an interrupt) passes its own reason on: the heavy checks
        # could not be run for the same cause, and --resume must redo an interrupted node.
        inherited = smi.error if smi is not None and smi.error in _INHERITED else None
        return HeavySkip(inherited or ErrorReason.NOT_RUN, f"skipped: {unfit}")
    return None if allow_busy or not loads_gpu else busy_skip(results, facts)


def batch_refused(results: Mapping[str, CommandResult]) -> Optional[str]:
    """The holder named when the node refused the whole batch (another run's lock); None otherwise."""
    if results and all(r.error is ErrorReason.BUSY for r in results.values()):
        return next(iter(results.values())).error_detail or "the node is held by another run"
    return None


def batch_unsafe(results: Mapping[str, CommandResult]) -> Optional[str]:
    """What the node named when it refused the whole batch for an unsafe folder (ERROR lock); None otherwise."""
    if results and all(r.error is ErrorReason.LOCK for r in results.values()):
        return next(iter(results.values())).error_detail or "a node folder nvdeploy uses is not safe"
    return None


def skip_for(collectors: tuple[str, ...], skipped: Mapping[str, HeavySkip]) -> Optional[HeavySkip]:
    """The skip a check inherits from the first skipped collector it reads."""
    return next((skipped[c] for c in collectors if c in skipped), None)
