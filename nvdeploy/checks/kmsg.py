"""Kernel log checks: Xid events with a severity and an action each (SXid and PCIe AER are not Xids)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from nvdeploy.builtin import data_dir
from nvdeploy.checks.registry import NodeContext, register
from nvdeploy.results import ErrorReason, Finding, Remediation, Verdict
from nvdeploy.yamlfile import load_yaml_file

KMSG = "kmsg"


@lru_cache(maxsize=1)
def xid_catalog() -> tuple[str, dict[int, dict[str, Any]]]:
    """(version, {xid: {severity, action, text}}) from checks/xid.yaml."""
    data = load_yaml_file(data_dir("checks") / "xid.yaml")
    return str(data["version"]), {int(k): dict(v) for k, v in data["xids"].items()}


@register("kmsg.xid", collectors=(KMSG,))
def xid_events(ctx: NodeContext) -> list[Finding]:
    """Reads the kernel log (``dmesg``; root may be needed where dmesg_restrict=1, set ``sudo: true``).

    Each Xid is judged by checks/xid.yaml: 79 (fell off the bus), 48 (double-bit ECC), 64 (row remap failure),
    74 (NVLink), 95 (uncontained ECC) and others FAIL with their action; 13/31/43/45 are usually application
    faults and only WARN; an Xid not in the table is WARN/INVESTIGATE. The Xid lines are quoted as evidence.
    """
    result = ctx.results.get(KMSG)
    if result is None or result.error is not None:
        return [ctx.finding("kmsg.xid", Verdict.ERROR, "kernel log not read"
                            + (f": {result.error_detail}" if result is not None and result.error_detail else ""),
                            reason=(result.error if result is not None else None) or ErrorReason.NOT_RUN,
                            collector=KMSG)]
    if result.rc != 0:
        err = result.err_text.strip().splitlines()[:1]
        if "password is required" in result.err_text or "Operation not permitted" in result.err_text:
            return [ctx.finding("kmsg.xid", Verdict.ERROR, "kernel log not readable without root "
                                f"({err[0] if err else 'permission denied'}); set 'sudo: true' for this host",
                                reason=ErrorReason.SUDO, collector=KMSG)]
        reason = ErrorReason.TOOL_MISSING if result.rc == 127 else ErrorReason.UNPARSEABLE
        return [ctx.finding("kmsg.xid", Verdict.ERROR, f"dmesg exited {result.rc}: {err[0] if err else ''}".strip(),
                            reason=reason, collector=KMSG)]
    facts = ctx.facts[KMSG]
    version, catalog = xid_catalog()
    findings = []
    for xid, count in sorted(((int(k), v) for k, v in facts.xid_counts.items())):
        entry = catalog.get(xid, {"severity": "WARN", "action": "INVESTIGATE", "text": "Xid not in the catalog"})
        events = [e for e in facts.xid_events if e.xid == xid]
        pcis = sorted({e.pci for e in events if e.pci})
        first = events[0].line.strip()[:300] if events else ""
        where = f" on {', '.join(pcis)}" if pcis else ""
        findings.append(ctx.finding("kmsg.xid", Verdict(entry["severity"]),
                                    f"Xid {xid} x{count}{where}: {entry['text']}. First: {first}",
                                    observed=f"Xid {xid} x{count}", expected="no critical Xid",
                                    remediation=Remediation(entry["action"]), collector=KMSG))
    if findings:
        return findings
    return [ctx.finding("kmsg.xid", Verdict.PASS, f"no Xid events since boot (Xid catalog {version})",
                        observed=0, expected=0, collector=KMSG)]
