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

import contextlib
import fcntl
import ipaddress
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
from nvdeploy.transport.sudo_gate import SudoGate

# paramiko's DEBUG logging dumps channel data, and at ERROR its transport thread prints a full traceback for
# every failed connect (a node with no SSH banner printed one on the operator's terminal). We classify and
# report every failure ourselves, so paramiko's loggers stay quiet whatever the root level is.
logging.getLogger("paramiko").setLevel(logging.CRITICAL)
logging.getLogger("paramiko.transport").setLevel(logging.CRITICAL)

_KNOWN_HOSTS_LOCK = threading.Lock()
_READ_CHUNK = 65536
# The reader sleeps on paramiko's buffer events (see _ready_event); _WAKE_S bounds one sleep all the same, so a
# wake-up this code does not know of costs at most that. _POLL_S: a channel without those events is polled.
_WAKE_S = 1.0
_POLL_S = 0.02
_BATCH_SLACK_S = batch.KILL_GRACE_S + 5


_GLOBAL_KNOWN_HOSTS = Path("/etc/ssh/ssh_known_hosts")
_KEEPALIVE_S = 15
# paramiko's transport thread wakes every 0.1 s on an idle connection (its socket timeout) to check for close and
# keepalive: 64+ connections waking 10 times a second cost ~10 ms of controller CPU per node. Once
# connected, a second is enough: keepalive is every 15 s, and close() wakes the thread itself (see close()).
_IDLE_CHECK_S = 1.0


def _settle(transport: paramiko.Transport) -> None:
    """A connected transport's steady state: keepalive on, and its reader thread woken once a second, not ten."""
    transport.set_keepalive(_KEEPALIVE_S)
    transport.sock.settimeout(_IDLE_CHECK_S)


def _user_known_hosts(configured: Optional[Path]) -> Path:
    """The known_hosts file a connection checks and learns into: the inventory's, else OpenSSH's own default."""
    return configured if configured is not None else Path(os.path.expanduser("~/.ssh/known_hosts"))


class _KnownHostsWriteError(Exception):
    """A learned host key could not be recorded on disk (so it is not accepted either)."""


class _KnownHostsFiles:
    """Parsed known_hosts files shared by every connection of the process, and the one writer of learned keys.

    Parsing once per file rather than per connection: paramiko's ``HostKeys.load`` de-duplicates as it goes
    (quadratic, 78 ms for 1,000 lines, measured), and a 1,000-node run would pay that for every node. A file is
    re-read when it changed on disk (inode, size, mtime); keys this process appends are added to the parsed copy.
    """

    def __init__(self) -> None:
        self._parsed: dict[Path, tuple[Optional[tuple[int, int, int]], list[paramiko.hostkeys.HostKeyEntry]]] = {}

    @staticmethod
    def _stat(path: Path) -> Optional[tuple[int, int, int]]:
        try:
            st = path.stat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _entries(self, path: Path) -> list[paramiko.hostkeys.HostKeyEntry]:
        """Call with _KNOWN_HOSTS_LOCK held."""
        stamp = self._stat(path)
        cached = self._parsed.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        entries: list[paramiko.hostkeys.HostKeyEntry] = []
        if stamp is not None:
            with open(path, encoding="utf-8", errors="replace") as handle:
                for lineno, line in enumerate(handle, 1):
                    line = line.strip()
                    if not line or line.startswith("#"):
                        continue
                    try:
                        entry = paramiko.hostkeys.HostKeyEntry.from_line(line, lineno)
                    except Exception:  # noqa: BLE001, S112 - like OpenSSH, a line we cannot read is skipped, not fatal
                        continue
                    if entry is not None:
                        entries.append(entry)
        self._parsed[path] = (stamp, entries)
        return entries

    def host_keys(self, path: Path) -> paramiko.HostKeys:
        """A HostKeys of the file's entries for one client (its own list: the client may add to it)."""
        keys = paramiko.HostKeys()
        with _KNOWN_HOSTS_LOCK:
            keys._entries = list(self._entries(path))  # noqa: SLF001 - HostKeys.add per entry is quadratic
        return keys

    def learn(self, path: Path, hostname: str, key: paramiko.PKey) -> None:
        """Append ``hostname``'s new key to ``path`` (OpenSSH's plain format), once, whichever thread comes first.

        ``hostname`` is paramiko's lookup name: ``host`` on port 22, ``[host]:port`` otherwise, as OpenSSH writes.
        Another thread (or a jump host shared by many nodes) may have learned the host meanwhile: the same key is
        not written twice, and a different key for it is refused as a changed key.
        """
        with _KNOWN_HOSTS_LOCK:
            try:
                entries = self._entries(path)
            except OSError as exc:
                raise _KnownHostsWriteError(f"cannot read {path}: {exc.strerror or exc}") from None
            for entry in entries:
                if hostname in entry.hostnames or _hashed_match(entry.hostnames, hostname):
                    if entry.key.get_name() == key.get_name():
                        if entry.key == key:
                            return
                        raise paramiko.BadHostKeyException(hostname, key, entry.key)
            try:
                _append_line(path, f"{hostname} {key.get_name()} {key.get_base64()}\n")
            except OSError as exc:
                raise _KnownHostsWriteError(f"cannot write {path}: {exc.strerror or exc}") from None
            entries.append(paramiko.hostkeys.HostKeyEntry([hostname], key))
            self._parsed[path] = (self._stat(path), entries)


def _hashed_match(hostnames: list[str], hostname: str) -> bool:
    return any(name.startswith("|1|") and paramiko.HostKeys.hash_host(hostname, name) == name for name in hostnames)


def _append_line(path: Path, line: str) -> None:
    """Append one line under an exclusive flock (another nvdeploy, or ssh itself, may write the file too).

    A missing folder is created 0700 and a missing file 0600, as OpenSSH does for ~/.ssh/known_hosts.
    """
    if not path.parent.is_dir():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        prefix = ""
        if size and os.pread(fd, 1, size - 1) != b"\n":
            prefix = "\n"  # a last line without its newline would swallow ours
        os.write(fd, (prefix + line).encode("ascii"))
    finally:
        os.close(fd)


_KNOWN_HOSTS = _KnownHostsFiles()


class _AcceptNewPolicy(paramiko.MissingHostKeyPolicy):
    """OpenSSH's ``StrictHostKeyChecking=accept-new``: learn unknown keys, never accept a changed one.

    A learned key is written to the known_hosts file before it is trusted, never kept only in memory: otherwise
    every later run would trust whatever key it first meets again.
    """

    def __init__(self, known_hosts: Path) -> None:
        self.known_hosts = known_hosts

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        _KNOWN_HOSTS.learn(self.known_hosts, hostname, key)
        client.get_host_keys().add(hostname, key.get_name(), key)


class _ConnectExpired(Exception):
    """The overall connect budget ran out."""


class _ConnectBudget:
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
            raise _ConnectExpired()
        return left

    def watch(self, thing: Any) -> Any:
        """Close ``thing`` (socket, SSHClient, Channel) if the deadline passes before finish()."""
        with self._lock:
            if not self.expired:
                self._watched.append(thing)
                return thing
        _force_close(thing)
        raise _ConnectExpired()

    def _expire(self, cancelled: bool = False) -> None:
        with self._lock:
            if self._done or self.expired:
                return
            self.expired = True
            self.cancelled = cancelled
            things = list(self._watched)
        for thing in reversed(things):
            _force_close(thing)

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
            _force_close(thing)

    def cancel(self) -> None:
        """From another thread (the run was interrupted): end a connect still under way as the deadline would,
        at once; a connect already finished is left alone."""
        self._timer.cancel()
        self._expire(cancelled=True)


def _force_close(thing: Any) -> None:
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


def _open_socket(host: str, port: int, budget: _ConnectBudget) -> socket.socket:
    """TCP connect within the budget (name resolution included); TCP_NODELAY on."""
    infos = _resolve(host, port, budget)
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


def _resolve(host: str, port: int, budget: _ConnectBudget) -> list[Any]:
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
        raise _ConnectExpired()
    if failure:
        raise failure[0]
    return answer


def _parse_jump(spec: str) -> tuple[Optional[str], str, int]:
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
        self._budget: Optional[_ConnectBudget] = None  # the connect under way (or done), for close() to cancel
        self._channels: set[paramiko.Channel] = set()
        self._lock = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:  # never show the password
        return f"SSHTransport({self.user or ''}@{self.address}:{self.port})"

    def _connection(self, host: str, user: Optional[str], port: int, sock: Any, budget: _ConnectBudget) -> Connection:
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
        known_hosts = _user_known_hosts(self.known_hosts)
        try:
            client._host_keys = _KNOWN_HOSTS.host_keys(known_hosts)  # noqa: SLF001 - shared parse (see class)
            if self.known_hosts is None and _GLOBAL_KNOWN_HOSTS.is_file():
                client._system_host_keys = _KNOWN_HOSTS.host_keys(_GLOBAL_KNOWN_HOSTS)  # noqa: SLF001
        except OSError as exc:
            raise TransportError(ErrorReason.HOST_KEY, f"cannot read known_hosts file {exc.filename or known_hosts}: "
                                 f"{exc.strerror or exc}") from None
        client._host_keys_filename = None  # noqa: SLF001 - paramiko must never rewrite the file; we append
        policy: paramiko.MissingHostKeyPolicy = (
            _AcceptNewPolicy(known_hosts) if self.accept_new_host_keys else paramiko.RejectPolicy()
        )
        client.set_missing_host_key_policy(policy)
        return conn

    def connect(self) -> None:
        """Connect (through ``ssh_jump`` when set) within connect_timeout overall, or raise TransportError."""
        if self._closed:
            raise TransportError(ErrorReason.INTERRUPTED, "not connected: run interrupted")
        budget = self._budget = _ConnectBudget(self.connect_timeout_s)
        if self._closed:  # close() ran before the budget was set: it could not cancel it
            budget.cancel()
        jump: Optional[tuple[str, int]] = None
        failing = "target"  # whose failure an exception is: the jump host's, its channel's, or the node's
        try:
            sock: Any
            if self.jump:
                jump_user, jump_host, jump_port = _parse_jump(self.jump)
                jump = (jump_host, jump_port)
                failing = "jump"
                jump_sock = _open_socket(jump_host, jump_port, budget)
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
                sock = _open_socket(self.address, self.port, budget)
            self._conn = self._connection(self.address, self.user, self.port, sock, budget)
            self._conn.open()
            transport = self._conn.client.get_transport()
            if transport is None or not transport.is_active():
                raise EOFError("SSH transport did not come up")
            _settle(transport)
            if not budget.finish():
                raise _ConnectExpired()
        except Exception as exc:  # noqa: BLE001 - every connect failure becomes a node-level ERROR
            budget.abort()
            self.close()
            if isinstance(exc, TransportError):
                raise
            if budget.cancelled:
                raise TransportError(ErrorReason.INTERRUPTED, "connect cancelled: run interrupted") from None
            raise self._connect_error(exc, budget, failing, jump) from None

    def _connect_error(self, exc: BaseException, budget: _ConnectBudget, failing: str,
                       jump: Optional[tuple[str, int]]) -> TransportError:
        timeout = self.connect_timeout_s
        target = f"{self.address}:{self.port}"
        expired = budget.expired or isinstance(exc, _ConnectExpired) or (
            isinstance(exc, paramiko.SSHException) and "Timeout opening channel" in str(exc))
        if jump is None:
            if expired:
                return TransportError(ErrorReason.UNREACHABLE, _expiry_detail(self._conn, target, timeout))
            return _classify(exc, self.address, self.port, timeout, _user_known_hosts(self.known_hosts))
        via = f"{jump[0]}:{jump[1]}"
        if failing == "jump":
            inner = (TransportError(ErrorReason.UNREACHABLE, _expiry_detail(self._jump_conn, via, timeout))
                     if expired else _classify(exc, jump[0], jump[1], timeout, _user_known_hosts(self.known_hosts)))
            return TransportError(inner.reason, f"cannot reach {target} through jump host {via}: {inner.detail}")
        if failing == "channel":
            if expired:
                detail = f"jump host {via} did not open a connection to {target} within {timeout:g} s"
            elif isinstance(exc, paramiko.ChannelException):
                detail = f"jump host {via} could not connect to {target}: {exc.text} (code {exc.code})"
            else:
                detail = f"jump host {via} dropped the connection while opening one to {target}: {exc}"
            return TransportError(ErrorReason.UNREACHABLE, detail)
        inner = (TransportError(ErrorReason.UNREACHABLE, _expiry_detail(self._conn, target, timeout))
                 if expired else _classify(exc, self.address, self.port, timeout, _user_known_hosts(self.known_hosts)))
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
                                        heartbeat_lost_s=batch.HEARTBEAT_LOST_S)
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


def _expiry_detail(conn: Optional[Connection], where: str, timeout_s: float) -> str:
    """What the connect to ``where`` was still waiting for when the overall budget ran out."""
    if conn is None:
        return f"connect to {where} timed out after {timeout_s:g} s"
    transport = conn.client.get_transport()
    if transport is None or not transport.remote_version:
        return f"no SSH banner from {where} within {timeout_s:g} s"
    return f"SSH key exchange or authentication with {where} did not complete within {timeout_s:g} s"


def _classify(exc: BaseException, address: str, port: int, timeout_s: float,
              known_hosts: Optional[Path] = None) -> TransportError:
    where = f"{address}:{port}"
    if isinstance(exc, paramiko.BadHostKeyException):
        return TransportError(ErrorReason.HOST_KEY, f"HOST KEY CHANGED for {where}: the node presented "
                              f"{exc.key.get_name()} {exc.key.get_fingerprint().hex()} but known_hosts has another "
                              "key (reimaged node or man-in-the-middle); no command was run")
    if isinstance(exc, _KnownHostsWriteError):
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
