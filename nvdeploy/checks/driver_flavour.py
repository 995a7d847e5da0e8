"""The loaded nvidia kernel module's flavour (open or proprietary) against the one the profile expects."""

from __future__ import annotations

from nvdeploy.checks.registry import NodeContext, register
from nvdeploy.results import ErrorReason, Finding, Remediation, Verdict

KERNEL_DRIVER = "kernel_driver"  # nvdeploy/collect/stack.py
# NVIDIA's default (and recommended) flavour from this branch on, for Turing and newer GPUs.
OPEN_DEFAULT_BRANCH = 560


def _name(is_open: bool) -> str:
    return "open" if is_open else "proprietary"


@register("driver.flavour", collectors=(KERNEL_DRIVER,))
def driver_flavour(ctx: NodeContext) -> list[Finding]:
    """Reads the ``NVRM version:`` line of ``/proc/driver/nvidia/version`` (the ``kernel_driver`` collector, one
    ``find``): ``NVIDIA UNIX Open Kernel Module`` is the open GPU kernel modules (dual MIT/GPL), any other
    ``Kernel Module`` the proprietary ones.

    Expected: the host var ``driver_flavour``, else the profile's ``driver.flavour`` (b200-8x: open; NVIDIA
    supports only the open modules on Blackwell). PASS: the loaded module is that flavour. FAIL (REINSTALL the
    driver in the expected flavour: apt ``nvidia-driver-<branch>-open``, dnf ``kmod-nvidia-open-dkms`` from the
    ``<branch>-open`` module stream; or the proprietary ones) when it is the other. With no expectation stated:
    PASS, or WARN (MONITOR) for the proprietary flavour of R560 or later, where NVIDIA made the open one its
    default and recommendation (Driver Installation Guide, "Kernel Modules"). ERROR: the file could not be read
    (the module is not loaded: driver.loaded says why) or its line is not one nvdeploy knows.
    """
    result = ctx.results.get(KERNEL_DRIVER)
    if result is None or result.error is not None:
        reason = result.error if result is not None and result.error is not None else ErrorReason.NOT_RUN
        detail = (result.error_detail or reason.value) if result is not None else "not collected"
        return [ctx.finding("driver.flavour", Verdict.ERROR, f"/proc/driver/nvidia/version not read ({detail})",
                            reason=reason, collector=KERNEL_DRIVER)]
    facts = ctx.facts.get("kernel_driver")  # parsed in the parse stage (nvdeploy/parsers/catalog.py)
    if facts is None or facts.nvrm_line is None:
        return [ctx.finding("driver.flavour", Verdict.ERROR, "no /proc/driver/nvidia/version: the nvidia module is "
                            "not loaded, its flavour is unknown (see driver.loaded)",
                            reason=ErrorReason.UNPARSEABLE, collector=KERNEL_DRIVER)]
    if facts.open_module is None:
        return [ctx.finding("driver.flavour", Verdict.ERROR, f"unrecognised NVRM line: {facts.nvrm_line[:160]!r}",
                            reason=ErrorReason.UNPARSEABLE, collector=KERNEL_DRIVER)]
    loaded = _name(facts.open_module)
    version = facts.driver_version or "?"
    expected = str(ctx.host_vars.get("driver_flavour") or ctx.profile.driver_flavour or "")
    if expected:
        if loaded == expected:
            return [ctx.finding("driver.flavour", Verdict.PASS, f"{loaded} kernel modules loaded ({version})",
                                observed=loaded, expected=expected, collector=KERNEL_DRIVER)]
        blackwell = " (the only flavour NVIDIA supports on Blackwell)" if ctx.profile.driver_flavour == "open" else ""
        return [ctx.finding("driver.flavour", Verdict.FAIL,
                            f"{loaded} kernel modules loaded ({version}), the profile expects {expected}{blackwell}: "
                            f"reinstall the driver's {expected} flavour (nvdeploy install sets it from the profile)",
                            observed=loaded, expected=expected, remediation=Remediation.REINSTALL,
                            collector=KERNEL_DRIVER)]
    branch = version.split(".")[0]
    if not facts.open_module and branch.isdigit() and int(branch) >= OPEN_DEFAULT_BRANCH:
        return [ctx.finding("driver.flavour", Verdict.WARN,
                            f"proprietary kernel modules loaded ({version}): NVIDIA's default and recommendation "
                            f"from R{OPEN_DEFAULT_BRANCH} on is the open flavour",
                            observed=loaded, expected="open", remediation=Remediation.MONITOR,
                            collector=KERNEL_DRIVER)]
    return [ctx.finding("driver.flavour", Verdict.PASS, f"{loaded} kernel modules loaded ({version})",
                        observed=loaded, collector=KERNEL_DRIVER)]
