"""GPU inventory checks: count, model, memory, PCIe visibility, persistence mode."""

from __future__ import annotations

from nvdeploy.checks.common import LOST_ACTION, SMI, gpu_label, smi_gate, split_gpus
from nvdeploy.checks.registry import NodeContext, register
from nvdeploy.results import ErrorReason, Finding, Remediation, Verdict


@register("gpu.count", collectors=(SMI,))
def gpu_count(ctx: NodeContext) -> list[Finding]:
    """The driver lists exactly the profile's number of GPUs (7 of 8 with exit 0 is still FAIL), none of them lost.

    Remediation: ISOLATE the node; a missing GPU usually fell off the bus (see kmsg.xid and gpu.pci_visible). A GPU
    listed but lost (NVML GPU_IS_LOST, nvidia-smi exit 15) is not usable: FAIL naming it.
    """
    expected = ctx.profile.gpu.count
    status = ctx.facts["smi_status"]
    if not status.usable and status.summary.startswith("nvidia-smi found no GPU"):
        return [ctx.finding("gpu.count", Verdict.FAIL, f"0 of {expected} GPUs: {status.summary}", observed=0,
                            expected=expected, remediation=Remediation.ISOLATE, collector=SMI)]
    gated = smi_gate(ctx, "gpu.count")
    if gated:
        return gated
    observed = len(ctx.facts["smi"].gpus)
    lost = [g for g in ctx.facts["smi"].gpus if g.lost]
    if lost:
        return [ctx.finding("gpu.count", Verdict.FAIL,
                            f"{observed - len(lost)} of {expected} GPUs usable: {', '.join(map(gpu_label, lost))} "
                            f"is lost (GPU_IS_LOST); {LOST_ACTION}", observed=observed - len(lost), expected=expected,
                            gpu=lost[0].index if len(lost) == 1 else None, remediation=Remediation.ISOLATE,
                            collector=SMI)]
    if observed == expected:
        return [ctx.finding("gpu.count", Verdict.PASS, f"{observed} GPUs", observed=observed, expected=expected,
                            collector=SMI)]
    return [ctx.finding("gpu.count", Verdict.FAIL, f"{observed} of {expected} expected GPUs visible to the driver",
                        observed=observed, expected=expected, remediation=Remediation.ISOLATE, collector=SMI)]


@register("gpu.model", collectors=(SMI,))
def gpu_model(ctx: NodeContext) -> list[Finding]:
    """Every GPU's product name equals the profile's ``gpu.model`` (a wrong SKU in the group is FAIL, ISOLATE).
    A GPU whose name could not be read is ERROR naming it; a lost GPU is FAIL (ISOLATE)."""
    gated = smi_gate(ctx, "gpu.model")
    if gated:
        return gated
    expected = ctx.profile.gpu.model
    split = split_gpus(ctx, "gpu.model", "product name", ("name",), required=True)
    wrong = [g for g in split.known if (g.name or "").strip() != expected]
    if not wrong and not split.findings:
        return [ctx.finding("gpu.model", Verdict.PASS, f"all GPUs are {expected}", observed=expected,
                            expected=expected, collector=SMI)]
    findings = list(split.findings)
    if wrong:
        names = sorted({g.name or "" for g in wrong})
        findings.insert(0, ctx.finding("gpu.model", Verdict.FAIL,
                                       f"{len(wrong)} GPU(s) are {', '.join(names)}, expected {expected}",
                                       observed=", ".join(names), expected=expected,
                                       gpu=wrong[0].index if len(wrong) == 1 else None,
                                       remediation=Remediation.ISOLATE, collector=SMI))
    return findings


@register("gpu.memory", collectors=(SMI,))
def gpu_memory(ctx: NodeContext) -> list[Finding]:
    """Each GPU's total framebuffer memory is within ``memory_tolerance_pct`` of the profile's ``memory_mib``
    (FAIL, ISOLATE naming the GPU). ERROR naming each GPU that did not report its memory; FAIL for a lost GPU."""
    gated = smi_gate(ctx, "gpu.memory")
    if gated:
        return gated
    expected = ctx.profile.gpu.memory_mib
    tolerance = expected * ctx.profile.gpu.memory_tolerance_pct / 100.0
    findings = []
    split = split_gpus(ctx, "gpu.memory", "total memory", ("memory_total_mib",), required=True)
    for gpu in split.known:
        if abs(gpu.memory_total_mib - expected) > tolerance:
            findings.append(ctx.finding("gpu.memory", Verdict.FAIL,
                                        f"{gpu_label(gpu)} has {gpu.memory_total_mib} MiB, expected {expected} MiB",
                                        observed=gpu.memory_total_mib, expected=expected, unit="MiB", gpu=gpu.index,
                                        remediation=Remediation.ISOLATE, collector=SMI))
    findings.extend(split.findings)
    if findings:
        return findings
    return [ctx.finding("gpu.memory", Verdict.PASS, f"every GPU has {expected} MiB", observed=expected,
                        expected=expected, unit="MiB", collector=SMI)]


@register("gpu.pci_visible", collectors=(SMI, "lspci"))
def gpu_pci_visible(ctx: NodeContext) -> list[Finding]:
    """``lspci`` sees as many NVIDIA GPUs (class 0300/0302) as the driver lists: more on the bus than in
    nvidia-smi means a GPU the driver lost (fell off the bus, failed to initialise). ISOLATE the node.
    """
    result = ctx.results.get("lspci")
    if result is None or result.error is not None:
        return [ctx.finding("gpu.pci_visible", Verdict.ERROR, "lspci did not complete"
                            + (f": {result.error_detail}" if result is not None else ""),
                            reason=(result.error if result is not None else None) or ErrorReason.NOT_RUN,
                            collector="lspci")]
    if result.rc == 127:
        return [ctx.finding("gpu.pci_visible", Verdict.ERROR, "lspci not found on the node (install pciutils)",
                            reason=ErrorReason.TOOL_MISSING, collector="lspci")]
    if result.rc != 0:
        return [ctx.finding("gpu.pci_visible", Verdict.ERROR, f"lspci exited {result.rc}",
                            reason=ErrorReason.UNPARSEABLE, collector="lspci")]
    on_bus = len(ctx.facts["lspci"].gpus)
    status = ctx.facts["smi_status"]
    if status.usable and ctx.facts.get("smi") is not None:
        seen = len(ctx.facts["smi"].gpus)
    elif status.summary.startswith("nvidia-smi found no GPU"):
        seen = 0
    else:
        return [ctx.finding("gpu.pci_visible", Verdict.ERROR,
                            f"lspci shows {on_bus} NVIDIA GPU(s); not compared: {status.summary}",
                            observed=on_bus, reason=status.reason or ErrorReason.NOT_RUN, collector="lspci")]
    if on_bus == seen:
        return [ctx.finding("gpu.pci_visible", Verdict.PASS, f"{on_bus} GPUs on the PCIe bus, all seen by the driver",
                            observed=on_bus, expected=seen, collector="lspci")]
    return [ctx.finding("gpu.pci_visible", Verdict.FAIL,
                        f"{on_bus} NVIDIA GPUs on the PCIe bus but the driver lists {seen}: a GPU is lost "
                        "(fell off the bus or failed to initialise)", observed=on_bus, expected=seen,
                        remediation=Remediation.ISOLATE, collector="lspci")]


@register("gpu.persistence", collectors=(SMI,))
def gpu_persistence(ctx: NodeContext) -> list[Finding]:
    """Persistence mode is Enabled on every GPU (nvidia-persistenced running). Remediation: TUNE
    (``systemctl enable --now nvidia-persistenced``; ``nvdeploy optimize`` does it). ERROR naming each GPU whose
    persistence mode could not be read; FAIL (ISOLATE) for a lost GPU.
    """
    gated = smi_gate(ctx, "gpu.persistence")
    if gated:
        return gated
    gpus = ctx.facts["smi"].gpus
    split = split_gpus(ctx, "gpu.persistence", "persistence mode", ("persistence_mode",), required=True)
    off = [g for g in split.known if g.persistence_mode is False]
    findings = list(split.findings)
    if off:
        labels = f" ({', '.join(f'GPU{g.index}' for g in off)})" if len(off) < len(gpus) else ""
        findings.insert(0, ctx.finding("gpu.persistence", Verdict.FAIL,
                                       f"persistence mode disabled on {len(off)} of {len(gpus)} GPUs{labels}",
                                       observed="Disabled", expected="Enabled", remediation=Remediation.TUNE,
                                       collector=SMI))
    if findings:
        return findings
    return [ctx.finding("gpu.persistence", Verdict.PASS, "persistence mode enabled on every GPU", observed="Enabled",
                        expected="Enabled", collector=SMI)]
