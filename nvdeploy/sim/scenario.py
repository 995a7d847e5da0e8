"""What a simulated GPU node is: the profile the inventory expects, the hardware it really has, and its faults.

A :class:`NodeScenario` is pure data (serialised with ``to_json``/``from_json`` for fake SSH nodes);
:func:`node_facts` derives, deterministically from the node name, everything the fake tools print.

Healthy node (facts from the *hardware* profile: ``sku`` when set, else ``profile``): ``gpu.count`` GPUs named
``gpu.model`` with ``gpu.memory_mib`` MiB, PCI device id ``gpu.pci_device_id``, power limit ``power_limit_w``,
ECC Enabled, persistence Enabled, MIG Disabled (``N/A`` on Ada, which has no MIG), PCIe gen/width from the
profile's ``pcie`` section with current == max, ~35 C; driver/CUDA/VBIOS from the profile's ``sim`` section
(``cluster_driver``, when set, replaces the driver version and its CUDA version follows the driver branch).
UUIDs and serials are hashed from node name + GPU index; PCI bus ids follow the HGX H100 layout
(18, 2a, 3a, 5d, 9a, ab, ba, db for 8 GPUs).

Faults (each changes only what is listed; a GPU index beyond the node's GPUs means its last GPU):

- ``unreachable``, ``auth_fail``: for the transport (connection refused / authentication failure); no tool effect.
- ``hang``: every tool hangs: :func:`nvdeploy.sim.tools.run_tool` returns ``hang=True`` and the fake tool sleeps
  forever (killable with SIGTERM/SIGKILL); a transport may also use it to hang the session.
- ``driver_missing``: every ``nvidia-smi`` call prints exactly ``NVIDIA-SMI has failed because it couldn't
  communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.`` on
  stdout and exits 9; ``lspci`` still lists all GPUs; the kernel log has no NVRM load line.
- ``driver_mismatch``: the node reports driver ``535.161.08`` / CUDA ``12.2`` instead of its normal driver (if the
  normal driver already is 535.161.08, it reports ``550.90.07`` / ``12.4``).
- ``gpu_missing``: ``nvidia-smi`` lists count-1 GPUs (the last one absent); ``lspci`` lists all.
- ``persistence_off``: every GPU shows Persistence Mode Disabled.
- ``ecc_uncorrectable``: GPU 3 has volatile and aggregate DRAM uncorrectable ECC errors = 2; kernel log Xid 48.
- ``ecc_unknown``: GPU 7's ECC error counters cannot be read: nvidia-smi prints ``Unknown Error`` (XML) /
  ``[Unknown Error]`` (CSV) for each count, NVML's ``nvmlDeviceGetTotalEccErrors`` raises NVML_ERROR_UNKNOWN (999).
- ``gpu_lost``: GPU 6 is lost (NVML_ERROR_GPU_IS_LOST, 15): every NVML call on it but the handle and its PCI info
  raises 15; ``nvidia-smi -q -x`` / ``--query-gpu`` still list it with ``GPU is lost`` / ``[GPU is lost]`` for every
  value but its PCI bus id, and exit 15; the kernel log has Xid 79 for it.
- ``row_remap_pending``: GPU 2 remapped rows Pending = Yes with 1 uncorrectable remapped row; kernel log Xid 63.
- ``row_remap_failure``: GPU 5 remapped rows Remapping Failure Occurred = Yes; kernel log Xid 64.
- ``xid<N>`` (e.g. ``xid79``, ``xid48``, ``xid13``): the kernel log has a realistic ``NVRM: Xid`` line for Xid N on
  GPU 1 (nothing else changes: an ``xid79`` GPU is still listed by nvidia-smi).
- ``pcie_degraded``: GPU 4's PCIe link trains at 8x (current_link_width 8x, max 16x).
- ``thermal_throttle``: GPU 6 is at 91 C with HW and SW thermal slowdown Active.
- ``mig_enabled``: every MIG-capable GPU shows MIG mode Enabled (current and pending), with no instances.
- ``nvlink_down``: GPU 3's NVLinks 2 and 9 inactive (``nvidia-smi nvlink -s`` / ``topo -m``, in
  nvdeploy/sim/datacenter.py). The datacenter faults (``fabricmanager_down``, ``ib_port_down``,
  ``peermem_missing``), DCGM faults (``dcgm_fail:<test>``, ``dcgm_missing``, ``hostengine_down``, ``dcgm_hang``)
  and nccl-tests faults (``nccl_low_bw``, ``nccl_wrong``, ``nccl_hang``) are documented in
  nvdeploy/sim/datacenter.py, dcgm_tool.py and nccl_tool.py; the MIG faults (``mig_drift:<GPU>``,
  ``vm_passthrough``) in nvdeploy/sim/mig_tool.py; the GPUDirect rail faults (``rail_slow:<NIC>:<PCT>``,
  ``rail_down:<NIC>``) in nvdeploy/sim/perf.py.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from nvdeploy.config.profiles import Profile, ProfileCatalog

IMPLEMENTED_FAULTS = (
    "unreachable", "auth_fail", "hang", "driver_missing", "driver_mismatch", "gpu_missing", "persistence_off",
    "ecc_uncorrectable", "row_remap_pending", "row_remap_failure", "ecc_unknown", "gpu_lost",
)
RESERVED_FAULTS = ("nvlink_down", "pcie_degraded", "thermal_throttle", "mig_enabled")
KNOWN_FAULTS = frozenset(IMPLEMENTED_FAULTS + RESERVED_FAULTS)
XID_FAULT = re.compile(r"xid([1-9][0-9]{0,3})")
# Faults added by other modules (nvdeploy/sim/*.py): exact names, and patterns such as ``dcgm_fail:<test>``.
EXTRA_FAULTS: dict[str, str] = {}
EXTRA_FAULT_PATTERNS: dict[str, re.Pattern[str]] = {}


# Applied to every node_facts() result, in order (nvdeploy/sim/state.py: what install and optimize changed).
FACT_FILTERS: list[Callable[[NodeScenario, NodeFacts], NodeFacts]] = []


def register_fault(name: str, doc: str, pattern: str | None = None) -> None:
    """Make ``name`` (or every name matching ``pattern``) a valid fault; ``doc`` says what it does."""
    EXTRA_FAULTS[name] = doc
    if pattern is not None:
        EXTRA_FAULT_PATTERNS[name] = re.compile(pattern)

ECC_GPU = 3
REMAP_PENDING_GPU = 2
REMAP_FAILURE_GPU = 5
XID_GPU = 1
PCIE_DEGRADED_GPU = 4
THERMAL_GPU = 6
LOST_GPU = 6
ECC_UNKNOWN_GPU = 7

MISMATCH_DRIVER = ("535.161.08", "12.2")
_MISMATCH_FALLBACK = ("550.90.07", "12.4")
_DEFAULT_SIM = {"driver_version": "550.90.07", "cuda_version": "12.4", "vbios_version": "96.00.74.00.01"}
_CUDA_BY_BRANCH = {"525": "12.0", "530": "12.1", "535": "12.2", "545": "12.3", "550": "12.4", "555": "12.5",
                   "560": "12.6", "565": "12.7", "570": "12.8", "575": "12.9", "580": "13.0", "590": "13.1"}
HGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


def validate_fault(fault: str) -> str | None:
    """An error message for an unknown fault name; None when ``fault`` is known (this module's faults and those
    the tool modules register: the package's ``__init__`` imports every one of them)."""
    if fault in KNOWN_FAULTS or XID_FAULT.fullmatch(fault):
        return None
    if fault in EXTRA_FAULTS and fault not in EXTRA_FAULT_PATTERNS:
        return None
    if any(p.fullmatch(fault) for p in EXTRA_FAULT_PATTERNS.values()):
        return None
    known = ", ".join(sorted(KNOWN_FAULTS | set(EXTRA_FAULTS)))
    return f"unknown fault {fault!r} (known: {known}, or xid<N> such as xid79)"


@dataclass(frozen=True)
class NodeScenario:
    """One simulated node: ``profile`` is what the inventory expects, ``sku`` what the node really has."""

    name: str
    profile: Profile
    faults: tuple[str, ...] = ()
    sku: Profile | None = None
    cluster_driver: str | None = None
    # The other nodes of the simulated cluster, (address or name, faults): multi-node tools (mpirun) read them.
    peers: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # Stateful nodes (nvdeploy/sim/state.py): ``cluster`` keys in-process state; ``state_file`` names a fake SSH
    # node's state file (default: nvd-state.json in the node's HOME).
    cluster: str | None = None
    state_file: str | None = None
    # The inventory's ``rack`` var: the trays of one rack share an NVLink domain (nvdeploy/sim/nvl72.py).
    rack: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "faults", tuple(self.faults))
        object.__setattr__(self, "peers", tuple((str(a), tuple(f)) for a, f in self.peers))
        for fault in self.faults:
            problem = validate_fault(fault)
            if problem:
                raise ValueError(f"node {self.name}: {problem}")

    @property
    def hardware(self) -> Profile:
        """The profile the simulated hardware really matches."""
        return self.sku if self.sku is not None else self.profile

    def has(self, fault: str) -> bool:
        return fault in self.faults

    @property
    def xids(self) -> tuple[int, ...]:
        """The Xid numbers of the ``xid<N>`` faults, in order."""
        found = []
        for fault in self.faults:
            match = XID_FAULT.fullmatch(fault)
            if match:
                found.append(int(match.group(1)))
        return tuple(found)

    def to_json(self) -> str:
        data = {
            "name": self.name,
            "profile": self.profile.name,
            "faults": list(self.faults),
            "sku": self.sku.name if self.sku is not None else None,
            "cluster_driver": self.cluster_driver,
            "peers": [[address, list(faults)] for address, faults in self.peers],
        }
        data.update({k: v for k, v in (("cluster", self.cluster), ("state_file", self.state_file), ("rack", self.rack))
                     if v is not None})
        return json.dumps(data, indent=None, sort_keys=False)

    @classmethod
    def from_json(cls, text: str, catalog: ProfileCatalog) -> NodeScenario:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("scenario JSON must be an object")
        unknown = set(data) - {"name", "profile", "faults", "sku", "cluster_driver", "peers", "cluster", "state_file",
                               "rack"}
        if unknown:
            raise ValueError(f"unknown scenario keys: {', '.join(sorted(unknown))}")
        for key in ("name", "profile"):
            if not isinstance(data.get(key), str):
                raise ValueError(f"scenario key {key!r} must be a string")
        faults = data.get("faults") or []
        if not isinstance(faults, list) or not all(isinstance(f, str) for f in faults):
            raise ValueError("scenario key 'faults' must be a list of strings")
        sku = data.get("sku")
        driver = data.get("cluster_driver")
        if sku is not None and not isinstance(sku, str):
            raise ValueError("scenario key 'sku' must be a string or null")
        if driver is not None and not isinstance(driver, str):
            raise ValueError("scenario key 'cluster_driver' must be a string or null")
        peers = data.get("peers") or []
        if not isinstance(peers, list) or not all(isinstance(p, list) and len(p) == 2 for p in peers):
            raise ValueError("scenario key 'peers' must be a list of [address, [faults]]")
        for key in ("cluster", "state_file", "rack"):
            if data.get(key) is not None and not isinstance(data[key], str):
                raise ValueError(f"scenario key {key!r} must be a string or null")
        return cls(name=data["name"], profile=catalog.get(data["profile"]), faults=tuple(faults),
                   sku=catalog.get(sku) if sku is not None else None, cluster_driver=driver,
                   peers=tuple((str(a), tuple(f)) for a, f in peers), cluster=data.get("cluster"),
                   state_file=data.get("state_file"), rack=data.get("rack"))


@dataclass(frozen=True)
class SimFabric:
    """A GPU's NVLink fabric registration as a rack-scale tray reports it (nvdeploy/sim/nvl72.py): the ``<fabric>``
    block of DTD v13 and the tray's ``<platformInfo>``."""

    state: str = "Completed"
    status: str = "Success"
    clique_id: int = 0
    cluster_uuid: str = "00000000-0000-0000-0000-000000000000"
    health: str = "Healthy"
    bandwidth: str = "Full"
    chassis_serial: str = ""
    slot: int = 0
    tray: int = 0


@dataclass(frozen=True)
class SimGpu:
    """Everything the fake tools print about one GPU."""

    index: int
    bus: int
    product_name: str
    architecture: str
    uuid: str
    serial: str
    vbios_version: str
    module_id: int
    pci_device_id: str
    memory_mib: int
    power_limit_w: float | None
    pcie_gen_max: int
    pcie_gen_current: int
    pcie_width_max: int
    pcie_width_current: int
    temperature_c: int
    persistence: bool = True
    ecc_enabled: bool = True
    mig_capable: bool = True
    mig_enabled: bool = False
    # The MIG mode the next reset or reboot activates, where it differs from the current one (sim/mig_tool.py).
    mig_pending: bool | None = None
    dram_uncorrectable_volatile: int = 0
    dram_uncorrectable_aggregate: int = 0
    remapped_rows_correctable: int = 0
    remapped_rows_uncorrectable: int = 0
    remap_pending: bool = False
    remap_failure: bool = False
    thermal_slowdown: bool = False
    # ``gpu_lost``: every query but the handle and PCI info fails with GPU_IS_LOST.
    lost: bool = False
    # ``ecc_unknown``: the ECC error counters cannot be read (NVML_ERROR_UNKNOWN).
    ecc_unreadable: bool = False
    # A tray of a multi-node NVLink domain (nvdeploy/sim/nvl72.py): its fabric registration, the driver's recovery
    # action (None: not printed, as drivers before it) and C2C. None elsewhere: the output stays as it was.
    fabric: SimFabric | None = None
    recovery_action: str | None = None

    @property
    def bus_id(self) -> str:
        """As nvidia-smi prints it: ``00000000:18:00.0``."""
        return f"00000000:{self.bus:02X}:00.0"

    @property
    def lspci_address(self) -> str:
        """As ``lspci -D`` prints it: ``0000:18:00.0``."""
        return f"0000:{self.bus:02x}:00.0"

    @property
    def kernel_address(self) -> str:
        """As NVRM kernel messages print it: ``0000:18:00``."""
        return f"0000:{self.bus:02x}:00"


@dataclass(frozen=True)
class NodeFacts:
    """The derived state of a simulated node."""

    hostname: str
    driver_version: str
    cuda_version: str
    driver_loaded: bool
    gpus: tuple[SimGpu, ...]
    pci_gpus: tuple[SimGpu, ...]
    nvswitches: tuple[tuple[str, str], ...] = ()
    xid_events: tuple[tuple[int, int], ...] = ()
    # "r610": nvidia-smi prints the R610 layouts (fault ``smi_r610``, nvdeploy/sim/smi_xml.py); "" the older ones.
    smi_format: str = ""


def architecture(device_id: str, model: str = "") -> str:
    """The GPU architecture name nvidia-smi prints, from the PCI device id (model name as a fallback)."""
    try:
        major = int(device_id, 16) >> 8
    except ValueError:
        major = 0
    if 0x20 <= major <= 0x22:
        return "Ampere"
    if major == 0x23:
        return "Hopper"
    if 0x24 <= major <= 0x28:
        return "Ada Lovelace"
    if 0x29 <= major <= 0x31:  # GB200 2941, GB300 31c2, B300 3182
        return "Blackwell"
    for key, arch in (("A100", "Ampere"), ("H100", "Hopper"), ("H200", "Hopper"), ("B200", "Blackwell"),
                      ("B300", "Blackwell"), ("L40", "Ada Lovelace")):
        if key in model:
            return arch
    return "N/A"


def _digest(node: str, index: int) -> str:
    return hashlib.sha256(f"nvdeploy-sim/{node}/{index}".encode()).hexdigest()


def gpu_uuid(node: str, index: int) -> str:
    h = _digest(node, index)
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def gpu_serial(node: str, index: int) -> str:
    return f"165012{int(_digest(node, index)[32:48], 16) % 10**7:07d}"


def pci_buses(count: int) -> tuple[int, ...]:
    """PCI bus numbers of ``count`` GPUs: the HGX H100 layout for up to 8, evenly spread beyond."""
    if count <= len(HGX_BUSES):
        return HGX_BUSES[:count]
    step = max(1, 0xE0 // count)
    return tuple(0x18 + i * step for i in range(count))


def _fault_gpu(index: int, count: int) -> int:
    return min(index, count - 1)


def driver_versions(scenario: NodeScenario) -> tuple[str, str]:
    """(driver version, CUDA version) the node reports."""
    sim = scenario.hardware.sim
    driver = sim.get("driver_version", _DEFAULT_SIM["driver_version"])
    cuda = sim.get("cuda_version", _DEFAULT_SIM["cuda_version"])
    if scenario.cluster_driver:
        driver = scenario.cluster_driver
        cuda = _CUDA_BY_BRANCH.get(driver.split(".")[0], cuda)
    if scenario.has("driver_mismatch"):
        return _MISMATCH_FALLBACK if driver == MISMATCH_DRIVER[0] else MISMATCH_DRIVER
    return driver, cuda


def node_facts(scenario: NodeScenario) -> NodeFacts:
    """Derive the node's facts from its hardware profile and faults (deterministic per node name)."""
    # A scenario is frozen and its base facts pure: computed once per node, not once per tool call (a fleet run
    # asks ~20 times per node). The filters keep their own memo (state.py: once per change of the node's state).
    facts = scenario.__dict__.get("_base_facts")
    if facts is None:
        facts = _base_facts(scenario)
        object.__setattr__(scenario, "_base_facts", facts)
    for apply in FACT_FILTERS:
        facts = apply(scenario, facts)
    return facts


def _base_facts(scenario: NodeScenario) -> NodeFacts:
    hw = scenario.hardware
    count = hw.gpu.count
    device_id = hw.gpu.pci_device_id.lower()
    arch = architecture(device_id, hw.gpu.model)
    pcie = hw.extra.get("pcie") or {}
    gen = int(pcie.get("gen", 4))
    width = int(pcie.get("width", 16))
    vbios = hw.sim.get("vbios_version", _DEFAULT_SIM["vbios_version"])
    mig_capable = arch in ("Ampere", "Hopper", "Blackwell")
    gpus = []
    for index, bus in enumerate(pci_buses(count)):
        gpus.append(SimGpu(
            index=index, bus=bus, product_name=hw.gpu.model, architecture=arch,
            uuid=gpu_uuid(scenario.name, index), serial=gpu_serial(scenario.name, index), vbios_version=vbios,
            module_id=index + 1, pci_device_id=device_id, memory_mib=hw.gpu.memory_mib,
            power_limit_w=float(hw.gpu.power_limit_w) if hw.gpu.power_limit_w is not None else None,
            pcie_gen_max=gen, pcie_gen_current=gen, pcie_width_max=width, pcie_width_current=width,
            temperature_c=33 + int(_digest(scenario.name, index)[48:50], 16) % 5,
            persistence=not scenario.has("persistence_off"), ecc_enabled=True, mig_capable=mig_capable,
            mig_enabled=mig_capable and scenario.has("mig_enabled"),
        ))
    if count:
        _apply_gpu_faults(scenario, gpus)
    driver, cuda = driver_versions(scenario)
    visible = gpus[:-1] if scenario.has("gpu_missing") and gpus else gpus
    switches: tuple[tuple[str, str], ...] = ()
    if hw.gpu.nvswitch:
        switch_id, switch_count = ("1af1", 6) if arch == "Ampere" else ("22a3", 4)
        switches = tuple((f"0000:{0x05 + i:02x}:00.0", switch_id) for i in range(switch_count))
    facts = NodeFacts(
        hostname=scenario.name.split(".")[0], driver_version=driver, cuda_version=cuda,
        driver_loaded=not scenario.has("driver_missing"), gpus=tuple(visible), pci_gpus=tuple(gpus),
        nvswitches=switches, xid_events=_xid_events(scenario, count) if count else (),
        smi_format="r610" if scenario.has("smi_r610") else "",
    )
    return facts


def _apply_gpu_faults(scenario: NodeScenario, gpus: list[SimGpu]) -> None:
    count = len(gpus)
    if scenario.has("ecc_uncorrectable"):
        i = _fault_gpu(ECC_GPU, count)
        gpus[i] = replace(gpus[i], dram_uncorrectable_volatile=2, dram_uncorrectable_aggregate=2)
    if scenario.has("row_remap_pending"):
        i = _fault_gpu(REMAP_PENDING_GPU, count)
        gpus[i] = replace(gpus[i], remap_pending=True, remapped_rows_uncorrectable=1)
    if scenario.has("row_remap_failure"):
        i = _fault_gpu(REMAP_FAILURE_GPU, count)
        gpus[i] = replace(gpus[i], remap_failure=True)
    if scenario.has("pcie_degraded"):
        i = _fault_gpu(PCIE_DEGRADED_GPU, count)
        gpus[i] = replace(gpus[i], pcie_width_current=max(1, gpus[i].pcie_width_max // 2))
    if scenario.has("thermal_throttle"):
        i = _fault_gpu(THERMAL_GPU, count)
        gpus[i] = replace(gpus[i], temperature_c=91, thermal_slowdown=True)
    if scenario.has("ecc_unknown"):
        i = _fault_gpu(ECC_UNKNOWN_GPU, count)
        gpus[i] = replace(gpus[i], ecc_unreadable=True)
    if scenario.has("gpu_lost"):
        i = _fault_gpu(LOST_GPU, count)
        gpus[i] = replace(gpus[i], lost=True)


def _xid_events(scenario: NodeScenario, count: int) -> tuple[tuple[int, int], ...]:
    """(GPU index, Xid) for every kernel-log Xid the faults imply, in fault order."""
    events = []
    for fault in scenario.faults:
        match = XID_FAULT.fullmatch(fault)
        if match:
            events.append((_fault_gpu(XID_GPU, count), int(match.group(1))))
        elif fault == "ecc_uncorrectable":
            events.append((_fault_gpu(ECC_GPU, count), 48))
        elif fault == "row_remap_pending":
            events.append((_fault_gpu(REMAP_PENDING_GPU, count), 63))
        elif fault == "row_remap_failure":
            events.append((_fault_gpu(REMAP_FAILURE_GPU, count), 64))
        elif fault == "gpu_lost":
            events.append((_fault_gpu(LOST_GPU, count), 79))
    return tuple(events)
