"""``fleet.drift`` (cluster stage, with ``fleet.performance`` and ``validate --baseline RUN_DIR``): a node whose
measured figure fell by more than the profile's ``fleet.drift_pct`` since the accepted baseline run is WARN, even
when it is still inside its peers' band: the node is degrading.

fleet.performance compares a node with its peers of today; a node that was 3% above the median and is now 2% below
passes it, though it lost 5% of itself. Its own earlier figure is the better reference for that, since a node
repeats its own figure much more closely than the fleet spreads. :func:`judge_drift` is the pure rule over one
figure's samples; :func:`evaluate_drift` gathers them from this run's and the baseline's node facts.
"""

from __future__ import annotations

import textwrap
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from nvdeploy.checks.fleet import FIGURES, Figure, Sample, samples_of
from nvdeploy.checks.registry import CLUSTER_CHECKS
from nvdeploy.config.hostrange import fold
from nvdeploy.results import Finding, NodeResult, Remediation, RunResult, Verdict

CHECK_ID = "fleet.drift"
# 5%: above a node's own run-to-run repeatability at the sizes these figures are measured at (nccl-tests at 8 GiB
# and DCGM's GEMM repeat within about 1-2% on one node), so a fall of more than 5% is not noise; and above
# fleet.performance's 3.5% WARN, so a node is not named twice for the same small step. Profiles may set less.
DEFAULT_DRIFT_PCT = 5.0
SHOWN = 20
_HINT = ("compare what changed since (driver, firmware, cooling, cables: nvdeploy diff), check its clocks and "
         "throttling (clocks.throttle), then re-test")


@dataclass(frozen=True)
class Drift:
    """One sample (node, GPU) compared with the same sample of the baseline run."""

    sample: Sample
    baseline: float
    pct_fall: float  # positive: fell; negative: rose


def measured_figures(*node_sets: Sequence[NodeResult]) -> list[Figure]:
    """fleet.performance's figures, a per-path one (storage) as one figure per path some node measured."""
    out: list[Figure] = []
    for figure in FIGURES:
        # A temperature follows the room (the season, the rack's inlet) as much as the GPU between two windows:
        # compared with its peers of the same run only.
        if not getattr(figure, "higher_is_better", True):
            continue
        # getattr: per-path figures are newer than the Figure type this module was first written against.
        if getattr(figure, "per_path", False):
            from nvdeploy.checks.fleet import expand  # type: ignore[attr-defined]

            out.extend(expand(figure, *node_sets))
        else:
            out.append(figure)
    return out


def drift_pct_for(section: Optional[Mapping[str, Any]], figure: str) -> Optional[float]:
    """The drift threshold of ``figure`` from a profile's ``fleet`` section (per figure over the section's own);
    None when the profile turns the figure off."""
    section = section or {}
    per_figure = (section.get("figures") or {}).get(figure) or {}
    if per_figure.get("enabled") is False:
        return None
    value = per_figure.get("drift_pct", section.get("drift_pct", DEFAULT_DRIFT_PCT))
    return float(value)


def judge_drift(samples: Sequence[Sample], baseline: Sequence[Sample], drift_pct: float) -> tuple[list[Drift],
                                                                                                list[Drift]]:
    """(compared, fallen): each sample matched with the baseline's sample of the same node and GPU; fallen are those
    more than ``drift_pct``% below it (higher is better), worst first. A baseline figure <= 0 compares nothing."""
    before = {(s.node, s.gpu): s.value for s in baseline}
    compared = []
    for sample in samples:
        old = before.get((sample.node, sample.gpu))
        if old is None or old <= 0:
            continue
        # Rounded so that a fall exactly at the threshold is judged at it, not a float's width off.
        compared.append(Drift(sample, old, round((old - sample.value) / old * 100, 6)))
    fallen = sorted((d for d in compared if d.pct_fall > drift_pct),
                    key=lambda d: (-d.pct_fall, d.sample.node, d.sample.gpu or 0))
    return compared, fallen


def _node_finding(figure: Figure, profile: str, drift: Drift, drift_pct: float, run_id: str) -> Finding:
    sample = drift.sample
    where = f"GPU{sample.gpu}: " if sample.gpu is not None else ""
    floor = round(drift.baseline * (1 - drift_pct / 100), 3)
    return Finding(
        CHECK_ID, Verdict.WARN,
        f"{where}{figure.what} {sample.value:g} {figure.unit} fell {drift.pct_fall:.1f}% since the accepted run "
        f"{run_id} ({drift.baseline:g} {figure.unit}), more than fleet.drift_pct {drift_pct:g}%: the node is "
        f"degrading, even where it is still within its peers' band (fleet.performance); {_HINT}",
        node=sample.node, observed=f"{sample.value:g} {figure.unit}",
        expected=f">= {floor:g} {figure.unit} ({drift_pct:g}% below {drift.baseline:g})", gpu=sample.gpu,
        remediation=Remediation.INVESTIGATE, profile=profile)


def _cluster_finding(figure: Figure, profile: str, compared: Sequence[Drift], fallen: Sequence[Drift],
                     drift_pct: float, run_id: str) -> Finding:
    observed: dict[str, Any] = {"figure": figure.id, "profile": profile, "baseline": run_id,
                                "compared": len(compared)}
    nodes = len({d.sample.node for d in compared})
    head = f"{figure.what} on {profile} against the accepted run {run_id}"
    if not compared:
        return Finding(CHECK_ID, Verdict.SKIP, f"{head}: no node measured it in both runs: not judged",
                       observed=observed, unit=figure.unit, profile=profile)
    observed["fallen"] = [{"node": d.sample.node, "gpu": d.sample.gpu, "value": d.sample.value,
                           "baseline": d.baseline, "pct_fall": round(d.pct_fall, 2)} for d in fallen]
    worst = max(compared, key=lambda d: d.pct_fall)
    stats = (f"{nodes} node{'s' if nodes != 1 else ''} compared ({len(compared)} samples), largest fall "
             f"{worst.pct_fall:.1f}% ({worst.sample.label})")
    expected = f"no fall of more than {drift_pct:g}%"
    if not fallen:
        return Finding(CHECK_ID, Verdict.PASS, f"{head}: {stats}; none fell more than {drift_pct:g}%",
                       observed=observed, expected=expected, unit=figure.unit, profile=profile)
    shown = "; ".join(f"{d.sample.label} {d.baseline:g} -> {d.sample.value:g} {figure.unit} (-{d.pct_fall:.1f}%)"
                      for d in fallen[:SHOWN])
    more = len(fallen) - SHOWN
    return Finding(CHECK_ID, Verdict.WARN, f"{head}: {stats}; {len(fallen)} fell more than {drift_pct:g}% "
                   f"({fold(sorted({d.sample.node for d in fallen}))}): {shown}" + (f"; and {more} more" if more > 0
                                                                                   else ""),
                   observed=observed, expected=expected, unit=figure.unit, remediation=Remediation.INVESTIGATE,
                   profile=profile)


def _profile_name(stamp: str) -> str:
    return stamp.split("@", 1)[0]


def evaluate_drift(nodes: Sequence[NodeResult], rules: Optional[Mapping[str, Mapping[str, Any]]],
                   baseline: Optional[RunResult]) -> tuple[list[NodeResult], list[Finding]]:
    """The fleet.drift findings: per figure and profile a cluster finding, and a WARN on each fallen node (by GPU).
    Nothing without a baseline run. A node is compared with its own figure in the baseline under the same profile
    name (a new profile version compares alike; another SKU does not)."""
    if baseline is None:
        return list(nodes), []
    rules = rules or {}
    per_node: dict[str, list[Finding]] = defaultdict(list)
    cluster: list[Finding] = []
    base_profile = {n.name: _profile_name(n.profile) for n in baseline.nodes if n.profile}
    for figure in measured_figures(nodes):
        before = [s for group in samples_of(figure, list(baseline.nodes)).values() for s in group]
        for profile, samples in sorted(samples_of(figure, nodes).items()):
            drift_pct = drift_pct_for(rules.get(profile), figure.id)
            if drift_pct is None:
                continue
            same = [s for s in before if base_profile.get(s.node) == _profile_name(profile)]
            compared, fallen = judge_drift(samples, same, drift_pct)
            cluster.append(_cluster_finding(figure, profile, compared, fallen, drift_pct, baseline.run_id))
            for drift in fallen:
                per_node[drift.sample.node].append(_node_finding(figure, profile, drift, drift_pct,
                                                                 baseline.run_id))
    updated = [n.with_findings(per_node[n.name]) if n.name in per_node else n for n in nodes]
    return updated, cluster


def _doc() -> str:
    paragraphs = (
        "Judges each measured figure of a node against the same node's figure in the accepted baseline run "
        "(``validate --baseline RUN_DIR``): the figures of fleet.performance ("
        + ", ".join(f"``{f.id}``" for f in FIGURES) + "), per GPU for a per-GPU figure. Runs where "
        "fleet.performance runs, when a baseline run is given; nothing without one.",
        f"Rule (higher is better): WARN (INVESTIGATE) when the figure fell by more than ``fleet.drift_pct`` "
        f"(default {DEFAULT_DRIFT_PCT:g}%) since the baseline, even when it is still within its peers' band: the "
        "node is degrading. Only nodes of the same profile name in both runs are compared; a node or GPU missing "
        "from either run is left out; no node in common is SKIP, never PASS.",
        "Findings: on each fallen node (by GPU) the figure, its baseline value and the fall in %; per figure and "
        "profile a cluster finding with how many were compared and the largest fall. ``nvdeploy history --node N "
        "--figure F`` shows a node's figure over every recorded run.",
        f"Threshold: the profile's ``fleet`` section, ``drift_pct`` or per figure "
        f"(``fleet: {{drift_pct: 4, figures: {{dcgm_gflops: {{drift_pct: 3}}}}}}``). {DEFAULT_DRIFT_PCT:g}% is "
        "above a node's own run-to-run repeatability (nccl-tests at 8 GiB and DCGM's GEMM repeat within about "
        "1-2% on one node) and above fleet.performance's 3.5% WARN.",
    )
    return "\n\n".join(textwrap.fill(p, 116, break_long_words=False, break_on_hyphens=False) for p in paragraphs)


CLUSTER_CHECKS[CHECK_ID] = _doc()
