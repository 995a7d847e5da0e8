"""Strict YAML inventories in Ansible's ``all: {hosts, vars, children}`` shape.

Variable precedence, lowest to highest: ``all.vars``, then each group's vars from the outermost group down to
the innermost one that lists the host, then the host's own vars. Every key is checked: an unknown key, a bad
host range, a wrong type or a missing profile is a :class:`ConfigError` naming the file, line and key.
"""

from __future__ import annotations

import difflib
import fnmatch
import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Mapping, Optional, Union

from nvdeploy.config import inventory_ansible as ansible
from nvdeploy.config.hostrange import MAX_EXPANSION, HostRangeError, expand, split_hostlist
from nvdeploy.config.yamlfile import MAX_FILE_BYTES, ConfigError, LocList, line_of, load_yaml_file

CONNECTIONS = ("ssh", "local", "sim")
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,252}$")
_GROUP_KEYS = {"hosts", "vars", "children", "slurm"}

# What the loader cannot know itself, handed in by its caller (the rooms that know it import config/, so config/
# imports none of them): the nodes of a group whose hosts come from Slurm, as (name -> node, every node Slurm
# knows) for the group's ``slurm:`` value, its group, key and file (nvdeploy/slurm/source.py resolve_group) ...
SlurmGroups = Callable[[Any, Any, str, str], tuple[Mapping[str, Any], Collection[str]]]
# ... and the problem with a ``sim_faults`` name, None when the simulator knows it (nvdeploy/sim/scenario.py
# validate_fault).
FaultCheck = Callable[[str], Optional[str]]


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_port(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535


def _is_positive_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_node_program(value: Any) -> bool:
    """An absolute path of a program on the node, with no ``..`` and no control character: it is started by that
    path (a word of the command, never shell text), not looked up in the node's ``PATH``."""
    return isinstance(value, str) and value.startswith("/") and len(value) <= 4096 and \
        ".." not in value.split("/") and not any(ord(c) < 32 or ord(c) == 127 for c in value)


_STORAGE_FLOORS = {"read_gbps", "write_gbps"}


def _is_storage_paths(value: Any) -> bool:
    """{absolute path: {read_gbps?, write_gbps?} or null}: a path goes to the node as a script argument (never shell
    text) and comes back on a line of its own, so it may hold anything but control characters."""
    if not isinstance(value, dict) or not value:
        return False
    for path, floors in value.items():
        if not isinstance(path, str) or not path.startswith("/") or len(path) > 4096 or \
                any(ord(c) < 32 or ord(c) == 127 for c in path):
            return False
        if floors is None:
            continue
        if not isinstance(floors, dict) or not set(floors) <= _STORAGE_FLOORS | {"shared"} or \
                not all(_is_positive_number(v) for k, v in floors.items() if k != "shared") or \
                not isinstance(floors.get("shared", False), bool):
            return False
    return True


# The settings that are true or false (imex also takes host or dra): an Ansible source spells them its own ways.
BOOLEAN_KEYS = frozenset({"sudo", "node_python", "allow_reboot", "mig_enabled", "mps", "gpu_operator", "imex",
                          "ansible_become"})

# name -> (validator, description used in the error message)
VAR_SCHEMA: dict[str, tuple[Callable[[Any], bool], str]] = {
    "connection": (lambda v: v in CONNECTIONS, "one of " + ", ".join(CONNECTIONS)),
    "address": (_is_str, "a string (host name or IP address)"),
    "ssh_user": (_is_str, "a string"),
    "ssh_port": (_is_port, "an integer port 1-65535"),
    "ssh_key": (_is_str, "a string (path to a private key)"),
    "ssh_known_hosts": (_is_str, "a string (path to a known_hosts file)"),
    "ssh_jump": (_is_str, "a string (user@host:port of a jump host)"),
    "sudo": (lambda v: isinstance(v, bool), "true or false"),
    "node_python": (lambda v: isinstance(v, bool),
                    "true or false (false: the node-side batch in POSIX sh even where the node has a system Python)"),
    "probe_python": (_is_node_program,
                     "an absolute path of the node's Python for the NVML probe (default: /usr/bin/python3, then "
                     "/usr/libexec/platform-python; never the PATH's python3)"),
    "profile": (_is_str, "a string (a profile name)"),
    "sim_faults": (_is_str_list, "a list of strings"),
    "sim_sku": (_is_str, "a string (a profile name)"),
    "driver_version": (_is_str, "a quoted string (YAML reads 550.120 as the number 550.12)"),
    "cuda_version": (_is_str, "a quoted string (YAML reads 12.10 as the number 12.1)"),
    "connect_timeout": (_is_positive_number, "a positive number of seconds"),
    "command_timeout": (_is_positive_number, "a positive number of seconds"),
    "cluster": (_is_str, "a string"),
    # The check catalog (nvdeploy/collect/datacenter.py, nvdeploy/checks/{dcgm,nccl,ib}.py).
    "dcgm_timeout": (_is_positive_number, "a positive number of seconds (hard limit of dcgmi diag)"),
    "nccl_timeout": (_is_positive_number, "a positive number of seconds (hard limit of nccl-tests)"),
    "nccl_tests_dir": (_is_str, "a string (the folder holding all_reduce_perf; default: the PATH)"),
    "nccl_ranks_per_node": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
                            "a positive integer (multi-node nccl-tests ranks per node; default: the GPU count)"),
    "nccl_env": (lambda v: isinstance(v, dict) and all(
        isinstance(k, str) and re.fullmatch(r"NCCL_[A-Z0-9_]+", k) is not None
        and isinstance(x, (str, int)) and not isinstance(x, bool) for k, x in v.items()),
        "a mapping of NCCL_* variables to quoted strings, e.g. {NCCL_NVLS_ENABLE: \"1\"}"),
    "ib_hcas": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
                "a non-negative integer (InfiniBand HCAs expected Active; overrides the profile's ib.hcas)"),
    "ib_rate_gbps": (_is_positive_number, "a positive number (Gb/s per IB port; overrides the profile's ib.rate_gbps)"),
    # rdma.gpudirect (nvdeploy/phases/gpudirect.py): just this rail of the node instead of its rail map's every rail.
    "gpudirect_hca": (lambda v: isinstance(v, str) and re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]{0,63}", v) is not None,
                      "an RDMA device name, e.g. mlx5_0 (test just this NIC's GPUDirect rail)"),
    "gpudirect_gpu": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
                      "a non-negative integer (the GPU index whose GPUDirect rail alone is tested)"),
    "gpudirect_timeout": (_is_positive_number, "a positive number of seconds (each rail's ib_write_bw client)"),
    "gpudirect_address": (lambda v: isinstance(v, str) and _valid_address(v),
                          "a host name or IP address (where the node's perftest servers are reached)"),
    # install / optimize (playbooks/install.yaml, playbooks/optimize.yaml; nvdeploy/actions/).
    "driver_branch": (lambda v: isinstance(v, str) and re.fullmatch(r"\d{3}", v) is not None,
                      "a quoted driver branch of three digits, e.g. \"550\""),
    "package_mirror": (lambda v: isinstance(v, str) and re.fullmatch(r"(https?|file)://[^\s'\"\\]+", v) is not None,
                       "a URL (http://, https:// or file://) of a local mirror of NVIDIA's CUDA repository"),
    "cuda_toolkit": (lambda v: isinstance(v, str) and re.fullmatch(r"\d+\.\d+", v) is not None,
                     "a quoted CUDA toolkit version, e.g. \"12.4\""),
    "dcgm_major": (lambda v: v in ("3", "4", 3, 4), "3 (legacy datacenter-gpu-manager) or 4 (DCGM 4, the default)"),
    "container_runtime": (lambda v: v in ("auto", "docker", "containerd", "none"),
                          "auto, docker, containerd or none (which runtime nvidia-ctk configures)"),
    "nccl_tests_source": (lambda v: isinstance(v, str) and re.fullmatch(r"(https?|file)://[^\s'\"\\]+|/[^\s'\"\\]+",
                                                                          v) is not None,
                          "a URL or an absolute path on the node of a prebuilt nccl-tests .tar.gz"),
    "allow_reboot": (lambda v: isinstance(v, bool), "true or false (install may reboot the node to load a driver)"),
    "reboot_timeout": (_is_positive_number, "a positive number of seconds to wait for a rebooted node"),
    "compute_mode": (lambda v: v in ("DEFAULT", "EXCLUSIVE_PROCESS", "PROHIBITED"),
                     "one of DEFAULT, EXCLUSIVE_PROCESS, PROHIBITED"),
    "power_limit_w": (lambda v: _is_positive_number(v) or v == "default",
                      "a positive number of watts, or \"default\""),
    "app_clocks": (lambda v: isinstance(v, str) and re.fullmatch(r"default|\d+,\d+", v) is not None,
                   "\"MEM,GRAPHICS\" in MHz (e.g. \"2619,1980\") or \"default\""),
    "cpu_governor": (lambda v: v in ("performance", "powersave", "schedutil", "ondemand"),
                     "one of performance, powersave, schedutil, ondemand"),
    "mig_enabled": (lambda v: isinstance(v, bool), "true or false (overrides the profile's mig.enabled)"),
    # MIG layouts in mig-parted's format (nvdeploy/config/mig_config.py, nvdeploy/actions/mig.py).
    "mig_config": (lambda v: isinstance(v, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,126}", v) is not None,
                   "a MIG layout name of mig_config_file (or all-disabled / all-enabled), e.g. all-1g.10gb"),
    "mig_config_file": (lambda v: isinstance(v, str) and v != "" and "\n" not in v,
                        "a path on the controller to a mig-parted config (version: v1, mig-configs)"),
    # The GPU stack around the driver (nvdeploy/checks/mps.py).
    "mps": (lambda v: isinstance(v, bool), "true or false (gpu.mps: the MPS control daemon must run)"),
    "mps_pipe_dir": (lambda v: isinstance(v, str) and v.startswith("/"),
                     "an absolute path (CUDA_MPS_PIPE_DIRECTORY; default /tmp/nvidia-mps)"),
    "mps_log_dir": (lambda v: isinstance(v, str) and v.startswith("/"),
                    "an absolute path (CUDA_MPS_LOG_DIRECTORY; default /var/log/nvidia-mps)"),
    "container_image": (lambda v: isinstance(v, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}", v)
                        is not None,
                        "an image reference already on the node, e.g. \"nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04\""),
    "container_timeout": (_is_positive_number, "a positive number of seconds (hard limit of the docker run test)"),
    # Power roll-up (nvdeploy/checks/power.py).
    "rack": (lambda v: isinstance(v, str) and v != "", "a rack name (string) for the power roll-up"),
    "rack_power_budget_w": (_is_positive_number, "a positive number of watts (the rack's budget for GPU power)"),
    # IMEX on multi-node NVLink trays (nvdeploy/checks/imex.py, nvdeploy/phases/imex.py, install's nodes_config.cfg).
    "imex": (lambda v: isinstance(v, bool) or v in ("host", "dra"),
             "true (the host's nvidia-imex service), false, or \"dra\" (Kubernetes DRA ComputeDomains run IMEX)"),
    "imex_domain": (lambda v: isinstance(v, str) and v != "", "an IMEX domain name (default: the host's rack)"),
    "imex_address": (lambda v: isinstance(v, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.:-]{0,252}", v) is not None,
                     "the tray's address on the IMEX network, an IP address or host name (default: its address)"),
    "imex_timeout": (_is_positive_number, "a positive number of seconds (hard limit of nvidia-imex-ctl -N -j)"),
    # Storage throughput (nvdeploy/checks/storage.py, nvdeploy/collect/storage_commands.py).
    "storage_paths": (_is_storage_paths, "a mapping of absolute paths to floors in GB/s, e.g. {/data: {read_gbps: "
                      "10, shared: true}, /local/nvme: {write_gbps: 5}} (keys read_gbps, write_gbps, shared: a "
                      "file system other nodes mount too; a path without control characters)"),
    "storage_concurrency": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
                            "a positive integer (how many nodes measure one shared storage path at once; default 4)"),
    "storage_file_mib": (_is_positive_number, "a positive number of MiB (the test file's size; at most 4096)"),
    "storage_runtime_s": (_is_positive_number, "a positive number of seconds (fio's run time per direction; at most "
                          "60)"),
    "storage_timeout": (_is_positive_number, "a positive number of seconds (each path's hard limit)"),
    "storage_collector_timeout": (_is_positive_number, "a positive number of seconds (the whole storage test's "
                                  "hard limit; default: every path's limit added up)"),
    # Kubernetes GPU Operator (nvdeploy/checks/gpu_operator.py; kubectl runs on the controller).
    "kubeconfig": (lambda v: isinstance(v, str) and v != "", "a path on the controller to the cluster's kubeconfig"),
    "kubectl": (lambda v: isinstance(v, str) and v != "", "the kubectl to run on the controller (a path or a name)"),
    "gpu_operator": (lambda v: isinstance(v, bool), "true or false (check the GPU Operator with kubectl's defaults)"),
    "gpu_operator_namespace": (lambda v: isinstance(v, str) and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", v)
                               is not None, "a Kubernetes namespace name (default gpu-operator)"),
    "k8s_node": (lambda v: isinstance(v, str) and v != "", "the host's Kubernetes node name (default its name)"),
    "kubectl_timeout": (_is_positive_number, "a positive number of seconds (hard limit of each kubectl call)"),
}


@dataclass(frozen=True)
class Host:
    """One node and its resolved variables."""

    name: str
    vars: Mapping[str, Any]
    groups: tuple[str, ...] = ()
    file: str = ""
    line: Optional[int] = None
    var_lines: Mapping[str, int] = field(default_factory=dict)

    @property
    def connection(self) -> str:
        return str(self.vars.get("connection", "ssh"))

    @property
    def address(self) -> str:
        return str(self.vars.get("address", self.name))

    @property
    def profile(self) -> Optional[str]:
        value = self.vars.get("profile")
        return str(value) if value is not None else None

    @property
    def faults(self) -> tuple[str, ...]:
        return tuple(self.vars.get("sim_faults", ()))

    def get(self, key: str, default: Any = None) -> Any:
        return self.vars.get(key, default)


@dataclass(frozen=True)
class Inventory:
    cluster: str
    hosts: tuple[Host, ...]
    groups: Mapping[str, tuple[str, ...]]
    path: str = ""
    # The hosts before --limit: what depends on other hosts (an IMEX domain's node list) must see them all.
    unlimited: tuple[Host, ...] = ()

    @property
    def every_host(self) -> tuple[Host, ...]:
        return self.unlimited or self.hosts

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def limit(self, pattern: Optional[str]) -> Inventory:
        """Keep the hosts matching ``pattern``; see :func:`match_limit`."""
        if not pattern:
            return self
        try:
            names = match_limit(pattern, [h.name for h in self.hosts], self.groups)
        except ConfigError as exc:
            raise ConfigError(exc.message, self.path or None, None, "--limit") from None
        return Inventory(self.cluster, tuple(h for h in self.hosts if h.name in names), self.groups, self.path,
                         self.every_host)


def match_limit(pattern: str, names: list[str], groups: Mapping[str, tuple[str, ...]]) -> set[str]:
    """``--limit``: comma-separated host names, globs, ranges or group names; ``!x`` excludes x.

    Commas inside brackets belong to the range: ``gpu[001-002,005]``, the folded form nvdeploy prints, is one term.

    A pattern that matches nothing is an error: a typo must not turn into an empty (trivially READY) run.
    """
    include: set[str] = set()
    exclude: set[str] = set()
    any_include = False
    try:
        terms = split_hostlist(pattern)
    except HostRangeError as exc:
        raise ConfigError(f"bad --limit pattern {pattern!r}: {exc}") from None
    for raw in terms:
        if not raw:
            continue
        negate = raw.startswith("!")
        term = raw[1:] if negate else raw
        matched: set[str] = set()
        if term in groups:
            matched.update(groups[term])
        else:
            try:
                candidates = expand(term)
            except HostRangeError as exc:
                raise ConfigError(f"bad --limit pattern {term!r}: {exc}") from None
            for candidate in candidates:
                matched.update(fnmatch.filter(names, candidate))
        if not matched:
            raise ConfigError(f"--limit {term!r} matches no host or group in the inventory")
        if negate:
            exclude |= matched
        else:
            any_include = True
            include |= matched
    base = include if any_include else set(names)
    return base - exclude


def _valid_name(name: str) -> bool:
    return bool(_NAME.match(name)) and ".." not in name


def _valid_address(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        return bool(re.match(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,252}$", value))


@dataclass
class _Group:
    name: str
    line: Optional[int]
    vars: dict[str, Any] = field(default_factory=dict)
    var_lines: dict[str, int] = field(default_factory=dict)
    hosts: dict[str, None] = field(default_factory=dict)  # direct members in first-seen order (a set, kept ordered)
    children: dict[str, Optional[int]] = field(default_factory=dict)  # child -> line of the entry
    priority: int = 1


def _suggest(word: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.6)
    return f"; did you mean `{close[0]}`?" if close else " (the keys are listed in docs/inventory.md)"


class _Builder:
    """The inventory as Ansible's parser builds it: one object per group and per host, whatever the file order."""

    def __init__(self, file: str, slurm_groups: Optional[SlurmGroups] = None) -> None:
        self.file = file
        self.slurm_groups = slurm_groups
        self.groups: dict[str, _Group] = {"all": _Group("all", None)}
        self.host_vars: dict[str, dict[str, Any]] = {}
        self.host_var_lines: dict[str, dict[str, int]] = {}
        self.host_lines: dict[str, int] = {}
        self.base: dict[str, dict[str, Any]] = {}  # data about the node (Slurm's facts): below every setting
        self.spelling: dict[str, tuple[str, Optional[int]]] = {}  # nvdeploy key -> (name used for it, line)
        self.entries = 0  # host entries expanded so far, all groups together: a few range lines must not OOM us
        self.ansible_values = False  # an INI file or ansible-inventory's output: Ansible's spellings of a boolean

    def fail(self, message: str, line: Optional[int], key: Any = None) -> ConfigError:
        return ConfigError(message, self.file, line, str(key) if key is not None else None)

    # ---- the Sink protocol (nvdeploy.config.inventory_ansible) ----
    def add_group(self, name: str, line: Optional[int]) -> None:
        if not _valid_name(name):
            raise self.fail("invalid group name", line, name)
        if name not in self.groups:
            self.groups[name] = _Group(name, line)

    def add_child(self, parent: str, child: str, line: Optional[int]) -> None:
        self.add_group(parent, line)
        self.add_group(child, line)
        if child == "all":
            raise self.fail("'all' cannot be a child group", line, child)
        self.groups[parent].children.setdefault(child, line)

    def _typed(self, key: str, value: Any) -> Any:
        """An Ansible source's value of a boolean setting, read as Ansible reads it (INI has no booleans but
        Python's ``True``: ``sudo=yes``, ``ansible_become=true``, ``1``)."""
        return ansible.boolean_value(value) if self.ansible_values and key in BOOLEAN_KEYS else value

    def set_group_var(self, group: str, key: str, value: Any, line: Optional[int]) -> None:
        value = self._typed(key, value)
        if key == ansible.GROUP_PRIORITY:
            number = ansible.priority(value)
            if number is None:
                raise self.fail(f"must be a whole number, got {type(value).__name__} {value!r}", line, key)
            self.groups[group].priority = number
            return
        self._check(key, value, line)
        self.groups[group].vars[key] = _copy(value)
        self.groups[group].var_lines[key] = line or 0

    def add_hosts(self, group: str, pattern: str, line: Optional[int]) -> list[str]:
        if ":" in _BRACKETS.sub("", pattern):
            raise self.fail("a port in the host name is not read (set ansible_port or ssh_port)", line, pattern)
        try:
            names = expand(pattern)
        except HostRangeError as exc:
            raise self.fail(f"bad host range: {exc}", line, pattern) from None
        self.entries += len(names)
        if self.entries > MAX_EXPANSION:
            raise self.fail(f"the inventory lists more than {MAX_EXPANSION} host entries", line, pattern)
        for name in names:
            if not _valid_name(name):
                raise self.fail(f"invalid host name {name!r} (letters, digits, '.', '_', '-'; must not start with '-')",
                                line, pattern)
        members = self.groups[group].hosts
        for name in names:
            if name not in self.host_vars:
                self.host_vars[name], self.host_var_lines[name] = {}, {}
                self.host_lines[name] = line or 0
            members.setdefault(name, None)
        return names

    def set_host_var(self, host: str, key: str, value: Any, line: Optional[int]) -> None:
        value = self._typed(key, value)
        if key == ansible.GROUP_PRIORITY:
            raise self.fail("ansible_group_priority is a group variable (it orders groups of the same depth)", line,
                            key)
        self._check(key, value, line)
        self.host_vars[host][key] = _copy(value)
        self.host_var_lines[host][key] = line or 0

    # ---- checks ----
    def _check(self, key: Any, value: Any, line: Optional[int]) -> None:
        if not isinstance(key, str):
            raise self.fail("a variable name must be a string", line, key)
        if key in VAR_SCHEMA:
            check, description = VAR_SCHEMA[key]
            if not check(value):
                hint = (" (a quoted word is a string: write true in YAML, True in INI)"
                        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no") else "")
                raise self.fail(f"must be {description}, got {type(value).__name__} {value!r}{hint}", line, key)
            if key == "address" and not _valid_address(value):
                raise self.fail("is not a valid host name or IP address", line, key)
            names: tuple[str, ...] = (key,)
        elif key in ansible.ANSIBLE_KEYS:
            problem = ansible.check(key, value)
            if problem:
                raise self.fail(problem, line, key)
            if key in ansible.ALIASES and ansible.ALIASES[key][0] == "address" and not _valid_address(value):
                raise self.fail("is not a valid host name or IP address", line, key)
            names = ansible.targets(key)
        else:
            raise self.fail("unknown variable" + _suggest(key, set(VAR_SCHEMA) | ansible.ANSIBLE_KEYS), line, key)
        for target in names:
            used = self.spelling.setdefault(target, (key, line))
            if used[0] != key:
                where = f" at line {used[1]}" if used[1] else ""
                raise self.fail(f"sets {target!r}, which this inventory already sets as {used[0]!r}{where}: use one "
                                "name for one setting", line, key)

    # ---- resolution ----
    def resolve(self) -> tuple[list[Host], dict[str, tuple[str, ...]]]:
        """Ansible's resolution: membership through every path, vars by (depth, ansible_group_priority, name)."""
        self.groups.setdefault("ungrouped", _Group("ungrouped", None))
        parents: dict[str, set[str]] = {name: set() for name in self.groups}
        for group in self.groups.values():
            for child in group.children:
                parents[child].add(group.name)
        for name in self.groups:
            if name != "all" and not parents[name]:
                # A group no other group lists is a child of 'all', as Ansible reconciles it.
                self.groups["all"].children.setdefault(name, None)
                parents[name].add("all")
        depth = self._depths(parents)
        direct: dict[str, set[str]] = {}
        for group in self.groups.values():
            for host in group.hosts:
                direct.setdefault(host, set()).add(group.name)
        ancestors: dict[str, set[str]] = {}

        def up(name: str) -> set[str]:
            if name not in ancestors:
                found = {name}
                for parent in parents[name]:
                    found |= up(parent)
                ancestors[name] = found
            return ancestors[name]

        def order(group: str) -> tuple[int, int, str]:
            return depth[group], self.groups[group].priority, group

        hosts: list[Host] = []
        members: dict[str, set[str]] = {name: set() for name in self.groups}
        for name in self.host_vars:
            groups = {"all"}
            for group in direct.get(name, ()):
                if group != "ungrouped":
                    groups |= up(group)
            if groups == {"all"}:
                groups.add("ungrouped")
            merged: dict[str, Any] = dict(self.base.get(name, {}))
            lines: dict[str, int] = {}
            for group in sorted(groups, key=order):
                merged.update(self.groups[group].vars)
                lines.update(self.groups[group].var_lines)
                members[group].add(name)
            merged.update(self.host_vars[name])
            lines.update(self.host_var_lines[name])
            values, value_lines = ansible.translate(merged, lines)
            hosts.append(Host(name, values, tuple(sorted(groups, key=order)), self.file, self.host_lines[name],
                              value_lines))
        mapping = {g: tuple(sorted(m)) for g, m in members.items() if m or g not in ("ungrouped",)}
        return hosts, mapping

    def _depths(self, parents: Mapping[str, set[str]]) -> dict[str, int]:
        """Ansible's group depth: the longest path from 'all'. A loop is refused where it closes."""
        depth: dict[str, int] = {}
        visiting: set[str] = set()

        def visit(name: str) -> int:
            if name in depth:
                return depth[name]
            if name in visiting:
                raise RecursionError(name, set(visiting))
            visiting.add(name)
            try:
                # sorted: which edge of a loop is named must not depend on the string hash seed
                found = 0 if name == "all" else 1 + max(visit(p) for p in sorted(parents[name]))
            finally:
                visiting.discard(name)
            depth[name] = found
            return found

        for name in self.groups:
            try:
                visit(name)
            except RecursionError as loop:
                group, on_loop = loop.args
                # the edge that closes the loop: the group listed as a child of a group on the loop
                line = next((self.groups[p].children[group] for p in sorted(parents[group])
                             if p in on_loop and self.groups[p].children.get(group)), self.groups[group].line)
                raise self.fail("group contains itself (through its children)", line, group) from None
        return depth


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


_BRACKETS = re.compile(r"\[[^\[\]]*\]")


def _walk_yaml(builder: _Builder, name: str, body: Any, container: Any) -> None:
    """One group of a YAML inventory, its keys in file order, as Ansible's YAML plugin reads them."""
    line = line_of(container, name)
    builder.add_group(name, line)
    if body is None:
        return
    if not isinstance(body, dict):
        raise builder.fail("a group must be a mapping with hosts, vars or children", line, name)
    for key in body:
        if key not in _GROUP_KEYS:
            raise builder.fail("unknown key in group (allowed: hosts, vars, children, slurm)" + _suggest(
                str(key), _GROUP_KEYS), line_of(body, key), key)
    slurm_known: Optional[Collection[str]] = None
    slurm_nodes: Mapping[str, Any] = {}
    if body.get("slurm") is not None:
        # The group's hosts come from Slurm (nvdeploy/slurm/source.py); hosts: below only add vars to them.
        if builder.slurm_groups is None:
            raise builder.fail("this inventory was loaded without Slurm (load_inventory's slurm_groups): a group's "
                               "hosts cannot come from Slurm here", line_of(body, "slurm"), "slurm")
        slurm_nodes, slurm_known = builder.slurm_groups(body["slurm"], body, "slurm", builder.file)
        for host_name, node in slurm_nodes.items():
            builder.add_hosts(name, host_name, line_of(body, "slurm"))
            builder.base[host_name] = {"slurm_node": node.to_dict()}
    for key, value in body.items():
        if value is None or key == "slurm":
            continue
        key_line = line_of(body, key)
        if key == "vars":
            if not isinstance(value, dict):
                raise builder.fail("must be a mapping of variables", key_line, key)
            for var, var_value in value.items():
                builder.set_group_var(name, var, var_value, line_of(value, var))
        elif key == "children":
            if not isinstance(value, dict):
                raise builder.fail("children must be a mapping of group names", key_line, key)
            for child, child_body in value.items():
                child_name = str(child)
                if not _valid_name(child_name):
                    raise builder.fail("invalid group name", line_of(value, child), child)
                _walk_yaml(builder, child_name, child_body, value)
                builder.add_child(name, child_name, line_of(value, child))
        else:
            if isinstance(value, LocList):
                raise builder.fail("hosts must be a mapping of host name to variables (use 'name: {}')", key_line, key)
            if not isinstance(value, dict):
                raise builder.fail("hosts must be a mapping", key_line, key)
            for pattern, host_vars in value.items():
                pattern_line = line_of(value, pattern)
                if host_vars is not None and not isinstance(host_vars, dict):
                    raise builder.fail("must be a mapping of variables", pattern_line, pattern)
                if slurm_known is not None:
                    names = _slurm_names(builder, str(pattern), pattern_line, slurm_known, slurm_nodes)
                else:
                    names = builder.add_hosts(name, str(pattern), pattern_line)
                for host_name in names:
                    for var, var_value in (host_vars or {}).items():
                        builder.set_host_var(host_name, var, var_value, line_of(host_vars, var))


def _slurm_names(builder: _Builder, pattern: str, line: Optional[int], known: Collection[str],
                 nodes: Mapping[str, Any]) -> list[str]:
    try:
        names = expand(pattern)
    except HostRangeError as exc:
        raise builder.fail(f"bad host range: {exc}", line, pattern) from None
    unknown = [n for n in names if n not in known]
    if unknown:
        raise builder.fail(f"Slurm knows no node {unknown[0]!r} (this group's hosts come from Slurm; hosts: only adds"
                           " variables to them)", line, pattern)
    return [n for n in names if n in nodes]  # filtered out by partition/states/nodes


def load_inventory(path: Union[str, Path], catalog: Any = None, *, slurm_groups: Optional[SlurmGroups] = None,
                   check_fault: Optional[FaultCheck] = None) -> Inventory:
    """Read and validate an inventory. With a ProfileCatalog, also check every profile exists, and with
    ``check_fault`` every ``sim_faults`` name of a simulated host; a group with ``slurm:`` needs ``slurm_groups``.

    ``*.yaml``, ``*.yml`` and ``*.json`` are YAML inventories, ``ansible:SOURCE`` is whatever ``ansible-inventory -i
    SOURCE --list`` resolves, any other file is Ansible's INI format (the same rule as Ansible's own plugins).
    """
    file = str(path)
    builder = _Builder(file, slurm_groups)
    cluster_line: Optional[int] = None
    if file.startswith(ansible.ANSIBLE_SOURCE_PREFIX):
        source = file[len(ansible.ANSIBLE_SOURCE_PREFIX):]
        builder.ansible_values = True
        ansible.read_ansible_source(source, builder, file)
        stem = Path(source).stem
    elif Path(file).suffix.lower() in (".yaml", ".yml", ".json"):
        data = load_yaml_file(path)
        if not isinstance(data, dict):
            raise ConfigError("an inventory must be a mapping of groups, with 'all:' at the top", file,
                              line_of(data))
        if data.get("plugin") is not None:
            raise ConfigError("this is an Ansible inventory plugin's configuration: read it with -i ansible:" + file,
                              file, line_of(data, "plugin"), "plugin")
        for group, body in data.items():
            if not isinstance(group, str) or not _valid_name(group):
                raise ConfigError("a top-level key is a group name", file, line_of(data, group), str(group))
            _walk_yaml(builder, group, body, data)
        cluster_line = line_of(data, "all") if "all" in data else 1
        stem = Path(file).stem
    else:
        if Path(file).is_dir():
            raise ConfigError("is a folder: an Ansible inventory folder (several files, group_vars/, host_vars/) is "
                              f"read through Ansible itself: -i ansible:{file}", file)
        builder.ansible_values = True
        ansible.read_ini(_read_text(file), file, builder)
        stem = Path(file).stem
    hosts, groups = builder.resolve()
    from nvdeploy.config.mig_config import check_hosts

    hosts = check_hosts(hosts, file)
    if not hosts:
        raise ConfigError("the inventory lists no hosts", file, cluster_line, "all" if cluster_line else None)
    named = builder.groups["all"].vars.get("cluster")
    cluster = str(named) if named else stem
    inventory = Inventory(cluster, tuple(hosts), groups, file)
    _check_addresses(inventory)
    if catalog is not None:
        check_profiles(inventory, catalog, check_fault)
    return inventory


def _read_text(file: str) -> str:
    path = Path(file)
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ConfigError(f"file is {path.stat().st_size} bytes; the limit is {MAX_FILE_BYTES}", file)
        return path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read file: {exc.strerror}", file) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text (byte offset {exc.start})", file) from None


def _check_addresses(inventory: Inventory) -> None:
    seen: dict[tuple[str, str, int], str] = {}
    for host in inventory.hosts:
        if host.connection != "ssh":
            continue
        key = (host.address, str(host.get("ssh_user", "")), int(host.get("ssh_port", 22)))
        if key in seen:
            raise ConfigError(f"hosts {seen[key]!r} and {host.name!r} connect to the same address {host.address!r}"
                              " (a duplicate entry would be checked twice and reported as two nodes)",
                              host.file, host.var_lines.get("address", host.line), "address")
        seen[key] = host.name


def check_profiles(inventory: Inventory, catalog: Any, check_fault: Optional[FaultCheck] = None) -> None:
    known = set(catalog.names())
    for host in inventory.hosts:
        for key in ("profile", "sim_sku"):
            value = host.get(key)
            if key == "profile" and value is None:
                raise ConfigError(f"host {host.name!r} has no profile (set 'profile:' in its group or host vars; "
                                  f"known: {', '.join(sorted(known))})", host.file, host.line, "profile")
            if value is not None and value not in known:
                raise ConfigError(f"unknown profile {value!r} (known: {', '.join(sorted(known))})", host.file,
                                  host.var_lines.get(key, host.line), key)
        if host.connection == "sim" and check_fault is not None:
            for fault in host.faults:
                problem = check_fault(fault)
                if problem:
                    raise ConfigError(problem, host.file, host.var_lines.get("sim_faults", host.line), "sim_faults")
