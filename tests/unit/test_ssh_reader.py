"""SSHTransport's reader on paramiko's own buffers: it sleeps on their events, and loses no data or wake-up.

The channel here is paramiko's BufferedPipe pair (what a real Channel's recv and recv_ready read), fed from a thread
as paramiko's transport thread feeds it; the exec request, EOF and close behave as paramiko's Channel does.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Optional

from paramiko.buffered_pipe import BufferedPipe

from nvdeploy.results import ErrorReason
from nvdeploy.transport import batch
from nvdeploy.transport.ssh import SSHTransport


class _PipeChannel:
    """A paramiko Channel's reading side: ``steps`` are ("out"|"err", bytes), ("sleep", s) or ("eof",)."""

    def __init__(self, steps: list[tuple[Any, ...]]) -> None:
        self.in_buffer = BufferedPipe()
        self.in_stderr_buffer = BufferedPipe()
        self.steps = steps
        self.event = threading.Event()
        self.event_ready = False
        self.remote_chanid = 1
        self.status_event = threading.Event()
        self.exit_status = -1
        self.eof_received = False
        self.closed = False
        self.sent = b""
        self.transport = self
        self.ready_checks = 0
        self.feeder: Optional[threading.Thread] = None

    # the transport side
    def _send_user_message(self, message: object) -> None:
        self.event_ready = True
        self.event.set()
        self.feeder = threading.Thread(target=self._feed, daemon=True)
        self.feeder.start()

    def get_exception(self) -> None:
        return None

    def is_active(self) -> bool:
        return True

    def open_session(self, timeout: Optional[float] = None) -> _PipeChannel:
        return self

    def _feed(self) -> None:
        for step in self.steps:
            if step[0] == "sleep":
                time.sleep(step[1])
            elif step[0] == "out":
                self.in_buffer.feed(step[1])
            elif step[0] == "err":
                self.in_stderr_buffer.feed(step[1])
            elif step[0] == "eof":  # paramiko: exit-status may come first; EOF closes both buffers
                self.exit_status = 0
                self.status_event.set()
                self.eof_received = True
                self.in_buffer.close()
                self.in_stderr_buffer.close()

    # the channel side
    def _event_pending(self) -> None:
        self.event.clear()

    def settimeout(self, _timeout: float) -> None:
        pass

    def sendall(self, data: bytes) -> None:
        self.sent += data

    def recv_ready(self) -> bool:
        self.ready_checks += 1
        return self.in_buffer.read_ready()

    def recv(self, size: int) -> bytes:
        return self.in_buffer.read(size)

    def recv_stderr_ready(self) -> bool:
        return self.in_stderr_buffer.read_ready()

    def recv_stderr(self, size: int) -> bytes:
        return self.in_stderr_buffer.read(size)

    def close(self) -> None:  # paramiko's _set_closed: both buffers closed, waiters woken
        self.closed = True
        self.in_buffer.close()
        self.in_stderr_buffer.close()
        self.status_event.set()

    # SSHTransport reaches the transport through conn.client.get_transport()
    @property
    def client(self) -> _PipeChannel:
        return self

    def get_transport(self) -> _PipeChannel:
        return self


def _ssh_with(channel: _PipeChannel) -> SSHTransport:
    transport = SSHTransport("127.0.0.1", connect_timeout_s=5)
    transport._conn = channel  # type: ignore[assignment]  # noqa: SLF001
    return transport


def test_reader_sleeps_on_the_buffers_event_instead_of_polling():
    steps: list[tuple[Any, ...]] = []
    for i in range(4):
        steps += [("sleep", 0.25), ("out", b"%d" % i * 1000)]
    channel = _PipeChannel([*steps, ("eof",)])
    raw, error, detail = _ssh_with(channel)._exec("cmd", b"", 30, 10**6)  # noqa: SLF001
    assert (raw, error, detail) == (b"0" * 1000 + b"1" * 1000 + b"2" * 1000 + b"3" * 1000, None, "")
    # A second of silence read by a 20 ms poll checks ~100 times; woken only by the 5 feeds, ~15. Load can only
    # lower a poll's count, never raise the event's: this bound cannot fail for a reader that sleeps on events.
    assert channel.ready_checks < 50, channel.ready_checks


def test_interleaved_streams_lose_neither_data_nor_a_wake_up():
    """One Event serves both buffers, and a read that empties one stream clears it: the other's data must still be
    read, never left waiting for the next wake-up (or the limit)."""
    steps: list[tuple[Any, ...]] = []
    for i in range(200):
        steps += [("out", b"o%03d" % i), ("err", b"stray shell noise\n")]
        if i % 50 == 0:
            steps.append(("sleep", 0.01))
    channel = _PipeChannel([*steps, ("eof",)])
    raw, error, _ = _ssh_with(channel)._exec("cmd", b"", 30, 10**6)  # noqa: SLF001
    assert error is None
    assert raw == b"".join(b"o%03d" % i for i in range(200))  # stderr is not mixed in


def test_close_from_another_thread_wakes_a_silent_reader():
    channel = _PipeChannel([("sleep", 3600)])  # never answers
    ssh = _ssh_with(channel)
    answer: list[tuple[bytes, Optional[ErrorReason], str]] = []
    reader = threading.Thread(target=lambda: answer.append(ssh._exec("cmd", b"", 3600, 10**6)))  # noqa: SLF001
    reader.start()
    while channel.feeder is None:
        time.sleep(0.01)
    ssh.close()  # what Ctrl-C does through the engine: closes the channel, whose close sets the reader's event
    reader.join(30)
    assert not reader.is_alive()
    assert answer[0][1] is ErrorReason.INTERRUPTED


def test_heartbeat_still_sent_while_the_reader_sleeps(monkeypatch):
    monkeypatch.setattr(batch, "HEARTBEAT_S", 0.05)
    channel = _PipeChannel([("sleep", 1.2), ("out", b"done"), ("eof",)])
    raw, error, _ = _ssh_with(channel)._exec("cmd", b"pw\n", 30, 10**6)  # noqa: SLF001
    assert (raw, error) == (b"done", None)
    assert channel.sent.startswith(b"pw\n")
    assert channel.sent.count(batch.HEARTBEAT) >= 2  # every HEARTBEAT_S of the 1.2 s silence, not only at wake-ups


def test_limit_ends_a_silent_reader_with_timeout():
    channel = _PipeChannel([("sleep", 3600)])
    raw, error, detail = _ssh_with(channel)._exec("cmd", b"", 0.3, 10**6)  # noqa: SLF001
    assert (raw, error) == (b"", ErrorReason.TIMEOUT) and "no complete answer" in detail
