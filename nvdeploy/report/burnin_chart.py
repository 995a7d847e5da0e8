"""Burn-in curves for the HTML report: geometry only (numbers and names); the template draws the SVG, escaped.

One small chart per burned-in node, from the node's ``burnin_series`` summary fact (parsers/facts.py: per GPU at
most 200 rows of time, lowest SM clock, highest temperature): the SM clock over time on top, the temperature below,
a line per GPU. A GPU that the node's burnin.stability finding did not PASS is drawn thick and in red, and named
under the chart, so a throttled GPU is visible without relying on colour.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from nvdeploy.report.chart import _fmt, nice_ticks
from nvdeploy.results import NodeResult, RunResult, Verdict, node_briefs

CHECK = "burnin.stability"
FACT = "burnin_series"
WIDTH = 480
PANEL = 110.0  # height of each of the two panels
LEFT, RIGHT, TOP, GAP = 52.0, WIDTH - 12.0, 14.0, 34.0
CHART_LIMIT = 200  # burned-in nodes drawn; beyond, the page says how many were left out


@dataclass(frozen=True)
class Line:
    gpu: str
    clock: str  # SVG polyline points of the SM clock panel ("" when no sample read a clock)
    temp: str  # same for the temperature panel
    kind: str  # "ok" or "bad" (burnin.stability did not PASS on this GPU)
    verdict: str  # that finding's verdict ("" without one)


@dataclass(frozen=True)
class Panel:
    top: float
    bottom: float
    ticks: tuple[tuple[float, str], ...]
    unit: str


@dataclass(frozen=True)
class BurninChart:
    node: str
    width: int
    height: int
    left: float
    right: float
    clock: Panel
    temp: Panel
    x_ticks: tuple[tuple[float, str], ...]
    lines: tuple[Line, ...]
    bad: tuple[str, ...]  # "GPU3 FAIL", the GPUs drawn as bad
    points: int  # rows per GPU at most


def _range(values: Sequence[float]) -> tuple[float, float, list[float]]:
    """(low, high, ticks) of a panel: whole tick steps that cover every value (nice_ticks' own ticks may stop short
    of the ends, and a line must never leave its panel)."""
    low, high = min(values), max(values)
    pad = (high - low) * 0.08 or max(abs(high) * 0.05, 1.0)
    ticks = nice_ticks(low - pad, high + pad, 4)
    step = ticks[1] - ticks[0] if len(ticks) > 1 else max(abs(high) * 0.1, 1.0)
    while ticks[0] > low:
        ticks.insert(0, round(ticks[0] - step, 6))
    while ticks[-1] < high:
        ticks.append(round(ticks[-1] + step, 6))
    return ticks[0], ticks[-1], ticks


def _verdicts(node: NodeResult) -> dict[str, Verdict]:
    out: dict[str, Verdict] = {}
    for finding in node.findings:
        if finding.check == CHECK and finding.gpu is not None:
            key = str(finding.gpu)
            if key not in out or finding.verdict.severity > out[key].severity:
                out[key] = finding.verdict
    return out


def _rows(raw: Any) -> list[tuple[float, Optional[float], Optional[float]]]:
    rows = []
    for row in raw if isinstance(raw, list) else ():
        if not isinstance(row, (list, tuple)) or len(row) < 3:
            continue
        t, clock, temp = row[0], row[1], row[2]
        if not isinstance(t, (int, float)):
            continue
        rows.append((float(t), float(clock) if isinstance(clock, (int, float)) else None,
                     float(temp) if isinstance(temp, (int, float)) else None))
    return rows


def node_chart(node: NodeResult) -> Optional[BurninChart]:
    """The node's burn-in chart, or None when its facts hold no burn-in series."""
    series = node.facts.get(FACT)
    if not isinstance(series, dict) or not series:
        return None
    per_gpu = {str(gpu): _rows(raw) for gpu, raw in series.items()}
    per_gpu = {gpu: rows for gpu, rows in per_gpu.items() if rows}
    if not per_gpu:
        return None
    times = [t for rows in per_gpu.values() for t, _, _ in rows]
    clocks = [c for rows in per_gpu.values() for _, c, _ in rows if c is not None] or [0.0]
    temps = [c for rows in per_gpu.values() for _, _, c in rows if c is not None] or [0.0]
    t_end = max(times) or 1.0
    x_ticks = nice_ticks(0.0, t_end, 5)
    t_high = max(t_end, x_ticks[-1])
    clock_top = TOP
    clock_bottom = clock_top + PANEL
    temp_top = clock_bottom + GAP
    temp_bottom = temp_top + PANEL
    c_lo, c_hi, c_ticks = _range(clocks)
    k_lo, k_hi, k_ticks = _range(temps)

    def x(t: float) -> float:
        return LEFT + (RIGHT - LEFT) * t / t_high

    def y(value: float, lo: float, hi: float, top: float, bottom: float) -> float:
        return bottom - (bottom - top) * (value - lo) / ((hi - lo) or 1.0)

    verdicts = _verdicts(node)
    lines = []
    bad = []
    for gpu in sorted(per_gpu, key=lambda g: (len(g), g)):
        rows = per_gpu[gpu]
        clock = " ".join(f"{x(t):.1f},{y(c, c_lo, c_hi, clock_top, clock_bottom):.1f}" for t, c, _ in rows
                         if c is not None)
        temp = " ".join(f"{x(t):.1f},{y(k, k_lo, k_hi, temp_top, temp_bottom):.1f}" for t, _, k in rows
                        if k is not None)
        verdict = verdicts.get(gpu)
        kind = "bad" if verdict is not None and verdict is not Verdict.PASS and verdict is not Verdict.SKIP else "ok"
        if kind == "bad":
            bad.append(f"GPU{gpu} {verdict.value}")  # type: ignore[union-attr]
        lines.append(Line(gpu, clock, temp, kind, verdict.value if verdict is not None else ""))
    # The bad GPUs drawn last, over the others.
    lines.sort(key=lambda line: line.kind == "bad")
    return BurninChart(
        node.name, WIDTH, int(temp_bottom + 30), LEFT, RIGHT,
        Panel(clock_top, clock_bottom, tuple((y(v, c_lo, c_hi, clock_top, clock_bottom), _fmt(v)) for v in c_ticks),
              "SM clock MHz"),
        Panel(temp_top, temp_bottom, tuple((y(v, k_lo, k_hi, temp_top, temp_bottom), _fmt(v)) for v in k_ticks),
              "temperature C"),
        tuple((x(t), _fmt(t)) for t in x_ticks if t <= t_high), tuple(lines), tuple(bad),
        max(len(rows) for rows in per_gpu.values()))


def burnin_charts(run: RunResult, limit: int = CHART_LIMIT) -> tuple[list[BurninChart], int]:
    """(charts, nodes left out): one chart per node that ran burnin.stability, the nodes with a bad GPU first."""
    charts = []
    count = 0
    briefs = node_briefs(run.nodes)
    burned = [(i, b) for i, b in enumerate(briefs) if any(check == CHECK for check, _ in b.checks)]
    burned.sort(key=lambda item: -max(v.severity for check, v in item[1].checks if check == CHECK))
    for index, _ in burned:
        if len(charts) >= limit:
            count += 1
            continue
        chart = node_chart(run.nodes[index])
        if chart is not None:
            charts.append(chart)
    return charts, count
