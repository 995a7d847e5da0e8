"""The node probe: GPU facts straight from NVML, as one JSON document on stdout.

This file is shipped to the node and run by the node's own ``python3`` together with a copy of the pynvml
binding (see :mod:`nvdeploy.probe.ship`), so it imports nothing but the standard library and ``pynvml``, and
keeps to Python 3.6 syntax. Field names match :class:`nvdeploy.parsers.nvidia_smi.GpuFacts`, so the checks
read the probe's facts and nvidia-smi's the same way.

Exit status: 0 with the facts; 3 with ``{"error": ...}`` when pynvml or NVML is unusable (the caller then
falls back to ``nvidia-smi -q -x``, whose exit status says why).

A fact NVML could not give is never None without a reason: it is ``{"error": NAME, "code": N}`` with NVML's
error name (``NOT_SUPPORTED``, ``UNKNOWN``, ``GPU_IS_LOST``...), and a GPU that answered GPU_IS_LOST anywhere
carries ``"lost": true``. A GPU whose handle cannot be had at all is ``{"index": i, "lost": ..., "error": ...}``.
"""

import json
import sys

# NVML clocks-event (throttle) reason bits, named and ordered as nvidia-smi's XML lists them.
REASON_BITS = ((0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"),
               (0x8, "hw_slowdown"), (0x40, "hw_thermal_slowdown"), (0x80, "hw_power_brake_slowdown"),
               (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"), (0x100, "display_clocks_setting"))
END_MARKER = "__NVD_PROBE_END__"
# NVML return codes (nvml.h), by name: what the checks need to tell "not supported" from "could not read".
ERROR_NAMES = {1: "UNINITIALIZED", 2: "INVALID_ARGUMENT", 3: "NOT_SUPPORTED", 4: "NO_PERMISSION",
               6: "NOT_FOUND", 8: "INSUFFICIENT_POWER", 9: "DRIVER_NOT_LOADED", 10: "TIMEOUT", 11: "IRQ_ISSUE",
               12: "LIBRARY_NOT_FOUND", 13: "FUNCTION_NOT_FOUND", 14: "CORRUPTED_INFOROM", 15: "GPU_IS_LOST",
               16: "RESET_REQUIRED", 17: "OPERATING_SYSTEM", 18: "LIB_RM_VERSION_MISMATCH", 19: "IN_USE",
               20: "MEMORY", 21: "NO_DATA", 26: "DEPRECATED", 27: "NOT_READY", 999: "UNKNOWN"}


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class Failed:  # noqa: UP004 - the probe keeps to Python 3.6 style
    """What an NVML call raised instead of answering."""

    def __init__(self, exc):
        code = getattr(exc, "value", None)
        self.code = code if isinstance(code, int) else None
        self.name = ERROR_NAMES.get(self.code, "ERROR_%s" % code if code is not None else "UNKNOWN")  # noqa: UP031

    def record(self):
        return {"error": self.name, "code": self.code}


def _try(nvml, name, *args):
    """Call nvml.<name>(*args): its answer, a :class:`Failed` when NVML raised, None when the binding lacks it."""
    function = getattr(nvml, name, None)
    if function is None:
        return None
    try:
        return function(*args)
    except nvml.NVMLError as exc:
        return Failed(exc)


def _ok(value):
    return value is not None and not isinstance(value, Failed)


def _fact(value, convert=None):
    """The JSON value of a fact: converted when NVML answered, the error record when it raised, else None."""
    if isinstance(value, Failed):
        return value.record()
    if value is None or convert is None:
        return value
    return convert(value)


def _gpu(nvml, index):
    handle = _try(nvml, "nvmlDeviceGetHandleByIndex", index)
    if not _ok(handle):
        failed = handle if isinstance(handle, Failed) else Failed(Exception())
        return {"index": index, "lost": failed.name == "GPU_IS_LOST", "error": failed.name, "code": failed.code}
    facts = _gpu_facts(nvml, index, handle)
    facts["lost"] = any(isinstance(v, dict) and v.get("error") == "GPU_IS_LOST" for v in facts.values())
    return facts


def _gpu_facts(nvml, index, handle):
    pci = _try(nvml, "nvmlDeviceGetPciInfo", handle)
    memory = _try(nvml, "nvmlDeviceGetMemoryInfo", handle)
    ecc = _try(nvml, "nvmlDeviceGetEccMode", handle)
    mig = _try(nvml, "nvmlDeviceGetMigMode", handle)
    rows = _try(nvml, "nvmlDeviceGetRemappedRows", handle)
    uncorrected = nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    retired_pending = _try(nvml, "nvmlDeviceGetRetiredPagesPendingStatus", handle)
    retired_dbe = _try(nvml, "nvmlDeviceGetRetiredPages", handle,
                       nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    persistence = _try(nvml, "nvmlDeviceGetPersistenceMode", handle)
    limit_mw = _try(nvml, "nvmlDeviceGetPowerManagementLimit", handle)
    default_mw = _try(nvml, "nvmlDeviceGetPowerManagementDefaultLimit", handle)
    temperature = _try(nvml, "nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU)
    reasons = _try(nvml, "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if reasons is None or (isinstance(reasons, Failed) and reasons.name == "FUNCTION_NOT_FOUND"):
        reasons = _try(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    enabled = nvml.NVML_FEATURE_ENABLED
    return {
        "index": index,
        "name": _fact(_try(nvml, "nvmlDeviceGetName", handle), _text),
        "uuid": _fact(_try(nvml, "nvmlDeviceGetUUID", handle), _text),
        "serial": _fact(_try(nvml, "nvmlDeviceGetSerial", handle), _text),
        "pci_bus_id": _fact(pci, lambda p: _text(p.busId)),
        "persistence_mode": _fact(persistence, lambda v: v == enabled),
        "ecc_mode": _fact(ecc, lambda v: v[0] == enabled),
        "ecc_uncorrectable_volatile": _fact(_try(nvml, "nvmlDeviceGetTotalEccErrors", handle, uncorrected,
                                                 nvml.NVML_VOLATILE_ECC)),
        "ecc_uncorrectable_aggregate": _fact(_try(nvml, "nvmlDeviceGetTotalEccErrors", handle, uncorrected,
                                                  nvml.NVML_AGGREGATE_ECC)),
        "remapped_rows_pending": _fact(rows, lambda r: bool(r[2])),
        "remapped_rows_failure": _fact(rows, lambda r: bool(r[3])),
        "remapped_rows_uncorrectable": _fact(rows, lambda r: int(r[1])),
        "retired_pages_pending": _fact(retired_pending, lambda v: v == enabled),
        "retired_pages_double_bit": _fact(retired_dbe, len),
        "pcie_gen_current": _fact(_try(nvml, "nvmlDeviceGetCurrPcieLinkGeneration", handle)),
        "pcie_gen_max": _fact(_try(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", handle)),
        "pcie_width_current": _fact(_try(nvml, "nvmlDeviceGetCurrPcieLinkWidth", handle)),
        "pcie_width_max": _fact(_try(nvml, "nvmlDeviceGetMaxPcieLinkWidth", handle)),
        "memory_total_mib": _fact(memory, lambda m: int(m.total // (1024 * 1024))),
        "temperature_c": _fact(temperature, float),
        "power_limit_w": _fact(limit_mw, lambda mw: mw / 1000.0),
        "default_power_limit_w": _fact(default_mw, lambda mw: mw / 1000.0),
        "mig_mode": _fact(mig, lambda v: v[0] == nvml.NVML_DEVICE_MIG_ENABLE),
        "clocks_event_reasons_active": _fact(reasons, lambda r: [name for bit, name in REASON_BITS if r & bit])
        if reasons is not None else [],
    }


def collect(nvml):
    """Every fact the checks need, from an initialised-or-not pynvml-like module."""
    nvml.nvmlInit()
    try:
        cuda = _try(nvml, "nvmlSystemGetCudaDriverVersion")
        facts = {
            "format": "nvml",
            "driver_version": _text(nvml.nvmlSystemGetDriverVersion()),
            "cuda_version": "%d.%d" % (cuda // 1000, (cuda % 1000) // 10) if _ok(cuda) else None,  # noqa: UP031
            "gpus": [],
        }
        count = nvml.nvmlDeviceGetCount()
        facts["gpu_count_reported"] = count
        facts["gpus"] = [_gpu(nvml, index) for index in range(count)]
        return facts
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001,S110 - shutting down a library that failed is best effort
            pass


def main(nvml=None, out=None):
    """Print the facts (or the error) to ``out`` (stdout by default); return the exit status."""
    out = out if out is not None else sys.stdout
    if nvml is None:
        try:
            import pynvml as nvml
        except Exception as exc:  # noqa: BLE001 - any import failure means: use nvidia-smi instead
            out.write(json.dumps({"format": "nvml", "error": {"name": "import", "message": str(exc)}}))
            out.write("\n" + END_MARKER + "\n")
            return 3
    try:
        facts = collect(nvml)
    except nvml.NVMLError as exc:
        out.write(json.dumps({"format": "nvml", "error": {"code": getattr(exc, "value", None),
                                                                 "message": str(exc)}}))
        out.write("\n" + END_MARKER + "\n")
        return 3
    out.write(json.dumps(facts))
    out.write("\n" + END_MARKER + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
