"""What a validation run measured that the calculator can use instead of datasheet figures.

Per profile of the run: the median single-node nccl-tests all_reduce busbw (check ``nccl.all_reduce``), the median
multi-node busbw (``nccl.multinode``) and the median GPU power limit the nodes enforce (``clocks.power_limit``,
read from nvidia-smi/NVML: the ceiling of the draw under load, a better energy figure than the datasheet TDP when
an operator capped it). Medians, so one bad node does not set the fleet's figure. Pure: a RunResult in, numbers out.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Any, Optional

from nvdeploy.results import RunResult
from nvdeploy.sizing.sku import SkuFigures

CHECKS = {"busbw_gbps": "nccl.all_reduce", "multinode_busbw_gbps": "nccl.multinode", "power_w": "clocks.power_limit"}


@dataclass(frozen=True)
class Measured:
    """One figure of one profile in a run: the median over ``nodes`` nodes."""

    profile: str
    figure: str          # busbw_gbps | multinode_busbw_gbps | power_w
    value: float
    nodes: int


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


def measured_figures(run: RunResult) -> dict[str, dict[str, Measured]]:
    """profile name -> figure -> Measured, for every figure the run has at least one number for."""
    values: dict[tuple[str, str], dict[str, float]] = {}
    by_check = {check: figure for figure, check in CHECKS.items()}
    for node in run.nodes:
        for finding in node.findings:
            figure = by_check.get(finding.check)
            number = _number(finding.observed)
            profile = (finding.profile or node.profile).split("@", 1)[0]
            if figure is None or number is None or not profile:
                continue
            # One number per node and figure (the multi-node result is repeated on each node of the group).
            values.setdefault((profile, figure), {}).setdefault(node.name, number)
    out: dict[str, dict[str, Measured]] = {}
    for (profile, figure), per_node in sorted(values.items()):
        out.setdefault(profile, {})[figure] = Measured(profile, figure, statistics.median(per_node.values()),
                                                       len(per_node))
    return out


_WORDS = {"busbw_gbps": ("all_reduce busbw inside a node", "GB/s", "the profile's"),
          "multinode_busbw_gbps": ("all_reduce busbw across nodes", "GB/s", "the profile's"),
          "power_w": ("GPU power limit read from the nodes", "W", "the datasheet TDP")}


def apply_measured(sku: SkuFigures, measured: dict[str, Measured], run_id: str) -> SkuFigures:
    """``sku`` with the run's figures in place of the datasheet/profile ones, each replacement said in words."""
    changes: dict[str, float] = {}
    said = []
    for figure, item in sorted(measured.items()):
        changes[figure] = item.value
        label, unit, reference = _WORDS[figure]
        before = getattr(sku, figure)
        said.append(f"{label} {item.value:g} {unit} from run {run_id} (median of {item.nodes} node"
                    f"{'s' if item.nodes != 1 else ''}) instead of {reference} "
                    + (f"{before:g} {unit}" if before is not None else "(none)"))
    return replace(sku, measured=sku.measured + tuple(said), **changes) if changes else sku


def comparison_rows(run: RunResult, skus: dict[str, SkuFigures]) -> list[dict[str, Any]]:
    """Measured vs profile/datasheet figure, per profile of the run: what ``nvdeploy size --run`` would use."""
    labels = {"busbw_gbps": ("all_reduce busbw, one node", "GB/s"),
              "multinode_busbw_gbps": ("all_reduce busbw, across nodes", "GB/s"),
              "power_w": ("GPU power limit (datasheet: TDP)", "W")}
    rows = []
    for profile, figures in measured_figures(run).items():
        sku = skus.get(profile)
        for figure, item in figures.items():
            reference = getattr(sku, figure) if sku is not None else None
            label, unit = labels[figure]
            rows.append({"profile": profile, "figure": label, "unit": unit, "measured": round(item.value, 1),
                         "nodes": item.nodes, "reference": reference,
                         "pct": round(100.0 * item.value / reference, 1) if reference else None})
    return rows
