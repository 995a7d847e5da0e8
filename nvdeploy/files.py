"""Private files written whole: a file appears complete or not at all, readable by its owner only (0600).

The run folder, the reports, the install plan and the Slurm scheduler journal are written this way; a failure is
an :class:`OutputError` naming the file, which the CLI turns into exit 2.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import BinaryIO, Iterator


class OutputError(Exception):
    """A file or folder of the run cannot be written (permissions, disk full). The CLI exits 2 with this message."""


def write_atomic(path: Path, data: bytes, durable: bool = True) -> None:
    with atomic_file(path, durable) as handle:
        handle.write(data)


@contextlib.contextmanager
def atomic_file(path: Path, durable: bool = True, mode: int = 0o600) -> Iterator[BinaryIO]:
    """A file written through a handle (streamed, never held whole in memory), then fsynced (unless not
    ``durable``) and renamed into place: it appears complete or not at all. ``mode``: its permissions, whatever
    the umask (0o644 for a file another user's daemon reads)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb", buffering=1 << 20) as handle:
            yield handle
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        if mode != 0o600:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
