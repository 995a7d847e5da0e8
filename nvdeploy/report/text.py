"""The terminal summary at the end of a run: one line per group of nodes, folded like the HTML matrix.

``FAIL  gpu003  gpu.count, kmsg.xid: 7 of 8 expected GPUs visible to the driver`` and
``PASS  gpu[001-002,004-005]``; the cluster-level findings that did not pass follow, one line each.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Optional

from nvdeploy.hostrange import fold
from nvdeploy.report.view import NEEDS_ACTION
from nvdeploy.results import Finding, NodeResult, RunResult, Verdict, node_briefs

SUMMARY_WIDTH = 160


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "\u2026"


def node_summary_lines(nodes: Iterable[NodeResult], width: int = SUMMARY_WIDTH) -> list[str]:
    """One line per group of nodes with the same verdict and the same non-passing checks, worst first.

    One pass; a group keeps its members' names and its first node's worst finding, not the nodes."""
    groups: dict[tuple[str, tuple[str, ...]], _Group] = {}
    for node in nodes:
        bad = tuple(sorted({f.check for f in node.findings if f.verdict in NEEDS_ACTION}))
        key = (node.verdict.value, bad)
        group = groups.get(key)
        if group is None:
            groups[key] = _Group(node)
        else:
            group.add(node)
    lines = []
    order = sorted(groups.items(), key=lambda item: (-Verdict(item[0][0]).severity, -len(item[1].names)))
    for (verdict, bad), group in order:
        line = f"{verdict:5} {fold(group.names)}"
        if bad:
            line += f"  {', '.join(bad)}"
            if group.worst is not None and group.same:
                line += f": {_one_line(group.worst.summary)}"
        lines.append(_shorten(line, width))
    return lines


class _Group:
    """Nodes of one summary line: their names, the first node's worst finding, and whether every later node has
    a finding of the same check with the same summary (then the line quotes it)."""

    def __init__(self, first: NodeResult) -> None:
        self.names = [first.name]
        self.worst: Optional[Finding] = next((f for f in first.findings if f.verdict is first.verdict), None)
        self.same = True

    def add(self, node: NodeResult) -> None:
        self.names.append(node.name)
        worst = self.worst
        if self.same and worst is not None:
            self.same = any(f.check == worst.check and f.summary == worst.summary for f in node.findings)


def _passing(run: RunResult) -> Iterator[NodeResult]:
    """The run's nodes for the summary: those that need action read back in full, the others as a stand-in of
    their brief (name and verdict are all their line needs: they have no finding that needs action)."""
    for index, brief in enumerate(node_briefs(run.nodes)):
        if brief.verdict in NEEDS_ACTION:
            yield run.nodes[index]
        else:
            yield NodeResult(brief.name, (Finding("", brief.verdict, ""),))


def summary_lines(run: RunResult, width: int = SUMMARY_WIDTH) -> list[str]:
    """The end-of-run terminal summary: node groups, then the cluster findings that did not pass."""
    nodes: Iterable[NodeResult] = run.nodes if isinstance(run.nodes, (tuple, list)) else _passing(run)
    lines = node_summary_lines(nodes, width)
    for finding in run.cluster_findings:
        if finding.verdict is not Verdict.PASS and finding.verdict is not Verdict.SKIP:
            lines.append(_shorten(f"{finding.verdict.value:5} cluster  {finding.check}: {_one_line(finding.summary)}",
                                  width))
    return lines
