"""Parse ``nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv[,noheader][,nounits]``.

One line per compute process (a process on several GPUs is listed once per GPU):
``41230, /usr/bin/python3, 30512 MiB``. An idle node prints nothing (older drivers: ``No running processes found``).
``used_memory`` may read ``[N/A]`` (no permission to read another user's process, or under MIG) or
``[Insufficient Permissions]``: the process still counts, its memory is unknown (None). A process name may
contain ", " (a path with commas): the pid is the first field and the memory the last, the name is what is between.
A line that does not start with a pid is kept as a warning, never dropped silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from nvdeploy.parsers.text import prepare

_HEADER_RE = re.compile(r"^\s*pid\s*,", re.IGNORECASE)
_IDLE_RE = re.compile(r"no running (?:compute )?processes found", re.IGNORECASE)
_MEMORY_RE = re.compile(r"^(\d+)(?:\s*MiB)?$", re.IGNORECASE)


@dataclass(frozen=True)
class ComputeProcess:
    pid: int
    name: str
    used_mib: Optional[int]

    def label(self) -> str:
        memory = f"{self.used_mib} MiB" if self.used_mib is not None else "memory unknown"
        return f"pid {self.pid} {self.name or '?'} ({memory})"


@dataclass(frozen=True)
class ComputeApps:
    processes: tuple[ComputeProcess, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def busy(self) -> bool:
        return bool(self.processes)

    def to_dict(self) -> dict[str, Any]:
        return {"processes": [{"pid": p.pid, "name": p.name, "used_mib": p.used_mib} for p in self.processes],
                "warnings": list(self.warnings)}


def parse_compute_apps(text: Any) -> ComputeApps:
    """Every compute process listed once; a process listed on several GPUs gets the sum of its memory."""
    clean, warnings = prepare(text)
    found: dict[tuple[int, str], ComputeProcess] = {}
    for number, raw in enumerate(clean.split("\n"), start=1):
        line = raw.strip()
        if not line or _HEADER_RE.match(line) or _IDLE_RE.search(line):
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 2 or not fields[0].isdigit():
            warnings.append(f"line {number} not understood: {line[:120]!r}")
            continue
        pid = int(fields[0])
        memory = _MEMORY_RE.match(fields[-1]) if len(fields) >= 3 else None
        name = ", ".join(fields[1:-1] if len(fields) >= 3 else fields[1:])
        process = ComputeProcess(pid, name, int(memory.group(1)) if memory else None)
        known = found.get((pid, name))
        if known is not None and known.used_mib is not None:
            process = ComputeProcess(pid, name, known.used_mib + (process.used_mib or 0))
        found[(pid, name)] = process
    return ComputeApps(tuple(found.values()), tuple(warnings))
