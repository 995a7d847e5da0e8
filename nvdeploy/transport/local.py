"""Run on this machine with a subprocess: for nvdeploy started on a node itself, or from a Slurm prolog.

The same batch script as over SSH (transport/batch.py), with the same lifetime rule: its stdin is a pipe this
process keeps open until it has read the answer. Closing it (timeout, deadline, Ctrl-C, or this process dying,
when the kernel closes it) makes the batch end every process it started and remove its temp folder.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import threading
import time
from typing import Callable, Optional, Sequence

from nvdeploy.results import CommandResult, ErrorReason
from nvdeploy.transport import batch
from nvdeploy.transport.base import CommandSpec, Transport
from nvdeploy.transport.batch_budget import BatchBudget, batch_budget
from nvdeploy.transport.sudo_gate import SudoGate

_BATCH_SLACK_S = batch.KILL_GRACE_S + 5
# Never handed to the batch's processes (the CLI removes it from os.environ too).
_SECRET_ENV = ("NVDEPLOY_SUDO_PASSWORD",)


class LocalTransport(Transport):
    name = "local"
    # What runs the batch script (its last argument). A test puts a shell that starts late here.
    shell: tuple[str, ...] = ("/bin/sh", "-c")

    def __init__(self, sudo_password: Optional[str] = None) -> None:
        self._procs: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._own_gate = SudoGate(sudo_password) if sudo_password else None

    def __repr__(self) -> str:  # never show the password
        return f"LocalTransport({self.node or 'localhost'})"

    def connect(self) -> None:
        self._closed = False

    def run_batch(self, commands: Sequence[CommandSpec], deadline_s: Optional[float] = None) -> list[CommandResult]:
        if not commands:
            return []
        # How long the run's sudo gate may hold this node back; the batch's own wait is its budget (batch_budget.py).
        limit = max(c.timeout_s for c in commands) + _BATCH_SLACK_S
        if deadline_s is not None:
            limit = min(limit, max(deadline_s, 0.1))
        started = time.monotonic()

        def execute(specs: Sequence[CommandSpec], password: Optional[str],
                    on_output: Callable[[bytes], None]) -> list[CommandResult]:
            budget = batch_budget(specs, password is not None, deadline_s, started)
            out, error, detail = self._exec(specs, password, on_output, budget)
            return batch.parse_output(specs, out, time.monotonic() - started, error, detail)

        gate = self.sudo_gate if self.sudo_gate is not None else self._own_gate
        return batch.run_gated(self.node or "localhost", gate, commands, limit, lambda: self._closed, execute)

    def _exec(self, specs: Sequence[CommandSpec], password: Optional[str], on_output: Callable[[bytes], None],
              budget: BatchBudget) -> tuple[bytes, Optional[ErrorReason], str]:
        if self._closed:
            return b"", ErrorReason.INTERRUPTED, "run interrupted"
        script = batch.build_script(specs, sudo_password=password is not None, run_id=self.run_id,
                                    heartbeat_lost_s=batch.HEARTBEAT_LOST_S, python_runner=self.python_batch)
        env = {k: v for k, v in os.environ.items() if k not in _SECRET_ENV}
        proc = subprocess.Popen([*self.shell, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, env=env, cwd="/")
        with self._lock:
            self._procs.add(proc)
        out = bytearray()
        try:
            assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
            if password is not None:
                proc.stdin.write((password + "\n").encode())
                proc.stdin.flush()
            # stdin stays open, with only the heartbeat written to it: its EOF tells the batch the run ended.
            beat = time.monotonic()
            with selectors.DefaultSelector() as sel:
                sel.register(proc.stdout, selectors.EVENT_READ)
                sel.register(proc.stderr, selectors.EVENT_READ)
                while sel.get_map():
                    if self._closed:
                        return bytes(out), ErrorReason.INTERRUPTED, "run interrupted"
                    left = budget.left(time.monotonic())
                    if left <= 0:
                        return bytes(out), ErrorReason.TIMEOUT, budget.expired()
                    if time.monotonic() - beat >= batch.HEARTBEAT_S:
                        beat = time.monotonic()
                        try:
                            proc.stdin.write(batch.HEARTBEAT)
                            proc.stdin.flush()
                        except OSError:
                            pass  # the batch has gone; its output tells the rest
                    for key, _ in sel.select(min(left, 0.2)):
                        chunk = os.read(key.fd, 65536)
                        if not chunk:
                            sel.unregister(key.fileobj)
                        elif key.fileobj is proc.stdout:
                            out += chunk
                            budget.observe(out, time.monotonic())
                            on_output(bytes(out))
            on_output(bytes(out))
            try:
                proc.wait(max(1.0, budget.left(time.monotonic())))
            except subprocess.TimeoutExpired:
                return bytes(out), ErrorReason.TIMEOUT, budget.expired()
            if self._closed and batch.END_MARKER not in out:
                return bytes(out), ErrorReason.INTERRUPTED, "run interrupted"
            return bytes(out), None, ""
        except OSError as exc:
            return bytes(out), ErrorReason.CONNECTION_LOST, f"local batch failed: {exc}"
        finally:
            self._release(proc)
            with self._lock:
                self._procs.discard(proc)

    @staticmethod
    def _release(proc: subprocess.Popen[bytes]) -> None:
        """Close our ends: if the batch still runs, EOF on its stdin makes it end its processes itself."""
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass

    def close(self) -> None:
        self._closed = True
        with self._lock:
            procs = list(self._procs)
        for proc in procs:
            try:
                if proc.stdin is not None:
                    proc.stdin.close()
            except OSError:
                pass
