"""The Collector type and the function that builds a catalog of collectors from explicit groups.

The lowest module of the collect layer: the collector modules (nvdeploy/collect/catalog.py, collect/datacenter.py,
collect/stack.py) define their collectors as plain constants with it, and collect/catalog.py builds the one catalog
from them. Defining a collector registers nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional

from nvdeploy.transport.base import DEFAULT_MAX_BYTES, CommandSpec


@dataclass(frozen=True)
class Collector:
    name: str
    argv: tuple[str, ...]
    timeout_s: float
    needs_root: bool = False
    heavy: bool = False
    description: str = ""
    max_bytes: int = DEFAULT_MAX_BYTES
    # Over max_bytes keep the newest (last) bytes, not the first: for logs (CommandSpec.keep_tail).
    keep_tail: bool = False
    # The host var that overrides the timeout of this collector (heavy ones have their own).
    timeout_var: str = "command_timeout"
    # Builds the argv at plan time from the host vars and the node's Profile (None when unknown); when None,
    # ``argv`` is used as is. For commands whose arguments depend on the node (a tool's folder, the GPU count), or
    # that are costly to build and must not be built before a plan needs them (the probe's payload).
    build: Optional[Callable[[Mapping[str, Any], Any], tuple[str, ...]]] = None
    # The timeout from the host vars when it depends on them (storage: one limit per path named); ``timeout_var``
    # still wins when set.
    timeout_for: Optional[Callable[[Mapping[str, Any]], float]] = None
    # A heavy collector that puts no load on the GPUs (storage's fio/dd): GPU compute processes (the busy guard,
    # checks/heavy_gate.py) do not keep it off the node, since the job's GPUs are not what it measures or disturbs.
    loads_gpu: bool = True

    def spec(self, sudo: bool, timeout_s: Optional[float] = None) -> CommandSpec:
        return CommandSpec(self.name, self.argv, timeout_s or self.timeout_s, sudo=sudo and self.needs_root,
                           max_bytes=self.max_bytes, keep_tail=self.keep_tail)


def build_collectors(*groups: Iterable[Collector]) -> dict[str, Collector]:
    """One catalog, by name, from the given groups in order; a name defined twice is a programming error."""
    catalog: dict[str, Collector] = {}
    for group in groups:
        for collector in group:
            if collector.name in catalog:
                raise ValueError(f"duplicate collector {collector.name!r}")
            catalog[collector.name] = collector
    return catalog
