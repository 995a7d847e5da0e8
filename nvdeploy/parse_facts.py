"""Turn a node's raw command results into typed facts for the checks (pure)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from nvdeploy.checks.smi_status import SmiStatus, smi_status
from nvdeploy.parsers.kmsg import parse_kmsg
from nvdeploy.parsers.lspci import parse_lspci
from nvdeploy.parsers.nvidia_smi import parse_xml
from nvdeploy.results import CommandResult, ErrorReason, Verdict


def node_facts(results: Mapping[str, CommandResult]) -> dict[str, Any]:
    """Parse every collector that completed; the nvidia-smi status says whether its facts may be used."""
    facts: dict[str, Any] = {}
    smi_result = results.get("nvidia_smi_xml")
    status = smi_status(smi_result)
    smi = None
    if status.usable and smi_result is not None:
        smi = parse_xml(smi_result.text)
        if not smi.gpus and smi.warnings:
            status = SmiStatus(Verdict.ERROR, f"nvidia-smi XML not understood: {smi.warnings[0]}",
                               ErrorReason.UNPARSEABLE)
    facts["smi_status"] = status
    facts["smi"] = smi
    lspci = results.get("lspci")
    facts["lspci"] = parse_lspci(lspci.text) if lspci is not None and lspci.ok else None
    kmsg = results.get("kmsg")
    facts["kmsg"] = parse_kmsg(kmsg.text) if kmsg is not None and kmsg.ok else None
    return facts


def summary_facts(facts: Mapping[str, Any]) -> dict[str, Any]:
    """The few facts kept in results.json for reports, diffs and cluster checks."""
    out: dict[str, Any] = {}
    smi = facts.get("smi")
    if smi is not None:
        out["driver_version"] = smi.driver_version
        out["cuda_version"] = smi.cuda_version
        out["gpu_count"] = len(smi.gpus)
        names = sorted({g.name for g in smi.gpus if g.name})
        out["gpu_model"] = ", ".join(names)
    kmsg = facts.get("kmsg")
    if kmsg is not None:
        out["xid_counts"] = dict(kmsg.xid_counts)
    lspci = facts.get("lspci")
    if lspci is not None:
        out["pci_gpu_count"] = len(lspci.gpus)
    return out


__all__ = ["node_facts", "summary_facts", "replace"]
