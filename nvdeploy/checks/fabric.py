"""Fabric manager: the NVSwitch fabric service, running and at the driver's version; on NVLink 5 HGX, the
ib_umad module it reaches the NVSwitches through."""

from __future__ import annotations

from nvdeploy.checks.common import version_tuple
from nvdeploy.checks.gating import first_line, raw_gate
from nvdeploy.checks.registry import NodeContext, register
from nvdeploy.results import ErrorReason, Finding, Remediation, Verdict

FM = "fabricmanager"
FM_VERSION = "fabricmanager_version"
LSMOD = "lsmod"


@register("fabric.manager", collectors=(FM, FM_VERSION))
def fabric_manager(ctx: NodeContext) -> list[Finding]:
    """Runs ``systemctl is-active nvidia-fabricmanager`` and ``nv-fabricmanager --version`` on NVSwitch SKUs.

    PASS: the service is ``active`` (and, when both are known, its version equals the driver's). FAIL when it
    is not active: without it CUDA reports "system not yet initialized" and no GPU job starts (REINSTALL when
    it ``failed``, usually a fabric manager that does not match the driver; else REBOOT/start it:
    ``systemctl enable --now nvidia-fabricmanager``). FAIL (REINSTALL) when its version differs from the driver's.
    ERROR when systemctl is missing or answered something else. SKIP on SKUs without NVSwitch
    (profile ``gpu.nvswitch: false``).
    """
    if not ctx.profile.gpu.nvswitch:
        return [ctx.finding("fabric.manager", Verdict.SKIP, "no NVSwitch on this SKU: fabric manager not needed")]
    gated = raw_gate(ctx, "fabric.manager", FM, "systemctl", "not a systemd host; check nv-fabricmanager by hand",
                     Remediation.INVESTIGATE)
    if gated:
        return gated
    state = ctx.facts.get("fabricmanager_state")
    if state is None:
        return [ctx.finding("fabric.manager", Verdict.ERROR,
                            f"systemctl is-active answered {first_line(ctx, FM)!r}", reason=ErrorReason.UNPARSEABLE,
                            collector=FM)]
    if state != "active":
        remediation = Remediation.REINSTALL if state == "failed" else Remediation.REBOOT
        return [ctx.finding("fabric.manager", Verdict.FAIL,
                            f"nvidia-fabricmanager is {state}: CUDA will report 'system not yet initialized' on this "
                            "NVSwitch system (systemctl enable --now nvidia-fabricmanager; its version must equal "
                            "the driver's)", observed=state, expected="active", remediation=remediation, collector=FM)]
    version = ctx.facts.get("fabricmanager_version")
    smi = ctx.facts.get("smi")
    driver = smi.driver_version if smi is not None else None
    if version and driver and version_tuple(version) != version_tuple(driver):
        return [ctx.finding("fabric.manager", Verdict.FAIL,
                            f"fabric manager {version} does not match driver {driver}: it will fail at the next "
                            "restart (install the fabric manager of the driver's exact version)",
                            observed=version, expected=driver, remediation=Remediation.REINSTALL,
                            collector=FM_VERSION)]
    return [ctx.finding("fabric.manager", Verdict.PASS,
                        "nvidia-fabricmanager active" + (f" ({version})" if version else ""), observed="active",
                        expected="active", collector=FM)]


@register("fabric.nvlsm", collectors=(LSMOD,))
def fabric_nvlsm(ctx: NodeContext) -> list[Finding]:
    """Runs ``lsmod`` on NVLink 5 HGX SKUs (profile ``gpu.nvlsm: true``: HGX/DGX B200, B300): the fabric manager's
    start script runs the NVLink Subnet Manager (NVLSM, package ``nvlsm``) first, and both reach the NVSwitches
    through InfiniBand management datagrams, so ``ib_umad`` must be loaded (Fabric Manager User Guide, systems
    with fifth-generation NVLink).

    PASS: ib_umad is loaded (NVLSM itself is judged through fabric.manager: without it the fabric manager does not
    start). FAIL (TUNE: ``modprobe ib_umad`` and list it in /etc/modules-load.d/; install ``nvlsm``) when it is not.
    ERROR: lsmod missing or listing nothing. SKIP on SKUs without NVLink 5 switches.
    """
    if not ctx.profile.gpu.nvlsm:
        return [ctx.finding("fabric.nvlsm", Verdict.SKIP, "not an NVLink 5 HGX SKU: no NVLSM or ib_umad needed")]
    gated = raw_gate(ctx, "fabric.nvlsm", LSMOD, "lsmod", "install kmod")
    if gated:
        return gated
    modules = ctx.facts.get("lsmod")
    if modules is None or not modules.modules:
        return [ctx.finding("fabric.nvlsm", Verdict.ERROR, f"lsmod exited {ctx.results[LSMOD].rc} and listed no module",
                            reason=ErrorReason.UNPARSEABLE, collector=LSMOD)]
    if not modules.loaded("ib_umad"):
        return [ctx.finding("fabric.nvlsm", Verdict.FAIL,
                            "ib_umad is not loaded: the fabric manager and NVLSM cannot reach the NVSwitches and the "
                            "GPUs stay unregistered in the NVLink fabric (modprobe ib_umad, list it in "
                            "/etc/modules-load.d/, install nvlsm)", observed="not loaded", expected="ib_umad loaded",
                            remediation=Remediation.TUNE, collector=LSMOD)]
    return [ctx.finding("fabric.nvlsm", Verdict.PASS, "ib_umad loaded (NVLSM's and the fabric manager's path to the "
                        "NVSwitches)", observed="loaded", expected="ib_umad loaded", collector=LSMOD)]
