"""SSH to real nodes: fabric for the connection (config, jump hosts, keys), paramiko channels for commands.

Built around the traps in RELIABILITY.md:
- fabric accepts unknown host keys by default: we install RejectPolicy (or an explicit accept-new policy) and
  load the fleet's known_hosts before connecting.
- connect, banner and auth timeouts are always set; channel open has its own timeout (fabric's has none).
- fabric/invoke capture is quadratic and decodes per chunk: we read raw bytes from the channel ourselves, drain
  stdout and stderr together, bound what we keep, and read the exit status last.
- a killed session returns exit status -1 without an exception: that is ``connection_lost``, never a FAIL.
- fabric's ``env=`` is not quoted: we never use it; the batch script quotes every word itself.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import paramiko
from fabric import Config, Connection

from nvdeploy.results import CommandResult, ErrorReason
from nvdeploy.transport import batch
from nvdeploy.transport.base import CommandSpec, Transport, TransportError

# paramiko's DEBUG logging dumps channel data, and at ERROR its transport thread prints a full traceback for
# every failed connect (a node with no SSH banner printed one on the operator's terminal). We classify and
# report every failure ourselves, so paramiko's loggers stay quiet whatever the root level is.
logging.getLogger("paramiko").setLevel(logging.CRITICAL)
logging.getLogger("paramiko.transport").setLevel(logging.CRITICAL)

_KNOWN_HOSTS_LOCK = threading.Lock()
_READ_CHUNK = 65536
_BATCH_SLACK_S = batch.KILL_GRACE_S + 5


class _AcceptNewPolicy(paramiko.MissingHostKeyPolicy):
    """OpenSSH's ``StrictHostKeyChecking=accept-new``: learn unknown keys, never accept a changed one."""

    def __init__(self, known_hosts: Optional[Path]) -> None:
        self.known_hosts = known_hosts

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        client.get_host_keys().add(hostname, key.get_name(), key)
        if self.known_hosts is None:
            return
        with _KNOWN_HOSTS_LOCK:
            self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
            with open(self.known_hosts, "a", encoding="ascii") as handle:
                handle.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


def _parse_jump(spec: str) -> tuple[Optional[str], str, int]:
    user: Optional[str] = None
    host = spec
    if "@" in host:
        user, host = host.rsplit("@", 1)
    port = 22
    if host.count(":") == 1:
        host, port_text = host.split(":")
        port = int(port_text)
    return user, host, port


class SSHTransport(Transport):
    """One SSH connection per node, reused for every command of the run."""

    name = "ssh"

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
        self._channels: set[paramiko.Channel] = set()
        self._lock = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:  # never show the password
        return f"SSHTransport({self.user or ''}@{self.address}:{self.port})"

    def _connection(self, host: str, user: Optional[str], port: int, gateway: Optional[Connection]) -> Connection:
        # A Config of its own per connection: fabric's Connection writes into its Config, and sharing one across
        # threads raced (RELIABILITY.md). ssh_config files are not read, so only the inventory decides.
        config = Config(overrides={"load_ssh_configs": False, "timeouts": {"connect": self.connect_timeout_s}})
        config.load_ssh_config = lambda: None  # type: ignore[method-assign]
        connect_kwargs: dict[str, Any] = {
            "banner_timeout": self.connect_timeout_s,
            "auth_timeout": self.connect_timeout_s,
            "allow_agent": self.key_file is None,
            "look_for_keys": self.key_file is None,
        }
        if self.key_file:
            connect_kwargs["key_filename"] = [os.path.expanduser(self.key_file)]
        conn = Connection(host=host, user=user, port=port, config=config, gateway=gateway,
                          connect_timeout=self.connect_timeout_s, connect_kwargs=connect_kwargs, forward_agent=False)
        client = conn.client
        if self.known_hosts is not None:
            if self.known_hosts.exists():
                client.load_host_keys(str(self.known_hosts))
            # load_host_keys makes paramiko rewrite the file on save; we append ourselves instead.
            client._host_keys_filename = None  # noqa: SLF001
        policy: paramiko.MissingHostKeyPolicy = (
            _AcceptNewPolicy(self.known_hosts) if self.accept_new_host_keys else paramiko.RejectPolicy()
        )
        client.set_missing_host_key_policy(policy)
        return conn

    def connect(self) -> None:
        gateway = None
        try:
            if self.jump:
                jump_user, jump_host, jump_port = _parse_jump(self.jump)
                gateway = self._jump_conn = self._connection(jump_host, jump_user or self.user, jump_port, None)
            self._conn = self._connection(self.address, self.user, self.port, gateway)
            self._conn.open()
            transport = self._conn.client.get_transport()
            if transport is None or not transport.is_active():
                raise TransportError(ErrorReason.UNREACHABLE, "SSH transport did not come up")
            transport.set_keepalive(15)
            sock = transport.sock
            if isinstance(sock, socket.socket):
                # paramiko leaves Nagle on: with delayed ACKs every command round trip cost ~40 ms more.
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except TransportError:
            self.close()
            raise
        except Exception as exc:  # noqa: BLE001 - every connect failure becomes a node-level ERROR
            self.close()
            raise _classify(exc, self.address, self.port, self.connect_timeout_s) from None

    def run_batch(self, commands: Sequence[CommandSpec], deadline_s: Optional[float] = None) -> list[CommandResult]:
        if not commands:
            return []
        limit = max(c.timeout_s for c in commands) + _BATCH_SLACK_S
        if deadline_s is not None:
            limit = min(limit, max(deadline_s, 0.1))
        needs_password = self._sudo_password is not None and any(c.sudo for c in commands)
        script = batch.build_script(commands, sudo_password=needs_password)
        cap = sum(c.max_bytes for c in commands) * 2 + 65536
        started = time.monotonic()
        stdin = (self._sudo_password + "\n").encode() if needs_password and self._sudo_password is not None else b""
        raw, error, detail = self._exec("sh -c " + _quote(script), stdin, limit, cap)
        return batch.parse_output(commands, raw, time.monotonic() - started, error, detail)

    def _exec(self, command: str, stdin: bytes, limit_s: float,
              cap: int) -> tuple[bytes, Optional[ErrorReason], str]:
        """Run one command on a fresh channel: returns (stdout bytes, error reason, detail)."""
        if self._conn is None or self._closed:
            return b"", ErrorReason.NOT_RUN, "not connected"
        transport = self._conn.client.get_transport()
        if transport is None or not transport.is_active():
            return b"", ErrorReason.CONNECTION_LOST, "SSH connection is gone"
        started = time.monotonic()
        try:
            channel = transport.open_session(timeout=min(limit_s, self.connect_timeout_s))
        except Exception as exc:  # noqa: BLE001
            return b"", ErrorReason.TIMEOUT if "Timeout" in str(exc) else ErrorReason.CONNECTION_LOST, \
                f"could not open an SSH channel: {exc}"
        with self._lock:
            self._channels.add(channel)
        out = bytearray()
        dropped = 0
        try:
            channel.settimeout(self.connect_timeout_s)
            channel.exec_command(command)
            if stdin:
                channel.sendall(stdin)
            channel.shutdown_write()
            while True:
                progressed = False
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
                if channel.exit_status_ready() and not channel.recv_ready() and not channel.recv_stderr_ready():
                    break
                if self._closed:
                    return bytes(out), ErrorReason.INTERRUPTED, "run interrupted"
                if not transport.is_active():
                    return bytes(out), ErrorReason.CONNECTION_LOST, "SSH connection lost during the command"
                if time.monotonic() - started > limit_s:
                    return bytes(out), ErrorReason.TIMEOUT, f"no complete answer within {limit_s:.0f} s"
                if not progressed:
                    time.sleep(0.02)
            status = channel.recv_exit_status()
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
            return bytes(out), ErrorReason.CONNECTION_LOST, f"SSH error: {exc}"
        finally:
            with self._lock:
                self._channels.discard(channel)
            try:
                channel.close()
            except Exception:  # noqa: BLE001
                pass

    def close(self) -> None:
        self._closed = True
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
                    conn.close()
                except Exception:  # noqa: BLE001
                    pass


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _classify(exc: BaseException, address: str, port: int, timeout_s: float) -> TransportError:
    where = f"{address}:{port}"
    if isinstance(exc, paramiko.BadHostKeyException):
        return TransportError(ErrorReason.HOST_KEY, f"HOST KEY CHANGED for {where}: the node presented "
                              f"{exc.key.get_name()} {exc.key.get_fingerprint().hex()} but known_hosts has another "
                              "key (reimaged node or man-in-the-middle); no command was run")
    if isinstance(exc, paramiko.AuthenticationException):
        return TransportError(ErrorReason.AUTH, f"authentication to {where} failed: {exc}")
    message = str(exc)
    if isinstance(exc, paramiko.SSHException) and "known_hosts" in message:
        return TransportError(ErrorReason.HOST_KEY, f"host key of {where} is not in known_hosts; add it (ssh-keyscan "
                              "and verify) or rerun with --accept-new-host-keys")
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
