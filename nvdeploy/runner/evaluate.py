"""One node's collected outputs to findings: parse the facts, run the checks (pure, so it may run in another process).

A fleet run spends most of its controller CPU here (the ``nvidia-smi -q -x`` document alone is ~136 KB per 8-GPU
node), under one GIL with the transports, the journal and the spool. :class:`ProcessEvaluator` runs it in worker
processes, so a controller with more than one core uses them; :func:`evaluate` is the same work in the caller's
thread, which small runs keep (a worker process costs its start and the pickling of each node's outputs).
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence

from nvdeploy.checks import CHECKS, Check, NodeContext
from nvdeploy.checks.firmware_consistency import MUST_MATCH_FACT as FIRMWARE_MUST_MATCH
from nvdeploy.checks.heavy_gate import HeavySkip, compute_processes, skip_for
from nvdeploy.checks.nvlink_domain import FABRIC_CHECK, tray_fact
from nvdeploy.checks.nvlink_domain import FACT as DOMAIN_FACT
from nvdeploy.checks.rdma import RAILS_CHECK
from nvdeploy.checks.rdma import RAILS_FACT as GPUDIRECT_RAILS
from nvdeploy.config.profiles import Profile
from nvdeploy.parsers.facts import node_facts, summary_facts
from nvdeploy.results import CommandResult, ErrorReason, Finding, Remediation, Verdict


@dataclass(frozen=True)
class EvaluationJob:
    """Everything the checks of one node may look at (picklable: it crosses to a worker process)."""

    node: str
    host_vars: Mapping[str, Any]
    profile: Profile
    results: tuple[CommandResult, ...]
    evidence: Mapping[str, str]
    check_ids: tuple[str, ...]
    skipped: Mapping[str, HeavySkip] = field(default_factory=dict)


@dataclass(frozen=True)
class Evaluation:
    findings: tuple[Finding, ...]
    facts: dict[str, Any]


# How one check is run on a node: the check itself here; ``nvdeploy parse`` narrows a pasted piece's checks to
# what the piece shows (cli/commands/parse_fragment.py).
Judge = Callable[[Check, NodeContext], Sequence[Finding]]


def _run(check: Check, ctx: NodeContext) -> Sequence[Finding]:
    return check(ctx)


def evaluate(job: EvaluationJob, *, given: Optional[Mapping[str, Any]] = None,
             judge: Judge = _run) -> Evaluation:
    """The node's findings, one check after the other, and the facts kept for the reports. ``given`` facts replace
    those parsed from the results (a pasted ``-q`` text or CSV, which no collector prints), ``judge`` runs each
    check; both only for ``nvdeploy parse``, which judges a capture through this same path."""
    by_name = {r.name: r for r in job.results}
    facts = {**node_facts(by_name), **(given or {})}
    ctx = NodeContext(job.node, job.host_vars, job.profile, by_name, facts, dict(job.evidence))
    stamp = job.profile.stamp
    findings: list[Finding] = []
    for check_id in job.check_ids:
        check = CHECKS[check_id]
        skip = skip_for(check.collectors, job.skipped)
        if skip is not None:
            findings.append(Finding(check_id, Verdict.ERROR, skip.summary, node=job.node, reason=skip.reason,
                                    profile=stamp))
            continue
        try:
            findings.extend(judge(check, ctx))
        except Exception as exc:  # noqa: BLE001 - a check bug is ERROR on that check, not a crash
            findings.append(Finding(check_id, Verdict.ERROR, f"check crashed: {type(exc).__name__}: {exc}",
                                    node=job.node, reason=ErrorReason.UNPARSEABLE,
                                    remediation=Remediation.INVESTIGATE, profile=stamp))
    summary = summary_facts(facts)
    if job.profile.nvlink_domain is not None and FABRIC_CHECK in job.check_ids and facts.get("smi") is not None:
        # The tray's NVLink domain(s) and the domain's size, for nvlink.domain in the cluster stage.
        summary[DOMAIN_FACT] = tray_fact(facts["smi"], job.profile.nvlink_domain)
    must_match = (job.profile.extra.get("firmware") or {}).get("must_match")
    if must_match and "firmware" in summary:
        summary[FIRMWARE_MUST_MATCH] = list(must_match)  # for firmware.consistency in the cluster stage
    if RAILS_CHECK in job.check_ids and facts.get("rails") is not None and facts["rails"].rails:
        summary[GPUDIRECT_RAILS] = facts["rails"].to_dict()  # each GPU's NIC, for the GPUDirect stage's rails
    if job.host_vars.get("peer_group") not in (None, ""):
        # fleet.performance judges a profile's nodes by peer group (checks/fleet.py PEER_GROUP).
        summary["peer_group"] = str(job.host_vars["peer_group"])
    processes = compute_processes(by_name, facts)
    if processes is not None:
        summary["compute_processes"] = processes  # what the busy guard saw, in results.json
    return Evaluation(tuple(findings), summary)


class Evaluator(Protocol):
    def __call__(self, job: EvaluationJob) -> Evaluation: ...

    def close(self) -> None: ...


class InlineEvaluator:
    """Evaluates in the calling thread."""

    def __call__(self, job: EvaluationJob) -> Evaluation:
        return evaluate(job)

    def close(self) -> None:
        pass


PARENT_POLL_S = 0.5


def _worker_init() -> None:
    # Ctrl-C reaches the whole foreground process group: the run's own handler decides what stops, and a worker
    # that died of the signal would break the pool under the nodes still finishing.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A worker holds both ends of its own call queue, so a run killed outright (SIGKILL, the OOM killer) would
    # leave it waiting on that queue forever: it leaves when it is orphaned.
    threading.Thread(target=_leave_with, args=(os.getppid(),), name="nvd-eval-parent", daemon=True).start()


def _leave_with(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(1)


class ProcessEvaluator:
    """Evaluates in a pool of worker processes; falls back to the calling thread if the pool breaks.

    Workers are spawned, not forked: the run is multi-threaded by then, and a fork copies locks other threads hold.
    (Not from multiprocessing's fork server either: its workers keep it alive, so a worker could not tell that
    the run was killed from its parent leaving.) A spawned worker imports the caller's ``__main__`` again, as
    multiprocessing does: a main script without the ``if __name__ == "__main__"`` guard breaks the pool, and the
    nodes are then evaluated in the run's process. So does a worker killed under a node (the OOM killer): that node
    and every later one are evaluated in the calling thread, so no node gets a verdict of the evaluator's making.
    """

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._pool: Optional[cf.ProcessPoolExecutor] = cf.ProcessPoolExecutor(
            max_workers=processes, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_init)
        self._lock = threading.Lock()
        self.broken: Optional[str] = None

    def __call__(self, job: EvaluationJob) -> Evaluation:
        pool = self._pool
        if pool is not None:
            try:
                return pool.submit(evaluate, job).result()
            except BrokenProcessPool as exc:
                self._fall_back(str(exc) or "a worker process died")
            except Exception:  # noqa: BLE001 - whatever it was, the thread's answer stands
                # Submitted after close(), cancelled by it, a job pickle refused, or the evaluation's own error:
                # evaluated here, a node gets what the run's process says (the same error, if it was one).
                pass
        return evaluate(job)

    def _fall_back(self, why: str) -> None:
        with self._lock:
            if self.broken is None:
                self.broken = why
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


# Below this many nodes the in-thread evaluation is kept: spawning a worker (~0.3 s of imports) costs more than
# the second core gives back on a run of a few seconds.
PROCESS_MIN_NODES = 200


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def auto_processes(nodes: int, cores: Optional[int] = None) -> int:
    """Worker processes for a run of ``nodes``: none for a small run or a one-core controller; else one per core,
    at most 8. Not one fewer for the run's own process: it waits on the workers for much of a run (on 2 cores, 2
    workers ran 10,000 simulated nodes ~10% faster than 1), and beyond 8 the run's process is what limits."""
    cores = usable_cores() if cores is None else cores
    if nodes < PROCESS_MIN_NODES or cores < 2:
        return 0
    return min(8, cores)


def make_evaluator(processes: int) -> Evaluator:
    return ProcessEvaluator(processes) if processes > 0 else InlineEvaluator()
