"""The node probe's JSON (nvdeploy/collect/probe/nvml_probe.py) read into the same facts as nvidia-smi's XML."""

from __future__ import annotations

import json
from typing import Any

from nvdeploy.parsers.nvidia_smi import GpuFacts, SmiFacts

END_MARKER = "__NVD_PROBE_END__"
_FIELDS = set(GpuFacts.__dataclass_fields__)


# NVML errors that mean "this GPU has no such feature" (nvidia-smi prints N/A): the fact is None, not unknown.
_UNSUPPORTED = {"NOT_SUPPORTED", "FUNCTION_NOT_FOUND", "DEPRECATED"}
_ALL_FIELDS = ("lost", "errors")


def _gpu(raw: Any, warnings: list[str]) -> GpuFacts:
    """One GPU of the probe: ``{"error": NAME}`` in place of a value becomes None plus an entry in ``errors``."""
    if not isinstance(raw, dict):
        warnings.append("probe GPU entry is not an object")
        return GpuFacts()
    values: dict[str, Any] = {}
    errors: list[tuple[str, str]] = []
    for key, value in raw.items():
        if key not in _FIELDS or key in _ALL_FIELDS:
            continue
        if isinstance(value, dict):
            name = str(value.get("error") or "UNKNOWN")
            if name not in _UNSUPPORTED:
                errors.append((key, name))
            value = () if key == "clocks_event_reasons_active" else None
        values[key] = value
    if "clocks_event_reasons_active" in values:
        values["clocks_event_reasons_active"] = tuple(values["clocks_event_reasons_active"] or ())
    if "error" in raw:  # no handle at all: every fact of this GPU is unknown
        errors.append(("handle", str(raw["error"])))
    lost = bool(raw.get("lost")) or any(name == "GPU_IS_LOST" for _, name in errors)
    try:
        return GpuFacts(lost=lost, errors=tuple(sorted(set(errors))), **values)
    except TypeError as exc:
        warnings.append(f"probe GPU entry not understood: {exc}")
        return GpuFacts()


def parse_probe_json(text: str) -> SmiFacts:
    """Facts from the probe's output; no GPUs and a warning when it is cut off, not JSON, or reports an error."""
    body, marker, _ = text.partition(END_MARKER)
    if not marker:
        return SmiFacts(format="nvml", warnings=("probe output has no end marker (cut off?)",))
    try:
        data = json.loads(body)
    except ValueError as exc:
        return SmiFacts(format="nvml", warnings=(f"probe output is not JSON: {exc}",))
    if not isinstance(data, dict):
        return SmiFacts(format="nvml", warnings=("probe output is not a JSON object",))
    if "error" in data:
        return SmiFacts(format="nvml", warnings=(f"probe could not use NVML: {data['error']}",))
    warnings: list[str] = []
    gpus = tuple(_gpu(raw, warnings) for raw in data.get("gpus") or [])
    return SmiFacts(driver_version=data.get("driver_version"), cuda_version=data.get("cuda_version"),
                    gpu_count_reported=data.get("gpu_count_reported"), gpus=gpus, warnings=tuple(warnings),
                    format="nvml")
