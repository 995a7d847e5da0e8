"""Strict YAML inventories in Ansible's ``all: {hosts, vars, children}`` shape.

Variable precedence, lowest to highest: ``all.vars``, then each group's vars from the outermost group down to
the innermost one that lists the host, then the host's own vars. Every key is checked: an unknown key, a bad
host range, a wrong type or a missing profile is a :class:`ConfigError` naming the file, line and key.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Union

from nvdeploy.hostrange import MAX_EXPANSION, HostRangeError, expand
from nvdeploy.yamlfile import ConfigError, LocDict, LocList, line_of, load_yaml_file

CONNECTIONS = ("ssh", "local", "sim")
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,252}$")
_GROUP_KEYS = {"hosts", "vars", "children", "slurm"}


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_port(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535


def _is_positive_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


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
    "profile": (_is_str, "a string (a profile name)"),
    "sim_faults": (_is_str_list, "a list of strings"),
    "sim_sku": (_is_str, "a string (a profile name)"),
    "driver_version": (_is_str, "a quoted string (YAML reads 550.120 as the number 550.12)"),
    "cuda_version": (_is_str, "a quoted string (YAML reads 12.10 as the number 12.1)"),
    "connect_timeout": (_is_positive_number, "a positive number of seconds"),
    "command_timeout": (_is_positive_number, "a positive number of seconds"),
    "cluster": (_is_str, "a string"),
    # The check catalog (nvdeploy/collect_catalog.py, nvdeploy/checks/{dcgm,nccl,ib}.py).
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
    # The GPU stack around the driver (issue 12; nvdeploy/checks/mps.py).
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

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def limit(self, pattern: Optional[str]) -> Inventory:
        """Keep the hosts matching ``pattern``; see :func:`match_limit`."""
        if not pattern:
            return self
        names = match_limit(pattern, [h.name for h in self.hosts], self.groups)
        return Inventory(self.cluster, tuple(h for h in self.hosts if h.name in names), self.groups, self.path)


def match_limit(pattern: str, names: list[str], groups: Mapping[str, tuple[str, ...]]) -> set[str]:
    """``--limit``: comma-separated host names, globs, ranges or group names; ``!x`` excludes x.

    A pattern that matches nothing is an error: a typo must not turn into an empty (trivially READY) run.
    """
    include: set[str] = set()
    exclude: set[str] = set()
    any_include = False
    for raw in (p.strip() for p in pattern.split(",")):
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


class _Loader:
    def __init__(self, file: str) -> None:
        self.file = file
        # host name -> list of (depth, var dict, var lines)
        self.layers: dict[str, list[tuple[int, Mapping[str, Any], Mapping[str, int]]]] = {}
        self.host_lines: dict[str, int] = {}
        self.host_groups: dict[str, list[str]] = {}
        self.groups: dict[str, set[str]] = {}
        self.order: list[str] = []
        self.entries = 0  # host entries expanded so far, all groups together: a few range lines must not OOM us

    def error(self, message: str, container: Any = None, key: Any = None) -> ConfigError:
        return ConfigError(message, self.file, line_of(container, key) if container is not None else None,
                           str(key) if key is not None else None)

    def check_vars(self, values: Any, container: Any, key: str) -> tuple[dict[str, Any], dict[str, int]]:
        if values is None:
            return {}, {}
        if not isinstance(values, dict):
            raise self.error("must be a mapping of variables", container, key)
        out: dict[str, Any] = {}
        lines: dict[str, int] = {}
        for var, value in values.items():
            if var not in VAR_SCHEMA:
                raise self.error(f"unknown variable (known: {', '.join(sorted(VAR_SCHEMA))})", values, var)
            check, description = VAR_SCHEMA[var]
            if not check(value):
                raise self.error(f"must be {description}, got {type(value).__name__} {value!r}", values, var)
            if var == "address" and not _valid_address(value):
                raise self.error("is not a valid host name or IP address", values, var)
            out[var] = list(value) if isinstance(value, list) else value
            lines[var] = line_of(values, var) or 0
        return out, lines

    def walk_group(self, name: str, body: Any, parent: Any, depth: int, ancestors: tuple[str, ...]) -> None:
        if name in ancestors:
            raise self.error("group contains itself", parent, name)
        if body is None:
            body = LocDict()
            body.line = line_of(parent, name) or 0
            body.key_lines = {}
        if not isinstance(body, dict):
            raise self.error("a group must be a mapping with hosts, vars or children", parent, name)
        for key in body:
            if key not in _GROUP_KEYS:
                raise self.error("unknown key in group (allowed: hosts, vars, children, slurm)", body, key)
        group_vars, group_lines = self.check_vars(body.get("vars"), body, "vars")
        self.groups.setdefault(name, set())
        members: list[str] = []
        slurm_nodes: Optional[dict[str, Any]] = None
        if body.get("slurm") is not None:
            # The group's hosts come from Slurm (nvdeploy/slurm/source.py); hosts: below only add vars to them.
            from nvdeploy.slurm.source import resolve_group

            slurm_nodes, slurm_known = resolve_group(body["slurm"], body, "slurm", self.file)
            for host_name, node in slurm_nodes.items():
                if host_name not in self.layers:
                    self.layers[host_name] = []
                    self.order.append(host_name)
                    self.host_lines[host_name] = line_of(body, "slurm") or 0
                # Lowest precedence: Slurm's facts are data about the node, never a setting that overrides one.
                self.layers[host_name].append((-1, {"slurm_node": node.to_dict()}, {}))
                members.append(host_name)
        hosts = body.get("hosts")
        if hosts is not None:
            if isinstance(hosts, LocList):
                raise self.error("hosts must be a mapping of host name to variables (use 'name: {}')", body, "hosts")
            if not isinstance(hosts, dict):
                raise self.error("hosts must be a mapping", body, "hosts")
            for pattern, host_vars in hosts.items():
                pattern_text = str(pattern)
                try:
                    names = expand(pattern_text)
                except HostRangeError as exc:
                    raise self.error(f"bad host range: {exc}", hosts, pattern) from None
                self.entries += len(names)
                if self.entries > MAX_EXPANSION:
                    raise self.error(f"the inventory lists more than {MAX_EXPANSION} host entries", hosts, pattern)
                for host_name in names:
                    if not _valid_name(host_name):
                        raise self.error(f"invalid host name {host_name!r} (letters, digits, '.', '_', '-'; "
                                         "must not start with '-')", hosts, pattern)
                values, lines = self.check_vars(host_vars, hosts, pattern)
                if slurm_nodes is not None:
                    unknown = [n for n in names if n not in slurm_known]
                    if unknown:
                        raise self.error(f"Slurm knows no node {unknown[0]!r} (this group's hosts come from Slurm;"
                                         " hosts: only adds variables to them)", hosts, pattern)
                    names = [n for n in names if n in slurm_nodes]  # filtered out by partition/states/nodes
                for host_name in names:
                    if host_name not in self.layers:
                        self.layers[host_name] = []
                        self.order.append(host_name)
                        self.host_lines[host_name] = line_of(hosts, pattern) or 0
                    # Host vars outrank every group var, whatever the nesting depth.
                    self.layers[host_name].append((1_000_000, values, lines))
                    members.append(host_name)
        children = body.get("children")
        if children is not None:
            if not isinstance(children, dict):
                raise self.error("children must be a mapping of group names", body, "children")
            for child, child_body in children.items():
                child_name = str(child)
                if not _valid_name(child_name):
                    raise self.error("invalid group name", children, child)
                self.walk_group(child_name, child_body, children, depth + 1, ancestors + (name,))
                members.extend(self.groups.get(child_name, ()))
        for host_name in members:
            self.groups[name].add(host_name)
            self.host_groups.setdefault(host_name, [])
            if name not in self.host_groups[host_name]:
                self.host_groups[host_name].append(name)
            if group_vars:
                self.layers[host_name].append((depth, group_vars, group_lines))


def load_inventory(path: Union[str, Path], catalog: Any = None) -> Inventory:
    """Read and validate an inventory file. With a ProfileCatalog, also check every profile exists."""
    file = str(path)
    data = load_yaml_file(path)
    if not isinstance(data, dict):
        raise ConfigError("an inventory must be a mapping with a top-level 'all:' group", file, line_of(data))
    for key in data:
        if key != "all":
            raise ConfigError("unknown top-level key (an inventory has only 'all:')", file, line_of(data, key),
                              str(key))
    if "all" not in data:
        raise ConfigError("missing top-level 'all:' group", file, 1, "all")
    loader = _Loader(file)
    loader.walk_group("all", data["all"], data, 0, ())
    if not loader.order:
        raise ConfigError("the inventory lists no hosts", file, line_of(data, "all"), "all")
    hosts: list[Host] = []
    for name in loader.order:
        merged: dict[str, Any] = {}
        lines: dict[str, int] = {}
        for _, values, var_lines in sorted(loader.layers[name], key=lambda layer: layer[0]):
            merged.update(values)
            lines.update(var_lines)
        hosts.append(Host(name, merged, tuple(loader.host_groups.get(name, ())), file, loader.host_lines[name], lines))
    all_vars = data["all"].get("vars") if isinstance(data["all"], dict) else None
    named = isinstance(all_vars, dict) and all_vars.get("cluster")
    cluster = str(all_vars["cluster"]) if named else Path(file).stem  # type: ignore[index]
    inventory = Inventory(cluster, tuple(hosts), {g: tuple(sorted(m)) for g, m in loader.groups.items()}, file)
    _check_addresses(inventory)
    if catalog is not None:
        check_profiles(inventory, catalog)
    return inventory


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


def check_profiles(inventory: Inventory, catalog: Any) -> None:
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
        if host.connection == "sim":
            from nvdeploy.sim.scenario import validate_fault

            for fault in host.faults:
                problem = validate_fault(fault)
                if problem:
                    raise ConfigError(problem, host.file, host.var_lines.get("sim_faults", host.line), "sim_faults")
