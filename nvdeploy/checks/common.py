"""Helpers shared by checks: gating on nvidia-smi, version comparison, GPU iteration."""

from __future__ import annotations

import re
from typing import Any, Optional

from nvdeploy.checks.registry import NodeContext
from nvdeploy.checks.smi_status import SmiStatus
from nvdeploy.results import ErrorReason, Finding, Verdict

SMI = "nvidia_smi_xml"


def smi_gate(ctx: NodeContext, check_id: str) -> Optional[list[Finding]]:
    """Findings to return instead of evaluating when nvidia-smi gave nothing usable; None when it did."""
    status: SmiStatus = ctx.facts["smi_status"]
    if status.usable:
        facts = ctx.facts.get("smi")
        if facts is None or (not facts.gpus and check_id != "gpu.count"):
            return [ctx.finding(check_id, Verdict.ERROR, "not evaluated: nvidia-smi listed no GPU",
                                reason=ErrorReason.UNPARSEABLE, collector=SMI)]
        return None
    return [ctx.finding(check_id, Verdict.ERROR, f"not evaluated: {status.summary}",
                        reason=status.reason or ErrorReason.NOT_RUN, collector=SMI)]


def version_tuple(version: str) -> tuple[int, ...]:
    """'550.54.15' -> (550, 54, 15). Versions are compared as integers, never as floats or strings."""
    return tuple(int(part) for part in re.findall(r"\d+", version))


def gpu_label(gpu: Any) -> str:
    bus = f" ({gpu.pci_bus_id})" if getattr(gpu, "pci_bus_id", None) else ""
    return f"GPU{gpu.index if gpu.index is not None else '?'}{bus}"
