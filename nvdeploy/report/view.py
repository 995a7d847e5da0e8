"""What the reports show, computed once from a RunResult: the folded matrix, the action list, the one-sentence why.

Pure functions shared by the HTML report and the terminal text (:mod:`nvdeploy.report.text`).
"""

from __future__ import annotations

import json
import shlex
from collections import Counter, OrderedDict
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence, Union

from nvdeploy.config.hostrange import fold
from nvdeploy.report.compare import RunDiff
from nvdeploy.results import (
    WAIVED,
    ClusterVerdict,
    ErrorReason,
    Finding,
    NodeBrief,
    NodeResult,
    RunResult,
    Verdict,
    node_briefs,
)

NEEDS_ACTION = (Verdict.FAIL, Verdict.ERROR, Verdict.WARN)
# Most urgent first: finish an interrupted run (the verdict covers only part of the cluster until then), then take
# broken hardware out of service before anything else.
ACTION_ORDER = ("RESUME", "ISOLATE", "REINSTALL", "REBOOT", "RESET_GPU", "TUNE", "INVESTIGATE", "MONITOR")
ACTION_TEXT = {
    "RESUME": "not run: the run was interrupted",
    "ISOLATE": "drain from the scheduler and keep out of production; open a hardware ticket (RMA if it repeats)",
    "REINSTALL": "drain, reinstall the expected driver/software, reboot",
    "REBOOT": "drain, then reboot",
    "RESET_GPU": "drain, then reset the GPU (nvidia-smi -r -i N) or reboot",
    "TUNE": "apply the expected setting (nvdeploy optimize), no downtime needed",
    "INVESTIGATE": "investigate: the check could not decide",
    "MONITOR": "keep in service and watch for repeats",
}
CELL_TEXT = {"PASS": "PASS", "FAIL": "FAIL", "ERROR": "ERROR", "WARN": "WARN", "SKIP": "SKIP", "": "\u2013",
             WAIVED: WAIVED}


def not_run(node: Union[NodeResult, NodeBrief]) -> bool:
    """The run was interrupted before this node finished and nothing on it FAILed: all there is to say is that it
    was not run (its findings stay ERROR interrupted in results.json; ``--resume`` checks it again)."""
    return node.interrupted and node.verdict is Verdict.ERROR


def resume_command(run: RunResult, run_dir: Optional[Union[str, Path]]) -> str:
    """The command that finishes an interrupted run (only a validate run can be resumed)."""
    if run.phase != "validate":
        return f"nvdeploy {run.phase} again"
    where = str(run_dir) if run_dir is not None else f"reports/{run.cluster}/{run.run_id}"
    return f"nvdeploy validate --resume {shlex.quote(where)}"


def not_run_text(run: RunResult, run_dir: Optional[Union[str, Path]]) -> str:
    """What a not-run node's single line says: ``not run: the run was interrupted; resume with `...```."""
    verb = "resume with" if run.phase == "validate" else "run"
    return f"{ACTION_TEXT['RESUME']}; {verb} `{resume_command(run, run_dir)}`"


def not_run_names(run: RunResult, briefs: Optional[Sequence[NodeBrief]] = None) -> list[str]:
    """The nodes of ``run`` that were not run (interrupted), in run order."""
    return [b.name for b in (node_briefs(run.nodes) if briefs is None else briefs) if not_run(b)]


def check_ids(run: RunResult, briefs: Optional[Sequence[NodeBrief]] = None) -> list[str]:
    """Every check that produced a finding, in first-seen order."""
    ids: OrderedDict[str, None] = OrderedDict()
    for brief in node_briefs(run.nodes) if briefs is None else briefs:
        for check, _verdict in brief.checks:
            ids.setdefault(check, None)
    return list(ids)


def needy(run: RunResult, briefs: Optional[Sequence[NodeBrief]] = None) -> Iterator[tuple[int, NodeResult]]:
    """(index in run.nodes, node) of every node that needs action, in order; only those are read back when the
    run's nodes are on disk. A node that needs no action has no finding that does (its verdict is its worst)."""
    if briefs is None and isinstance(run.nodes, (tuple, list)):
        for index, node in enumerate(run.nodes):
            if node.verdict in NEEDS_ACTION:
                yield index, node
        return
    for index, brief in enumerate(node_briefs(run.nodes) if briefs is None else briefs):
        if brief.verdict in NEEDS_ACTION:
            yield index, run.nodes[index]


def noted(run: RunResult, briefs: Optional[Sequence[NodeBrief]] = None) -> Iterator[tuple[int, NodeResult]]:
    """(index in run.nodes, node) of every node that needs action or has a finding a waiver accepted, in order:
    what the terminal's ``-v`` and the report's waived findings read back, and nothing else."""
    if briefs is None and isinstance(run.nodes, (tuple, list)):
        for index, node in enumerate(run.nodes):
            if node.verdict in NEEDS_ACTION or any(f.waiver is not None for f in node.findings):
                yield index, node
        return
    for index, brief in enumerate(node_briefs(run.nodes) if briefs is None else briefs):
        if brief.verdict in NEEDS_ACTION or brief.waived:
            yield index, run.nodes[index]


def waived_findings(run: RunResult, briefs: Optional[Sequence[NodeBrief]] = None) -> list[tuple[int, Finding]]:
    """(index in run.nodes, finding) of every finding a waiver accepted, node by node, then the cluster's (index
    -1): who accepted what, why and until when, for the reports."""
    out = []
    for index, brief in enumerate(node_briefs(run.nodes) if briefs is None else briefs):
        if brief.waived:
            out += [(index, f) for f in run.nodes[index].findings if f.waiver is not None]
    return out + [(-1, f) for f in run.cluster_findings if f.waiver is not None]


def worst_by_check(findings: tuple[Finding, ...]) -> dict[str, Verdict]:
    worst: dict[str, Verdict] = {}
    for finding in findings:
        if finding.check not in worst or finding.verdict.severity > worst[finding.check].severity:
            worst[finding.check] = finding.verdict
    return worst


def _new_cells(diff: Optional[RunDiff]) -> set[tuple[str, str]]:
    if diff is None:
        return set()
    return {(c.node, c.check) for c in diff.new_failures + diff.new_warnings}


def _cell(worst: Optional[Verdict], waived: bool) -> str:
    """A matrix cell: the check's worst verdict on the node, WAIVED where a waiver accepted what would have been its
    worst (a waived FAIL beside passing GPUs is WAIVED, not PASS; beside a FAIL that counts it is FAIL)."""
    if worst is None:
        return ""
    return WAIVED if waived and worst.severity <= Verdict.PASS.severity else worst.value


def matrix(run: RunResult, diff: Optional[RunDiff] = None,
           briefs: Optional[Sequence[NodeBrief]] = None) -> tuple[list[str], list[dict[str, Any]]]:
    """(check ids, rows): nodes with identical results folded into host ranges, worst rows first.

    A row is ``{hosts, count, verdict, cells: [(verdict or "", new since baseline)], names, index, action}``.
    """
    briefs = node_briefs(run.nodes) if briefs is None else briefs
    checks = check_ids(run, briefs)
    new = _new_cells(diff)
    groups: OrderedDict[tuple[Any, ...], list[int]] = OrderedDict()
    for index, brief in enumerate(briefs):
        if not_run(brief):  # wherever each was cut off, not-run nodes are one row: there is nothing else to say
            groups.setdefault((brief.verdict.value, None), []).append(index)
            continue
        worst = dict(brief.checks)
        cells = tuple((_cell(worst.get(c), c in brief.waived), (brief.name, c) in new) for c in checks)
        groups.setdefault((brief.verdict.value, cells), []).append(index)
    rows = []
    for (verdict, cells), indexes in groups.items():
        names = [briefs[i].name for i in indexes]
        rows.append({"hosts": fold(names), "count": len(names), "verdict": verdict, "cells": cells or (),
                     "names": names, "indexes": indexes, "action": Verdict(verdict) in NEEDS_ACTION,
                     "not_run": cells is None})
    rows.sort(key=lambda r: (-Verdict(r["verdict"]).severity, -r["count"] if r["verdict"] in ("PASS", "SKIP") else 0,
                             r["hosts"]))
    return checks, rows


def attention(run: RunResult, briefs: Optional[Sequence[NodeBrief]] = None) -> list[tuple[int, NodeResult]]:
    """(index in run.nodes, node) of every node that needs action, worst first."""
    found = list(needy(run, briefs))
    found.sort(key=lambda item: (-item[1].verdict.severity, item[1].name))
    return found


def _action_of(finding: Finding) -> Optional[str]:
    if finding.verdict not in NEEDS_ACTION:
        return None
    if finding.reason is ErrorReason.INTERRUPTED:
        return "RESUME"
    if finding.remediation.value != "NONE":
        return finding.remediation.value
    return "INVESTIGATE" if finding.verdict in (Verdict.ERROR, Verdict.FAIL) else "MONITOR"


def action_list(run: RunResult, needing: Optional[Sequence[tuple[int, NodeResult]]] = None,
                run_dir: Optional[Union[str, Path]] = None) -> list[dict[str, Any]]:
    """What the on-call engineer does, to which nodes, most urgent first.

    One step per action and set of checks: nodes that need the same action for the same checks are folded into
    one host range (``ISOLATE gpu[003,457]: memory.ecc_errors``). A step is ``{action, what, verdict, hosts,
    count, nodes, items: [{check, verdict, summary, example_node, reasons}]}``. A cluster-level finding is a
    step of its own only when no node carries the same check. Every node an interrupt cut off is in one RESUME
    step that names the resume command (``run_dir``: where the run is), with no item per check: the checks of a
    not-run node are not findings, and a node that FAILed before the interrupt keeps its other steps.
    """
    per_action: dict[str, dict[str, dict[str, Finding]]] = {}
    node_checks = set()
    resume: list[str] = []
    # ``needing`` (attention()'s list) is in any order: the steps are grouped and sorted below, and each node's
    # checks are its own; the nodes of a step are listed in run order either way.
    for _index, node in sorted(needy(run) if needing is None else needing, key=lambda item: item[0]):
        if node.interrupted:
            resume.append(node.name)
            if not_run(node):
                continue
        for finding in node.findings:
            action = _action_of(finding)
            if action is None or action == "RESUME":
                continue
            node_checks.add(finding.check)
            checks = per_action.setdefault(action, {}).setdefault(node.name, {})
            current = checks.get(finding.check)
            if current is None or finding.verdict.severity > current.verdict.severity:
                checks[finding.check] = finding
    steps: list[dict[str, Any]] = []
    for action, nodes in per_action.items():
        groups: dict[tuple[str, ...], list[str]] = {}
        for name, checks in nodes.items():
            groups.setdefault(tuple(sorted(checks)), []).append(name)
        for checks, names in groups.items():
            items = []
            for check in checks:
                findings = [nodes[name][check] for name in names]
                worst = max(findings, key=lambda f: f.verdict.severity)
                reasons = Counter(f.reason.value for f in findings if f.reason is not None)
                items.append({"check": check, "verdict": worst.verdict.value, "summary": worst.summary,
                              "example_node": worst.node or names[0], "reasons": reasons})
            items.sort(key=lambda i: (-Verdict(i["verdict"]).severity, i["check"]))
            steps.append({"action": action, "what": ACTION_TEXT.get(action, action.lower()),
                          "verdict": items[0]["verdict"], "hosts": fold(names), "count": len(names),
                          "nodes": names, "items": items})
    if resume:
        steps.append({"action": "RESUME", "what": not_run_text(run, run_dir), "verdict": Verdict.ERROR.value,
                      "hosts": fold(resume), "count": len(resume), "nodes": resume, "items": []})
    for finding in run.cluster_findings:
        action = _action_of(finding)
        if action is None or finding.check in node_checks:
            continue
        steps.append({"action": action, "what": ACTION_TEXT.get(action, action.lower()),
                      "verdict": finding.verdict.value, "hosts": "(cluster)", "count": 0, "nodes": [],
                      "items": [{"check": finding.check, "verdict": finding.verdict.value, "summary": finding.summary,
                                 "example_node": "", "reasons": Counter()}]})
    steps.sort(key=lambda s: (ACTION_ORDER.index(s["action"]) if s["action"] in ACTION_ORDER else 99,
                              -Verdict(s["verdict"]).severity, -s["count"], s["hosts"]))
    return steps


def action_text(run: RunResult, steps: Optional[list[dict[str, Any]]] = None,
                run_dir: Optional[Union[str, Path]] = None) -> str:
    """The action list as plain text to paste into a ticket (no markup, numbered steps, one line per check)."""
    steps = action_list(run, run_dir=run_dir) if steps is None else steps
    head = (f"nvdeploy {run.phase} of {run.cluster} (run {run.run_id}, {run.started_at or 'time unknown'}): "
            f"{run.verdict.value.replace('_', ' ')}. {run.summary()}")
    if not steps:
        return head + "\nNo action needed.\n"
    lines = [head, ""]
    acted: list[str] = []
    for number, step in enumerate(steps, 1):
        count = step["count"]
        nodes = "cluster-wide" if not count else f"{step['hosts']} ({count} node{'' if count == 1 else 's'})"
        lines.append(f"{number}. {step['action']} {nodes}: {step['what']}.")
        for item in step["items"]:
            example = f" (e.g. {item['example_node']})" if count > 1 else ""
            reasons = ", ".join(f"{r} x{n}" for r, n in item["reasons"].most_common())
            lines.append(f"   - {item['verdict']} {item['check']}{example}: {item['summary']}"
                         + (f" [{reasons}]" if reasons else ""))
        if step["action"] != "RESUME":  # the resume command checks those again
            acted += [name for name in step["nodes"] if name not in acted]
    if acted and run.inventory:
        lines.append(f"{len(steps) + 1}. Re-validate: nvdeploy {run.phase} -i {shlex.quote(run.inventory)} "
                     f"--level {shlex.quote(run.level)} --limit {shlex.quote(fold(acted))}")
    return "\n".join(lines) + "\n"


def why(run: RunResult, needing: Optional[Sequence[tuple[int, NodeResult]]] = None) -> str:
    """The verdict's reason in one sentence, naming the checks that decided it."""
    base = run.summary().rstrip(".")
    verdict = run.verdict
    if verdict in (ClusterVerdict.READY, ClusterVerdict.PLAN):
        return base + "."
    wanted = (Verdict.FAIL,) if verdict is ClusterVerdict.NOT_READY else (Verdict.ERROR,)
    if run.fail_on_warn and verdict is ClusterVerdict.NOT_READY:
        wanted = (Verdict.FAIL, Verdict.WARN)
    per_check: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    unrun = 0
    # Only nodes that need action can hold a wanted verdict or an ERROR finding.
    for _index, node in sorted(needy(run) if needing is None else needing, key=lambda item: item[0]):
        if not_run(node):  # one node, not one ERROR per check it did not get to
            unrun += 1
            continue
        for check, worst in worst_by_check(node.findings).items():
            if worst in wanted:
                per_check[check] += 1
        for finding in node.findings:
            if finding.verdict is Verdict.ERROR and finding.reason is not None:
                reasons[finding.reason.value] += 1
    cluster_checks = [f.check for f in run.cluster_findings if f.verdict in wanted and f.check not in per_check]
    parts = [f"{check} on {count} node{'' if count == 1 else 's'}" for check, count in per_check.most_common(4)]
    if len(per_check) > 4:
        parts.append(f"{len(per_check) - 4} more check{'' if len(per_check) == 5 else 's'}")
    parts += [f"{check} cluster-wide" for check in cluster_checks]
    detail = ""
    if parts:
        detail = ("; failing: " if verdict is ClusterVerdict.NOT_READY else "; not determined: ") + ", ".join(parts)
    if verdict is ClusterVerdict.INCOMPLETE and reasons:
        detail += " (" + ", ".join(f"{r}: {n}" for r, n in reasons.most_common(3)) + ")"
    if unrun:
        detail += f"; {unrun} node{'' if unrun == 1 else 's'} not run (interrupted)"
    return base + detail + "."


_QUIET_STEPS = ("ok", "skipped")


def fold_phase_nodes(nodes: Sequence[Mapping[str, Any]], limit: int = 200) -> list[dict[str, Any]]:
    """A phase's nodes (results.json ``phases[].nodes``) folded as the terminal folds them: one row group per
    identical set of notable steps (every step that is not ok or skipped, with its status, message, changes and
    commands), in the order the first of each appears. ``limit``: groups shown at most."""
    groups: dict[str, dict[str, Any]] = {}
    for node in nodes:
        steps = node.get("steps") or []
        notable = [s for s in steps if s.get("status") not in _QUIET_STEPS]
        key = json.dumps([[s.get("step"), s.get("status"), s.get("reason"), s.get("message"), s.get("changes"),
                           [c.get("command") for c in s.get("commands") or ()], s.get("output")] for s in notable],
                         sort_keys=True, default=str) + f"|{len(steps)}"
        group = groups.get(key)
        if group is None:
            group = groups[key] = {"names": [], "steps": notable, "total": len(steps)}
        group["names"].append(str(node.get("name", "?")))
    out = []
    for group in list(groups.values())[:limit]:
        names = group.pop("names")
        out.append({**group, "hosts": fold(names), "count": len(names)})
    return out


def firmware_rows(run: RunResult) -> list[dict[str, Any]]:
    """The firmware table (results.json ``facts.firmware``, {component: {unit: version}}): one row per component and
    version with the folded hosts that run it, components in the order first seen, the majority version first; a
    component with more than one version is marked ``mixed``. From the briefs of a spooled run (they keep the
    firmware fact), else from the nodes."""
    briefs = getattr(run.nodes, "briefs", None)
    sources = ((b.name, b.facts.get("firmware")) for b in briefs) if briefs is not None else \
        ((n.name, n.facts.get("firmware")) for n in run.nodes)
    table: dict[str, dict[str, list[str]]] = {}
    for name, firmware in sources:
        if not isinstance(firmware, Mapping):
            continue
        for component, units in firmware.items():
            if not isinstance(units, Mapping):
                continue
            versions = table.setdefault(str(component), {})
            for version in dict.fromkeys(str(v) for v in units.values()):
                hosts = versions.setdefault(version, [])
                if not hosts or hosts[-1] != name:
                    hosts.append(name)
    rows = []
    for component, versions in table.items():
        ordered = sorted(versions.items(), key=lambda kv: -len(kv[1]))
        for version, hosts in ordered:
            rows.append({"component": component, "version": version, "hosts": fold(hosts), "count": len(hosts),
                         "mixed": len(versions) > 1})
    return rows
