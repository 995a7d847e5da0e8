"""Compare two runs: what broke, what was fixed, which nodes came or went, what drifted, what got slower.

The quarterly question after a maintenance window: against the last accepted run, which node x check is newly
FAIL/ERROR, which failing nodes are fixed, which nodes were added or are gone, which versions changed (driver,
CUDA, DCGM, NCCL, VBIOS/firmware, from node facts) and which measured values regressed beyond a tolerance
(bandwidth down more than 5%). Pure: two :class:`RunResult` in, one :class:`RunDiff` out; the CLI prints
:func:`render_diff_text`, the HTML report shows the same object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from nvdeploy.config.hostrange import fold
from nvdeploy.report.metrics import Metric, node_metrics
from nvdeploy.results import Finding, NodeResult, RunResult, Verdict, version_facts

CLUSTER = "(cluster)"
# Checks that say only that a node was not reached or not checked: such a node's other checks were not "not
# re-checked", the node was not checked at all (a failure of its own).
_NODE_LEVEL = ("system.reachable", "system.lock", "system.internal")
_BAD = (Verdict.FAIL, Verdict.ERROR)
_GOOD = (Verdict.PASS, Verdict.WARN, Verdict.SKIP)


@dataclass(frozen=True)
class CheckChange:
    """One node x check whose verdict moved between the runs (``before`` is None for a node or check that is new)."""

    node: str
    check: str
    before: Optional[str]
    after: Optional[str]
    summary: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "check": self.check, "before": self.before, "after": self.after,
                "summary": self.summary}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CheckChange:
        return cls(str(data["node"]), str(data["check"]), data.get("before"), data.get("after"),
                   str(data.get("summary", "")))


@dataclass(frozen=True)
class VersionDrift:
    """A version fact of one node that differs from the baseline (``component`` is the fact minus ``_version``)."""

    node: str
    component: str
    before: str
    after: str

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "component": self.component, "before": self.before, "after": self.after}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VersionDrift:
        return cls(str(data["node"]), str(data["component"]), str(data["before"]), str(data["after"]))


@dataclass(frozen=True)
class Regression:
    """A measured value that got worse by more than the tolerance (``change_pct`` is signed: -9.5 is 9.5% lower)."""

    node: str
    metric: str
    label: str
    unit: str
    before: float
    after: float
    change_pct: float
    floor: Optional[float] = None

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "metric": self.metric, "label": self.label, "unit": self.unit,
                "before": self.before, "after": self.after, "change_pct": self.change_pct, "floor": self.floor}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Regression:
        return cls(str(data["node"]), str(data["metric"]), str(data.get("label", data["metric"])),
                   str(data.get("unit", "")), float(data["before"]), float(data["after"]),
                   float(data["change_pct"]), data.get("floor"))


@dataclass(frozen=True)
class RunDiff:
    """Everything that changed from ``base`` to ``new``. Empty tuples mean nothing of that kind changed."""

    base_run_id: str
    new_run_id: str
    base_cluster: str
    new_cluster: str
    base_started_at: str
    new_started_at: str
    base_verdict: str
    new_verdict: str
    tolerance_pct: float
    new_failures: tuple[CheckChange, ...] = ()
    new_warnings: tuple[CheckChange, ...] = ()
    fixed_checks: tuple[CheckChange, ...] = ()
    failing_nodes: tuple[str, ...] = ()
    fixed_nodes: tuple[str, ...] = ()
    added_nodes: tuple[str, ...] = ()
    removed_nodes: tuple[str, ...] = ()
    drift: tuple[VersionDrift, ...] = ()
    regressions: tuple[Regression, ...] = ()
    base_dir: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    # Checks that ran in the baseline and not in this run (a lighter level, a narrower --limit of checks): not
    # known to be unchanged. ``after`` is None.
    not_rechecked: tuple[CheckChange, ...] = ()
    base_level: str = ""
    new_level: str = ""

    @property
    def worse(self) -> bool:
        """Something got worse: a new FAIL/ERROR, a node that now fails, or a regressed measurement."""
        return bool(self.new_failures or self.failing_nodes or self.regressions)

    @property
    def changed(self) -> bool:
        return bool(self.worse or self.new_warnings or self.fixed_checks or self.fixed_nodes or self.added_nodes
                    or self.removed_nodes or self.drift or self.not_rechecked)

    @property
    def levels_differ(self) -> bool:
        return bool(self.base_level and self.new_level and self.base_level != self.new_level)

    def level_line(self) -> str:
        """The first thing to say when the runs checked to different depths; empty when they did not."""
        if not self.levels_differ:
            return ""
        return (f"Different levels: the baseline ran {self.base_level}, this run {self.new_level}; checks it did "
                "not run are not re-checked, not unchanged.")

    def headline(self) -> str:
        """One sentence: what changed since the baseline."""
        parts = []
        if self.new_failures:
            nodes = {c.node for c in self.new_failures}
            parts.append(f"{len(self.new_failures)} new failure{_s(self.new_failures)} on {len(nodes)} "
                         f"node{_s(nodes)}")
        if self.fixed_nodes:
            parts.append(f"{len(self.fixed_nodes)} node{_s(self.fixed_nodes)} fixed")
        if self.regressions:
            parts.append(f"{len(self.regressions)} measurement{_s(self.regressions)} down more than "
                         f"{self.tolerance_pct:g}%")
        if self.added_nodes:
            parts.append(f"{len(self.added_nodes)} node{_s(self.added_nodes)} added")
        if self.removed_nodes:
            parts.append(f"{len(self.removed_nodes)} node{_s(self.removed_nodes)} gone")
        if self.drift:
            components = sorted({d.component for d in self.drift})
            parts.append(f"version changes ({', '.join(components)}) on {len({d.node for d in self.drift})} "
                         f"node{_s({d.node for d in self.drift})}")
        if self.new_warnings:
            parts.append(f"{len(self.new_warnings)} new warning{_s(self.new_warnings)}")
        if self.not_rechecked:
            checks = {c.check for c in self.not_rechecked}
            nodes = {c.node for c in self.not_rechecked}
            level = f" (level {self.base_level} -> {self.new_level})" if self.levels_differ else ""
            parts.append(f"{len(checks)} check{_s(checks)} not re-checked on {len(nodes)} node{_s(nodes)}{level}")
        if not parts:
            return f"No change since baseline {self.base_run_id}."
        return f"Since baseline {self.base_run_id}: " + "; ".join(parts) + "."

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "base_run_id": self.base_run_id, "new_run_id": self.new_run_id, "base_cluster": self.base_cluster,
            "new_cluster": self.new_cluster, "base_started_at": self.base_started_at,
            "new_started_at": self.new_started_at, "base_verdict": self.base_verdict,
            "new_verdict": self.new_verdict, "tolerance_pct": self.tolerance_pct, "base_dir": self.base_dir,
            "headline": self.headline(), "worse": self.worse,
            "new_failures": [c.to_dict() for c in self.new_failures],
            "new_warnings": [c.to_dict() for c in self.new_warnings],
            "fixed_checks": [c.to_dict() for c in self.fixed_checks],
            "failing_nodes": list(self.failing_nodes), "fixed_nodes": list(self.fixed_nodes),
            "added_nodes": list(self.added_nodes), "removed_nodes": list(self.removed_nodes),
            "drift": [d.to_dict() for d in self.drift], "regressions": [r.to_dict() for r in self.regressions],
            "not_rechecked": [c.to_dict() for c in self.not_rechecked], "base_level": self.base_level,
            "new_level": self.new_level,
        }
        if self.extra:
            data["extra"] = dict(self.extra)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunDiff:
        return cls(
            base_run_id=str(data["base_run_id"]), new_run_id=str(data["new_run_id"]),
            base_cluster=str(data.get("base_cluster", "")), new_cluster=str(data.get("new_cluster", "")),
            base_started_at=str(data.get("base_started_at", "")), new_started_at=str(data.get("new_started_at", "")),
            base_verdict=str(data.get("base_verdict", "")), new_verdict=str(data.get("new_verdict", "")),
            tolerance_pct=float(data.get("tolerance_pct", 5.0)),
            new_failures=tuple(CheckChange.from_dict(c) for c in data.get("new_failures", [])),
            new_warnings=tuple(CheckChange.from_dict(c) for c in data.get("new_warnings", [])),
            fixed_checks=tuple(CheckChange.from_dict(c) for c in data.get("fixed_checks", [])),
            failing_nodes=tuple(str(n) for n in data.get("failing_nodes", [])),
            fixed_nodes=tuple(str(n) for n in data.get("fixed_nodes", [])),
            added_nodes=tuple(str(n) for n in data.get("added_nodes", [])),
            removed_nodes=tuple(str(n) for n in data.get("removed_nodes", [])),
            drift=tuple(VersionDrift.from_dict(d) for d in data.get("drift", [])),
            regressions=tuple(Regression.from_dict(r) for r in data.get("regressions", [])),
            base_dir=str(data.get("base_dir", "")), extra=dict(data.get("extra", {})),
            not_rechecked=tuple(CheckChange.from_dict(c) for c in data.get("not_rechecked", [])),
            base_level=str(data.get("base_level", "")), new_level=str(data.get("new_level", "")),
        )


def _s(items: Any) -> str:
    return "" if len(items) == 1 else "s"


def _by_check(findings: tuple[Finding, ...]) -> dict[str, tuple[Verdict, str]]:
    """check -> (worst verdict, the summary of a finding with that verdict)."""
    grouped: dict[str, list[Finding]] = {}
    for finding in findings:
        grouped.setdefault(finding.check, []).append(finding)
    out = {}
    for check, group in grouped.items():
        worst = Verdict.worst(f.verdict for f in group)
        out[check] = (worst, next(f.display_summary for f in group if f.verdict is worst))
    return out


def _check_changes(name: str, base: Optional[tuple[Finding, ...]], new: tuple[Finding, ...]
                   ) -> tuple[list[CheckChange], list[CheckChange], list[CheckChange]]:
    before = _by_check(base) if base is not None else {}
    after = _by_check(new)
    failures, warnings, fixed = [], [], []
    for check, (verdict, summary) in after.items():
        old = before.get(check, (None, ""))[0]
        if verdict in _BAD and old not in _BAD:
            failures.append(CheckChange(name, check, old.value if old else None, verdict.value, summary))
        elif verdict is Verdict.WARN and old not in (Verdict.WARN, *_BAD):
            warnings.append(CheckChange(name, check, old.value if old else None, verdict.value, summary))
    for check, (old, summary) in before.items():
        now = after.get(check, (None, ""))
        if old in _BAD and now[0] in _GOOD:
            fixed.append(CheckChange(name, check, old.value, now[0].value, now[1] or summary))
    return failures, warnings, fixed


def _not_rechecked(name: str, base: tuple[Finding, ...], new: tuple[Finding, ...]) -> list[CheckChange]:
    """Checks with a verdict in the baseline and none now, on a node this run did check."""
    if all(f.check in _NODE_LEVEL for f in new) and name != CLUSTER:
        return []  # not reached now: that is the node's own failure, not a check left out
    after = {f.check for f in new}
    return [CheckChange(name, check, verdict.value, None, summary)
            for check, (verdict, summary) in _by_check(base).items()
            if check not in after and check not in _NODE_LEVEL]


def _regressions(base: NodeResult, new: NodeResult, tolerance_pct: float) -> list[Regression]:
    before: dict[str, Metric] = {m.key: m for m in node_metrics(base)}
    found = []
    for metric in node_metrics(new):
        old = before.get(metric.key)
        if old is None or old.unit != metric.unit or old.value == 0:
            continue
        change = (metric.value - old.value) / abs(old.value) * 100.0
        worse = change < -tolerance_pct if metric.higher_is_better else change > tolerance_pct
        if worse:
            found.append(Regression(new.name, metric.key, metric.label, metric.unit, old.value, metric.value,
                                    round(change, 2), metric.floor))
    return found


def compare_runs(base: RunResult, new: RunResult, tolerance_pct: float = 5.0) -> RunDiff:
    """What changed from ``base`` (the accepted baseline) to ``new``.

    Args:
        base: the earlier, accepted run.
        new: the run being judged.
        tolerance_pct: how much a measured value may get worse (in percent of the baseline value) before it
            is a regression: bandwidth 5% lower, latency 5% higher.

    Returns:
        A :class:`RunDiff`; ``diff.worse`` says whether anything got worse.
    """
    base_nodes = {n.name: n for n in base.nodes}
    new_nodes = {n.name: n for n in new.nodes}
    failures: list[CheckChange] = []
    warnings: list[CheckChange] = []
    fixed: list[CheckChange] = []
    drift: list[VersionDrift] = []
    regressions: list[Regression] = []
    failing_nodes, fixed_nodes = [], []
    skipped: list[CheckChange] = []
    for name, node in new_nodes.items():
        old = base_nodes.get(name)
        f, w, x = _check_changes(name, old.findings if old else None, node.findings)
        failures += f
        warnings += w
        fixed += x
        if old is None:
            continue
        skipped += _not_rechecked(name, old.findings, node.findings)
        if node.verdict in _BAD and old.verdict not in _BAD:
            failing_nodes.append(name)
        elif old.verdict in _BAD and node.verdict in _GOOD:
            fixed_nodes.append(name)
        old_versions = version_facts(old)
        for component, version in version_facts(node).items():
            previous = old_versions.get(component)
            if previous is not None and previous != version:
                drift.append(VersionDrift(name, component, previous, version))
        regressions += _regressions(old, node, tolerance_pct)
    f, w, x = _check_changes(CLUSTER, base.cluster_findings, new.cluster_findings)
    failures += f
    warnings += w
    fixed += x
    skipped += _not_rechecked(CLUSTER, base.cluster_findings, new.cluster_findings)
    return RunDiff(
        base_run_id=base.run_id, new_run_id=new.run_id, base_cluster=base.cluster, new_cluster=new.cluster,
        base_started_at=base.started_at, new_started_at=new.started_at, base_verdict=base.verdict.value,
        new_verdict=new.verdict.value, tolerance_pct=float(tolerance_pct),
        new_failures=tuple(failures), new_warnings=tuple(warnings), fixed_checks=tuple(fixed),
        failing_nodes=tuple(failing_nodes), fixed_nodes=tuple(fixed_nodes),
        added_nodes=tuple(n for n in new_nodes if n not in base_nodes),
        removed_nodes=tuple(n for n in base_nodes if n not in new_nodes),
        drift=tuple(drift), regressions=tuple(sorted(regressions, key=lambda r: r.change_pct if r.unit not in
                                                      ("us", "usec", "µs") else -r.change_pct)),
        not_rechecked=tuple(skipped), base_level=base.level, new_level=new.level,
    )


def group_changes(changes: tuple[CheckChange, ...]) -> list[dict[str, Any]]:
    """Changes with the same check and the same move folded into one entry with a host range."""
    groups: dict[tuple[str, Optional[str], Optional[str]], list[CheckChange]] = {}
    for change in changes:
        groups.setdefault((change.check, change.before, change.after), []).append(change)
    out = []
    for (check, before, after), items in groups.items():
        names = [c.node for c in items]
        out.append({"check": check, "before": before or "not checked", "after": after or "not checked",
                    "count": len(names),
                    "hosts": fold(names), "summary": items[0].summary, "nodes": names})
    out.sort(key=lambda g: (-Verdict(g["after"]).severity if g["after"] in Verdict.__members__ else 0,
                            g["check"]))
    return out


def group_drift(drift: tuple[VersionDrift, ...]) -> list[dict[str, Any]]:
    """Drift folded by (component, before, after): ``driver 535.161.08 -> 550.90.07 on gpu[001-016]``."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for item in drift:
        groups.setdefault((item.component, item.before, item.after), []).append(item.node)
    return [{"component": c, "before": b, "after": a, "hosts": fold(names), "count": len(names)}
            for (c, b, a), names in sorted(groups.items())]


def _short(text: str, width: int = 140) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "\u2026"


def _fmt(value: float) -> str:
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"


def render_diff_text(diff: RunDiff, max_lines: int = 50) -> str:
    """The comparison as terminal text: one block per kind of change, nodes folded into host ranges."""
    lines = [diff.level_line()] if diff.levels_differ else []
    lines += [f"baseline {diff.base_run_id} ({diff.base_cluster}, {diff.base_started_at or '?'}, "
              f"{diff.base_verdict}) -> {diff.new_run_id} ({diff.new_cluster}, {diff.new_started_at or '?'}, "
              f"{diff.new_verdict})", diff.headline()]

    def block(title: str, rows: list[str]) -> None:
        if not rows:
            return
        lines.append("")
        lines.append(title)
        shown = rows[:max_lines]
        lines.extend(f"  {row}" for row in shown)
        if len(rows) > len(shown):
            lines.append(f"  ... and {len(rows) - len(shown)} more")

    block(f"New failures ({len(diff.new_failures)}):",
          [f"{g['after']:5} {g['hosts']}  {g['check']} (was {g['before']}): {_short(g['summary'])}"
           for g in group_changes(diff.new_failures)])
    block(f"Measurements worse by more than {diff.tolerance_pct:g}% ({len(diff.regressions)}):",
          [f"{r.node}  {r.label}: {_fmt(r.before)} -> {_fmt(r.after)} {r.unit} ({r.change_pct:+.1f}%)"
           + (f", floor {_fmt(r.floor)}" if r.floor is not None else "") for r in diff.regressions])
    block(f"Fixed nodes ({len(diff.fixed_nodes)}):", [fold(diff.fixed_nodes)] if diff.fixed_nodes else [])
    block(f"Fixed checks ({len(diff.fixed_checks)}):",
          [f"{g['after']:5} {g['hosts']}  {g['check']} (was {g['before']})" for g in group_changes(diff.fixed_checks)])
    block(f"Nodes added ({len(diff.added_nodes)}):", [fold(diff.added_nodes)] if diff.added_nodes else [])
    block(f"Nodes gone ({len(diff.removed_nodes)}):", [fold(diff.removed_nodes)] if diff.removed_nodes else [])
    block(f"Version drift ({len({d.node for d in diff.drift})} nodes):",
          [f"{g['component']}: {g['before']} -> {g['after']}  {g['hosts']}" for g in group_drift(diff.drift)])
    block(f"New warnings ({len(diff.new_warnings)}):",
          [f"WARN  {g['hosts']}  {g['check']} (was {g['before']}): {_short(g['summary'])}"
           for g in group_changes(diff.new_warnings)])
    block(f"Not re-checked: ran in the baseline, not in this run ({len(diff.not_rechecked)}):",
          [f"{g['hosts']}  {g['check']} (was {g['before']})" for g in group_changes(diff.not_rechecked)])
    return "\n".join(lines) + "\n"
