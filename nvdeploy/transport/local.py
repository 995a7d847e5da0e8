"""Run on this machine with a subprocess: for nvdeploy started on a node itself, or from a Slurm prolog."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import Optional, Sequence

from nvdeploy.results import CommandResult, ErrorReason
from nvdeploy.transport import batch
from nvdeploy.transport.base import CommandSpec, Transport

_BATCH_SLACK_S = batch.KILL_GRACE_S + 5


class LocalTransport(Transport):
    name = "local"

    def __init__(self) -> None:
        self._procs: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()
        self._closed = False

    def connect(self) -> None:
        self._closed = False

    def run_batch(self, commands: Sequence[CommandSpec], deadline_s: Optional[float] = None) -> list[CommandResult]:
        if not commands:
            return []
        limit = max(c.timeout_s for c in commands) + _BATCH_SLACK_S
        if deadline_s is not None:
            limit = min(limit, max(deadline_s, 0.1))
        script = batch.build_script(commands)
        started = time.monotonic()
        proc = subprocess.Popen(["/bin/sh", "-c", script], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        with self._lock:
            self._procs.add(proc)
        error: Optional[ErrorReason] = None
        detail = ""
        try:
            out, _ = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            self._kill(proc)
            out, _ = proc.communicate()
            error, detail = ErrorReason.TIMEOUT, f"batch exceeded {limit:.0f} s"
        finally:
            with self._lock:
                self._procs.discard(proc)
        if self._closed and error is None and batch.END_MARKER not in out:
            error, detail = ErrorReason.INTERRUPTED, "run interrupted"
        return batch.parse_output(commands, out, time.monotonic() - started, error, detail)

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes]) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self) -> None:
        self._closed = True
        with self._lock:
            procs = list(self._procs)
        for proc in procs:
            self._kill(proc)
