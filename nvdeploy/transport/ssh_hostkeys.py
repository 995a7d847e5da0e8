"""The SSH host keys a connection trusts: the fleet's known_hosts files (the user's, ``ssh_known_hosts`` from the
inventory, /etc/ssh/ssh_known_hosts), read once per file and reread when it changes, hashed entries matched, and the
accept-new policy of ``--accept-new-host-keys`` that records an unknown key (never a changed one) under a lock, so
parallel connects append each key once.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path
from typing import Optional

import paramiko

KNOWN_HOSTS_LOCK = threading.Lock()
GLOBAL_KNOWN_HOSTS = Path("/etc/ssh/ssh_known_hosts")


def user_known_hosts(configured: Optional[Path]) -> Path:
    """The known_hosts file a connection checks and learns into: the inventory's, else OpenSSH's own default."""
    return configured if configured is not None else Path(os.path.expanduser("~/.ssh/known_hosts"))


class KnownHostsWriteError(Exception):
    """A learned host key could not be recorded on disk (so it is not accepted either)."""


class KnownHostsFiles:
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
        """Call with KNOWN_HOSTS_LOCK held."""
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
        with KNOWN_HOSTS_LOCK:
            keys._entries = list(self._entries(path))  # noqa: SLF001 - HostKeys.add per entry is quadratic
        return keys

    def learn(self, path: Path, hostname: str, key: paramiko.PKey) -> None:
        """Append ``hostname``'s new key to ``path`` (OpenSSH's plain format), once, whichever thread comes first.

        ``hostname`` is paramiko's lookup name: ``host`` on port 22, ``[host]:port`` otherwise, as OpenSSH writes.
        Another thread (or a jump host shared by many nodes) may have learned the host meanwhile: the same key is
        not written twice, and a different key for it is refused as a changed key.
        """
        with KNOWN_HOSTS_LOCK:
            try:
                entries = self._entries(path)
            except OSError as exc:
                raise KnownHostsWriteError(f"cannot read {path}: {exc.strerror or exc}") from None
            for entry in entries:
                if hostname in entry.hostnames or _hashed_match(entry.hostnames, hostname):
                    if entry.key.get_name() == key.get_name():
                        if entry.key == key:
                            return
                        raise paramiko.BadHostKeyException(hostname, key, entry.key)
            try:
                _append_line(path, f"{hostname} {key.get_name()} {key.get_base64()}\n")
            except OSError as exc:
                raise KnownHostsWriteError(f"cannot write {path}: {exc.strerror or exc}") from None
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


KNOWN_HOSTS = KnownHostsFiles()


class AcceptNewPolicy(paramiko.MissingHostKeyPolicy):
    """OpenSSH's ``StrictHostKeyChecking=accept-new``: learn unknown keys, never accept a changed one.

    A learned key is written to the known_hosts file before it is trusted, never kept only in memory: otherwise
    every later run would trust whatever key it first meets again.
    """

    def __init__(self, known_hosts: Path) -> None:
        self.known_hosts = known_hosts

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        KNOWN_HOSTS.learn(self.known_hosts, hostname, key)
        client.get_host_keys().add(hostname, key.get_name(), key)


