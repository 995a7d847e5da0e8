"""Where ``node-check`` keeps the state of its last checks on the node (the anti-flap counts of
:mod:`nvdeploy.slurm.confirm`), and the boot facts it is judged with.

The folder is the run lock's (``$NVDEPLOY_LOCK_DIR``; else ``/run/lock/nvdeploy`` or ``/var/lock/nvdeploy`` when
it is there for us or the base is ours; else ``$XDG_RUNTIME_DIR/nvdeploy``), chosen as the batch script chooses
it, and accepted only under the same rule as ``nvd_safe`` (transport/node_paths.py): every folder from ``/`` down
is a real folder owned by root or by us, writable by nobody else unless it is root's and sticky. In such a folder
no other user can plant a link or replace the file, so the state is read with O_NOFOLLOW and written to a fresh
mkstemp file renamed over the old one (atomic: a reader sees the old state or the new, never half).
Never /tmp itself: a folder anyone may write is refused (sticky /tmp passes the rule as a parent only).
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, Optional

STATE_NAME = "node-check.state.json"
_LOCK_NAME = "node-check.state.lock"
_MAX_BYTES = 64 * 1024


def unsafe_reason(path: str) -> Optional[str]:
    """None when ``path`` and every folder above it pass nvd_safe's rule; else why not."""
    if not path.startswith("/"):
        return f"{path} is not an absolute path"
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        return f"{path} goes through .."
    uid = os.geteuid()
    here = "/"
    for part in [""] + parts:
        here = os.path.join(here, part) if part else "/"
        try:
            st = os.lstat(here)
        except OSError as exc:
            return f"{here} cannot be checked ({exc.strerror})"
        if stat.S_ISLNK(st.st_mode):
            return f"{here} is a symbolic link"
        if not stat.S_ISDIR(st.st_mode):
            return f"{here} is not a folder"
        if st.st_uid not in (0, uid):
            return f"{here} is owned by another user (uid {st.st_uid})"
        if st.st_mode & 0o022 and not (st.st_uid == 0 and st.st_mode & stat.S_ISVTX):
            return f"{here} is writable by other users (mode {stat.filemode(st.st_mode)})"
    if path.rstrip("/") and os.lstat(path).st_mode & 0o022:
        # The state folder itself: a sticky world-writable folder (/tmp) lets others create names in it.
        return f"{path} is writable by other users (mode {stat.filemode(os.lstat(path).st_mode)})"
    return None


def state_dir(env: Optional[dict[str, str]] = None) -> tuple[Optional[Path], str]:
    """The folder for the state, made mode 700 where nvdeploy makes it; (None, why) when there is none safe."""
    from nvdeploy.transport.batch import LOCK_BASES, ROOT_LOCK_DIR
    from nvdeploy.transport.batch_runner import lock_folder

    env = dict(os.environ) if env is None else env
    # The run lock's own folder, by the batch's rule (root never uses one another user made).
    chosen, refused = lock_folder(LOCK_BASES, ROOT_LOCK_DIR, os.geteuid(), env)
    if refused is not None:
        return None, refused
    chosen = chosen.rstrip("/")
    if not chosen:
        return None, "no lock folder (/run/lock/nvdeploy, $XDG_RUNTIME_DIR) for the state"
    if not os.path.lexists(chosen):
        try:
            os.mkdir(chosen, 0o700)
        except OSError as exc:
            return None, f"cannot make {chosen}: {exc.strerror}"
    why = unsafe_reason(chosen)
    if why:
        return None, why
    return Path(chosen), ""


class StateFile:
    """The state file in a checked folder, held under an flock of its own (two checks that overlap, as Slurm's
    health check can, update it one after the other: neither loses the other's count)."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / STATE_NAME
        self._lock_fd: Optional[int] = None
        self._folder = folder

    def __enter__(self) -> StateFile:
        self._lock_fd = os.open(self._folder / _LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    def read(self) -> Optional[dict[str, Any]]:
        """The kept state; None when there is none, or it is not a plain file of JSON (then it starts again)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            data = os.read(fd, _MAX_BYTES + 1)
        finally:
            os.close(fd)
        if len(data) > _MAX_BYTES:
            return None
        try:
            value = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def write(self, state: dict[str, Any]) -> None:
        fd, tmp = tempfile.mkstemp(prefix=".node-check.state.", dir=self._folder)  # O_EXCL, mode 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(state, out, sort_keys=True)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)  # rename() replaces a link at that name, never follows it
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def uptime_s(path: str = "/proc/uptime") -> Optional[float]:
    try:
        return float(Path(path).read_text(encoding="ascii").split()[0])
    except (OSError, ValueError, IndexError):
        return None


def boot_id(path: str = "/proc/sys/kernel/random/boot_id") -> str:
    try:
        return Path(path).read_text(encoding="ascii").strip()
    except OSError:
        return ""
