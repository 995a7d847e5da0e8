"""Per-node mutable state of simulated nodes: what install and optimize change, and what validate then sees.

A simulated node is pure data (:class:`~nvdeploy.sim.scenario.NodeScenario`) plus, from here, a :class:`NodeState`:
OS release and kernel, packages installed, files nvdeploy wrote (repository lists, module configs, markers),
systemd units (enabled, active), kernel modules loaded and the driver version they carry, persistence mode,
compute mode, application clocks, power limit, MIG mode and instances per GPU, CPU governor, reboot count. The
fake package, service and GPU tools (:mod:`nvdeploy.sim.systools`) read and change it; :func:`apply_to_facts` (a fact
filter of :func:`nvdeploy.sim.scenario.node_facts`) makes the fake ``nvidia-smi``, NVML probe and kernel log
report it.

Where the state lives:

- in-process (``connection: sim``): in memory, keyed by the scenario's cluster, node name, profile and faults,
  shared by every transport of the process (so ``nvdeploy run`` installs in one phase and validates in the next);
- on fake SSH nodes (``nvdeploy.testing.SshCluster``): a JSON file, ``nvd-state.json`` in the node's ``HOME``
  (or the scenario's ``state_file``), guarded by a lock file; every command is a separate process.

A node's state is only stored once a command changed it. Until then it is the *baseline* derived from the
scenario, and a node without one of the faults below reports exactly what it reported before this module
existed: everything installed, driver loaded (unless ``driver_missing``), persistence as the scenario says.

Faults (``sim_faults``):

- ``bare``: a fresh OS: no NVIDIA package, repository, service or module; ``nvidia-smi`` is not found (rc 127);
  kernel headers are installed, so a driver install can proceed.
- ``install_fail``: installing the driver package fails (apt-get exits 100 / dnf exits 1 with the dpkg or
  scriptlet error of a failed DKMS build); nothing is installed.
- ``secure_boot``: ``mokutil --sb-state`` prints ``SecureBoot enabled``.
- ``no_headers``: the running kernel's headers package is not installed.
- ``gpu_busy``: two compute processes run on GPU 0 (``nvidia-smi --query-compute-apps``).
- ``offline``: the node cannot reach the internet: downloads and repository refreshes from
  developer.download.nvidia.com fail; a local mirror (any other URL) still works.
- ``power_capped``: every GPU's power limit is set to 80% of its default (validate WARNs, optimize restores it).
- ``reboot_stuck``: ``reboot`` is accepted but the node never comes back with a new boot id.
- ``os:<id>-<version>`` (``os:rocky-9.4``, ``os:ubuntu-24.04``, ``os:alpine-3.19``): the OS release the node
  reports (default ``ubuntu-22.04``). Families: ubuntu/debian use apt, rhel/rocky/almalinux use dnf.
- ``sudo_nopasswd`` / ``sudo_password:<pw>``: fake SSH nodes only: the fake ``sudo`` lets the login user run
  commands as root without a password, or with that password given on stdin (``sudo -S``). Without either,
  sudo answers ``sudo: a password is required``, as the real sudo does for the harness's login user. In-process
  sudo always works (as it always did).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import threading
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional

# NVIDIA's repository folder name (ubuntu2204, debian12, rhel9) the fake repositories are served under: the same
# pure function the install actions read (sim/pkgrepo.py reads it from here too).
from nvdeploy.actions.osinfo import distro_tag
from nvdeploy.sim.scenario import (
    FACT_FILTERS,
    NodeFacts,
    NodeScenario,
    driver_versions,
    register_fault,
)

STATE_FILE_NAME = "nvd-state.json"
CALL_LOG_NAME = "nvd-calls.jsonl"
NODE_ENV = "NVD_NODE_NAME"
DEFAULT_OS = ("ubuntu", "22.04")
DEFAULT_KERNEL = "5.15.0-105-generic"
RHEL_KERNEL = "5.14.0-427.13.1.el9_4.x86_64"
DEFAULT_GOVERNOR = "powersave"
POWER_CAP_FRACTION = 0.8
MAX_MEMORY_LOG = 20000
OS_FAULT = re.compile(r"os:([a-z][a-z0-9]*)-([0-9][0-9.]*)")
SUDO_PASSWORD_FAULT = re.compile(r"sudo_password:(\S{1,64})")
APT_IDS = ("ubuntu", "debian")
DNF_IDS = ("rhel", "rocky", "almalinux", "centos", "ol")
# The driver each branch of the simulated NVIDIA repository offers (the newest of the branch).
DRIVERS = {"535": "535.161.08", "550": "550.90.07", "560": "560.35.03", "565": "565.57.01", "570": "570.124.06",
           "575": "575.57.08", "580": "580.65.06"}
NVIDIA_HOST = "developer.download.nvidia.com"

_FAULT_DOCS = {
    "bare": "a fresh OS: no NVIDIA package, repository, service or module; nvidia-smi not found",
    "install_fail": "installing the driver package fails (DKMS build error); nothing is installed",
    "secure_boot": "Secure Boot is enabled (mokutil --sb-state)",
    "no_headers": "the running kernel's headers package is not installed",
    "gpu_busy": "two compute processes run on GPU 0 (nvidia-smi --query-compute-apps)",
    "offline": "no internet: developer.download.nvidia.com unreachable; a local mirror still works",
    "power_capped": "every GPU's power limit is 80% of its default",
    "reboot_stuck": "reboot is accepted but the node never comes back with a new boot id",
    "sudo_nopasswd": "fake SSH nodes: sudo runs commands as root without a password",
}
STATE_FAULTS = frozenset(_FAULT_DOCS)
for _name, _doc in _FAULT_DOCS.items():
    register_fault(_name, _doc)
register_fault("os", "the OS release the node reports: os:<id>-<version>, e.g. os:rocky-9.4", pattern=OS_FAULT.pattern)
register_fault("sudo_password", "fake SSH nodes: sudo needs this password on stdin: sudo_password:<pw>",
               pattern=SUDO_PASSWORD_FAULT.pattern)


@dataclass
class NodeState:
    """What the fake tools of one node read and change. Mutable; serialised to JSON for fake SSH nodes."""

    os_id: str = DEFAULT_OS[0]
    os_version: str = DEFAULT_OS[1]
    kernel: str = DEFAULT_KERNEL
    secure_boot: bool = False
    packages: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    # unit -> [enabled, active]
    services: dict[str, list[bool]] = field(default_factory=dict)
    modules: list[str] = field(default_factory=list)
    loaded_driver: Optional[str] = None
    loaded_open: Optional[bool] = None  # the flavour of the loaded nvidia.ko: True for the open kernel modules
    apt_updated: bool = False
    persistence_pm: bool = False
    compute_mode: str = "Default"
    app_clocks: Optional[list[int]] = None
    power_limit_w: Optional[float] = None
    mig_enabled: Optional[bool] = None
    # GPU index -> its MIG mode (current, pending) and instances (nvdeploy/sim/mig_tool.py).
    mig_gpus: dict[str, dict[str, Any]] = field(default_factory=dict)
    governor: str = DEFAULT_GOVERNOR
    boots: int = 1
    gpu_processes: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> NodeState:
        data = json.loads(text)
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def copy(self) -> NodeState:
        return NodeState.from_json(self.to_json())

    @property
    def family(self) -> Optional[str]:
        if self.os_id in APT_IDS:
            return "apt"
        if self.os_id in DNF_IDS:
            return "dnf"
        return None

    def service(self, unit: str) -> Optional[list[bool]]:
        return self.services.get(unit.removesuffix(".service"))

    @property
    def driver_package(self) -> Optional[tuple[str, str]]:
        """(package name, upstream driver version) of the installed driver, if any."""
        for name, version in sorted(self.packages.items()):
            if re.fullmatch(r"nvidia-driver(-\d+(-open)?)?", name):
                return name, upstream(version)
        return None

    @property
    def installed_open(self) -> bool:
        """Whether the installed driver is the open kernel module flavour (apt ``-open``, dnf
        kmod-nvidia-open-dkms)."""
        package = self.driver_package
        return bool(package and package[0].endswith("-open")) or "kmod-nvidia-open-dkms" in self.packages

    @property
    def installed_driver(self) -> Optional[str]:
        package = self.driver_package
        return package[1] if package else None


def upstream(version: str) -> str:
    """``550.90.07-0ubuntu1`` -> ``550.90.07``; ``1:3.3.9`` -> ``3.3.9``."""
    version = version.split(":", 1)[-1]
    return version.split("-", 1)[0]


def os_of(scenario: NodeScenario) -> tuple[str, str]:
    for fault in scenario.faults:
        match = OS_FAULT.fullmatch(fault)
        if match:
            return match.group(1), match.group(2)
    return DEFAULT_OS


def ib_present(scenario: NodeScenario) -> bool:
    ib = scenario.hardware.extra.get("ib") or {}
    return int(ib.get("hcas", 0) or 0) > 0


def package_names(family: str, branch: str, nvswitch: bool, open_modules: bool = False) -> dict[str, str]:
    """Names of the NVIDIA packages of one driver branch in the family's repository."""
    if family == "apt":
        names = {"driver": f"nvidia-driver-{branch}{'-open' if open_modules else ''}"}
        if nvswitch:
            names["fabricmanager"] = f"nvidia-fabricmanager-{branch}"
    else:
        names = {"driver": "nvidia-driver", "kmod": f"kmod-nvidia-{'open' if open_modules else 'latest'}-dkms"}
        if nvswitch:
            names["fabricmanager"] = "nvidia-fabric-manager"
    return names


def default_open(profile: Any, branch: str) -> bool:
    """The flavour a node of this profile was installed with: the profile's ``driver.flavour``, else open from
    R560 on (NVIDIA's default since then)."""
    flavour = getattr(profile, "driver_flavour", None)
    if flavour:
        return bool(flavour == "open")
    return branch.isdigit() and int(branch) >= 560


def headers_package(state: NodeState) -> str:
    return f"linux-headers-{state.kernel}" if state.family == "apt" else f"kernel-devel-{state.kernel}"


# Other sim modules shape a baseline too (pkgtools.py: cuda_keyring, nouveau, docker, ...): each hook changes the
# state in place; the faults they register in HOOK_FAULTS make a node's state matter as STATE_FAULTS do.
BASELINE_HOOKS: list[Callable[[NodeScenario, NodeState], None]] = []
HOOK_FAULTS: set[str] = set()


def baseline(scenario: NodeScenario) -> NodeState:
    """The state a node has before anything changed it, derived from its scenario (and the hooks)."""
    state = _scenario_baseline(scenario)
    for hook in BASELINE_HOOKS:
        hook(scenario, state)
    return state


def _scenario_baseline(scenario: NodeScenario) -> NodeState:
    os_id, os_version = os_of(scenario)
    state = NodeState(os_id=os_id, os_version=os_version)
    if state.family == "dnf":
        state.kernel = RHEL_KERNEL
    state.secure_boot = scenario.has("secure_boot")
    state.gpu_processes = 2 if scenario.has("gpu_busy") else 0
    if not scenario.has("no_headers"):
        state.packages[headers_package(state)] = state.kernel.split("-")[0] + "-1"
    if scenario.has("bare") or state.family is None:
        return state
    hw = scenario.hardware
    driver, cuda = driver_versions(scenario)
    branch = driver.split(".")[0]
    family = state.family
    names = package_names(family, branch, hw.gpu.nvswitch, default_open(hw, branch))
    suffix = "-0ubuntu1" if family == "apt" else "-1.el9"
    state.packages[names["driver"]] = driver + suffix
    if "kmod" in names:
        state.packages[names["kmod"]] = driver + suffix
    if "fabricmanager" in names:
        state.packages[names["fabricmanager"]] = driver + "-1"
    if hw.gpu.nvlsm:
        state.packages["nvlsm"] = "2025.06.4-1"
        state.files["/etc/modules-load.d/nvdeploy-ib_umad.conf"] = "ib_umad\n"
    # The toolkit of the driver's CUDA version, GA: the same one a node lists before it has a state of its own
    # (sim/stack_tools.py toolkits), so that the first change to a node does not change which toolkit it has.
    if cuda and not scenario.has("cuda_none"):
        state.packages[f"cuda-toolkit-{cuda.replace('.', '-')}"] = f"{cuda}.0-1"
    state.packages.update({"datacenter-gpu-manager": "1:3.3.9",
                           "datacenter-gpu-manager-config": "1:3.3.9", "nvidia-container-toolkit": "1.17.4-1"})
    repo = repo_file(family)
    state.files[repo] = official_repo_text(family, distro_tag(os_id, os_version))
    state.files["/opt/nccl-tests/.nvdeploy-source"] = "baseline\n"
    state.files["/opt/nccl-tests/build/all_reduce_perf"] = "<binary>\n"
    state.apt_updated = True
    loaded = not scenario.has("driver_missing")
    persistence = loaded and not scenario.has("persistence_off")
    state.services = {"nvidia-persistenced": [persistence, persistence], "nvidia-dcgm": [True, True]}
    if hw.gpu.nvswitch:
        state.services["nvidia-fabricmanager"] = [True, loaded]
    if loaded:
        state.loaded_driver = driver
        state.loaded_open = state.installed_open
        state.modules = ["nvidia", "nvidia_uvm", "nvidia_modeset"] + (["nvidia_peermem"] if ib_present(scenario)
                                                                     else [])
    if hw.gpu.nvlsm:
        state.modules.append("ib_umad")
    if scenario.has("power_capped") and hw.gpu.power_limit_w:
        state.power_limit_w = round(float(hw.gpu.power_limit_w) * POWER_CAP_FRACTION)
    return state


def repo_file(family: str) -> str:
    return ("/etc/apt/sources.list.d/nvdeploy-nvidia.list" if family == "apt"
            else "/etc/yum.repos.d/nvdeploy-nvidia.repo")


def official_repo_text(family: str, tag: str) -> str:
    url = f"https://{NVIDIA_HOST}/compute/cuda/repos/{tag}/x86_64/"
    if family == "apt":
        return f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {url} /\n"
    return (f"[nvdeploy-nvidia]\nname=NVIDIA CUDA repository (nvdeploy)\nbaseurl={url}\nenabled=1\ngpgcheck=1\n"
            f"gpgkey={url}D42D0685.pub\n")


# ---------------------------------------------------------------------------------------------------------------
# Where a node's state is kept


_MEMORY: dict[str, NodeState] = {}
_MEMORY_LOG: dict[str, list[dict[str, Any]]] = {}
# Serialises writers (mutate, log_call, reset). Readers of the hot path (involved, has_stored) take no lock: a dict
# lookup is atomic, and a stored state is replaced whole, never changed in place.
_MEMORY_LOCK = threading.RLock()
# memory key -> how many times its state was stored: the facts memo of apply_to_facts is valid for one generation.
_GENERATION: dict[str, int] = {}


def memory_key(scenario: NodeScenario) -> str:
    """cluster/node plus what makes the simulated node what it is (profile, hardware, faults)."""
    sku = scenario.sku.name if scenario.sku is not None else ""
    return "/".join((scenario.cluster or "", scenario.name, scenario.profile.name, sku, ",".join(scenario.faults)))


def state_path(scenario: NodeScenario) -> Optional[Path]:
    """The JSON file of a fake SSH node's state; None for an in-process node (memory)."""
    if scenario.state_file:
        return Path(scenario.state_file)
    if os.environ.get(NODE_ENV) and os.environ.get("HOME"):
        return Path(os.environ["HOME"]) / STATE_FILE_NAME
    return None


def _lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with open(_lock_path(path), "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def has_stored(scenario: NodeScenario) -> bool:
    """Whether anything changed the node's state yet (cheap: no copy, no lock for in-process nodes)."""
    path = state_path(scenario)
    if path is None:
        return memory_key(scenario) in _MEMORY
    return path.is_file()


def stored(scenario: NodeScenario) -> Optional[NodeState]:
    """The node's stored state, or None when nothing has changed it yet."""
    path = state_path(scenario)
    if path is None:
        with _MEMORY_LOCK:
            found = _MEMORY.get(memory_key(scenario))
            return found.copy() if found is not None else None
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    try:
        return NodeState.from_json(text)
    except (ValueError, TypeError):
        return None


def current(scenario: NodeScenario) -> NodeState:
    """The node's state now: stored, or its baseline."""
    found = stored(scenario)
    return found if found is not None else baseline(scenario)


@contextlib.contextmanager
def mutate(scenario: NodeScenario) -> Iterator[NodeState]:
    """Read-modify-write the node's state under a lock; the change is stored when the block ends normally."""
    path = state_path(scenario)
    if path is None:
        with _MEMORY_LOCK:
            key = memory_key(scenario)
            state = _MEMORY[key].copy() if key in _MEMORY else baseline(scenario)
            yield state
            _MEMORY[key] = state
            _GENERATION[key] = _GENERATION.get(key, 0) + 1
        return
    with _file_lock(path):
        state = current(scenario)
        yield state
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_text(state.to_json(), encoding="utf-8")
        os.replace(tmp, path)


def log_call(scenario: NodeScenario, argv: Sequence[str], sudo: bool, mutates: bool, rc: int) -> None:
    """Record one command a node ran: the sudo audit and the 'changed nothing' proofs read this log."""
    record = {"argv": list(argv), "sudo": sudo, "mutates": mutates, "rc": rc}
    path = state_path(scenario)
    if path is None:
        with _MEMORY_LOCK:
            log = _MEMORY_LOG.setdefault(memory_key(scenario), [])
            if len(log) < MAX_MEMORY_LOG:
                log.append(record)
        return
    log_path = path.with_name(CALL_LOG_NAME)
    line = json.dumps(record) + "\n"
    with open(log_path, "a", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.write(line)
        fcntl.flock(handle, fcntl.LOCK_UN)


def calls(scenario: NodeScenario) -> list[dict[str, Any]]:
    """Every logged command of the node, oldest first."""
    path = state_path(scenario)
    if path is None:
        with _MEMORY_LOCK:
            return list(_MEMORY_LOG.get(memory_key(scenario), []))
    try:
        lines = path.with_name(CALL_LOG_NAME).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    return [json.loads(line) for line in lines if line.strip()]


def read_file_state(home: Path) -> tuple[Optional[NodeState], list[dict[str, Any]]]:
    """(stored state, call log) of a fake SSH node from its home folder (for tests on the harness)."""
    state_file = home / STATE_FILE_NAME
    state = NodeState.from_json(state_file.read_text(encoding="utf-8")) if state_file.is_file() else None
    log_file = home / CALL_LOG_NAME
    log = [json.loads(line) for line in log_file.read_text(encoding="utf-8").splitlines() if line.strip()] \
        if log_file.is_file() else []
    return state, log


def reset_memory(cluster: Optional[str] = None) -> None:
    """Forget in-process state and call logs (of one cluster, or all): for tests."""
    with _MEMORY_LOCK:
        for store in (_MEMORY, _MEMORY_LOG):
            for key in list(store):
                if cluster is None or key.split("/", 1)[0] == cluster:
                    del store[key]
                    _GENERATION[key] = _GENERATION.get(key, 0) + 1


def memory_state(cluster: str, node: str) -> Optional[NodeState]:
    """The stored in-process state of ``node`` of ``cluster`` (any profile/faults), for tests."""
    with _MEMORY_LOCK:
        for key, state in _MEMORY.items():
            parts = key.split("/")
            if parts[0] == cluster and parts[1] == node:
                return state.copy()
    return None


def memory_calls(cluster: str, node: str) -> list[dict[str, Any]]:
    with _MEMORY_LOCK:
        out: list[dict[str, Any]] = []
        for key, log in _MEMORY_LOG.items():
            parts = key.split("/")
            if parts[0] == cluster and parts[1] == node:
                out.extend(log)
        return out


def snapshot_memory(cluster: str) -> dict[str, str]:
    """node -> state JSON of every stored in-process node of ``cluster``."""
    with _MEMORY_LOCK:
        return {key.split("/")[1]: state.to_json() for key, state in _MEMORY.items() if key.split("/")[0] == cluster}


# ---------------------------------------------------------------------------------------------------------------
# What validate sees


def involved(scenario: NodeScenario) -> bool:
    """Whether the state can change anything the node reports (fast path for every other node)."""
    if any(f in STATE_FAULTS or f in HOOK_FAULTS or OS_FAULT.fullmatch(f) for f in scenario.faults):
        return True
    return has_stored(scenario)


def driver_status(scenario: NodeScenario, state: NodeState) -> str:
    """``missing`` (no driver package), ``unloaded``, ``mismatch`` (an older module is loaded) or ``ok``."""
    installed = state.installed_driver
    if installed is None:
        return "missing"
    if state.loaded_driver is None:
        return "unloaded"
    if state.loaded_driver != installed:
        return "mismatch"
    return "ok"


def persistence_on(state: NodeState) -> bool:
    unit = state.service("nvidia-persistenced")
    return state.persistence_pm or bool(unit and unit[1])


def default_power(scenario: NodeScenario) -> Optional[float]:
    limit = scenario.hardware.gpu.power_limit_w
    return float(limit) if limit is not None else None


def apply_to_facts(scenario: NodeScenario, facts: NodeFacts) -> NodeFacts:
    """The fact filter: the node's driver, persistence, power limit and MIG mode as its state says."""
    if not involved(scenario):
        return facts
    # In-process nodes: computed once per stored generation of the state (fake SSH nodes run one tool per process).
    memo_key = None
    if state_path(scenario) is None:
        memo_key = _GENERATION.get(memory_key(scenario), 0)
        memo = scenario.__dict__.get("_state_facts")
        if memo is not None and memo[0] == memo_key and memo[1] is facts:
            return memo[2]
    tuned = _apply_state(scenario, facts)
    if memo_key is not None:
        object.__setattr__(scenario, "_state_facts", (memo_key, facts, tuned))
    return tuned


def _apply_state(scenario: NodeScenario, facts: NodeFacts) -> NodeFacts:
    state = current(scenario)
    status = driver_status(scenario, state)
    changes: dict[str, Any] = {"driver_loaded": status == "ok"}
    if state.loaded_driver:
        from nvdeploy.sim.scenario import _CUDA_BY_BRANCH  # the CUDA version each branch reports

        changes["driver_version"] = state.loaded_driver
        changes["cuda_version"] = _CUDA_BY_BRANCH.get(state.loaded_driver.split(".")[0], facts.cuda_version)
    persistence = persistence_on(state)
    power = state.power_limit_w if state.power_limit_w is not None else default_power(scenario)

    def tune(gpu: Any) -> Any:
        mig = gpu.mig_enabled if state.mig_enabled is None or not gpu.mig_capable else state.mig_enabled
        pending = None
        entry = state.mig_gpus.get(str(gpu.index)) if gpu.mig_capable else None
        if entry is not None:
            mig, pending = bool(entry["current"]), (bool(entry["pending"]) if entry["pending"] != entry["current"]
                                                    else None)
        return replace(gpu, persistence=persistence and status == "ok", power_limit_w=power, mig_enabled=mig,
                       mig_pending=pending)

    changes["gpus"] = tuple(tune(g) for g in facts.gpus)
    changes["pci_gpus"] = tuple(tune(g) for g in facts.pci_gpus)
    return replace(facts, **changes)


FACT_FILTERS.append(apply_to_facts)
