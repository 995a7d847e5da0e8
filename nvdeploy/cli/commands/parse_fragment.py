"""``parse --verdicts`` on a pasted *fragment*: it FAILs what it shows and judges nothing else.

A fragment (the parser's ``fragment`` fact: rows without their header, a block of ``nvidia-smi -q`` without
``Attached GPUs``, XML without its root, a kernel log that does not start at boot; read off the facts for a
topology matrix, NVLink or ibstat listing cut short, see :func:`is_fragment`) is a piece of a node's output.
What it does not show says nothing about the node, so:

- a check whose input is not in the piece is SKIP "not in the pasted text" (never PASS, and never a FAIL read
  from an absence, such as "1 of 8 GPUs" from a piece that shows one GPU);
- a check whose input is in it judges only the GPUs or rows it shows: its FAIL and WARN stand, its PASS says
  "in the pasted text";
- a check that proves an absence (no Xid since boot) cannot pass on a piece: SKIP;
- one ERROR finding (``parse.fragment``) says that the rest cannot be judged, so the overall verdict of a piece
  is FAIL when it shows a failure and ERROR otherwise, never PASS. ``dcgmi diag`` pieces say so in their own
  finding (checks/dcgm.py).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Callable, Mapping

from nvdeploy.checks import NodeContext
from nvdeploy.results import ErrorReason, Finding, Remediation, Verdict

NOT_SHOWN = "not in the pasted text"
FRAGMENT_CHECK = "parse.fragment"
# Per check: the GPU fields a GPU must show (all of them) to be judged by it in a fragment, and their name.
SMI_FIELDS: dict[str, tuple[tuple[str, ...], str]] = {
    "gpu.model": (("name",), "the product name is"),
    "gpu.memory": (("memory_total_mib",), "the total memory is"),
    "gpu.persistence": (("persistence_mode",), "the persistence mode is"),
    "memory.ecc_mode": (("ecc_mode",), "the ECC mode is"),
    "memory.ecc_errors": (("ecc_uncorrectable_volatile",), "the volatile ECC error counters are"),
    "memory.remapped_rows": (("remapped_rows_pending", "remapped_rows_failure"), "the row remapping state is"),
    "memory.retired_pages": (("retired_pages_pending",), "the page retirement state is"),
    "clocks.throttle": (("clocks_event_reasons_active",), "the clock event (throttle) reasons are"),
    "clocks.temperature": (("temperature_c",), "the GPU temperature is"),
    "clocks.power_limit": (("power_limit_w",), "the power limit is"),
    "gpu.mig": (("mig_mode",), "the MIG mode is"),
    "gpu.recovery_action": (("gpu_recovery_action",), "the GPU recovery action is"),
    "nvlink.fabric": (("fabric_state",), "the NVLink fabric state is"),
    "pcie.link": (("pcie_gen_current", "pcie_gen_max", "pcie_width_current", "pcie_width_max"),
                  "the PCIe link generation and width are"),
}
# What each format's piece lacks, for the fragment finding.
WHAT_IS_MISSING = {
    "nvidia-smi-xml": "no <nvidia_smi_log> root, or cut off before its end",
    "nvidia-smi-text": "no 'Attached GPUs' header or table title, fewer GPU sections than attached GPUs, a GPU "
                       "section cut before its end, or '[...]' elisions",
    "nvidia-smi-csv": "CSV rows without the header line",
    "nvidia-smi-topo": "matrix rows without the header, or fewer rows than GPUs",
    "nvidia-smi-nvlink": "a GPU's link list cut off",
    "nccl-tests": "result rows without the table header, or a table cut before its summary",
    "ibstat": "ports before any device line, or the listing cut off",
    "kmsg": "a kernel log that does not start at boot",
    "dcgmi-discovery": "GPU rows without the 'N GPUs found.' line, or fewer rows than it says",
}

Run = Callable[[NodeContext], list[Finding]]


def is_fragment(parsed: Any, fmt: str = "", profile: Any = None) -> bool:
    """The parser's ``fragment`` fact; for the formats whose parser has none, read off the facts: a topology
    matrix with fewer rows than GPUs, an NVLink list cut at either end (judged against ``profile``: a last GPU
    with fewer links than the SKU has), an ibstat listing cut off or with ports before any device."""
    if fmt == "nvidia-smi-topo":
        return bool(parsed.gpus) and (getattr(parsed, "fragment", False) or
                                      any(gpu not in parsed.matrix for gpu in parsed.gpus))
    if fmt == "nvidia-smi-nvlink":
        return bool(cut_nvlink_gpus(parsed, profile_links(profile)))
    if fmt == "ibstat":
        return _ibstat_cut(parsed)
    if fmt == "nccl-tests":  # rows without the header, or a table cut before its summary footer
        return bool(parsed.fragment or (parsed.rows and not parsed.complete and not parsed.errors))
    if fmt == "dcgmi-discovery":  # GPU rows without "N GPUs found.", or fewer rows than it says
        found = parsed.gpus_found
        return bool(parsed.gpus) and (found is None or len(parsed.gpus) < found)
    return bool(getattr(parsed, "fragment", False))


def profile_links(profile: Any) -> int | None:
    """The SKU's NVLinks per GPU (the profile's ``nvlink.links``), None without an nvlink section."""
    section = profile.extra.get("nvlink") if profile is not None else None
    try:
        return int(section["links"]) if isinstance(section, Mapping) and "links" in section else None
    except (TypeError, ValueError):
        return None


def cut_nvlink_gpus(facts: Any, links: int | None = None) -> list[Any]:
    """GPUs whose link list the piece cuts: link lines before any ``GPU N:`` line (index -1), and a last GPU
    that lists fewer links than another one or than the SKU's ``links``, or none, and no message saying why (the
    paste ends there). nvidia-smi lists every link of a GPU, up or down, so a short list elsewhere is a finding, not
    a cut."""
    gpus = list(getattr(facts, "gpus", ()))
    cut = [g for g in gpus if g.index < 0]
    if gpus and gpus[-1].index >= 0:
        last, others = gpus[-1], [g for g in gpus[:-1] if g.index >= 0]
        most = max([len(g.links) for g in others] + [links or 0])
        # a GPU that printed why it has no links ("does not have or support nvlink", MIG mode) is whole
        if not last.message and (len(last.links) < most or not last.links):
            cut.append(last)
    return cut


def _ibstat_cut(facts: Any) -> bool:
    if getattr(facts, "fragment", False):
        return True
    devices = getattr(facts, "devices", ())
    return bool(devices) and (not devices[-1].ports or devices[-1].ports[-1].state is None)


def skip(ctx: NodeContext, check_id: str, what: str) -> Finding:
    return ctx.finding(check_id, Verdict.SKIP, f"{what} {NOT_SHOWN}")


def shown_only(findings: list[Finding], where: str) -> list[Finding]:
    """PASS findings of a piece hold for what it shows, and say so."""
    return [replace(f, summary=f"{f.summary} ({where})") if f.verdict is Verdict.PASS else f for f in findings]


def _missing(fmt: str, parsed: Any) -> str:
    """What makes this nvidia-smi piece a piece, in words; the format's general description otherwise."""
    if fmt in ("nvidia-smi-xml", "nvidia-smi-text") and getattr(parsed, "gpus", ()):
        warnings = " ".join(parsed.warnings)
        count, sections = parsed.gpu_count_reported, len(parsed.gpus)
        if "no <nvidia_smi_log> root" in warnings:
            return "no <nvidia_smi_log> root"
        if "cut off before its end" in warnings:
            return "the XML is cut off before its end"
        if "without the table's title" in warnings:
            return "table rows without the table's title"
        if count is None:
            return "no 'Attached GPUs' line"
        if count != sections:
            return f"{sections} GPU section(s) of {count} attached GPUs"
        if "[...]" in warnings:
            return "'[...]' elisions"
        if "no 'Processes' section" in warnings:
            return "GPU section(s) cut before their end (no 'Processes' section)"
    return WHAT_IS_MISSING.get(fmt, "a piece of the output")


def fragment_finding(ctx: NodeContext, fmt: str, parsed: Any = None) -> Finding:
    what = _missing(fmt, parsed)
    return ctx.finding(FRAGMENT_CHECK, Verdict.ERROR,
                       f"the input is a fragment ({what}): what it does not show cannot be judged, so it cannot "
                       "show that the node is healthy; paste or capture the whole output for a verdict",
                       reason=ErrorReason.INCOMPLETE)


def smi_check(check_id: str, ctx: NodeContext, run: Run) -> list[Finding]:
    """One nvidia-smi check on a fragment: over the GPUs that show its fields, else SKIP."""
    smi = ctx.facts.get("smi")
    if smi is None:  # rows without their header (CSV noheader): which column is what is not in the piece
        return [skip(ctx, check_id, "which value each column holds (the CSV header line) is")]
    lost = any(g.lost for g in smi.gpus)
    if check_id == "gpu.count":
        return _gpu_count(ctx, smi)
    if check_id in ("driver.loaded", "driver.version"):
        if smi.driver_version:
            return shown_only(run(ctx), "in the pasted text")
        if lost and check_id == "driver.loaded":  # the lost GPU is shown; the driver version is not
            return [replace(f, summary=f.summary.replace("driver None loaded but ", "")) for f in run(ctx)]
        return [skip(ctx, check_id, "the driver version is")]
    if check_id not in SMI_FIELDS:  # a check of the whole node (power.node sums every GPU): a piece cannot feed it
        return [ctx.finding(check_id, Verdict.SKIP, f"needs the whole output, which is {NOT_SHOWN}")]
    fields, what = SMI_FIELDS[check_id]
    gpus = tuple(g for g in smi.gpus if g.lost or all(name in g.shown for name in fields))
    if not gpus:
        return [skip(ctx, check_id, what)]
    facts = dict(ctx.facts, smi=replace(smi, gpus=gpus))
    return shown_only(run(replace(ctx, facts=facts)), f"{len(gpus)} GPU(s) in the pasted text")


def text_check(check_id: str, ctx: NodeContext, run: Run) -> list[Finding]:
    """One nvidia-smi check on whole pasted text (``-q``, the default table, CSV): a section, cell or column the
    text does not print is not in it, whatever its header says (the table has no throttle reasons, a CSV has the
    columns asked for), so its check is SKIP "not in the pasted text", never PASS and never "not reported"."""
    smi = ctx.facts.get("smi")
    if smi is None:
        return run(ctx)
    if check_id in ("driver.loaded", "driver.version") and not smi.driver_version and not any(
            g.lost for g in smi.gpus):
        return [skip(ctx, check_id, "the driver version is")]
    if check_id not in SMI_FIELDS or not any(g.shown for g in smi.gpus):
        return run(ctx)
    fields, what = SMI_FIELDS[check_id]
    gpus = tuple(g for g in smi.gpus if g.lost or all(name in g.shown for name in fields))
    if not gpus:
        return [skip(ctx, check_id, what)]
    if len(gpus) == len(smi.gpus):
        return run(ctx)
    facts = dict(ctx.facts, smi=replace(smi, gpus=gpus))
    return shown_only(run(replace(ctx, facts=facts)), f"{len(gpus)} of {len(smi.gpus)} GPU(s) in the pasted text")


def _gpu_count(ctx: NodeContext, smi: Any) -> list[Finding]:
    """A piece shows some GPU sections, not how many the node has: only an ``Attached GPUs`` line says that."""
    expected = ctx.profile.gpu.count
    reported = smi.gpu_count_reported
    if reported is None:
        return [skip(ctx, "gpu.count", "the number of GPUs (nvidia-smi's 'Attached GPUs') is")]
    if reported == expected:
        return [ctx.finding("gpu.count", Verdict.PASS, f"{reported} GPUs attached (the pasted 'Attached GPUs')",
                            observed=reported, expected=expected, collector="nvidia_smi_xml")]
    return [ctx.finding("gpu.count", Verdict.FAIL, f"{reported} of {expected} expected GPUs attached (the pasted "
                        "'Attached GPUs')", observed=reported, expected=expected, remediation=Remediation.ISOLATE,
                        collector="nvidia_smi_xml")]


def topo_check(ctx: NodeContext, run: Run) -> list[Finding]:
    """The GPU pairs among the matrix rows the piece shows; a pair whose row is not shown is not judged."""
    topo = ctx.facts["topo"]
    rows = tuple(gpu for gpu in topo.gpus if gpu in topo.matrix)
    if not ctx.profile.gpu.nvswitch:
        return run(ctx)  # SKIP: GPU pairs may use PCIe
    if len(rows) < 2:
        return [skip(ctx, "nvlink.topology", "a GPU pair's row of the topology matrix is")]
    facts = dict(ctx.facts, topo=replace(topo, gpus=rows))
    return shown_only(run(replace(ctx, facts=facts)), f"{len(rows)} matrix row(s) in the pasted text")


def nvlink_check(ctx: NodeContext, run: Run) -> list[Finding]:
    """Whole GPUs are judged by nvlink.links; a GPU the piece cuts FAILs for an inactive or slow link it shows,
    never for the links it does not show."""
    from nvdeploy.checks.gating import section
    from nvdeploy.checks.nvlink import SPEED_TOLERANCE

    facts = ctx.facts["nvlink"]
    cut = cut_nvlink_gpus(facts, profile_links(ctx.profile))
    whole = tuple(g for g in facts.gpus if g not in cut)
    out: list[Finding] = []
    if whole:
        sub = replace(ctx, facts=dict(ctx.facts, nvlink=replace(facts, gpus=whole)))
        out.extend(shown_only(run(sub), f"{len(whole)} GPU(s) in the pasted text"))
    expected = section(ctx, "nvlink")
    if not expected:
        return out or run(ctx)
    floor = float(expected["speed_gbps"]) * (1 - SPEED_TOLERANCE)
    for gpu in cut:
        down = [link.link for link in gpu.links if not link.active]
        slow = [f"{link.link} at {link.speed_gbps:g} GB/s" for link in gpu.links
                if link.active and link.speed_gbps is not None and link.speed_gbps < floor]
        if down or slow:
            label = f"GPU{gpu.index}" if gpu.index >= 0 else "a GPU whose header is not in the pasted text"
            problems = ([f"link(s) {', '.join(map(str, down))} inactive"] if down else []) + (
                [f"link(s) {', '.join(slow)}"] if slow else [])
            out.append(ctx.finding("nvlink.links", Verdict.FAIL,
                                   f"{label}: {'; '.join(problems)} (of the {len(gpu.links)} link(s) in the pasted "
                                   "text)", gpu=gpu.index if gpu.index >= 0 else None,
                                   remediation=Remediation.REBOOT, collector="nvidia_smi_nvlink"))
    if not out:
        out.append(skip(ctx, "nvlink.links", "a whole GPU's link list is"))
    return out


def ib_check(ctx: NodeContext, run: Run) -> list[Finding]:
    """The ports the piece shows whole: one that is down or slow FAILs; how many HCAs are Active is not known."""
    from nvdeploy.checks.ib import RATE_TOLERANCE, ib_expectation, is_ib_port

    hcas, rate = ib_expectation(ctx)
    facts = ctx.facts.get("ib")
    if not hcas or facts is None:
        return run(ctx)
    bad, good = [], set()
    for device in facts.devices:
        for port in device.ports:
            if port.state is None or not is_ib_port(device, port):
                continue  # cut off, or not an InfiniBand port
            name = f"{device.name} port {port.port}"
            if port.state != "Active":
                bad.append(f"{name}: {port.state}" + (f" ({port.physical_state})" if port.physical_state else ""))
            elif rate is not None and (port.rate_gbps is None or port.rate_gbps < rate * (1 - RATE_TOLERANCE)):
                bad.append(f"{name}: Active at {port.rate_gbps if port.rate_gbps is not None else '?'} Gb/s")
            else:
                good.add(device.name)
    if bad:
        return [ctx.finding("ib.ports", Verdict.FAIL, f"in the pasted text: {'; '.join(bad)}",
                            remediation=Remediation.INVESTIGATE, collector="ibstat")]
    return [skip(ctx, "ib.ports", f"the number of Active InfiniBand HCAs (expected {hcas}; {len(good)} shown "
                                  "Active) is")]


def discovery_check(ctx: NodeContext, run: Run) -> list[Finding]:
    """How many GPUs DCGM sees is its "N GPUs found." line, never the rows a piece happens to show."""
    facts = ctx.facts.get("dcgm_discovery")
    found = getattr(facts, "gpus_found", None)
    if found is None:
        return [skip(ctx, "dcgm.discovery", "the number of GPUs DCGM sees ('N GPUs found.') is")]
    expected = ctx.profile.gpu.count
    if found >= expected:
        return [ctx.finding("dcgm.discovery", Verdict.PASS, f"DCGM sees {found} GPUs (the pasted 'GPUs found.')",
                            observed=found, expected=expected, collector="dcgm_discovery")]
    return [ctx.finding("dcgm.discovery", Verdict.FAIL, f"DCGM sees {found} of {expected} GPUs (the pasted "
                        "'GPUs found.')", observed=found, expected=expected, remediation=Remediation.ISOLATE,
                        collector="dcgm_discovery")]


_SINCE_BOOT_RE = re.compile(r"\s*since boot$")


def kmsg_check(check_id: str, ctx: NodeContext, run: Run) -> list[Finding]:
    """The events a piece of a kernel log shows stand; "none since boot" cannot be read from a piece."""
    out = []
    for finding in run(ctx):
        if finding.verdict is Verdict.PASS:
            finding = replace(finding, verdict=Verdict.SKIP, observed=None, expected=None,
                              summary=_SINCE_BOOT_RE.sub("", finding.summary) + " in the pasted text; whether there "
                              f"were none since boot is {NOT_SHOWN} (a piece of the kernel log: it does not start at "
                              "boot)")
        out.append(finding)
    return out


def size_text(size: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} B"


def nccl_floor_bytes() -> int:
    """The smallest message size validate runs (``-b`` of nccl_commands.NCCL_SIZES): the floor is for those."""
    from nvdeploy.collect.nccl_commands import NCCL_SIZES

    value = NCCL_SIZES[NCCL_SIZES.index("-b") + 1]
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(value[-1:].upper(), 1)
    return int(value.rstrip("KMGkmg")) * scale
