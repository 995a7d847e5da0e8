"""The node probe: GPU facts straight from NVML, as one JSON document on stdout.

This file is shipped to the node and run by the node's own ``python3`` together with a copy of the pynvml
binding (see :mod:`nvdeploy.collect.probe.ship`), so it imports nothing but the standard library and ``pynvml``, and
keeps to Python 3.6 syntax. Field names match :class:`nvdeploy.parsers.nvidia_smi.GpuFacts`, so the checks
read the probe's facts and nvidia-smi's the same way.

Exit status: 0 with the facts; 3 with ``{"error": ...}`` when pynvml or NVML is unusable (the caller then
falls back to ``nvidia-smi -q -x``, whose exit status says why).

A fact NVML could not give is never None without a reason: it is ``{"error": NAME, "code": N}`` with NVML's
error name (``NOT_SUPPORTED``, ``UNKNOWN``, ``GPU_IS_LOST``...), and a GPU that answered GPU_IS_LOST anywhere
carries ``"lost": true``. A GPU whose handle cannot be had at all is ``{"index": i, "lost": ..., "error": ...}``.
"""

import ctypes
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
               20: "MEMORY", 21: "NO_DATA", 23: "INSUFFICIENT_RESOURCES", 25: "ARGUMENT_VERSION_MISMATCH",
               26: "DEPRECATED", 27: "NOT_READY", 999: "UNKNOWN"}
# nvmlGpuFabricInfo: state, health summary and the health mask's fields (shift, width, {value: fact}), worded as
# nvidia-smi -q -x prints them; 0 is NOT_SUPPORTED everywhere (None: unknown, never False).
FABRIC_STATES = {1: "Not Started", 2: "In Progress", 3: "Completed"}
FABRIC_SUMMARY = {1: "Healthy", 2: "Unhealthy", 3: "Limited Capacity"}
FABRIC_HEALTH = (
    ("fabric_bandwidth", 0, 0x3, {1: "Degraded", 2: "Full"}),
    ("fabric_route_recovery_in_progress", 2, 0x3, {1: True, 2: False}),
    ("fabric_route_unhealthy", 4, 0x3, {1: True, 2: False}),
    ("fabric_access_timeout_recovery", 6, 0x3, {1: True, 2: False}),
    ("fabric_incorrect_configuration", 8, 0xF, {1: "None", 2: "Incorrect SysGUID", 3: "Incorrect Chassis SN",
                                                4: "No Partition", 5: "Insufficient NVLinks",
                                                6: "Incompatible GPU FW", 7: "Invalid Location",
                                                8: "GPU State Invalid"}),
    ("fabric_partition_assigned", 12, 0x3, {1: True, 2: False}),
)
FABRIC_FIELDS = ("fabric_state", "fabric_status", "fabric_clique_id", "fabric_cluster_uuid", "fabric_health_summary"
                 ) + tuple(name for name, _, _, _ in FABRIC_HEALTH)
# nvmlGpuRecoveryAction_t, as nvidia-smi names it.
# nvmlGpuRecoveryAction_t, named as NVIDIA's GPU memory error management guide names them.
RECOVERY_ACTIONS = {0: "None", 1: "Reset", 2: "Reboot", 3: "Drain P2P", 4: "Drain and Reset"}
RECOVERY_ACTION_FIELD = 230  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class Failed:  # noqa: UP004 - the probe keeps to Python 3.6 style
    """What an NVML call raised instead of answering."""

    def __init__(self, exc, code=None):
        code = getattr(exc, "value", None) if exc is not None else code
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


def _device_id(pci):
    """nvmlPciInfo_t.pciDeviceId (device << 16 | vendor) as nvidia-smi prints it: 0x233010DE."""
    value = getattr(pci, "pciDeviceId", None)
    return f"0x{value:08X}" if isinstance(value, int) else None


def _gpu(nvml, index):
    handle = _try(nvml, "nvmlDeviceGetHandleByIndex", index)
    if not _ok(handle):
        failed = handle if isinstance(handle, Failed) else Failed(Exception())
        return {"index": index, "lost": failed.name == "GPU_IS_LOST", "error": failed.name, "code": failed.code}
    facts = _gpu_facts(nvml, index, handle)
    facts["lost"] = any(isinstance(v, dict) and v.get("error") == "GPU_IS_LOST" for v in facts.values())
    return facts


def _fabric_info(nvml, handle):
    """The newest nvmlGpuFabricInfo this binding and driver both know: v3 (health summary), v2 (health mask)
    through nvmlDeviceGetGpuFabricInfoV, else v1 through the older call; a :class:`Failed`, or None when
    neither the binding nor the driver has any."""
    failed = None
    for struct, function in (("c_nvmlGpuFabricInfo_v3_t", "nvmlDeviceGetGpuFabricInfoV"),
                             ("c_nvmlGpuFabricInfo_v2_t", "nvmlDeviceGetGpuFabricInfoV"),
                             ("c_nvmlGpuFabricInfo_t", "nvmlDeviceGetGpuFabricInfo")):
        cls = getattr(nvml, struct, None)
        if cls is None or getattr(nvml, function, None) is None:
            continue
        info = cls()
        answer = _try(nvml, function, handle, ctypes.byref(info))
        if isinstance(answer, Failed):
            # An older driver: no such symbol, or a struct version it does not know. Try the next one.
            if answer.name in ("FUNCTION_NOT_FOUND", "ARGUMENT_VERSION_MISMATCH"):
                failed = failed or answer
                continue
            return answer
        return info
    return failed


def _uuid(raw):
    digits = "".join("%02x" % (b & 0xFF) for b in bytearray(raw))  # noqa: UP031
    return "-".join((digits[:8], digits[8:12], digits[12:16], digits[16:20], digits[20:32]))


def _fabric(nvml, handle):
    """The fabric facts (GpuFacts.fabric_*): registration state, clique, cluster and health."""
    info = _fabric_info(nvml, handle)
    if info is None or isinstance(info, Failed):
        return {name: _fact(info) for name in FABRIC_FIELDS}
    state = FABRIC_STATES.get(int(info.state))
    done = state == "Completed"
    out = {"fabric_state": state,
           # The status means something only once registration completed.
           "fabric_status": (ERROR_NAMES.get(int(info.status), "ERROR_%d" % info.status)  # noqa: UP031
                             if info.status else "Success") if done else None,
           "fabric_clique_id": int(info.cliqueId) if done else None,
           "fabric_cluster_uuid": _uuid(info.clusterUuid) if done else None,
           "fabric_health_summary": FABRIC_SUMMARY.get(int(getattr(info, "healthSummary", 0)))}
    mask = getattr(info, "healthMask", None)
    for name, shift, width, values in FABRIC_HEALTH:
        out[name] = values.get((int(mask) >> shift) & width) if mask is not None else None
    return out


def _recovery_action(nvml, handle):
    values = _try(nvml, "nvmlDeviceGetFieldValues", handle, [RECOVERY_ACTION_FIELD])
    if not _ok(values):
        return _fact(values)
    value = values[0]
    if value.nvmlReturn:  # the call answered, this one field did not
        return Failed(None, int(value.nvmlReturn)).record()
    return RECOVERY_ACTIONS.get(int(value.value.uiVal), "%d" % value.value.uiVal)  # noqa: UP031


def _platform(nvml, handle):
    """Chassis serial, slot, tray and module of a rack-scale GPU (nvmlPlatformInfo_v2)."""
    names = ("chassis_serial", "slot_number", "tray_index", "module_id")
    cls = getattr(nvml, "c_nvmlPlatformInfo_v2_t", None)
    if cls is None:
        return dict.fromkeys(names)
    info = cls()
    answer = _try(nvml, "nvmlDeviceGetPlatformInfo", handle, ctypes.byref(info))
    if answer is None or isinstance(answer, Failed):
        return {name: _fact(answer) for name in names}
    return {"chassis_serial": _text(info.chassisSerialNumber).strip() or None,
            "slot_number": ord(info.slotNumber) if isinstance(info.slotNumber, bytes) else int(info.slotNumber),
            "tray_index": ord(info.trayIndex) if isinstance(info.trayIndex, bytes) else int(info.trayIndex),
            "module_id": ord(info.moduleId) if isinstance(info.moduleId, bytes) else int(info.moduleId)}


def _grace_blackwell(nvml, handle):
    """What DTD v13 added per GPU: fabric, recovery action, platform info, C2C mode. Each call is looked up at run
    time, so an older binding or driver leaves the facts None (not read) instead of failing the probe."""
    facts = _fabric(nvml, handle)
    facts["gpu_recovery_action"] = _recovery_action(nvml, handle)
    facts.update(_platform(nvml, handle))
    facts["c2c_mode"] = _fact(_try(nvml, "nvmlDeviceGetC2cModeInfoV", handle), lambda c: bool(c.isC2cEnabled))
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
    facts = {
        "index": index,
        "name": _fact(_try(nvml, "nvmlDeviceGetName", handle), _text),
        "uuid": _fact(_try(nvml, "nvmlDeviceGetUUID", handle), _text),
        "serial": _fact(_try(nvml, "nvmlDeviceGetSerial", handle), _text),
        "pci_bus_id": _fact(pci, lambda p: _text(p.busId)),
        "pci_device_id": _fact(pci, _device_id),
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
    facts.update(_grace_blackwell(nvml, handle))
    return facts


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
