"""Parser for the text output of NVIDIA's ``nvloom_cli`` (github.com/NVIDIA/nvloom, an MPI program, one rank per
GPU across a multi-node NVLink domain).

No public capture of a real run was found, so this parser is built from the format strings of nvloom 1.3's
source (cli/nvloom_cli.cpp, cli/util.cpp, cli/util.h, cli/testcases.h at commit 2e7b742) and follows how the
project's own reader of that output, cli/plot_heatmaps.py, walks it:

- the header: ``nvloom_cli 1.3.0``, ``git commit: ...``, ``Driver version: ...`` and so on;
- one line per rank: ``Process <padded rank> (<hostname>): device <ordinal>: <name> (<dddddddd>:<bb>:<dd>);
  rackGuid: <guid>``;
- per testcase: ``Running <name>``, then either ``testcase WAIVED`` or a tab-separated matrix (a header row of
  column labels, rows ``<label>\\t<value or N/A>[;(<note>)]\\t...``, ``|`` between racks), a blank line,
  ``Min|Avg|Max|Total <name> <value or N/A> <unit>``, ``ExecutionTime <name> <seconds> s`` and ``Done <name>``;
- a failure: ``Error running testcase <name>: <what>`` (on stderr, then exit 1).

Pure: never raises; what it cannot read is left out and said in ``problems``.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

_PROCESS = re.compile(r"^Process\s+(\d+)\s+\((?P<host>[^)]*)\):\s+device\s+(?P<dev>-?\d+):\s+(?P<name>.*?)"
                      r"(?:\s+\((?P<pci>[0-9a-fA-F]{8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})\))?;\s+rackGuid:\s*(?P<rack>\S*)")
_STAT = re.compile(r"^(Min|Avg|Max|Total)\s+(\S+)\s+(\S+)\s+(\S+)\s*$")
_ERROR = re.compile(r"^Error running testcase (\S+): (.*)$")
_VERSION = re.compile(r"^nvloom_cli\s+(\S+)")


@dataclass(frozen=True)
class NvloomProcess:
    """One MPI rank: the host it ran on, the CUDA device ordinal, its name and PCI address, the rack GUID."""

    rank: int
    host: str
    device: int
    name: str
    pci: str
    rack_guid: str


@dataclass(frozen=True)
class NvloomCell:
    """One matrix cell: row and column labels, the value (None for ``N/A``: no measurement) and nvloom's note."""

    row: str
    column: str
    value: Optional[float]
    note: str = ""


@dataclass(frozen=True)
class NvloomTestcase:
    """One testcase's result: its cells, its summary figures (Min/Avg/Max/Total; None for N/A), unit, whether
    it was waived (requirements not met) and finished (its ``Done`` line)."""

    name: str
    cells: tuple[NvloomCell, ...] = ()
    stats: tuple[tuple[str, Optional[float]], ...] = ()
    unit: str = ""
    waived: bool = False
    done: bool = False
    seconds: Optional[float] = None

    def stat(self, which: str) -> Optional[float]:
        return dict(self.stats).get(which)


@dataclass(frozen=True)
class NvloomRun:
    version: str = ""
    processes: tuple[NvloomProcess, ...] = ()
    testcases: tuple[NvloomTestcase, ...] = ()
    # (testcase, message) from ``Error running testcase``.
    errors: tuple[tuple[str, str], ...] = ()
    problems: tuple[str, ...] = field(default=())

    @property
    def recognised(self) -> bool:
        return bool(self.version or self.processes or self.testcases or self.errors)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _number(text: str) -> Optional[float]:
    try:
        return float(text)
    except ValueError:
        return None


def parse_nvloom(text: str) -> NvloomRun:
    """Read nvloom_cli's combined stdout and stderr."""
    version = ""
    processes: list[NvloomProcess] = []
    testcases: list[NvloomTestcase] = []
    errors: list[tuple[str, str]] = []
    problems: list[str] = []
    current: Optional[dict] = None

    def close() -> None:
        nonlocal current
        if current is not None:
            testcases.append(NvloomTestcase(current["name"], tuple(current["cells"]), tuple(current["stats"]),
                                            current["unit"], current["waived"], current["done"], current["seconds"]))
        current = None

    for raw in (text or "").splitlines():
        line = raw.rstrip("\r")
        stripped = line.strip()
        if not stripped:
            continue
        m = _VERSION.match(stripped)
        if m and not version:
            version = m.group(1)
            continue
        m = _PROCESS.match(stripped)
        if m:
            processes.append(NvloomProcess(int(m.group(1)), m.group("host"), int(m.group("dev")),
                                           m.group("name").strip(), (m.group("pci") or "").lower(),
                                           m.group("rack")))
            continue
        m = _ERROR.match(stripped)
        if m:
            errors.append((m.group(1), m.group(2).strip()))
            continue
        words = stripped.split()
        if words[0] == "Running" and len(words) == 2:
            close()
            current = {"name": words[1], "cells": [], "stats": [], "unit": "", "waived": False, "done": False,
                       "seconds": None, "columns": None}
            continue
        if current is None:
            continue
        if stripped == "testcase WAIVED":
            current["waived"] = True
            continue
        m = _STAT.match(stripped)
        if m and m.group(2) == current["name"]:
            current["stats"].append((m.group(1), _number(m.group(3))))
            current["unit"] = m.group(4)
            continue
        if words[0] == "ExecutionTime" and len(words) >= 3 and words[1] == current["name"]:
            current["seconds"] = _number(words[2])
            continue
        if words[0] == "Done" and len(words) == 2 and words[1] == current["name"]:
            current["done"] = True
            close()
            continue
        if current["stats"]:
            continue  # nothing of the matrix after its summary
        cells = [w for w in line.split("\t") if w.strip() and w.strip() != "|"]
        if current["columns"] is None:
            # The header row starts with a tab: column labels only.
            current["columns"] = [c.strip() for c in cells]
            continue
        if not cells:
            continue
        row, values = cells[0].strip(), cells[1:]
        if len(values) > len(current["columns"]):
            problems.append(f"{current['name']}: row {row} has more values than columns")
            continue
        for column, word in zip(current["columns"], values):
            value, _, note = word.strip().partition(";")
            number = None if value == "N/A" else _number(value)
            if number is None and value != "N/A":
                problems.append(f"{current['name']}: unreadable value {value!r} in row {row}")
                continue
            current["cells"].append(NvloomCell(row, column, number, note.strip().strip("()")))
    close()
    return NvloomRun(version, tuple(processes), tuple(testcases), tuple(errors), tuple(problems))
