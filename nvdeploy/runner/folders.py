"""Run folders on disk: find them under a reports folder and read a :class:`RunResult` back from one.

A run folder is ``<out>/<cluster>/<run-id>/`` holding ``results.json`` (final) and ``results.jsonl`` (streamed).
After a crash only the journal exists; :func:`load_run` rebuilds the run from it, marking every node that never
reported as ERROR ``interrupted``, exactly as ``nvdeploy report`` does.

:func:`finish_run` ends a run: the cluster stage's checks and the waivers over its finished nodes. The validate
phase ends with it, and so does rebuilding a run from its journal; a run's baseline (``validate --baseline``) is
itself loaded from its folder, hence one module.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence, Union

from nvdeploy import __version__
from nvdeploy.checks.cluster import evaluate_cluster
from nvdeploy.config.waivers import WAIVABLE, Waiver, apply_waivers, run_date, today_utc, waive_cluster
from nvdeploy.results import Finding, NodeResult, RunResult, Waived, node_briefs
from nvdeploy.runner.record import NodeSpool

RESULTS_JSON = "results.json"
RESULTS_JSONL = "results.jsonl"


class RunLoadError(ValueError):
    """A folder holds no readable run. The message names the folder and what is wrong."""


def is_run_dir(path: Path) -> bool:
    return (path / RESULTS_JSON).is_file() or (path / RESULTS_JSONL).is_file()


def load_run(run_dir: Union[str, Path]) -> RunResult:
    """The run recorded in ``run_dir``: from ``results.json``, or rebuilt from ``results.jsonl`` after a crash.

    Raises:
        RunLoadError: neither file exists, or the one found cannot be read as a run.
    """
    folder = Path(run_dir)
    final = folder / RESULTS_JSON
    journal = folder / RESULTS_JSONL
    if final.is_file():
        try:
            return RunResult.from_dict(json.loads(final.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            if not journal.is_file():
                raise RunLoadError(f"{final}: not a readable nvdeploy run ({exc})") from None
    if journal.is_file():
        return _from_journal(journal)
    raise RunLoadError(f"{folder}: no {RESULTS_JSON} or {RESULTS_JSONL} (not an nvdeploy run folder)")


def _from_journal(journal: Path) -> RunResult:
    from nvdeploy.config.inventory import Host
    from nvdeploy.results import ErrorReason
    from nvdeploy.runner.engine import error_node
    from nvdeploy.runner.record import read_journal

    try:
        header, nodes, _warnings = read_journal(journal)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RunLoadError(f"{journal}: unreadable journal ({exc})") from None
    if header is None:
        raise RunLoadError(f"{journal}: no run header (not an nvdeploy journal)")
    hosts = [str(h) for h in header.get("hosts", [])]
    done = {n.name for n in nodes}
    missing = [h for h in hosts if h not in done]
    nodes += [error_node(Host(name, {}), "system.reachable", "no result recorded: the run ended before this node "
                         "finished", ErrorReason.INTERRUPTED) for name in missing]
    return finish_run(header, nodes, hosts, bool(missing), 0.0, bool(header.get("fail_on_warn")))


def find_run_dirs(out_base: Union[str, Path]) -> Iterator[Path]:
    """Run folders under a reports folder: ``<out>/<cluster>/<run-id>/`` (and ``out`` itself if it is one).

    Only those two levels are looked at, never the evidence trees below them: cheap on big fleets.
    """
    base = Path(out_base)
    if is_run_dir(base):
        yield base
        return
    if not base.is_dir():
        return
    for cluster_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        if is_run_dir(cluster_dir):
            yield cluster_dir
            continue
        for run_dir in sorted(p for p in cluster_dir.iterdir() if p.is_dir()):
            if is_run_dir(run_dir):
                yield run_dir


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def finish_run(header: dict, nodes: Union[list[NodeResult], NodeSpool], order: list[str], interrupted: bool,
               duration_s: float, fail_on_warn: bool, extra_cluster: Sequence[Finding] = ()) -> RunResult:
    """Cluster evaluation over the finished nodes, in inventory order; ``extra_cluster``: the cluster findings of
    the stages that already ran (multi-node nccl-tests, ...), whose node findings are in ``nodes``.

    From a spool, the cluster checks read each node's brief (its version facts and power findings), and only the
    nodes they add findings to are read back, amended and spooled again: the run's nodes stay on disk."""
    # Waivers (nvdeploy/config/waivers.py) apply last, to every node finding the run made, the cluster stage's
    # included, then to the cluster findings those stand behind; on the day the run started, not the day it ends.
    waivers = [Waiver.from_dict(w) for w in header.get("waivers") or ()]
    today = run_date(header.get("started_at"))
    baseline = _fleet_baseline(header)
    ordered_nodes: Sequence[NodeResult]
    only = header.get("checks") if header.get("only_checks") else None  # validate --check: only these
    if isinstance(nodes, NodeSpool):
        ordered_nodes, cluster_findings = _evaluate_spooled(nodes, order, header.get("racks"), header.get("fleet"),
                                                            waivers, baseline, today, only)
    else:
        by_name = {n.name: n for n in nodes}
        ordered = [by_name[name] for name in order if name in by_name]
        ordered += [n for n in nodes if n.name not in set(order)]
        evaluated, cluster_findings = evaluate_cluster(ordered, header.get("racks"), header.get("fleet"), baseline,
                                                       only)
        ordered_nodes = tuple(apply_waivers(evaluated, waivers, today))
    cluster_findings = list(cluster_findings) + list(extra_cluster)
    if waivers:
        cluster_findings = _waive_cluster(cluster_findings, ordered_nodes)
    return RunResult(
        run_id=header["run_id"], cluster=header["cluster"], phase=header.get("phase", "validate"),
        nodes=ordered_nodes, cluster_findings=tuple(cluster_findings), started_at=header.get("started_at", ""),
        finished_at=_now(), duration_s=duration_s, level=header.get("level", "quick"),
        profiles=header.get("profiles", {}), interrupted=interrupted, fail_on_warn=fail_on_warn,
        nvdeploy_version=header.get("nvdeploy_version", __version__), inventory=header.get("inventory", ""),
        user=header.get("user", ""))


def _fleet_baseline(header: Mapping[str, Any]) -> Optional[RunResult]:
    """The accepted run (``validate --baseline``) whose nodes are fleet.performance's peers where this run has too
    few; None without one, or when it cannot be read (the CLI's comparison with it then reports why, exit 2)."""
    if not header.get("fleet") or not header.get("fleet_baseline"):
        return None
    try:
        return load_run(Path(header["fleet_baseline"]))
    except (RunLoadError, OSError, ValueError, KeyError):
        return None


def _waive_cluster(findings: Sequence[Finding], nodes: Sequence[NodeResult]) -> list[Finding]:
    """The cluster findings with those whose node findings are all waived waived too (waivers.waive_cluster): the
    counting checks from the nodes' briefs, and only the nodes with a waived finding of such a check read back."""
    wanted = {f.check for f in findings if f.verdict in WAIVABLE}
    if not wanted:
        return list(findings)
    briefs = node_briefs(nodes)
    counting = {check for b in briefs for check, worst in b.checks if check in wanted and worst in WAIVABLE}
    accepted: dict[str, list[Waived]] = {}
    for index, brief in enumerate(briefs):
        if wanted.intersection(brief.waived):
            for finding in nodes[index].findings:
                if finding.waiver is not None and finding.check in wanted:
                    accepted.setdefault(finding.check, []).append(finding.waiver)
    return waive_cluster(findings, accepted, counting)


def _evaluate_spooled(spool: NodeSpool, order: list[str], racks_of: Optional[Mapping[str, Sequence[Any]]] = None,
                      fleet: Optional[Mapping[str, Mapping[str, Any]]] = None, waivers: Sequence[Waiver] = (),
                      baseline: Optional[RunResult] = None, today: Optional[dt.date] = None,
                      only: Optional[Sequence[str]] = None) -> tuple[Sequence[NodeResult], list[Finding]]:
    ordered = spool.nodes(order)
    views = [NodeResult(b.name, b.kept, address=b.address, profile=b.profile, facts=b.facts) for b in ordered.briefs]
    updated, cluster_findings = evaluate_cluster(views, racks_of, fleet, baseline, only)
    for view, after in zip(views, updated):
        if after is not view:  # the cluster checks appended findings to this node: amend the full result
            spool.add(spool.get(view.name).with_findings(after.findings[len(view.findings):]))
    if waivers:
        today = today or today_utc()
        checks = {w.check for w in waivers}
        named = {n for w in waivers for n in w.nodes}
        for brief in spool.nodes(order).briefs:
            # Only the nodes with a waivable verdict of a waived check are read back from the spool.
            if brief.name in named and any(c in checks and v in WAIVABLE for c, v in brief.checks):
                node = spool.get(brief.name)
                (waived,) = apply_waivers([node], waivers, today)
                if waived is not node:
                    spool.add(waived)
    return spool.nodes(order), list(cluster_findings)
