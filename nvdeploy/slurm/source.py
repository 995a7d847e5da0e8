"""An inventory group whose hosts come from Slurm: ``slurm: {partition: h100, states: [idle, drained],
nodes: "gpu[001-128]"}``.

The group's hosts are Slurm's nodes that match (partition, state names as ``sinfo -t`` knows them, a hostlist);
``hosts:`` entries in that group only add variables to the Slurm nodes of those names, as in Ansible. Each host
carries its Slurm facts in the variable ``slurm_node`` (state, reason, GRES, partitions, features). Slurm not
answering is a :class:`ConfigError` carrying Slurm's own message: the run stops (exit 2) before any node is
touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from nvdeploy.config.hostrange import HostRangeError, expand
from nvdeploy.config.yamlfile import ConfigError, line_of
from nvdeploy.slurm.client import SlurmClient, SlurmError
from nvdeploy.slurm.nodes import SlurmNode, matches_states

FACTS_VAR = "slurm_node"
STATE_NAMES = ("idle", "allocated", "alloc", "mixed", "mix", "down", "drained", "drain", "draining", "drng",
               "maint", "reserved", "completing", "unknown", "future", "error")
_KEYS = {"partition", "states", "nodes", "timeout"}


@dataclass(frozen=True)
class SlurmSelection:
    partition: Optional[str] = None
    states: tuple[str, ...] = ()
    nodes: Optional[str] = None
    timeout_s: float = 30.0


# Replaced in unit tests; the real one asks the scheduler.
def _default_fetch(timeout_s: float) -> list[SlurmNode]:
    return SlurmClient(timeout_s=timeout_s).nodes()


fetch_nodes: Callable[[float], list[SlurmNode]] = _default_fetch
_ALIASES = {"alloc": "allocated", "mix": "mixed", "drain": "drained", "drng": "draining"}


def parse_selection(spec: Any, container: Any, key: str, file: str) -> SlurmSelection:
    def error(message: str, where: Any = container, at: Any = key) -> ConfigError:
        return ConfigError(message, file, line_of(where, at), str(at))

    if not isinstance(spec, dict):
        raise error("slurm must be a mapping such as {partition: h100, states: [idle, drained]}")
    for name in spec:
        if name not in _KEYS:
            raise error(f"unknown key in slurm (allowed: {', '.join(sorted(_KEYS))})", spec, name)
    partition = spec.get("partition")
    if partition is not None and not isinstance(partition, str):
        raise error("must be a string (a Slurm partition name)", spec, "partition")
    states = spec.get("states", [])
    if isinstance(states, str):
        states = [states]
    if not isinstance(states, list) or not all(isinstance(s, str) and s.lower() in STATE_NAMES for s in states):
        raise error(f"must be a list of Slurm state names ({', '.join(STATE_NAMES)})", spec, "states")
    nodes = spec.get("nodes")
    if nodes is not None:
        if not isinstance(nodes, str):
            raise error("must be a hostlist string such as \"gpu[001-128]\"", spec, "nodes")
        try:
            expand_hostlist(nodes)
        except HostRangeError as exc:
            raise error(f"bad hostlist: {exc}", spec, "nodes") from None
    timeout = spec.get("timeout", 30.0)
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
        raise error("must be a positive number of seconds", spec, "timeout")
    return SlurmSelection(partition, tuple(_ALIASES.get(s.lower(), s.lower()) for s in states), nodes,
                          float(timeout))


def expand_hostlist(text: str) -> list[str]:
    from nvdeploy.slurm.client import _split_hostlist

    return [name for part in _split_hostlist(text) for name in expand(part)]


def select(nodes: list[SlurmNode], selection: SlurmSelection) -> list[SlurmNode]:
    wanted = set(expand_hostlist(selection.nodes)) if selection.nodes else None
    return [n for n in nodes
            if (selection.partition is None or selection.partition in n.partitions)
            and (wanted is None or n.name in wanted)
            and matches_states(n, selection.states)]


def resolve_group(spec: Any, container: Any, key: str, file: str) -> tuple[dict[str, SlurmNode], set[str]]:
    """(the selected nodes by name, in Slurm's order; every node name Slurm knows)."""
    selection = parse_selection(spec, container, key, file)
    try:
        everything = fetch_nodes(selection.timeout_s)
    except SlurmError as exc:
        raise ConfigError(f"cannot read the nodes from Slurm: {exc.message} (command: {' '.join(exc.command)})",
                          file, line_of(container, key), str(key)) from None
    if selection.partition is not None and not any(selection.partition in n.partitions for n in everything):
        known = sorted({p for n in everything for p in n.partitions})
        raise ConfigError(f"Slurm has no partition {selection.partition!r} (known: {', '.join(known) or 'none'})",
                          file, line_of(spec, "partition"), "partition")
    chosen = select(everything, selection)
    return {n.name: n for n in chosen}, {n.name for n in everything}
