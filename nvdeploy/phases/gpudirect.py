"""The cluster stage of ``rdma.gpudirect``: perftest ``ib_write_bw --use_cuda`` between disjoint node pairs, rail by
rail.

Pairs come from :func:`nvdeploy.runner.pairing.pair_rounds` (the pairwise pattern of multi-node nccl-tests): the pairs
of a round run in parallel, rounds one after the other. A pair is measured on every rail: GPU k with its nearest
NIC on both nodes (the rail map ``rdma.rails`` keeps in each node's facts), GPU k's rail of one node against GPU k's
rail of the other (a rail-optimised fabric joins NIC k of every node). Rails whose devices share a PCIe switch on
either node go in different waves; the rails of a wave run side by side, each on its own TCP port (perftest's
servers on one node cannot share one), each under its own timeout. In each pair the first node serves, the second
connects to it; the servers start first and the clients follow after a short head start. No wave starts after the
global ``--deadline``. Every run's raw output is kept as evidence under ``evidence/_cluster/``.

Host vars ``gpudirect_hca`` / ``gpudirect_gpu`` test just that rail of the node. Without a rail map (``rdma.rails``
not run, or no matrix) the node's rail is the default one, GPU0 and mlx5_0, and the cluster finding says so.
"""

from __future__ import annotations

import concurrent.futures as cf
import statistics
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional, Sequence

from nvdeploy.checks.rdma import CHECK_ID, RAILS_FACT, PairVerdict, expectation, judge_pair
from nvdeploy.collect.stack_commands import ib_write_bw_argv
from nvdeploy.collect.stage_limits import GPUDIRECT_SERVER_EXTRA_S as SERVER_EXTRA_S
from nvdeploy.collect.stage_limits import GPUDIRECT_TIMEOUT_S as DEFAULT_TIMEOUT_S
from nvdeploy.config.hostrange import fold
from nvdeploy.config.inventory import Host
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.parsers.perftest import parse_perftest
from nvdeploy.results import CommandResult, ErrorReason, Finding, NodeResult, Remediation, Verdict
from nvdeploy.runner.engine import EngineOptions, make_transport
from nvdeploy.runner.pairing import pair_rounds
from nvdeploy.runner.record import RunRecorder
from nvdeploy.transport.base import CommandSpec, TransportError

HEAD_START_S = 1.5
DEFAULT_HCA = "mlx5_0"
# perftest's default TCP port; the rails of a wave take it and the ports after it.
BASE_PORT = 18515
# Each node's GPUDirect bandwidth for fleet.performance (checks/fleet.py): its best run's Gb/s, and per rail the
# rail's best. A run goes at its slower member's pace, so a rail run that met the floor but is this far below the
# passing runs' median on that rail (the fleet rule's warn_pct) re-tests each member with a node of the rail's best
# run: the straggler stays low, its partner gets a good figure, and the fleet rule names the straggler alone.
# Re-tests change no verdict of this check.
PAIR_FACT = "rdma_gpudirect_gbps"
RAIL_FACT = "rdma_gpudirect_rail_gbps"
PEER_RETEST_PCT = 3.5
# Checks that judge one port or rail: a node they FAIL still has its other rails measured here, and the bad one is
# named by this stage with perftest's own words.
RAIL_SCOPED = ("ib.ports", "rdma.rails")


@dataclass(frozen=True)
class RailSpec:
    """One node's side of a rail: GPU index, RDMA device, HCA port (ibstat's, 1 when unknown)."""

    gpu: int
    nic: str
    port: int = 1
    state: str = ""  # the port's state as the light batch's ibstat printed it ("" unknown)

    @property
    def key(self) -> str:
        """The rail's name among the nodes (fleet.performance compares a node's rail with the same rail of others)."""
        return f"GPU{self.gpu}/{self.nic}"

    @property
    def text(self) -> str:
        return f"GPU{self.gpu} {self.nic} port {self.port}"


@dataclass(frozen=True)
class NodeRails:
    rails: tuple[RailSpec, ...]
    near: frozenset[tuple[int, int]]
    source: str  # "map", "host vars", "default"


@dataclass(frozen=True)
class RailRun:
    server: str
    client: str
    server_rail: RailSpec
    client_rail: RailSpec
    verdict: PairVerdict
    evidence: Optional[str]  # the client's output (the measurement)
    server_evidence: Optional[str] = None

    def evidence_of(self, side: str) -> Optional[str]:
        """The evidence that shows a side's fault: the blamed side's own output, else the measurement."""
        return self.server_evidence if side == "server" and self.verdict.blame == "server" else self.evidence

    def side(self, name: str) -> RailSpec:
        return self.server_rail if name == self.server else self.client_rail


def _fit(node: NodeResult) -> bool:
    return not any(f.verdict in (Verdict.ERROR, Verdict.FAIL) and f.check not in RAIL_SCOPED for f in node.findings)


def _ib_expected(host: Host, catalog: ProfileCatalog) -> bool:
    profile = catalog.get(host.profile or "")
    ib = profile.extra.get("ib") if isinstance(profile.extra.get("ib"), dict) else {}
    return bool(host.get("ib_hcas", ib.get("hcas")))


def node_rails(host: Host, facts: Mapping[str, Any]) -> NodeRails:
    """The rails to measure on a node: its rail map's, or just the one its host vars name, or the default rail."""
    mapped: list[RailSpec] = []
    near: set[tuple[int, int]] = set()
    fact = facts.get(RAILS_FACT)
    if isinstance(fact, Mapping) and isinstance(fact.get("rails"), list):
        states = fact.get("states") if isinstance(fact.get("states"), Mapping) else {}
        for rail in fact["rails"]:
            try:
                nic = str(rail["nic"])
                state = states.get(nic)
                mapped.append(RailSpec(int(rail["gpu"]), nic, int(state[0]) if state else 1,
                                       str(state[1]) if state else ""))
            except (KeyError, TypeError, ValueError, IndexError):
                continue
        for pair in fact.get("near") or ():
            if isinstance(pair, (list, tuple)) and len(pair) == 2:
                near.add((int(pair[0]), int(pair[1])))
    hca, gpu = host.get("gpudirect_hca"), host.get("gpudirect_gpu")
    if hca is not None or gpu is not None:
        if gpu is None:
            gpu = next((r.gpu for r in mapped if r.nic == str(hca)), 0)
        if hca is None:
            hca = next((r.nic for r in mapped if r.gpu == int(gpu)), DEFAULT_HCA)
        known = next((r for r in mapped if r.nic == str(hca)), None)
        rail = RailSpec(int(gpu), str(hca), known.port if known else 1, known.state if known else "")
        return NodeRails((rail,), frozenset(), "host vars")
    if mapped:
        return NodeRails(tuple(sorted(mapped, key=lambda r: r.gpu)), frozenset(near), "map")
    return NodeRails((RailSpec(0, DEFAULT_HCA),), frozenset(), "default")


def match_rails(server: NodeRails, client: NodeRails) -> list[tuple[RailSpec, RailSpec]]:
    """GPU k's rail of one node with GPU k's of the other; a node with one rail (host vars, the default) pairs it
    with the other's rail of the same GPU, else its first."""
    if len(server.rails) == 1 or len(client.rails) == 1:
        if len(server.rails) == 1:
            one = server.rails[0]
            return [(one, next((r for r in client.rails if r.gpu == one.gpu), client.rails[0]))]
        one = client.rails[0]
        return [(next((r for r in server.rails if r.gpu == one.gpu), server.rails[0]), one)]
    by_gpu = {r.gpu: r for r in client.rails}
    return [(r, by_gpu[r.gpu]) for r in server.rails if r.gpu in by_gpu]


def rail_waves(pairs: Sequence[tuple[RailSpec, RailSpec]], server: NodeRails,
               client: NodeRails) -> list[list[int]]:
    """Indices into ``pairs``, wave by wave: two rails share a wave only where they share no PCIe switch (nor NIC)
    on either node."""

    def near(a: tuple[RailSpec, RailSpec], b: tuple[RailSpec, RailSpec]) -> bool:
        return any(x.nic == y.nic or (x.gpu, y.gpu) in rails.near or (y.gpu, x.gpu) in rails.near
                   for x, y, rails in ((a[0], b[0], server), (a[1], b[1], client)))

    waves: list[list[int]] = []
    for i, pair in enumerate(pairs):
        for wave in waves:
            if not any(near(pair, pairs[j]) for j in wave):
                wave.append(i)
                break
        else:
            waves.append([i])
    return waves


class PairRunner:
    def __init__(self, catalog: ProfileCatalog, options: EngineOptions, recorder: RunRecorder,
                 all_hosts: Sequence[Host], deadline_at: Optional[float],
                 rails: Mapping[str, NodeRails]) -> None:
        self.catalog = catalog
        self.options = options
        self.recorder = recorder
        self.all_hosts = list(all_hosts)
        self.deadline_at = deadline_at
        self.rails = rails
        self._lock = threading.Lock()
        self._counter = 0

    def _remaining(self) -> Optional[float]:
        return None if self.deadline_at is None else self.deadline_at - time.monotonic()

    def _run(self, host: Host, specs: Sequence[CommandSpec], remaining: Optional[float]) -> list[CommandResult]:
        transport = make_transport(host, self.catalog, self.options, peers=self.all_hosts)
        try:
            transport.connect()
            return transport.run_batch(list(specs), remaining)
        except TransportError as exc:
            return [CommandResult(name=s.name, command=s.display, rc=None, error=exc.reason,
                                  error_detail=f"{host.name} unreachable: {exc.detail}") for s in specs]
        finally:
            transport.close()

    def _evidence(self, result: CommandResult, label: str) -> Optional[str]:
        with self._lock:
            self._counter += 1
            name = f"gpudirect_{self._counter:03d}_{label}"
        return self.recorder.write_evidence("_cluster", [replace(result, name=name)])[0].path

    def run_pair(self, server: Host, client: Host,
                 only: Optional[Sequence[str]] = None) -> list[RailRun]:
        """Every matched rail of the pair (``only``: just the rails with these keys, on the client's side)."""
        s_rails, c_rails = self.rails[server.name], self.rails[client.name]
        pairs = match_rails(s_rails, c_rails)
        if only is not None:
            pairs = [p for p in pairs if p[1].key in only]
        out: list[RailRun] = []
        for wave in rail_waves(pairs, s_rails, c_rails):
            out += self._wave(server, client, [pairs[i] for i in wave])
        return out

    def _wave(self, server: Host, client: Host, pairs: Sequence[tuple[RailSpec, RailSpec]]) -> list[RailRun]:
        fallback = {self.rails[server.name].source, self.rails[client.name].source} & {"default"}
        note = " [no rail map: the default rail only]" if fallback else ""
        labels = [_label(server.name, client.name, s, c) + note for s, c in pairs]
        remaining = self._remaining()
        timeout = float(client.get("gpudirect_timeout", DEFAULT_TIMEOUT_S))
        if remaining is not None:
            if remaining <= HEAD_START_S:
                return [RailRun(server.name, client.name, s, c, PairVerdict(
                    Verdict.ERROR, f"{label}: not started: the global --deadline passed", reason=ErrorReason.NOT_RUN),
                    None) for (s, c), label in zip(pairs, labels)]
            timeout = min(timeout, remaining - HEAD_START_S)
        # A rail whose port ibstat showed not Active is not started: its partner's perftest server would wait out
        # its whole timeout for a client that cannot come (75 s a wave); the port's side is named as perftest would
        # name it, and its partner is re-tested on that rail with another node.
        down = [i for i, (s, c) in enumerate(pairs) if _inactive(s) or _inactive(c)]
        skipped = {i: self._not_active(server.name, client.name, pairs[i], labels[i]) for i in down}
        runnable = [i for i in range(len(pairs)) if i not in skipped]
        if not runnable:
            return [skipped[i] for i in range(len(pairs))]
        measured = iter(self._measure(server, client, [pairs[i] for i in runnable], [labels[i] for i in runnable],
                                      timeout, remaining))
        return [skipped[i] if i in skipped else next(measured) for i in range(len(pairs))]

    def _not_active(self, server: str, client: str, pair: tuple[RailSpec, RailSpec], label: str) -> RailRun:
        s, c = pair
        side, node, rail = ("server", server, s) if _inactive(s) else ("client", client, c)
        return RailRun(server, client, s, c, PairVerdict(
            Verdict.FAIL, f"{label}: {node}'s {rail.nic} port {rail.port} is {rail.state} (ibstat): not started, "
            "nothing was measured on this rail; check its cable, transceiver and switch port (ib.ports)",
            remediation=Remediation.INVESTIGATE, blame=side), None)

    def _measure(self, server: Host, client: Host, pairs: Sequence[tuple[RailSpec, RailSpec]], labels: Sequence[str],
                 timeout: float, remaining: Optional[float]) -> list[RailRun]:
        address = str(server.get("gpudirect_address") or server.address)
        server_timeout = timeout + SERVER_EXTRA_S if remaining is None else min(timeout + SERVER_EXTRA_S, remaining)
        server_specs = [CommandSpec(f"gpudirect_server_{i}", ib_write_bw_argv(s.nic, s.gpu, port=BASE_PORT + i),
                                    server_timeout) for i, (s, _) in enumerate(pairs)]
        client_specs = [CommandSpec(f"gpudirect_client_{i}", ib_write_bw_argv(c.nic, c.gpu, address, BASE_PORT + i),
                                    timeout) for i, (_, c) in enumerate(pairs)]
        box: dict[str, list[CommandResult]] = {}
        thread = threading.Thread(target=lambda: box.update(server=self._run(server, server_specs, remaining)),
                                  name=f"gpudirect-server-{server.name}", daemon=True)
        thread.start()
        time.sleep(HEAD_START_S)
        client_results = self._run(client, client_specs, remaining)
        thread.join(server_timeout + 30)
        server_results = box.get("server") or [
            CommandResult(name=s.name, command=s.display, rc=None, error=ErrorReason.TIMEOUT,
                          error_detail="the server did not return") for s in server_specs]
        rate, pct = expectation(self.catalog.get(client.profile or ""), client.vars)
        out = []
        for (s, c), label, server_result, client_result in zip(pairs, labels, server_results, client_results):
            safe = f"{server.name}-{client.name}_{c.nic}"
            server_evidence = self._evidence(server_result, f"{safe}_server")
            evidence = self._evidence(client_result, f"{safe}_client")
            parsed = parse_perftest(client_result.text) if client_result.error is None else None
            verdict = judge_pair(label, client_result, parsed, server_result, rate, pct,
                                 server_port=_port_state(server_result), client_port=_port_state(client_result),
                                 sides=(server.name, client.name), nic=(s.nic, c.nic))
            out.append(RailRun(server.name, client.name, s, c, verdict, evidence, server_evidence))
        return out


def _inactive(rail: RailSpec) -> bool:
    return bool(rail.state) and rail.state.lower() not in ("active", "unknown")


def _port_state(result: CommandResult) -> Optional[tuple[int, str]]:
    """perftest's " Port number N state is X" (on stderr) where the run got that far."""
    if result.error is not None or result.rc in (0, None):
        return None
    return parse_perftest(f"{result.text}\n{result.err_text}").port_state


def _label(server: str, client: str, s: RailSpec, c: RailSpec) -> str:
    if (s.gpu, s.nic, s.port) == (c.gpu, c.nic, c.port):
        return f"{server} -> {client} rail {s.text}"
    return f"{server} {s.text} -> {client} {c.text}"


def run_gpudirect(nodes: Sequence[NodeResult], hosts: Sequence[Host], catalog: ProfileCatalog,
                  options: EngineOptions, recorder: RunRecorder,
                  deadline_at: Optional[float] = None) -> tuple[list[NodeResult], list[Finding]]:
    """Run every pair round on every rail, then re-test the nodes of slow rails against a node that passed that
    rail; each node gets the findings of its rails, the cluster one finding per rail run."""
    by_name = {h.name: h for h in hosts}
    fit = {n.name for n in nodes if _fit(n)}
    candidates = [h.name for h in hosts if h.name in fit and _ib_expected(h, catalog)]
    if not any(_ib_expected(h, catalog) for h in hosts):
        return list(nodes), [Finding(CHECK_ID, Verdict.SKIP, "no InfiniBand expected: GPUDirect RDMA not tested")]
    if len(candidates) < 2:
        return list(nodes), [Finding(CHECK_ID, Verdict.SKIP, "GPUDirect RDMA not tested: fewer than two fit nodes "
                                     "with InfiniBand")]
    facts = {n.name: n.facts for n in nodes}
    rails = {name: node_rails(by_name[name], facts.get(name) or {}) for name in candidates}
    runner = PairRunner(catalog, options, recorder, hosts, deadline_at, rails)
    runs: list[RailRun] = []
    for pairs in pair_rounds(candidates):
        runs += _round(runner, by_name, [(a, b, None) for a, b in pairs], options.forks)
    passed = {(n, r.side(n).key) for r in runs if r.verdict.verdict is Verdict.PASS for n in (r.server, r.client)}
    # A slow rail names nobody yet, unless perftest said whose port is down: each of its nodes is re-tested on that
    # rail against a node that passed it (as the server), so only a node that is slow again is FAIL; without a good
    # partner both stay ERROR (inconclusive).
    # The partner of a rail perftest blamed on the other side was not measured on it: it is re-tested the same way.
    suspects: dict[str, list[str]] = {}
    for run in runs:
        if run.verdict.verdict is Verdict.FAIL:
            for name, side in ((run.server, "server"), (run.client, "client")):
                key = run.side(name).key
                if run.verdict.blame == side or (name, key) in passed or key in suspects.get(name, []):
                    continue
                suspects.setdefault(name, []).append(key)
    retests: dict[tuple[str, str], PairVerdict] = {}
    for run in _retest(runner, by_name, suspects, passed):
        retests[(run.client, run.client_rail.key)] = run.verdict
        runs.append(run)
    figures = _peer_figures(runner, by_name, runs)
    per_node: dict[str, list[Finding]] = {}
    cluster: list[Finding] = []
    for run in runs:
        verdict = run.verdict
        cluster.append(Finding(CHECK_ID, verdict.verdict, verdict.summary, observed=verdict.observed,
                               expected=verdict.expected, unit="Gb/s", reason=verdict.reason,
                               remediation=verdict.remediation, evidence=run.evidence_of(verdict.blame or "client"),
                               gpu=run.client_rail.gpu if run.client_rail.gpu == run.server_rail.gpu else None))
        for name, side in ((run.server, "server"), (run.client, "client")):
            rail = run.side(name)
            node_verdict, summary, reason = verdict.verdict, verdict.summary, verdict.reason
            if verdict.verdict is Verdict.FAIL:
                if verdict.blame is not None:
                    if verdict.blame != side:
                        continue  # perftest named the other side's port
                else:
                    again = retests.get((name, rail.key))
                    if (name, rail.key) in passed or (again is not None and again.verdict is Verdict.PASS):
                        continue  # the other node of the pair is the slow one on this rail
                    if again is None or again.verdict is not Verdict.FAIL:
                        node_verdict, reason = Verdict.ERROR, ErrorReason.INCOMPLETE
                        summary = f"{verdict.summary} (not localised: no node passed this rail to re-test against)"
            per_node.setdefault(name, []).append(Finding(
                CHECK_ID, node_verdict, summary, node=name, gpu=rail.gpu, observed=verdict.observed,
                expected=verdict.expected, unit="Gb/s", reason=reason, remediation=verdict.remediation,
                evidence=run.evidence_of(side)))
    updated = []
    for node in nodes:
        if node.name in figures:
            by_rail = {key: max(values) for key, values in figures[node.name].items()}
            node = replace(node, facts={**node.facts, PAIR_FACT: max(by_rail.values()), RAIL_FACT: by_rail})
        updated.append(node.with_findings(per_node[node.name]) if node.name in per_node else node)
    sources = _sources(rails)
    if all(r.verdict.verdict is Verdict.PASS for r in runs):
        cluster.append(Finding(CHECK_ID, Verdict.PASS, f"GPUDirect RDMA met the floor on every rail of every pair of "
                               f"{fold(candidates)} ({sources})"))
    return updated, cluster


def _sources(rails: Mapping[str, NodeRails]) -> str:
    """Where each node's rails came from, folded: the default rail is named, so a missing map is not hidden."""
    groups: dict[str, list[str]] = {}
    for name, node in rails.items():
        groups.setdefault(node.source, []).append(name)
    words = {"map": "every rail of the rail map (rdma.rails)", "host vars": "the rail host vars gpudirect_hca/"
             "gpudirect_gpu name", "default": f"only the default rail GPU0 {DEFAULT_HCA}: no rail map (rdma.rails not "
             "run, or nvidia-smi topo -m unreadable)"}
    return "; ".join(f"{fold(sorted(names))}: {words[source]}" for source, names in sorted(groups.items()))


def _retest(runner: PairRunner, by_name: dict[str, Host], suspects: Mapping[str, Sequence[str]],
            passed: set[tuple[str, str]]) -> list[RailRun]:
    """Each suspect node's slow rails again, against the node that passed most of them (as the server), one node
    after the other."""
    jobs: list[tuple[str, str, Optional[Sequence[str]]]] = []
    for name in sorted(suspects):
        keys = suspects[name]
        scores: dict[str, int] = {}
        for other, key in passed:
            if other != name and key in keys:
                scores[other] = scores.get(other, 0) + 1
        if scores:
            reference = max(sorted(scores), key=lambda n: scores[n])
            jobs.append((reference, name, [k for k in keys if (reference, k) in passed]))
    return _round(runner, by_name, jobs, 1) if jobs else []


def _peer_figures(runner: PairRunner, by_name: dict[str, Host],
                  runs: Sequence[RailRun]) -> dict[str, dict[str, list[float]]]:
    """{node: {rail: the Gb/s of every passing run on it}}, with one more run for each member of a run
    :data:`PEER_RETEST_PCT` or more below the passing runs' median on that rail (a node of the rail's best run
    serves it)."""
    figures: dict[str, dict[str, list[float]]] = {}
    by_rail: dict[str, list[RailRun]] = {}
    for run in runs:
        if run.verdict.verdict is Verdict.PASS and isinstance(run.verdict.observed, (int, float)):
            by_rail.setdefault(run.client_rail.key, []).append(run)
            for name in (run.server, run.client):
                figures.setdefault(name, {}).setdefault(run.side(name).key, []).append(float(run.verdict.observed))
    slow: dict[tuple[str, str], list[str]] = {}  # (reference, node) -> rails
    for _, passing in sorted(by_rail.items()):
        if len(passing) < 2:
            continue
        median = statistics.median(float(r.verdict.observed or 0) for r in passing)
        best = max(passing, key=lambda r: float(r.verdict.observed or 0))
        for run in passing:
            if float(run.verdict.observed or 0) >= median * (1 - PEER_RETEST_PCT / 100):
                continue
            for name in (run.server, run.client):
                if name in (best.server, best.client):
                    continue
                reference = best.server if best.server != name else best.client
                slow.setdefault((reference, name), []).append(run.side(name).key)
    if slow and (runner.deadline_at is None or time.monotonic() < runner.deadline_at):
        # One at a time, as the failed rails' re-tests: every re-test's server is a node of a rail's best run.
        jobs = [(reference, name, keys) for (reference, name), keys in sorted(slow.items())]
        for run in _round(runner, by_name, jobs, 1):
            if run.verdict.verdict is Verdict.PASS and isinstance(run.verdict.observed, (int, float)):
                figures.setdefault(run.client, {}).setdefault(run.client_rail.key, []).append(
                    float(run.verdict.observed))
    return figures


def _round(runner: PairRunner, by_name: dict[str, Host], jobs: Sequence[tuple[str, str, Optional[Sequence[str]]]],
           forks: int) -> list[RailRun]:
    """One round: its pairs side by side, each on its rails; results in the order of ``jobs``."""
    with cf.ThreadPoolExecutor(max_workers=max(1, min(len(jobs), forks))) as pool:
        futures = [pool.submit(runner.run_pair, by_name[a], by_name[b], only) for a, b, only in jobs]
        return [run for future in futures for run in future.result()]
