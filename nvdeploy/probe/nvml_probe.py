"""The node probe: GPU facts straight from NVML, as one JSON document on stdout.

This file is shipped to the node and run by the node's own ``python3`` together with a copy of the pynvml
binding (see :mod:`nvdeploy.probe.ship`), so it imports nothing but the standard library and ``pynvml``, and
keeps to Python 3.6 syntax. Field names match :class:`nvdeploy.parsers.nvidia_smi.GpuFacts`, so the checks
read the probe's facts and nvidia-smi's the same way.

Exit status: 0 with the facts; 3 with ``{"error": ...}`` when pynvml or NVML is unusable (the caller then
falls back to ``nvidia-smi -q -x``, whose exit status says why).
"""

import json
import sys

# NVML clocks-event (throttle) reason bits, named and ordered as nvidia-smi's XML lists them.
REASON_BITS = ((0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"),
               (0x8, "hw_slowdown"), (0x40, "hw_thermal_slowdown"), (0x80, "hw_power_brake_slowdown"),
               (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"), (0x100, "display_clocks_setting"))
END_MARKER = "__NVD_PROBE_END__"


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _try(nvml, name, *args):
    """Call nvml.<name>(*args); None when the GPU or driver does not support it (N/A in nvidia-smi)."""
    function = getattr(nvml, name, None)
    if function is None:
        return None
    try:
        return function(*args)
    except nvml.NVMLError:
        return None


def _gpu(nvml, index):
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
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
    if reasons is None:
        reasons = _try(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    return {
        "index": index,
        "name": _text(_try(nvml, "nvmlDeviceGetName", handle)),
        "uuid": _text(_try(nvml, "nvmlDeviceGetUUID", handle)),
        "serial": _text(_try(nvml, "nvmlDeviceGetSerial", handle)),
        "pci_bus_id": _text(pci.busId) if pci is not None else None,
        "persistence_mode": None if persistence is None else persistence == nvml.NVML_FEATURE_ENABLED,
        "ecc_mode": None if ecc is None else ecc[0] == nvml.NVML_FEATURE_ENABLED,
        "ecc_uncorrectable_volatile": _try(nvml, "nvmlDeviceGetTotalEccErrors", handle, uncorrected,
                                           nvml.NVML_VOLATILE_ECC),
        "ecc_uncorrectable_aggregate": _try(nvml, "nvmlDeviceGetTotalEccErrors", handle, uncorrected,
                                            nvml.NVML_AGGREGATE_ECC),
        "remapped_rows_pending": None if rows is None else bool(rows[2]),
        "remapped_rows_failure": None if rows is None else bool(rows[3]),
        "remapped_rows_uncorrectable": None if rows is None else int(rows[1]),
        "retired_pages_pending": None if retired_pending is None else retired_pending == nvml.NVML_FEATURE_ENABLED,
        "retired_pages_double_bit": None if retired_dbe is None else len(retired_dbe),
        "pcie_gen_current": _try(nvml, "nvmlDeviceGetCurrPcieLinkGeneration", handle),
        "pcie_gen_max": _try(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", handle),
        "pcie_width_current": _try(nvml, "nvmlDeviceGetCurrPcieLinkWidth", handle),
        "pcie_width_max": _try(nvml, "nvmlDeviceGetMaxPcieLinkWidth", handle),
        "memory_total_mib": None if memory is None else int(memory.total // (1024 * 1024)),
        "temperature_c": None if temperature is None else float(temperature),
        "power_limit_w": None if limit_mw is None else limit_mw / 1000.0,
        "default_power_limit_w": None if default_mw is None else default_mw / 1000.0,
        "mig_mode": None if mig is None else mig[0] == nvml.NVML_DEVICE_MIG_ENABLE,
        "clocks_event_reasons_active": [] if reasons is None else [name for bit, name in REASON_BITS
                                                                   if reasons & bit],
    }


def collect(nvml):
    """Every fact the checks need, from an initialised-or-not pynvml-like module."""
    nvml.nvmlInit()
    try:
        cuda = _try(nvml, "nvmlSystemGetCudaDriverVersion")
        facts = {
            "format": "nvml",
            "driver_version": _text(nvml.nvmlSystemGetDriverVersion()),
            "cuda_version": None if cuda is None else "%d.%d" % (cuda // 1000, (cuda % 1000) // 10),  # noqa: UP031
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
