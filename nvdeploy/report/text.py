"""The terminal summary at the end of a run: one line per group of nodes, folded like the HTML matrix.

``FAIL  gpu003  gpu.count, gpu.pci_visible: 7 of 8 expected GPUs visible to the driver``, then, for the same nodes,
``      ERROR dcgm.diag: dcgmi diag timed out after 600 s``: each verdict of a group on a line of its own, most severe
first, its checks in the order the node ran them and the first one's reason in words, then the findings a waiver
accepted (``      SKIP memory.remapped_rows: WAIVED FAIL until 2027-01-15 (owner ...: reason; file:line): ...``).
Nodes are grouped only when those findings are the same on each (check, verdict, GPU, Xid, action, summary and
waiver): two trays with different faults of one check are two lines, never one line quoting the first. A long
list of checks is shortened (``+22 more``) so the reason is never what gets cut. Nodes an interrupt cut off are
one line (``ERROR gpu[195-500]  not run: the run was interrupted; resume with `nvdeploy validate --resume
DIR```); the cluster-level findings that did not pass or were waived follow, one line each.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Optional, TextIO, Union

from nvdeploy.config.hostrange import fold
from nvdeploy.report.view import NEEDS_ACTION, not_run, not_run_text
from nvdeploy.results import Finding, NodeResult, RunResult, Verdict, node_briefs

SUMMARY_WIDTH = 160
# A reason is node output quoted verbatim at times (an Xid line names a process): kept whole up to this, which no
# tool's own message (a hung nvidia-smi's is ~150) comes near.
REASON_LIMIT = 400
# The verdicts a node line shows, most severe first (FAIL outranks ERROR: see results.py).
_SHOWN = sorted(NEEDS_ACTION, key=lambda v: -v.severity)
_INDENT = " " * 6
# A summary line's node list: past this, its first ranges and the count (the whole list is the FAIL/ERROR hosts
# line, --failed-hosts and the report; 10,000 nodes with scattered failures folded to 1,800 characters).
HOSTS_LIMIT = 100


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "\u2026"


def _checks_text(checks: list[str], room: int) -> str:
    """``a, b, c`` in at most ``room`` characters if it can: later names give way to ``+N more``."""
    full = ", ".join(checks)
    if len(full) <= room or len(checks) == 1:
        return full
    for keep in range(len(checks) - 1, 0, -1):
        text = ", ".join(checks[:keep]) + f" +{len(checks) - keep} more"
        if len(text) <= room:
            return text
    return f"{checks[0]} +{len(checks) - 1} more"


def folded_brief(names: list[str], limit: int = HOSTS_LIMIT) -> str:
    """The folded node list, or, when longer than ``limit``, its first ranges, "..." and how many nodes in all."""
    text = fold(names)
    if len(text) <= limit:
        return text
    cut = text.rfind(",", 0, limit)
    if cut <= 0:
        cut = limit
    shown = text[:cut]
    close = "]" if shown.count("[") > shown.count("]") else ""
    return f"{shown},...{close} ({len(names):,} nodes)"


def _parts(node: NodeResult) -> list[tuple[Verdict, list[Finding]]]:
    """What a node's entry shows: its findings of each verdict that needs action, most severe first, then those a
    waiver accepted (SKIP, their own verdict in the waiver)."""
    parts = [(verdict, [f for f in node.findings if f.verdict is verdict]) for verdict in _SHOWN]
    parts.append((Verdict.SKIP, [f for f in node.findings if f.waiver is not None]))
    return [(verdict, findings) for verdict, findings in parts if findings]


def _same(finding: Finding) -> tuple[Any, ...]:
    """What two nodes' findings must share for the nodes to be one entry: the fault, not only the check."""
    return (finding.check, finding.verdict.value, finding.gpu, finding.code, finding.reason, finding.remediation.value,
            finding.summary, finding.waiver)


_Key = tuple[str, tuple[tuple[str, tuple[tuple[Any, ...], ...]], ...]]


def _key(node: NodeResult, parts: list[tuple[Verdict, list[Finding]]]) -> _Key:
    return node.verdict.value, tuple((verdict.value, tuple(sorted((_same(f) for f in findings), key=repr)))
                                     for verdict, findings in parts)


class _Group:
    """Nodes of one summary entry (the same shown findings on each): their names, and per part shown the first
    node's checks (in its order) and first finding."""

    def __init__(self, first: NodeResult, parts: list[tuple[Verdict, list[Finding]]]) -> None:
        self.names = [first.name]
        self.parts = [(verdict, list(dict.fromkeys(f.check for f in findings)), findings[0])
                      for verdict, findings in parts]

    def add(self, node: NodeResult) -> None:
        self.names.append(node.name)

    def lines(self, verdict: str, width: int) -> list[str]:
        head = f"{verdict:5} {folded_brief(self.names)}"
        if not self.parts:
            return [head]
        out = []
        for number, (shown, checks, first) in enumerate(self.parts):
            reason = _shorten(_one_line(first.display_summary), REASON_LIMIT)
            prefix = f"{head}  " if number == 0 else f"{_INDENT}{shown.value} "
            room = width - len(prefix) - len(reason) - 2
            out.append(f"{prefix}{_checks_text(checks, room)}: {reason}")
        return out


def node_summary_lines(nodes: Iterable[NodeResult], width: int = SUMMARY_WIDTH, resume: str = "") -> list[str]:
    """One entry per group of nodes with the same verdict and the same non-passing checks, worst first; the nodes
    an interrupt cut off are one line saying so (``resume``: its text, from :func:`not_run_text`).

    One pass; a group keeps its members' names and its first node's findings that are shown, not the nodes."""
    groups: dict[_Key, _Group] = {}
    unrun: list[str] = []
    for node in nodes:
        if not_run(node):
            unrun.append(node.name)
            continue
        parts = _parts(node)
        key = _key(node, parts)
        group = groups.get(key)
        if group is None:
            groups[key] = _Group(node, parts)
        else:
            group.add(node)
    entries: list[tuple[int, int, list[str]]] = [
        (Verdict(key[0]).severity, len(group.names), group.lines(key[0], width)) for key, group in groups.items()]
    if unrun:
        text = resume or "not run: the run was interrupted"
        entries.append((Verdict.ERROR.severity, len(unrun),
                        [f"{Verdict.ERROR.value:5} {folded_brief(unrun)}  {text}"]))
    entries.sort(key=lambda entry: (-entry[0], -entry[1]))
    return [line for _severity, _count, lines in entries for line in lines]


def _passing(run: RunResult) -> Iterator[NodeResult]:
    """The run's nodes for the summary: those that need action or have a waived finding read back in full, the
    others as a stand-in of their brief (name and verdict are all their line needs: they have nothing to show)."""
    for index, brief in enumerate(node_briefs(run.nodes)):
        if brief.verdict in NEEDS_ACTION or brief.waived:
            yield run.nodes[index]
        else:
            yield NodeResult(brief.name, (Finding("", brief.verdict, ""),))


def summary_lines(run: RunResult, width: int = SUMMARY_WIDTH,
                  run_dir: Optional[Union[str, Path]] = None) -> list[str]:
    """The end-of-run terminal summary: node groups, then the cluster findings that did not pass or were waived."""
    nodes: Iterable[NodeResult] = run.nodes if isinstance(run.nodes, (tuple, list)) else _passing(run)
    lines = node_summary_lines(nodes, width, not_run_text(run, run_dir))
    for finding in run.cluster_findings:
        if finding.verdict in NEEDS_ACTION or finding.waiver is not None:
            lines.append(_shorten(f"{finding.verdict.value:5} cluster  {finding.check}: "
                                  f"{_one_line(finding.display_summary)}", width))
    return lines


def failed_hosts(run: RunResult) -> list[str]:
    """The nodes that FAILed or could not be checked (ERROR), in run order; not those an interrupt cut off (they
    are for ``--resume``, not for a repair)."""
    return [b.name for b in node_briefs(run.nodes)
            if b.verdict in (Verdict.FAIL, Verdict.ERROR) and not not_run(b)]


# Colour of a line's leading word (a node line's verdict, the run's verdict): ANSI SGR codes.
_COLOURS = {"FAIL": "1;31", "NOT_READY": "1;31", "ERROR": "1;35", "INCOMPLETE": "1;33", "WARN": "33",
            "PASS": "32", "READY": "1;32", "SKIP": "2"}


def colour_wanted(stream: TextIO, environ: Optional[Mapping[str, str]] = None) -> bool:
    """Colour only on a terminal, and never when ``NO_COLOR`` is set to anything (https://no-color.org)."""
    if (os.environ if environ is None else environ).get("NO_COLOR"):
        return False
    return _isatty(stream)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def paint(line: str) -> str:
    """``line`` with its leading verdict word coloured; any other line unchanged."""
    word = line.split(" ", 1)[0].rstrip(":")
    code = _COLOURS.get(word)
    if code is None:
        return line
    return f"\x1b[{code}m{word}\x1b[0m{line[len(word):]}"
