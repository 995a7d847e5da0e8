"""The dedicated login user of the SSH test harness when the tests run as root: ``nvdtest`` (login shell
``/bin/sh``, password field ``*`` so key logins work with ``UsePAM no``), created once under a file lock so
parallel test workers do not race ``useradd``."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from nvdeploy.testing.errors import HarnessError

TEST_USER = "nvdtest"
TEST_USER_HOME = Path("/var/lib/nvdtest")
_USER_LOCK = Path(tempfile.gettempdir()) / "nvdtest-user.lock"





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


