"""The optimize phase: validate (the playbook's ``revalidate`` level), tune (``playbooks/optimize.yaml``), validate
again, and show the measured figures before and after.

Every change is recorded with its value before and after (``phases[].nodes[].steps[].changes``). The comparison
(``phases[].comparison``) lists, per node, each finding whose verdict or observed value moved between the two
validations, and every measured figure (GB/s, W, ...), so a tuning that changed nothing measurable shows as such.
With ``--dry-run`` the first validation runs (it only reads), the tuning is planned but not applied and there is no
second validation.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from nvdeploy.checks import CHECKS
from nvdeploy.checks.cluster import evaluate_cluster
from nvdeploy.checks.registry import CLUSTER_CHECKS
from nvdeploy.config.inventory import Host, Inventory
from nvdeploy.config.levels import load_levels
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.install import PhaseOutcome, open_run, phase_run_result
from nvdeploy.phases.plan_text import write_plan
from nvdeploy.phases.playbook import Playbook, load_playbook, plan_hosts
from nvdeploy.phases.rollout import PhaseOptions, PhaseRecorder, PhaseResult, run_phase
from nvdeploy.report import write_reports
from nvdeploy.results import Finding, NodeResult, Verdict, cluster_verdict, exit_code_for
from nvdeploy.runner.engine import EngineOptions, NodeRunner, run_hosts
from nvdeploy.runner.record import RunRecorder

MEASURED_UNITS = frozenset({"GB/s", "GiB/s", "Gb/s", "MB/s", "W", "MHz", "C", "us", "%"})


def validate_hosts(hosts: Sequence[Host], catalog: ProfileCatalog, engine: EngineOptions, recorder: RunRecorder,
                   level: str, progress: Optional[Callable[[NodeResult], None]] = None
                   ) -> tuple[tuple[NodeResult, ...], tuple[Finding, ...], Optional[int]]:
    """The validate pipeline over ``hosts`` into an existing run folder: (nodes, cluster findings, interrupt code)."""
    options = replace(engine, checks=load_levels(known_checks=(*CHECKS, *CLUSTER_CHECKS))[level])
    started = time.monotonic()
    runner = NodeRunner(catalog, options, recorder, started + options.deadline_s if options.deadline_s else None)

    def on_result(node: NodeResult) -> None:
        recorder.node_done(node)
        if progress is not None:
            progress(node)

    results, interrupt = run_hosts(list(hosts), runner, options.forks, on_result)
    nodes, cluster = evaluate_cluster([results[h.name] for h in hosts])
    return tuple(nodes), tuple(cluster), interrupt.exit_code if interrupt else None


def _figure(finding: Finding) -> Optional[str]:
    if finding.observed is None or isinstance(finding.observed, (dict, list)):
        return None
    return f"{finding.observed}{(' ' + finding.unit) if finding.unit else ''}"


def _worst(findings: Sequence[Finding]) -> dict[str, Finding]:
    """check -> its most severe finding (a per-GPU WARN stands for the check; a PASS has no GPU)."""
    out: dict[str, Finding] = {}
    for finding in findings:
        if finding.check == "system.reachable":
            continue
        known = out.get(finding.check)
        if known is None or finding.verdict.severity > known.verdict.severity:
            out[finding.check] = finding
    return out


def _pairs(old: NodeResult, new: NodeResult) -> list[tuple[str, Finding, Finding]]:
    before, after = _worst(old.findings), _worst(new.findings)
    return [(check, finding, after[check]) for check, finding in before.items() if check in after]


def compare_validations(before: Sequence[NodeResult], after: Sequence[NodeResult]) -> dict[str, Any]:
    """Per node: the findings whose verdict or observed value differ, and every measured figure, before/after."""
    after_by = {n.name: n for n in after}
    rows = []
    for old in before:
        new = after_by.get(old.name)
        if new is None:
            continue
        for check, finding, later in _pairs(old, new):
            measured = finding.unit in MEASURED_UNITS and isinstance(finding.observed, (int, float))
            moved = finding.verdict is not later.verdict or _figure(finding) != _figure(later)
            if moved or measured:
                rows.append({"node": old.name, "check": check, "gpu": finding.gpu if finding.gpu == later.gpu else None,
                             "before": {"verdict": finding.verdict.value, "observed": _figure(finding),
                                        "summary": finding.summary},
                             "after": {"verdict": later.verdict.value, "observed": _figure(later),
                                       "summary": later.summary},
                             "changed": moved})
    before_verdict = cluster_verdict([n.verdict for n in before]).value if before else None
    after_verdict = cluster_verdict([n.verdict for n in after]).value if after else None
    def severity(row: dict[str, Any], when: str) -> int:
        return Verdict(row[when]["verdict"]).severity

    improved = sum(1 for r in rows if severity(r, "after") < severity(r, "before"))
    worse = sum(1 for r in rows if severity(r, "after") > severity(r, "before"))
    return {"before_verdict": before_verdict, "after_verdict": after_verdict, "rows": rows,
            "summary": f"validation {before_verdict} -> {after_verdict}: {improved} finding(s) better, {worse} worse, "
                       f"{sum(1 for r in rows if r['changed'])} changed, "
                       f"{sum(1 for r in rows if not r['changed'])} measured figure(s) unchanged"}


def tune(inventory_hosts: Sequence[Host], catalog: ProfileCatalog, options: PhaseOptions, recorder: RunRecorder,
         playbook: Playbook, plans: dict[str, Any], before: Optional[tuple[NodeResult, ...]],
         progress: Optional[Callable[[NodeResult], None]] = None
         ) -> tuple[PhaseResult, Optional[tuple[NodeResult, ...]], tuple[Finding, ...], Optional[int]]:
    """Tune ``inventory_hosts`` (all of them planned in ``plans``), then re-validate the tuned ones.

    Returns (tuning result with the comparison in ``extra``, validation after or None, its cluster findings,
    interrupt exit code or None)."""
    level = playbook.revalidate or "quick"
    result = run_phase("optimize", playbook, plans, inventory_hosts, catalog, options,
                       PhaseRecorder(recorder, "optimize"), progress)
    if result.interrupted or options.dry_run:
        return result, None, (), result.interrupt_code if result.interrupted else None
    tuned = [h for h in inventory_hosts if h.name not in result.failed_nodes]
    after, cluster, interrupted = validate_hosts(tuned, catalog, options.engine,
                                                 PhaseRecorder(recorder, "validate-after"), level, progress)
    extra: dict[str, Any] = {"revalidate_level": level}
    if before is not None:
        extra["comparison"] = compare_validations([n for n in before if n.name in {h.name for h in tuned}], after)
    result = replace(result, extra=extra)
    return result, after, cluster, interrupted


def validation_phase(label: str, level: str, nodes: Sequence[NodeResult], cluster: Sequence[Finding]) -> dict[str, Any]:
    """A validation as a ``phases`` entry (the full findings are in the run's nodes or the journal)."""
    verdict = cluster_verdict([n.verdict for n in nodes] + [f.verdict for f in cluster]).value if nodes else "-"
    return {"phase": label, "level": level, "verdict": verdict,
            "summary": f"{label} ({level}): {verdict}; " + ", ".join(
                f"{sum(1 for n in nodes if n.verdict is v)} {v.value}" for v in (Verdict.FAIL, Verdict.ERROR,
                                                                                Verdict.WARN, Verdict.PASS)
                if any(n.verdict is v for n in nodes)),
            "nodes": [{"name": n.name, "verdict": n.verdict.value,
                       "failing": sorted({f.check for f in n.findings if f.verdict in (Verdict.FAIL, Verdict.ERROR,
                                                                                         Verdict.WARN)})}
                      for n in nodes]}


def merge_steps(nodes: Sequence[NodeResult], phase: PhaseResult) -> tuple[NodeResult, ...]:
    """Validate nodes plus the phase's failed or not-run steps as findings, so the verdict reflects them."""
    by_name = {n.name: n for n in phase.nodes}
    out = []
    for node in nodes:
        extra = [f for f in (by_name[node.name].findings if node.name in by_name else ())
                 if f.verdict in (Verdict.FAIL, Verdict.ERROR) and f.check not in {g.check for g in node.findings}]
        out.append(node.with_findings(extra) if extra else node)
    return tuple(out)


def run_optimize(inventory: Inventory, catalog: ProfileCatalog, options: PhaseOptions, out_base: Path,
                 playbook_path: Path, progress: Optional[Callable[[NodeResult], None]] = None) -> PhaseOutcome:
    playbook = load_playbook(playbook_path)
    plans = plan_hosts(playbook, inventory.hosts, catalog, options.tags, options.skip_tags)
    level = playbook.revalidate or "quick"
    started = time.monotonic()
    recorder, header = open_run(inventory, catalog, out_base, "optimize",
                                {"playbook": playbook.path, "dry_run": options.dry_run, "level": level})
    try:
        before, before_cluster, interrupted = validate_hosts(
            inventory.hosts, catalog, options.engine, PhaseRecorder(recorder, "validate-before"), level, progress)
        phases: list[dict[str, Any]] = [validation_phase("validate-before", level, before, before_cluster)]
        tuning: Optional[PhaseResult] = None
        after: Optional[tuple[NodeResult, ...]] = None
        cluster = before_cluster
        if interrupted is None:
            tuning, after, after_cluster, interrupted = tune(inventory.hosts, catalog, options, recorder, playbook,
                                                             plans, before, progress)
            phases.append(tuning.to_dict())
            if after is not None:
                cluster = after_cluster
                phases.append(validation_phase("validate-after", level, after, after_cluster))
    finally:
        recorder.close()
    final = final_nodes(before, after, tuning)
    if tuning is not None:
        write_plan(tuning, recorder.run_dir)
    run = phase_run_result(header, final, phases, time.monotonic() - started, level=level,
                           interrupted=interrupted is not None, cluster_findings=cluster)
    reports = write_reports(run, recorder.run_dir)
    code = exit_code_for(run.outcome, interrupted is not None, interrupted or 130)
    return PhaseOutcome(run, recorder.run_dir, reports, int(code), (tuning,) if tuning else ())


def final_nodes(before: tuple[NodeResult, ...], after: Optional[tuple[NodeResult, ...]],
                 tuning: Optional[PhaseResult]) -> tuple[NodeResult, ...]:
    """The latest validation of every node (after tuning where it ran), with failed tuning steps added."""
    latest = {n.name: n for n in before}
    if after is not None:
        latest.update({n.name: n for n in after})
    nodes = tuple(latest[n.name] for n in before)
    return merge_steps(nodes, tuning) if tuning is not None else nodes


__all__ = ["compare_validations", "merge_steps", "run_optimize", "tune", "validate_hosts", "validation_phase"]
