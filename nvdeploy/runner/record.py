"""The run folder: evidence files, the streamed journal (results.jsonl) and the final outputs.

Files are private (0600, folders 0700): they hold fleet data. The journal is one JSON object per line, written
and flushed as each node finishes, so a crash or Ctrl-C loses nothing gathered. Final files are written to a
temporary name and renamed, so a half-written file is never presented as complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence, Union, overload

from nvdeploy.files import OutputError
from nvdeploy.results import CommandResult, EvidenceRecord, NodeBrief, NodeResult

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe_name(name: str) -> str:
    """A file name for a node that stays inside its folder whatever the node is called."""
    cleaned = _UNSAFE.sub("_", name)[:80].strip(".") or "node"
    if cleaned != name:
        cleaned += "-" + hashlib.sha256(name.encode()).hexdigest()[:8]
    return cleaned


def _private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)


def write_evidence_file(path: Path, data: bytes) -> None:
    """One evidence file, written in place (no temporary name and rename: half the syscalls of write_atomic).

    A torn file is harmless: the journal line naming it is written after it, and a node without a journal line
    is run again by ``--resume``, which rewrites its evidence.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None


class RunRecorder:
    """Owns one run folder ``<base>/<cluster>/<run-id>/``."""

    def __init__(self, run_dir: Path, append: bool = False) -> None:
        self.run_dir = run_dir
        self._lock = threading.Lock()
        try:
            _private_dir(run_dir)
            _private_dir(run_dir / "evidence")
            flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
            self._journal = os.fdopen(os.open(run_dir / "results.jsonl", flags, 0o600), "a", encoding="utf-8")
        except OSError as exc:
            raise OutputError(f"cannot create the run folder {run_dir}: {exc.strerror or exc}") from None

    def _inside(self, path: Path) -> Path:
        # Lexical, not resolve(): a realpath per node is a syscall per path component (a fleet run does 10,000).
        # safe_name() leaves no separator and no "."/".." name, and the run folder is private (0700).
        if path.parent != self.run_dir / "evidence" or path.name in ("", ".", "..") or os.sep in path.name:
            raise OutputError(f"refusing to write outside the run folder: {path}")
        return path

    def write_evidence(self, node: str, results: Sequence[CommandResult]) -> list[EvidenceRecord]:
        """Write each command's raw bytes to ``evidence/<node>/<collector>.out`` (``.err`` when non-empty)."""
        folder = self._inside(self.run_dir / "evidence" / safe_name(node))
        records = []
        try:
            _private_dir(folder)
        except OSError as exc:
            raise OutputError(f"cannot create {folder}: {exc.strerror or exc}") from None
        for result in results:
            base = safe_name(result.name)
            out_path = folder / f"{base}.out"
            write_evidence_file(out_path, result.stdout)
            if result.stderr:
                write_evidence_file(folder / f"{base}.err", result.stderr)
            records.append(EvidenceRecord(
                # Interned: every node's record of a command has the same command line, and identical outputs
                # the same digest; a fleet run keeps these records until its reports are written.
                collector=sys.intern(result.name), command=sys.intern(result.command),
                path=str(out_path.relative_to(self.run_dir)), rc=result.rc,
                bytes_total=result.stdout_total or len(result.stdout), truncated=result.truncated,
                sha256=sys.intern(hashlib.sha256(result.stdout).hexdigest()), duration_s=round(result.duration_s, 3),
                error=(result.error.value + (f": {result.error_detail}" if result.error_detail else ""))
                if result.error else None))
        return records

    def journal(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":"), default=str) + "\n"
        with self._lock:
            try:
                self._journal.write(line)
                self._journal.flush()
            except OSError as exc:
                raise OutputError(f"cannot append to {self.run_dir / 'results.jsonl'}: {exc.strerror or exc}") from None

    def node_done(self, node: NodeResult) -> None:
        self.journal({"type": "node", "node": node.to_dict()})

    def close(self) -> None:
        with self._lock:
            try:
                self._journal.close()
            except OSError:
                pass


class NodeSpool:
    """Finished nodes kept on disk while a run goes on, so a 10,000-node run does not hold every node's findings,
    evidence records and facts until its reports are written; only a :class:`NodeBrief` per node stays in memory.

    The spool is an anonymous file (unlinked at once, in the run folder: on the run's disk, nothing left behind
    even after a crash) of pickled :class:`NodeResult`s: read back exactly as they were, tuples and enums included,
    which the JSON journal cannot promise (the reports must not change with where a node was kept). Adding a node
    under a name already there replaces it (a cluster stage's updated node).
    """

    def __init__(self, folder: Path, brief: Callable[[NodeResult], NodeBrief] = NodeBrief.of) -> None:
        self._brief = brief
        self._lock = threading.Lock()
        self._end = 0
        # name -> (offset, length, brief); a length of -1: kept in ``_held`` (a node pickle could not write).
        self._where: dict[str, tuple[int, int, NodeBrief]] = {}
        self._held: dict[str, NodeResult] = {}
        self._shared: dict[Any, Any] = {}
        try:
            self._file = tempfile.TemporaryFile(dir=folder, prefix=".nodes-")
        except OSError as exc:
            raise OutputError(f"cannot create a spool file in {folder}: {exc.strerror or exc}") from None

    def _share(self, value: Any) -> Any:
        """An equal value already kept, if any (healthy nodes have equal check lists and facts)."""
        try:
            key = (type(value), tuple(value.items()) if isinstance(value, dict) else value)
            return self._shared.setdefault(key, value)
        except TypeError:  # an unhashable fact value: kept as is
            return value

    def add(self, node: NodeResult) -> None:
        brief = self._brief(node)
        brief = brief._replace(checks=self._share(brief.checks), facts=self._share(brief.facts),
                               kept=self._share(brief.kept), profile=sys.intern(brief.profile))
        try:
            data = pickle.dumps(node, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError):
            with self._lock:  # a value pickle cannot write (never seen): that node stays in memory
                self._held[node.name] = node
                self._where[node.name] = (0, -1, brief)
            return
        with self._lock:
            offset = self._end
            try:
                os.pwrite(self._file.fileno(), data, offset)
            except OSError as exc:
                raise OutputError(f"cannot spool node results: {exc.strerror or exc}") from None
            self._end += len(data)
            self._held.pop(node.name, None)
            self._where[node.name] = (offset, len(data), brief)

    def __contains__(self, name: object) -> bool:
        return name in self._where

    def names(self) -> list[str]:
        return list(self._where)

    def brief(self, name: str) -> NodeBrief:
        return self._where[name][2]

    def get(self, name: str) -> NodeResult:
        offset, length, _brief = self._where[name]
        return self._read(name, offset, length)

    def _read(self, name: str, offset: int, length: int) -> NodeResult:
        if length < 0:
            return self._held[name]
        data = os.pread(self._file.fileno(), length, offset)
        if len(data) != length:
            raise OutputError(f"node spool read short for {name}")
        node = pickle.loads(data)  # noqa: S301 - our own private, unlinked file, written by this process
        assert isinstance(node, NodeResult)
        return node

    def nodes(self, order: Sequence[str] = ()) -> SpooledNodes:
        """The nodes named in ``order`` (those the spool has), then the others in the order they were added."""
        wanted = [name for name in order if name in self._where]
        listed = set(wanted)
        wanted += [name for name in self._where if name not in listed]
        return SpooledNodes(self, [(name, *self._where[name]) for name in wanted])


class SpooledNodes(Sequence[NodeResult]):
    """A run's nodes, read back from the spool one at a time: iterate it (each node is read when reached and
    dropped after), do not build lists of it. ``briefs`` are the per-node summaries kept in memory."""

    def __init__(self, spool: NodeSpool, entries: list[tuple[str, int, int, NodeBrief]]) -> None:
        self._spool = spool
        self._entries = entries
        self.briefs: list[NodeBrief] = [entry[3] for entry in entries]

    def __len__(self) -> int:
        return len(self._entries)

    @overload
    def __getitem__(self, index: int) -> NodeResult: ...

    @overload
    def __getitem__(self, index: slice) -> list[NodeResult]: ...

    def __getitem__(self, index: Union[int, slice]) -> Union[NodeResult, list[NodeResult]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        name, offset, length, _brief = self._entries[index]
        return self._spool._read(name, offset, length)

    def __iter__(self) -> Iterator[NodeResult]:
        for name, offset, length, _brief in self._entries:
            yield self._spool._read(name, offset, length)

    def __repr__(self) -> str:
        return f"SpooledNodes({len(self)} nodes)"


def read_journal(path: Path) -> tuple[Optional[dict[str, Any]], list[NodeResult], list[str]]:
    """(run header, finished nodes, warnings) from a results.jsonl, tolerating a torn last line."""
    header: Optional[dict[str, Any]] = None
    nodes: dict[str, NodeResult] = {}
    warnings: list[str] = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                warnings.append(f"{path}:{number}: unreadable journal line skipped (torn write?)")
                continue
            if record.get("type") == "run":
                header = record
            elif record.get("type") == "node":
                node = NodeResult.from_dict(record["node"])
                nodes[node.name] = node
    return header, list(nodes.values()), warnings


def iter_files(root: Path) -> Iterable[Path]:
    return (p for p in root.rglob("*") if p.is_file())
