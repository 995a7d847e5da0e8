"""Controller-side fault helpers for tests and benchmarks, next to the fake nodes of :mod:`nvdeploy.testing.sshd`.

- :func:`black_hole`: a loopback address and port that never answer: a listener whose accept queue is full,
  so the kernel drops every further SYN (the client sees a connect timeout, as with a dead host). Nothing
  leaves the machine.
- :func:`silent_listener`: accepts TCP connections and never says a word (a hung sshd: "no SSH banner").
- :func:`add_witness` / :func:`witness_count`: make a fake node's tool record each call, to prove that a
  command did (or did not) run there.
- :func:`node_processes`: the processes still running for a fake node (found by the node's scenario file in
  their environment), to prove a timed-out command was killed.
- :func:`start_nvdeploy` / :func:`run_nvdeploy`: ``python -m nvdeploy ...`` in a subprocess (stdin from
  /dev/null, SIGINT at its default so Ctrl-C can be simulated), with its wall time and peak memory.

Every address here is in 127.0.0.0/8.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Optional

from nvdeploy.testing.sshd import FakeNode

BLACK_HOLE_ADDRESS = "127.0.9.1"
SILENT_ADDRESS = "127.0.9.2"


def _loopback(address: str) -> None:
    if not address.startswith("127."):
        raise ValueError(f"{address}: test listeners live on loopback (127.0.0.0/8) only")


@contextlib.contextmanager
def black_hole(address: str = BLACK_HOLE_ADDRESS) -> Iterator[tuple[str, int]]:
    """Yield ``(address, port)`` where a connect hangs until the client's own timeout.

    A listener with a backlog of 0 is never accepted from; one connection fills its accept queue, and Linux then
    drops every new SYN (``tcp_abort_on_overflow`` is 0 by default), exactly like a host that does not answer.
    """
    _loopback(address)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    fillers: list[socket.socket] = []
    try:
        listener.bind((address, 0))
        listener.listen(0)
        port = int(listener.getsockname()[1])
        for _ in range(8):
            filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect((address, port))
            fillers.append(filler)
            time.sleep(0.05)
            if _times_out(address, port):
                break
        else:
            raise RuntimeError(f"could not make {address}:{port} drop SYNs (tcp_abort_on_overflow set?)")
        yield address, port
    finally:
        for sock in fillers + [listener]:
            sock.close()


def _times_out(address: str, port: int, wait_s: float = 0.3) -> bool:
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.settimeout(wait_s)
    try:
        probe.connect((address, port))
    except (socket.timeout, TimeoutError):
        return True
    except OSError:
        return False
    finally:
        probe.close()
    return False


@contextlib.contextmanager
def silent_listener(address: str = SILENT_ADDRESS) -> Iterator[tuple[str, int]]:
    """Yield ``(address, port)`` of a listener that accepts every connection and never sends a byte."""
    _loopback(address)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    held: list[socket.socket] = []
    stop = threading.Event()
    listener.bind((address, 0))
    listener.listen(64)
    listener.settimeout(0.2)
    thread = threading.Thread(target=_accept_loop, args=(listener, held, stop), daemon=True)
    thread.start()
    try:
        yield address, int(listener.getsockname()[1])
    finally:
        stop.set()
        thread.join(2)
        for sock in held + [listener]:
            sock.close()


def _accept_loop(listener: socket.socket, held: list[socket.socket], stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            continue
        except OSError:
            return
        held.append(conn)


def add_witness(node: FakeNode, tool: str = "nvidia-smi") -> Path:
    """Make ``tool`` on ``node`` append a line to ``<node home>/<tool>.calls`` on every call; return that path."""
    wrapper = node.bin_dir / tool
    lines = wrapper.read_text().splitlines()
    calls = node.home / f"{tool}.calls"
    lines.insert(1, f'echo "$$" >>"$HOME/{tool}.calls"')
    wrapper.write_text("\n".join(lines) + "\n")
    return calls


def witness_count(calls: Path) -> int:
    """How many times the witnessed tool ran (0 when never)."""
    try:
        return len(calls.read_text().split())
    except FileNotFoundError:
        return 0


def node_processes(node: FakeNode) -> list[int]:
    """PIDs of live processes started for ``node`` (their environment names its scenario file)."""
    needle = f"NVD_SCENARIO_FILE={node.scenario_file}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry.name}/environ").read_bytes()
            stat = Path(f"/proc/{entry.name}/stat").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X"):
            found.append(int(entry.name))
    return found


@dataclass(frozen=True)
class NvdeployRun:
    """How a ``python -m nvdeploy`` subprocess ended."""

    rc: int
    stdout: str
    stderr: str
    wall_s: float
    max_rss_kb: int  # peak resident memory of the controller process (ru_maxrss)


class NvdeployProcess:
    """A running ``python -m nvdeploy ...``; :meth:`wait` reaps it with ``wait4`` to read its peak memory."""

    def __init__(self, args: Sequence[str], env: Optional[Mapping[str, str]] = None,
                 cwd: Optional[Path] = None) -> None:
        full_env = dict(os.environ if env is None else env)
        # The child imports the same nvdeploy as this process, installed or not.
        root = str(Path(__file__).resolve().parents[2])
        full_env["PYTHONPATH"] = root + (os.pathsep + full_env["PYTHONPATH"] if full_env.get("PYTHONPATH") else "")
        self.started = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", "nvdeploy", *args], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env, cwd=cwd,
                                     preexec_fn=default_sigint)
        self._out: list[bytes] = []
        self._err: list[bytes] = []
        self._readers = [threading.Thread(target=_drain, args=(self.proc.stdout, self._out), daemon=True),
                         threading.Thread(target=_drain, args=(self.proc.stderr, self._err), daemon=True)]
        for reader in self._readers:
            reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send_signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 120.0) -> NvdeployRun:
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                self.proc.kill()
                pid, status, usage = os.wait4(self.proc.pid, 0)
                self.proc.returncode = -9
                raise TimeoutError(f"nvdeploy did not exit within {timeout:g} s")
            time.sleep(0.005)
        wall = time.monotonic() - self.started
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        for reader in self._readers:
            reader.join(10)
        return NvdeployRun(self.proc.returncode, b"".join(self._out).decode("utf-8", "replace"),
                           b"".join(self._err).decode("utf-8", "replace"), wall, int(usage.ru_maxrss))


def default_sigint() -> None:
    """For ``preexec_fn``: SIGINT and SIGHUP at their defaults in the child, so a simulated Ctrl-C or hang-up
    reaches it."""
    # A shell starts background jobs with SIGINT ignored, nohup ignores SIGHUP, and Python keeps both: reset them.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _drain(stream: IO[bytes], sink: list[bytes]) -> None:
    while True:
        chunk = stream.read(65536)
        if not chunk:
            return
        sink.append(chunk)


def start_nvdeploy(args: Sequence[str], env: Optional[Mapping[str, str]] = None,
                   cwd: Optional[Path] = None) -> NvdeployProcess:
    """Start ``python -m nvdeploy ARGS`` (stdin /dev/null, SIGINT at its default)."""
    return NvdeployProcess(args, env, cwd)


def run_nvdeploy(args: Sequence[str], env: Optional[Mapping[str, str]] = None, cwd: Optional[Path] = None,
                 timeout: float = 120.0) -> NvdeployRun:
    """Run ``python -m nvdeploy ARGS`` to its end; rc, output, wall time and peak memory."""
    return start_nvdeploy(args, env, cwd).wait(timeout)
