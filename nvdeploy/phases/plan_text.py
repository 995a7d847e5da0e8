"""The text of a phase's plan: per node each step's outcome, its changes and commands; the dry-run's last line.

Steps are named with the words results.json uses: a step that failed is ``FAIL`` when the node proved it wrong and
``ERROR <reason>`` when it could not be decided or done (``ERROR reboot_required``), as its finding says. A change
of a multi-line value (a file's content) is a unified diff, indented under its step, as Ansible's ``--check
--diff`` shows it; a command with a multi-line argument is printed on one line in bash's ``$'...'`` quoting, so
the block keeps its indentation and the command can still be pasted.
"""

from __future__ import annotations

import difflib
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from nvdeploy.actions import StepResult, StepStatus
from nvdeploy.actions.base import Change
from nvdeploy.config.hostrange import fold
from nvdeploy.files import write_atomic
from nvdeploy.results import Finding, NodeResult, Verdict

if TYPE_CHECKING:
    from nvdeploy.phases.rollout import PhaseResult

_MARKS = {StepStatus.OK: "ok", StepStatus.CHANGED: "CHANGED", StepStatus.WOULD_CHANGE: "WOULD",
          StepStatus.SKIPPED: "skip", StepStatus.NOT_RUN: "NOT RUN"}
_INDENT = " " * 12


def step_mark(step: StepResult, finding: Optional[Finding]) -> tuple[str, str]:
    """The word a step line starts with and the reason beside the step: a failed step's are its finding's
    verdict and reason (``ERROR``, ``reboot_required``), as in results.json."""
    if step.status is not StepStatus.FAILED:
        return _MARKS[step.status], ""
    if finding is not None:
        if finding.verdict is Verdict.ERROR:
            return "ERROR", finding.reason.value if finding.reason else ""
        return finding.verdict.value, ""
    if step.reason is not None and step.reason.value != "not_run":
        return "ERROR", step.reason.value
    return "FAIL", ""


def _multiline(change: Change) -> bool:
    return "\n" in change.before or "\n" in change.after


def change_diff(change: Change) -> list[str]:
    """A change of a multi-line value as a unified diff (an absent file is /dev/null)."""
    absent_before, absent_after = change.before == "absent", change.after == "absent"
    before = [] if absent_before else change.before.splitlines()
    after = [] if absent_after else change.after.splitlines()
    return list(difflib.unified_diff(before, after, "/dev/null" if absent_before else change.item,
                                     "/dev/null" if absent_after else change.item, lineterm=""))


def _ansi_c(word: str) -> str:
    return "$'" + word.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n").replace("\t", "\\t") + "'"


def one_line_command(command: str) -> str:
    """``command`` (a shlex.join of its words) on one line: multi-line words in bash's ``$'...'`` quoting."""
    if "\n" not in command:
        return command
    try:
        words = shlex.split(command)
    except ValueError:
        return command.replace("\n", "\\n")
    return " ".join(_ansi_c(w) if "\n" in w or "\t" in w else shlex.quote(w) for w in words)


def _message(step: StepResult) -> tuple[str, list[str]]:
    """The step's message with each multi-line change named (its diff returned apart), on one line."""
    message, diffs = step.message, []
    for change in step.changes:
        if _multiline(change):
            message = message.replace(str(change), f"{change.item} (diff below)")
            diffs += change_diff(change)
    return message.replace("\n", " "), diffs


def _node_lines(result: PhaseResult, node: NodeResult, verbose: bool) -> list[str]:
    lines = []
    reach = next((f for f in node.findings if f.check in ("system.reachable", f"{result.phase}.sudo")
                  and f.verdict is not Verdict.PASS), None)
    if reach is not None:
        reason = f" ({reach.reason.value})" if reach.verdict is Verdict.ERROR and reach.reason else ""
        lines.append(f"  {reach.verdict.value:7} {reach.check}{reason}: {reach.summary}")
    findings = {f.check: f for f in node.findings}
    for step in result.steps.get(node.name, ()):
        if step.status is StepStatus.NOT_RUN and reach is not None:
            continue
        mark, reason = step_mark(step, findings.get(f"{result.phase}.{step.step}"))
        if step.status in (StepStatus.OK, StepStatus.SKIPPED) and not verbose:
            lines.append(f"  {mark:7} {step.step}")
            continue
        message, diffs = _message(step)
        lines.append(f"  {mark:7} {step.step}{f' ({reason})' if reason else ''}: {message}")
        lines += [f"{_INDENT}{line}" for line in diffs]
        if step.status is StepStatus.WOULD_CHANGE or (verbose and step.status is StepStatus.CHANGED):
            lines += [f"{_INDENT}{'would run' if not c.executed else 'ran'}: {one_line_command(c.command)}"
                      for c in step.commands if c.mutates]
        if step.status is StepStatus.FAILED and step.output:
            lines += [f"{_INDENT}| {line}" for line in step.output.splitlines()[-8:]]
    return lines


def plan_lines(result: PhaseResult, verbose: bool = False) -> list[str]:
    """Per node (identical nodes folded into host ranges): each step's outcome, changes and, for a dry-run or a
    failure, the commands that ran or would run."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for node in result.nodes:
        groups.setdefault(tuple(_node_lines(result, node, verbose)), []).append(node.name)
    out = []
    for lines, names in groups.items():
        out.append(f"{fold(names)}:")
        out.extend(lines)
    return out


def write_plan(result: PhaseResult, run_dir: Path) -> Path:
    """``<phase>-plan.txt`` in the run folder: every node's steps and commands (the dry-run's deliverable)."""
    path = run_dir / f"{result.phase}-plan.txt"
    write_atomic(path, ("\n".join(plan_lines(result, verbose=True)) + "\n").encode("utf-8"))
    return path


def dry_run_line(phases: Sequence[PhaseResult]) -> str:
    """The last line of a dry-run: what would change and what would be left alone, never a verdict (a node with
    nothing to change may still be broken: only a validation says READY)."""
    counts = {s: 0 for s in StepStatus}
    changing: set[str] = set()
    unplanned: list[str] = []
    failing: list[str] = []
    nodes: set[str] = set()
    for phase in phases:
        for node in phase.nodes:
            nodes.add(node.name)
            steps = phase.steps.get(node.name, ())
            for step in steps:
                counts[step.status] += 1
            if any(s.status is StepStatus.WOULD_CHANGE for s in steps):
                changing.add(node.name)
            if node.verdict is Verdict.ERROR:
                unplanned.append(node.name)
            elif node.verdict is Verdict.FAIL:
                failing.append(node.name)
    alone = len(nodes) - len(changing | set(unplanned) | set(failing))
    text = (f"DRY-RUN: {counts[StepStatus.WOULD_CHANGE]} step(s) would change {len(changing)} node(s); "
            f"{counts[StepStatus.OK]} step(s) already as wanted and {counts[StepStatus.SKIPPED]} skipped would be "
            f"left alone ({alone} node(s) with nothing to change). Nothing was changed; this is a plan, not a "
            "readiness verdict")
    if failing:
        text += f". A step would FAIL on {len(failing)} node(s): {fold(sorted(failing))}"
    if unplanned:
        text += f". {len(unplanned)} node(s) could not be planned (ERROR): {fold(sorted(unplanned))}"
    return text + "."


__all__ = ["change_diff", "dry_run_line", "one_line_command", "plan_lines", "step_mark", "write_plan"]
