"""The datacenter side of a simulated node: NVLink, topology, fabric manager, InfiniBand, kernel modules, OFED.

Tools (the real tools' byte formats; compare tests/fixtures/real/):

- ``nvidia-smi nvlink -s`` (``--status``, optional ``-i N``): ``GPU n: <name> (UUID: ...)`` then ``\\t Link k: 26.562
  GB/s`` for the hardware profile's ``nvlink: {links, speed_gbps}``; ``Device does not have or support Nvlink`` on
  SKUs without NVLink; ``Nvlink queries are not supported for Devices in MIG mode`` under ``mig_enabled``.
- ``nvidia-smi topo -m``: the tab-separated matrix with ``NV<links>`` between every GPU pair on NVSwitch SKUs
  (``NODE``/``SYS`` by NUMA half elsewhere), one NIC column per IB HCA (``PIX`` to its GPU) plus the Ethernet
  bond, CPU/NUMA affinity, ``Legend:`` and ``NIC Legend:``.
- ``systemctl is-active UNIT...``: ``nvidia-fabricmanager`` is ``active`` on NVSwitch SKUs (``inactive``
  elsewhere: not installed), ``nvidia-persistenced`` and ``nvidia-dcgm`` ``active``; exit 3 unless all active.
- ``nv-fabricmanager --version``: ``Fabric Manager version is : <driver version>`` (not found without NVSwitch).
- ``ibstat``: for a profile ``ib: {hcas, rate_gbps}``, HCAs ``mlx5_0``.. each with one InfiniBand port Active at the
  rate (``MT4129`` NDR 400, ``MT4123`` HDR 200), then ``mlx5_bond_0``, an Ethernet (RoCE) bond Active at 200; a
  profile without ``ib`` has only an Ethernet ``mlx5_0``.
- ``lsmod``: the NVIDIA modules (``nvidia_peermem`` when the profile expects IB), mlx5 and ib modules.
- ``ofed_info -s``: ``MLNX_OFED_LINUX-23.10-1.1.9.0:``.

Faults (each changes only what is listed; dcgmi and nccl-tests faults are in nvdeploy/sim/dcgm_tool.py and
nvdeploy/sim/nccl_tool.py):

- ``nvlink_down``: GPU 3's links 2 and 9 are ``<inactive>`` in ``nvidia-smi nvlink -s``; ``topo -m`` shows
  ``NV<links-2>`` between GPU 3 and every other GPU.
- ``pcie_degraded`` (nvdeploy/sim/scenario.py): GPU 4's link at x8 of x16.
- ``thermal_throttle`` (scenario.py): GPU 6 at 91 C with HW/SW thermal slowdown active.
- ``mig_enabled`` (scenario.py): MIG mode Enabled; ``nvlink -s`` then prints the MIG message for every GPU.
- ``fabricmanager_down``: ``systemctl is-active nvidia-fabricmanager`` prints ``failed`` (exit 3); CUDA programs
  (nccl-tests, DCGM's CUDA tests) fail with "system not yet initialized" on NVSwitch SKUs.
- ``ib_port_down``: ``mlx5_3`` port 1 is ``Down`` / ``Polling`` at rate 40 with LID 0 (cable pulled).
- ``peermem_missing``: ``lsmod`` does not list ``nvidia_peermem``.
- ``rail_down:<NIC>`` (nvdeploy/sim/perf.py): that NIC's port is ``Down`` / ``Polling`` as under ``ib_port_down``.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence

from nvdeploy.sim import perf
from nvdeploy.sim.scenario import NodeScenario, node_facts, register_fault
from nvdeploy.sim.tools import DRIVER_MISSING_MESSAGE, INVALID_ARGS_MESSAGE, SMI_SUBCOMMANDS, ToolOutput, register_tool

NVLINK_DOWN_GPU = 3
NVLINK_DOWN_LINKS = (2, 9)
IB_DOWN_HCA = 3
OFED_VERSION = "MLNX_OFED_LINUX-23.10-1.1.9.0"
MIG_NVLINK_MESSAGE = "Nvlink queries are not supported for Devices in MIG mode"
NO_NVLINK_MESSAGE = "Device does not have or support Nvlink"
_AFFINITY = (("0-55,112-167", "0"), ("56-111,168-223", "1"))
_LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""

register_fault("nvlink_down", f"GPU {NVLINK_DOWN_GPU}: NVLinks {NVLINK_DOWN_LINKS} inactive (nvlink -s, topo -m)")
register_fault("fabricmanager_down", "nvidia-fabricmanager failed; CUDA reports 'system not yet initialized'")
register_fault("ib_port_down", f"mlx5_{IB_DOWN_HCA} port 1 Down/Polling in ibstat")
register_fault("peermem_missing", "nvidia_peermem not loaded (lsmod)")


def _smi_error(scenario: NodeScenario) -> ToolOutput | None:
    if scenario.has("driver_missing"):
        return ToolOutput(DRIVER_MISSING_MESSAGE.encode(), rc=9)
    return None


def nvlink_spec(scenario: NodeScenario) -> tuple[int, float] | None:
    """(links per GPU, GB/s per link) of the hardware, None without NVLink."""
    nvlink = scenario.hardware.extra.get("nvlink")
    if not nvlink:
        return None
    return int(nvlink["links"]), float(nvlink["speed_gbps"])


def down_links(scenario: NodeScenario, index: int) -> tuple[int, ...]:
    if not scenario.has("nvlink_down"):
        return ()
    count = scenario.hardware.gpu.count  # every GPU on the bus (== len(node_facts().pci_gpus)), no facts needed
    if index == min(NVLINK_DOWN_GPU, count - 1):
        return NVLINK_DOWN_LINKS
    return ()


def _nvlink(scenario: NodeScenario, args: Sequence[str]) -> ToolOutput:
    only: int | None = None
    i = 0
    while i < len(args):
        if args[i] in ("-s", "--status"):
            pass
        elif args[i] in ("-i", "--id") and i + 1 < len(args) and args[i + 1].isdigit():
            i += 1
            only = int(args[i])
        else:
            return ToolOutput(INVALID_ARGS_MESSAGE.encode(), rc=2)
        i += 1
    error = _smi_error(scenario)
    if error is not None:
        return error
    facts = node_facts(scenario)
    spec = nvlink_spec(scenario)
    lines = []
    for gpu in facts.gpus:
        if only is not None and gpu.index != only:
            continue
        lines.append(f"GPU {gpu.index}: {gpu.product_name} (UUID: {gpu.uuid})")
        if gpu.mig_enabled:
            lines.append(MIG_NVLINK_MESSAGE)
        elif spec is None:
            lines.append(NO_NVLINK_MESSAGE)
        else:
            links, speed = spec
            down = down_links(scenario, gpu.index)
            lines += [f"\t Link {k}: <inactive>" if k in down else f"\t Link {k}: {speed:g} GB/s" for k in range(links)]
    if only is not None and not lines:
        return ToolOutput(b"No devices were found\n", rc=6)
    return ToolOutput(("\n".join(lines) + "\n").encode())


def ib_devices(scenario: NodeScenario) -> tuple[int, float]:
    """(IB HCAs, rate Gb/s) the hardware has; (0, 0) without IB."""
    ib = scenario.hardware.extra.get("ib")
    if not ib:
        return 0, 0.0
    return int(ib["hcas"]), float(ib["rate_gbps"])


def _half(index: int, count: int) -> int:
    return 0 if index < max(1, count // 2) else 1


def _topo(scenario: NodeScenario, args: Sequence[str]) -> ToolOutput:
    if not args or any(a not in ("-m", "--matrix") for a in args):
        return ToolOutput(INVALID_ARGS_MESSAGE.encode(), rc=2)
    error = _smi_error(scenario)
    if error is not None:
        return error
    count = len(node_facts(scenario).gpus)
    hcas, _ = ib_devices(scenario)
    spec = nvlink_spec(scenario) if scenario.hardware.gpu.nvswitch else None
    lost = tuple(len(down_links(scenario, i)) for i in range(count))
    return ToolOutput(_topo_text(count, hcas, spec, lost).encode())


@functools.lru_cache(maxsize=256)
def _topo_text(count: int, hcas: int, nvswitch_links: tuple[int, float] | None, lost: tuple[int, ...]) -> str:
    """The matrix, rendered once per distinct hardware and NVLink faults (no node name appears in it)."""
    gpus = [f"GPU{i}" for i in range(count)]
    nics = [f"mlx5_{i}" for i in range(hcas)] + ["mlx5_bond_0" if hcas else "mlx5_0"]
    nic_cols = [f"NIC{i}" for i in range(len(nics))]

    def gpu_nic_half(nic: int) -> int:
        return _half(nic, hcas) if nic < hcas else 0

    def cell(row: str, col: str) -> str:
        if row == col:
            return " X "
        kind_r, n_r = row[:3], int(row[3:])
        kind_c, n_c = col[:3], int(col[3:])
        if kind_r == "GPU" and kind_c == "GPU":
            if nvswitch_links is not None:
                return f"NV{nvswitch_links[0] - lost[n_r] - lost[n_c]}"
            return "NODE" if _half(n_r, count) == _half(n_c, count) else "SYS"
        if kind_r == "NIC" and kind_c == "NIC":
            return "NODE" if gpu_nic_half(n_r) == gpu_nic_half(n_c) else "SYS"
        gpu, nic = (n_r, n_c) if kind_r == "GPU" else (n_c, n_r)
        if nic < hcas and nic == gpu:
            return "PIX"
        return "NODE" if _half(gpu, count) == gpu_nic_half(nic) else "SYS"

    columns = gpus + nic_cols
    lines = ["\t" + "\t".join(columns + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])]
    for row in columns:
        cells = [cell(row, col) for col in columns]
        if row.startswith("GPU"):
            cpus, numa = _AFFINITY[_half(int(row[3:]), count)]
            cells += [cpus, numa, "", "N/A"]
        lines.append(row + "\t" + "\t".join(cells))
    text = "\n".join(lines) + "\n" + _LEGEND + "\nNIC Legend:\n\n"
    text += "".join(f"  NIC{i}: {name}\n" for i, name in enumerate(nics))
    return text


SMI_SUBCOMMANDS["nvlink"] = _nvlink
SMI_SUBCOMMANDS["topo"] = _topo


@register_tool("systemctl")
def _systemctl(scenario: NodeScenario, args: Sequence[str]) -> ToolOutput:
    if not args or args[0] != "is-active":
        verb = args[0] if args else ""
        return ToolOutput(b"", f"Unknown command verb {verb}.\n".encode(), 1)
    units = [u for u in args[1:] if not u.startswith("-")]
    if not units:
        return ToolOutput(b"", b"Too few arguments.\n", 1)
    states = [unit_state(scenario, u) for u in units]
    return ToolOutput("".join(s + "\n" for s in states).encode(), rc=0 if all(s == "active" for s in states) else 3)


def unit_state(scenario: NodeScenario, unit: str) -> str:
    name = unit[:-8] if unit.endswith(".service") else unit
    if name in ("nvidia-fabricmanager", "nv-fabricmanager"):
        if not scenario.hardware.gpu.nvswitch:
            return "inactive"
        return "failed" if scenario.has("fabricmanager_down") or scenario.has("driver_missing") else "active"
    if name == "nvidia-persistenced":
        return "inactive" if scenario.has("persistence_off") else "active"
    if name in ("nvidia-dcgm", "dcgm", "nv-hostengine"):
        return "inactive" if scenario.has("dcgm_missing") or scenario.has("hostengine_down") else "active"
    if name in ("sshd", "ssh", "openibd"):
        return "active"
    if name == "nvidia-imex":
        from nvdeploy.sim.imex_tool import unit_state as imex_state

        return imex_state(scenario)
    return "inactive"


@register_tool("nv-fabricmanager")
def _fabricmanager(scenario: NodeScenario, args: Sequence[str]) -> ToolOutput:
    if not scenario.hardware.gpu.nvswitch:
        return ToolOutput(b"", b"sh: 1: nv-fabricmanager: not found\n", 127)
    if list(args) not in (["--version"], ["-v"]):
        return ToolOutput(b"", b"nv-fabricmanager: unsupported option in the simulator\n", 1)
    return ToolOutput(f"Fabric Manager version is : {node_facts(scenario).driver_version}\n".encode())


def _guid(scenario: NodeScenario, index: int) -> str:
    digest = hashlib.sha256(f"nvdeploy-sim/{scenario.name}/hca/{index}".encode()).hexdigest()
    return "0x" + ("58a2e103" + digest[:8])


def _ca(name: str, ca_type: str, firmware: str, guid: str, state: str, physical: str, rate: int, lid: int,
        sm_lid: int, layer: str, port_guid: str, capability: str) -> str:
    return (f"CA '{name}'\n\tCA type: {ca_type}\n\tNumber of ports: 1\n\tFirmware version: {firmware}\n"
            f"\tHardware version: 0\n\tNode GUID: {guid}\n\tSystem image GUID: {guid}\n\tPort 1:\n"
            f"\t\tState: {state}\n\t\tPhysical state: {physical}\n\t\tRate: {rate}\n\t\tBase lid: {lid}\n"
            f"\t\tLMC: 0\n\t\tSM lid: {sm_lid}\n\t\tCapability mask: {capability}\n\t\tPort GUID: {port_guid}\n"
            f"\t\tLink layer: {layer}\n")


@register_tool("ibstat")
def _ibstat(scenario: NodeScenario, args: Sequence[str]) -> ToolOutput:
    hcas, rate = ib_devices(scenario)
    ca_type, firmware = ("MT4129", "28.41.1000") if rate >= 400 else ("MT4123", "20.41.1000")
    down_rails = perf.rails_down(scenario.faults)
    blocks = []
    for i in range(hcas):
        guid = _guid(scenario, i)
        down = (scenario.has("ib_port_down") and i == min(IB_DOWN_HCA, hcas - 1)) or f"mlx5_{i}" in down_rails
        state, physical, port_rate, lid = ("Down", "Polling", 40, 0) if down else (
            "Active", "LinkUp", int(rate), 100 + 17 * i + int(guid[-2:], 16))
        blocks.append(_ca(f"mlx5_{i}", ca_type, firmware, guid, state, physical, port_rate, lid, 0 if down else 1,
                          "InfiniBand", guid, "0xa751e848"))
    bond_guid = _guid(scenario, 99)
    blocks.append(_ca("mlx5_bond_0" if hcas else "mlx5_0", "MT41692" if hcas else "MT4125",
                      "32.38.3056" if hcas else "22.39.1002", bond_guid, "Active", "LinkUp", 200 if hcas else 100,
                      0, 0, "Ethernet", "0x201d97fffe0056cf", "0x00010000"))
    return ToolOutput("".join(blocks).encode())


_MODULES = (
    ("nvidia_uvm", 4956160, 4, ""), ("nvidia_drm", 122880, 0, ""), ("nvidia_modeset", 1638400, 1, "nvidia_drm"),
    ("nvidia", 8597504, 29, "nvidia_uvm,nvidia_peermem,nvidia_modeset"),
)


@register_tool("lsmod")
def _lsmod(scenario: NodeScenario, args: Sequence[str]) -> ToolOutput:
    hcas, _ = ib_devices(scenario)
    rows = [("Module", "Size", "Used by", "")]
    if hcas and not scenario.has("peermem_missing") and not scenario.has("driver_missing"):
        rows.append(("nvidia_peermem", "16384", "0", ""))
    umad = scenario.hardware.gpu.nvlsm  # NVLink 5 HGX: the fabric manager's path to the NVSwitches is loaded
    if umad:
        rows.append(("ib_umad", "45056", "0", ""))
    rows += [("mlx5_ib", "454656", "0", ""), ("ib_uverbs", "196608", "2", "mlx5_ib"),
             ("ib_core", "487424", "3" if umad else "2", ("ib_umad," if umad else "") + "ib_uverbs,mlx5_ib"),
             ("mlx5_core", "2191360", "1", "mlx5_ib")]
    if not scenario.has("driver_missing"):
        for name, size, used, by in _MODULES:
            if not hcas or scenario.has("peermem_missing"):
                by = by.replace("nvidia_peermem,", "")
            rows.append((name, str(size), str(used), by))
    lines = ["Module                  Size  Used by"]  # lsmod's "%-19s %8lu  %d" rows
    lines += [f"{name:<19} {size:>8}  {used}" + (f" {by}" if by else "") for name, size, used, by in rows[1:]]
    return ToolOutput(("\n".join(lines) + "\n").encode())


@register_tool("ofed_info")
def _ofed_info(scenario: NodeScenario, args: Sequence[str]) -> ToolOutput:
    if "-s" in args:
        return ToolOutput(f"{OFED_VERSION}:\n".encode())
    return ToolOutput(f"{OFED_VERSION} (OFED-23.10-1.1.9):\n\nrdma-core:\nmlnx_ofed/rdma-core.git "
                      "mlnx_ofed_23_10\n".encode())
