"""A validation run in Slurm's terms: before it, the maintenance reservation and the busy nodes; after it, the
Slurm facts and ``slurm.gres`` findings on each node, drain/resume, the reservation deleted, and every scheduler
action recorded in results.json (``phases[]`` entry ``slurm``) and the report.

A scheduler step that could not be completed (slurmctld gone after validation) is a cluster finding
``slurm.actions`` ERROR and makes the exit status 3: a half-done drain is never silent.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional

from nvdeploy.config.inventory import Host, Inventory
from nvdeploy.results import ErrorReason, ExitCode, Finding, NodeResult, Remediation, Verdict
from nvdeploy.slurm import reservation as resv
from nvdeploy.slurm.client import SlurmClient, SlurmError
from nvdeploy.slurm.drain import Action, Policy, apply_actions, plan_actions
from nvdeploy.slurm.findings import gres_finding
from nvdeploy.slurm.journal import SchedulerJournal
from nvdeploy.slurm.nodes import SlurmNode, node_from_facts
from nvdeploy.slurm.source import FACTS_VAR

ACTIONS_CHECK = "slurm.actions"
BUSY_VAR = "slurm_busy"
BUSY_REASON_VAR = "slurm_busy_reason"  # the heavy checks' ERROR reason there: busy, or not_run (jobs unknown)
HEAVY_LEVELS = ("standard", "full")
REOPEN_WAIT_S = 60.0


@dataclass(frozen=True)
class SlurmRunOptions:
    policy: Policy = Policy()
    dry_run: bool = False
    maintenance_s: Optional[float] = None
    wait_drain_s: float = 0.0
    allow_busy: bool = False
    via: str = "ssh"
    timeout_s: float = 30.0

    @property
    def needs_slurm(self) -> bool:
        return self.policy.active or self.maintenance_s is not None or self.via == "slurm"


def slurm_nodes_of(inventory: Inventory) -> dict[str, SlurmNode]:
    return {h.name: node_from_facts(h.name, h.vars[FACTS_VAR]) for h in inventory.hosts
            if isinstance(h.vars.get(FACTS_VAR), dict)}


def with_facts(inventory: Inventory, nodes: dict[str, SlurmNode], extra: Optional[dict[str, dict]] = None
               ) -> Inventory:
    """The inventory with fresh Slurm facts (and ``extra`` vars) in each listed host's variables."""
    hosts = []
    for host in inventory.hosts:
        values = dict(host.vars)
        if host.name in nodes:
            values[FACTS_VAR] = nodes[host.name].to_dict()
        values.update((extra or {}).get(host.name, {}))
        hosts.append(replace(host, vars=values) if values != dict(host.vars) else host)
    return replace(inventory, hosts=tuple(hosts))


@dataclass
class SlurmWindow:
    inventory: Inventory
    options: SlurmRunOptions
    client: SlurmClient
    echo: Callable[[str], None] = lambda text: None
    reservation: Optional[resv.Reservation] = None
    notes: list[str] = field(default_factory=list)
    busy: dict[str, str] = field(default_factory=dict)
    # --via slurm in a maintenance reservation: nodes nvdeploy drained earlier are resumed INSIDE the reservation
    # (only this run can start jobs there) so the step can reach them; node -> the reason they had.
    reopened: dict[str, str] = field(default_factory=dict)
    # Every change is written here first (slurm-state.json in the run folder): whatever ends the run, the
    # scheduler can be put back (journal.recover). None: nothing is changed (dry-run) or nothing is kept.
    journal: Optional[SchedulerJournal] = None

    @property
    def names(self) -> list[str]:
        return [h.name for h in self.inventory.hosts]

    def _refresh(self) -> dict[str, SlurmNode]:
        wanted = set(self.names)
        return {n.name: n for n in self.client.nodes() if n.name in wanted}

    def open(self, run_id: str, level: str) -> Inventory:
        """Before the run: facts for every node, the reservation, the wait for jobs, the busy guard.
        Raises SlurmError (the CLI exits 2: nothing was touched yet)."""
        known = slurm_nodes_of(self.inventory)
        nodes = self._refresh() if self.options.needs_slurm or not known else known
        missing = [n for n in self.names if n not in nodes]
        if missing and (self.options.policy.active or self.options.maintenance_s is not None
                        or self.options.via == "slurm"):
            raise SlurmError(["sinfo"], f"Slurm knows no node {', '.join(missing[:5])}"
                             f"{' ...' if len(missing) > 5 else ''} of the inventory")
        if self.journal is not None:
            self.journal.begin([nodes[n] for n in self.names if n in nodes])
        if self.options.maintenance_s is not None:
            if self.journal is not None:
                self.journal.will_reserve(resv.reservation_name(run_id))
            self.reservation = resv.create(self.client, run_id, self.names, self.options.maintenance_s)
            self.echo(f"slurm: reservation {self.reservation.name} (flags=maint) on {len(self.names)} node(s)"
                      + (" [dry-run]" if self.options.dry_run else ""))
            if self.options.wait_drain_s > 0 and not self.options.dry_run:
                started = time.monotonic()
                left = resv.wait_for_jobs(self.client, self.names, self.options.wait_drain_s)
                self.notes.append(f"waited {time.monotonic() - started:.0f} s for running jobs; "
                                  f"{len(left)} node(s) still had jobs")
                nodes = self._refresh()
            if (self.options.via == "slurm" and self.options.policy.resume_passed and self.reservation.created):
                nodes = self._reopen(nodes)
        unknown: dict[str, str] = {}
        if level in HEAVY_LEVELS and not self.options.allow_busy:
            jobs: Optional[dict[str, list[str]]]
            try:
                jobs = self.client.jobs_on([n for n, node in nodes.items() if node.busy])
            except SlurmError as exc:
                jobs, unread = None, exc.message
            for name, node in nodes.items():
                if not node.busy:
                    continue
                if jobs is None and node.drained:
                    # A draining node counts as empty only when squeue says so: a job list that could not be read
                    # is unknown, and unknown is never idle (as the compute-apps guard has it).
                    unknown[name] = (f"could not tell whether Slurm jobs still run on the node (node "
                                     f"{node.short_state}; squeue: {unread}); heavy checks not run")
                elif not (node.drained and not (jobs or {}).get(name)):
                    held = ", ".join((jobs or {}).get(name, [])) or f"{node.alloc_cpus} CPUs allocated"
                    self.busy[name] = f"Slurm job(s) running: {held} (node {node.short_state}); heavy checks not run"
            self.busy.update(unknown)
        extra = {n: {BUSY_VAR: text, **({BUSY_REASON_VAR: ErrorReason.NOT_RUN.value} if n in unknown else {})}
                 for n, text in self.busy.items()}
        return with_facts(self.inventory, nodes, extra)

    def _reopen(self, nodes: dict[str, SlurmNode]) -> dict[str, SlurmNode]:
        from nvdeploy.slurm.drain import is_ours

        for name, node in nodes.items():
            if node.drained and is_ours(node.reason) and not node.busy:
                if self.journal is not None:
                    self.journal.will_reopen(name, node.reason)
                self.reopened[name] = node.reason
                self.client.resume(name)
        if not self.reopened:
            return nodes
        self.notes.append(f"resumed inside the reservation for validation (drained earlier by nvdeploy): "
                          f"{', '.join(self.reopened)}")
        # A resumed node can show "idle*" (not responding) until slurmd answers the controller's next ping, and
        # srun cannot allocate it then: wait for it (bounded) so one such node does not fail the whole step.
        deadline = time.monotonic() + REOPEN_WAIT_S
        while True:
            nodes = self._refresh()
            waiting = [n for n in self.reopened if "NOT_RESPONDING" in nodes[n].flags]
            if not waiting or time.monotonic() > deadline:
                return nodes
            time.sleep(1.0)

    def _settle_reopened(self, actions: list[Action], nodes: list[NodeResult]) -> list[Action]:
        """A reopened node that passed every check its old reason names stays resumed; any other is drained again
        (new or old reason)."""
        from nvdeploy.slurm.drain import resume_blocked

        findings = {n.name: n.findings for n in nodes}
        out = []
        for action in actions:
            old = self.reopened.get(action.node)
            if old is not None and action.action == "none":
                blocked = resume_blocked(old, findings.get(action.node, ()), self.options.policy.level)
                if action.message.startswith("passed") and blocked:
                    action = Action(action.node, "drain", f"drained again: {blocked}; earlier reason restored", old)
                elif action.message.startswith("passed"):
                    action = Action(action.node, "resume", f"resumed: passed, drained earlier by nvdeploy ({old})",
                                    status="done", command=f"scontrol update nodename={action.node} state=resume")
                else:
                    action = Action(action.node, "drain", "drained again: not judged PASS; earlier reason restored",
                                    old)
            out.append(action)
        return out

    def close(self) -> None:
        """Delete the reservation (safe to call twice; the CLI calls it in a finally, so Ctrl-C deletes it too)."""
        resv.delete(self.client, self.reservation)

    def finish(self, run: Any, catalog: Any, interrupted: bool) -> tuple[Any, bool]:
        """Facts, findings and scheduler actions onto ``run`` (a RunResult); returns (run, any step failed)."""
        label = run.run_id
        before = slurm_nodes_of(self.inventory)
        failed_steps: list[str] = []
        current: dict[str, SlurmNode] = {}
        if self.options.policy.active:
            try:
                current = self._refresh()  # someone may have drained a node while we validated
            except SlurmError as exc:
                failed_steps.append(f"could not read node states after validation: {exc.message}")
        nodes = []
        for node in run.nodes:
            facts_node = current.get(node.name) or before.get(node.name)
            if facts_node is None:
                nodes.append(node)
                continue
            extra: list[Finding] = []
            expected = _expected_gpus(catalog, node)
            if not any(f.check == "slurm.gres" for f in node.findings):
                extra.append(gres_finding(facts_node, expected, node.profile))
            facts = dict(node.facts)
            facts["slurm"] = facts_node.to_dict()
            nodes.append(replace(node.with_findings(extra), facts=facts))
        actions: list[Action] = []
        if self.options.policy.active:
            if failed_steps:
                if self.reopened:
                    failed_steps.append("resumed for validation and NOT drained again (they are in the reservation "
                                        f"until it ends): {', '.join(self.reopened)}")
                actions = [Action(n.name, "unknown", "not done: Slurm did not answer after validation",
                                  status="failed", error=failed_steps[0]) for n in nodes]
            else:
                planned = plan_actions(nodes, current, self.options.policy, label)
                if interrupted:
                    planned = [a if a.action not in ("drain", "resume") else
                               replace(a, action="none", message="run interrupted: no scheduler action")
                               for a in planned]
                planned = self._settle_reopened(planned, nodes)
                if self.journal is not None:
                    self.journal.will_apply(planned)
                actions = apply_actions(planned, self.client)
                failed_steps += [f"{a.action} {a.node}: {a.error}" for a in actions if a.status == "failed"]
        self.close()
        if self.reservation is not None and self.reservation.error:
            failed_steps.append(self.reservation.error)
        if self.journal is not None and not failed_steps:
            self.journal.finish()
        entry = self._entry(actions, failed_steps)
        cluster = list(run.cluster_findings)
        if failed_steps:
            cluster.append(Finding(ACTIONS_CHECK, Verdict.ERROR, "scheduler step not completed: "
                                   + "; ".join(failed_steps[:5]), reason=ErrorReason.INCOMPLETE,
                                   remediation=Remediation.INVESTIGATE))
        elif actions:
            done = sum(1 for a in actions if a.status in ("done", "dry_run"))
            cluster.append(Finding(ACTIONS_CHECK, Verdict.PASS, f"{done} scheduler action(s) "
                                   f"{'printed (dry-run)' if self.options.dry_run else 'done'}"))
        phases = tuple(run.phases) + ((entry,) if self.options.needs_slurm or self.busy else ())
        run = replace(run, nodes=tuple(nodes), cluster_findings=tuple(cluster), phases=phases)
        return run, bool(failed_steps)

    def _entry(self, actions: list[Action], failed: list[str]) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for action in actions:
            if action.action in ("drain", "resume", "leave"):
                key = {"drain": "drained", "resume": "resumed", "leave": "left drained"}[action.action]
                counts[key] = counts.get(key, 0) + 1
        parts = [f"{n} {k}" for k, n in counts.items()]
        if self.reservation is not None:
            state = "deleted" if self.reservation.deleted else ("not created (dry-run)" if self.options.dry_run
                                                               else "NOT deleted")
            parts.append(f"reservation {self.reservation.name} {state}")
        if self.busy:
            parts.append(f"{len(self.busy)} node(s) busy in Slurm (heavy checks not run)")
        summary = "Slurm: " + (", ".join(parts) if parts else "no scheduler action")
        if self.options.dry_run:
            summary += " (dry-run: the commands were printed, not run)"
        entry: dict[str, Any] = {"phase": "slurm", "summary": summary, "dry_run": self.options.dry_run,
                                 "via": self.options.via, "notes": list(self.notes),
                                 "actions": [a.to_dict() for a in actions if a.action != "none"],
                                 "busy": dict(self.busy)}
        if self.reservation is not None:
            entry["reservation"] = self.reservation.to_dict()
        if failed:
            entry["stopped"] = "Scheduler step not completed: " + "; ".join(failed[:5])
        return entry


def _expected_gpus(catalog: Any, node: NodeResult) -> Optional[int]:
    name = (node.profile or "").split("@")[0]
    try:
        return int(catalog.get(name).gpu.count)
    except Exception:  # noqa: BLE001 - no or unknown profile: nothing to compare with
        return None


def exit_code(base: int, step_failed: bool) -> int:
    """A scheduler step that did not complete makes a gate's exit 3 (interrupts keep theirs)."""
    if step_failed and base in (ExitCode.READY, ExitCode.NOT_READY):
        return int(ExitCode.INCOMPLETE)
    return base


def host_busy(host: Host) -> Optional[str]:
    value = host.vars.get(BUSY_VAR)
    return str(value) if value else None
