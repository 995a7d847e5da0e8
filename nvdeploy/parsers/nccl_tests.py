"""Parse nccl-tests output (``all_reduce_perf``, ``all_gather_perf``, ``alltoall_perf``...).

Handles the three header generations (``size count type redop time ... error``, with ``root``, and ``#wrong``),
mpirun ``--tag-output`` prefixes (``[1,0]<stdout>:``), ``srun -l`` prefixes (`` 0: ``), NCCL INFO/WARN lines
interleaved with the table, ``N/A`` in ``#wrong``, a blank redop column (alltoall), values so wide that they eat
the column gap, and failures ("Test NCCL failure", "Test CUDA failure", MPI aborts) in place of the table.
Never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from nvdeploy.parsers.text import prepare as _prepare


@dataclass(frozen=True)
class NcclRow:
    """One size row. ``*_oop`` is out-of-place, ``*_ip`` in-place; bandwidths in GB/s; ``wrong_*`` is the
    ``#wrong`` / ``error`` column (None for ``N/A``, i.e. run without validation). ``redop`` None when blank."""

    size_bytes: int
    count: int
    type: str
    redop: str | None = None
    algbw_oop: float | None = None
    busbw_oop: float | None = None
    wrong_oop: int | None = None
    algbw_ip: float | None = None
    busbw_ip: float | None = None
    wrong_ip: int | None = None
    root: int | None = None
    time_us_oop: float | None = None
    time_us_ip: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class NcclFacts:
    """``nranks`` from the ``#  Rank N`` device lines (else NCCL's ``nranks N``). ``validation`` from the header
    (``validation: 1`` / ``check: 1``) or the command line (``-c 1``). ``max_busbw``: the largest busbw of any
    row, in- or out-of-place. ``wrong_total``: sum of the known ``#wrong`` values. ``out_of_bounds``: the
    number in "Out of bounds values : N OK|FAILED". ``complete``: at least one row and the "Avg bus bandwidth"
    line. ``fragment``: result rows without the table's column header, i.e. rows pasted out of a log: the run's
    other sizes, its ranks and its summary are not in the input."""

    collective: str | None = None
    nccl_version: str | None = None
    nranks: int | None = None
    validation: bool | None = None
    rows: tuple[NcclRow, ...] = ()
    avg_busbw: float | None = None
    max_busbw: float | None = None
    wrong_total: int = 0
    out_of_bounds: int | None = None
    errors: tuple[str, ...] = ()
    complete: bool = False
    warnings: tuple[str, ...] = ()
    fragment: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"collective": self.collective, "nccl_version": self.nccl_version, "nranks": self.nranks,
                "validation": self.validation, "rows": [r.to_dict() for r in self.rows], "avg_busbw": self.avg_busbw,
                "max_busbw": self.max_busbw, "wrong_total": self.wrong_total, "out_of_bounds": self.out_of_bounds,
                "errors": list(self.errors), "complete": self.complete, "warnings": list(self.warnings),
                "fragment": self.fragment}


_MPI_PREFIX_RE = re.compile(r"^\[\d+,\d+\]<(?:stdout|stderr)>:\s?")
_SRUN_PREFIX_RE = re.compile(r"^\s*\d+:\s(?=\s*[#\d]|\s*$|.*(?:NCCL|Test|failure|error))", re.IGNORECASE)
_ROW_RE = re.compile(r"^\s*(\d{1,20})\s+(\d{1,20})\s+([A-Za-z][A-Za-z0-9_]*)\s+(.*?)\s*$")
_NUMBER_RE = re.compile(r"^-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$")
_MERGED_RE = re.compile(r"-?\d+\.\d{1,2}")
_AVG_RE = re.compile(r"Avg bus bandwidth\s*:\s*(\S+)", re.IGNORECASE)
_OOB_RE = re.compile(r"Out of bounds values\s*:\s*(\d{1,18})", re.IGNORECASE)
_HEADER_RE = re.compile(r"^#\s*(?:size\s+count\b|nThread\b|\(B\)\s+\(elements\))")
_RANK_RE = re.compile(r"^#\s*Rank\s+(\d{1,9})\b")
_NRANKS_RE = re.compile(r"\bnranks\s+(\d{1,9})\b")
_VERSION_RE = re.compile(r"\bNCCL version\s+(\S+)")
_LIBRARY_RE = re.compile(r"\bnccl-library=(\d{4,6})\b")
_VALIDATION_RE = re.compile(r"\b(?:validation|check)\s*:\s*(\d+)", re.IGNORECASE)
_CLI_CHECK_RE = re.compile(r"_perf(?:_mpi)?\b.*?\s(?:-c|--check)[\s=]+(\d+)")
_TESTS = r"(all_reduce|all_gather|alltoall|broadcast|reduce_scatter|reduce|sendrecv|scatter|gather|hypercube)"
_COLLECTIVE_RE = re.compile(r"Collective test starting\s*:\s*(\S+)|\b(" + _TESTS + r"_perf(?:_mpi)?)\b")
_SOURCE_RE = re.compile(r"\b" + _TESTS + r"\.cu:\d+")
_ERROR_RES = (
    re.compile(r"Test (?:NCCL|CUDA) failure|NCCL WARN|system not yet initialized", re.IGNORECASE),
    re.compile(r"MPI_ABORT|mpirun noticed|MPI_ERR|PMIX ERROR|ORTE_ERROR|prterun noticed|srun: error|"
               r"process rank \d+ .*exited on signal|Primary job\s+terminated|Segmentation fault|core dumped",
               re.IGNORECASE),
)
_BACKTRACE_RE = re.compile(r"Test failure \S+\.cu:\d+")
_MAX_WARNINGS = 20




def _strip_prefix(line: str) -> str:
    line = _MPI_PREFIX_RE.sub("", line, count=1)
    return _SRUN_PREFIX_RE.sub("", line, count=1)


def _version(match: re.Match[str]) -> str:
    """``NCCL version 2.16.2+cuda11.6`` as printed, or nccl-tests' ``nccl-library=22304`` code as ``2.23.4``."""
    if match.re is _VERSION_RE:
        return match.group(1)
    code = int(match.group(1))
    major, minor, patch = (code // 10000, code // 100 % 100, code % 100) if code >= 20900 else (
        code // 1000, code // 100 % 10, code % 100)
    return f"{major}.{minor}.{patch}"


def _float(token: str | None) -> float | None:
    if token is None or not _NUMBER_RE.match(token):
        return None
    return float(token)


def _wrong(token: str | None) -> int | None:
    value = _float(token)
    return int(value) if value is not None and abs(value) < 1e18 else None


def _split_numbers(tokens: list[str]) -> list[str] | None:
    """Split tokens where two numbers ran together (``1675104.2526.00``); None if something is not a number."""
    out: list[str] = []
    for token in tokens:
        if _NUMBER_RE.match(token) or token.upper() == "N/A":
            out.append(token)
            continue
        parts = _MERGED_RE.findall(token)
        if not parts or "".join(parts) != token:
            return None
        out.extend(parts)
    return out


def _row(match: re.Match[str]) -> NcclRow | None:
    rest = match.group(4).split()
    head: list[str] = []
    while rest and not _NUMBER_RE.match(rest[0]) and rest[0].upper() != "N/A":
        head.append(rest.pop(0))  # redop (none when blank, alltoall on old nccl-tests)
    tail = _split_numbers(rest)
    if tail is None or len(head) > 1:
        return None
    # After redop: [root] then time algbw busbw wrong, out-of-place and in-place (root only in newer headers).
    root = _wrong(tail.pop(0)) if len(tail) == 9 else None
    if len(tail) != 8:
        return None
    return NcclRow(int(match.group(1)), int(match.group(2)), match.group(3), head[0] if head else None,
                   _float(tail[1]), _float(tail[2]), _wrong(tail[3]), _float(tail[5]), _float(tail[6]),
                   _wrong(tail[7]), root, _float(tail[0]), _float(tail[4]))


def parse_nccl_tests(text: str) -> NcclFacts:
    """Read the result table, summary and failures of one nccl-tests run. Never raises."""
    text, warnings = _prepare(text)
    if not text.strip():
        return NcclFacts(warnings=(*warnings, "empty input"))
    collective = version = None
    validation: bool | None = None
    ranks: set[int] = set()
    nranks_info: int | None = None
    rows: list[NcclRow] = []
    avg: float | None = None
    oob: int | None = None
    errors: list[str] = []
    backtrace: list[str] = []
    source_guess: str | None = None
    headed = False
    for raw in text.split("\n"):
        line = _strip_prefix(raw).rstrip()
        stripped = line.strip()
        if not stripped:
            continue
        if collective is None:
            named = _COLLECTIVE_RE.search(stripped)
            if named:
                collective = named.group(1) or named.group(2)
        if source_guess is None:
            source = _SOURCE_RE.search(stripped)
            source_guess = f"{source.group(1)}_perf" if source else None
        if version is None:
            found = _VERSION_RE.search(stripped) or _LIBRARY_RE.search(stripped)
            version = _version(found) if found else None
        if stripped.startswith("#"):
            rank = _RANK_RE.match(stripped)
            if rank:
                ranks.add(int(rank.group(1)))
            valid = _VALIDATION_RE.search(stripped)
            if valid and validation is None:
                validation = valid.group(1) != "0"
            avg_match = _AVG_RE.search(stripped)
            if avg_match:
                avg = _float(avg_match.group(1))
                if avg is None:
                    warnings.append(f"average bus bandwidth not understood: {stripped[:200]!r}")
            oob_match = _OOB_RE.search(stripped)
            if oob_match:
                oob = int(oob_match.group(1))
            headed = headed or _HEADER_RE.match(stripped) is not None
            continue
        nranks = _NRANKS_RE.search(stripped)
        if nranks and "NCCL INFO" in stripped:
            nranks_info = max(nranks_info or 0, int(nranks.group(1)))
        if validation is None:
            cli = _CLI_CHECK_RE.search(stripped)
            if cli:
                validation = cli.group(1) != "0"
        if _BACKTRACE_RE.search(stripped) and not _ERROR_RES[0].search(stripped):
            backtrace.append(stripped[:300])
            continue
        if any(pattern.search(stripped) for pattern in _ERROR_RES):
            errors.append(stripped[:300])
            continue
        row_match = _ROW_RE.match(line)
        if row_match and "NCCL" not in stripped:
            row = _row(row_match)
            if row is not None:
                rows.append(row)
            elif len(warnings) < _MAX_WARNINGS:
                warnings.append(f"table row not understood: {stripped[:200]!r}")
    if not errors:
        errors = backtrace
    if not rows and not errors:
        warnings.append("no nccl-tests result rows found")
    busbws = [bw for row in rows for bw in (row.busbw_oop, row.busbw_ip) if bw is not None]
    wrong_total = sum(w for row in rows for w in (row.wrong_oop, row.wrong_ip) if w is not None)
    nranks_value = (max(ranks) + 1) if ranks else nranks_info
    return NcclFacts(collective or source_guess, version, nranks_value, validation, tuple(rows), avg,
                     max(busbws) if busbws else None, wrong_total, oob, tuple(dict.fromkeys(errors)),
                     bool(rows) and avg is not None, tuple(warnings), bool(rows) and not headed)
