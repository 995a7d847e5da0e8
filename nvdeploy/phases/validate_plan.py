"""``validate --dry-run``: what a validation would run where, and how long it may take, without starting anything.

Nothing connects to a node and nothing is written: the plan is computed from the inventory, the profiles and the
chosen checks with the same function the run uses (runner/engine.py ``node_plan``), so what it lists is what the
run would send. Nodes with the same plan are folded into one host range, as the run's own lines are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from nvdeploy.checks import CHECKS
from nvdeploy.checks.registry import CLUSTER_CHECKS
from nvdeploy.config.hostrange import fold
from nvdeploy.config.inventory import Inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.runner.engine import EngineOptions, NodePlan, node_plan
from nvdeploy.transport.base import CommandSpec


@dataclass(frozen=True)
class SchedulerPlan:
    """The Slurm part of a validation: what it would do to the scheduler's state (validate's Slurm options)."""

    drain_failed: bool = False
    drain_on_error: bool = False
    resume_passed: bool = False
    maintenance_s: Optional[float] = None
    via_slurm: bool = False


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value < 120 else f"{value / 60:.0f} min"


def _node_limit(plan: NodePlan, connect_s: float) -> float:
    """The longest a node's part may take: its connection, its light batch (commands side by side, each under its
    own limit), then each heavy step and the burn-in one after the other."""
    light = max((s.timeout_s for s in plan.light), default=0.0)
    burn_in = max((s.timeout_s for s in plan.burn_in), default=0.0)
    return connect_s + light + sum(s.timeout_s for s in plan.heavy) + burn_in


def _spec_text(spec: CommandSpec) -> str:
    return f"{spec.name} ({_seconds(spec.timeout_s)})"


def plan_lines(inventory: Inventory, catalog: ProfileCatalog, options: EngineOptions, level: str,
               scheduler: SchedulerPlan = SchedulerPlan()) -> list[str]:
    """The plan as the lines ``validate --dry-run`` prints."""
    node_checks = tuple(c for c in options.checks if c in CHECKS)
    cluster_checks = [c for c in options.checks if c in CLUSTER_CHECKS and c not in CHECKS]
    groups: dict[tuple[Any, ...], tuple[list[str], NodePlan, str]] = {}
    for host in inventory.hosts:
        profile = catalog.get(host.profile or "")
        plan = node_plan(host, profile, node_checks, options)
        key = (host.connection, profile.stamp, tuple((s.name, s.display, s.timeout_s, s.sudo) for s in plan.light),
               tuple((s.name, s.display, s.timeout_s) for s in plan.heavy),
               tuple((s.name, s.timeout_s) for s in plan.burn_in), tuple(sorted(plan.no_burn_in)))
        names, _, _ = groups.setdefault(key, ([], plan, f"{host.connection}, {profile.stamp}"))
        names.append(host.name)
    total = len(inventory.hosts)
    lines = [f"validate plan (dry-run: nothing is started on any node): {total} node(s) of {inventory.cluster}, "
             f"level {level}, {len(node_checks)} node check(s), {len(cluster_checks)} cluster check(s), "
             f"forks {options.forks}"]
    longest = 0.0
    for names, plan, what in groups.values():
        limit = _node_limit(plan, options.connect_timeout_s)
        longest = max(longest, limit)
        lines.append(f"{fold(names)} ({len(names)} node(s); {what}): at most {_seconds(limit)} each")
        lines.append(f"  light batch, one round trip, side by side: {', '.join(_spec_text(s) for s in plan.light)}")
        for spec in plan.heavy:
            lines.append(f"  then heavy, alone: {_spec_text(spec)}: {spec.display}")
        if plan.burn_in:
            lines.append(f"  then the burn-in, together: {', '.join(_spec_text(s) for s in plan.burn_in)}")
        if plan.no_burn_in:
            lines.append("  burn-in checks chosen without --burn-in DURATION: not run (ERROR not_run)")
    if cluster_checks:
        lines.append(f"cluster stage, after the nodes: {', '.join(cluster_checks)} (multi-node tests run between "
                     "nodes that passed their own checks)")
    lines += _scheduler_lines(scheduler)
    waves = math.ceil(total / max(1, options.forks)) if total else 0
    budget = f"time: nodes {options.forks} at a time ({waves} wave(s)), at most {_seconds(waves * longest)} " \
             "before the cluster stage"
    if options.deadline_s:
        budget += f"; --deadline stops starting steps after {_seconds(options.deadline_s)}"
    lines.append(budget)
    lines.append("DRY-RUN: nothing was started and nothing was written; this is a plan, not a readiness verdict.")
    return lines


def _scheduler_lines(scheduler: SchedulerPlan) -> Sequence[str]:
    lines = []
    if scheduler.via_slurm:
        lines.append("Slurm: the nodes would be reached through srun job steps (--via slurm), not SSH")
    if scheduler.maintenance_s is not None:
        lines.append(f"Slurm: a maintenance reservation (flags=maint) on the nodes for "
                     f"{_seconds(scheduler.maintenance_s)}, deleted at the end")
    if scheduler.drain_failed:
        what = "FAIL and ERROR (not busy)" if scheduler.drain_on_error else "FAIL"
        lines.append(f"Slurm: nodes that {what} would be drained, with a reason naming the checks")
    if scheduler.resume_passed:
        lines.append("Slurm: nodes that PASS would be resumed, only where nvdeploy drained them")
    return lines
