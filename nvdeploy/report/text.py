"""The terminal summary at the end of a run: one line per group of nodes, folded like the HTML matrix.

``FAIL  gpu003  gpu.count, kmsg.xid: 7 of 8 expected GPUs visible to the driver`` and
``PASS  gpu[001-002,004-005]``; the cluster-level findings that did not pass follow, one line each.
"""

from __future__ import annotations

from nvdeploy.hostrange import fold
from nvdeploy.report.view import NEEDS_ACTION
from nvdeploy.results import NodeResult, RunResult, Verdict

SUMMARY_WIDTH = 160


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "\u2026"


def node_summary_lines(nodes: list[NodeResult], width: int = SUMMARY_WIDTH) -> list[str]:
    """One line per group of nodes with the same verdict and the same non-passing checks, worst first."""
    groups: dict[tuple[str, tuple[str, ...]], list[NodeResult]] = {}
    for node in nodes:
        bad = tuple(sorted({f.check for f in node.findings if f.verdict in NEEDS_ACTION}))
        groups.setdefault((node.verdict.value, bad), []).append(node)
    lines = []
    order = sorted(groups.items(), key=lambda item: (-Verdict(item[0][0]).severity, -len(item[1])))
    for (verdict, bad), members in order:
        line = f"{verdict:5} {fold(n.name for n in members)}"
        if bad:
            line += f"  {', '.join(bad)}"
            first = members[0]
            worst = next((f for f in first.findings if f.verdict is first.verdict), None)
            same = worst is not None and all(
                any(f.check == worst.check and f.summary == worst.summary for f in n.findings) for n in members[1:])
            if worst is not None and same:
                line += f": {_one_line(worst.summary)}"
        lines.append(_shorten(line, width))
    return lines


def summary_lines(run: RunResult, width: int = SUMMARY_WIDTH) -> list[str]:
    """The end-of-run terminal summary: node groups, then the cluster findings that did not pass."""
    lines = node_summary_lines(list(run.nodes), width)
    for finding in run.cluster_findings:
        if finding.verdict is not Verdict.PASS and finding.verdict is not Verdict.SKIP:
            lines.append(_shorten(f"{finding.verdict.value:5} cluster  {finding.check}: {_one_line(finding.summary)}",
                                  width))
    return lines
