"""A fake pynvml for simulated nodes: the NVML calls the node probe makes, answered from the scenario.

It is built from the same :class:`NodeFacts` the fake ``nvidia-smi`` prints, but independently of that
rendering, so a test that compares the probe's facts with the parsed XML checks both paths for real.
Also registers the simulated ``python3``: it runs the shipped probe against this fake NVML (fault
``no_python``: the node has no python3, so the caller falls back to nvidia-smi).
"""

from __future__ import annotations

import ctypes
import io
import types
from collections.abc import Sequence
from typing import Any

from nvdeploy.collect.probe.nvml_probe import FABRIC_STATES as PROBE_STATES
from nvdeploy.collect.probe.nvml_probe import FABRIC_SUMMARY as PROBE_SUMMARY
from nvdeploy.collect.probe.nvml_probe import RECOVERY_ACTION_FIELD, RECOVERY_ACTIONS
from nvdeploy.sim.scenario import NodeFacts, NodeScenario, node_facts, register_fault
from nvdeploy.sim.smi_xml import fabric_attached
from nvdeploy.sim.tools import OUTPUT_FILTERS, ToolOutput, register_tool

register_fault("no_python", "the node has no python3: the NVML probe cannot run and nvidia-smi is used instead")


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


NOT_SUPPORTED = 3
DRIVER_NOT_LOADED = 9
GPU_IS_LOST = 15
UNKNOWN = 999
# Of a lost GPU, NVML still hands out the handle and the PCI data the driver recorded at probe time.
_LOST_ANSWERS = {"nvmlDeviceGetHandleByIndex", "nvmlDeviceGetPciInfo"}


class FabricInfoV3(ctypes.Structure):
    """nvmlGpuFabricInfo_v3_t, the layout the probe hands to nvmlDeviceGetGpuFabricInfoV."""

    _fields_ = [("version", ctypes.c_uint), ("clusterUuid", ctypes.c_uint8 * 16), ("status", ctypes.c_uint),
                ("cliqueId", ctypes.c_uint32), ("state", ctypes.c_uint), ("healthMask", ctypes.c_uint32),
                ("healthSummary", ctypes.c_uint8)]


class PlatformInfoV2(ctypes.Structure):
    """nvmlPlatformInfo_v2_t: where a rack-scale GPU sits (chassis, slot, tray, module)."""

    _fields_ = [("version", ctypes.c_uint), ("ibGuid", ctypes.c_uint8 * 16),
                ("chassisSerialNumber", ctypes.c_char * 16), ("slotNumber", ctypes.c_uint8),
                ("trayIndex", ctypes.c_uint8), ("hostId", ctypes.c_uint8), ("peerType", ctypes.c_uint8),
                ("moduleId", ctypes.c_uint8)]


FABRIC_STATE_COMPLETED = 3
# nvmlGpuFabricInfo's codes, by the words nvidia-smi prints (the probe's tables read backwards).
FABRIC_STATES = {v: k for k, v in PROBE_STATES.items()}
FABRIC_SUMMARY = {v: k for k, v in PROBE_SUMMARY.items()}
FABRIC_BANDWIDTH = {"Degraded": 1, "Full": 2}


def fake_nvml(facts: NodeFacts) -> Any:
    """A module-like object with the pynvml functions and constants the probe uses."""
    nvml = types.SimpleNamespace()
    nvml.NVMLError = NVMLError
    nvml.NVML_FEATURE_ENABLED = 1
    nvml.NVML_DEVICE_MIG_ENABLE = 1
    nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    nvml.NVML_VOLATILE_ECC = 0
    nvml.NVML_AGGREGATE_ECC = 1
    nvml.NVML_TEMPERATURE_GPU = 0
    nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
    gpus = facts.gpus
    # The functions below refer to these locals, never to ``nvml``: a function held by the namespace it refers to
    # is a reference cycle, and a fleet run would leave one such namespace (with the node's facts) per node for
    # the cyclic collector, which frees them late and in bulk (10,000 nodes: ~100 MB of fragmented heap).
    volatile = nvml.NVML_VOLATILE_ECC

    def init() -> None:
        if not facts.driver_loaded:
            raise NVMLError(DRIVER_NOT_LOADED)

    def unsupported(*_: Any) -> Any:
        raise NVMLError(NOT_SUPPORTED)

    def major_minor(version: str) -> int:
        major, minor = (version.split(".") + ["0"])[:2]
        return int(major) * 1000 + int(minor) * 10

    nvml.nvmlInit = init
    nvml.nvmlShutdown = lambda: None
    nvml.nvmlSystemGetDriverVersion = lambda: facts.driver_version
    nvml.nvmlSystemGetCudaDriverVersion = lambda: major_minor(facts.cuda_version)
    nvml.nvmlDeviceGetCount = lambda: len(gpus)
    nvml.nvmlDeviceGetHandleByIndex = lambda index: gpus[index]
    nvml.nvmlDeviceGetName = lambda g: g.product_name
    nvml.nvmlDeviceGetUUID = lambda g: g.uuid
    nvml.nvmlDeviceGetSerial = lambda g: g.serial
    nvml.nvmlDeviceGetPciInfo = lambda g: types.SimpleNamespace(busId=g.bus_id.encode(),
                                                                pciDeviceId=int(g.pci_device_id + "10de", 16))
    nvml.nvmlDeviceGetPersistenceMode = lambda g: int(g.persistence)
    nvml.nvmlDeviceGetEccMode = lambda g: (int(g.ecc_enabled), int(g.ecc_enabled))
    nvml.nvmlDeviceGetTotalEccErrors = lambda g, kind, counter: (
        g.dram_uncorrectable_volatile if counter == volatile else g.dram_uncorrectable_aggregate)
    nvml.nvmlDeviceGetRemappedRows = lambda g: (g.remapped_rows_correctable, g.remapped_rows_uncorrectable,
                                                int(g.remap_pending), int(g.remap_failure))
    # HBM GPUs of the simulated generations remap rows instead of retiring pages.
    nvml.nvmlDeviceGetRetiredPagesPendingStatus = unsupported
    nvml.nvmlDeviceGetRetiredPages = unsupported
    nvml.nvmlDeviceGetCurrPcieLinkGeneration = lambda g: g.pcie_gen_current
    nvml.nvmlDeviceGetMaxPcieLinkGeneration = lambda g: g.pcie_gen_max
    nvml.nvmlDeviceGetCurrPcieLinkWidth = lambda g: g.pcie_width_current
    nvml.nvmlDeviceGetMaxPcieLinkWidth = lambda g: g.pcie_width_max
    nvml.nvmlDeviceGetMemoryInfo = lambda g: types.SimpleNamespace(total=g.memory_mib * 1024 * 1024)
    nvml.nvmlDeviceGetTemperature = lambda g, sensor: g.temperature_c

    def power(g: Any) -> int:
        if g.power_limit_w is None:
            raise NVMLError(NOT_SUPPORTED)
        return int(round(g.power_limit_w * 1000))

    nvml.nvmlDeviceGetPowerManagementLimit = power
    nvml.nvmlDeviceGetPowerManagementDefaultLimit = power

    def mig(g: Any) -> tuple[int, int]:
        if not g.mig_capable:
            raise NVMLError(NOT_SUPPORTED)
        return int(g.mig_enabled), int(g.mig_enabled)

    nvml.nvmlDeviceGetMigMode = mig
    # hw_slowdown | sw_thermal_slowdown | hw_thermal_slowdown, as the simulated XML marks a throttling GPU.
    nvml.nvmlDeviceGetCurrentClocksEventReasons = lambda g: (0x8 | 0x20 | 0x40) if g.thermal_slowdown else 0
    ecc_errors = nvml.nvmlDeviceGetTotalEccErrors

    def total_ecc(g: Any, kind: int, counter: int) -> int:
        if g.ecc_unreadable:
            raise NVMLError(UNKNOWN)
        return ecc_errors(g, kind, counter)

    nvml.nvmlDeviceGetTotalEccErrors = total_ecc

    def fabric_info(g: Any, ref: Any) -> int:
        info = ref._obj  # the structure behind ctypes.byref()
        if g.fabric is not None:  # a rack-scale tray (nvdeploy/sim/nvl72.py): what its XML prints
            fabric = g.fabric
            done = fabric.state == "Completed"
            info.state = FABRIC_STATES[fabric.state]
            info.status, info.cliqueId = 0, fabric.clique_id if done else 0
            if done:
                info.clusterUuid[:] = list(bytes.fromhex(fabric.cluster_uuid.replace("-", "")))
            info.healthSummary = FABRIC_SUMMARY.get(fabric.health, 0)
            # bandwidth bits 0-1, the three route flags False (2) at bits 2-7; configuration, partition N/A (0).
            info.healthMask = (FABRIC_BANDWIDTH.get(fabric.bandwidth, 0) | 2 << 2 | 2 << 4 | 2 << 6) if done else 0
            return 0
        # What the simulated XML prints: registered, clique 0 in no cluster, health not reported (as H100/H200).
        if not fabric_attached(facts, g):
            raise NVMLError(NOT_SUPPORTED)
        info.state, info.status, info.cliqueId, info.healthMask, info.healthSummary = FABRIC_STATE_COMPLETED, 0, 0, 0, 0
        return 0

    nvml.c_nvmlGpuFabricInfo_v3_t = FabricInfoV3
    nvml.nvmlDeviceGetGpuFabricInfoV = fabric_info
    for name in [n for n in vars(nvml) if n.startswith("nvmlDevice") and n not in _LOST_ANSWERS]:
        setattr(nvml, name, _unless_lost(getattr(nvml, name)))
    _rack_scale(nvml)
    return nvml


def _tray_only(g: Any) -> None:
    """What NVML answers a rack-scale call with: NOT_SUPPORTED off a tray (nvidia-smi prints no such element, lost
    or not), GPU_IS_LOST on a lost tray GPU."""
    if g.fabric is None:
        raise NVMLError(NOT_SUPPORTED)
    if g.lost:
        raise NVMLError(GPU_IS_LOST)


def _rack_scale(nvml: Any) -> None:
    """The calls only an NVL72 tray's GPU answers (nvdeploy/sim/nvl72.py): recovery action, platform info, C2C."""

    def field_values(g: Any, fields: Sequence[int]) -> list[Any]:
        # Only the recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION), where the XML prints one.
        if g.recovery_action is None or list(fields) != [RECOVERY_ACTION_FIELD]:
            raise NVMLError(NOT_SUPPORTED)
        _tray_only(g)
        code = next(k for k, v in RECOVERY_ACTIONS.items() if v == g.recovery_action)
        return [types.SimpleNamespace(nvmlReturn=0, value=types.SimpleNamespace(uiVal=code))]

    def platform_info(g: Any, ref: Any) -> int:
        _tray_only(g)
        info = ref._obj
        info.chassisSerialNumber = g.fabric.chassis_serial.encode()
        info.slotNumber, info.trayIndex, info.moduleId = g.fabric.slot, g.fabric.tray, g.module_id
        return 0

    def c2c(g: Any) -> Any:
        _tray_only(g)
        return types.SimpleNamespace(isC2cEnabled=1)

    nvml.nvmlDeviceGetFieldValues = field_values
    nvml.c_nvmlPlatformInfo_v2_t = PlatformInfoV2
    nvml.nvmlDeviceGetPlatformInfo = platform_info
    nvml.nvmlDeviceGetC2cModeInfoV = c2c


def _unless_lost(function: Any) -> Any:
    def call(*args: Any) -> Any:
        if args and getattr(args[0], "lost", False):
            raise NVMLError(GPU_IS_LOST)
        return function(*args)

    return call


def _lost_gpu_exit(scenario: NodeScenario, tool: str, args: Sequence[str], output: ToolOutput) -> ToolOutput:
    """nvidia-smi's queries exit 15 (NVML_ERROR_GPU_IS_LOST) while a GPU of the node is lost."""
    query = "-q" in args or "--query" in args or any(a.startswith("--query-gpu") for a in args)
    if tool == "nvidia-smi" and query and output.rc == 0 and scenario.has("gpu_lost"):
        return ToolOutput(output.stdout, output.stderr, 15, output.hang, output.delay_s)
    return output


OUTPUT_FILTERS.append(_lost_gpu_exit)


def run_probe(scenario: NodeScenario) -> ToolOutput:
    from nvdeploy.collect.probe import nvml_probe

    # The probe writes to a stream of its own: never swap the process-wide sys.stdout from worker threads.
    buffer = io.StringIO()
    rc = nvml_probe.main(fake_nvml(node_facts(scenario)), out=buffer)
    return ToolOutput(buffer.getvalue().encode(), rc=rc)


@register_tool("python3")
def python3(scenario: NodeScenario, args: Sequence[str]) -> ToolOutput:
    from nvdeploy.collect.probe.ship import BOOTSTRAP

    if scenario.has("no_python"):
        return ToolOutput(b"", b"sh: 1: python3: not found\n", 127)
    args = list(args)
    while args and args[0] in ("-I", "-S"):  # isolated, no site: as the probe's launcher starts it
        args.pop(0)
    if len(args) >= 2 and args[0] == "-c" and args[1] == BOOTSTRAP:
        return run_probe(scenario)
    return ToolOutput(b"", b"simulated python3 runs only the nvdeploy probe\n", 2)
