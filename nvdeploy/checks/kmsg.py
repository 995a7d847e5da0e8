"""Kernel log checks: Xid events (GPU) and SXid events (NVSwitch), each with a severity and an action from a table
with sources (checks/xid.yaml, checks/sxid.yaml). SXid and PCIe AER are not Xids.

A kernel log larger than the capture cap keeps its newest part (the lines that matter); the findings say how much
older log was not read, and a cut log without events is WARN, not a clean PASS (see :func:`truncation_note`).
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import lru_cache
from typing import Any, Callable, Optional

from nvdeploy.checks.registry import NodeContext, register
from nvdeploy.config.builtin import data_dir
from nvdeploy.config.yamlfile import load_yaml_file
from nvdeploy.results import CommandResult, ErrorReason, Finding, Remediation, Verdict

KMSG = "kmsg"
MIB = 1024 * 1024
# A PCI address as the kernel log (``0000:2a:00``) and nvidia-smi (``00000000:2A:00.0``) print it.
_PCI = re.compile(r"(?:([0-9a-f]{1,8}):)?([0-9a-f]{2}):([0-9a-f]{2})(?:\.[0-7])?")
FABRIC_ACTION = ("drain the node, reset the NVSwitch fabric (reboot the node, or stop nvidia-fabricmanager and reset "
                 "all GPUs and NVSwitches), and have the baseboard serviced if the SXid recurs")


@lru_cache(maxsize=1)
def xid_catalog() -> tuple[str, dict[int, dict[str, Any]]]:
    """(version, {xid: {severity, action, text}}) from checks/xid.yaml."""
    data = load_yaml_file(data_dir("checks") / "xid.yaml")
    return str(data["version"]), {int(k): dict(v) for k, v in data["xids"].items()}


@lru_cache(maxsize=1)
def sxid_catalog() -> tuple[str, dict[int, dict[str, Any]]]:
    """(version, {sxid: {severity, action, text}}) from checks/sxid.yaml."""
    data = load_yaml_file(data_dir("checks") / "sxid.yaml")
    return str(data["version"]), {int(k): dict(v) for k, v in data["sxids"].items()}


def _mib(size: int) -> str:
    return f"{size / MIB:.1f} MiB"


def truncation_note(result: CommandResult) -> Optional[str]:
    """What a log cut to its newest bytes left out, for the finding; None when the whole log was read."""
    if not result.truncated:
        return None
    kept = len(result.stdout)
    total = max(result.stdout_total, kept)
    if total > kept:
        return (f"kernel log cut to its newest {_mib(kept)} of {_mib(total)}: {_mib(total - kept)} of older lines "
                "not read")
    return f"kernel log cut to its newest {_mib(kept)}: older lines not read"


def kmsg_gate(ctx: NodeContext, check_id: str) -> Optional[list[Finding]]:
    """Findings to return instead of evaluating when the kernel log was not read; None when it was."""
    result = ctx.results.get(KMSG)
    if result is None or result.error is not None:
        return [ctx.finding(check_id, Verdict.ERROR, "kernel log not read"
                            + (f": {result.error_detail}" if result is not None and result.error_detail else ""),
                            reason=(result.error if result is not None else None) or ErrorReason.NOT_RUN,
                            collector=KMSG)]
    if result.rc != 0:
        err = result.err_text.strip().splitlines()[:1]
        if "password is required" in result.err_text or "Operation not permitted" in result.err_text:
            return [ctx.finding(check_id, Verdict.ERROR, "kernel log not readable without root "
                                f"({err[0] if err else 'permission denied'}); set 'sudo: true' for this host",
                                reason=ErrorReason.SUDO, collector=KMSG)]
        reason = ErrorReason.TOOL_MISSING if result.rc == 127 else ErrorReason.UNPARSEABLE
        return [ctx.finding(check_id, Verdict.ERROR, f"dmesg exited {result.rc}: {err[0] if err else ''}".strip(),
                            reason=reason, collector=KMSG)]
    if ctx.facts.get(KMSG) is None:
        return [ctx.finding(check_id, Verdict.ERROR, "kernel log not parsed", reason=ErrorReason.UNPARSEABLE,
                            collector=KMSG)]
    return None


def pci_key(address: Optional[str]) -> Optional[tuple[int, int, int]]:
    """(domain, bus, device) of a PCI address, whichever way the tool printed it; None when it is not one."""
    match = _PCI.fullmatch((address or "").strip().lower())
    if match is None:
        return None
    return int(match.group(1) or "0", 16), int(match.group(2), 16), int(match.group(3), 16)


def gpu_of_pci(ctx: NodeContext) -> Callable[[Optional[str]], Optional[int]]:
    """The index of the GPU at a PCI address, among the GPUs nvidia-smi (or the probe) listed; None for an address
    none of them has (a GPU the driver no longer lists, fallen off the bus) and when nvidia-smi was not read."""
    smi = ctx.facts.get("smi")
    by_address = {pci_key(getattr(g, "pci_bus_id", None)): g.index for g in getattr(smi, "gpus", None) or ()}
    by_address.pop(None, None)
    return lambda address: by_address.get(pci_key(address))


def _or(value: Optional[int], default: int) -> int:
    return default if value is None else value


def _with_note(summary: str, note: Optional[str]) -> str:
    return f"{summary} [{note}]" if note else summary


def _nothing_found(ctx: NodeContext, check_id: str, what: str, note: Optional[str]) -> list[Finding]:
    """No event: PASS for a whole log; WARN for a cut one, whose older part may hold the event that matters."""
    if note:
        return [ctx.finding(check_id, Verdict.WARN,
                            f"no {what} in the part of the kernel log that was read; {note}: an older event (an Xid 79 "
                            "hours ago) would be missed. Read the full log on the node (journalctl -k -b) or clear "
                            "the ring buffer after triage (dmesg -C)", observed=0, expected=0,
                            remediation=Remediation.INVESTIGATE, collector=KMSG)]
    return [ctx.finding(check_id, Verdict.PASS, f"no {what} since boot", observed=0, expected=0, collector=KMSG)]


@register("kmsg.xid", collectors=(KMSG,))
def xid_events(ctx: NodeContext) -> list[Finding]:
    """Reads the kernel log (``dmesg``; root may be needed where dmesg_restrict=1, set ``sudo: true``).

    Each Xid is judged by checks/xid.yaml: 79 (fell off the bus), 48 (double-bit ECC), 64 (row remap failure),
    74 (NVLink), 95 (uncontained ECC) and others FAIL with their action; 13/31/43/45 are usually application
    faults and only WARN; an Xid not in the table is WARN/INVESTIGATE. One finding per Xid and GPU, naming the GPU
    whose PCI address its lines name (as nvidia-smi lists the node's GPUs), so that a waiver can name the GPU or the
    Xid (``xid_codes``) and a waived Xid 13 never hides an Xid 79. The Xid lines are quoted as evidence.
    A log over the capture cap keeps its newest part: the findings say how much older log was not read, and no
    Xid in a cut log is WARN (INVESTIGATE), not PASS.

    A GPU the driver could not initialise (``NVRM: GPU 0000:41:00.0: RmInitAdapter failed! (0x62:0x40:2404)``)
    FAILs (ISOLATE) naming its PCI address and the failure: nvidia-smi and NVML do not list such a GPU, so the
    node is a GPU short, and no Xid is logged for it.
    """
    gated = kmsg_gate(ctx, "kmsg.xid")
    if gated:
        return gated
    note = truncation_note(ctx.results[KMSG])
    facts = ctx.facts[KMSG]
    version, catalog = xid_catalog()
    findings = _init_failures(ctx, facts, note)
    gpu_of = gpu_of_pci(ctx)
    for xid, count in sorted(((int(k), v) for k, v in facts.xid_counts.items())):
        entry = catalog.get(xid, {"severity": "WARN", "action": "INVESTIGATE", "text": "Xid not in the catalog"})
        by_address: dict[Optional[str], list[Any]] = {}
        for event in (e for e in facts.xid_events if e.xid == xid):
            by_address.setdefault(event.pci, []).append(event)
        # In GPU order, the lines of an address no listed GPU has after them; one finding for a count without lines.
        ordered = sorted(by_address.items(), key=lambda item: (_or(gpu_of(item[0]), 1 << 16), item[0] or ""))
        for pci, events in ordered or [(None, [])]:
            gpu = gpu_of(pci)
            times = len(events) or count
            first = events[0].line.strip()[:300] if events else ""
            where = (f" on {pci}" if pci else "") + (f" (GPU{gpu})" if gpu is not None else "")
            finding = ctx.finding("kmsg.xid", Verdict(entry["severity"]),
                                  _with_note(f"Xid {xid} x{times}{where}: {entry['text']}. First: {first}", note),
                                  observed=f"Xid {xid} x{times}", expected="no critical Xid", gpu=gpu,
                                  remediation=Remediation(entry["action"]), collector=KMSG)
            findings.append(replace(finding, code=xid))
    if findings:
        return findings
    return _nothing_found(ctx, "kmsg.xid", f"Xid events (Xid catalog {version})", note)


def _init_failures(ctx: NodeContext, facts: Any, note: Optional[str]) -> list[Finding]:
    """One FAIL per GPU with ``RmInitAdapter failed!`` lines."""
    by_gpu: dict[str, list[Any]] = {}
    for event in getattr(facts, "init_failures", ()):
        by_gpu.setdefault(event.pci, []).append(event)
    findings = []
    for pci, events in sorted(by_gpu.items()):
        codes = sorted({e.code for e in events if e.code})
        code = f" ({', '.join(codes)})" if codes else ""
        summary = (f"GPU {pci} failed to initialise: RmInitAdapter failed!{code} x{len(events)}. The driver does not "
                   "list this GPU (nvidia-smi, NVML), so the node is short a GPU: reseat or replace it (check its "
                   f"power, PCIe link and firmware) after a reboot confirms it. First: {events[0].line.strip()[:300]}")
        findings.append(ctx.finding("kmsg.xid", Verdict.FAIL, _with_note(summary, note),
                                    observed=f"RmInitAdapter failed{code} x{len(events)} on {pci}",
                                    expected="every GPU initialised", remediation=Remediation.ISOLATE,
                                    collector=KMSG))
    return findings


def _switch_label(event: Any) -> str:
    """``nvidia-nvswitch3 (PCI 0000:05:00.0)``, or whichever of the two the line printed."""
    pci = event.device if event.device and event.device != event.switch else None
    if event.switch and pci:
        return f"{event.switch} (PCI {pci})"
    return event.switch or (f"PCI {pci}" if pci else "an unnamed NVSwitch")


@register("kmsg.sxid", collectors=(KMSG,))
def sxid_events(ctx: NodeContext) -> list[Finding]:
    """Reads NVSwitch SXid lines from the kernel log (``dmesg``), e.g.
    ``nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 48 LTSSM Fault Up``.

    Each SXid is judged by checks/sxid.yaml (NVIDIA Fabric Manager user guide, appendix "NVSwitch SXid Errors"):
    fatal SXids FAIL with the fabric remediation (REBOOT: drain the node, reset the NVSwitch fabric by rebooting or
    by stopping nvidia-fabricmanager and resetting all GPUs and NVSwitches, service the baseboard if it recurs);
    non-fatal ones WARN. The driver's ``Fatal`` flag in the line makes any SXid FAIL, whatever the table says. An
    SXid in neither the table nor flagged Fatal is WARN/INVESTIGATE ("unknown SXid": its impact is not known, so
    it is shown to a person rather than failing a node on guesswork or passing it silently). One finding per
    SXid code and switch, naming the switch (nvswitch index and PCI address) and the link(s).

    SKIP on SKUs without NVSwitch (``gpu.nvswitch: false``) when the log has no SXid line. A log over the capture
    cap keeps its newest part: the findings say how much older log was not read; none in a cut log is WARN.
    """
    gated = kmsg_gate(ctx, "kmsg.sxid")
    if gated:
        return gated
    facts = ctx.facts[KMSG]
    note = truncation_note(ctx.results[KMSG])
    if not facts.sxid_events and not ctx.profile.gpu.nvswitch:
        return [ctx.finding("kmsg.sxid", Verdict.SKIP, "no NVSwitch on this SKU and no SXid in the kernel log")]
    version, catalog = sxid_catalog()
    groups: dict[tuple[int, str], list[Any]] = {}
    for event in facts.sxid_events:
        groups.setdefault((event.sxid, _switch_label(event)), []).append(event)
    findings = []
    for (sxid, switch), events in sorted(groups.items()):
        entry = catalog.get(sxid)
        flagged_fatal = any(e.fatal for e in events)
        if flagged_fatal or (entry is not None and entry["severity"] == "FAIL"):
            verdict, action = Verdict.FAIL, Remediation.REBOOT
        elif entry is not None:
            verdict, action = Verdict(entry["severity"]), Remediation(entry["action"])
        else:
            verdict, action = Verdict.WARN, Remediation.INVESTIGATE
        text = entry["text"] if entry is not None else "unknown SXid (not in the SXid table): investigate"
        flag = "Fatal" if flagged_fatal else "Non-fatal" if any(e.fatal is False for e in events) else "no flag"
        links = sorted({e.link for e in events if e.link is not None})
        on_links = f", link{'s' if len(links) > 1 else ''} {', '.join(map(str, links))}" if links else ""
        todo = f": {FABRIC_ACTION}" if verdict is Verdict.FAIL else ""
        summary = (f"SXid {sxid} ({flag}) x{len(events)} on {switch}{on_links}: {text}{todo}. "
                   f"First: {events[0].line.strip()[:300]}")
        findings.append(ctx.finding("kmsg.sxid", verdict, _with_note(summary, note),
                                    observed=f"SXid {sxid} x{len(events)} on {switch}{on_links}",
                                    expected="no fatal SXid", remediation=action, collector=KMSG))
    if findings:
        return sorted(findings, key=lambda f: -f.verdict.severity)  # fatal first; stable within a verdict
    return _nothing_found(ctx, "kmsg.sxid", f"SXid events (SXid table {version})", note)
