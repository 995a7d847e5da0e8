"""Drain and resume: which scheduler action each node gets, and the reason text an operator reads in
``sinfo -R``.

The rule LBNL's NHC follows: nvdeploy resumes only nodes that nvdeploy itself drained (the reason starts with
its prefix), and only when this run ran and passed every check the reason names (a quick run never resumes a node
that DCGM failed); a node drained by someone else keeps its state and reason whatever nvdeploy found. A failed node
already drained by someone else is not re-drained either: their reason is the one that counts. Pure: the
commands are run by :func:`apply_actions` through a :class:`SlurmClient`.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Sequence

from nvdeploy.results import ErrorReason, Finding, Verdict
from nvdeploy.slurm.client import SlurmClient, SlurmError
from nvdeploy.slurm.nodes import SlurmNode

PREFIX = "nvdeploy "
# "nvdeploy 20261201T051300Z-1a2b3c: ..." (a run) or "nvdeploy node-check 20261201T0513Z: ..." (the health check).
_OURS = re.compile(r"^nvdeploy (?:node-check )?\d{8}T\d{4,6}Z?\S*:")
# Slurm stores the reason as a plain string; sinfo and NHC users expect one short line. Keep it well inside
# what every tool shows (NHC itself caps its messages similarly).
REASON_MAX = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
# Findings that say nothing against the node: it was busy, the run was interrupted, or a folder the run must use
# was not safe (a lock folder another local user made): draining for those would let any user drain a node.
_NOT_THE_NODE = (ErrorReason.BUSY, ErrorReason.INTERRUPTED, ErrorReason.LOCK)


def is_ours(reason: str, node_check_only: bool = False) -> bool:
    """The reason was set by nvdeploy (``node_check_only``: by ``nvdeploy node-check``)."""
    if node_check_only:
        return (reason or "").startswith(PREFIX + "node-check ") and bool(_OURS.match(reason))
    return bool(_OURS.match(reason or ""))


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "+".join(_short(v) for v in value[:4]) + ("+..." if len(value) > 4 else "")
    return str(value)


def _part(finding: Finding) -> str:
    observed, expected = finding.observed, finding.expected
    scalar = (int, float, str, list, tuple)
    numbers = (int, float)
    if isinstance(observed, numbers) and isinstance(expected, numbers) and not isinstance(expected, bool):
        return f"{finding.check} {_short(observed)}/{_short(expected)}"
    if isinstance(observed, scalar) and observed not in ("", [], ()):
        return f"{finding.check} {_short(observed)}"
    if finding.verdict is Verdict.ERROR and finding.reason is not None:
        return f"{finding.check} {finding.reason.value}"
    return finding.check


def build_reason(run_label: str, findings: Iterable[Finding], verdicts: Sequence[Verdict] = (Verdict.FAIL,),
                 limit: int = REASON_MAX) -> str:
    """``nvdeploy <run>: gpu.count 7/8, kmsg.xid 79`` from the findings with the given verdicts, one line,
    control characters removed, cut to ``limit`` characters (quotes and ``$`` stay: it is one argv word). Too
    long with the observed values, it names the checks alone: a later ``--resume-passed`` reads them back
    (:func:`reason_checks`)."""
    chosen = [f for f in findings if f.verdict in verdicts]
    head = f"{PREFIX}{run_label}: "
    text = _CONTROL.sub(" ", head + (", ".join(dict.fromkeys(_part(f) for f in chosen)) or "failed"))
    if len(text) > limit:
        text = _CONTROL.sub(" ", head + ", ".join(dict.fromkeys(f.check for f in chosen)))
    return text if len(text) <= limit else text[: limit - 3] + "..."


_CHECK_ID = re.compile(r"^[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+$")


def reason_checks(reason: str) -> Optional[tuple[str, ...]]:
    """The checks an nvdeploy drain reason names (``gpu.count 7/8, dcgm.diag_r2 Fail`` -> both ids), or None
    when that cannot be told: not ours, cut short (``...``), or a part that does not start with a check id."""
    match = _OURS.match(reason or "")
    if match is None:
        return None
    body = reason[match.end():].strip()
    if not body or body.endswith("..."):
        return None
    names = tuple(dict.fromkeys(part.strip().split(" ", 1)[0] for part in body.split(", ")))
    return names if names and all(_CHECK_ID.match(n) for n in names) else None


def resume_blocked(reason: str, findings: Sequence[Finding], level: str = "") -> Optional[str]:
    """Why a PASS node drained with ``reason`` must stay drained, or None when it may be resumed: this run must
    have run and passed every check the reason names (when the reason does not say which, a ``full`` run)."""
    named = reason_checks(reason)
    if named is None:
        if level == "full":
            return None
        return ("its drain reason does not name every check it failed; only a --level full run can resume it "
                f"(this run: {level or 'quick checks'})")
    verdicts: dict[str, list[Verdict]] = {}
    for finding in findings:
        verdicts.setdefault(finding.check, []).append(finding.verdict)
    not_run = [c for c in named if c not in verdicts]
    not_passed = [c for c in named if c in verdicts and not all(v is Verdict.PASS for v in verdicts[c])]
    if not (not_run or not_passed):
        return None
    parts = []
    if not_run:
        parts.append(f"this run did not run {', '.join(not_run)}")
    if not_passed:
        parts.append(f"{', '.join(not_passed)} did not PASS")
    return "; ".join(parts) + " (named in its drain reason): run the level that has " + \
        ("them" if len(not_run) + len(not_passed) > 1 else "it") + " to resume it"


@dataclass(frozen=True)
class Action:
    """One node's scheduler action: ``drain``, ``resume``, ``leave`` (nothing, with why) or ``none``."""

    node: str
    action: str
    message: str
    reason: str = ""
    status: str = "planned"          # planned, done, dry_run, failed
    command: str = ""
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "action": self.action, "message": self.message, "reason": self.reason,
                "status": self.status, "command": self.command, "error": self.error}


@dataclass(frozen=True)
class Policy:
    drain_failed: bool = False
    drain_on_error: bool = False
    resume_passed: bool = False
    # node-check resumes only what node-check drained: a node drained by a full validation (DCGM failed) must not
    # come back because the quick checks pass.
    resume_node_check_only: bool = False
    # The run's level (quick, standard, full): a resume needs every check its drain reason names to have passed
    # in this run, or a full run when the reason does not say (resume_blocked).
    level: str = ""

    @property
    def active(self) -> bool:
        return self.drain_failed or self.resume_passed


def plan_action(name: str, verdict: Verdict, findings: Sequence[Finding], slurm: Optional[SlurmNode],
                policy: Policy, run_label: str) -> Action:
    if slurm is None:
        return Action(name, "none", "not a Slurm node (or Slurm did not list it)")
    drained, reason = slurm.drained, slurm.reason
    unjudged = [f for f in findings if f.verdict is Verdict.ERROR]
    if verdict is Verdict.ERROR and unjudged and all(f.reason in _NOT_THE_NODE for f in unjudged):
        # Busy (a job holds it), interrupted, or a node folder not safe to use: nvdeploy did not look, which says
        # nothing against the node.
        return Action(name, "none", f"not judged ({', '.join(sorted({f.reason.value for f in unjudged if f.reason}))})"
                                    "; no scheduler action")
    to_drain = (verdict is Verdict.FAIL and policy.drain_failed) or (
        verdict is Verdict.ERROR and policy.drain_failed and policy.drain_on_error)
    if to_drain:
        if drained and not is_ours(reason, policy.resume_node_check_only):
            return Action(name, "leave", f"left drained: reason set by someone else ({slurm.reason_user or '?'}: "
                                         f"{reason})")
        bad = (Verdict.FAIL, Verdict.ERROR) if verdict is Verdict.ERROR else (Verdict.FAIL,)
        new_reason = build_reason(run_label, findings, bad)
        return Action(name, "drain", "drained by this run", new_reason)
    if verdict is Verdict.PASS and policy.resume_passed:
        if not drained:
            return Action(name, "none", f"passed; not drained ({slurm.short_state})")
        if not is_ours(reason, policy.resume_node_check_only):
            who = "a full nvdeploy validation" if is_ours(reason) else "someone else"
            return Action(name, "leave", f"left drained: reason set by {who} ({slurm.reason_user or '?'}: "
                                         f"{reason})")
        blocked = resume_blocked(reason, findings, policy.level)
        if blocked:
            return Action(name, "leave", f"left drained: {blocked} ({reason})")
        return Action(name, "resume", f"resumed: passed, drained earlier by nvdeploy ({reason})")
    if drained and not is_ours(reason):
        return Action(name, "leave", f"left drained: reason set by someone else ({reason})")
    return Action(name, "none", f"{verdict.value}; no scheduler action asked for")


def plan_actions(nodes: Iterable[Any], slurm_nodes: Mapping[str, SlurmNode], policy: Policy,
                 run_label: str) -> list[Action]:
    """``nodes``: NodeResults (name, verdict, findings)."""
    return [plan_action(n.name, n.verdict, n.findings, slurm_nodes.get(n.name), policy, run_label) for n in nodes]


def command_of(action: Action) -> list[str]:
    if action.action == "drain":
        return ["scontrol", "update", f"nodename={action.node}", "state=drain", f"reason={action.reason}"]
    if action.action == "resume":
        return ["scontrol", "update", f"nodename={action.node}", "state=resume"]
    return []


def apply_actions(actions: Sequence[Action], client: SlurmClient) -> list[Action]:
    """Run each drain/resume; one failure does not stop the others, and each keeps Slurm's message."""
    from dataclasses import replace

    out = []
    for action in actions:
        argv = command_of(action)
        if not argv or action.status == "done":  # done already (a node resumed for the run inside its reservation)
            out.append(action)
            continue
        command = shlex.join(argv)
        if client.dry_run:
            client.printed.append(command)
            out.append(replace(action, status="dry_run", command=command, message=f"dry-run: would {action.action}"))
            continue
        try:
            if action.action == "drain":
                client.drain(action.node, action.reason)
            else:
                client.resume(action.node)
            out.append(replace(action, status="done", command=command))
        except SlurmError as exc:
            out.append(replace(action, status="failed", command=command, error=exc.message))
    return out
