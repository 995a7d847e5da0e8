"""SSH to real nodes: fabric for the connection (config, jump hosts, keys), paramiko channels for commands.

Built around the traps in RELIABILITY.md:
- fabric accepts unknown host keys by default: we install RejectPolicy (or an explicit accept-new policy) and
  load the fleet's known_hosts before connecting.
- connect, banner and auth timeouts are always set; channel open has its own timeout (fabric's has none).
- fabric/invoke capture is quadratic and decodes per chunk: we read raw bytes from the channel ourselves, drain
  stdout and stderr together, bound what we keep, and read the exit status last.
- a killed session returns exit status -1 without an exception: that is ``connection_lost``, never a FAIL.
- fabric's ``env=`` is not quoted: we never use it; the batch script quotes every word itself.

The host keys a connection trusts are in ssh_hostkeys.py; the connect budget, sockets, jump specs and the
classification of connect failures in ssh_connect.py; this module holds the transport and its channel reader.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

import paramiko
from fabric import Config, Connection

from nvdeploy.results import CommandResult, ErrorReason
from nvdeploy.transport import batch
from nvdeploy.transport.base import CommandSpec, Transport, TransportError
from nvdeploy.transport.batch_budget import BatchBudget, batch_budget
from nvdeploy.transport.ssh_connect import (
    ConnectBudget,
    ConnectExpired,
    classify_connect_error,
    expiry_detail,
    open_socket,
    parse_jump,
)
from nvdeploy.transport.ssh_hostkeys import GLOBAL_KNOWN_HOSTS, KNOWN_HOSTS, AcceptNewPolicy, user_known_hosts
from nvdeploy.transport.sudo_gate import SudoGate

# paramiko's DEBUG logging dumps channel data, and at ERROR its transport thread prints a full traceback for
# every failed connect (a node with no SSH banner printed one on the operator's terminal). We classify and
# report every failure ourselves, so paramiko's loggers stay quiet whatever the root level is.
logging.getLogger("paramiko").setLevel(logging.CRITICAL)
logging.getLogger("paramiko.transport").setLevel(logging.CRITICAL)

_READ_CHUNK = 65536
# The reader sleeps on paramiko's buffer events (see _ready_event); _WAKE_S bounds one sleep all the same, so a
# wake-up this code does not know of costs at most that. _POLL_S: a channel without those events is polled.
_WAKE_S = 1.0
_POLL_S = 0.02
_BATCH_SLACK_S = batch.KILL_GRACE_S + 5


_KEEPALIVE_S = 15
# paramiko's transport thread wakes every 0.1 s on an idle connection (its socket timeout) to check for close and
# keepalive: 64+ connections waking 10 times a second cost ~10 ms of controller CPU per node. Once
# connected, a second is enough: keepalive is every 15 s, and close() wakes the thread itself (see close()).
_IDLE_CHECK_S = 1.0


def _settle(transport: paramiko.Transport) -> None:
    """A connected transport's steady state: keepalive on, and its reader thread woken once a second, not ten."""
    transport.set_keepalive(_KEEPALIVE_S)
    transport.sock.settimeout(_IDLE_CHECK_S)


class SSHTransport(Transport):
    """One SSH connection per node, reused for every command of the run."""

    name = "ssh"
    _own_gate: Optional[SudoGate] = None  # the gate of a transport used without an engine (see run_batch)

    def __init__(
        self,
        address: str,
        user: Optional[str] = None,
        port: int = 22,
        key_file: Optional[str] = None,
        known_hosts: Optional[str] = None,
        jump: Optional[str] = None,
        connect_timeout_s: float = 10.0,
        accept_new_host_keys: bool = False,
        sudo_password: Optional[str] = None,
    ) -> None:
        self.address = address
        self.user = user
        self.port = port
        self.key_file = key_file
        self.known_hosts = Path(os.path.expanduser(known_hosts)) if known_hosts else None
        self.jump = jump
        self.connect_timeout_s = connect_timeout_s
        self.accept_new_host_keys = accept_new_host_keys
        self._sudo_password = sudo_password
        self._conn: Optional[Connection] = None
        self._jump_conn: Optional[Connection] = None
        self._budget: Optional[ConnectBudget] = None  # the connect under way (or done), for close() to cancel
        self._channels: set[paramiko.Channel] = set()
        self._lock = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:  # never show the password
        return f"SSHTransport({self.user or ''}@{self.address}:{self.port})"

    def _connection(self, host: str, user: Optional[str], port: int, sock: Any, budget: ConnectBudget) -> Connection:
        """A fabric Connection over an already connected ``sock`` (TCP socket, or a jump host's channel)."""
        # paramiko's own per-stage timers are a backstop a second behind the budget's, which ends the connect
        # and names the stage it was in. Not fabric's connect_timeout: it truncates to int (0.9 s -> no timeout).
        timeout = budget.remaining() + 1
        # A Config of its own per connection: fabric's Connection writes into its Config, and sharing one across
        # threads raced (RELIABILITY.md). ssh_config files are not read, so only the inventory decides.
        config = Config(overrides={"load_ssh_configs": False, "timeouts": {"connect": None}})
        config.load_ssh_config = lambda: None  # type: ignore[method-assign]
        connect_kwargs: dict[str, Any] = {
            "sock": sock,
            "timeout": timeout,
            "banner_timeout": timeout,
            "auth_timeout": timeout,
            "allow_agent": self.key_file is None,
            "look_for_keys": self.key_file is None,
        }
        if self.key_file:
            connect_kwargs["key_filename"] = [os.path.expanduser(self.key_file)]
        conn = Connection(host=host, user=user, port=port, config=config, connect_kwargs=connect_kwargs,
                          forward_agent=False)
        client = conn.client
        budget.watch(client)
        # Like OpenSSH: the inventory's ssh_known_hosts, else ~/.ssh/known_hosts plus the system-wide file; an
        # unknown key is refused unless --accept-new-host-keys, which records it in that same file.
        known_hosts = user_known_hosts(self.known_hosts)
        try:
            client._host_keys = KNOWN_HOSTS.host_keys(known_hosts)  # noqa: SLF001 - shared parse (see class)
            if self.known_hosts is None and GLOBAL_KNOWN_HOSTS.is_file():
                client._system_host_keys = KNOWN_HOSTS.host_keys(GLOBAL_KNOWN_HOSTS)  # noqa: SLF001
        except OSError as exc:
            raise TransportError(ErrorReason.HOST_KEY, f"cannot read known_hosts file {exc.filename or known_hosts}: "
                                 f"{exc.strerror or exc}") from None
        client._host_keys_filename = None  # noqa: SLF001 - paramiko must never rewrite the file; we append
        policy: paramiko.MissingHostKeyPolicy = (
            AcceptNewPolicy(known_hosts) if self.accept_new_host_keys else paramiko.RejectPolicy()
        )
        client.set_missing_host_key_policy(policy)
        return conn

    def connect(self) -> None:
        """Connect (through ``ssh_jump`` when set) within connect_timeout overall, or raise TransportError."""
        if self._closed:
            raise TransportError(ErrorReason.INTERRUPTED, "not connected: run interrupted")
        budget = self._budget = ConnectBudget(self.connect_timeout_s)
        if self._closed:  # close() ran before the budget was set: it could not cancel it
            budget.cancel()
        jump: Optional[tuple[str, int]] = None
        failing = "target"  # whose failure an exception is: the jump host's, its channel's, or the node's
        try:
            sock: Any
            if self.jump:
                jump_user, jump_host, jump_port = parse_jump(self.jump)
                jump = (jump_host, jump_port)
                failing = "jump"
                jump_sock = open_socket(jump_host, jump_port, budget)
                self._jump_conn = self._connection(jump_host, jump_user or self.user, jump_port, jump_sock, budget)
                self._jump_conn.open()
                jump_transport = self._jump_conn.client.get_transport()
                if jump_transport is None or not jump_transport.is_active():
                    raise EOFError("SSH transport did not come up")
                _settle(jump_transport)
                failing = "channel"
                # fabric's own gateway opens this channel with paramiko's default timeout: an hour.
                sock = budget.watch(jump_transport.open_channel(
                    "direct-tcpip", (self.address, self.port), ("", 0), timeout=budget.remaining()))
                failing = "target"
            else:
                sock = open_socket(self.address, self.port, budget)
            self._conn = self._connection(self.address, self.user, self.port, sock, budget)
            self._conn.open()
            transport = self._conn.client.get_transport()
            if transport is None or not transport.is_active():
                raise EOFError("SSH transport did not come up")
            _settle(transport)
            if not budget.finish():
                raise ConnectExpired()
        except Exception as exc:  # noqa: BLE001 - every connect failure becomes a node-level ERROR
            budget.abort()
            self.close()
            if isinstance(exc, TransportError):
                raise
            if budget.cancelled:
                raise TransportError(ErrorReason.INTERRUPTED, "connect cancelled: run interrupted") from None
            raise self._connect_error(exc, budget, failing, jump) from None

    def _connect_error(self, exc: BaseException, budget: ConnectBudget, failing: str,
                       jump: Optional[tuple[str, int]]) -> TransportError:
        timeout = self.connect_timeout_s
        target = f"{self.address}:{self.port}"
        expired = budget.expired or isinstance(exc, ConnectExpired) or (
            isinstance(exc, paramiko.SSHException) and "Timeout opening channel" in str(exc))
        if jump is None:
            if expired:
                return TransportError(ErrorReason.UNREACHABLE, expiry_detail(self._conn, target, timeout))
            return classify_connect_error(exc, self.address, self.port, timeout, user_known_hosts(self.known_hosts))
        via = f"{jump[0]}:{jump[1]}"
        if failing == "jump":
            inner = (TransportError(ErrorReason.UNREACHABLE, expiry_detail(self._jump_conn, via, timeout))
                     if expired else classify_connect_error(exc, jump[0], jump[1], timeout,
                                                            user_known_hosts(self.known_hosts)))
            return TransportError(inner.reason, f"cannot reach {target} through jump host {via}: {inner.detail}")
        if failing == "channel":
            if expired:
                detail = f"jump host {via} did not open a connection to {target} within {timeout:g} s"
            elif isinstance(exc, paramiko.ChannelException):
                detail = f"jump host {via} could not connect to {target}: {exc.text} (code {exc.code})"
            else:
                detail = f"jump host {via} dropped the connection while opening one to {target}: {exc}"
            return TransportError(ErrorReason.UNREACHABLE, detail)
        inner = (TransportError(ErrorReason.UNREACHABLE, expiry_detail(self._conn, target, timeout))
                 if expired else classify_connect_error(exc, self.address, self.port, timeout,
                                                        user_known_hosts(self.known_hosts)))
        return TransportError(inner.reason, f"{inner.detail} (through jump host {via})")

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
            script = batch.build_script(specs, sudo_password=password is not None, run_id=self.run_id,
                                        heartbeat_lost_s=batch.HEARTBEAT_LOST_S, python_runner=self.python_batch)
            cap = sum(c.max_bytes for c in specs) * 2 + 65536
            stdin = (password + "\n").encode() if password is not None else b""
            budget = batch_budget(specs, password is not None, deadline_s, started)
            raw, error, detail = self._exec("sh -c " + _quote(script), stdin, budget, cap, on_output)
            return batch.parse_output(specs, raw, time.monotonic() - started, error, detail)

        if self.sudo_gate is None and self._sudo_password is not None and self._own_gate is None:
            self._own_gate = SudoGate(self._sudo_password)  # used without an engine: a gate of its own
        gate = self.sudo_gate if self.sudo_gate is not None else self._own_gate
        return batch.run_gated(self.node or self.address, gate, commands, limit, lambda: self._closed, execute)

    def _exec(self, command: str, stdin: bytes, limit: Union[float, BatchBudget], cap: int,
              on_output: Optional[Callable[[bytes], None]] = None) -> tuple[bytes, Optional[ErrorReason], str]:
        """Run one command on a fresh channel: returns (stdout bytes, error reason, detail).

        ``limit`` says how long to wait: seconds, or for a batch its budget, stage by stage from the lines the node
        prints as it goes.

        The channel's stdin stays open (after ``stdin``, if any) until the answer is read: the batch takes EOF
        there as "the run ended" and kills what it started, so closing the channel, or losing the connection, or
        this process dying, all clean up the node. The exit status is taken only after EOF on the channel: OpenSSH
        may send it before the last bytes of output (seen under load: 499,712 of 500,000 bytes).
        """
        if self._closed:  # closed by an interrupt after the connect: resume must redo this node
            return b"", ErrorReason.INTERRUPTED, "run interrupted"
        if self._conn is None:
            return b"", ErrorReason.NOT_RUN, "not connected"
        transport = self._conn.client.get_transport()
        if transport is None or not transport.is_active():
            return b"", ErrorReason.CONNECTION_LOST, "SSH connection is gone"
        budget = limit if isinstance(limit, BatchBudget) else BatchBudget.fixed(limit, time.monotonic())
        try:
            channel = transport.open_session(timeout=max(0.1, min(budget.left(time.monotonic()),
                                                                   self.connect_timeout_s)))
        except Exception as exc:  # noqa: BLE001
            return b"", ErrorReason.TIMEOUT if "Timeout" in str(exc) else ErrorReason.CONNECTION_LOST, \
                f"could not open an SSH channel: {exc}"
        with self._lock:
            self._channels.add(channel)
        if self._closed:  # close() ran between the check above and the registration: it did not see this channel
            channel.close()
        out = bytearray()
        dropped = 0
        try:
            channel.settimeout(self.connect_timeout_s)
            _exec_request(channel, command, max(0.1, min(budget.left(time.monotonic()), self.connect_timeout_s)))
            if stdin:
                channel.sendall(stdin)
            beat = time.monotonic()
            ready = _ready_event(channel)
            while True:
                progressed = False
                now = time.monotonic()
                if now - beat >= batch.HEARTBEAT_S and not (channel.eof_received or channel.closed):
                    # The batch's heartbeat: silence for HEARTBEAT_LOST_S (a partitioned link) ends it on the node.
                    beat = now
                    try:
                        channel.sendall(batch.HEARTBEAT)
                    except (OSError, paramiko.SSHException):
                        pass  # the channel is going: the checks below and EOF tell what happened
                while channel.recv_ready():
                    chunk = channel.recv(_READ_CHUNK)
                    if not chunk:
                        break
                    progressed = True
                    room = cap - len(out)
                    if room > 0:
                        out += chunk[:room]
                    dropped += max(0, len(chunk) - max(room, 0))
                while channel.recv_stderr_ready():
                    # The batch script writes command stderr into its frames; stray shell noise is dropped.
                    channel.recv_stderr(_READ_CHUNK)
                    progressed = True
                if progressed:
                    budget.observe(out, time.monotonic())
                if progressed and on_output is not None:
                    # The buffer itself, read during the call only: a copy per packet made a 4 MB answer cost
                    # hundreds of MB of copying.
                    on_output(out)
                if (channel.eof_received or channel.closed) and not channel.recv_ready() \
                        and not channel.recv_stderr_ready():
                    break  # EOF on the channel, both streams drained: nothing more can come
                if self._closed:
                    return bytes(out), ErrorReason.INTERRUPTED, "run interrupted"
                if not transport.is_active():
                    return bytes(out), ErrorReason.CONNECTION_LOST, "SSH connection lost during the command"
                left = budget.left(now)
                if left < 0:
                    return bytes(out), ErrorReason.TIMEOUT, budget.expired()
                if not progressed:
                    # Sleep until paramiko feeds data, EOF or a close (ours, the node's, or the connection's), the
                    # next heartbeat, or the limit. Polling every 20 ms instead cost 64 worker threads ~45 ms of
                    # controller CPU per node (measured with py-spy), more than the rest of the SSH work together.
                    wait = min(beat + batch.HEARTBEAT_S - now, left)
                    if ready is None:
                        time.sleep(min(_POLL_S, max(wait, 0.0)))
                    else:
                        ready.wait(min(_WAKE_S, max(wait, 0.0)) + 0.001)
            if on_output is not None:
                on_output(out)
            # After EOF the status follows at once (OpenSSH sends it before CLOSE); bounded all the same.
            channel.status_event.wait(max(0.1, min(self.connect_timeout_s, budget.left(time.monotonic()))))
            status = channel.exit_status if channel.status_event.is_set() else -1
            if status == -1:
                if self._closed:  # our own close() (Ctrl-C, SIGTERM) ended the channel: resume must redo it
                    return bytes(out), ErrorReason.INTERRUPTED, "run interrupted"
                return bytes(out), ErrorReason.CONNECTION_LOST, "SSH session ended without an exit status"
            if dropped:
                return bytes(out), ErrorReason.INCOMPLETE, f"{dropped} bytes beyond the {cap}-byte cap dropped"
            return bytes(out), None, ""
        except (OSError, EOFError, paramiko.SSHException) as exc:
            if self._closed:
                return bytes(out), ErrorReason.INTERRUPTED, "run interrupted"
            if isinstance(exc, _ExecTimeout):
                return bytes(out), ErrorReason.TIMEOUT, str(exc)
            return bytes(out), ErrorReason.CONNECTION_LOST, f"SSH error: {exc}"
        finally:
            with self._lock:
                self._channels.discard(channel)
            try:
                channel.close()  # sends EOF and CLOSE: a batch still running on the node ends its processes
            except Exception:  # noqa: BLE001
                pass

    def close(self) -> None:
        self._closed = True
        budget = self._budget
        if budget is not None:
            budget.cancel()  # a connect under way in the node's thread ends now, not at its timeout
        with self._lock:
            channels = list(self._channels)
        for channel in channels:
            try:
                channel.close()
            except Exception:  # noqa: BLE001
                pass
        for conn in (self._conn, self._jump_conn):
            if conn is not None:
                try:
                    # paramiko closes the socket while its reader thread may sleep in recv() up to _IDLE_CHECK_S,
                    # which holds the TCP connection open that long: shut it down first, which wakes that recv().
                    # The channels' CLOSE messages above were written to the socket already.
                    sock = getattr(conn.client.get_transport(), "sock", None)
                    if isinstance(sock, socket.socket):
                        with contextlib.suppress(OSError):
                            sock.shutdown(socket.SHUT_RDWR)
                    conn.close()
                except Exception:  # noqa: BLE001
                    pass


def _ready_event(channel: paramiko.Channel) -> Optional[threading.Event]:
    """An Event paramiko sets when the channel has data on either stream, EOF, or is closed; None without one.

    paramiko's ``BufferedPipe.set_event`` (what ``Channel.fileno`` uses, without the two file descriptors a pipe
    per channel costs at 1,000 forks): set on feed, on EOF and on close (ours, the node's, or the transport's end,
    which unlinks every channel); cleared only by a read that empties a still-open buffer. The reader drains both
    streams and checks both again before it sleeps, so a clear by one stream's read cannot hide the other's data.
    """
    buffers = [getattr(channel, name, None) for name in ("in_buffer", "in_stderr_buffer")]
    if not all(hasattr(buffer, "set_event") for buffer in buffers):
        return None  # pragma: no cover - another paramiko, or a test's fake: polled
    event = threading.Event()
    for buffer in buffers:
        buffer.set_event(event)  # type: ignore[union-attr]
    return event


class _ExecTimeout(paramiko.SSHException):
    """The server did not answer the exec request in time."""


def _exec_request(channel: paramiko.Channel, command: str, timeout_s: float) -> None:
    """``Channel.exec_command`` with a bounded wait for the server's reply.

    paramiko's exec_command waits on ``channel.event`` with no timeout (paramiko 2.x to 5.x): a server that
    accepted the channel but never answers the request (a frozen sshd) would hang the node's worker forever.
    This sends the same request and waits at most ``timeout_s``; without those internals, it falls back.
    """
    if not all(hasattr(channel, name) for name in ("_event_pending", "event", "event_ready", "remote_chanid")):
        channel.exec_command(command)  # pragma: no cover - another paramiko: unbounded, but correct
        return
    message = paramiko.Message()
    message.add_byte(paramiko.common.cMSG_CHANNEL_REQUEST)
    message.add_int(channel.remote_chanid)
    message.add_string("exec")
    message.add_boolean(True)
    message.add_string(command)
    channel._event_pending()  # noqa: SLF001
    channel.transport._send_user_message(message)  # noqa: SLF001
    if not channel.event.wait(timeout_s):
        raise _ExecTimeout(f"the node did not answer the exec request within {timeout_s:.0f} s")
    if not channel.event_ready:
        error = channel.transport.get_exception() if channel.transport is not None else None
        raise error if error is not None else paramiko.SSHException("Channel closed.")


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


