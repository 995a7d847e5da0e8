"""Helpers shared by checks: gating on nvidia-smi, version comparison, GPU iteration and per-GPU honesty."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from nvdeploy.checks.registry import NodeContext
from nvdeploy.parsers.smi_status import SmiStatus
from nvdeploy.results import ErrorReason, Finding, Remediation, Verdict

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


LOST_ACTION = "drain the node and reboot it; replace the GPU if it is lost again (see kmsg.xid for Xid 79)"


@dataclass(frozen=True)
class GpuSplit:
    """A node's GPUs sorted for one check: ``known`` have every judged value; ``findings`` name the others
    (lost: FAIL ISOLATE; unreadable or missing where expected: ERROR); ``unsupported`` report no value and none
    is expected (the feature is absent on this SKU)."""

    known: list[Any] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    unsupported: list[Any] = field(default_factory=list)


def split_gpus(ctx: NodeContext, check_id: str, what: str, fields: Sequence[str], *, required: bool,
               error_fields: Sequence[str] = (), gpus: Optional[Sequence[Any]] = None) -> GpuSplit:
    """Sort GPUs by whether ``fields`` could be read, so that no unknown value is ever judged as fine.

    A lost GPU (NVML GPU_IS_LOST) is FAIL with ISOLATE. A GPU whose value the tool tried and failed to read
    (``Unknown Error``, an NVML error) is ERROR naming the GPU and the error. A GPU that reports no value (N/A)
    is ERROR when the value is ``required`` or when another GPU of the node reports it (the node's GPUs are one
    SKU: N/A on one of them is not "not supported"); otherwise it is ``unsupported``. ``error_fields`` are
    further fields whose read error makes the GPU unknown although they are not required to be present.
    """
    gpus = list(ctx.facts["smi"].gpus if gpus is None else gpus)
    split = GpuSplit()

    def has_all(gpu: Any) -> bool:
        return all(getattr(gpu, name) is not None for name in fields)

    somebody_reports = any(has_all(g) and not g.lost for g in gpus)
    for gpu in gpus:
        errors = [(name, gpu.error(name)) for name in (*fields, *error_fields) if gpu.error(name)]
        handle = gpu.error("handle")
        if gpu.lost:
            split.findings.append(ctx.finding(
                check_id, Verdict.FAIL, f"{gpu_label(gpu)} is lost (GPU_IS_LOST): its {what} cannot be read; "
                f"{LOST_ACTION}", observed="GPU is lost", gpu=gpu.index, remediation=Remediation.ISOLATE,
                collector=SMI))
        elif errors or handle:
            detail = ", ".join(f"{name}: {err}" for name, err in errors) or f"no handle: {handle}"
            split.findings.append(ctx.finding(
                check_id, Verdict.ERROR, f"{gpu_label(gpu)}: {what} unknown, the driver could not read it "
                f"({detail})", observed="unknown", gpu=gpu.index, reason=ErrorReason.UNPARSEABLE, collector=SMI))
        elif has_all(gpu):
            split.known.append(gpu)
        elif required or somebody_reports:
            why = "the profile requires it" if required else "the node's other GPUs report it"
            split.findings.append(ctx.finding(
                check_id, Verdict.ERROR, f"{gpu_label(gpu)}: {what} not reported (N/A) while {why}",
                observed="N/A", gpu=gpu.index, reason=ErrorReason.UNPARSEABLE, collector=SMI))
        else:
            split.unsupported.append(gpu)
    return split
