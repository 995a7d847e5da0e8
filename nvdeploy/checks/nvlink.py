"""NVLink checks: every link up at the expected speed, and the NVLink topology between GPU pairs."""

from __future__ import annotations

import re

from nvdeploy.checks.gating import first_line, raw_gate, section
from nvdeploy.checks.registry import NodeContext, register
from nvdeploy.results import ErrorReason, Finding, Remediation, Verdict

NVLINK = "nvidia_smi_nvlink"
TOPO = "nvidia_smi_topo"
SPEED_TOLERANCE = 0.01  # nvidia-smi prints 26.562 for a 26.5625 GB/s link
_NV_RE = re.compile(r"^NV(\d+)$")


def _smi_rc_gate(ctx: NodeContext, check_id: str, collector: str, what: str) -> list[Finding] | None:
    result = ctx.results[collector]
    if result.rc == 0:
        return None
    reason = ErrorReason.NOT_RUN if result.rc in (6, 9, 12, 14, 15, 18) else ErrorReason.UNPARSEABLE
    return [ctx.finding(check_id, Verdict.ERROR,
                        f"not evaluated: {what} exited {result.rc}: {first_line(ctx, collector) or 'no output'}",
                        reason=reason, collector=collector)]


@register("nvlink.links", collectors=(NVLINK,))
def nvlink_links(ctx: NodeContext) -> list[Finding]:
    """Runs ``nvidia-smi nvlink -s``: every NVLink of every GPU up at the expected speed.

    PASS: every GPU lists the profile's ``nvlink.links`` links, each active at ``nvlink.speed_gbps`` GB/s (1%
    tolerance). FAIL per GPU for an inactive link or a slower one (REBOOT; if it stays down, ISOLATE: a bad
    NVLink/NVSwitch connection needs the baseboard serviced). ERROR when nvidia-smi failed or the GPUs are in MIG
    mode (NVLink state cannot be read), and ERROR naming the GPU and links whose state reads neither a speed nor
    inactive (``Unknown Error``): unknown is not down and not up. SKIP for SKUs without NVLink (no ``nvlink``
    section in the profile).
    """
    expected = section(ctx, "nvlink")
    if not expected:
        return [ctx.finding("nvlink.links", Verdict.SKIP, "the SKU has no NVLink (no nvlink section in the profile)")]
    links, speed = int(expected["links"]), float(expected["speed_gbps"])
    gated = raw_gate(ctx, "nvlink.links", NVLINK, "nvidia-smi nvlink", "the NVIDIA driver is not installed")
    if gated or (gated := _smi_rc_gate(ctx, "nvlink.links", NVLINK, "nvidia-smi nvlink -s")):
        return gated
    facts = ctx.facts.get("nvlink")
    if facts is None or not facts.gpus:
        return [ctx.finding("nvlink.links", Verdict.ERROR, "nvidia-smi nvlink -s listed no GPU",
                            reason=ErrorReason.UNPARSEABLE, collector=NVLINK)]
    mig = [g for g in facts.gpus if g.message and "mig" in g.message.lower()]
    if mig:
        return [ctx.finding("nvlink.links", Verdict.ERROR,
                            f"NVLink state not readable: {len(mig)} GPU(s) in MIG mode ({mig[0].message})",
                            reason=ErrorReason.NOT_RUN, remediation=Remediation.TUNE, collector=NVLINK)]
    want = f"{links} x {speed:g} GB/s"
    findings = []
    for gpu in facts.gpus:
        unread = gpu.unknown
        if unread:
            findings.append(ctx.finding(
                "nvlink.links", Verdict.ERROR,
                f"GPU{gpu.index}: state of link(s) {', '.join(str(n) for n, _ in unread)} unknown "
                f"({unread[0][1]!r})", observed="unknown", expected=want, gpu=gpu.index if gpu.index >= 0 else None,
                reason=ErrorReason.UNPARSEABLE, collector=NVLINK))
        skip = {n for n, _ in unread}
        active = [link for link in gpu.links if link.active]
        down = [link.link for link in gpu.links if not link.active and link.link not in skip]
        floor = speed * (1 - SPEED_TOLERANCE)
        slow = [link for link in active if link.speed_gbps is not None and link.speed_gbps < floor]
        problems = []
        if down:
            problems.append(f"link(s) {', '.join(map(str, down))} inactive")
        if len(gpu.links) < links:
            problems.append(f"{len(gpu.links)} of {links} links listed" + (f" ({gpu.message})" if gpu.message else ""))
        if slow:
            problems.append("link(s) " + ", ".join(f"{link.link} at {link.speed_gbps:g} GB/s" for link in slow))
        if problems:
            findings.append(ctx.finding(
                "nvlink.links", Verdict.FAIL,
                f"GPU{gpu.index}: {len(active) - len(slow)} of {links} NVLinks up at {speed:g} GB/s; "
                + "; ".join(problems), observed=f"{len(active) - len(slow)} x {speed:g} GB/s", expected=want,
                gpu=gpu.index if gpu.index >= 0 else None, remediation=Remediation.REBOOT, collector=NVLINK))
    if findings:
        return findings
    return [ctx.finding("nvlink.links", Verdict.PASS, f"{len(facts.gpus)} GPUs x {links} NVLinks up at {speed:g} GB/s",
                        observed=want, expected=want, collector=NVLINK)]


@register("nvlink.topology", collectors=(TOPO,))
def nvlink_topology(ctx: NodeContext) -> list[Finding]:
    """Runs ``nvidia-smi topo -m``: NV# between every GPU pair on NVSwitch SKUs.

    PASS (NVSwitch SKUs, ``gpu.nvswitch: true``): every pair of GPUs is connected by NVLink (``NV#``), with as
    many bonded links as the profile's ``nvlink.links`` when stated (``NV18`` on HGX H100). FAIL naming the pairs
    (and the GPU they share) otherwise: a GPU reached over PCIe (``SYS``/``NODE``/``PIX``) or over fewer links has
    lost NVLinks (REBOOT; ISOLATE if it stays). ERROR when nvidia-smi failed or printed no matrix. SKIP on SKUs
    without NVSwitch, where GPU pairs legitimately talk over PCIe or NVLink bridges.
    """
    if not ctx.profile.gpu.nvswitch:
        return [ctx.finding("nvlink.topology", Verdict.SKIP, "no NVSwitch on this SKU: GPU pairs may use PCIe")]
    gated = raw_gate(ctx, "nvlink.topology", TOPO, "nvidia-smi topo", "the NVIDIA driver is not installed")
    if gated or (gated := _smi_rc_gate(ctx, "nvlink.topology", TOPO, "nvidia-smi topo -m")):
        return gated
    topo = ctx.facts.get("topo")
    if topo is None or not topo.gpus:
        return [ctx.finding("nvlink.topology", Verdict.ERROR, "nvidia-smi topo -m printed no GPU matrix",
                            reason=ErrorReason.UNPARSEABLE, collector=TOPO)]
    links = section(ctx, "nvlink").get("links")
    want = f"NV{links}" if links else "NV#"
    bad: dict[str, str] = {}
    for i, first in enumerate(topo.gpus):
        for second in topo.gpus[i + 1:]:
            cell = topo.matrix.get(first, {}).get(second, "?")
            match = _NV_RE.match(cell)
            if match is None or (links and int(match.group(1)) < int(links)):
                bad[f"{first}-{second}"] = cell
    if not bad:
        return [ctx.finding("nvlink.topology", Verdict.PASS,
                            f"all {len(topo.gpus) * (len(topo.gpus) - 1) // 2} GPU pairs connected by {want}",
                            observed=want, expected=want, collector=TOPO)]
    pairs = [pair.split("-") for pair in bad]
    common = set(pairs[0]).intersection(*pairs[1:]) if len(pairs) > 1 else set()
    shared = next(iter(common)) if len(common) == 1 else None
    listed = ", ".join(f"{pair} {cell}" for pair, cell in list(bad.items())[:8]) + (" ..." if len(bad) > 8 else "")
    where = f"{shared} has lost NVLinks: " if shared else ""
    return [ctx.finding("nvlink.topology", Verdict.FAIL,
                        f"{where}{len(bad)} GPU pair(s) not connected by {want}: {listed}", observed=dict(bad),
                        expected=want, gpu=int(shared[3:]) if shared else None, remediation=Remediation.REBOOT,
                        collector=TOPO)]
