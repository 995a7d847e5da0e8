"""Driver checks: loaded, and the version the profile or inventory expects."""

from __future__ import annotations

from nvdeploy.checks.common import LOST_ACTION, SMI, gpu_label, smi_gate, version_tuple
from nvdeploy.checks.registry import NodeContext, register
from nvdeploy.results import Finding, Remediation, Verdict


@register("driver.loaded", collectors=(SMI,))
def driver_loaded(ctx: NodeContext) -> list[Finding]:
    """Runs ``nvidia-smi -q -x``; PASS when it answers with exit 0 and complete XML.

    nvidia-smi's exit code decides: 9 driver not loaded, 18 driver/library mismatch (reboot), 15 a GPU fell off
    the bus, 14 infoROM corrupted, 6 no devices: FAIL. A hang, an unknown exit code or cut-off output: ERROR.
    Exit 15 with a complete table in which a GPU reads ``GPU is lost``: FAIL (ISOLATE) naming that GPU, and the
    other GPUs' facts are still judged by the other checks.
    """
    status = ctx.facts["smi_status"]
    if not status.usable:
        return [ctx.finding("driver.loaded", status.verdict, status.summary, reason=status.reason,
                            remediation=status.remediation, collector=SMI)]
    smi = ctx.facts["smi"]
    lost = [g for g in (smi.gpus if smi is not None else ()) if g.lost]
    if lost:
        return [ctx.finding("driver.loaded", Verdict.FAIL,
                            f"driver {smi.driver_version} loaded but {', '.join(map(gpu_label, lost))} is lost "
                            f"(GPU_IS_LOST, nvidia-smi exit 15): {LOST_ACTION}", observed="GPU is lost",
                            gpu=lost[0].index if len(lost) == 1 else None, remediation=Remediation.ISOLATE,
                            collector=SMI)]
    return [ctx.finding("driver.loaded", Verdict.PASS, f"driver {smi.driver_version} loaded",
                        observed=smi.driver_version, collector=SMI)]


@register("driver.version", collectors=(SMI,))
def driver_version(ctx: NodeContext) -> list[Finding]:
    """The driver version equals the host's ``driver_version`` var or the profile's ``driver.version``; else it
    is at least the profile's ``driver.min_version``. Versions are compared as integer tuples.

    Remediation: REINSTALL the expected driver branch. Consistency across nodes is the cluster-level check
    ``driver.consistency``.
    """
    gated = smi_gate(ctx, "driver.version")
    if gated:
        return gated
    observed = ctx.facts["smi"].driver_version
    if not observed:
        return [ctx.finding("driver.version", Verdict.ERROR, "nvidia-smi did not report a driver version",
                            collector=SMI)]
    expected = ctx.host_vars.get("driver_version") or ctx.profile.driver_version
    if expected:
        if version_tuple(observed) == version_tuple(expected):
            return [ctx.finding("driver.version", Verdict.PASS, f"driver {observed} as expected", observed=observed,
                                expected=expected, collector=SMI)]
        return [ctx.finding("driver.version", Verdict.FAIL, f"driver {observed} is not the expected {expected}",
                            observed=observed, expected=expected, remediation=Remediation.REINSTALL, collector=SMI)]
    minimum = ctx.profile.driver_min_version
    if minimum and version_tuple(observed) < version_tuple(minimum):
        return [ctx.finding("driver.version", Verdict.FAIL, f"driver {observed} is older than the minimum {minimum}",
                            observed=observed, expected=f">= {minimum}", remediation=Remediation.REINSTALL,
                            collector=SMI)]
    return [ctx.finding("driver.version", Verdict.PASS, f"driver {observed}" + (f" (>= {minimum})" if minimum else ""),
                        observed=observed, expected=f">= {minimum}" if minimum else None, collector=SMI)]
