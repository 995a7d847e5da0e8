"""Bounded fan-out over hosts: one pipeline per node (connect, collect, parse, evaluate), streamed results.

One node's failure never affects another's result; a hung node costs its own time; Ctrl-C or SIGTERM stops
launching, aborts what runs, and keeps every finished node.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import datetime as dt
import gc
import queue
import signal
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

from nvdeploy.checks import CHECKS
from nvdeploy.checks.heavy_gate import (
    DEADLINE_SKIP,
    GUARD_COLLECTORS,
    INTERRUPTED_SKIP,
    HeavySkip,
    batch_refused,
    batch_unsafe,
    heavy_skip,
)
from nvdeploy.collect.burnin_commands import COLLECTOR_NAMES as BURNIN_COLLECTORS
from nvdeploy.collect.burnin_commands import burnin_batches, burnin_specs, format_duration
from nvdeploy.collect.catalog import COLLECTORS, light_specs, specs_for
from nvdeploy.collect.datacenter import DCGM_IGNORE_VAR
from nvdeploy.collect.storage_commands import COLLECTOR as STORAGE_COLLECTOR
from nvdeploy.collect.storage_commands import shared_concurrency, shared_paths
from nvdeploy.config import waivers as waiver_rules
from nvdeploy.config.inventory import Host
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.files import OutputError
from nvdeploy.parsers.facts import node_facts
from nvdeploy.results import CommandResult, ErrorReason, Finding, NodeResult, Remediation, Verdict
from nvdeploy.runner.evaluate import EvaluationJob, Evaluator, InlineEvaluator
from nvdeploy.runner.progress import RunProgress
from nvdeploy.runner.record import RunRecorder
from nvdeploy.transport.base import CommandSpec, Transport, TransportError
from nvdeploy.transport.sudo_gate import SudoGate

QUICK_CHECKS = (
    "system.sudo", "driver.loaded", "driver.version", "gpu.count", "gpu.model", "gpu.memory", "gpu.pci_visible",
    "gpu.persistence", "memory.ecc_mode", "memory.ecc_errors", "memory.remapped_rows", "memory.retired_pages",
    "kmsg.xid",
)


@dataclass(frozen=True)
class EngineOptions:
    forks: int = 64
    deadline_s: Optional[float] = None
    connect_timeout_s: float = 10.0
    accept_new_host_keys: bool = False
    sudo_password: Optional[str] = None
    checks: tuple[str, ...] = QUICK_CHECKS
    # validate --check: ``checks`` were chosen one by one, not by a level (the cluster stage runs only those).
    only_checks: bool = False
    multinode_pattern: str = "bisect"
    # Run heavy collectors on nodes where GPU compute processes run (the busy guard, checks/heavy_gate.py).
    allow_busy: bool = False
    # Worker processes that parse and evaluate the nodes' outputs (nvdeploy/runner/evaluate.py); None: chosen from the
    # run's size and the controller's cores, 0: in the node threads.
    eval_processes: Optional[int] = None
    # One sudo gate per run (transport/sudo_gate.py), shared by every transport made from these options: the
    # password is tried on one node first, and never again anywhere once a node rejected it.
    sudo_gate: Optional[SudoGate] = field(default=None, compare=False)
    # The run's progress counters (nvdeploy/runner/progress.py), bumped once per node event; None: no progress work.
    progress: Optional[RunProgress] = field(default=None, compare=False)
    # Accepted findings (config/waivers.py Waiver), from validate --waivers FILE: applied when the run finishes.
    waivers: tuple[Any, ...] = field(default=(), compare=False)
    # The day the waivers are judged on: the run's first day (a resumed run's too; config/waivers.py run_date).
    waiver_date: Optional[dt.date] = field(default=None, compare=False)
    # The accepted run (validate --baseline RUN_DIR): fleet.performance's peers where this run has too few nodes.
    fleet_baseline: Optional[str] = None
    # validate --burn-in DURATION (collect/burnin_commands.py): the heavy tests repeated for that many seconds with the
    # sampler beside them, in one batch after the other heavy collectors; None: no burn-in.
    burn_in_s: Optional[float] = None
    # The sampler's interval (--burn-in-interval); None: host var burnin_interval, else 5 s.
    burn_in_interval_s: Optional[float] = None

    def __post_init__(self) -> None:
        if self.sudo_gate is None and self.sudo_password:
            object.__setattr__(self, "sudo_gate", SudoGate(self.sudo_password))

    def __repr__(self) -> str:  # the password must never reach a log through a repr
        return (f"EngineOptions(forks={self.forks}, deadline_s={self.deadline_s}, "
                f"connect_timeout_s={self.connect_timeout_s}, checks={len(self.checks)})")


NO_BURN_IN_SKIP = HeavySkip(ErrorReason.NOT_RUN, "not run: no burn-in was asked for (validate --burn-in DURATION)")


class Interrupted(Exception):
    """Raised by the CLI's signal handler to stop a run; carries the exit code (130 SIGINT, 143 SIGTERM)."""

    def __init__(self, exit_code: int = 130) -> None:
        super().__init__(f"interrupted (exit {exit_code})")
        self.exit_code = exit_code


def make_transport(host: Host, catalog: ProfileCatalog, options: EngineOptions,
                   peers: Sequence[Host] = (), run_id: str = "") -> Transport:
    """The transport for ``host``; ``peers`` are the other simulated nodes a multi-node tool may reach.

    ``run_id`` is written next to the node's lock while a batch runs, so a second run can name the holder."""
    return _transport(host, catalog, options, peers).bind(host.name, run_id, options.sudo_gate)


def _transport(host: Host, catalog: ProfileCatalog, options: EngineOptions, peers: Sequence[Host]) -> Transport:
    if host.get("slurm_pool") or host.get("slurm_busy"):
        # Slurm (nvdeploy/slurm/guard.py): one srun step for --via slurm; no heavy collector on a node Slurm shows busy.
        from nvdeploy.slurm.guard import slurm_transport

        return slurm_transport(host, lambda plain: _transport(plain, catalog, options, peers))
    connection = host.connection
    connect_timeout = float(host.get("connect_timeout", options.connect_timeout_s))
    if connection == "sim":
        from nvdeploy.sim.transport import sim_transport

        profile = catalog.get(host.profile or "")
        sku = catalog.get(host.get("sim_sku")) if host.get("sim_sku") else None
        # The cluster keys the node's mutable state (nvdeploy/sim/state.py): install, then validate, see the same.
        cluster = str(host.get("cluster") or Path(host.file).stem)
        return sim_transport(host.name, profile, host.faults, sku, cluster,
                             [(p.address, p.faults) for p in peers if p.name != host.name], connect_timeout,
                             rack=host.get("rack"))
    transport: Transport
    if connection == "local":
        from nvdeploy.transport.local import LocalTransport

        transport = LocalTransport(sudo_password=options.sudo_password)
    else:
        from nvdeploy.transport.ssh import SSHTransport

        transport = SSHTransport(address=host.address, user=host.get("ssh_user"), port=int(host.get("ssh_port", 22)),
                                 key_file=host.get("ssh_key"), known_hosts=host.get("ssh_known_hosts"),
                                 jump=host.get("ssh_jump"), connect_timeout_s=connect_timeout,
                                 accept_new_host_keys=options.accept_new_host_keys,
                                 sudo_password=options.sudo_password)
    transport.python_batch = host.get("node_python", True) is not False
    return transport


def error_node(host: Host, check: str, summary: str, reason: ErrorReason, duration: float = 0.0,
               remediation: Remediation = Remediation.NONE) -> NodeResult:
    finding = Finding(check, Verdict.ERROR, summary, node=host.name, reason=reason, remediation=remediation)
    return NodeResult(host.name, (finding,), address=host.address, profile=host.profile or "",
                      connection=host.connection, duration_s=duration)


class NodeRunner:
    """Runs one node's pipeline; keeps its transport reachable so an interrupt can abort it."""

    def __init__(self, catalog: ProfileCatalog, options: EngineOptions, recorder: RunRecorder,
                 deadline_at: Optional[float], evaluator: Optional[Evaluator] = None) -> None:
        self.catalog = catalog
        self.evaluator: Evaluator = evaluator or InlineEvaluator()
        self.options = options
        self.recorder = recorder
        self.deadline_at = deadline_at
        self.stopping = threading.Event()
        # Cluster-level ids (checks/registry.py CLUSTER_CHECKS) run after the nodes, in the cluster stage.
        self.node_checks = tuple(c for c in options.checks if c in CHECKS)
        self._active: dict[str, Transport] = {}
        self._lock = threading.Lock()
        # One slot pool per shared storage path (storage_paths {PATH: {shared: true}}): a few nodes measure it at a
        # time, so that each figure is the node's own and not its share of what every node pulls at once.
        self._shared: dict[str, threading.BoundedSemaphore] = {}

    @contextlib.contextmanager
    def _storage_turn(self, host_vars: Mapping[str, Any]) -> Iterator[None]:
        """Wait for a turn on every shared path of the host (in path order: no two nodes wait on each other)."""
        paths = shared_paths(host_vars)
        with self._lock:
            pools = [self._shared.setdefault(p, threading.BoundedSemaphore(shared_concurrency(host_vars)))
                     for p in paths]
        taken: list[threading.BoundedSemaphore] = []
        try:
            for pool in pools:
                while not pool.acquire(timeout=0.5):
                    left = self._remaining()
                    if left is not None and left <= 1.0:
                        raise TransportError(ErrorReason.TIMEOUT, "the global --deadline passed while waiting for a "
                                             "turn on a shared storage path")
                    if self.stopping.is_set():
                        raise TransportError(ErrorReason.INTERRUPTED, "run interrupted while waiting for a turn "
                                             "on a shared storage path")
                taken.append(pool)
            yield
        finally:
            for pool in taken:
                pool.release()

    def abort_all(self) -> None:
        with self._lock:  # with _run's registration: every transport is either closed here or never used
            self.stopping.set()
            transports = list(self._active.values())
        for transport in transports:
            transport.close()

    def run(self, host: Host) -> NodeResult:
        progress = self.options.progress
        if progress is None:
            return self._guarded(host)
        progress.node_started(host.name)
        node = self._guarded(host)
        progress.node_finished(host.name, node.verdict.value)
        return node

    def _doing(self, name: str, step: str) -> None:
        if self.options.progress is not None:
            self.options.progress.doing(name, step)

    def _guarded(self, host: Host) -> NodeResult:
        started = time.monotonic()
        try:
            return self._run(host, started)
        except OutputError:
            raise  # the run folder cannot be written (disk full): the run stops with exit 2, not just this node
        except Exception as exc:  # noqa: BLE001 - a bug on one node must not stop the others
            return error_node(host, "system.internal", f"nvdeploy internal error: {type(exc).__name__}: {exc}",
                              ErrorReason.NOT_RUN, time.monotonic() - started, Remediation.INVESTIGATE)

    def _remaining(self) -> Optional[float]:
        return None if self.deadline_at is None else self.deadline_at - time.monotonic()

    def _run_heavy(self, transport: Transport, heavy: Sequence[CommandSpec], results: list[CommandResult],
                   node: str = "", burn_in: Sequence[CommandSpec] = (), after: Sequence[CommandSpec] = (),
                   host_vars: Mapping[str, Any] = {}) -> tuple[list[CommandResult], dict[str, HeavySkip]]:
        """Run the heavy collectors one by one after the light batch, unless the light batch says the node cannot
        take them (checks/heavy_gate.py) or the deadline passed; then the burn-in's collectors together in one
        batch (the sampler must run beside the load); returns the results and what was skipped, why."""
        skipped: dict[str, HeavySkip] = {}
        if not heavy and not burn_in:
            return results, skipped
        light = {r.name: r for r in results}
        facts = node_facts(light)
        gate = heavy_skip(light, facts, self.options.allow_busy)
        # A collector that loads no GPU (storage) runs beside GPU compute processes: the busy guard is about GPUs.
        gate_no_gpu = heavy_skip(light, facts, self.options.allow_busy, loads_gpu=False)
        batches = [[spec] for spec in heavy] + burnin_batches(burn_in) + [[spec] for spec in after]
        readings = {spec.name for spec in after}
        loaded = False  # a test that loads the GPUs ran: only then is there something for the later reads to see
        interrupted_skip = INTERRUPTED_SKIP
        for batch in batches:
            spec = batch[0]
            if spec.name in readings and not loaded:
                continue
            if self.stopping.is_set():
                skipped.update({s.name: interrupted_skip for s in batch})
                continue
            remaining = self._remaining()
            # Under a second left is a deadline passed: the test could only start and be cut at once.
            loads_gpu = spec.name not in COLLECTORS or COLLECTORS[spec.name].loads_gpu
            skip = (gate if loads_gpu else gate_no_gpu) or (DEADLINE_SKIP if remaining is not None and remaining < 1.0
                                                            else None)
            if skip is not None:
                skipped.update({s.name: skip for s in batch})
                continue
            burning = spec.name in BURNIN_COLLECTORS
            self._doing(node, "burn-in" if burning else spec.name)
            began = time.monotonic()
            try:
                if spec.name == STORAGE_COLLECTOR and shared_paths(host_vars):
                    with self._storage_turn(host_vars):
                        remaining = self._remaining()
                        ran = transport.run_batch(_capped(batch, remaining), remaining)
                else:
                    ran = transport.run_batch(_capped(batch, remaining), remaining)
            except TransportError as exc:  # the connection dropped mid-test: that check is ERROR, not the run
                reason = ErrorReason.INTERRUPTED if self.stopping.is_set() else exc.reason  # closed by the interrupt
                ran = [CommandResult(s.name, s.display, None, error=reason, error_detail=exc.detail) for s in batch]
            loaded = loaded or (loads_gpu and spec.name not in readings)
            if burning and self.options.burn_in_s is not None and any(
                    r.error is ErrorReason.INTERRUPTED for r in ran):
                # How far the burn-in got, for the operator deciding whether to --resume it; the kernel log after
                # it is not read either, and its checks say the same.
                detail = (f"run interrupted {format_duration(time.monotonic() - began)} into the "
                          f"{format_duration(self.options.burn_in_s)} burn-in")
                ran = [replace(r, error_detail=detail) if r.error is ErrorReason.INTERRUPTED else r for r in ran]
                interrupted_skip = HeavySkip(ErrorReason.INTERRUPTED, f"not finished: {detail}")
            results = results + ran
        return results, skipped

    def _run(self, host: Host, started: float) -> NodeResult:
        if self.stopping.is_set():
            return error_node(host, "system.reachable", "not started: run interrupted", ErrorReason.INTERRUPTED)
        remaining = self._remaining()
        if remaining is not None and remaining <= 0:
            return error_node(host, "system.reachable", "not started: the global --deadline passed",
                              ErrorReason.NOT_RUN)
        profile = self.catalog.get(host.profile or "")
        transport = make_transport(host, self.catalog, self.options, run_id=self.recorder.run_dir.name)
        with self._lock:
            # Checked again under the lock abort_all takes: an interrupt that came after the check above must not
            # miss this transport (it would connect and run the whole batch after the run was stopped).
            stopped = self.stopping.is_set()
            if not stopped:
                self._active[host.name] = transport
        if stopped:
            transport.close()
            return error_node(host, "system.reachable", "not started: run interrupted", ErrorReason.INTERRUPTED)
        try:
            try:
                transport.connect()
            except TransportError as exc:
                reason = ErrorReason.INTERRUPTED if self.stopping.is_set() else exc.reason
                return error_node(host, "system.reachable", exc.detail, reason, time.monotonic() - started,
                                  Remediation.INVESTIGATE)
            connected = time.monotonic() - started
            reach = Finding("system.reachable", Verdict.PASS, f"connected over {host.connection} in {connected:.2f} s",
                            node=host.name, observed=round(connected, 3), unit="s")
            planned = node_plan(host, profile, self.node_checks, self.options)
            heavy, burn_in, no_burn_in = planned.heavy, planned.burn_in, planned.no_burn_in
            after = planned.after
            remaining = self._remaining()
            self._doing(host.name, "light batch")
            try:
                results = transport.run_batch(_capped(planned.light, remaining), remaining)
            except TransportError as exc:
                reason = ErrorReason.INTERRUPTED if self.stopping.is_set() else exc.reason
                # A batch refused by another run's lock on the node is ERROR busy naming the holder.
                return error_node(host, "system.lock" if reason is ErrorReason.BUSY else "system.reachable",
                                  exc.detail, reason, time.monotonic() - started, Remediation.INVESTIGATE)
            holder = batch_refused({r.name: r for r in results})
            unsafe = batch_unsafe({r.name: r for r in results}) if holder is None else None
            if holder is not None or unsafe is not None:
                busy = Finding("system.lock", Verdict.ERROR,
                               f"node busy, not checked: {holder}" if holder is not None else f"not checked: {unsafe}",
                               node=host.name, reason=ErrorReason.BUSY if holder is not None else ErrorReason.LOCK,
                               remediation=Remediation.INVESTIGATE)
                return NodeResult(host.name, (reach, busy), address=host.address, profile=profile.stamp,
                                  connection=host.connection, duration_s=time.monotonic() - started)
            results, skipped = self._run_heavy(transport, heavy, results, host.name, burn_in, after, host.vars)
            skipped.update(no_burn_in)
        finally:
            transport.close()
            with self._lock:
                self._active.pop(host.name, None)
        evidence = self.recorder.write_evidence(host.name, results)
        outcome = self.evaluator(EvaluationJob(host.name, host.vars, profile, tuple(results),
                                               {e.collector: e.path for e in evidence}, self.node_checks, skipped))
        return NodeResult(host.name, (reach, *outcome.findings), address=host.address, profile=profile.stamp,
                          connection=host.connection, duration_s=time.monotonic() - started,
                          evidence=tuple(evidence), facts=outcome.facts)


@dataclass(frozen=True)
class NodePlan:
    """What a validation runs on one node: its light batch (one round trip), then its heavy collectors one at a
    time, then the burn-in's collectors together; burn-in checks chosen without --burn-in are not run."""

    light: tuple[CommandSpec, ...]
    heavy: tuple[CommandSpec, ...]
    burn_in: tuple[CommandSpec, ...]
    no_burn_in: Mapping[str, HeavySkip]
    # Read after the heavy tests and the burn-in: dcgm.health's watches again, once they have had samples.
    after: tuple[CommandSpec, ...] = ()


HEALTH_CHECK = "dcgm.health"
HEALTH_AFTER = "dcgm_health_after"


def node_plan(host: Host, profile: Any, node_checks: Sequence[str], options: EngineOptions) -> NodePlan:
    """The commands ``node_checks`` need on ``host``: what the run sends, and what ``validate --dry-run`` shows."""
    needed = [c for check_id in node_checks for c in CHECKS[check_id].collectors]
    heavy_vars = _heavy_vars(host, profile, options.waivers, options.waiver_date)
    heavy = [s for s in specs_for(needed, heavy_vars, heavy=True, profile=profile) if s.name not in BURNIN_COLLECTORS]
    burn_in: list[CommandSpec] = []
    no_burn_in: dict[str, HeavySkip] = {}
    if any(name in BURNIN_COLLECTORS for name in needed):
        if options.burn_in_s is None:
            # A burn-in check chosen without --burn-in: nothing says how long; its checks are ERROR not_run.
            no_burn_in = {name: NO_BURN_IN_SKIP for name in BURNIN_COLLECTORS}
        else:
            burn_in = burnin_specs(heavy_vars, profile, options.burn_in_s, options.burn_in_interval_s)
    after: list[CommandSpec] = []
    if heavy or burn_in:
        needed += [c for c in GUARD_COLLECTORS if c not in needed]
        if HEALTH_CHECK in node_checks:
            after = specs_for([HEALTH_AFTER], heavy_vars, heavy=True, profile=profile)
    return NodePlan(tuple(light_specs(host.vars, needed, profile)), tuple(heavy), tuple(burn_in), no_burn_in,
                    tuple(after))


def _heavy_vars(host: Host, profile: Any, waivers: Sequence[Any], on: Optional[dt.date] = None) -> Any:
    """The host vars the heavy collectors are built from: the node's own, plus the ``--ignoreErrorCodes`` value of
    the waivers that name DCGM error codes for it and are active ``on`` that day (the run's; today, UTC, when not
    given: a lapsed waiver adds nothing)."""
    if not waivers:
        return host.vars
    gpu = getattr(profile, "gpu", None)
    codes = waiver_rules.dcgm_ignore_error_codes(waivers, host.name, on or waiver_rules.today_utc(),
                                                 getattr(gpu, "count", None))
    return {**host.vars, DCGM_IGNORE_VAR: codes} if codes else host.vars


def _capped(specs: Sequence[CommandSpec], remaining: Optional[float]) -> list[CommandSpec]:
    """Specs whose own timeout ends by the global deadline, so the node's ``timeout`` stops them there too."""
    if remaining is None:
        return list(specs)
    limit = max(1.0, remaining)
    return [replace(s, timeout_s=limit) if s.timeout_s > limit else s for s in specs]


GC_THRESHOLD = 20_000  # allocations between young-generation collections during a run (Python's default: 700)


def _finished(finished: queue.SimpleQueue[cf.Future[NodeResult]], wait_s: float) -> list[cf.Future[NodeResult]]:
    """The futures finished so far, waiting up to ``wait_s`` for the first (so Ctrl-C is seen twice a second)."""
    try:
        done = [finished.get(timeout=wait_s)]
    except queue.Empty:
        return []
    while True:
        try:
            done.append(finished.get_nowait())
        except queue.Empty:
            return done


class _SafePoints:
    """Ctrl-C and SIGTERM raised only where run_hosts waits, never while it hands a result on.

    Python raises a signal's exception at whatever line the main thread is on: between marking a node handed and
    spooling it, that node was lost from results.json (one of 400 in a test that interrupts a run with
    evaluation workers, where the main thread spends most of its time handing results on). Here the handlers
    note a signal that comes outside :meth:`waiting`, and it is raised as the next wait begins.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self._previous: dict[int, Any] = {}
        self._pending: Optional[tuple[int, Any]] = None
        self._waiting = False

    def __enter__(self) -> _SafePoints:
        if threading.current_thread() is threading.main_thread():  # handlers are the main thread's alone
            for signum in self.SIGNALS:
                previous = signal.getsignal(signum)
                if callable(previous):
                    self._previous[signum] = previous
                    signal.signal(signum, self._handle)
        return self

    def __exit__(self, exc_type: object, *_exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        if exc_type is None:  # a signal after the last wait still stops the run (its nodes are all handed on)
            self._raise_pending()

    def _handle(self, signum: int, frame: Any) -> None:
        if self._waiting:
            self._previous[signum](signum, frame)
        elif self._pending is None:
            self._pending = (signum, frame)

    def _raise_pending(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            self._previous[pending[0]](*pending)

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        self._raise_pending()
        self._waiting = True
        try:
            yield
        finally:
            self._waiting = False


def run_hosts(hosts: Sequence[Host], runner: NodeRunner, forks: int,
              on_result: Callable[[NodeResult], None],
              keep: bool = True) -> tuple[dict[str, NodeResult], Optional[Interrupted]]:
    """Fan out over ``hosts`` with at most ``forks`` at once. Returns results by name and the interrupt, if any.

    Every host gets a result: hosts never started because of an interrupt are ERROR ``interrupted``. With
    ``keep=False`` the results handed to ``on_result`` are not kept (the caller keeps them, e.g. on disk: a fleet
    run must not hold every node's findings and evidence records); the dict then holds only those never handed.
    """
    results: dict[str, NodeResult] = {}
    handed: set[str] = set()

    def take(node: NodeResult) -> None:
        handed.add(node.name)
        if keep:
            results[node.name] = node
        on_result(node)

    interrupt: Optional[Interrupted] = None
    workers = max(1, min(forks, len(hosts)))
    pool = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nvd-node")
    # Finished futures arrive on a queue: cf.wait(pending, FIRST_COMPLETED) would add and remove a waiter on every
    # pending future per completion, O(nodes^2) lock operations (a third of a 1,000-node run's CPU).
    finished_queue: queue.SimpleQueue[cf.Future[NodeResult]] = queue.SimpleQueue()
    # A window of submitted hosts, topped up as results are taken: with every host submitted at once, nodes that
    # finished while the main thread waited for the GIL queued up with their whole results (a 10,000-node
    # simulated run peaked at ~300 MiB of such backlog and the heap it fragmented). Twice the workers keeps each
    # worker a node queued.
    window = 2 * workers
    waiting = iter(hosts)
    futures: dict[cf.Future[NodeResult], Host] = {}

    def submit_more() -> None:
        while len(futures) < window:
            host = next(waiting, None)
            if host is None:
                return
            future = pool.submit(runner.run, host)
            futures[future] = host
            future.add_done_callback(finished_queue.put)

    # Fewer young-generation collections while nodes run: parsing one node allocates tens of thousands of tracked
    # objects, and at Python's default threshold (700) the collector took ~20% of a 2,000-node run's CPU.
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], GC_THRESHOLD), *thresholds[1:])
    safe = _SafePoints()
    try:
        with safe:
            submit_more()
            while futures:
                with safe.waiting():
                    done = _finished(finished_queue, 0.5)
                for future in done:
                    # Dropped from the map: a finished future holds its node's whole result.
                    if futures.pop(future, None) is None or future.cancelled():
                        continue
                    take(future.result())
                submit_more()
    except (KeyboardInterrupt, Interrupted) as exc:
        interrupt = exc if isinstance(exc, Interrupted) else Interrupted(130)
        runner.abort_all()
        for future in futures:
            future.cancel()
        # Running nodes see their transport closed and return promptly; give them a moment to report.
        finished, _ = cf.wait([f for f in futures if not f.cancelled()], timeout=5)
        for future in finished:
            futures.pop(future, None)
            take(future.result())
    except OutputError:
        # Evidence or journal cannot be written: stop every node now; the caller reports it (exit 2).
        runner.abort_all()
        for future in futures:
            future.cancel()
        raise
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        gc.set_threshold(*thresholds)
    for host in hosts:  # those still running, cancelled, or never submitted
        if host.name not in handed and host.name not in results:
            results[host.name] = error_node(host, "system.reachable", "not finished: run interrupted",
                                            ErrorReason.INTERRUPTED)
    return results, interrupt
