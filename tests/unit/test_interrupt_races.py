"""An interrupt that lands while nodes are starting or connecting ends them at once.

Found with a 64-node loopback run SIGTERMed 0.5-1 s after it started: nvdeploy wrote its reports, then waited ~60 s
(the connect timeout) for worker threads to exit. Nodes that passed the "stopping?" check before abort_all ran, but
registered their transport after it, were never closed: they connected and ran their whole batch. And a close()
during a connect did not end it: the connect ran on to its own timeout."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from nvdeploy.config.inventory import Host
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.results import ErrorReason
from nvdeploy.runner.engine import EngineOptions, NodeRunner
from nvdeploy.runner.record import RunRecorder
from nvdeploy.transport.base import Transport, TransportError
from nvdeploy.transport.ssh import SSHTransport


class _Recording(Transport):
    name = "recording"

    def __init__(self) -> None:
        self.connected = False
        self.closed = False

    def connect(self) -> None:
        self.connected = True

    def run_batch(self, commands, deadline_s=None):
        raise AssertionError("no batch may run after the interrupt")

    def close(self) -> None:
        self.closed = True


def test_an_interrupt_between_the_start_check_and_registration_stops_the_node(tmp_path, monkeypatch):
    runner = NodeRunner(ProfileCatalog(), EngineOptions(), RunRecorder(tmp_path / "run"), None)
    made: list[_Recording] = []

    def make(host, catalog, options, **kwargs):
        runner.abort_all()  # the signal handler runs on another thread right here
        made.append(_Recording())
        return made[-1]

    monkeypatch.setattr("nvdeploy.runner.engine.make_transport", make)
    host = Host("gpu01", {"address": "127.0.0.1", "profile": "h100-sxm-8x"})
    result = runner.run(host)
    assert [f.reason for f in result.findings] == [ErrorReason.INTERRUPTED]
    assert made and not made[0].connected
    assert made[0].closed  # made, never registered: closed all the same


@pytest.fixture
def silent_server():
    """A loopback TCP server that accepts and never says a word (no SSH banner): a connect waits on it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(5)
    for conn in accepted:
        conn.close()
    server.close()


def test_close_during_a_connect_ends_it_at_once_as_interrupted(silent_server):
    transport = SSHTransport("127.0.0.1", user="nobody", port=silent_server, connect_timeout_s=30)
    threading.Timer(0.5, transport.close).start()
    started = time.monotonic()
    with pytest.raises(TransportError) as raised:
        transport.connect()
    took = time.monotonic() - started
    assert raised.value.reason is ErrorReason.INTERRUPTED, raised.value.detail
    assert took < 15, took  # the 30 s connect timeout did not run out; it returns within a second or so


def test_a_closed_transport_does_not_connect(silent_server):
    transport = SSHTransport("127.0.0.1", user="nobody", port=silent_server, connect_timeout_s=30)
    transport.close()
    with pytest.raises(TransportError) as raised:
        transport.connect()
    assert raised.value.reason is ErrorReason.INTERRUPTED


def test_a_command_on_a_transport_closed_by_the_interrupt_is_interrupted_so_resume_redoes_the_node():
    transport = SSHTransport("127.0.0.1", user="nobody", port=22)
    assert transport._exec("true", b"", 10, 100)[1] is ErrorReason.NOT_RUN  # noqa: SLF001 - never connected
    transport.close()
    assert transport._exec("true", b"", 10, 100)[1] is ErrorReason.INTERRUPTED  # noqa: SLF001
