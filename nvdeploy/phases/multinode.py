"""Multi-node nccl-tests: mpirun from a launcher node across healthy nodes; all at once, pairwise, bisection.

Runs after every node's own checks, over the nodes that passed them, nccl-tests aside (a node already failing
another check is not a useful participant and would only blur the result). Every run records the NCCL version,
the NCCL environment and the message size next to its bandwidth. A low set becomes a cluster-level finding,
and findings on the node(s) that pairwise or bisection runs localise; a set that fails without being
localised leaves its nodes ERROR (inconclusive), never FAIL on guesswork and never PASS.

The global ``--deadline`` holds here too: no mpirun round starts after it, a round's own timeouts (mpirun's
``--timeout`` and the command's) end by it, and bisection or pairwise re-tests stop there; what they did not
finish is ERROR (not localised), never a guess.
"""

from __future__ import annotations

import concurrent.futures as cf
import statistics
import threading
import time
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Optional, Sequence

from nvdeploy.checks.nccl import Assessment, NcclExpectation, assess
from nvdeploy.collect.stage_limits import MPIRUN_GRACE_S
from nvdeploy.collect.stage_limits import NCCL_TIMEOUT_S as DEFAULT_TIMEOUT_S
from nvdeploy.config.hostrange import fold
from nvdeploy.config.inventory import Host
from nvdeploy.config.profiles import Profile, ProfileCatalog
from nvdeploy.parsers.nccl_tests import parse_nccl_tests
from nvdeploy.results import ErrorReason, Finding, NodeResult, Remediation, Verdict
from nvdeploy.runner.engine import EngineOptions, make_transport
from nvdeploy.runner.pairing import BisectLog, bisect, pair_rounds
from nvdeploy.runner.record import RunRecorder
from nvdeploy.slurm.srun import pool_of
from nvdeploy.transport.base import CommandSpec, TransportError

CHECK_ID = "nccl.multinode"
PATTERNS = ("all", "pairwise", "bisect")
DEADLINE_TEXT = "the global --deadline passed"
MESSAGE_SIZE = "8G"
# On trays of a multi-node NVLink domain (an NVL72 rack) NCCL would carry a run between trays of one rack over
# NVLink (MNNVL, NVLS), and this stage judges the inter-node network: it runs them over InfiniBand. nccl.domain
# measures the NVLink side.
INFINIBAND_ONLY = {"NCCL_MNNVL_ENABLE": "0", "NCCL_NVLS_ENABLE": "0"}


@dataclass(frozen=True)
class GroupRun:
    """One mpirun over ``nodes``: its assessments and where its output is kept."""

    nodes: tuple[str, ...]
    ok: bool
    assessments: tuple[Assessment, ...]
    evidence: Optional[str]
    busbw: Optional[float]
    # False when the round was not started because the global deadline had passed.
    started: bool = True


class DeadlinePassed(Exception):
    """A bisection step could not start: the global deadline passed."""


def round_timeouts(nccl_timeout: float, remaining: Optional[float]) -> Optional[tuple[float, float]]:
    """(mpirun --timeout, the command's timeout) for a round that has ``remaining`` seconds before the deadline;
    None when no round may start."""
    if remaining is None:
        return nccl_timeout, nccl_timeout + MPIRUN_GRACE_S
    if remaining < 2:
        return None
    grace = min(MPIRUN_GRACE_S, remaining / 4)
    mpirun = max(1.0, min(nccl_timeout, remaining - grace))
    return mpirun, min(mpirun + grace, remaining)


def multinode_expectation(profile: Profile) -> NcclExpectation:
    nccl = profile.extra.get("nccl") or {}
    if "multinode_busbw_gbps" not in nccl:
        return NcclExpectation()
    return NcclExpectation(float(nccl["multinode_busbw_gbps"]), float(nccl.get("floor_pct", 95)))


def mpirun_argv(group: Sequence[Host], gpus_per_node: int, launcher: Host, timeout_s: float,
                extra_env: Optional[Mapping[str, str]] = None, force_ring: bool = True) -> tuple[str, ...]:
    """The mpirun command line: host list from the inventory (names are validated there, so none can pass
    as an option), NCCL environment from the launcher's ``nccl_env`` (then ``extra_env``), ``--timeout`` so a
    hang ends in mpirun."""
    hosts = ",".join(f"{h.address}:{gpus_per_node}" for h in group)
    argv = ["mpirun", "--timeout", str(int(timeout_s)), "--bind-to", "none", "-np", str(gpus_per_node * len(group)),
            "-H", hosts]
    for name, value in nccl_env(group, launcher, extra_env, force_ring).items():
        argv += ["-x", f"{name}={value}"]
    if launcher.get("ssh_user") == "root":
        argv.insert(1, "--allow-run-as-root")
    return (*argv, *nccl_tool_argv(launcher))


def nccl_env(group: Sequence[Host], launcher: Host, extra: Optional[Mapping[str, str]] = None,
             force_ring: bool = True) -> dict[str, str]:
    """The ranks' NCCL environment: NCCL_DEBUG=VERSION, then the launcher's ``nccl_env`` (sorted); ``extra`` (a
    stage's own settings, e.g. multi-node NVLink on or off) wins over ``nccl_env``: it is what the stage measures.
    ``force_ring``: ``NCCL_ALGO=RING`` for a 2-node group (InfiniBand pairs; nccl.domain keeps NCCL's choice)."""
    env = {str(k): str(v) for k, v in (launcher.get("nccl_env") or {}).items()}
    env.update(extra or {})
    if len(group) == 2 and force_ring:
        # Tree algorithms report more than two nodes' links can carry: ring is the honest 2-node figure.
        env["NCCL_ALGO"] = "RING"
    return {"NCCL_DEBUG": "VERSION", **dict(sorted(env.items()))}


def nccl_tool_argv(launcher: Host) -> tuple[str, ...]:
    """all_reduce_perf with one GPU per rank at MESSAGE_SIZE."""
    tests_dir = str(launcher.get("nccl_tests_dir") or "").rstrip("/")
    program = f"{tests_dir}/all_reduce_perf" if tests_dir else "all_reduce_perf"
    return (program, "-b", MESSAGE_SIZE, "-e", MESSAGE_SIZE, "-f", "2", "-g", "1", "-c", "1")


class MultiNodeRunner:
    def __init__(self, hosts: Sequence[Host], catalog: ProfileCatalog, options: EngineOptions,
                 recorder: RunRecorder, all_hosts: Sequence[Host], deadline_at: Optional[float] = None,
                 extra_env: Optional[Mapping[str, str]] = None, expectation: Optional[NcclExpectation] = None,
                 low_bw_hint: Optional[str] = None, evidence_prefix: str = "nccl_multinode",
                 expectation_of: Optional[Callable[[int], NcclExpectation]] = None, force_ring: bool = True) -> None:
        self.hosts = {h.name: h for h in hosts}
        self.deadline_at = deadline_at
        self.catalog = catalog
        self.options = options
        self.recorder = recorder
        self.all_hosts = list(all_hosts)
        self.runs: list[GroupRun] = []
        self._lock = threading.Lock()
        self._counter = 0
        # Another stage's runs (nccl.domain): its own NCCL settings, floor, hint and evidence names.
        self.extra_env = dict(extra_env or {})
        self.expectation = expectation
        self.low_bw_hint = low_bw_hint or ("the slowest inter-node link sets the pace: check InfiniBand ports, "
                                           "cables and switches of these nodes")
        self.evidence_prefix = evidence_prefix
        # nccl.domain: a floor per group size (ranks), and NCCL's own algorithm on 2-node groups.
        self.expectation_of = expectation_of
        self.force_ring = force_ring

    def run_group(self, names: Sequence[str]) -> GroupRun:
        group = [self.hosts[n] for n in names]
        launcher = group[0]
        profile = self.catalog.get(launcher.profile or "")
        gpus = profile.gpu.count
        # One rank per GPU; fewer where the launcher says so (a node with fewer CPUs than GPUs, a test cluster).
        ranks = int(launcher.get("nccl_ranks_per_node") or gpus)
        remaining = None if self.deadline_at is None else self.deadline_at - time.monotonic()
        timeouts = round_timeouts(float(launcher.get("nccl_timeout", DEFAULT_TIMEOUT_S)), remaining)
        if timeouts is None:
            assessment = Assessment(Verdict.ERROR, f"mpirun on {fold(names)} not started: {DEADLINE_TEXT}",
                                    reason=ErrorReason.NOT_RUN)
            return self._keep(GroupRun(tuple(names), False, (assessment,), None, None, started=False))
        mpirun_timeout, command_timeout = timeouts
        pool = pool_of(launcher)
        if pool is not None:
            # --via slurm: one srun step from the controller across the group (the cluster's MPI plugin), not
            # mpirun over SSH from a launcher node.
            tool = "srun"
            result = pool.run_nccl([h.name for h in group], gpus, nccl_tool_argv(launcher),
                                   nccl_env(group, launcher, self.extra_env, self.force_ring),
                                   mpirun_timeout, command_timeout, ranks_per_node=ranks)
        else:
            tool = "mpirun"
            spec = CommandSpec("nccl_multinode", mpirun_argv(group, ranks, launcher, mpirun_timeout, self.extra_env,
                                                             self.force_ring), command_timeout)
            transport = make_transport(launcher, self.catalog, self.options, peers=self.all_hosts)
            try:
                transport.connect()
                result = transport.run_batch([spec], remaining)[0]
            except TransportError as exc:
                assessment = Assessment(Verdict.ERROR, f"launcher {launcher.name} unreachable: {exc.detail}",
                                        reason=exc.reason)
                return self._keep(GroupRun(tuple(names), False, (assessment,), None, None))
            finally:
                transport.close()
        with self._lock:
            self._counter += 1
            label = f"{self.evidence_prefix}_{self._counter:03d}"
        evidence = self.recorder.write_evidence("_cluster", [replace(result, name=label)])[0].path
        if result.error is not None or result.timed_out:
            assessment = Assessment(Verdict.ERROR, f"{tool} on {fold(names)} did not finish: "
                                    f"{result.error_detail or 'timed out'}", reason=result.error or ErrorReason.TIMEOUT)
            return self._keep(GroupRun(tuple(names), False, (assessment,), evidence, None))
        facts = parse_nccl_tests(result.text)
        exp = (self.expectation_of(ranks * len(group)) if self.expectation_of is not None else
               self.expectation if self.expectation is not None else multinode_expectation(profile))
        assessments = assess(facts, result, ranks=ranks * len(group), exp=exp,
                             label=f"all_reduce_perf on {fold(names)}", low_bw_hint=self.low_bw_hint)
        ok = all(a.verdict in (Verdict.PASS, Verdict.WARN) for a in assessments)
        busbw = next((a.observed for a in assessments if a.unit == "GB/s" and isinstance(a.observed, float)), None)
        return self._keep(GroupRun(tuple(names), ok, tuple(assessments), evidence, busbw))

    def _keep(self, run: GroupRun) -> GroupRun:
        with self._lock:
            self.runs.append(run)
        return run


def _cluster_finding(run: GroupRun, profile_stamp: str) -> Finding:
    worst = max(run.assessments, key=lambda a: a.verdict.severity)
    return Finding(CHECK_ID, worst.verdict, worst.summary, observed=worst.observed, expected=worst.expected,
                   unit=worst.unit, reason=worst.reason, remediation=worst.remediation, evidence=run.evidence,
                   profile=profile_stamp)


# The node's pairwise figure for fleet.performance (checks/fleet.py): the best busbw of the two-node runs it took part
# in. A synchronous pair goes at its slower member's pace, so a pair below its peers re-tests each member with a
# node of the best pair (one more run per member): the straggler stays low, its partner gets a good figure, and the
# fleet rule names the straggler alone.
PAIR_FACT = "nccl_pair_busbw_gbps"
PEER_RETEST_PCT = 3.5  # below the pairs' median by this much (fleet.performance's default warn_pct): re-tested


def run_multinode(nodes: Sequence[NodeResult], hosts: Sequence[Host], catalog: ProfileCatalog,
                  options: EngineOptions, recorder: RunRecorder, pattern: str = "bisect",
                  deadline_at: Optional[float] = None) -> tuple[list[NodeResult], list[Finding]]:
    """Run the multi-node stage; returns the nodes with their new findings and the cluster findings.

    ``all``: every healthy node at once. ``pairwise``: disjoint pairs in parallel rounds; a low pair is
    resolved against a node that passed in another pair. ``bisect``: all at once, and when that is low,
    split the set until the bad node is named.
    """
    if pattern not in PATTERNS:
        raise ValueError(f"unknown multi-node pattern {pattern!r} (known: {', '.join(PATTERNS)})")
    by_name = {h.name: h for h in hosts}
    fit = {n.name for n in nodes if _fit_to_take_part(n)}
    healthy = [h.name for h in hosts if h.name in fit]  # inventory order: the same pairs every run
    profile_names = {by_name[n].profile for n in healthy}
    if len(healthy) < 2 or len(profile_names) != 1:
        why = ("fewer than two healthy nodes" if len(healthy) < 2 else
               "the healthy nodes have different profiles; run one --limit per profile")
        return list(nodes), [Finding(CHECK_ID, Verdict.SKIP, f"multi-node nccl-tests not run: {why}")]
    profile = catalog.get(next(iter(profile_names)) or "")
    runner = MultiNodeRunner([by_name[n] for n in healthy], catalog, options, recorder, hosts, deadline_at,
                             extra_env=INFINIBAND_ONLY if profile.nvlink_domain is not None else None)
    suspects: list[str] = []
    inconclusive: list[str] = []
    not_started: list[str] = []
    stopped = False
    if pattern == "pairwise":
        suspects, inconclusive, not_started = _pairwise(runner, healthy)
        stopped = any(not r.started for r in runner.runs)
    else:
        whole = runner.run_group(healthy)
        if not whole.ok and whole.started and pattern == "bisect" and _is_bandwidth_or_data(whole):
            reference = None
            log = BisectLog()
            try:
                suspects = bisect(healthy, lambda group: _started(runner.run_group(group)).ok, reference, log)
            except DeadlinePassed:
                # Halving stopped part way: what it had narrowed down is not proof; nobody is named.
                inconclusive, stopped = healthy, True
        elif not whole.ok and whole.started:
            inconclusive = healthy
        elif not whole.started:
            not_started = healthy
    # The first round speaks for the cluster; later runs (bisection steps, re-tests against a good node) are
    # summed up in the localisation finding and kept as evidence.
    first_round = runner.runs[:1] if pattern != "pairwise" else runner.runs[:len(pair_rounds(healthy)[0])]
    cluster = [_cluster_finding(run, profile.stamp) for run in first_round]
    measured = [run for run in runner.runs if run.busbw is not None]
    summary_bits = ", ".join(f"{fold(r.nodes)}: {r.busbw:g} GB/s" for r in measured[:20])
    if suspects:
        cluster.append(Finding(CHECK_ID, Verdict.FAIL, f"multi-node all_reduce localised to {fold(suspects)} "
                               f"({len(runner.runs)} mpirun runs; {summary_bits})", observed=fold(suspects),
                               remediation=Remediation.ISOLATE, profile=profile.stamp))
    updated = []
    for node in nodes:
        extra: list[Finding] = []
        if node.name in suspects:
            runs = [r for r in runner.runs if node.name in r.nodes and not r.ok]
            worst = runs[-1] if runs else None
            extra.append(Finding(CHECK_ID, Verdict.FAIL, "multi-node all_reduce is below the floor whenever this node "
                                 f"takes part (localised by {pattern}): check its InfiniBand ports and cables"
                                 + (f"; last: {worst.assessments[0].summary}" if worst else ""), node=node.name,
                                 observed=worst.busbw if worst else None, unit="GB/s",
                                 remediation=Remediation.ISOLATE, evidence=worst.evidence if worst else None,
                                 profile=profile.stamp))
        elif node.name in inconclusive:
            why = (f"{pattern} stopped: {DEADLINE_TEXT}" if stopped else
                   "run with --nccl-pattern bisect or pairwise")
            extra.append(Finding(CHECK_ID, Verdict.ERROR, "multi-node all_reduce failed with this node taking part; "
                                 f"not localised to a node ({why})",
                                 node=node.name, reason=ErrorReason.INCOMPLETE, remediation=Remediation.INVESTIGATE,
                                 profile=profile.stamp))
        elif node.name in not_started:
            extra.append(Finding(CHECK_ID, Verdict.ERROR, f"multi-node all_reduce not run: {DEADLINE_TEXT}",
                                 node=node.name, reason=ErrorReason.NOT_RUN, profile=profile.stamp))
        elif node.name in healthy:
            best = next((r for r in runner.runs if node.name in r.nodes and r.ok), None)
            if best is not None:
                extra.append(Finding(CHECK_ID, Verdict.PASS, f"multi-node all_reduce with {fold(best.nodes)}: "
                                     f"{best.busbw:g} GB/s" if best.busbw is not None else "multi-node all_reduce ok",
                                     node=node.name, observed=best.busbw, unit="GB/s", evidence=best.evidence,
                                     profile=profile.stamp))
        if pattern == "pairwise" and node.name in healthy:
            figures = [r.busbw for r in runner.runs if len(r.nodes) == 2 and node.name in r.nodes
                       and r.busbw is not None]
            if figures:
                node = replace(node, facts={**node.facts, PAIR_FACT: max(figures)})
        updated.append(node.with_findings(extra) if extra else node)
    return updated, cluster


def _fit_to_take_part(node: NodeResult) -> bool:
    """Nodes with a failing or unknown check take no part, except for a FAILed nccl-tests result: a node whose
    single-node bandwidth is low is exactly what the multi-node runs should confirm and name (a node whose
    nccl-tests hung would only hang the collective)."""
    return not any(f.verdict is Verdict.ERROR or (f.verdict is Verdict.FAIL and not f.check.startswith("nccl."))
                   for f in node.findings)


def _is_bandwidth_or_data(run: GroupRun) -> bool:
    """Bisection localises slow, corrupting or hanging nodes (each step bounded by ``nccl_timeout``); a launch
    failure (an unreachable launcher or daemon) needs a person, not halving."""
    return any(a.verdict is Verdict.FAIL or a.reason is ErrorReason.TIMEOUT for a in run.assessments)


def _started(run: GroupRun) -> GroupRun:
    if not run.started:
        raise DeadlinePassed(run.assessments[0].summary)
    return run


def _pairwise(runner: MultiNodeRunner, nodes: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(suspects, inconclusive, not started): a pair or re-test the deadline kept from starting proves nothing."""
    results: dict[tuple[str, str], GroupRun] = {}
    for round_ in pair_rounds(nodes):
        with cf.ThreadPoolExecutor(max_workers=max(1, min(len(round_), runner.options.forks))) as pool:
            for pair, run in zip(round_, pool.map(lambda p: runner.run_group(list(p)), round_)):
                results[pair] = run
    good = {n for pair, run in results.items() if run.ok for n in pair}
    reference = sorted(good)[0] if good else None
    suspects: list[str] = []
    inconclusive: list[str] = []
    not_started: list[str] = []
    for pair, run in results.items():
        if run.ok:
            continue
        for node in pair:
            if node in good or node in suspects or node in inconclusive or node in not_started:
                continue
            if not run.started:
                not_started.append(node)
                continue
            if reference is None:
                inconclusive.append(node)
                continue
            retest = runner.run_group([node, reference])
            if retest.ok:
                good.add(node)
            elif retest.started:
                suspects.append(node)
            else:
                inconclusive.append(node)
    _retest_low_pairs(runner, results)
    # A node whose own pair never started but that passed with another (the odd node's second round) is good.
    return suspects, inconclusive, [n for n in not_started if n not in good]


def _retest_low_pairs(runner: MultiNodeRunner, results: Mapping[tuple[str, str], GroupRun]) -> None:
    """Each member of a pair that met the floor but is ``PEER_RETEST_PCT`` below the median of the pairs runs once
    more with a node of the best pair (see :data:`PAIR_FACT`); re-tests change no verdict of the stage."""
    measured = {pair: run.busbw for pair, run in results.items() if run.ok and run.busbw is not None}
    if len(measured) < 2:
        return
    median = statistics.median(measured.values())
    best = max(measured, key=lambda pair: measured[pair] or 0.0)
    for pair, value in measured.items():
        if value is None or value >= median * (1 - PEER_RETEST_PCT / 100.0):
            continue
        reference = next((n for n in best if n not in pair), None)
        if reference is None:
            continue
        for node in pair:
            runner.run_group([node, reference])

