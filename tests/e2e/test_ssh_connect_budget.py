"""The whole SSH connect ends by connect_timeout, however the server dribbles (one budget, not one per stage).

paramiko bounds each stage on its own (TCP connect, then banner and key exchange, then each auth request), so a
server slow at every stage could hold a connect for several times connect_timeout; the transport's budget timer
closes the connection at the deadline and names the stage it was in. Fake servers on loopback; loose bounds
(3x connect_timeout) that prove "does not hang", not a speed.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import time
from collections.abc import Iterator

import paramiko
import pytest

from nvdeploy.results import ErrorReason
from nvdeploy.transport.base import TransportError
from nvdeploy.transport.ssh import SSHTransport

CONNECT_TIMEOUT = 2.0
ADDRESS = "127.0.9.7"

pytestmark = pytest.mark.timeout(120)


@contextlib.contextmanager
def dribbling_server(first: bytes, then: bytes, every_s: float) -> Iterator[int]:
    """Accept connections; send ``first``, then ``then`` every ``every_s`` seconds until the client goes."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((ADDRESS, 0))
    listener.listen(8)
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            try:
                conn.sendall(first)
                while not stop.wait(every_s):
                    if then:
                        conn.sendall(then)
            except OSError:
                return

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def connect_error(port: int) -> tuple[TransportError, float]:
    transport = SSHTransport(ADDRESS, user="nobody", port=port, known_hosts="/nonexistent/known_hosts",
                             connect_timeout_s=CONNECT_TIMEOUT)
    began = time.monotonic()
    with pytest.raises(TransportError) as caught:
        transport.connect()
    return caught.value, time.monotonic() - began


def test_pre_banner_lines_every_half_second_end_at_connect_timeout():
    with dribbling_server(b"", b"please wait\r\n", 0.5) as port:
        error, took = connect_error(port)
    assert error.reason is ErrorReason.UNREACHABLE
    assert error.detail == f"no SSH banner from {ADDRESS}:{port} within {CONNECT_TIMEOUT:g} s"
    assert took < 3 * CONNECT_TIMEOUT
    print(f"\nbanner dribbled a line per 0.5 s: ERROR after {took:.2f} s (connect timeout {CONNECT_TIMEOUT:g} s)")


def test_banner_then_silence_ends_at_connect_timeout_naming_the_stage():
    with dribbling_server(b"SSH-2.0-OpenSSH_9.2\r\n", b"", 0.5) as port:
        error, took = connect_error(port)
    assert error.reason is ErrorReason.UNREACHABLE
    assert error.detail == (f"SSH key exchange or authentication with {ADDRESS}:{port} did not complete within "
                            f"{CONNECT_TIMEOUT:g} s")
    assert took < 3 * CONNECT_TIMEOUT


class _SlowAuthServer(paramiko.ServerInterface):
    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        time.sleep(self.delay_s)
        return paramiko.AUTH_SUCCESSFUL


@contextlib.contextmanager
def slow_ssh_server(host_key: paramiko.PKey, banner_delay_s: float, auth_delay_s: float) -> Iterator[int]:
    """A paramiko SSH server whose banner comes late and whose every auth answer comes late: each stage alone
    is within the connect timeout, together they are not."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((ADDRESS, 0))
    listener.listen(8)
    listener.settimeout(0.2)
    stop = threading.Event()
    transports: list[paramiko.Transport] = []

    def serve(conn: socket.socket) -> None:
        if stop.wait(banner_delay_s):
            conn.close()
            return
        transport = paramiko.Transport(conn)
        transports.append(transport)
        transport.add_server_key(host_key)
        with contextlib.suppress(Exception):
            transport.start_server(server=_SlowAuthServer(auth_delay_s))

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        thread.join(5)
        listener.close()
        for transport in transports:
            transport.close()


def test_stages_each_within_the_timeout_but_not_together_end_at_connect_timeout(tmp_path):
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / name)], check=True,
                       stdin=subprocess.DEVNULL, capture_output=True)
    host_key = paramiko.Ed25519Key.from_private_key_file(str(tmp_path / "host"))
    stage_s = 0.6 * CONNECT_TIMEOUT  # banner at 0.6 x, auth answer 0.6 x later: 1.2 x in all
    with slow_ssh_server(host_key, banner_delay_s=stage_s, auth_delay_s=stage_s) as port:
        known = tmp_path / "known_hosts"
        known.write_text(f"[{ADDRESS}]:{port} {host_key.get_name()} {host_key.get_base64()}\n")
        transport = SSHTransport(ADDRESS, user="nobody", port=port, key_file=str(tmp_path / "client"),
                                 known_hosts=str(known), connect_timeout_s=CONNECT_TIMEOUT)
        began = time.monotonic()
        with pytest.raises(TransportError) as caught:  # per-stage timeouts alone would have let it connect
            transport.connect()
        took = time.monotonic() - began
    assert caught.value.reason is ErrorReason.UNREACHABLE
    assert caught.value.detail == (f"SSH key exchange or authentication with {ADDRESS}:{port} did not complete "
                                   f"within {CONNECT_TIMEOUT:g} s")
    assert took < 3 * CONNECT_TIMEOUT
