"""GPU memory health: ECC mode, uncorrectable ECC errors, remapped rows, retired pages.

Every check judges each GPU on its own: a GPU whose value is unknown is ERROR naming that GPU (a lost GPU is FAIL
ISOLATE), even when the other GPUs of the node are fine (see :func:`nvdeploy.checks.common.split_gpus`).
"""

from __future__ import annotations

from nvdeploy.checks.common import SMI, gpu_label, smi_gate, split_gpus
from nvdeploy.checks.registry import NodeContext, register
from nvdeploy.results import Finding, Remediation, Verdict


@register("memory.ecc_mode", collectors=(SMI,))
def ecc_mode(ctx: NodeContext) -> list[Finding]:
    """ECC is enabled on every GPU when the profile requires it (``gpu.ecc_required``).

    FAIL (TUNE: ``nvidia-smi -e 1`` and a reboot) naming the GPUs with ECC disabled; ERROR naming each GPU whose
    ECC mode could not be read; FAIL (ISOLATE) for a lost GPU.
    """
    if not ctx.profile.gpu.ecc_required:
        return [ctx.finding("memory.ecc_mode", Verdict.SKIP, "ECC not required by the profile")]
    gated = smi_gate(ctx, "memory.ecc_mode")
    if gated:
        return gated
    split = split_gpus(ctx, "memory.ecc_mode", "ECC mode", ("ecc_mode",), required=True)
    off = [g for g in split.known if g.ecc_mode is False]
    findings = list(split.findings)
    if off:
        findings.insert(0, ctx.finding("memory.ecc_mode", Verdict.FAIL,
                                       f"ECC disabled on {', '.join(gpu_label(g) for g in off)}",
                                       observed="Disabled", expected="Enabled",
                                       gpu=off[0].index if len(off) == 1 else None, remediation=Remediation.TUNE,
                                       collector=SMI))
    if findings:
        return findings
    return [ctx.finding("memory.ecc_mode", Verdict.PASS, "ECC enabled on every GPU", observed="Enabled",
                        expected="Enabled", collector=SMI)]


@register("memory.ecc_errors", collectors=(SMI,))
def ecc_errors(ctx: NodeContext) -> list[Finding]:
    """No volatile (since the last driver load) uncorrectable ECC error on any GPU.

    FAIL with RESET_GPU for volatile uncorrectable errors; WARN with MONITOR when only the lifetime
    (aggregate) counter is non-zero. ERROR naming the GPU whose counters read N/A or an error (``Unknown
    Error``) while the profile requires ECC: one unreadable GPU is never hidden by seven clean ones. A GPU with
    ECC disabled has no counters: memory.ecc_mode reports it. FAIL (ISOLATE) for a lost GPU.
    """
    gated = smi_gate(ctx, "memory.ecc_errors")
    if gated:
        return gated
    gpus = ctx.facts["smi"].gpus
    # ECC off: the counters are N/A by design, and memory.ecc_mode already FAILs that GPU.
    judged = [g for g in gpus if not (g.ecc_mode is False and g.ecc_uncorrectable_volatile is None
                                      and not g.errors and not g.lost)]
    split = split_gpus(ctx, "memory.ecc_errors", "uncorrectable ECC error counters", ("ecc_uncorrectable_volatile",),
                       required=ctx.profile.gpu.ecc_required, error_fields=("ecc_uncorrectable_aggregate",),
                       gpus=judged)
    findings = []
    for gpu in split.known:
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
    findings.extend(split.findings)
    if findings:
        return findings
    if not split.known:
        return [ctx.finding("memory.ecc_errors", Verdict.SKIP, "GPUs do not report ECC error counters (ECC not "
                            "required by the profile)")]
    return [ctx.finding("memory.ecc_errors", Verdict.PASS,
                        f"no uncorrectable ECC errors on {len(split.known)} GPU(s)", observed=0, expected=0,
                        collector=SMI)]


@register("memory.remapped_rows", collectors=(SMI,))
def remapped_rows(ctx: NodeContext) -> list[Finding]:
    """Row remapping (A100 and later): a pending remap needs a GPU reset (FAIL, RESET_GPU); a remapping failure
    means the GPU ran out of spare rows (FAIL, ISOLATE: replace the GPU). SKIP on GPUs without row remapping;
    ERROR naming a GPU that reads N/A or an error while the node's other GPUs report it; FAIL for a lost GPU.
    """
    gated = smi_gate(ctx, "memory.remapped_rows")
    if gated:
        return gated
    split = split_gpus(ctx, "memory.remapped_rows", "row remapping state",
                       ("remapped_rows_pending", "remapped_rows_failure"), required=False)
    findings = []
    for gpu in split.known:
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
    findings.extend(split.findings)
    if findings:
        return findings
    if not split.known:
        return [ctx.finding("memory.remapped_rows", Verdict.SKIP, "GPUs do not report row remapping")]
    return [ctx.finding("memory.remapped_rows", Verdict.PASS, "no pending or failed row remapping", collector=SMI)]


@register("memory.retired_pages", collectors=(SMI,))
def retired_pages(ctx: NodeContext) -> list[Finding]:
    """Page retirement (pre-Ampere GPUs): a pending retirement needs a reboot or GPU reset (FAIL, RESET_GPU);
    pages retired for double-bit errors are WARN (MONITOR). SKIP where the GPU does not report it; ERROR naming a
    GPU that reads N/A or an error while the node's other GPUs report it; FAIL for a lost GPU.
    """
    gated = smi_gate(ctx, "memory.retired_pages")
    if gated:
        return gated
    split = split_gpus(ctx, "memory.retired_pages", "page retirement state", ("retired_pages_pending",),
                       required=False, error_fields=("retired_pages_double_bit",))
    findings = []
    for gpu in split.known:
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
    findings.extend(split.findings)
    if findings:
        return findings
    if not split.known:
        return [ctx.finding("memory.retired_pages", Verdict.SKIP, "GPUs do not report page retirement")]
    return [ctx.finding("memory.retired_pages", Verdict.PASS, "no pending page retirement", collector=SMI)]
