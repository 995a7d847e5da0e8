"""The /proc side of the SSH test harness (Linux only, standard library only): the process table, descendants,
the per-connection sessions found through ``/proc/net/tcp`` inodes, and ``reap_workdir``, which kills everything a
cluster started from its files alone (PidFiles, the scenario list), never by process name.

Also the watchdog's script: ``python -I -S procs.py --watchdog WORKDIR`` (an isolated interpreter, so it imports
nothing of nvdeploy) waits for the test process to go away and then reaps; ``--reap WORKDIR`` reaps at once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import struct
import sys
import time
from collections.abc import Iterable
from pathlib import Path

CLUSTER_MARKER = ".nvd-sshd-cluster"


def proc_table() -> dict[int, tuple[int, str]]:
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


def comm(pid: int) -> str:
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


def children_map(table: dict[int, tuple[int, str]]) -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    return children


def descendants(roots: Iterable[int], table: dict[int, tuple[int, str]] | None = None) -> list[int]:
    """The roots' descendants (not the roots), parents before children."""
    children = children_map(table if table is not None else proc_table())
    out: list[int] = []
    todo = list(roots)
    while todo:
        pid = todo.pop(0)
        for child in children.get(pid, ()):
            out.append(child)
            todo.append(child)
    return out


def send_signal(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def hex_address(address: str, port: int) -> str:
    return f"{struct.unpack('=I', socket.inet_aton(address))[0]:08X}:{port:04X}"


def tcp_sockets() -> list[tuple[str, str, int]]:
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


def socket_inodes(pid: int) -> set[int]:
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


def wait_gone(pids: Iterable[int], timeout: float) -> list[int]:
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
    send_signal(listeners, signal.SIGSTOP)
    victims: set[int] = set()
    for _ in range(2):
        table = proc_table()
        found = [pid for pid in descendants(listeners, table) if pid not in victims]
        send_signal(found, signal.SIGSTOP)
        send_signal(found, signal.SIGKILL)
        victims.update(found)
    send_signal(listeners, signal.SIGKILL)
    victims.update(listeners)
    if needles:
        me = os.getpid()
        strays = [pid for pid in proc_table() if pid != me and pid not in victims and _environ_has(pid, needles)]
        send_signal(strays, signal.SIGKILL)
        victims.update(strays)
    left = wait_gone(victims, 5.0)
    if remove is None:
        remove = (workdir / CLUSTER_MARKER).exists()
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




if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--watchdog":
        _watchdog_main(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "--reap":
        print(reap_workdir(Path(sys.argv[2])))
    else:
        print("usage: procs.py --watchdog WORKDIR | --reap WORKDIR", file=sys.stderr)
        sys.exit(2)
