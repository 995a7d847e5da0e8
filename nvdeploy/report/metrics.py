"""Measured values of a run: bandwidth and other numbers a node reported, with the floor they are judged against.

Pure functions over :class:`~nvdeploy.results.NodeResult`. Two sources:

- findings whose ``observed`` is a number and whose ``unit`` is a measurement unit (``GB/s``, ``us``, ...): the
  metric is the check id (plus ``gpuN`` when the finding is about one GPU), the floor is the finding's
  ``expected`` when it is a number or a string that holds one (``">= 452.2"``);
- node facts whose key says it is a bandwidth (``nccl_busbw_gbps``, ``h2d_gbps``): the floor comes from the
  node's profile when the profile states one (``nccl.all_reduce_busbw_gbps`` x ``floor_pct``).

Used by the HTML chart, the baseline comparison and the Prometheus output, so the three agree on what a metric is.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

from nvdeploy.results import NodeResult

# Units where a bigger number is better (bandwidth, throughput) and where a smaller one is (latency).
BANDWIDTH_UNITS = frozenset({"GB/s", "GiB/s", "Gb/s", "Gbit/s", "Gbps", "MB/s", "MiB/s"})
HIGHER_IS_BETTER = BANDWIDTH_UNITS | frozenset({"TFLOPS", "TFLOP/s", "GFLOPS", "GFLOP/s"})
LOWER_IS_BETTER = frozenset({"us", "usec", "µs"})
_FACT_SUFFIXES = {"_gbps": "GB/s", "_gbs": "GB/s", "_busbw": "GB/s"}
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class Metric:
    """One measured number on one node.

    ``key`` identifies the metric across nodes and runs (``nccl.all_reduce`` or ``nccl.all_reduce/gpu3`` or
    ``fact:nccl_busbw_gbps``); ``floor`` is the value it must reach (or, for lower-is-better units, stay under).
    """

    key: str
    node: str
    value: float
    unit: str
    label: str
    floor: Optional[float] = None
    gpu: Optional[int] = None
    source: str = "finding"

    @property
    def higher_is_better(self) -> bool:
        return self.unit not in LOWER_IS_BETTER

    @property
    def is_bandwidth(self) -> bool:
        return self.unit in BANDWIDTH_UNITS

    @property
    def below_floor(self) -> bool:
        if self.floor is None:
            return False
        return self.value < self.floor if self.higher_is_better else self.value > self.floor


def as_number(value: Any) -> Optional[float]:
    """A finite float from an int/float, or None (booleans and NaN are not measurements)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def number_in(value: Any) -> Optional[float]:
    """A number, or the first number written in a string (``">= 452.2 GB/s"`` -> 452.2)."""
    number = as_number(value)
    if number is not None or not isinstance(value, str):
        return number
    match = _NUMBER.search(value)
    if not match:
        return None
    parsed = float(match.group(0))
    return parsed if math.isfinite(parsed) else None


def is_measurement_unit(unit: str) -> bool:
    return unit in HIGHER_IS_BETTER or unit in LOWER_IS_BETTER


def fact_unit(key: str) -> Optional[str]:
    """The unit of a numeric node fact named like a bandwidth (``nccl_busbw_gbps`` -> ``GB/s``), else None."""
    lowered = key.lower()
    for suffix, unit in _FACT_SUFFIXES.items():
        if lowered.endswith(suffix):
            return unit
    return None


FloorLookup = Callable[[NodeResult, str], Optional[float]]


def profile_floor(node: NodeResult, key: str) -> Optional[float]:
    """The floor a node's profile sets for a bandwidth fact, when the profile of that exact version is known.

    Only NCCL bus bandwidth has a floor in the profiles (``nccl: {all_reduce_busbw_gbps, floor_pct}``).
    """
    if "busbw" not in key.lower() or "@" not in node.profile:
        return None
    name, version = node.profile.split("@", 1)
    profile = _load_profile(name)
    if profile is None or profile.version != version:
        return None
    nccl = profile.extra.get("nccl") or {}
    reference = as_number(nccl.get("all_reduce_busbw_gbps")) if isinstance(nccl, dict) else None
    if reference is None:
        return None
    pct = as_number(nccl.get("floor_pct")) or 100.0
    return round(reference * pct / 100.0, 3)


@functools.lru_cache(maxsize=64)
def _load_profile(name: str) -> Any:
    from nvdeploy.config.profiles import ProfileCatalog
    from nvdeploy.config.yamlfile import ConfigError

    try:
        return ProfileCatalog().get(name)
    except (KeyError, ConfigError, OSError):
        return None


def node_metrics(node: NodeResult, floor_lookup: Optional[FloorLookup] = profile_floor) -> list[Metric]:
    """Every measured number of one node, findings first, then bandwidth facts not already given by a finding."""
    metrics: list[Metric] = []
    seen: dict[str, int] = {}
    for finding in node.findings:
        value = as_number(finding.observed)
        if value is None or not is_measurement_unit(finding.unit):
            continue
        key = finding.check if finding.gpu is None else f"{finding.check}/gpu{finding.gpu}"
        count = seen.get(key, 0)
        seen[key] = count + 1
        if count:
            key = f"{key}#{count + 1}"  # a check that reports several numbers of the same GPU
        label = finding.check if finding.gpu is None else f"{finding.check} GPU{finding.gpu}"
        metrics.append(Metric(key, node.name, value, finding.unit, label, number_in(finding.expected),
                              finding.gpu, "finding"))
    measured = {round(m.value, 6) for m in metrics}
    for fact, raw in sorted(node.facts.items()):
        unit = fact_unit(str(fact))
        value = as_number(raw)
        if unit is None or value is None or round(value, 6) in measured:
            continue
        floor = floor_lookup(node, str(fact)) if floor_lookup is not None else None
        metrics.append(Metric(f"fact:{fact}", node.name, value, unit, str(fact), floor, None, "fact"))
    return metrics


def run_metrics(nodes: Iterable[NodeResult], floor_lookup: Optional[FloorLookup] = profile_floor
                ) -> dict[str, list[Metric]]:
    """Metrics of every node grouped by key, in first-seen order."""
    grouped: dict[str, list[Metric]] = {}
    for node in nodes:
        for metric in node_metrics(node, floor_lookup):
            grouped.setdefault(metric.key, []).append(metric)
    return grouped
