"""Real OpenSSH servers on loopback addresses, one address per fake node, for end-to-end tests.

Layout: every fake node gets its own address ``127.0.X.Y`` (X >= 1; Linux routes all of 127.0.0.0/8 to ``lo``, so
a listener bound to such an address accepts connections without the address being added to an interface), and
all nodes share one TCP port. One ``sshd`` process serves up to 16 nodes (OpenSSH's ``MAX_LISTEN_SOCKS``); it has
one ``ListenAddress`` per node and one ``Match LocalAddress`` block per node whose ``SetEnv`` gives that node's
sessions their own ``PATH`` (the node's fake tool folder first), ``NVD_SCENARIO_FILE``, ``HOME``,
``NVD_NODE_NAME`` and ``NVDEPLOY_LOCK_DIR`` (each fake node its own run lock, as each real node has). Checked on
OpenSSH 9.2: ``SetEnv`` inside ``Match`` works and overrides sshd's default ``PATH`` for exec sessions. ``SetEnv``
is never used at the top level of the config, because sshd keeps the first ``SetEnv`` it sees and would then
ignore the per-node ones.

A cluster made with ``forward_to=other`` is a bastion (jump host) for ``other``: its ``PermitOpen`` lists
``other``'s nodes and its ``authorized_keys`` takes ``other``'s client key, so an ``ssh_jump`` test needs one key
and the two known_hosts files concatenated. ``first_index`` gives it addresses apart from the nodes'.

When run as root, sessions log in as a dedicated user ``nvdtest`` (login shell ``/bin/sh``, no rc files) created
on first use; its password field is ``*`` rather than ``!``, because with ``UsePAM no`` sshd refuses even key
logins to a "locked" (``!``) account. Its passwd home is a shared empty directory that is the working directory of
every session; each node's ``HOME`` variable points at the node's own writable home folder.

Clean-up never goes by process name. ``stop()`` reads each sshd's PidFile, checks the PID is still that sshd
(its command line names our config file), stops it, kills all its descendants and then any stray process whose
environment carries one of this cluster's ``NVD_SCENARIO_FILE`` values (double-forked leftovers). A watchdog
process (its own session, so a process-group kill by an outer ``timeout`` spares it) does the same clean-up if
the test process dies without calling ``stop()``; ``atexit`` covers a normal interpreter exit.

``freeze``/``thaw``/``kill_sessions`` act on the per-connection processes of one node: the children of that
node's listener whose file descriptors hold a TCP socket whose local address is the node's address and port
(found through ``/proc/net/tcp`` inodes and ``/proc/<pid>/fd``), plus their descendants. ``freeze`` SIGSTOPs only
the sshd processes of those sessions (as in recipe H4: TCP stays up, SSH goes silent, the remote command itself
keeps running); ``kill_sessions`` SIGKILLs the sshd processes and the commands. Neither affects connections made
afterwards: the listener is shared by up to 16 nodes, so new connections to a frozen node still succeed.

The /proc helpers, the reaper and the watchdog's script are in procs.py; the login user in login_user.py; the
interpreter and package copy the fake tools run with in pylib.py.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from nvdeploy.testing.errors import HarnessError
from nvdeploy.testing.login_user import ensure_test_user
from nvdeploy.testing.procs import (
    CLUSTER_MARKER,
    children_map,
    comm,
    descendants,
    hex_address,
    pid_alive,
    proc_table,
    reap_workdir,
    send_signal,
    socket_inodes,
    tcp_sockets,
    wait_gone,
)
from nvdeploy.testing.pylib import check_traversable, copy_pylib, fake_tool_installer, python_for

SSHD = Path("/usr/sbin/sshd")
SSH_KEYGEN = "ssh-keygen"
MAX_LISTEN_PER_SSHD = 16
BASE_PATH = "/usr/local/bin:/usr/bin:/bin"
_NODE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$")



@dataclass(frozen=True)
class FakeNode:
    """One fake node: an address of its own on the shared sshd port, its own tools, scenario and home."""

    name: str
    address: str
    port: int
    user: str
    bin_dir: Path
    scenario_file: Path
    home: Path


def sshd_available() -> bool:
    """Whether an OpenSSH server binary is installed where the harness expects it."""
    return SSHD.is_file() and os.access(SSHD, os.X_OK)


def node_address(index: int) -> str:
    """Loopback address of the ``index``-th node (0-based): 127.0.1.1, 127.0.1.2, ..., 127.0.1.254, 127.0.2.1, ..."""
    if not 0 <= index < 254 * 255:
        raise ValueError(f"node index {index} out of range")
    return f"127.0.{1 + index // 254}.{1 + index % 254}"


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class SshCluster:
    """N fake nodes served by real sshd processes on loopback; a context manager.

    ``node_scenarios``: ``[(node_name, scenario_json_text), ...]`` or an int N (nodes ``node01``.. with ``"{}"``).
    ``workdir``: where keys, configs, logs and node folders go; by default a new folder under /tmp that
    ``stop()`` deletes. A given folder is kept; it and its parents must be searchable by other users.
    ``install_tools``: call ``nvdeploy.sim.fake_tool.install_fake_tools`` for each node when that module exists.
    ``forward_to``: make these nodes jump hosts (bastions) for that started cluster: TCP forwarding to its nodes
    is permitted and its client key may log in here too, so one key and one known_hosts reach both.
    ``first_index``: address the nodes from ``node_address(first_index)`` on, so a bastion has an address of its
    own (the ports differ anyway; distinct addresses keep logs and known_hosts readable).
    ``also_permit``: more ``"127.x.y.z:port"`` destinations its sessions may forward to (a black hole, say).
    """

    def __init__(
        self,
        node_scenarios: Sequence[tuple[str, str]] | int,
        workdir: Path | None = None,
        *,
        install_tools: bool = True,
        forward_to: SshCluster | None = None,
        first_index: int = 0,
        also_permit: Sequence[str] = (),
    ) -> None:
        if isinstance(node_scenarios, bool):
            raise TypeError("node_scenarios must be an int or a sequence of (name, scenario_json_text)")
        if isinstance(node_scenarios, int):
            if node_scenarios < 1:
                raise ValueError("a cluster needs at least one node")
            width = max(2, len(str(node_scenarios)))
            pairs = [(f"node{i + 1:0{width}d}", "{}") for i in range(node_scenarios)]
        else:
            pairs = [(str(name), str(text)) for name, text in node_scenarios]
            if not pairs:
                raise ValueError("a cluster needs at least one node")
        names = [name for name, _ in pairs]
        for name in names:
            if not _NODE_NAME.match(name):
                raise ValueError(f"bad node name {name!r} (letters, digits, '.', '_', '-'; at most 64)")
        if len(set(names)) != len(names):
            raise ValueError("node names must be unique")
        self._pairs = pairs
        self._given_workdir = Path(workdir).resolve() if workdir is not None else None
        self._install_tools = install_tools
        self._forward_to = forward_to
        if forward_to is not None:
            forward_to._require_started()
        if not 0 <= first_index or first_index + len(pairs) > 254 * 255:
            raise ValueError(f"first_index {first_index} out of range")
        self._first_index = first_index
        for target in also_permit:
            host, _, port_text = target.rpartition(":")
            if not host.startswith("127.") or not port_text.isdigit():
                raise ValueError(f"also_permit {target!r}: must be 127.x.y.z:port (loopback only)")
        self._also_permit = tuple(also_permit)
        self._workdir: Path | None = None
        self._nodes: list[FakeNode] = []
        self._by_name: dict[str, FakeNode] = {}
        self._group_of: dict[str, int] = {}
        self._listeners: list[int] = []
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._port = 0
        self._user = ""
        self._started = False
        self._stopped = False
        self.fake_tools_installed = False
        self.start_seconds = 0.0
        self.stop_seconds = 0.0

    # -- properties --------------------------------------------------------------------------------------------

    @property
    def workdir(self) -> Path:
        return self._require_started()

    @property
    def known_hosts(self) -> Path:
        return self._require_started() / "ssh" / "known_hosts"

    @property
    def client_key(self) -> Path:
        return self._require_started() / "ssh" / "client_key"

    @property
    def port(self) -> int:
        self._require_started()
        return self._port

    @property
    def user(self) -> str:
        self._require_started()
        return self._user

    @property
    def nodes(self) -> list[FakeNode]:
        self._require_started()
        return list(self._nodes)

    @property
    def listener_pids(self) -> list[int]:
        """PIDs of the sshd listener processes (one per 16 nodes)."""
        return list(self._listeners)

    def node(self, name: str) -> FakeNode:
        self._require_started()
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"no node {name!r} (nodes: {', '.join(self._by_name)})") from None

    def _require_started(self) -> Path:
        if self._workdir is None or not self._started:
            raise HarnessError("the cluster is not started (call start() or use it as a context manager)")
        return self._workdir

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def __enter__(self) -> SshCluster:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> SshCluster:
        """Create keys, folders and configs, start the sshd processes and wait until every address listens."""
        if self._started:
            return self
        if self._stopped:
            raise HarnessError("a stopped SshCluster cannot be started again; make a new one")
        if not sshd_available():
            raise HarnessError(f"{SSHD} is not installed (apt-get install openssh-server)")
        began = time.monotonic()
        self._user = ensure_test_user()
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        workdir = self._make_workdir()
        self._workdir = workdir
        atexit.register(self.stop)
        self._started = True
        try:
            self._write_keys(workdir)
            self._make_nodes(workdir)
            self._start_watchdog(workdir)
            self._launch_with_retries(workdir)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began
        return self

    def stop(self) -> None:
        """Kill every sshd this cluster started and all their sessions (by PID); safe to call twice."""
        if self._stopped or not self._started:
            self._stopped = True
            return
        self._stopped = True
        began = time.monotonic()
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        workdir = self._workdir
        assert workdir is not None
        left = reap_workdir(workdir, remove=False)
        # A listener whose PidFile was never written (a failed start) is still known by PID.
        left += [pid for pid in self._listeners if pid_alive(pid) and pid not in left]
        if left:
            send_signal(left, signal.SIGCONT)
            send_signal(left, signal.SIGKILL)
            left = wait_gone(left, 5.0)
        if self._watchdog is not None:
            with contextlib.suppress(OSError):
                assert self._watchdog.stdin is not None
                self._watchdog.stdin.write(b"done")
                self._watchdog.stdin.close()
            try:
                self._watchdog.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._watchdog.kill()
                self._watchdog.wait()
        if self._given_workdir is None and not left:
            shutil.rmtree(workdir, ignore_errors=True)
        self.stop_seconds = time.monotonic() - began
        if left:
            raise HarnessError(f"processes still alive after stop(): {left}")

    def _make_workdir(self) -> Path:
        if self._given_workdir is None:
            workdir = Path(tempfile.mkdtemp(prefix="nvd-sshd-", dir="/tmp"))
            (workdir / CLUSTER_MARKER).write_text("created by nvdeploy.testing.sshd\n")
        else:
            workdir = self._given_workdir
            workdir.mkdir(parents=True, exist_ok=True)
        if re.search(r'["\\\s#]', str(workdir)):
            raise HarnessError(f"workdir {workdir} must not contain spaces, quotes, backslashes or '#'")
        workdir.chmod(0o755)
        if os.geteuid() == 0:  # the login user is someone else and must reach the node folders and keys
            check_traversable(workdir)
        return workdir

    def _write_keys(self, workdir: Path) -> None:
        ssh = workdir / "ssh"
        ssh.mkdir(mode=0o755)
        ssh.chmod(0o755)
        jobs = [
            subprocess.Popen(
                [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", f"nvd-{what}", "-f", str(ssh / what)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            for what in ("host_key", "client_key")
        ]
        for job in jobs:
            out, _ = job.communicate()
            if job.returncode != 0:
                raise HarnessError(f"ssh-keygen failed: {out.decode(errors='replace').strip()}")
        authorized = ssh / "authorized_keys"
        keys = (ssh / "client_key.pub").read_text()
        if self._forward_to is not None:  # a bastion lets the target cluster's client in too
            keys += self._forward_to.client_key.with_suffix(".pub").read_text()
        authorized.write_text(keys)
        authorized.chmod(0o644)

    def _make_nodes(self, workdir: Path) -> None:
        installer = fake_tool_installer() if self._install_tools else None
        python = python_for(self._user) if installer is not None else sys.executable
        uid = gid = -1
        if os.geteuid() == 0:
            import pwd

            entry = pwd.getpwnam(self._user)
            uid, gid = entry.pw_uid, entry.pw_gid
        pylib = copy_pylib(workdir, python) if installer is not None else None
        nodes_dir = workdir / "nodes"
        nodes_dir.mkdir(mode=0o755)
        nodes_dir.chmod(0o755)
        for index, (name, text) in enumerate(self._pairs):
            base = nodes_dir / name
            bin_dir, home = base / "bin", base / "home"
            for folder in (base, bin_dir, home):
                folder.mkdir(mode=0o755)
                folder.chmod(0o755)
            if uid >= 0:
                os.chown(home, uid, gid)
            scenario = base / "scenario.json"
            node = FakeNode(name, node_address(self._first_index + index), 0, self._user, bin_dir, scenario, home)
            self._write_scenario(node, text)
            if installer is not None:
                installer(bin_dir, python=python, pythonpath=pylib)
                for path in bin_dir.iterdir():
                    path.chmod(path.stat().st_mode | 0o555)
            self._nodes.append(node)
            self._group_of[name] = index // MAX_LISTEN_PER_SSHD
        self.fake_tools_installed = installer is not None

    @staticmethod
    def _write_scenario(node: FakeNode, text: str) -> None:
        tmp = node.scenario_file.with_name(node.scenario_file.name + ".tmp")
        tmp.write_text(text)
        tmp.chmod(0o644)
        os.replace(tmp, node.scenario_file)

    def _start_watchdog(self, workdir: Path) -> None:
        self._watchdog = subprocess.Popen(
            [sys.executable, "-I", "-S", str(Path(__file__).resolve().with_name("procs.py")), "--watchdog",
             str(workdir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            cwd="/",
        )

    def _launch_with_retries(self, workdir: Path, attempts: int = 5) -> None:
        problem = ""
        for _ in range(attempts):
            port = free_port()
            self._nodes = [FakeNode(n.name, n.address, port, n.user, n.bin_dir, n.scenario_file, n.home)
                           for n in self._nodes]
            self._by_name = {n.name: n for n in self._nodes}
            self._port = port
            problem = self._launch(workdir, port)
            if not problem:
                return
            reap_workdir(workdir, remove=False)
            send_signal([pid for pid in self._listeners if pid_alive(pid)], signal.SIGKILL)
            self._listeners = []
            for group_dir in workdir.glob("sshd-*"):
                shutil.rmtree(group_dir, ignore_errors=True)
        raise HarnessError(f"sshd did not start after {attempts} attempts: {problem}")

    def _launch(self, workdir: Path, port: int) -> str:
        """Write configs and known_hosts, start the sshd processes, wait for every listener; '' or a problem."""
        ssh = workdir / "ssh"
        host_pub = (ssh / "host_key.pub").read_text().split()
        (ssh / "known_hosts").write_text(
            "".join(f"[{n.address}]:{port} {host_pub[0]} {host_pub[1]}\n" for n in self._nodes))
        (ssh / "known_hosts").chmod(0o644)
        groups = [self._nodes[i : i + MAX_LISTEN_PER_SSHD] for i in range(0, len(self._nodes), MAX_LISTEN_PER_SSHD)]
        targets = [*self._nodes, *(self._forward_to.nodes if self._forward_to is not None else ())]
        permit_open = " ".join([*(f"{n.address}:{n.port or port}" for n in targets), *self._also_permit])
        procs: list[tuple[Path, subprocess.Popen[bytes]]] = []
        for gi, group in enumerate(groups):
            gdir = workdir / f"sshd-{gi}"
            gdir.mkdir(mode=0o755)
            config = gdir / "sshd_config"
            config.write_text(self._sshd_config(workdir, gdir, group, port, permit_open))
            log = gdir / "sshd.log"
            procs.append((gdir, subprocess.Popen(
                [str(SSHD), "-f", str(config), "-E", str(log)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd="/")))
        problems: list[str] = []
        for gdir, proc in procs:
            out, _ = proc.communicate(timeout=30)
            if proc.returncode != 0:
                problems.append(f"{gdir.name}: rc {proc.returncode}: {out.decode(errors='replace').strip()} "
                                f"{_tail(gdir / 'sshd.log')}")
        deadline = time.monotonic() + 10
        for gdir, _ in procs:
            pid = 0
            while not pid and not problems and time.monotonic() < deadline:
                with contextlib.suppress(OSError, ValueError, IndexError):
                    pid = int((gdir / "sshd.pid").read_text().split()[0])
                if not pid:
                    time.sleep(0.005)
            if pid:
                self._listeners.append(pid)
            elif not problems:
                problems.append(f"{gdir.name}: no PidFile after 10 s {_tail(gdir / 'sshd.log')}")
        if problems:
            return "; ".join(problems)
        return self._wait_listening(port, deadline)

    def _wait_listening(self, port: int, deadline: float) -> str:
        """Wait until the kernel lists a LISTEN socket for every node, then check one real TCP connect per sshd."""
        wanted = {hex_address(n.address, port): n for n in self._nodes}
        while True:
            listening = {local for local, state, _ in tcp_sockets() if state == "0A"}
            missing = [n for key, n in wanted.items() if key not in listening]
            if not missing:
                break
            if time.monotonic() > deadline or not all(pid_alive(pid) for pid in self._listeners):
                gi = self._group_of[missing[0].name]
                return (f"{len(missing)} node(s) not listening, e.g. {missing[0].address}:{port} "
                        f"{_tail(self._require_started() / f'sshd-{gi}' / 'sshd.log')}")
            time.sleep(0.005)
        for first in self._nodes[::MAX_LISTEN_PER_SSHD]:
            try:
                with socket.create_connection((first.address, port), timeout=5) as sock:
                    sock.settimeout(5)
                    banner = sock.recv(64)
            except OSError as exc:
                return f"connect to {first.address}:{port} failed: {exc}"
            if not banner.startswith(b"SSH-"):
                return f"{first.address}:{port} sent {banner!r} instead of an SSH banner"
        return ""

    def _sshd_config(self, workdir: Path, gdir: Path, group: list[FakeNode], port: int, permit_open: str) -> str:
        ssh = workdir / "ssh"
        lines = [
            "# generated by nvdeploy.testing.sshd; loopback only",
            "AddressFamily inet",
            *(f"ListenAddress {n.address}:{port}" for n in group),
            f"HostKey {ssh / 'host_key'}",
            f"PidFile {gdir / 'sshd.pid'}",
            f"AuthorizedKeysFile {ssh / 'authorized_keys'}",
            f"AllowUsers {self._user}",
            "PermitRootLogin prohibit-password" if self._user == "root" else "PermitRootLogin no",
            "UsePAM no",
            "StrictModes no",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes",
            "HostbasedAuthentication no",
            "GSSAPIAuthentication no",
            "UseDNS no",
            "PrintMotd no",
            "PrintLastLog no",
            "PermitUserRC no",
            "PermitUserEnvironment no",
            "X11Forwarding no",
            "AllowAgentForwarding no",
            "AllowStreamLocalForwarding no",
            "PermitTunnel no",
            "PermitListen none",
            f"PermitOpen {permit_open}",
            "MaxStartups 200:30:400",
            "MaxSessions 50",
            "LoginGraceTime 30",
            "LogLevel ERROR",
            "Subsystem sftp internal-sftp",
        ]
        for n in group:
            path = f"{n.bin_dir}:{BASE_PATH}"
            lines += [
                f"Match LocalAddress {n.address}",
                f'    SetEnv "NVD_SCENARIO_FILE={n.scenario_file}" "PATH={path}" "HOME={n.home}" '
                f'"NVD_NODE_NAME={n.name}" "NVDEPLOY_LOCK_DIR={n.home}/nvdeploy.lock"',
            ]
        return "\n".join(lines) + "\n"

    # -- per-node control --------------------------------------------------------------------------------------

    def set_scenario(self, name: str, json_text: str) -> None:
        """Replace a node's scenario file (atomically); the next command on that node sees it."""
        self._write_scenario(self.node(name), json_text)

    def session_pids(self, name: str) -> list[int]:
        """PIDs serving connections to ``name`` now: listener children holding its sockets, and their descendants."""
        node = self.node(name)
        key = hex_address(node.address, node.port)
        inodes = {inode for local, state, inode in tcp_sockets() if local == key and state != "0A"}
        if not inodes:
            return []
        listener = self._listeners[self._group_of[name]] if self._group_of[name] < len(self._listeners) else 0
        table = proc_table()
        children = children_map(table)
        roots = [pid for pid in children.get(listener, ()) if socket_inodes(pid) & inodes]
        return roots + descendants(roots, table)

    def freeze(self, name: str) -> list[int]:
        """SIGSTOP the sshd processes of every current session of ``name`` (TCP stays up, SSH goes silent)."""
        frozen: list[int] = []
        for _ in range(2):  # a session may fork between the scan and the signal
            found = [pid for pid in self.session_pids(name) if pid not in frozen and comm(pid) == "sshd"]
            send_signal(found, signal.SIGSTOP)
            frozen += found
        return frozen

    def thaw(self, name: str) -> list[int]:
        """SIGCONT every process of every current session of ``name``."""
        pids = self.session_pids(name)
        send_signal(pids, signal.SIGCONT)
        return pids

    def kill_sessions(self, name: str) -> list[int]:
        """SIGKILL every current session of ``name`` (the sshd processes and the commands they run)."""
        pids = self.session_pids(name)
        send_signal(pids, signal.SIGSTOP)
        pids += [pid for pid in descendants(pids) if pid not in pids]
        send_signal(pids, signal.SIGKILL)
        send_signal(pids, signal.SIGCONT)
        return pids

    def log_text(self) -> str:
        """The sshd logs (LogLevel ERROR), for failure messages."""
        workdir = self._require_started()
        logs = sorted(workdir.glob("sshd-*/sshd.log"))
        return "".join(f"== {p.parent.name}\n{p.read_text(errors='replace')}" for p in logs)

    # -- inventory ---------------------------------------------------------------------------------------------

    def inventory_yaml(self, profile: str = "h100-sxm-8x", extra_host_vars: dict[str, dict] | None = None,
                       command_timeout: float | None = None, connect_timeout: float | None = None) -> str:
        """YAML text of an nvdeploy inventory that reaches these nodes over SSH (every string double-quoted).

        ``command_timeout``: a group-wide collector timeout; the fake tools are Python processes, and dozens of
        them starting at once on a busy 2-core machine can need more than a real tool's default.
        ``connect_timeout``: a group-wide connect timeout (``None``: nvdeploy's 10 s). Tests that need every node
        reached pass 30: a CI machine running four test workers, each with its own sshd and fake tools, has kept
        one loopback handshake past 10 s."""
        import yaml

        extra = dict(extra_host_vars or {})
        unknown = sorted(set(extra) - set(self._by_name))
        if unknown:
            raise KeyError(f"extra_host_vars names unknown node(s): {', '.join(unknown)}")
        hosts: dict[str, dict[str, Any]] = {}
        for node in self.nodes:
            # The probe runs from a fixed path, never the PATH's python3: the node's fake one is named as an
            # operator names a node's Python.
            hosts[node.name] = {"address": node.address, "probe_python": str(node.bin_dir / "python3"),
                                **extra.get(node.name, {})}
        data = {
            "all": {
                "vars": {
                    "connection": "ssh",
                    "profile": profile,
                    "ssh_user": self.user,
                    "ssh_port": self.port,
                    "ssh_key": str(self.client_key),
                    "ssh_known_hosts": str(self.known_hosts),
                    **({"command_timeout": command_timeout} if command_timeout else {}),
                    **({"connect_timeout": connect_timeout} if connect_timeout else {}),
                },
                "hosts": hosts,
            }
        }
        return yaml.dump(data, Dumper=_quoting_dumper(), sort_keys=False, default_flow_style=False, allow_unicode=True)

    def __repr__(self) -> str:
        state = "stopped" if self._stopped else "started" if self._started else "new"
        return f"<SshCluster {len(self._pairs)} nodes port={self._port} {state} workdir={self._workdir}>"


def _tail(path: Path, limit: int = 2000) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return ""
    return f"(log: {text[-limit:]})" if text else ""


def _quoting_dumper() -> Any:
    """A SafeDumper that double-quotes every string value (keys stay plain unless YAML needs quotes)."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def represent_mapping(self, tag: str, mapping: Any, flow_style: Any = None) -> Any:
            node = super().represent_mapping(tag, mapping, flow_style)
            for key_node, _ in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag == "tag:yaml.org,2002:str":
                    key_node.style = None
            return node

    def represent_str(dumper: yaml.SafeDumper, value: str) -> Any:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"')

    Dumper.add_representer(str, represent_str)
    return Dumper


def iter_cluster_processes(cluster: SshCluster) -> Iterator[int]:
    """Every live process of a started cluster: the listeners and all their descendants."""
    listeners = [pid for pid in cluster.listener_pids if pid_alive(pid)]
    yield from listeners
    yield from descendants(listeners)

