"""The self-contained HTML report: verdict first, folded node x check matrix, findings with evidence links.

Jinja2 with autoescape on (explicitly, not by file extension), no ``|safe`` on anything from a node, a CSP
that forbids every remote load and every script, inline CSS only: it opens from a mail attachment.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import jinja2

from nvdeploy.hostrange import fold
from nvdeploy.results import NodeResult, RunResult, Verdict

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("nvdeploy.report", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)

_ACTION_ORDER = ["ISOLATE", "REINSTALL", "REBOOT", "RESET_GPU", "TUNE", "INVESTIGATE", "MONITOR"]


def _check_ids(run: RunResult) -> list[str]:
    ids: OrderedDict[str, None] = OrderedDict()
    for node in run.nodes:
        for finding in node.findings:
            ids.setdefault(finding.check, None)
    return list(ids)


def _row(node: NodeResult, checks: list[str]) -> tuple[str, ...]:
    cells = []
    for check in checks:
        verdicts = [f.verdict for f in node.findings if f.check == check]
        cells.append(Verdict.worst(verdicts).value if verdicts else "-")
    return tuple(cells)


def matrix(run: RunResult) -> tuple[list[str], list[dict[str, Any]]]:
    """Rows of identical results folded into host ranges, worst rows first."""
    checks = _check_ids(run)
    groups: OrderedDict[tuple[str, tuple[str, ...]], list[str]] = OrderedDict()
    for node in run.nodes:
        key = (node.verdict.value, _row(node, checks))
        groups.setdefault(key, []).append(node.name)
    rows = [{"hosts": fold(names), "count": len(names), "verdict": verdict, "cells": cells, "names": names}
            for (verdict, cells), names in groups.items()]
    rows.sort(key=lambda r: (-Verdict(r["verdict"]).severity, r["hosts"]))
    return checks, rows


def action_list(run: RunResult) -> list[dict[str, Any]]:
    """What the on-call engineer does, to which nodes, in order of urgency."""
    actions: dict[tuple[str, str], list[str]] = {}
    for node in run.nodes:
        for finding in node.findings:
            if finding.verdict in (Verdict.FAIL, Verdict.ERROR, Verdict.WARN) and finding.remediation.value != "NONE":
                actions.setdefault((finding.remediation.value, finding.check), [])
                if node.name not in actions[(finding.remediation.value, finding.check)]:
                    actions[(finding.remediation.value, finding.check)].append(node.name)
    out = [{"action": action, "check": check, "hosts": fold(names), "count": len(names)}
           for (action, check), names in actions.items()]
    out.sort(key=lambda a: (_ACTION_ORDER.index(a["action"]) if a["action"] in _ACTION_ORDER else 99, a["check"]))
    return out


def render_html(run: RunResult) -> bytes:
    checks, rows = matrix(run)
    template = _ENV.get_template("report.html.j2")
    attention = [n for n in run.nodes if n.verdict in (Verdict.FAIL, Verdict.ERROR, Verdict.WARN)]
    attention.sort(key=lambda n: (-n.verdict.severity, n.name))
    html = template.render(run=run, data=run.to_dict(), checks=checks, rows=rows, actions=action_list(run),
                           attention=attention, counts=run.counts())
    return html.encode("utf-8")
