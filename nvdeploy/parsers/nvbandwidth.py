"""NVIDIA nvbandwidth (github.com/NVIDIA/nvbandwidth): its ``-j`` JSON and its text output, pure.

JSON (v0.5+, json_output.cpp): ``{"nvbandwidth": {"version", "git_version", "CUDA Runtime Version", "Driver Version",
"GPU Device list": [...], "testcases": [{"name", "status": "Passed|Waived|Error|Not Found|Running", "error",
"bandwidth_description", "bandwidth_matrix": [["55.59", "N/A", ...], ...], "sum"}], "error", "warning"}}``: the
matrix cells are strings, a cell with no peer is ``"N/A"``.

Text (output.cpp, inline_common.h): ``Running <name>.``, the description line (``memcpy CE CPU(row) -> GPU(column)
bandwidth (GB/s)``), a header of column indices, one row per source (row label, then a cell per column, ``N/A``
where none), a blank line, ``SUM <name> <value>``; v0.10 adds ``COEFFICIENT_OF_VARIATION <name> <value>``. A test
that cannot run on the system prints ``Waived:`` (without its name), an error ``Error: <message>``. Real captures:
tests/fixtures/real/nvbandwidth (PROVENANCE.tsv).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any, Optional

_RUNNING = re.compile(r"^Running (\S+?)\.?\s*$")
_SUM = re.compile(r"^SUM (\S+) (\S+)\s*$")
_CELL = re.compile(r"^(?:N/A|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)$")
_VERSION = re.compile(r"^nvbandwidth Version: (\S+)")
_DRIVER = re.compile(r"^Driver Version: (\S+)")
# How nvbandwidth stops on a failed CUDA call or check (its CU_ASSERT/CUDA_ASSERT/ASSERT macros, one line each):
# "[CUDA_ERROR_NOT_PERMITTED] operation not permitted in expression ...", "[cudaErrorUnsupportedPtxVersion] ...",
# "ASSERT in expression h_errorFlag == 0 in ...". The run ends there: the testcase failed, it was not cut off.
_FATAL = re.compile(r"^(?:\[(?:CUDA_ERROR_\w+|cuda\w+)\]|ASSERT in expression\b)")
# A copy whose data did not verify prints this before its ASSERT line.
_PATTERN = re.compile(r"^Invalid value when checking the pattern\b")


@dataclass(frozen=True)
class NvbTestcase:
    """One testcase: ``matrix[row][column]`` in GB/s (None: N/A), rows the sources as nvbandwidth labels them."""

    name: str
    status: str  # Passed, Waived, Error, Not Found; text output: Passed when a matrix was printed
    description: str = ""
    matrix: tuple[tuple[Optional[float], ...], ...] = ()
    total: Optional[float] = None  # nvbandwidth's SUM
    error: str = ""


@dataclass(frozen=True)
class NvbRun:
    form: str  # "json" or "text"
    version: Optional[str] = None
    driver_version: Optional[str] = None
    testcases: tuple[NvbTestcase, ...] = ()
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def testcase(self, name: str) -> Optional[NvbTestcase]:
        for case in self.testcases:
            if case.name == name:
                return case
        return None


def _number(cell: Any) -> Optional[float]:
    try:
        return float(cell)
    except (TypeError, ValueError):
        return None


def _json(data: Any) -> Optional[NvbRun]:
    root = data.get("nvbandwidth") if isinstance(data, dict) else None
    if not isinstance(root, dict):
        return None
    cases = []
    for raw in root.get("testcases") or []:
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            continue
        rows = raw.get("bandwidth_matrix") or []
        matrix = tuple(tuple(_number(c) for c in row) for row in rows if isinstance(row, list))
        cases.append(NvbTestcase(raw["name"], str(raw.get("status", "")), str(raw.get("bandwidth_description", "")),
                                 matrix, _number(raw.get("sum")), str(raw.get("error", ""))))
    version = root.get("version")
    driver = root.get("Driver Version")
    return NvbRun("json", str(version) if version is not None else None, str(driver) if driver is not None else None,
                  tuple(cases), str(root.get("error", "")))


def _text(text: str) -> Optional[NvbRun]:
    version = driver = None
    cases: list[NvbTestcase] = []
    name: Optional[str] = None
    description = ""
    rows: list[tuple[Optional[float], ...]] = []
    columns: Optional[int] = None
    error = ""
    pattern = ""

    def close(status: str = "Passed", message: str = "", total: Optional[float] = None) -> None:
        nonlocal name, description, rows, columns, pattern
        if name is not None:
            cases.append(NvbTestcase(name, status if rows or status != "Passed" else "Error", description,
                                     tuple(rows), total, message or ("" if rows else "no bandwidth matrix")))
        name, description, rows, columns, pattern = None, "", [], None, ""

    for raw in text.splitlines():
        line = raw.strip()
        if version is None and _VERSION.match(line):
            version = _VERSION.match(line).group(1)  # type: ignore[union-attr]
            continue
        if driver is None and _DRIVER.match(line):
            driver = _DRIVER.match(line).group(1)  # type: ignore[union-attr]
            continue
        running = _RUNNING.match(line)
        if running:
            close()
            name = running.group(1)
            continue
        if name is None:
            if (line.startswith("ERROR") or _FATAL.match(line)) and not error:
                error = line
            continue
        if _PATTERN.match(line):
            pattern = pattern or line
            continue
        if _FATAL.match(line):
            close("Error", pattern or line)
            continue
        total = _SUM.match(line)
        if total and total.group(1) == name:
            close(total=_number(total.group(2)))
            continue
        if line.startswith("Error:") or line.startswith("ERROR"):
            close("Error", line.partition(":")[2].strip() or line)
            continue
        if not line:
            continue
        if "bandwidth" in line and "(GB/s)" in line and not description:
            description = line
            continue
        words = line.split()
        if not description or not all(_CELL.match(w) for w in words):
            continue
        if columns is None:
            if all(w.isdigit() for w in words):
                columns = len(words)  # the header of column indices
            continue
        if len(words) == columns + 1:
            rows.append(tuple(_number(w) for w in words[1:]))
    if name is not None:
        close("Error", pattern or "output ends before the testcase's SUM line (cut off)")
    if version is None and not cases:
        return None
    return NvbRun("text", version, driver, tuple(cases), error)


def parse_nvbandwidth(text: str) -> Optional[NvbRun]:
    """The run nvbandwidth printed (``-j`` JSON or text), or None when the text is neither."""
    stripped = text.strip()
    start = stripped.find("{")
    if start >= 0 and '"nvbandwidth"' in stripped:
        try:
            parsed = _json(json.loads(stripped[start:stripped.rfind("}") + 1]))
        except ValueError:
            parsed = None
        if parsed is not None:
            return parsed
    return _text(text)
