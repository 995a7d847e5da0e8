"""PCIe link checks, from the GPU facts ``nvidia-smi -q -x`` already gathered (no extra command)."""

from __future__ import annotations

from nvdeploy.checks.common import SMI, gpu_label, smi_gate, split_gpus
from nvdeploy.checks.gating import section
from nvdeploy.checks.registry import NodeContext, register
from nvdeploy.results import Finding, Remediation, Verdict


def _link(gen: object, width: object) -> str:
    return f"Gen{gen} x{width}"


@register("pcie.link", collectors=(SMI,))
def pcie_link(ctx: NodeContext) -> list[Finding]:
    """Reads each GPU's PCIe link from ``nvidia-smi -q -x`` (``pci_gpu_link_info``).

    PASS: on every GPU the current link generation and width equal the maximum the GPU and slot support.
    FAIL (naming the GPU): a link trained below its maximum: a narrower width (x8 instead of x16) means a badly
    seated GPU, riser or cable: ISOLATE and reseat; a lower generation alone: REBOOT, then ISOLATE if it stays.
    WARN (INVESTIGATE): the maximum itself is below the profile's ``pcie: {gen, width}`` (a slot, BIOS setting or
    retimer limits every link). ERROR naming each GPU whose link nvidia-smi did not report (FAIL, ISOLATE for a
    lost GPU).

    Parameters: the profile's ``pcie.gen`` and ``pcie.width``. Note: GPUs that lower their link generation to
    save power when idle would show here; datacenter GPUs with persistence mode keep the link at speed.
    """
    gated = smi_gate(ctx, "pcie.link")
    if gated:
        return gated
    expected = section(ctx, "pcie")
    findings: list[Finding] = []
    split = split_gpus(ctx, "pcie.link", "PCIe link",
                       ("pcie_gen_current", "pcie_gen_max", "pcie_width_current", "pcie_width_max"), required=True)
    for gpu in split.known:
        values = (gpu.pcie_gen_current, gpu.pcie_gen_max, gpu.pcie_width_current, gpu.pcie_width_max)
        gen_cur, gen_max, width_cur, width_max = values
        if width_cur < width_max or gen_cur < gen_max:
            narrow = width_cur < width_max
            findings.append(ctx.finding(
                "pcie.link", Verdict.FAIL,
                f"{gpu_label(gpu)}: PCIe link at {_link(gen_cur, width_cur)}, capable of {_link(gen_max, width_max)}"
                + (": reseat the GPU/riser" if narrow else ": link trained below its generation"),
                observed=_link(gen_cur, width_cur), expected=_link(gen_max, width_max), gpu=gpu.index,
                remediation=Remediation.ISOLATE if narrow else Remediation.REBOOT, collector=SMI))
        elif expected and (gen_max < expected.get("gen", 0) or width_max < expected.get("width", 0)):
            findings.append(ctx.finding(
                "pcie.link", Verdict.WARN,
                f"{gpu_label(gpu)}: PCIe link limited to {_link(gen_max, width_max)} by the slot or BIOS; the "
                f"profile expects {_link(expected.get('gen'), expected.get('width'))}",
                observed=_link(gen_max, width_max), expected=_link(expected.get("gen"), expected.get("width")),
                gpu=gpu.index, remediation=Remediation.INVESTIGATE, collector=SMI))
    findings.extend(split.findings)
    if findings:
        return findings
    gpus = split.known
    links = sorted({_link(g.pcie_gen_current, g.pcie_width_current) for g in gpus})
    return [ctx.finding("pcie.link", Verdict.PASS, f"every GPU's PCIe link at its maximum ({', '.join(links)})",
                        observed=", ".join(links),
                        expected=_link(expected.get("gen"), expected.get("width")) if expected else None,
                        collector=SMI)]
