"""GPU memory health: ECC mode, uncorrectable ECC errors, remapped rows, retired pages."""

from __future__ import annotations

from nvdeploy.checks.common import SMI, gpu_label, smi_gate
from nvdeploy.checks.registry import NodeContext, register
from nvdeploy.results import ErrorReason, Finding, Remediation, Verdict


@register("memory.ecc_mode", collectors=(SMI,))
def ecc_mode(ctx: NodeContext) -> list[Finding]:
    """ECC is enabled on every GPU when the profile requires it (``gpu.ecc_required``).
    Remediation: TUNE (``nvidia-smi -e 1`` and a reboot).
    """
    if not ctx.profile.gpu.ecc_required:
        return [ctx.finding("memory.ecc_mode", Verdict.SKIP, "ECC not required by the profile")]
    gated = smi_gate(ctx, "memory.ecc_mode")
    if gated:
        return gated
    gpus = ctx.facts["smi"].gpus
    off = [g for g in gpus if g.ecc_mode is False]
    unknown = [g for g in gpus if g.ecc_mode is None]
    if off:
        return [ctx.finding("memory.ecc_mode", Verdict.FAIL, f"ECC disabled on {', '.join(gpu_label(g) for g in off)}",
                            observed="Disabled", expected="Enabled", remediation=Remediation.TUNE, collector=SMI)]
    if unknown:
        return [ctx.finding("memory.ecc_mode", Verdict.ERROR, f"{len(unknown)} GPU(s) did not report an ECC mode",
                            reason=ErrorReason.UNPARSEABLE, collector=SMI)]
    return [ctx.finding("memory.ecc_mode", Verdict.PASS, "ECC enabled on every GPU", observed="Enabled",
                        expected="Enabled", collector=SMI)]


@register("memory.ecc_errors", collectors=(SMI,))
def ecc_errors(ctx: NodeContext) -> list[Finding]:
    """No volatile (since the last driver load) uncorrectable ECC error on any GPU.

    FAIL with RESET_GPU for volatile uncorrectable errors; WARN with MONITOR when only the lifetime
    (aggregate) counter is non-zero.
    """
    gated = smi_gate(ctx, "memory.ecc_errors")
    if gated:
        return gated
    findings = []
    for gpu in ctx.facts["smi"].gpus:
        if gpu.ecc_uncorrectable_volatile:
            findings.append(ctx.finding("memory.ecc_errors", Verdict.FAIL,
                                        f"{gpu_label(gpu)}: {gpu.ecc_uncorrectable_volatile} volatile uncorrectable "
                                        "ECC error(s)", observed=gpu.ecc_uncorrectable_volatile, expected=0,
                                        gpu=gpu.index, remediation=Remediation.RESET_GPU, collector=SMI))
        elif gpu.ecc_uncorrectable_aggregate:
            findings.append(ctx.finding("memory.ecc_errors", Verdict.WARN,
                                        f"{gpu_label(gpu)}: {gpu.ecc_uncorrectable_aggregate} uncorrectable ECC "
                                        "error(s) over its lifetime (none since the driver loaded)",
                                        observed=gpu.ecc_uncorrectable_aggregate, expected=0, gpu=gpu.index,
                                        remediation=Remediation.MONITOR, collector=SMI))
    if findings:
        return findings
    if ctx.profile.gpu.ecc_required and all(g.ecc_uncorrectable_volatile is None for g in ctx.facts["smi"].gpus):
        return [ctx.finding("memory.ecc_errors", Verdict.ERROR, "no GPU reported ECC error counters",
                            reason=ErrorReason.UNPARSEABLE, collector=SMI)]
    return [ctx.finding("memory.ecc_errors", Verdict.PASS, "no uncorrectable ECC errors", observed=0, expected=0,
                        collector=SMI)]


@register("memory.remapped_rows", collectors=(SMI,))
def remapped_rows(ctx: NodeContext) -> list[Finding]:
    """Row remapping (A100 and later): a pending remap needs a GPU reset (FAIL, RESET_GPU); a remapping failure
    means the GPU ran out of spare rows (FAIL, ISOLATE: replace the GPU). SKIP on GPUs without row remapping.
    """
    gated = smi_gate(ctx, "memory.remapped_rows")
    if gated:
        return gated
    gpus = ctx.facts["smi"].gpus
    findings = []
    for gpu in gpus:
        if gpu.remapped_rows_failure:
            findings.append(ctx.finding("memory.remapped_rows", Verdict.FAIL,
                                        f"{gpu_label(gpu)}: row remapping failure: replace the GPU",
                                        observed="failure", expected="no failure", gpu=gpu.index,
                                        remediation=Remediation.ISOLATE, collector=SMI))
        elif gpu.remapped_rows_pending:
            findings.append(ctx.finding("memory.remapped_rows", Verdict.FAIL,
                                        f"{gpu_label(gpu)}: row remapping pending: reset the GPU to apply it",
                                        observed="pending", expected="none pending", gpu=gpu.index,
                                        remediation=Remediation.RESET_GPU, collector=SMI))
    if findings:
        return findings
    if all(g.remapped_rows_pending is None and g.remapped_rows_failure is None for g in gpus):
        return [ctx.finding("memory.remapped_rows", Verdict.SKIP, "GPUs do not report row remapping")]
    return [ctx.finding("memory.remapped_rows", Verdict.PASS, "no pending or failed row remapping", collector=SMI)]


@register("memory.retired_pages", collectors=(SMI,))
def retired_pages(ctx: NodeContext) -> list[Finding]:
    """Page retirement (pre-Ampere GPUs): a pending retirement needs a reboot or GPU reset (FAIL, RESET_GPU);
    pages retired for double-bit errors are WARN (MONITOR). SKIP where the GPU does not report it.
    """
    gated = smi_gate(ctx, "memory.retired_pages")
    if gated:
        return gated
    gpus = ctx.facts["smi"].gpus
    findings = []
    for gpu in gpus:
        if gpu.retired_pages_pending:
            findings.append(ctx.finding("memory.retired_pages", Verdict.FAIL,
                                        f"{gpu_label(gpu)}: page retirement pending: reset the GPU",
                                        observed="pending", gpu=gpu.index, remediation=Remediation.RESET_GPU,
                                        collector=SMI))
        elif gpu.retired_pages_double_bit:
            findings.append(ctx.finding("memory.retired_pages", Verdict.WARN,
                                        f"{gpu_label(gpu)}: {gpu.retired_pages_double_bit} page(s) retired for "
                                        "double-bit errors", observed=gpu.retired_pages_double_bit, expected=0,
                                        gpu=gpu.index, remediation=Remediation.MONITOR, collector=SMI))
    if findings:
        return findings
    if all(g.retired_pages_pending is None for g in gpus):
        return [ctx.finding("memory.retired_pages", Verdict.SKIP, "GPUs do not report page retirement")]
    return [ctx.finding("memory.retired_pages", Verdict.PASS, "no pending page retirement", collector=SMI)]
