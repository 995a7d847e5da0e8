"""Connecting over SSH within one budget: DNS, TCP, banner, key exchange, auth and a jump host's channel under a
single deadline (``ConnectBudget``), the sockets opened and resolved under it, ``ssh_jump`` specs parsed, and every
connect failure classified into the ErrorReason and message an operator reads (refused, black hole, no banner,
auth, host key changed or unknown).
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
import time
from pathlib import Path
from typing import Any, Optional

import paramiko
from fabric import Connection

from nvdeploy.results import ErrorReason
from nvdeploy.transport.base import TransportError
from nvdeploy.transport.ssh_hostkeys import KnownHostsWriteError


class ConnectExpired(Exception):
    """The overall connect budget ran out."""


class ConnectBudget:
    """One deadline for the whole connect (DNS, TCP, banner, key exchange, auth, jump host and its channel).

    paramiko bounds each stage on its own (and its banner wait accepts up to 100 pre-banner lines, 2 s apart), so
    the stages could add up to many times connect_timeout. At the deadline a timer closes every socket,
    transport and channel still connecting, which makes whichever wait is running return at once.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.expired = False
        self.cancelled = False
        self._done = False
        self._watched: list[Any] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0 or self.expired:
            raise ConnectExpired()
        return left

    def watch(self, thing: Any) -> Any:
        """Close ``thing`` (socket, SSHClient, Channel) if the deadline passes before finish()."""
        with self._lock:
            if not self.expired:
                self._watched.append(thing)
                return thing
        force_close(thing)
        raise ConnectExpired()

    def _expire(self, cancelled: bool = False) -> None:
        with self._lock:
            if self._done or self.expired:
                return
            self.expired = True
            self.cancelled = cancelled
            things = list(self._watched)
        for thing in reversed(things):
            force_close(thing)

    def finish(self) -> bool:
        """Stop the timer; True when the connect beat the deadline (nothing was closed under it)."""
        self._timer.cancel()
        with self._lock:
            self._done = True
            return not self.expired

    def abort(self) -> None:
        """After a failure: close everything still open, whatever the deadline."""
        self.finish()
        for thing in reversed(self._watched):
            force_close(thing)

    def cancel(self) -> None:
        """From another thread (the run was interrupted): end a connect still under way as the deadline would,
        at once; a connect already finished is left alone."""
        self._timer.cancel()
        self._expire(cancelled=True)


def force_close(thing: Any) -> None:
    try:
        if isinstance(thing, socket.socket):
            with contextlib.suppress(OSError):
                thing.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked on it; close() alone does not
            thing.close()
        elif isinstance(thing, paramiko.SSHClient):
            transport = thing.get_transport()
            if transport is not None:
                transport.close()
        else:
            thing.close()
    except Exception:  # noqa: BLE001 - closing is best effort
        pass


def open_socket(host: str, port: int, budget: ConnectBudget) -> socket.socket:
    """TCP connect within the budget (name resolution included); TCP_NODELAY on."""
    infos = resolve(host, port, budget)
    error: Optional[OSError] = None
    for family, kind, proto, _, address in infos:
        sock = budget.watch(socket.socket(family, kind, proto))
        try:
            sock.settimeout(budget.remaining())
            sock.connect(address)
        except OSError as exc:
            sock.close()
            if isinstance(exc, socket.timeout) or budget.expired:
                raise
            error = exc
            continue
        # paramiko leaves Nagle on: with delayed ACKs every command round trip cost ~40 ms more.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    raise error if error is not None else OSError(f"no address for {host}")


def resolve(host: str, port: int, budget: ConnectBudget) -> list[Any]:
    """getaddrinfo, bounded: the resolver's own timeouts (resolv.conf) can exceed connect_timeout."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    answer: list[Any] = []
    failure: list[BaseException] = []

    def lookup() -> None:
        try:
            answer.extend(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            failure.append(exc)

    worker = threading.Thread(target=lookup, name=f"resolve {host}", daemon=True)
    worker.start()
    worker.join(budget.remaining())
    if worker.is_alive():
        raise ConnectExpired()
    if failure:
        raise failure[0]
    return answer


def parse_jump(spec: str) -> tuple[Optional[str], str, int]:
    """``[user@]host[:port]`` of ``ssh_jump``."""
    user: Optional[str] = None
    host = spec.strip()
    if "@" in host:
        user, host = host.rsplit("@", 1)
    port = 22
    if host.count(":") == 1:
        host, port_text = host.split(":")
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise TransportError(ErrorReason.UNREACHABLE, f"ssh_jump {spec!r}: bad port {port_text!r}")
        port = int(port_text)
    if not host or user == "":
        raise TransportError(ErrorReason.UNREACHABLE, f"ssh_jump {spec!r} is not [user@]host[:port]")
    return user, host, port



def expiry_detail(conn: Optional[Connection], where: str, timeout_s: float) -> str:
    """What the connect to ``where`` was still waiting for when the overall budget ran out."""
    if conn is None:
        return f"connect to {where} timed out after {timeout_s:g} s"
    transport = conn.client.get_transport()
    if transport is None or not transport.remote_version:
        return f"no SSH banner from {where} within {timeout_s:g} s"
    return f"SSH key exchange or authentication with {where} did not complete within {timeout_s:g} s"


def classify_connect_error(exc: BaseException, address: str, port: int, timeout_s: float,
              known_hosts: Optional[Path] = None) -> TransportError:
    where = f"{address}:{port}"
    if isinstance(exc, paramiko.BadHostKeyException):
        return TransportError(ErrorReason.HOST_KEY, f"HOST KEY CHANGED for {where}: the node presented "
                              f"{exc.key.get_name()} {exc.key.get_fingerprint().hex()} but known_hosts has another "
                              "key (reimaged node or man-in-the-middle); no command was run")
    if isinstance(exc, KnownHostsWriteError):
        return TransportError(ErrorReason.HOST_KEY, f"new host key of {where} not accepted: it could not be recorded "
                              f"({exc})")
    if isinstance(exc, paramiko.AuthenticationException):
        return TransportError(ErrorReason.AUTH, f"authentication to {where} failed: {exc}")
    message = str(exc)
    if isinstance(exc, paramiko.SSHException) and "known_hosts" in message:
        return TransportError(ErrorReason.HOST_KEY, f"host key of {where} is not in {known_hosts or 'known_hosts'}; "
                              "add it (ssh-keyscan and verify) or rerun with --accept-new-host-keys")
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return TransportError(ErrorReason.UNREACHABLE, f"connect to {where} timed out after {timeout_s:g} s")
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        return TransportError(ErrorReason.UNREACHABLE, f"connection to {where} refused")
    if isinstance(exc, ConnectionRefusedError):
        return TransportError(ErrorReason.UNREACHABLE, f"connection to {where} refused")
    if isinstance(exc, paramiko.SSHException) and "banner" in message.lower():
        return TransportError(ErrorReason.UNREACHABLE, f"no SSH banner from {where} within {timeout_s:g} s")
    if isinstance(exc, paramiko.SSHException) and "No existing session" in message:
        # start_client gave up at the connect timeout before the banner timer fired: the same silent server.
        return TransportError(ErrorReason.UNREACHABLE, f"no SSH banner or key exchange from {where} within "
                              f"{timeout_s:g} s")
    if isinstance(exc, socket.gaierror):
        return TransportError(ErrorReason.UNREACHABLE, f"cannot resolve {address}: {exc.strerror}")
    if isinstance(exc, OSError):
        return TransportError(ErrorReason.UNREACHABLE, f"cannot connect to {where}: {exc.strerror or exc}")
    return TransportError(ErrorReason.UNREACHABLE, f"cannot connect to {where}: {type(exc).__name__}: {exc}")
