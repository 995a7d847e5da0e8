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
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import importlib
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

SSHD = Path("/usr/sbin/sshd")
SSH_KEYGEN = "ssh-keygen"
TEST_USER = "nvdtest"
TEST_USER_HOME = Path("/var/lib/nvdtest")
MAX_LISTEN_PER_SSHD = 16
BASE_PATH = "/usr/local/bin:/usr/bin:/bin"
_NODE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$")
_MARKER = ".nvd-sshd-cluster"
_USER_LOCK = Path(tempfile.gettempdir()) / "nvdtest-user.lock"


class HarnessError(RuntimeError):
    """The SSH test harness could not be set up or torn down."""


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


def _run(args: Sequence[str], what: str) -> None:
    proc = subprocess.run(list(args), stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise HarnessError(f"{what} failed (rc {proc.returncode}): {(proc.stderr or proc.stdout).strip()}")


def _shadow_field(user: str) -> str | None:
    try:
        with open("/etc/shadow", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                parts = line.split(":")
                if parts[0] == user and len(parts) > 1:
                    return parts[1]
    except OSError:
        return None
    return None


def ensure_test_user(name: str = TEST_USER, home: Path = TEST_USER_HOME) -> str:
    """Return the login user for fake nodes, creating ``name`` first if running as root.

    As root: create (once; safe against concurrent callers through a lock file) a user with ``/bin/sh`` as login
    shell, an empty home folder and password field ``*`` (not locked, no password). Not root: the current user,
    whose shell start-up files then run on every command.
    """
    import pwd

    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid()).pw_name
    with open(_USER_LOCK, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            try:
                entry = pwd.getpwnam(name)
            except KeyError:
                useradd = shutil.which("useradd") or "/usr/sbin/useradd"
                _run([useradd, "-M", "-s", "/bin/sh", "-d", str(home), "-p", "*", name], f"useradd {name}")
                entry = pwd.getpwnam(name)
            if (_shadow_field(name) or "").startswith("!"):
                usermod = shutil.which("usermod") or "/usr/sbin/usermod"
                _run([usermod, "-p", "*", name], f"usermod -p '*' {name}")
            pw_home = Path(entry.pw_dir)
            if not pw_home.is_dir():
                pw_home.mkdir(mode=0o755, parents=True, exist_ok=True)
                pw_home.chmod(0o755)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return name


# ---------------------------------------------------------------------------------------------------------------
# /proc helpers (Linux only)


def _proc_table() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, state) for every process visible now."""
    table: dict[int, tuple[int, str]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                data = handle.read()
        except OSError:
            continue
        rest = data[data.rfind(b")") + 2 :].split()
        if len(rest) >= 2:
            table[int(entry.name)] = (int(rest[1]), rest[0].decode())
    return table


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a zombie has exited and waits only to be reaped)."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return data[data.rfind(b")") + 2 : data.rfind(b")") + 3] not in (b"Z", b"X")


def _children_map(table: dict[int, tuple[int, str]]) -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    return children


def _descendants(roots: Iterable[int], table: dict[int, tuple[int, str]] | None = None) -> list[int]:
    """The roots' descendants (not the roots), parents before children."""
    children = _children_map(table if table is not None else _proc_table())
    out: list[int] = []
    todo = list(roots)
    while todo:
        pid = todo.pop(0)
        for child in children.get(pid, ()):
            out.append(child)
            todo.append(child)
    return out


def _signal(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _hex_address(address: str, port: int) -> str:
    return f"{struct.unpack('=I', socket.inet_aton(address))[0]:08X}:{port:04X}"


def _tcp_sockets() -> list[tuple[str, str, int]]:
    """(local 'ADDR:PORT' in /proc/net/tcp hex form, state hex, inode) for every IPv4 TCP socket."""
    out: list[tuple[str, str, int]] = []
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return out
    for line in lines:
        fields = line.split()
        if len(fields) >= 10:
            out.append((fields[1], fields[3], int(fields[9])))
    return out


def _socket_inodes(pid: int) -> set[int]:
    inodes: set[int] = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def _environ_has(pid: int, needles: set[bytes]) -> bool:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return any(item in needles for item in raw.split(b"\0"))


def _wait_gone(pids: Iterable[int], timeout: float) -> list[int]:
    pending = list(pids)
    deadline = time.monotonic() + timeout
    while pending:
        pending = [pid for pid in pending if pid_alive(pid)]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    return pending


def reap_workdir(workdir: Path, remove: bool | None = None) -> list[int]:
    """Kill everything a cluster rooted at ``workdir`` started; return PIDs still alive afterwards.

    Works from files alone (PidFiles, the scenario file list), so a watchdog or a later session can run it.
    ``remove``: delete ``workdir`` afterwards; by default only when the harness created it (marker file).
    """
    workdir = Path(workdir)
    listeners: list[int] = []
    for pidfile in sorted(workdir.glob("sshd-*/sshd.pid")):
        try:
            pid = int(pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        config = str(pidfile.parent / "sshd_config")
        if pid > 1 and config in " ".join(_cmdline(pid)):  # the listener rewrites its title but keeps argv in it
            listeners.append(pid)
    needles = {f"NVD_SCENARIO_FILE={path}".encode() for path in workdir.glob("nodes/*/scenario.json")}
    # Stop the listeners so they accept and fork nothing new, then kill every descendant, twice in case a
    # session forked between the scan and the kill, then the listeners, then strays found by environment.
    _signal(listeners, signal.SIGSTOP)
    victims: set[int] = set()
    for _ in range(2):
        table = _proc_table()
        found = [pid for pid in _descendants(listeners, table) if pid not in victims]
        _signal(found, signal.SIGSTOP)
        _signal(found, signal.SIGKILL)
        victims.update(found)
    _signal(listeners, signal.SIGKILL)
    victims.update(listeners)
    if needles:
        me = os.getpid()
        strays = [pid for pid in _proc_table() if pid != me and pid not in victims and _environ_has(pid, needles)]
        _signal(strays, signal.SIGKILL)
        victims.update(strays)
    left = _wait_gone(victims, 5.0)
    if remove is None:
        remove = (workdir / _MARKER).exists()
    if remove and not left:
        shutil.rmtree(workdir, ignore_errors=True)
    return left


def _watchdog_main(workdir: str) -> None:
    """Run by the watchdog process: wait for the parent to go away, then clean up unless told it already did."""
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        told = sys.stdin.buffer.read()
    except Exception:  # noqa: BLE001 - any failure means the parent is gone
        told = b""
    if b"done" not in told:
        reap_workdir(Path(workdir))


def _python_for(user: str) -> str:
    """An interpreter ``user`` can execute: ours if every folder on its path is world-searchable, else python3."""
    import pwd

    if pwd.getpwuid(os.geteuid()).pw_name == user:
        return sys.executable
    ok = True
    for path in {Path(sys.executable), Path(os.path.realpath(sys.executable))}:
        for parent in path.parents:
            try:
                if not parent.stat().st_mode & 0o001:
                    ok = False
            except OSError:
                ok = False
    if ok:
        return sys.executable
    return shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or sys.executable


_PYLIB_TEMPLATES: dict[str, Path] = {}  # tool interpreter -> a compiled copy of nvdeploy, made once per process


def _remove_templates() -> None:
    for template in _PYLIB_TEMPLATES.values():
        shutil.rmtree(template.parent, ignore_errors=True)
    _PYLIB_TEMPLATES.clear()


def _pylib_template(python: str) -> Path:
    """A world-readable copy of nvdeploy (with its built-in data), byte-compiled by ``python``; made once per
    process and interpreter.

    Compiled because the fake tools import nvdeploy from it as the unprivileged test user, who cannot write
    ``__pycache__`` there: without it every fake tool call compiled the simulator from source (about a third of
    its CPU). ``copytree`` keeps modification times, so the ``.pyc`` files stay valid in each cluster's copy.
    """
    if python in _PYLIB_TEMPLATES:
        return _PYLIB_TEMPLATES[python]
    import nvdeploy
    from nvdeploy.config.builtin import data_dir

    if not _PYLIB_TEMPLATES:
        atexit.register(_remove_templates)
    pylib = Path(tempfile.mkdtemp(prefix="nvd-pylib-")) / "pylib"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "_data")
    shutil.copytree(Path(nvdeploy.__file__).parent, pylib / "nvdeploy", ignore=ignore)
    shutil.copytree(data_dir("checks"), pylib / "nvdeploy" / "_data" / "checks", ignore=ignore)
    # The simulator's own dependencies (PyYAML for scenarios, ClusterShell for host ranges), for a node python
    # that lacks them: pure-Python packages, copied from this interpreter's.
    for name in ("yaml", "ClusterShell"):
        probe = subprocess.run([python, "-c", f"import {name}"], capture_output=True, timeout=30)
        if probe.returncode != 0:
            module = importlib.import_module(name)
            shutil.copytree(Path(module.__file__).parent, pylib / name, ignore=shutil.ignore_patterns("__pycache__"))
    # Not compiled is only slower: a failure here leaves the sources, which still import.
    subprocess.run([python, "-m", "compileall", "-q", str(pylib)], stdin=subprocess.DEVNULL,
                   capture_output=True, timeout=300, check=False)
    for folder, _dirs, files in os.walk(pylib):
        os.chmod(folder, 0o755)  # noqa: S103 - the unprivileged test user must read it
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)
    _PYLIB_TEMPLATES[python] = pylib
    return pylib


def _copy_pylib(workdir: Path, python: str) -> Path:
    """A world-readable, byte-compiled copy of nvdeploy (with its built-in data) for the fake tools of the test
    user.

    The checkout or the project's interpreter may sit below a private folder (``/root`` is 0700): the fake
    tools run as the unprivileged test user, so they import nvdeploy (and PyYAML where that interpreter lacks
    it) from this copy. Each cluster gets its own copy of :func:`_pylib_template` (its workdir is removed whole).
    """
    pylib = workdir / "pylib"
    shutil.copytree(_pylib_template(python), pylib)
    pylib.chmod(0o755)
    return pylib


def _fake_tool_installer() -> Any:
    try:
        from nvdeploy.sim import fake_tool
    except ModuleNotFoundError as exc:
        if exc.name in ("nvdeploy.sim", "nvdeploy.sim.fake_tool"):
            return None  # not written yet: bin folders stay empty
        raise
    return getattr(fake_tool, "install_fake_tools", None)


def _check_traversable(path: Path) -> None:
    for parent in [path, *path.parents]:
        if not parent.stat().st_mode & 0o001:
            raise HarnessError(f"{parent} is not searchable by other users (mode {parent.stat().st_mode & 0o777:o});"
                               " the fake nodes' login user could not reach its files: chmod o+x it or pass no workdir")


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
            _signal(left, signal.SIGCONT)
            _signal(left, signal.SIGKILL)
            left = _wait_gone(left, 5.0)
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
            (workdir / _MARKER).write_text("created by nvdeploy.testing.sshd\n")
        else:
            workdir = self._given_workdir
            workdir.mkdir(parents=True, exist_ok=True)
        if re.search(r'["\\\s#]', str(workdir)):
            raise HarnessError(f"workdir {workdir} must not contain spaces, quotes, backslashes or '#'")
        workdir.chmod(0o755)
        if os.geteuid() == 0:  # the login user is someone else and must reach the node folders and keys
            _check_traversable(workdir)
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
        installer = _fake_tool_installer() if self._install_tools else None
        python = _python_for(self._user) if installer is not None else sys.executable
        uid = gid = -1
        if os.geteuid() == 0:
            import pwd

            entry = pwd.getpwnam(self._user)
            uid, gid = entry.pw_uid, entry.pw_gid
        pylib = _copy_pylib(workdir, python) if installer is not None else None
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
            [sys.executable, "-I", "-S", str(Path(__file__).resolve()), "--watchdog", str(workdir)],
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
            _signal([pid for pid in self._listeners if pid_alive(pid)], signal.SIGKILL)
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
        wanted = {_hex_address(n.address, port): n for n in self._nodes}
        while True:
            listening = {local for local, state, _ in _tcp_sockets() if state == "0A"}
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
        key = _hex_address(node.address, node.port)
        inodes = {inode for local, state, inode in _tcp_sockets() if local == key and state != "0A"}
        if not inodes:
            return []
        listener = self._listeners[self._group_of[name]] if self._group_of[name] < len(self._listeners) else 0
        table = _proc_table()
        children = _children_map(table)
        roots = [pid for pid in children.get(listener, ()) if _socket_inodes(pid) & inodes]
        return roots + _descendants(roots, table)

    def freeze(self, name: str) -> list[int]:
        """SIGSTOP the sshd processes of every current session of ``name`` (TCP stays up, SSH goes silent)."""
        frozen: list[int] = []
        for _ in range(2):  # a session may fork between the scan and the signal
            found = [pid for pid in self.session_pids(name) if pid not in frozen and _comm(pid) == "sshd"]
            _signal(found, signal.SIGSTOP)
            frozen += found
        return frozen

    def thaw(self, name: str) -> list[int]:
        """SIGCONT every process of every current session of ``name``."""
        pids = self.session_pids(name)
        _signal(pids, signal.SIGCONT)
        return pids

    def kill_sessions(self, name: str) -> list[int]:
        """SIGKILL every current session of ``name`` (the sshd processes and the commands they run)."""
        pids = self.session_pids(name)
        _signal(pids, signal.SIGSTOP)
        pids += [pid for pid in _descendants(pids) if pid not in pids]
        _signal(pids, signal.SIGKILL)
        _signal(pids, signal.SIGCONT)
        return pids

    def log_text(self) -> str:
        """The sshd logs (LogLevel ERROR), for failure messages."""
        workdir = self._require_started()
        logs = sorted(workdir.glob("sshd-*/sshd.log"))
        return "".join(f"== {p.parent.name}\n{p.read_text(errors='replace')}" for p in logs)

    # -- inventory ---------------------------------------------------------------------------------------------

    def inventory_yaml(self, profile: str = "h100-sxm-8x", extra_host_vars: dict[str, dict] | None = None,
                       command_timeout: float | None = None) -> str:
        """YAML text of an nvdeploy inventory that reaches these nodes over SSH (every string double-quoted).

        ``command_timeout``: a group-wide collector timeout; the fake tools are Python processes, and dozens of
        them starting at once on a busy 2-core machine can need more than a real tool's default."""
        import yaml

        extra = dict(extra_host_vars or {})
        unknown = sorted(set(extra) - set(self._by_name))
        if unknown:
            raise KeyError(f"extra_host_vars names unknown node(s): {', '.join(unknown)}")
        hosts: dict[str, dict[str, Any]] = {}
        for node in self.nodes:
            hosts[node.name] = {"address": node.address, **extra.get(node.name, {})}
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
    yield from _descendants(listeners)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--watchdog":
        _watchdog_main(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "--reap":
        print(reap_workdir(Path(sys.argv[2])))
    else:
        print("usage: sshd.py --watchdog WORKDIR | --reap WORKDIR", file=sys.stderr)
        sys.exit(2)
