"""Storage throughput output (pure): fio's JSON (``--output-format=json``), dd's summary line, and the framing of
nvdeploy's storage script (nvdeploy/collect/storage_commands.py), path by path. Never raises on odd input.

Throughput is in GB/s (10^9 bytes per second): fio's ``bw_bytes`` (bytes/s; fio before 3.x only has ``bw`` in KiB/s),
dd's bytes over its seconds.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Optional

_DD_RE = re.compile(r"^(\d+) bytes\b.*copied, ([0-9.]+(?:e[-+]?\d+)?) s\b", re.MULTILINE)
STATUSES = ("ok", "missing", "notdir", "nowrite", "timeout")


@dataclass(frozen=True)
class FioRun:
    """One fio run: the jobs' summed throughput per direction (GB/s, None when it did no such I/O)."""

    version: Optional[str]
    read_gbps: Optional[float]
    write_gbps: Optional[float]
    error: Optional[str] = None  # a job's non-zero ``error`` code, or why no JSON could be read


@dataclass(frozen=True)
class StepResult:
    """One direction on one path: which tool, its exit status, the figure or why there is none."""

    direction: str  # read | write
    rc: Optional[int]
    gbps: Optional[float]
    error: Optional[str] = None


@dataclass(frozen=True)
class PathResult:
    path: str
    status: str  # one of STATUSES, or "incomplete" when the path's section was cut off
    tool: Optional[str] = None  # fio | dd
    detail: str = ""  # mktemp's message (nowrite), the per-path limit (timeout)
    steps: tuple[StepResult, ...] = ()

    def step(self, direction: str) -> Optional[StepResult]:
        return next((s for s in self.steps if s.direction == direction), None)

    @property
    def read_only(self) -> bool:
        return self.status == "nowrite" and "read-only" in self.detail.lower()


@dataclass(frozen=True)
class StorageRun:
    paths: tuple[PathResult, ...]
    complete: bool  # the script's final ``@@done`` was seen

    def get(self, path: str) -> Optional[PathResult]:
        return next((p for p in self.paths if p.path == path), None)


def _gbps(section: Any, key: str) -> Optional[float]:
    if not isinstance(section, dict):
        return None
    value = section.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def parse_fio_json(text: str) -> FioRun:
    """fio's JSON document, wherever it starts (fio prints notes, and nvdeploy merges its stderr, before it)."""
    start = text.find("{")
    while start != -1:
        try:
            data, _end = json.JSONDecoder().raw_decode(text, start)
        except ValueError:
            start = text.find("{", start + 1)
            continue
        if isinstance(data, dict) and isinstance(data.get("jobs"), list):
            return _fio_document(data)
        start = text.find("{", start + 1)
    first = next((line.strip() for line in text.splitlines() if line.strip()), "no output")
    return FioRun(None, None, None, error=f"no fio JSON ({first[:200]})")


def _fio_document(data: dict[str, Any]) -> FioRun:
    totals: dict[str, Optional[float]] = {"read": None, "write": None}
    error = None
    for job in data["jobs"]:
        if not isinstance(job, dict):
            continue
        code = job.get("error")
        if isinstance(code, int) and code != 0 and error is None:
            error = f"fio job {job.get('jobname', '?')} error {code}"
        for direction in totals:
            section = job.get(direction)
            bw = _gbps(section, "bw_bytes")
            if bw is None:
                kib = _gbps(section, "bw")  # fio 2.x: KiB/s only
                bw = kib * 1024 if kib is not None else None
            io = _gbps(section, "io_bytes")
            if bw is None or (io is not None and io == 0 and bw == 0):
                continue
            totals[direction] = (totals[direction] or 0.0) + bw / 1e9
    version = data.get("fio version")
    return FioRun(version if isinstance(version, str) else None, totals["read"], totals["write"], error)


def parse_dd(text: str) -> Optional[float]:
    """GB/s from GNU dd's last ``N bytes (...) copied, S s, ...`` line (LC_ALL=C); None without one."""
    matches = list(_DD_RE.finditer(text))
    if not matches:
        return None
    size, seconds = int(matches[-1].group(1)), float(matches[-1].group(2))
    return size / seconds / 1e9 if seconds > 0 and size > 0 else None


def _step(tool: Optional[str], direction: str, body: str, rc: Optional[int]) -> StepResult:
    if tool == "fio":
        run = parse_fio_json(body)
        gbps = run.read_gbps if direction == "read" else run.write_gbps
        error = run.error or (None if gbps is not None else f"fio reported no {direction} throughput")
    else:
        gbps = parse_dd(body)
        lines = [line.strip() for line in body.splitlines() if line.strip()]
        error = None if gbps is not None else (lines[0][:200] if lines else "dd printed nothing")
    if rc not in (0, None) and error is None:
        error = f"exit {rc}"
    if error is not None and gbps is not None and rc not in (0, None):
        gbps = None  # a failed run's partial figure is not a measurement
    return StepResult(direction, rc, gbps if error is None else None, error)


def parse_storage(text: str) -> StorageRun:
    """The storage script's output, path by path (see nvdeploy/collect/storage_commands.py for the framing)."""
    paths: list[PathResult] = []
    current: Optional[dict[str, Any]] = None
    complete = False

    def close() -> None:
        if current is None:
            return
        if current["direction"] is not None:  # a step the timeout (or a cut) ended before its @@rc
            current["steps"].append(_step(current["tool"], current["direction"], "".join(current["body"]), None))
        paths.append(PathResult(current["path"], current["status"] or "incomplete", current["tool"],
                                current["detail"], tuple(current["steps"])))

    for line in text.splitlines(keepends=True):
        stripped = line.rstrip("\n")
        if stripped.startswith("@@nvd-storage "):
            close()
            current = {"path": stripped[len("@@nvd-storage "):], "tool": None, "status": None, "detail": "",
                       "steps": [], "direction": None, "body": []}
        elif current is None:
            if stripped == "@@done":
                complete = True
            continue
        elif stripped.startswith("@@tool "):
            current["tool"] = stripped[len("@@tool "):].strip()
        elif stripped.startswith("@@step "):
            current["direction"], current["body"] = stripped[len("@@step "):].strip(), []
        elif stripped.startswith("@@rc ") and current["direction"] is not None:
            word = stripped[len("@@rc "):].strip()
            rc = int(word) if word.isdigit() else None
            current["steps"].append(_step(current["tool"], current["direction"], "".join(current["body"]), rc))
            current["direction"], current["body"] = None, []
        elif stripped.startswith("@@status "):
            word, _, detail = stripped[len("@@status "):].partition(" ")
            current["status"], current["detail"] = (word if word in STATUSES else "incomplete"), detail.strip()
        elif stripped.startswith("@@end"):
            close()
            current = None
        elif stripped == "@@done":
            close()
            current = None
            complete = True
        elif current["direction"] is not None:
            current["body"].append(line)
    close()
    return StorageRun(tuple(paths), complete)
