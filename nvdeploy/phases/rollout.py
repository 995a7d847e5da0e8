"""Run a playbook's steps on nodes, in rolling batches: the machinery shared by install and optimize.

Per node (:class:`StepRunner`, the engine's NodeRunner with another pipeline): connect once; when a planned step
needs root, check sudo first (``sudo -n true``, or the password given); then the steps in order, each an
idempotent action (:func:`nvdeploy.actions.run_action`). A node whose step fails is not touched by the later
steps (they are ``not_run``). Each step is journaled as it ends; its commands' outputs go to the evidence folder.

Across nodes (:func:`run_phase`): ``--serial N`` or ``N%`` splits the hosts into batches run one after another
(each with the engine's bounded fan-out); when more than ``--max-fail-percent`` of a batch failed (unreachable
included), the rollout stops and every node not started is ERROR ``not_run`` with the reason.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Optional, Sequence

from nvdeploy.actions import ACTIONS, StepResult, StepStatus, run_action
from nvdeploy.actions.base import ActionContext
from nvdeploy.config.hostrange import fold
from nvdeploy.config.inventory import Host
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.config.yamlfile import ConfigError
from nvdeploy.files import OutputError, write_atomic
from nvdeploy.phases.playbook import PlannedStep, Playbook
from nvdeploy.results import CommandResult, ErrorReason, EvidenceRecord, Finding, NodeResult, Remediation, Verdict
from nvdeploy.runner.engine import EngineOptions, Interrupted, NodeRunner, error_node, make_transport, run_hosts
from nvdeploy.runner.record import RunRecorder, safe_name
from nvdeploy.transport.base import CommandSpec, Transport, TransportError

_SERIAL = re.compile(r"([1-9]\d*)(%?)")
# Steps whose plan may need a reboot that --allow-reboot grants: a node is refused before any change when one does.
REBOOTING_ACTIONS = ("node.reboot", "gpu.mig_layout")
_VERDICT = {StepStatus.OK: Verdict.PASS, StepStatus.CHANGED: Verdict.PASS, StepStatus.WOULD_CHANGE: Verdict.PASS,
            StepStatus.SKIPPED: Verdict.SKIP, StepStatus.FAILED: Verdict.FAIL, StepStatus.NOT_RUN: Verdict.ERROR}


@dataclass(frozen=True)
class PhaseOptions:
    """How a phase rolls out. ``serial``: ``None`` (all at once), ``"N"`` nodes or ``"N%"`` per batch."""

    engine: EngineOptions = field(default_factory=EngineOptions)
    serial: Optional[str] = None
    max_fail_percent: Optional[float] = None
    dry_run: bool = False
    allow_reboot: bool = False
    tags: tuple[str, ...] = ()
    skip_tags: tuple[str, ...] = ()

    def __repr__(self) -> str:  # the engine options hide the sudo password
        return (f"PhaseOptions(engine={self.engine!r}, serial={self.serial}, max_fail_percent={self.max_fail_percent},"
                f" dry_run={self.dry_run}, allow_reboot={self.allow_reboot})")


def parse_serial(value: Optional[str]) -> Optional[str]:
    """Check ``--serial``: a positive count or a percentage (1-100)."""
    if value is None:
        return None
    match = _SERIAL.fullmatch(value.strip())
    if not match or (match.group(2) and int(match.group(1)) > 100):
        raise ConfigError(f"--serial {value!r}: expected a number of nodes (10) or a percentage (1%-100%)")
    return value.strip()


def make_batches(hosts: Sequence[Host], serial: Optional[str]) -> list[list[Host]]:
    if not hosts:
        return []
    if not serial:
        return [list(hosts)]
    match = _SERIAL.fullmatch(serial)
    assert match is not None
    count = int(match.group(1))
    size = max(1, math.ceil(len(hosts) * count / 100)) if match.group(2) else count
    return [list(hosts[i : i + size]) for i in range(0, len(hosts), size)]


def become(host: Host) -> bool:
    """Whether root commands go through sudo: yes, unless ``sudo: false`` or already root."""
    if host.vars.get("sudo") is False:
        return False
    if host.connection == "ssh" and host.get("ssh_user") == "root":
        return False
    return not (host.connection == "local" and os.geteuid() == 0)


def step_verdict(result: StepResult) -> Verdict:
    """The verdict of a step's finding: a failure with a reason is ERROR (timeout, sudo, lost connection, a reboot
    nvdeploy may not do), not a proven fault."""
    if result.status is StepStatus.FAILED and result.reason is not None and result.reason is not ErrorReason.NOT_RUN:
        return Verdict.ERROR
    return _VERDICT[result.status]


def step_finding(phase: str, result: StepResult, node: str, evidence: Optional[str] = None,
                 profile: str = "") -> Finding:
    verdict = step_verdict(result)
    remediation = Remediation.NONE
    if result.status is StepStatus.FAILED:
        remediation = Remediation.TUNE if phase == "optimize" else Remediation.INVESTIGATE
        if result.reason is ErrorReason.REBOOT_REQUIRED:
            remediation = Remediation.REBOOT
    reason = result.reason if verdict is Verdict.ERROR else None
    if result.status is StepStatus.NOT_RUN:
        reason = result.reason or ErrorReason.NOT_RUN
    return Finding(f"{phase}.{result.step}", verdict, f"{result.name}: {result.message}", node=node,
                   observed=result.status.value, reason=reason, remediation=remediation, evidence=evidence,
                   profile=profile)


class PhaseRecorder(RunRecorder):
    """Writes into another recorder's run folder and journal; evidence under ``evidence/<node>/<label>/``."""

    def __init__(self, parent: RunRecorder, label: str) -> None:  # noqa: D107 - the parent owns the files
        self.run_dir = parent.run_dir
        self._lock = parent._lock  # noqa: SLF001
        self._journal = parent._journal  # noqa: SLF001
        self.label = label

    def write_evidence(self, node: str, results: Sequence[CommandResult]) -> list[EvidenceRecord]:
        # _inside checks the node's folder (evidence/<node>); the label is one safe_name() below it.
        folder = self._inside(self.run_dir / "evidence" / safe_name(node)) / safe_name(self.label)
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"cannot create {folder}: {exc.strerror or exc}") from None
        records = []
        for result in results:
            out_path = folder / f"{safe_name(result.name)}.out"
            write_atomic(out_path, result.stdout, durable=False)
            if result.stderr:
                write_atomic(folder / f"{safe_name(result.name)}.err", result.stderr, durable=False)
            records.append(EvidenceRecord(
                collector=result.name, command=result.command, path=str(out_path.relative_to(self.run_dir)),
                rc=result.rc, bytes_total=result.stdout_total or len(result.stdout), truncated=result.truncated,
                sha256=hashlib.sha256(result.stdout).hexdigest(), duration_s=round(result.duration_s, 3),
                error=(result.error.value + (f": {result.error_detail}" if result.error_detail else ""))
                if result.error else None))
        return records

    def node_done(self, node: NodeResult) -> None:
        self.journal({"type": "phase_node", "phase": self.label, "node": node.to_dict()})

    def close(self) -> None:
        """The parent recorder closes the journal."""


class StepRunner(NodeRunner):
    """One node's steps of one phase (connect, sudo check, steps); an interrupt closes its transport."""

    def __init__(self, catalog: ProfileCatalog, phase: str, plans: Mapping[str, list[PlannedStep]],
                 options: PhaseOptions, recorder: RunRecorder, deadline_at: Optional[float],
                 steps_out: dict[str, list[StepResult]]) -> None:
        super().__init__(catalog, options.engine, recorder, deadline_at)
        self.phase = phase
        self.plans = plans
        self.popts = options
        self.steps_out = steps_out

    def _swap(self, host: Host, transport: Transport) -> None:
        with self._lock:
            self._active[host.name] = transport

    def _run(self, host: Host, started: float) -> NodeResult:
        plan = self.plans[host.name]
        if self.stopping.is_set():
            return self._not_started(host, plan, "run interrupted", ErrorReason.INTERRUPTED)
        remaining = self._remaining()
        if remaining is not None and remaining <= 0:
            return self._not_started(host, plan, "the global --deadline passed", ErrorReason.NOT_RUN)
        profile = self.catalog.get(host.profile or "")
        transport = make_transport(host, self.catalog, self.options)
        self._swap(host, transport)
        results: list[StepResult] = []
        ctx: Optional[ActionContext] = None
        try:
            try:
                transport.connect()
            except TransportError as exc:
                reason = ErrorReason.INTERRUPTED if self.stopping.is_set() else exc.reason
                node = error_node(host, "system.reachable", exc.detail, reason, time.monotonic() - started,
                                  Remediation.INVESTIGATE)
                return self._with_steps(node, host, plan, f"node unreachable: {exc.detail}", reason)
            connected = time.monotonic() - started
            findings = [Finding("system.reachable", Verdict.PASS, f"connected over {host.connection} in "
                                f"{connected:.2f} s", node=host.name, observed=round(connected, 3), unit="s")]

            def reconnect() -> Transport:
                old = ctx.transport if ctx is not None else transport
                old.close()
                fresh = make_transport(host, self.catalog, self.options)
                self._swap(host, fresh)
                if self.stopping.is_set():
                    raise TransportError(ErrorReason.INTERRUPTED, "run interrupted")
                fresh.connect()
                return fresh

            ctx = ActionContext(host, profile, transport, dry_run=self.popts.dry_run, become=become(host),
                                allow_reboot=self.popts.allow_reboot or bool(host.get("allow_reboot")), facts={},
                                reconnect=reconnect, remaining=self._remaining, stopping=self.stopping.is_set,
                                sleep=self.stopping.wait)
            sudo_problem = self._check_sudo(ctx, plan)
            if sudo_problem is not None:
                findings.append(sudo_problem)
                node = NodeResult(host.name, tuple(findings), address=host.address, profile=profile.stamp,
                                  connection=host.connection, duration_s=time.monotonic() - started)
                return self._with_steps(node, host, plan, "sudo does not work on this node", ErrorReason.SUDO)
            results = self._steps(ctx, host, plan)
        finally:
            (ctx.transport if ctx is not None else transport).close()
            with self._lock:
                self._active.pop(host.name, None)
        evidence = self.recorder.write_evidence(host.name, ctx.results) if ctx.results else []
        by_name = {e.collector: e.path for e in evidence}
        for result in results:
            failing = next((c.name for c in reversed(result.commands) if c.executed and c.name in by_name
                            and (c.rc != 0 or c.error)), None) if result.status is StepStatus.FAILED else None
            findings.append(step_finding(self.phase, result, host.name, by_name.get(failing) if failing else None,
                                         profile.stamp))
        self.steps_out[host.name] = results
        facts = {"phase": self.phase, "changed": sum(r.status is StepStatus.CHANGED for r in results),
                 "would_change": sum(r.status is StepStatus.WOULD_CHANGE for r in results),
                 "failed_step": next((r.step for r in results if r.status is StepStatus.FAILED), None)}
        facts.update({k: ctx.facts[k] for k in ("os_name", "kernel") if k in ctx.facts})
        return NodeResult(host.name, tuple(findings), address=host.address, profile=profile.stamp,
                          connection=host.connection, duration_s=time.monotonic() - started, evidence=tuple(evidence),
                          facts=facts)

    def _check_sudo(self, ctx: ActionContext, plan: list[PlannedStep]) -> Optional[Finding]:
        needs_root = any(p.skip is None and ACTIONS[p.step.action].mutates for p in plan)
        if not needs_root or not ctx.become:
            return None
        result = ctx.transport.run_batch([CommandSpec("sudo_check", ("true",), 30, sudo=True)], self._remaining())[0]
        if result.ok:
            return None
        text = (result.err_text or result.text).strip().splitlines()
        detail = text[0] if text else (result.error_detail or f"exit {result.rc}")
        if "password is required" in result.err_text:
            detail = "sudo requires a password and none was given (set NVDEPLOY_SUDO_PASSWORD or --ask-sudo-pass)"
        elif "incorrect password" in result.err_text or "Sorry, try again" in result.err_text:
            detail = "sudo refused the password"
        return Finding(f"{self.phase}.sudo", Verdict.ERROR, f"sudo failed: {detail}", node=ctx.host.name,
                       reason=result.error or ErrorReason.SUDO, remediation=Remediation.INVESTIGATE)

    def _reboot_refused(self, ctx: ActionContext, host: Host, plan: list[PlannedStep]) -> Optional[list[StepResult]]:
        """The node's steps refused before any change when their plan needs a reboot that --allow-reboot does not
        grant (else None): a driver change under a loaded module would otherwise be installed, left unloaded,
        and the rest of the steps not run. The plan is the dry-run's, on the same connection (probes only)."""
        if ctx.dry_run or ctx.allow_reboot or not any(p.skip is None and p.step.action in REBOOTING_ACTIONS
                                                      for p in plan):
            return None
        check = ctx.planning()
        refusal: Optional[StepResult] = None
        for planned in plan:
            if planned.skip is not None:
                continue
            result = run_action(ACTIONS[planned.step.action], check, planned.step.id, planned.step.name,
                                planned.params)
            if result.status is StepStatus.FAILED:
                refusal = result if result.reason is ErrorReason.REBOOT_REQUIRED else None
                break
        if refusal is None:
            return None
        why = refusal.message.split("the run would stop here: ", 1)[-1]
        results = []
        for planned in plan:
            step = planned.step
            if planned.skip is not None:
                results.append(StepResult(step.id, step.name, step.action, StepStatus.SKIPPED, planned.skip))
            elif step.id == refusal.step:
                results.append(StepResult(step.id, step.name, step.action, StepStatus.FAILED,
                                          f"refused before any change: the plan needs it: {why}",
                                          reason=ErrorReason.REBOOT_REQUIRED))
            else:
                results.append(StepResult(step.id, step.name, step.action, StepStatus.NOT_RUN,
                                          f"not run: the plan needs a reboot (step {refusal.step}) that "
                                          "--allow-reboot does not grant; nothing was changed"))
        for result in results:
            self.recorder.journal({"type": "step", "phase": self.phase, "node": host.name, **result.to_dict()})
        return results

    def _steps(self, ctx: ActionContext, host: Host, plan: list[PlannedStep]) -> list[StepResult]:
        refused = self._reboot_refused(ctx, host, plan)
        if refused is not None:
            return refused
        results: list[StepResult] = []
        failed: Optional[str] = None
        for planned in plan:
            step = planned.step
            remaining = self._remaining()
            if self.stopping.is_set():
                result = StepResult(step.id, step.name, step.action, StepStatus.NOT_RUN, "not run: run interrupted",
                                    reason=ErrorReason.INTERRUPTED)
            elif failed is not None:
                result = StepResult(step.id, step.name, step.action, StepStatus.NOT_RUN,
                                    f"not run: step {failed} failed on this node")
            elif remaining is not None and remaining <= 0:
                result = StepResult(step.id, step.name, step.action, StepStatus.NOT_RUN,
                                    "not run: the global --deadline passed")
            elif planned.skip is not None:
                result = StepResult(step.id, step.name, step.action, StepStatus.SKIPPED, planned.skip)
            else:
                result = run_action(ACTIONS[step.action], ctx, step.id, step.name, planned.params)
                if result.status is StepStatus.FAILED:
                    failed = step.id
            results.append(result)
            self.recorder.journal({"type": "step", "phase": self.phase, "node": host.name, **result.to_dict()})
        return results

    def _with_steps(self, node: NodeResult, host: Host, plan: list[PlannedStep], why: str,
                    reason: Optional[ErrorReason]) -> NodeResult:
        """A node none of whose steps ran: each step not_run with ``why``."""
        results = [StepResult(p.step.id, p.step.name, p.step.action,
                              StepStatus.SKIPPED if p.skip else StepStatus.NOT_RUN,
                              p.skip or f"not run: {why}", reason=None if p.skip else reason) for p in plan]
        self.steps_out[host.name] = results
        extra = [step_finding(self.phase, r, host.name) for r in results]
        return replace(node, findings=node.findings + tuple(extra), facts={"phase": self.phase, "changed": 0})

    def _not_started(self, host: Host, plan: list[PlannedStep], why: str, reason: ErrorReason) -> NodeResult:
        node = error_node(host, "system.reachable", f"not started: {why}", reason)
        return self._with_steps(node, host, plan, why, reason)


@dataclass(frozen=True)
class PhaseResult:
    """One phase over the cluster: node results (one finding per step), step details, how the rollout went."""

    phase: str
    playbook: str
    playbook_version: str
    dry_run: bool
    nodes: tuple[NodeResult, ...]
    steps: Mapping[str, tuple[StepResult, ...]]
    batches: tuple[tuple[str, ...], ...] = ()
    stopped: Optional[str] = None
    interrupted: bool = False
    interrupt_code: int = 130
    duration_s: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        counts = {s.value: 0 for s in StepStatus}
        for results in self.steps.values():
            for result in results:
                counts[result.status.value] += 1
        return counts

    @property
    def failed_nodes(self) -> list[str]:
        return [n.name for n in self.nodes if n.verdict in (Verdict.FAIL, Verdict.ERROR)]

    def summary(self) -> str:
        """One line in the vocabulary of results.json: a failed step is FAIL, or ERROR with its reason."""
        counts = self.counts()
        nodes = len(self.nodes)
        failed = len(self.failed_nodes)
        verb = "would change" if self.dry_run else "changed"
        changed = counts["would_change"] if self.dry_run else counts["changed"]
        broken = [r for results in self.steps.values() for r in results if r.status is StepStatus.FAILED]
        errors = [r for r in broken if step_verdict(r) is Verdict.ERROR]
        reasons = sorted({r.reason.value for r in errors if r.reason is not None})
        text = (f"{self.phase}{' (dry-run)' if self.dry_run else ''}: {nodes} node(s), {changed} {verb}, "
                f"{counts['ok']} ok, {counts['skipped']} skipped, {len(broken) - len(errors)} FAIL, "
                f"{len(errors)} ERROR{' (' + ', '.join(reasons) + ')' if reasons else ''}, "
                f"{counts['not_run']} not run; {failed} node(s) with FAIL or ERROR")
        if self.stopped:
            text += f"; {self.stopped}"
        if self.interrupted:
            text += "; interrupted"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase, "playbook": self.playbook, "playbook_version": self.playbook_version,
            "dry_run": self.dry_run, "summary": self.summary(), "counts": self.counts(),
            "failed_nodes": self.failed_nodes, "stopped": self.stopped, "interrupted": self.interrupted,
            "batches": [list(b) for b in self.batches], "duration_s": round(self.duration_s, 3),
            "nodes": [{"name": n.name, "verdict": n.verdict.value,
                       "steps": [s.to_dict() for s in self.steps.get(n.name, ())]} for n in self.nodes],
            **dict(self.extra),
        }


def run_phase(phase: str, playbook: Playbook, plans: Mapping[str, list[PlannedStep]], hosts: Sequence[Host],
              catalog: ProfileCatalog, options: PhaseOptions, recorder: RunRecorder,
              progress: Optional[Callable[[NodeResult], None]] = None) -> PhaseResult:
    """Run the planned steps on ``hosts`` in batches; the result covers every host (not started: not_run)."""
    started = time.monotonic()
    deadline_at = started + options.engine.deadline_s if options.engine.deadline_s else None
    batches = make_batches(hosts, options.serial)
    steps: dict[str, list[StepResult]] = {}
    results: dict[str, NodeResult] = {}
    stopped: Optional[str] = None
    interrupt: Optional[Interrupted] = None
    lock = threading.Lock()

    def on_result(node: NodeResult) -> None:
        with lock:
            recorder.node_done(node)
        if progress is not None:
            progress(node)

    recorder.journal({"type": "phase", "phase": phase, "playbook": playbook.path, "dry_run": options.dry_run,
                      "batches": [[h.name for h in b] for b in batches]})
    for index, batch in enumerate(batches):
        runner = StepRunner(catalog, phase, plans, options, recorder, deadline_at, steps)
        done, interrupt = run_hosts(batch, runner, options.engine.forks, on_result)
        results.update(done)
        if interrupt is not None:
            break
        failed = [h.name for h in batch if done[h.name].verdict in (Verdict.FAIL, Verdict.ERROR)]
        limit = options.max_fail_percent
        if limit is not None and index < len(batches) - 1 and failed and len(failed) * 100 / len(batch) > limit:
            stopped = (f"rollout stopped after batch {index + 1} of {len(batches)}: {len(failed)} of {len(batch)} "
                       f"node(s) failed ({fold(failed)}), more than --max-fail-percent {limit:g}")
            break
    for host in hosts:
        if host.name in results:
            continue
        runner = StepRunner(catalog, phase, plans, options, recorder, deadline_at, steps)
        why, reason = (stopped, ErrorReason.NOT_RUN) if stopped else ("run interrupted", ErrorReason.INTERRUPTED)
        node = runner._not_started(host, plans[host.name], why or "not started", reason)  # noqa: SLF001
        results[host.name] = node
        on_result(node)
    ordered = tuple(results[h.name] for h in hosts)
    return PhaseResult(phase=phase, playbook=playbook.path, playbook_version=playbook.version,
                       dry_run=options.dry_run, nodes=ordered,
                       steps={name: tuple(r) for name, r in steps.items()},
                       batches=tuple(tuple(h.name for h in b) for b in batches), stopped=stopped,
                       interrupted=interrupt is not None, interrupt_code=interrupt.exit_code if interrupt else 130,
                       duration_s=time.monotonic() - started)


__all__ = ["PhaseOptions", "PhaseRecorder", "PhaseResult", "StepRunner", "make_batches", "parse_serial", "run_phase"]
