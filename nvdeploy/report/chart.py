"""Bandwidth charts for the HTML report: geometry only (numbers and names); the template draws the SVG, escaped.

One chart per bandwidth metric (NCCL bus bandwidth, H2D, ...). Per node the worst GPU counts. Up to
``BAR_LIMIT`` nodes it is a bar per node, sorted worst first, with the names written; above that a rank plot
(every node a dot, sorted by value) where the outliers are drawn larger and named. An outlier is a node below
the profile floor, or one below its peers: named by the run's fleet.performance finding for that figure where the
run judged it (the chart and the findings then agree), else more than ``LOW_PCT`` percent below the median.
Outliers are also listed as text under the chart, so nothing depends on colour.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass, replace
from typing import Optional

from nvdeploy.config.hostrange import fold
from nvdeploy.report.metrics import Metric, run_metrics
from nvdeploy.results import RunResult

BAR_LIMIT = 40
LOW_PCT = 5.0
LABELLED_OUTLIERS = 12
WIDTH = 960


@dataclass(frozen=True)
class Point:
    node: str
    value: float
    x: float
    y: float
    w: float
    kind: str  # "ok", "low" (well below its peers) or "floor" (below the floor)
    label: bool
    floor: Optional[float]
    label_x: float = 0.0
    label_y: float = 0.0


@dataclass(frozen=True)
class Chart:
    key: str
    title: str
    unit: str
    layout: str  # "bars" or "rank"
    width: int
    height: int
    plot_left: float
    plot_right: float
    plot_top: float
    plot_bottom: float
    points: tuple[Point, ...]
    floor: Optional[float]
    floor_pos: Optional[float]
    floors_differ: bool
    median: float
    median_pos: float
    ticks: tuple[tuple[float, str], ...]
    below_floor: tuple[str, ...]
    low: tuple[str, ...]
    minimum: float
    maximum: float
    per_gpu: bool

    @property
    def below_floor_hosts(self) -> str:
        return fold(self.below_floor)

    @property
    def low_hosts(self) -> str:
        return fold(self.low)


def _family(metric: Metric) -> str:
    return metric.key.split("/gpu", 1)[0].split("#", 1)[0]


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high]."""
    if high <= low:
        high = low + 1.0
    raw = (high - low) / max(count, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    start = math.floor(low / step) * step
    ticks = []
    value = start
    while value <= high + step * 0.001:
        if value >= low - step * 0.001:
            ticks.append(round(value, 6))
        value += step
    return ticks


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


# The chart families of each figure fleet.performance judges (its cluster findings' ``observed.figure``).
FLEET_FAMILIES = {"nccl_busbw": ("nccl.all_reduce", "fact:nccl_all_reduce_busbw_gbps")}


def fleet_outliers(run: RunResult) -> dict[str, set[str]]:
    """Chart family -> the nodes fleet.performance named below their peers, for the figures it judged (a SKIP
    judged nothing: those charts keep the ``LOW_PCT`` rule)."""
    out: dict[str, set[str]] = {}
    for finding in run.cluster_findings:
        observed = finding.observed if isinstance(finding.observed, dict) else {}
        if finding.check != "fleet.performance" or finding.verdict.value == "SKIP" or "outliers" not in observed:
            continue
        named = {str(o.get("node")) for o in observed.get("outliers") or () if isinstance(o, dict)}
        for family in FLEET_FAMILIES.get(str(observed.get("figure")), ()):
            out.setdefault(family, set()).update(named)
    return out


def _chart(key: str, metrics: list[Metric], fleet_low: Optional[set[str]] = None) -> Optional[Chart]:
    unit = metrics[0].unit
    per_node: dict[str, Metric] = {}
    per_gpu = False
    for metric in metrics:
        if metric.unit != unit:
            continue
        per_gpu = per_gpu or metric.gpu is not None
        current = per_node.get(metric.node)
        if current is None or metric.value < current.value:
            per_node[metric.node] = metric
    if not per_node:
        return None
    values = [m.value for m in per_node.values()]
    median = statistics.median(values)
    floors = Counter(m.floor for m in per_node.values() if m.floor is not None)
    floor = floors.most_common(1)[0][0] if floors else None

    def kind(metric: Metric) -> str:
        if metric.floor is not None and metric.value < metric.floor:
            return "floor"
        if fleet_low is not None:
            return "low" if metric.node in fleet_low else "ok"
        if median > 0 and metric.value < median * (1 - LOW_PCT / 100.0):
            return "low"
        return "ok"

    ordered = sorted(per_node.values(), key=lambda m: (m.value, m.node))
    kinds = {m.node: kind(m) for m in ordered}
    outliers = [m.node for m in ordered if kinds[m.node] != "ok"]
    labelled = set(outliers[:LABELLED_OUTLIERS])
    title = metrics[0].label.split(" GPU", 1)[0] if metrics[0].source == "finding" else metrics[0].label
    points: list[Point] = []
    if len(ordered) <= BAR_LIMIT:
        layout, left, right, top, row = "bars", 150.0, WIDTH - 150.0, 28.0, 20.0
        height = int(top + row * len(ordered) + 34)
        high = max(values + ([floor] if floor is not None else [])) * 1.05 or 1.0
        ticks = nice_ticks(0.0, high, 6)
        high = max(high, ticks[-1])

        def xpos(value: float) -> float:
            return left + (right - left) * max(value, 0.0) / high

        for i, m in enumerate(ordered):
            points.append(Point(m.node, m.value, left, top + i * row + 3, xpos(m.value) - left, kinds[m.node], True,
                                m.floor))
        floor_pos = xpos(floor) if floor is not None else None
        median_pos = xpos(median)
        tick_marks = tuple((xpos(t), _fmt(t)) for t in ticks)
        bottom = top + row * len(ordered)
    else:
        layout, left, right, top, bottom = "rank", 70.0, WIDTH - 20.0, 20.0, 230.0
        height = 270
        candidates = values + ([floor] if floor is not None else [])
        low_v, high_v = min(candidates), max(candidates)
        pad = (high_v - low_v) * 0.08 or max(abs(high_v) * 0.05, 1.0)
        ticks = nice_ticks(low_v - pad, high_v + pad)
        lo, hi = ticks[0], ticks[-1]

        def ypos(value: float) -> float:
            return bottom - (bottom - top) * (value - lo) / ((hi - lo) or 1.0)

        span = max(len(ordered) - 1, 1)
        for i, m in enumerate(ordered):
            points.append(Point(m.node, m.value, left + (right - left) * i / span, ypos(m.value), 0.0,
                                kinds[m.node], m.node in labelled, m.floor))
        points = _place_labels(points, left, right, top, bottom)
        floor_pos = ypos(floor) if floor is not None else None
        median_pos = ypos(median)
        tick_marks = tuple((ypos(t), _fmt(t)) for t in ticks)
    return Chart(key, title, unit, layout, WIDTH, height, left, right, top, bottom, tuple(points), floor, floor_pos,
                 len(floors) > 1, median, median_pos, tick_marks,
                 tuple(sorted(m for m in outliers if kinds[m] == "floor")),
                 tuple(sorted(m for m in outliers if kinds[m] == "low")), min(values), max(values), per_gpu)


def _place_labels(points: list[Point], left: float, right: float, top: float, bottom: float,
                  gap: float = 12.0) -> list[Point]:
    """Labels of the named outliers in one column beside them, at least ``gap`` apart, with leader lines."""
    named = sorted((p for p in points if p.label), key=lambda p: p.y)
    if not named:
        return points
    column = min(max(p.x for p in named) + 60.0, right - 90.0)
    placed: dict[str, float] = {}
    y = top + 4.0
    for point in named:
        y = max(y, point.y)
        placed[point.node] = y
        y += gap
    overflow = y - gap - (bottom - 2.0)
    if overflow > 0:  # shift the whole column up, not below the top
        shift = min(overflow, placed[named[0].node] - top - 4.0)
        placed = {name: pos - shift for name, pos in placed.items()}
    return [replace(p, label_x=column, label_y=placed[p.node]) if p.node in placed else p for p in points]


def bandwidth_charts(run: RunResult) -> list[Chart]:
    """One chart per bandwidth metric of the run (findings in GB/s and bandwidth facts), in first-seen order."""
    families: dict[str, list[Metric]] = {}
    for metrics in run_metrics(run.nodes).values():
        if metrics and metrics[0].is_bandwidth:
            families.setdefault(_family(metrics[0]), []).extend(metrics)
    judged = fleet_outliers(run)
    charts = [_chart(key, metrics, judged.get(key)) for key, metrics in families.items()]
    return [c for c in charts if c is not None]
