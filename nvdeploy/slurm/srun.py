"""``validate --via slurm``: the node batch (transport/batch.py, the SAME script SSH sends) run on every node by
one ``srun -N <n> --ntasks-per-node=1`` job step instead of one SSH connection per node.

How it fits the engine without a second pipeline: each node gets an :class:`SrunTransport`; their ``run_batch``
calls go to one :class:`SrunPool`, which gathers the calls that arrive together (every node's light batch at the
start; heavy batches as nodes reach them) and runs ONE srun per distinct script for all of them. The script
travels on srun's stdin, broadcast to every task (``--input=all``: no argv size limit, no shared file system
needed; see WRAPPER); each task prints its framed output base64-encoded after a marker naming the node, with
``--label`` keeping the tasks' lines apart (all "nodes" of a test cluster are one host, so ``--output=%N`` files
would collide). The bytes are then split with ``batch.parse_output`` exactly as over SSH.

A node Slurm cannot start a task on (down, drained) is ERROR ``unreachable`` with Slurm's state and reason, and
is left out of the step (``srun`` would otherwise wait for it forever). The step has ``--time`` (the batch's own
limit) and nvdeploy's deadline; whichever comes first, the step is cancelled with ``scancel`` by its unique job
name and every node without its end marker is ERROR ``timeout``.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import math
import os
import re
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Optional, Sequence

from nvdeploy.results import CommandResult, ErrorReason
from nvdeploy.slurm.client import SlurmClient
from nvdeploy.slurm.nodes import node_from_facts
from nvdeploy.slurm.source import FACTS_VAR
from nvdeploy.transport import batch
from nvdeploy.transport.base import CommandSpec, Transport, TransportError

POOL_VAR = "slurm_pool"
_NODE_MARK = "__NVD_SRUN_NODE "
_DONE_MARK = "__NVD_SRUN_DONE__"
_LABELLED = re.compile(r"^\s*(\d+): ?(.*)$")
_SLACK_S = batch.KILL_GRACE_S + 10
GATHER_S = 2.0
_POOLS: dict[str, SrunPool] = {}
_IDS = itertools.count(1)
_UNUSABLE = ("down", "drained", "draining", "future", "unknown", "error")


@dataclass(frozen=True)
class SrunOptions:
    reservation: Optional[str] = None
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    exclusive: bool = True
    mpi: str = "pmix"
    immediate_s: int = 30
    job_name: str = "nvdeploy"


def srun_argv(nodes: Sequence[str], opts: SrunOptions, time_limit_s: float, job_name: str,
              gres_gpus: Optional[int]) -> list[str]:
    """The step's command line: one task per node, stdin broadcast, labelled output, bounded in time."""
    minutes, seconds = divmod(max(60, math.ceil(time_limit_s)), 60)
    argv = ["srun", f"--nodes={len(nodes)}", f"--nodelist={','.join(nodes)}", "--ntasks-per-node=1",
            "--input=all", "--label", f"--job-name={job_name}", f"--time={minutes}:{seconds:02d}",
            f"--immediate={max(1, int(opts.immediate_s))}", "--kill-on-bad-exit=0",
            # The task starts in / (srun's default is the caller's folder, which may be one others can write): the
            # batch changes there too, but its wrapper runs before it.
            "--chdir=/"]
    for flag, value in (("reservation", opts.reservation), ("partition", opts.partition),
                        ("account", opts.account), ("qos", opts.qos)):
        if value:
            argv.append(f"--{flag}={value}")
    if opts.exclusive:
        argv.append("--exclusive")
    if gres_gpus:
        argv.append(f"--gres=gpu:{gres_gpus}")
    return argv + ["/bin/sh"]


def nccl_srun_argv(nodes: Sequence[str], gpus_per_node: int, opts: SrunOptions, tool: Sequence[str],
                   time_limit_s: float, job_name: str, ranks_per_node: Optional[int] = None) -> list[str]:
    """Multi-node nccl-tests as a Slurm step: one rank per GPU (or ``ranks_per_node``) under the cluster's MPI
    plugin (``--mpi=pmix``), instead of mpirun over SSH; ``tool`` is the all_reduce_perf argv (``-g 1``: one GPU
    per rank)."""
    minutes, seconds = divmod(max(60, math.ceil(time_limit_s)), 60)
    argv = ["srun", f"--mpi={opts.mpi}", f"--nodes={len(nodes)}", f"--nodelist={','.join(nodes)}",
            f"--ntasks-per-node={ranks_per_node or gpus_per_node}", f"--gpus-per-node={gpus_per_node}",
            f"--job-name={job_name}",
            f"--time={minutes}:{seconds:02d}", f"--immediate={max(1, int(opts.immediate_s))}", "--chdir=/"]
    for flag, value in (("reservation", opts.reservation), ("partition", opts.partition),
                        ("account", opts.account), ("qos", opts.qos)):
        if value:
            argv.append(f"--{flag}={value}")
    if opts.exclusive:
        argv.append("--exclusive")
    return argv + list(tool)


# The node batch comes on the task's stdin, never in argv (one execve word is capped at 128 KiB, MAX_ARG_STRLEN,
# and the probe alone is ~70 KB of it): a line with its size in bytes, then the script. ``read`` takes the size
# line byte by byte and GNU ``head -c`` never reads past its count, so the rest of stdin stays the batch's: srun
# keeps it open (--input=all) until nvdeploy closes it, and the batch's watcher (transport/batch.py) ends the batch
# at that EOF, as it does when SSH drops. The script file is removed as soon as it is open (fd 4), so a killed step
# leaves nothing in /tmp. The framed output is base64 so that --label cannot break a byte of it; the marker names
# the node that produced it.
WRAPPER = (
    "command -v base64 >/dev/null 2>&1 || { echo 'nvdeploy: base64 not found on node' >&2; exit 95; }\n"
    "IFS= read -r nvd_n || { echo 'nvdeploy: no batch on stdin' >&2; exit 94; }\n"
    'nvd_f=$(mktemp "${TMPDIR:-/tmp}/nvd-srun.XXXXXX") || exit 97\n'
    'head -c "$nvd_n" >"$nvd_f" && exec 4<"$nvd_f"; nvd_rc=$?; rm -f "$nvd_f"\n'
    '[ "$nvd_rc" = 0 ] || { echo "nvdeploy: could not read the batch from stdin" >&2; exit 94; }\n'
    f"printf '{_NODE_MARK}%s\\n' \"${{SLURMD_NODENAME:-?}}\"\n"
    "/bin/sh /dev/fd/4 | base64\n"
    f"printf '{_DONE_MARK}\\n'\n"
)


def batch_input(script: str) -> bytes:
    """What the step's stdin starts with: the batch's size line, then the batch (see WRAPPER)."""
    data = script.encode("utf-8")
    return f"{len(data)}\n".encode() + data


def split_labelled(stdout: bytes) -> dict[str, bytes]:
    """srun --label output -> raw batch bytes per node (from each task's marker and base64 body)."""
    per_task: dict[str, list[str]] = {}
    for raw in stdout.decode("ascii", "replace").splitlines():
        match = _LABELLED.match(raw)
        if match:
            per_task.setdefault(match.group(1), []).append(match.group(2))
    out: dict[str, bytes] = {}
    for lines in per_task.values():
        node = next((line[len(_NODE_MARK):].strip() for line in lines if line.startswith(_NODE_MARK)), None)
        if node is None:
            continue
        body, done = [], False
        for line in lines:
            if line.startswith(_NODE_MARK):
                continue
            if line.strip() == _DONE_MARK:
                done = True
                break
            body.append(line.strip())
        try:
            data = base64.b64decode("".join(body), validate=False)
        except (binascii.Error, ValueError):
            data = b""
        # Without the done marker the base64 may be cut mid-block: keep what decoded; the batch's own end marker
        # decides completeness.
        out[node] = data if done else data.split(batch.END_MARKER)[0]
    return out


def _node_message(stderr: str, node: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    mine = [line for line in lines if re.search(rf"\b{re.escape(node)}\b", line)]
    chosen = mine or [line for line in lines if "error" in line.lower()] or lines
    return " / ".join(dict.fromkeys(chosen))[-500:]


@dataclass
class _Request:
    node: str
    specs: list[CommandSpec]
    deadline_s: Optional[float]
    run_id: str = ""
    done: bool = False
    results: list[CommandResult] = field(default_factory=list)


class SrunPool:
    """Gathers the nodes' batches that arrive together and runs them as one srun step."""

    def __init__(self, hosts: Sequence[Any], options: SrunOptions, client: Optional[SlurmClient] = None,
                 gather_s: float = GATHER_S) -> None:
        self.key = f"pool{next(_IDS)}"
        self.options = options
        self.client = client or SlurmClient()
        self.gather_s = gather_s
        self.facts = {h.name: node_from_facts(h.name, h.vars[FACTS_VAR]) for h in hosts
                      if isinstance(h.vars.get(FACTS_VAR), dict)}
        self._cond = threading.Condition()
        self._pending: list[_Request] = []
        # Nodes that will still send a batch: a gathering waits for all of them (or GATHER_S), so that the start
        # of a run is one step, not one per thread that happened to come first.
        self._waited: set[str] = set()
        self._refresh_lock = threading.Lock()
        self._refreshed_at = 0.0
        self.respond_wait_s = float(max(options.immediate_s, 1))
        self._expected = {h.name for h in hosts if self.unusable(h.name, silent_ok=True) is None}
        self._leading = False
        self._rounds = itertools.count(1)
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._aborted = False
        self.steps: list[dict[str, Any]] = []  # what ran: for the record and the fan-out figures
        _POOLS[self.key] = self

    def release(self) -> None:
        _POOLS.pop(self.key, None)

    # ---- transports ----
    def unusable(self, node: str, silent_ok: bool = False) -> Optional[tuple[ErrorReason, str]]:
        """Why Slurm cannot start this node's task (it would hold up the whole step), or None. ``silent_ok``:
        do not count "not responding" (see :meth:`await_response`)."""
        facts = self.facts.get(node)
        if facts is None:
            return None
        why = f" ({facts.reason})" if facts.reason else ""
        if facts.short_state in _UNUSABLE:
            return ErrorReason.UNREACHABLE, f"Slurm cannot start a task on {node}: node is {facts.short_state}{why}"
        if "NOT_RESPONDING" in facts.flags and not silent_ok:
            waited = f" for {self.respond_wait_s:g} s" if node in self._waited else ""
            return ErrorReason.UNREACHABLE, (f"Slurm cannot start a task on {node}: slurmd is not responding "
                                             f"({facts.short_state}*){waited}{why}")
        if facts.busy and self.options.exclusive:
            return ErrorReason.BUSY, (f"Slurm shows jobs on {node} (node {facts.short_state}): an exclusive srun "
                                      "step cannot start there (wait for them with --maintenance --wait-drain, or "
                                      "--no-exclusive)")
        return None

    def _only_silent(self, node: str) -> bool:
        """Not responding, and nothing else in the way: Slurm marks a node so right after a resume (or a slurmd
        restart) until its next ping, which can be seconds to a minute; such a node is waited for, not given up."""
        facts = self.facts.get(node)
        if facts is None or "NOT_RESPONDING" not in facts.flags:
            return False
        return self.unusable(node, silent_ok=True) is None

    def await_response(self, node: str) -> None:
        """Wait (at most ``respond_wait_s``) until Slurm hears from a node it shows as not responding. The nodes
        waited for are asked about together, one ``sinfo`` a second for all of them, whichever thread asks."""
        deadline = time.monotonic() + self.respond_wait_s
        while self._only_silent(node) and time.monotonic() < deadline and not self._aborted:
            with self._refresh_lock:
                if time.monotonic() - self._refreshed_at >= 1.0:
                    silent = sorted(n for n in self.facts if self._only_silent(n))
                    try:
                        fresh = self.client.nodes(",".join(silent)) if silent else []
                    except Exception:  # noqa: BLE001 - slurmctld busy: ask again, within the bound
                        fresh = []
                    for entry in fresh:
                        if entry.name in self.facts:
                            self.facts[entry.name] = entry
                    self._refreshed_at = time.monotonic()
            if self._only_silent(node):
                time.sleep(0.2)
        if self._only_silent(node):
            self._waited.add(node)

    def detach(self, node: str) -> None:
        """The node sends no more batches (finished, failed, or interrupted)."""
        with self._cond:
            self._expected.discard(node)
            self._cond.notify_all()

    def abort(self) -> None:
        """Ctrl-C: cancel every running step (scancel by job name) and stop srun."""
        self._aborted = True
        with self._cond:
            procs = dict(self._procs)
        for name, proc in procs.items():
            self._cancel(name, proc)

    def _cancel(self, job_name: str, proc: subprocess.Popen[bytes]) -> None:
        try:
            self.client.runner(["scancel", "--full", f"--name={job_name}"], 10.0)
        except Exception:  # noqa: BLE001 - the kill below still ends our side
            pass
        try:
            proc.send_signal(signal.SIGINT)  # srun forwards it to the tasks
            proc.wait(timeout=3)
        except (subprocess.TimeoutExpired, ProcessLookupError, OSError):
            # An srun that ignores SIGINT (inherited ignored, e.g. nvdeploy started from a script's background job)
            # is killed and reaped: no zombie srun is left behind the run.
            try:
                proc.kill()
                proc.wait(timeout=10)
            except (subprocess.TimeoutExpired, OSError):
                pass

    # ---- gathering ----
    def run(self, node: str, specs: Sequence[CommandSpec], deadline_s: Optional[float],
            run_id: str = "") -> list[CommandResult]:
        request = _Request(node, list(specs), deadline_s, run_id)
        with self._cond:
            self._pending.append(request)
            self._cond.notify_all()
            while not request.done:
                if not self._leading:
                    self._leading = True
                    break
                self._cond.wait(0.2)
            else:
                return request.results
        try:
            started = time.monotonic()
            with self._cond:
                while (not self._expected <= {r.node for r in self._pending}
                       and time.monotonic() - started < self.gather_s):
                    self._cond.wait(0.05)
                gathered, self._pending = self._pending, []
            self._execute(gathered)
        finally:
            with self._cond:
                self._leading = False
                self._cond.notify_all()
        with self._cond:
            while not request.done:
                self._cond.wait(0.2)
        return request.results

    def _gres_for(self, nodes: Sequence[str]) -> Optional[int]:
        """--gres=gpu:<n> so the step owns the GPUs: the smallest GRES count, and none unless every node has one
        (asking a GPU-less node for GPUs would fail the whole step)."""
        counts = [self.facts[n].gpus if n in self.facts else None for n in nodes]
        return min(counts) if counts and all(counts) else None  # type: ignore[type-var]

    def _options_for(self, nodes: Sequence[str]) -> SrunOptions:
        """Without --partition: a partition every node is in (srun's default partition may not hold them)."""
        if self.options.partition or not all(n in self.facts for n in nodes):
            return self.options
        common = [p for p in self.facts[nodes[0]].partitions if all(p in self.facts[n].partitions for n in nodes)]
        return replace(self.options, partition=common[0]) if common else self.options

    # ---- one step ----
    def _execute(self, requests: list[_Request]) -> None:
        started = time.monotonic()
        try:
            by_node = {r.node: r for r in requests}
            if self._aborted:
                raw: dict[str, bytes] = {}
                error, detail, stderr = ErrorReason.INTERRUPTED, "run interrupted", ""
            else:
                raw, error, detail, stderr = self._srun(by_node)
            duration = time.monotonic() - started
            for node, request in by_node.items():
                data = raw.get(node)
                if data is None:
                    reason = error or ErrorReason.UNREACHABLE
                    message = detail or (f"srun: no output from {node}: " + _node_message(stderr, node)
                                         if stderr else f"srun: no output from {node}")
                    request.results = batch.parse_output(request.specs, b"", duration, reason, message)
                else:
                    complete = batch.END_MARKER in data
                    request.results = batch.parse_output(
                        request.specs, data, duration, None if complete else (error or ErrorReason.INCOMPLETE),
                        "" if complete else (detail or "task output cut off: " + _node_message(stderr, node)))
        except Exception as exc:  # noqa: BLE001 - every waiting node must get an answer
            for request in requests:
                if not request.results:
                    request.results = batch.parse_output(request.specs, b"", 0.0, ErrorReason.NOT_RUN,
                                                         f"srun step failed: {type(exc).__name__}: {exc}")
        finally:
            with self._cond:
                for request in requests:
                    request.done = True
                self._cond.notify_all()

    def _srun(self, by_node: dict[str, _Request]) -> tuple[dict[str, bytes], Optional[ErrorReason], str, str]:
        """One step per distinct batch script (normally one for all nodes), side by side."""
        groups: dict[str, list[str]] = {}
        for node, request in by_node.items():
            # The same script as over SSH, node lock and watcher included (the run id names the lock's holder).
            groups.setdefault(batch.build_script(request.specs, run_id=request.run_id), []).append(node)
        results: list[tuple[dict[str, bytes], Optional[ErrorReason], str, str]] = []
        threads = [threading.Thread(target=lambda s=script, n=nodes: results.append(self._step(s, n, by_node)),
                                    daemon=True) for script, nodes in groups.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        raw: dict[str, bytes] = {}
        for part in results:
            raw.update(part[0])
        worst = next((r for r in results if r[1] is not None), results[0] if results else ({}, None, "", ""))
        return raw, worst[1], worst[2], "\n".join(r[3] for r in results)

    def _step(self, script: str, nodes: list[str], by_node: dict[str, _Request]
              ) -> tuple[dict[str, bytes], Optional[ErrorReason], str, str]:
        specs = [s for n in nodes for s in by_node[n].specs]
        limit = max(s.timeout_s for s in specs) + _SLACK_S
        deadlines = [by_node[n].deadline_s for n in nodes if by_node[n].deadline_s is not None]
        wait_s = limit + self.options.immediate_s
        if deadlines:
            wait_s = min(wait_s, max(1.0, min(deadlines)))  # type: ignore[type-var]
        job_name = f"{self.options.job_name}-{next(self._rounds)}"
        argv = srun_argv(nodes, self._options_for(nodes), limit, job_name, self._gres_for(nodes))
        argv += ["-c", WRAPPER, "nvd-wrap"]
        started = time.monotonic()
        # srun exports the caller's environment to the tasks: never nvdeploy's secrets.
        env = {k: v for k, v in os.environ.items() if not k.startswith("NVDEPLOY_SUDO")}
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, env=env)
        with self._cond:
            self._procs[job_name] = proc
        chunks: dict[str, list[bytes]] = {"out": [], "err": []}

        def feed(stream: Any, data: bytes) -> None:
            # srun reads its stdin only once the step is launched: written from a thread, so that a step that
            # never starts cannot block the limit below. The pipe stays open after it (closed in the finally).
            view = memoryview(data)
            try:
                # os.write, not the buffered file: a close() from the finally must never wait on its lock.
                fd = stream.fileno()
                while view:
                    view = view[os.write(fd, view):]
            except (OSError, ValueError):
                pass  # srun ended (or the step was cancelled) before it read the batch: its rc says why

        def drain(stream: Any, key: str) -> None:
            for chunk in iter(lambda: stream.read1(65536), b""):
                chunks[key].append(chunk)

        readers = [threading.Thread(target=drain, args=(proc.stdout, "out"), daemon=True),
                   threading.Thread(target=drain, args=(proc.stderr, "err"), daemon=True)]
        for reader in readers:
            reader.start()
        writer = threading.Thread(target=feed, args=(proc.stdin, batch_input(script)), daemon=True)
        writer.start()
        error: Optional[ErrorReason] = None
        detail = ""
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            self._cancel(job_name, proc)
            error, detail = ErrorReason.TIMEOUT, f"srun step {job_name} passed its limit ({wait_s:.0f} s): cancelled"
        finally:
            writer.join(timeout=5)
            try:
                assert proc.stdin is not None
                proc.stdin.close()  # EOF: any batch still running on a node ends itself
            except OSError:
                pass
            for reader in readers:
                reader.join(timeout=10)
            with self._cond:
                self._procs.pop(job_name, None)
        if self._aborted and error is None:
            error, detail = ErrorReason.INTERRUPTED, "run interrupted: srun step cancelled"
        stderr = b"".join(chunks["err"]).decode("utf-8", "replace")
        self.steps.append({"job_name": job_name, "nodes": len(nodes), "rc": proc.returncode,
                           "seconds": round(time.monotonic() - started, 3),
                           "command": shlex.join(argv[:-3] + ["/bin/sh", "-c", "<wrapper>", "nvd-wrap"])
                           + " <batch on stdin>"})
        return split_labelled(b"".join(chunks["out"])), error, detail, stderr


    # ---- multi-node nccl-tests ----
    def run_nccl(self, nodes: Sequence[str], gpus_per_node: int, tool: Sequence[str], env: dict[str, str],
                 time_limit_s: float, wait_s: float, ranks_per_node: Optional[int] = None) -> CommandResult:
        """Multi-node nccl-tests as ONE srun step from here across ``nodes`` (nccl_srun_argv), bounded by the
        step's ``--time`` and ``wait_s``: past it, or on Ctrl-C, the step is cancelled with scancel."""
        job_name = f"{self.options.job_name}-nccl{next(self._rounds)}"
        argv = nccl_srun_argv(nodes, gpus_per_node, self._options_for(nodes), tool, time_limit_s, job_name,
                              ranks_per_node)
        command = shlex.join(argv)
        if self._aborted:
            return CommandResult("nccl_multinode", command, None, error=ErrorReason.INTERRUPTED,
                                 error_detail="run interrupted")
        # srun exports the caller's environment to the tasks (the NCCL_* variables), never nvdeploy's secrets.
        step_env = {k: v for k, v in os.environ.items() if not k.startswith("NVDEPLOY_SUDO")}
        step_env.update(env)
        started = time.monotonic()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, env=step_env)
        with self._cond:
            self._procs[job_name] = proc
        error: Optional[ErrorReason] = None
        detail = ""
        try:
            out, err = proc.communicate(timeout=wait_s)
        except subprocess.TimeoutExpired:
            self._cancel(job_name, proc)
            try:
                out, err = proc.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = b"", b""
            error, detail = ErrorReason.TIMEOUT, f"srun step {job_name} passed its limit ({wait_s:.0f} s): cancelled"
        except BaseException:  # Ctrl-C while waiting: nothing stays running
            self._cancel(job_name, proc)
            raise
        finally:
            with self._cond:
                self._procs.pop(job_name, None)
        if self._aborted and error is None:
            error, detail = ErrorReason.INTERRUPTED, "run interrupted: srun step cancelled"
        duration = time.monotonic() - started
        self.steps.append({"job_name": job_name, "nodes": len(nodes), "rc": proc.returncode,
                           "seconds": round(duration, 3), "command": command})
        return CommandResult("nccl_multinode", command, None if error else proc.returncode, out, err, duration,
                             timed_out=error is ErrorReason.TIMEOUT, stdout_total=len(out), stderr_total=len(err),
                             error=error, error_detail=detail)


class SrunTransport(Transport):
    name = "slurm"

    def __init__(self, pool: SrunPool, node: str) -> None:
        self.pool = pool
        self.node = node
        self._attached = False
        self._in_flight = False

    def connect(self) -> None:
        self.pool.await_response(self.node)
        problem = self.pool.unusable(self.node)
        if problem:
            self.pool.detach(self.node)  # the step's gathering must not wait for it
            raise TransportError(*problem)
        self._attached = True

    def run_batch(self, commands: Sequence[CommandSpec], deadline_s: Optional[float] = None) -> list[CommandResult]:
        if not commands:
            return []
        self._in_flight = True
        try:
            return self.pool.run(self.node, commands, deadline_s, self.run_id)
        finally:
            self._in_flight = False

    def close(self) -> None:
        if self._in_flight:
            self.pool.abort()  # closed from another thread while its step runs: the run is being interrupted
        if self._attached:
            self._attached = False
            self.pool.detach(self.node)


def pool_of(host: Any) -> Optional[SrunPool]:
    """The srun pool of a ``--via slurm`` run's host; None for a host reached over its own connection."""
    return _POOLS.get(str(host.vars.get(POOL_VAR, "")))


def transport_for(host: Any) -> Transport:
    """The engine's hook (make_transport) for hosts of a ``--via slurm`` run."""
    pool = pool_of(host)
    if pool is None:
        raise TransportError(ErrorReason.NOT_RUN, "no srun pool for this run (internal error)")
    return SrunTransport(pool, host.name)
