"""What ``nvidia-smi`` prints on a simulated node: ``-q -x`` XML (DTD v12 layout), ``--query-gpu`` CSV, ``-L``,
``--version`` and the default table; with fault ``smi_r610`` the R610 forms of each (see :data:`DRIVER_NOTE`).

The XML follows real driver 535/550 output byte for byte in shape: ``<?xml version="1.0" ?>``, the
``nvsmi_device_v12.dtd`` DOCTYPE, tab indentation, a blank line after each ``</gpu>``, empty ``processes``
elements written as an open/close pair and ``mig_devices`` holding the text ``None``.
"""

from __future__ import annotations

import datetime
import functools
from dataclasses import replace
from typing import Callable, Union

from nvdeploy.sim.scenario import NodeFacts, SimGpu, register_fault

register_fault("smi_r610", "nvidia-smi prints the R610 layouts: the driver and CUDA versions with their "
               "deprecation note next to new KMD and CUDA UMD versions, the power limits one level down under "
               "GPU Ceiling Power Limit, the table header 'KMD Version: ... CUDA UMD Version: ...' and "
               "'DRIVER version : Deprecated, see KMD version' in --version (the versions themselves are unchanged)")
# What R610+ appends to the deprecated version fields.
DRIVER_NOTE = " [Deprecated; will be removed in CUDA 14.0. Use KMD Version instead]"
CUDA_NOTE = " [Deprecated; will be removed in CUDA 14.0. Use CUDA UMD Version instead]"
NO_CLUSTER = "00000000-0000-0000-0000-000000000000"


# xml.sax.saxutils's escape and quoteattr, the same text: that module imports urllib.request (http.client, email,
# ssl), a third of the import time of each fake tool process on the SSH test nodes.
def escape(data: str) -> str:
    return data.replace("&", "&amp;").replace(">", "&gt;").replace("<", "&lt;")


def quoteattr(data: str) -> str:
    data = escape(data).replace("\n", "&#10;").replace("\r", "&#13;").replace("\t", "&#9;")
    if '"' not in data:
        return f'"{data}"'
    if "'" not in data:
        return f"'{data}'"
    return '"{}"'.format(data.replace('"', "&quot;"))

SIM_TIME = datetime.datetime(2026, 7, 14, 11, 12, 53)
NA = "N/A"
# What nvidia-smi prints in place of a value NVML failed to read (nvmlErrorString of the error).
UNKNOWN_ERROR = "Unknown Error"
GPU_IS_LOST = "GPU is lost"
# Of a lost GPU nvidia-smi still knows where it sits on the bus (the driver's PCI data), nothing else.
_LOST_KEEPS = {"pci_bus", "pci_device", "pci_domain", "pci_device_id", "pci_bus_id", "pci_sub_system_id"}


class _Text:
    """Element content written on its own line (``<mig_devices>`` / ``None`` / ``</mig_devices>``)."""

    def __init__(self, text: str) -> None:
        self.text = text


Node = tuple[str, Union[str, _Text, list]]

# Per-architecture constants: bar1 MiB, reserved MiB, max clocks (graphics, sm, mem, video), row-remap banks.
_ARCH = {
    "Ampere": {"bar1": 131072, "reserved": 869, "clocks": (1410, 1410, 1593, 1290), "banks": 640, "hbm": True},
    "Hopper": {"bar1": 131072, "reserved": 551, "clocks": (1980, 1980, 2619, 1545), "banks": 2560, "hbm": True},
    "Blackwell": {"bar1": 262144, "reserved": 1002, "clocks": (1965, 1965, 3996, 1650), "banks": 4096, "hbm": True},
    "Ada Lovelace": {"bar1": 65536, "reserved": 582, "clocks": (2520, 2520, 9001, 1965), "banks": 192, "hbm": False},
}
_SUBSYSTEM = {"20b2": "147F", "2330": "16C1", "2331": "1626", "2335": "18BE", "2901": "1999", "26b9": "1851"}
_INFOROM = {"Ampere": "G506.0212.00.01", "Hopper": "G520.0200.00.05", "Blackwell": "G525.0210.00.02",
            "Ada Lovelace": "G133.0242.00.03"}


def timestamp() -> str:
    """The fixed clock of the simulation, as nvidia-smi prints it (``Tue Jul 14 11:12:53 2026``)."""
    return f"{SIM_TIME:%a %b} {SIM_TIME.day:2d} {SIM_TIME:%H:%M:%S %Y}"


def _render(node: Node, depth: int, out: list[str]) -> None:
    tag, value = node
    pad = "\t" * depth
    name = tag.split(" ", 1)[0]
    if isinstance(value, str):
        out.append(f"{pad}<{tag}>{escape(value)}</{name}>")
    elif isinstance(value, _Text):
        out.extend((f"{pad}<{tag}>", f"{pad}\t{escape(value.text)}", f"{pad}</{name}>"))
    else:
        out.append(f"{pad}<{tag}>")
        for child in value:
            _render(child, depth + 1, out)
        out.append(f"{pad}</{name}>")


def _arch(gpu: SimGpu) -> dict:
    return _ARCH.get(gpu.architecture, _ARCH["Hopper"])


def _clocks(gpu: SimGpu) -> tuple[int, int, int, int]:
    graphics, sm, mem, video = _arch(gpu)["clocks"]
    if "H200" in gpu.product_name:
        mem = 3201
    return graphics, sm, mem, video


def _watts(value: float | None) -> str:
    return f"{value:.2f} W" if value is not None else NA


def _yes(flag: bool) -> str:
    return "Yes" if flag else "No"


def _enabled(flag: bool) -> str:
    return "Enabled" if flag else "Disabled"


def _active(flag: bool) -> str:
    return "Active" if flag else "Not Active"


def _ecc_counts(gpu: SimGpu, aggregate: bool) -> list[Node]:
    dram_unc = gpu.dram_uncorrectable_aggregate if aggregate else gpu.dram_uncorrectable_volatile
    nodes: list[Node] = [("sram_correctable", "0"), ("sram_uncorrectable_parity", "0"),
                         ("sram_uncorrectable_secded", "0"), ("dram_correctable", "0"),
                         ("dram_uncorrectable", str(dram_unc))]
    if aggregate:
        nodes.append(("sram_threshold_exceeded", "No"))
    if gpu.ecc_unreadable:
        nodes = [(tag, UNKNOWN_ERROR) for tag, _ in nodes]
    return nodes


def _lost(node: Node) -> Node:
    """``node`` as nvidia-smi prints it for a lost GPU: every value ``GPU is lost`` but the PCI location."""
    tag, value = node
    if isinstance(value, list):
        return (tag, [_lost(child) for child in value])
    if isinstance(value, str) and tag.split(" ", 1)[0] not in _LOST_KEEPS:
        return (tag, GPU_IS_LOST)
    return node


def fabric_attached(facts: NodeFacts, gpu: SimGpu) -> bool:
    """Whether the GPU registers with an NVLink fabric (NVSwitch systems from Hopper on)."""
    return any(facts.nvswitches) and gpu.architecture != "Ampere"


def _fabric_node(gpu: SimGpu, fallback: tuple[str, str, str, str]) -> Node:
    """``<fabric>``: a rack-scale tray's registration and health as DTD v13 prints it (the real GB200 capture's
    shape); elsewhere the registration of an NVSwitch system with the health not reported."""
    fabric = gpu.fabric
    if fabric is None:
        return ("fabric", [("state", fallback[0]), ("status", fallback[1]), ("cliqueId", fallback[2]),
                           ("clusterUuid", fallback[3]),
                           ("health", [(k, NA) for k in ("summary", "bandwidth", "route_recovery_in_progress",
                                                         "route_unhealthy", "access_timeout_recovery",
                                                         "incorrect_configuration", "partition_assigned")])])
    done = fabric.state == "Completed"
    flag = "False" if done else NA
    return ("fabric", [("state", fabric.state), ("status", fabric.status if done else NA),
                       ("cliqueId", str(fabric.clique_id) if done else NA),
                       ("clusterUuid", fabric.cluster_uuid if done else NA),
                       ("health", [("summary", fabric.health), ("bandwidth", fabric.bandwidth),
                                   ("route_recovery_in_progress", flag), ("route_unhealthy", flag),
                                   ("access_timeout_recovery", flag), ("incorrect_configuration", NA),
                                   ("partition_assigned", NA)])])


def _platform_info(gpu: SimGpu) -> list[Node]:
    """``<platformInfo>`` of a rack-scale tray's GPU (where it sits in the rack); nothing elsewhere."""
    if gpu.fabric is None:
        return []
    return [("platformInfo", [("chassis_serial_number", gpu.fabric.chassis_serial),
                              ("slot_number", str(gpu.fabric.slot)), ("tray_index", str(gpu.fabric.tray)),
                              ("host_id", "1"), ("peer_type", "Switch Connected"),
                              ("module_id", str(gpu.module_id)), ("gpu_fabric_guid", f"0x{gpu.bus:016x}")])]


def _power_readings(facts: NodeFacts, draw: float | None, limit: float | None, min_limit: float | None) -> list[Node]:
    limits: list[Node] = [("current_power_limit", _watts(limit)), ("requested_power_limit", _watts(limit)),
                          ("default_power_limit", _watts(limit)), ("min_power_limit", _watts(min_limit)),
                          ("max_power_limit", _watts(limit))]
    if facts.smi_format == "r610":  # the limits one level down, as "GPU Ceiling Power Limit" in -q
        return [("power_state", "P0"), ("power_draw", _watts(draw)), ("gpu_ceiling_power_limit", limits)]
    return [("power_state", "P0"), ("power_draw", _watts(draw)), *limits]


def _gpu_node(facts: NodeFacts, gpu: SimGpu) -> Node:
    arch = _arch(gpu)
    graphics, sm, mem, video = _clocks(gpu)
    mig = _enabled(gpu.mig_enabled) if gpu.mig_capable else NA
    reserved = arch["reserved"]
    limit = gpu.power_limit_w
    draw = limit * 0.1 + gpu.temperature_c / 10 if limit is not None else None
    min_limit = (200.0 if limit >= 500 else 100.0) if limit is not None else None
    attached = fabric_attached(facts, gpu)
    fabric = ("Completed", "Success", "0", NO_CLUSTER) if attached else (NA, NA, NA, NA)
    gen, width = str(gpu.pcie_gen_max), f"{gpu.pcie_width_max}x"
    throttled = gpu.thermal_slowdown
    supported = [("value", f"{mem} MHz")] + [("supported_graphics_clock", f"{mhz} MHz")
                                             for mhz in range(graphics, 344, -15)]
    children: list[Node] = [
        ("product_name", gpu.product_name),
        ("product_brand", "NVIDIA"),
        ("product_architecture", gpu.architecture),
        ("display_mode", "Disabled"),
        ("display_active", "Disabled"),
        ("persistence_mode", _enabled(gpu.persistence)),
        ("addressing_mode", "None"),
        ("mig_mode", [("current_mig", mig), ("pending_mig", _enabled(gpu.mig_pending) if gpu.mig_capable and
                                                 gpu.mig_pending is not None else mig)]),
        ("mig_devices", _Text("None")),
        ("accounting_mode", "Disabled"),
        ("accounting_mode_buffer_size", "4000"),
        ("driver_model", [("current_dm", NA), ("pending_dm", NA)]),
        ("serial", gpu.serial),
        ("uuid", gpu.uuid),
        ("minor_number", str(gpu.index)),
        ("vbios_version", gpu.vbios_version),
        ("multigpu_board", "No"),
        ("board_id", f"0x{gpu.bus:x}00"),
        ("board_part_number", "692-2G520-0200-000"),
        ("gpu_part_number", f"{gpu.pci_device_id.upper()}-885-A1"),
        ("gpu_fru_part_number", NA),
        ("gpu_module_id", str(gpu.module_id)),
        *_platform_info(gpu),
        ("inforom_version", [("img_version", _INFOROM.get(gpu.architecture, "G520.0200.00.05")),
                             ("oem_object", "2.1"), ("ecc_object", "7.16"), ("pwr_object", NA)]),
        ("inforom_bbx_flush", [("latest_timestamp", f"{SIM_TIME:%Y/%m/%d} 05:52:57.891"),
                               ("latest_duration", "91568 us")]),
        ("gpu_operation_mode", [("current_gom", NA), ("pending_gom", NA)]),
        *([("c2c_mode", "Enabled")] if gpu.fabric is not None else []),
        ("gsp_firmware_version", facts.driver_version),
        ("gpu_virtualization_mode", [("virtualization_mode", "None"), ("host_vgpu_mode", NA)]),
        *([("gpu_recovery_action", gpu.recovery_action)] if gpu.recovery_action is not None else []),
        ("gpu_reset_status", [("reset_required", "No"), ("drain_and_reset_recommended", "No")]),
        ("ibmnpu", [("relaxed_ordering_mode", NA)]),
        ("pci", [
            ("pci_bus", f"{gpu.bus:02X}"),
            ("pci_device", "00"),
            ("pci_domain", "0000"),
            ("pci_device_id", f"{gpu.pci_device_id.upper()}10DE"),
            ("pci_bus_id", gpu.bus_id),
            ("pci_sub_system_id", f"{_SUBSYSTEM.get(gpu.pci_device_id, '0000')}10DE"),
            ("pci_gpu_link_info", [
                ("pcie_gen", [("max_link_gen", gen), ("current_link_gen", str(gpu.pcie_gen_current)),
                              ("device_current_link_gen", str(gpu.pcie_gen_current)),
                              ("max_device_link_gen", gen), ("max_host_link_gen", gen)]),
                ("link_widths", [("max_link_width", width),
                                 ("current_link_width", f"{gpu.pcie_width_current}x")]),
            ]),
            ("pci_bridge_chip", [("bridge_chip_type", NA), ("bridge_chip_fw", NA)]),
            ("replay_counter", "0"),
            ("replay_rollover_counter", "0"),
            ("tx_util", "0 KB/s"),
            ("rx_util", "0 KB/s"),
            ("atomic_caps_inbound", NA),
            ("atomic_caps_outbound", NA),
        ]),
        ("fan_speed", NA),
        ("performance_state", "P0"),
        ("clocks_event_reasons", [
            ("clocks_event_reason_gpu_idle", _active(False)),
            ("clocks_event_reason_applications_clocks_setting", _active(False)),
            ("clocks_event_reason_sw_power_cap", _active(False)),
            ("clocks_event_reason_hw_slowdown", _active(throttled)),
            ("clocks_event_reason_hw_thermal_slowdown", _active(throttled)),
            ("clocks_event_reason_hw_power_brake_slowdown", _active(False)),
            ("clocks_event_reason_sync_boost", _active(False)),
            ("clocks_event_reason_sw_thermal_slowdown", _active(throttled)),
            ("clocks_event_reason_display_clocks_setting", _active(False)),
        ]),
        ("sparse_operation_mode", "Disabled"),
        ("fb_memory_usage", [("total", f"{gpu.memory_mib} MiB"), ("reserved", f"{reserved} MiB"),
                             ("used", "0 MiB"), ("free", f"{gpu.memory_mib - reserved} MiB")]),
        ("bar1_memory_usage", [("total", f"{arch['bar1']} MiB"), ("used", "1 MiB"),
                               ("free", f"{arch['bar1'] - 1} MiB")]),
        ("cc_protected_memory_usage", [("total", "0 MiB"), ("used", "0 MiB"), ("free", "0 MiB")]),
        ("compute_mode", "Default"),
        ("utilization", [(f"{u}_util", "0 %") for u in ("gpu", "memory", "encoder", "decoder", "jpeg", "ofa")]),
        ("encoder_stats", [("session_count", "0"), ("average_fps", "0"), ("average_latency", "0")]),
        ("fbc_stats", [("session_count", "0"), ("average_fps", "0"), ("average_latency", "0")]),
        ("ecc_mode", [("current_ecc", _enabled(gpu.ecc_enabled)), ("pending_ecc", _enabled(gpu.ecc_enabled))]),
        ("ecc_errors", [
            ("volatile", _ecc_counts(gpu, aggregate=False)),
            ("aggregate", _ecc_counts(gpu, aggregate=True)),
            ("aggregate_uncorrectable_sram_sources", [(f"sram_{s}", "0") for s in
                                                      ("l2", "sm", "microcontroller", "pcie", "other")]),
        ]),
        ("retired_pages", [
            ("multiple_single_bit_retirement", [("retired_count", NA), ("retired_pagelist", NA)]),
            ("double_bit_retirement", [("retired_count", NA), ("retired_pagelist", NA)]),
            ("pending_blacklist", NA),
            ("pending_retirement", NA),
        ]),
        ("remapped_rows", [
            ("remapped_row_corr", str(gpu.remapped_rows_correctable)),
            ("remapped_row_unc", str(gpu.remapped_rows_uncorrectable)),
            ("remapped_row_pending", _yes(gpu.remap_pending)),
            ("remapped_row_failure", _yes(gpu.remap_failure)),
            ("row_remapper_histogram", [
                ("row_remapper_histogram_max", f"{arch['banks']} bank(s)"),
                ("row_remapper_histogram_high", "0 bank(s)"),
                ("row_remapper_histogram_partial", "0 bank(s)"),
                ("row_remapper_histogram_low", "0 bank(s)"),
                ("row_remapper_histogram_none", "0 bank(s)"),
            ]),
        ]),
        ("temperature", [
            ("gpu_temp", f"{gpu.temperature_c} C"),
            ("gpu_temp_tlimit", f"{max(0, 87 - gpu.temperature_c)} C"),
            ("gpu_temp_max_tlimit_threshold", "-8 C"),
            ("gpu_temp_slow_tlimit_threshold", "-2 C"),
            ("gpu_temp_max_gpu_tlimit_threshold", "0 C"),
            ("gpu_target_temperature", NA),
            ("memory_temp", f"{gpu.temperature_c + 8} C" if arch["hbm"] else NA),
            ("gpu_temp_max_mem_tlimit_threshold", "0 C" if arch["hbm"] else NA),
        ]),
        ("supported_gpu_target_temp", [("gpu_target_temp_min", NA), ("gpu_target_temp_max", NA)]),
        ("gpu_power_readings", _power_readings(facts, draw, limit, min_limit)),
        ("module_power_readings", [("power_state", "P0")] + [(k, NA) for k in (
            "power_draw", "current_power_limit", "requested_power_limit", "default_power_limit",
            "min_power_limit", "max_power_limit")]),
        ("clocks", [("graphics_clock", "345 MHz"), ("sm_clock", "345 MHz"), ("mem_clock", f"{mem} MHz"),
                    ("video_clock", "765 MHz")]),
        ("applications_clocks", [("graphics_clock", f"{graphics} MHz"), ("mem_clock", f"{mem} MHz")]),
        ("default_applications_clocks", [("graphics_clock", f"{graphics} MHz"), ("mem_clock", f"{mem} MHz")]),
        ("deferred_clocks", [("mem_clock", NA)]),
        ("max_clocks", [("graphics_clock", f"{graphics} MHz"), ("sm_clock", f"{sm} MHz"),
                        ("mem_clock", f"{mem} MHz"), ("video_clock", f"{video} MHz")]),
        ("max_customer_boost_clocks", [("graphics_clock", f"{graphics} MHz")]),
        ("clock_policy", [("auto_boost", NA), ("auto_boost_default", NA)]),
        ("voltage", [("graphics_volt", "670.000 mV")]),
        _fabric_node(gpu, fabric),
        ("supported_clocks", [("supported_mem_clock", supported)]),
        ("processes", []),
        ("accounted_processes", []),
    ]
    if gpu.lost:
        children = [_lost(child) for child in children]
    return (f"gpu id={quoteattr(gpu.bus_id)}", children)


_UUID_TOKEN = "@@nvdeploy-sim-uuid@@"
_SERIAL_TOKEN = "@@nvdeploy-sim-serial@@"


def _gpu_block(facts: NodeFacts, gpu: SimGpu) -> str:
    """One ``<gpu>`` element. Rendered once per distinct GPU state, hardware and driver (a fleet of identical nodes
    has a few dozen), then given this GPU's UUID and serial, the only values that differ from node to node."""
    shared = NodeFacts(hostname="", driver_version=facts.driver_version, cuda_version=facts.cuda_version,
                       driver_loaded=facts.driver_loaded, gpus=(), pci_gpus=(), nvswitches=facts.nvswitches,
                       smi_format=facts.smi_format)
    text = _gpu_template(shared, replace(gpu, uuid=_UUID_TOKEN, serial=_SERIAL_TOKEN))
    return text.replace(_UUID_TOKEN, escape(gpu.uuid)).replace(_SERIAL_TOKEN, escape(gpu.serial))


@functools.lru_cache(maxsize=1024)
def _gpu_template(facts: NodeFacts, gpu: SimGpu) -> str:
    out: list[str] = []
    _render(_gpu_node(facts, gpu), 1, out)
    return "\n".join(out)


def render_xml(facts: NodeFacts) -> str:
    """``nvidia-smi -q -x`` output for the GPUs nvidia-smi sees."""
    # Rack-scale trays run drivers of DTD v13 (580 and later), which added the fabric health and recovery action.
    dtd = "v13" if any(g.fabric is not None for g in facts.gpus) else "v12"
    out = ['<?xml version="1.0" ?>', f'<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_{dtd}.dtd">', "<nvidia_smi_log>"]
    if facts.smi_format == "r610":
        versions: list[Node] = [("driver_version", facts.driver_version + DRIVER_NOTE),
                                ("cuda_version", facts.cuda_version + CUDA_NOTE),
                                ("kmd_version", facts.driver_version), ("cuda_umd_version", facts.cuda_version)]
    else:
        versions = [("driver_version", facts.driver_version), ("cuda_version", facts.cuda_version)]
    for node in (("timestamp", timestamp()), *versions, ("attached_gpus", str(len(facts.gpus)))):
        _render(node, 1, out)
    for gpu in facts.gpus:
        out.append(_gpu_block(facts, gpu))
        out.append("")
    out.append("</nvidia_smi_log>")
    return "\n".join(out) + "\n"


def render_version(facts: NodeFacts) -> str:
    """``nvidia-smi --version``."""
    nvml = ".".join(facts.driver_version.split(".")[:2])
    if facts.smi_format == "r610":
        return (f"NVIDIA-SMI version  : {facts.driver_version}\nNVML version        : {nvml}\n"
                "DRIVER version      : Deprecated, see KMD version\n"
                f"KMD version         : {facts.driver_version}\nCUDA UMD Version    : {facts.cuda_version}\n")
    return (f"NVIDIA-SMI version  : {facts.driver_version}\nNVML version        : {nvml}\n"
            f"DRIVER version      : {facts.driver_version}\nCUDA Version        : {facts.cuda_version}\n")


_RULE = "+-----------------------------------------+------------------------+----------------------+"


def render_table(facts: NodeFacts) -> str:
    """The default ``nvidia-smi`` table (the 89-column layout of R550+), GPU rows and an empty process table."""
    if facts.smi_format == "r610":
        versions = f"KMD Version: {facts.driver_version:<14}CUDA UMD Version: {facts.cuda_version:<9}"
    else:
        versions = f"Driver Version: {facts.driver_version:<15}CUDA Version: {facts.cuda_version:<9}"
    head = f"NVIDIA-SMI {facts.driver_version:<23}{versions}"
    out = [f"{timestamp()}       ", "+" + "-" * 89 + "+", f"| {head:<88}|", _RULE,
           "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
           "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
           "|                                         |                        |               MIG M. |",
           "|=========================================+========================+======================|"]
    for gpu in facts.gpus:
        name = gpu.product_name if len(gpu.product_name) <= 26 else gpu.product_name[:22] + " ..."
        persistence = "On " if gpu.persistence else "Off"
        ecc = str(gpu.dram_uncorrectable_volatile) if gpu.ecc_enabled else "N/A"
        limit = gpu.power_limit_w
        draw = f"{limit * 0.1 + gpu.temperature_c / 10:.0f}W / {limit:.0f}W" if limit is not None else "N/A / N/A"
        mig = _enabled(gpu.mig_enabled) if gpu.mig_capable else "N/A"
        memory = f"0MiB / {gpu.memory_mib}MiB"
        out += [f"| {gpu.index:>3}  {name:<31}{persistence} |   {gpu.bus_id} Off | {ecc:>20} |",
                f"| N/A   {gpu.temperature_c:>2}C    P0 {draw:>23} | {memory:>22} |{'0%':>8}      Default |",
                f"|                                         |                        | {mig:>20} |", _RULE]
    out += ["", "+" + "-" * 89 + "+", f"| {'Processes:':<88}|",
            "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
            "|        ID   ID                                                               Usage      |",
            "|" + "=" * 89 + "|", f"| {' No running processes found':<88}|", "+" + "-" * 89 + "+"]
    return "\n".join(out) + "\n"


def render_list(facts: NodeFacts) -> str:
    """``nvidia-smi -L`` output."""
    return "".join(f"GPU {g.index}: {g.product_name} (UUID: {g.uuid})\n" for g in facts.gpus)


# field -> (header, unit or "", value). Aliases map to their canonical field.
_Field = tuple[str, str, Callable[[NodeFacts, SimGpu], str]]
_FIELDS: dict[str, _Field] = {
    "timestamp": ("timestamp", "", lambda f, g: f"{SIM_TIME:%Y/%m/%d %H:%M:%S}.353"),
    "driver_version": ("driver_version", "", lambda f, g: f.driver_version),
    "count": ("count", "", lambda f, g: str(len(f.gpus))),
    "index": ("index", "", lambda f, g: str(g.index)),
    "name": ("name", "", lambda f, g: g.product_name),
    "serial": ("serial", "", lambda f, g: g.serial),
    "uuid": ("uuid", "", lambda f, g: g.uuid),
    "pci.bus_id": ("pci.bus_id", "", lambda f, g: g.bus_id),
    "pci.device_id": ("pci.device_id", "", lambda f, g: f"0x{g.pci_device_id.upper()}10DE"),
    "vbios_version": ("vbios_version", "", lambda f, g: g.vbios_version),
    "persistence_mode": ("persistence_mode", "", lambda f, g: _enabled(g.persistence)),
    "ecc.mode.current": ("ecc.mode.current", "", lambda f, g: _enabled(g.ecc_enabled)),
    "mig.mode.current": ("mig.mode.current", "", lambda f, g: _enabled(g.mig_enabled) if g.mig_capable else "[N/A]"),
    "memory.total": ("memory.total", "MiB", lambda f, g: str(g.memory_mib)),
    "power.limit": ("power.limit", "W", lambda f, g: f"{g.power_limit_w:.2f}" if g.power_limit_w else "[N/A]"),
    "power.default_limit": ("power.default_limit", "W",
                            lambda f, g: f"{g.power_limit_w:.2f}" if g.power_limit_w else "[N/A]"),
    "pstate": ("pstate", "", lambda f, g: "P0"),
    "ecc.errors.uncorrected.volatile.dram": ("ecc.errors.uncorrected.volatile.dram", "",
                                             lambda f, g: str(g.dram_uncorrectable_volatile)),
    "ecc.errors.uncorrected.aggregate.dram": ("ecc.errors.uncorrected.aggregate.dram", "",
                                              lambda f, g: str(g.dram_uncorrectable_aggregate)),
    "ecc.errors.uncorrected.volatile.total": ("ecc.errors.uncorrected.volatile.total", "",
                                              lambda f, g: str(g.dram_uncorrectable_volatile)),
    "ecc.errors.uncorrected.aggregate.total": ("ecc.errors.uncorrected.aggregate.total", "",
                                               lambda f, g: str(g.dram_uncorrectable_aggregate)),
    "clocks_event_reasons.active": ("clocks_event_reasons.active", "",
                                    lambda f, g: "0x0000000000000068" if g.thermal_slowdown else "0x0000000000000000"),
    "temperature.gpu": ("temperature.gpu", "", lambda f, g: str(g.temperature_c)),
    "pcie.link.gen.current": ("pcie.link.gen.current", "", lambda f, g: str(g.pcie_gen_current)),
    "pcie.link.gen.max": ("pcie.link.gen.max", "", lambda f, g: str(g.pcie_gen_max)),
    "pcie.link.width.current": ("pcie.link.width.current", "", lambda f, g: str(g.pcie_width_current)),
    "pcie.link.width.max": ("pcie.link.width.max", "", lambda f, g: str(g.pcie_width_max)),
}
_ALIASES = {"gpu_name": "name", "gpu_uuid": "uuid", "gpu_serial": "serial", "gpu_bus_id": "pci.bus_id",
            "enforced.power.limit": "power.limit", "ecc_mode.current": "ecc.mode.current",
            "pcie.link.gen.gpucurrent": "pcie.link.gen.current", "clocks_throttle_reasons.active":
            "clocks_event_reasons.active"}
SUPPORTED_QUERY_FIELDS = tuple(_FIELDS) + tuple(_ALIASES)


def render_query_csv(facts: NodeFacts, fields: list[str], header: bool = True, units: bool = True) -> str:
    """``nvidia-smi --query-gpu=<fields> --format=csv[,noheader][,nounits]``; KeyError for an unknown field."""
    specs = []
    for raw in fields:
        key = raw.strip().lower()
        key = _ALIASES.get(key, key)
        if key not in _FIELDS:
            raise KeyError(raw)
        specs.append(_FIELDS[key])
    lines = []
    if header:
        lines.append(", ".join(f"{h} [{u}]" if u and units else h for h, u, _ in specs))
    for gpu in facts.gpus:
        values = []
        for header, unit, value in specs:
            text = value(facts, gpu)
            if gpu.lost and header not in ("index", "pci.bus_id", "timestamp", "driver_version", "count"):
                text = f"[{GPU_IS_LOST}]"
            elif gpu.ecc_unreadable and header.startswith("ecc.errors."):
                text = f"[{UNKNOWN_ERROR}]"
            values.append(f"{text} {unit}" if unit and units and not text.startswith("[") else text)
        lines.append(", ".join(values))
    return "".join(line + "\n" for line in lines)
