"""The cluster stage of ``rdma.gpudirect``: perftest ``ib_write_bw --use_cuda`` between disjoint node pairs.

Pairs come from :func:`nvdeploy.runner.pairing.pair_rounds` (the pairwise pattern of multi-node nccl-tests): the pairs
of a round run in parallel, rounds one after the other. In each pair the first node serves, the second connects to
it; the server starts first and the client follows after a short head start. Both commands carry their own
timeout (the server's is longer: it waits for the client), and no round starts after the global ``--deadline``.
Every run's raw output is kept as evidence under ``evidence/_cluster/``.
"""

from __future__ import annotations

import concurrent.futures as cf
import statistics
import threading
import time
from dataclasses import replace
from typing import Optional, Sequence

from nvdeploy.checks.rdma import CHECK_ID, PairVerdict, expectation, judge_pair
from nvdeploy.collect.stack_commands import ib_write_bw_argv
from nvdeploy.collect.stage_limits import GPUDIRECT_SERVER_EXTRA_S as SERVER_EXTRA_S
from nvdeploy.collect.stage_limits import GPUDIRECT_TIMEOUT_S as DEFAULT_TIMEOUT_S
from nvdeploy.config.hostrange import fold
from nvdeploy.config.inventory import Host
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.parsers.perftest import parse_perftest
from nvdeploy.results import CommandResult, ErrorReason, Finding, NodeResult, Verdict
from nvdeploy.runner.engine import EngineOptions, make_transport
from nvdeploy.runner.pairing import pair_rounds
from nvdeploy.runner.record import RunRecorder
from nvdeploy.transport.base import CommandSpec, TransportError

HEAD_START_S = 1.5
DEFAULT_HCA = "mlx5_0"
# Each node's GPUDirect bandwidth for fleet.performance (checks/fleet.py): its best pair's Gb/s. A pair goes at its
# slower member's pace, so a pair that met the floor but is this far below the passing pairs' median (the fleet
# rule's warn_pct) re-tests each member with a node of the best pair: the straggler stays low, its partner gets a
# good figure, and the fleet rule names the straggler alone. Re-tests change no verdict of this check.
PAIR_FACT = "rdma_gpudirect_gbps"
PEER_RETEST_PCT = 3.5


def _fit(node: NodeResult) -> bool:
    return not any(f.verdict in (Verdict.ERROR, Verdict.FAIL) for f in node.findings)


def _ib_expected(host: Host, catalog: ProfileCatalog) -> bool:
    profile = catalog.get(host.profile or "")
    ib = profile.extra.get("ib") if isinstance(profile.extra.get("ib"), dict) else {}
    return bool(host.get("ib_hcas", ib.get("hcas")))


class PairRunner:
    def __init__(self, catalog: ProfileCatalog, options: EngineOptions, recorder: RunRecorder,
                 all_hosts: Sequence[Host], deadline_at: Optional[float]) -> None:
        self.catalog = catalog
        self.options = options
        self.recorder = recorder
        self.all_hosts = list(all_hosts)
        self.deadline_at = deadline_at
        self._lock = threading.Lock()
        self._counter = 0

    def _remaining(self) -> Optional[float]:
        return None if self.deadline_at is None else self.deadline_at - time.monotonic()

    def _run(self, host: Host, spec: CommandSpec, remaining: Optional[float]) -> CommandResult:
        transport = make_transport(host, self.catalog, self.options, peers=self.all_hosts)
        try:
            transport.connect()
            return transport.run_batch([spec], remaining)[0]
        except TransportError as exc:
            return CommandResult(name=spec.name, command=spec.display, rc=None, error=exc.reason,
                                 error_detail=f"{host.name} unreachable: {exc.detail}")
        finally:
            transport.close()

    def _evidence(self, result: CommandResult, label: str) -> Optional[str]:
        with self._lock:
            self._counter += 1
            name = f"gpudirect_{self._counter:03d}_{label}"
        return self.recorder.write_evidence("_cluster", [replace(result, name=name)])[0].path

    def run_pair(self, server: Host, client: Host) -> tuple[PairVerdict, Optional[str]]:
        label = f"{server.name} -> {client.name}"
        remaining = self._remaining()
        timeout = float(client.get("gpudirect_timeout", DEFAULT_TIMEOUT_S))
        if remaining is not None:
            if remaining <= HEAD_START_S:
                return PairVerdict(Verdict.ERROR, f"{label}: not started: the global --deadline passed",
                                   reason=ErrorReason.NOT_RUN), None
            timeout = min(timeout, remaining - HEAD_START_S)
        address = str(server.get("gpudirect_address") or server.address)
        server_spec = CommandSpec("gpudirect_server", ib_write_bw_argv(
            str(server.get("gpudirect_hca", DEFAULT_HCA)), int(server.get("gpudirect_gpu", 0))),
            timeout + SERVER_EXTRA_S if remaining is None else min(timeout + SERVER_EXTRA_S, remaining))
        client_spec = CommandSpec("gpudirect_client", ib_write_bw_argv(
            str(client.get("gpudirect_hca", DEFAULT_HCA)), int(client.get("gpudirect_gpu", 0)), address), timeout)
        box: dict[str, CommandResult] = {}
        thread = threading.Thread(target=lambda: box.update(server=self._run(server, server_spec, remaining)),
                                  name=f"gpudirect-server-{server.name}", daemon=True)
        thread.start()
        time.sleep(HEAD_START_S)
        client_result = self._run(client, client_spec, remaining)
        thread.join(server_spec.timeout_s + 30)
        server_result = box.get("server") or CommandResult(name="gpudirect_server", command=server_spec.display,
                                                           rc=None, error=ErrorReason.TIMEOUT,
                                                           error_detail="the server did not return")
        safe = f"{server.name}-{client.name}"
        self._evidence(server_result, f"{safe}_server")
        evidence = self._evidence(client_result, f"{safe}_client")
        parsed = parse_perftest(client_result.text) if client_result.error is None else None
        rate, pct = expectation(self.catalog.get(client.profile or ""), client.vars)
        return judge_pair(label, client_result, parsed, server_result, rate, pct), evidence


def run_gpudirect(nodes: Sequence[NodeResult], hosts: Sequence[Host], catalog: ProfileCatalog,
                  options: EngineOptions, recorder: RunRecorder,
                  deadline_at: Optional[float] = None) -> tuple[list[NodeResult], list[Finding]]:
    """Run every pair round, then re-test the nodes of slow pairs against a node that passed; each node gets the
    findings of its pairs, the cluster one finding per run."""
    by_name = {h.name: h for h in hosts}
    fit = {n.name for n in nodes if _fit(n)}
    candidates = [h.name for h in hosts if h.name in fit and _ib_expected(h, catalog)]
    if not any(_ib_expected(h, catalog) for h in hosts):
        return list(nodes), [Finding(CHECK_ID, Verdict.SKIP, "no InfiniBand expected: GPUDirect RDMA not tested")]
    if len(candidates) < 2:
        return list(nodes), [Finding(CHECK_ID, Verdict.SKIP, "GPUDirect RDMA not tested: fewer than two fit nodes "
                                     "with InfiniBand")]
    runner = PairRunner(catalog, options, recorder, hosts, deadline_at)
    results: list[tuple[str, str, PairVerdict, Optional[str]]] = []
    for pairs in pair_rounds(candidates):
        results += _round(runner, by_name, pairs, options.forks)
    passed = [n for a, b, v, _ in results if v.verdict is Verdict.PASS for n in (a, b)]
    failed_pairs = [(a, b) for a, b, v, _ in results if v.verdict is Verdict.FAIL]
    # A slow pair names nobody yet: each of its nodes is re-tested against a node that passed (as a server), so
    # only the node that is slow again is FAIL; without a good partner both stay ERROR (inconclusive).
    retests: dict[str, PairVerdict] = {}
    reference = passed[0] if passed else None
    if reference is not None:
        suspects = sorted({n for pair in failed_pairs for n in pair} - set(passed))
        for name, (_, _, verdict, evidence) in zip(suspects, _round(runner, by_name,
                                                                   [(reference, n) for n in suspects], 1)):
            retests[name] = verdict
            results.append((reference, name, verdict, evidence))
    figures = _peer_figures(runner, by_name, results)
    per_node: dict[str, list[Finding]] = {}
    cluster: list[Finding] = []
    for a, b, verdict, evidence in results:
        cluster.append(Finding(CHECK_ID, verdict.verdict, verdict.summary, observed=verdict.observed,
                               expected=verdict.expected, unit="Gb/s", reason=verdict.reason,
                               remediation=verdict.remediation, evidence=evidence))
        for name in (a, b):
            node_verdict, summary, reason = verdict.verdict, verdict.summary, verdict.reason
            if verdict.verdict is Verdict.FAIL:
                again = retests.get(name)
                if name in passed or (again is not None and again.verdict is Verdict.PASS):
                    continue  # the other node of the pair is the slow one
                if again is None or again.verdict is not Verdict.FAIL:
                    node_verdict, reason = Verdict.ERROR, ErrorReason.INCOMPLETE
                    summary = f"{verdict.summary} (not localised: no node passed to re-test against)"
            per_node.setdefault(name, []).append(Finding(
                CHECK_ID, node_verdict, summary, node=name, observed=verdict.observed, expected=verdict.expected,
                unit="Gb/s", reason=reason, remediation=verdict.remediation, evidence=evidence))
    updated = []
    for node in nodes:
        if node.name in figures:
            node = replace(node, facts={**node.facts, PAIR_FACT: max(figures[node.name])})
        updated.append(node.with_findings(per_node[node.name]) if node.name in per_node else node)
    if all(v.verdict is Verdict.PASS for _, _, v, _ in results):
        cluster.append(Finding(CHECK_ID, Verdict.PASS, f"GPUDirect RDMA met the floor on every pair of "
                               f"{fold(candidates)}"))
    return updated, cluster


def _peer_figures(runner: PairRunner, by_name: dict[str, Host],
                  results: Sequence[tuple[str, str, PairVerdict, Optional[str]]]) -> dict[str, list[float]]:
    """{node: the Gb/s of every passing pair it was in}, with one more pair for each member of a pair
    :data:`PEER_RETEST_PCT` or more below the passing pairs' median (a node of the best pair serves it)."""
    passing = [(a, b, v.observed) for a, b, v, _ in results
               if v.verdict is Verdict.PASS and isinstance(v.observed, (int, float))]
    figures: dict[str, list[float]] = {}
    for a, b, bw in passing:
        for name in (a, b):
            figures.setdefault(name, []).append(float(bw))
    if len(passing) < 2:
        return figures
    median = statistics.median(bw for _, _, bw in passing)
    best = max(passing, key=lambda pair: pair[2])
    slow = sorted({n for a, b, bw in passing if bw < median * (1 - PEER_RETEST_PCT / 100) for n in (a, b)})
    pairs = [(next(r for r in best[:2] if r != name), name) for name in slow if name not in best[:2]]
    if pairs and (runner.deadline_at is None or time.monotonic() < runner.deadline_at):
        # One at a time, as the failed pairs' re-tests: every re-test's server is a node of the best pair.
        for _, client, verdict, _ in _round(runner, by_name, pairs, 1):
            if verdict.verdict is Verdict.PASS and isinstance(verdict.observed, (int, float)):
                figures.setdefault(client, []).append(float(verdict.observed))
    return figures


def _round(runner: PairRunner, by_name: dict[str, Host], pairs: Sequence[tuple[str, str]],
           forks: int) -> list[tuple[str, str, PairVerdict, Optional[str]]]:
    """One round: its pairs side by side; results in the order of ``pairs``."""
    with cf.ThreadPoolExecutor(max_workers=max(1, min(len(pairs), forks))) as pool:
        futures = [pool.submit(runner.run_pair, by_name[a], by_name[b]) for a, b in pairs]
        return [(a, b, *future.result()) for (a, b), future in zip(pairs, futures)]
