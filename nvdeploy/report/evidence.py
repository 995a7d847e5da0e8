"""Evidence excerpts for the report: the few lines of a node's raw output around the problem, and a safe link.

The excerpt is plain text (the template escapes it); the link is a relative path inside the run folder, never
a URL with a scheme, never ``..``: a results.json edited by hand cannot turn it into ``javascript:`` or a path
outside the run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Optional
from urllib.parse import quote

from nvdeploy.results import Finding

READ_LIMIT = 4 * 1024 * 1024  # bytes of an evidence file read to find the excerpt
LINE_LIMIT = 240  # characters of one excerpt line
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]|\x1b\[[0-9;?]*[A-Za-z]")
_BUS_ID = re.compile(r"\b(?:[0-9A-Fa-f]{4,8}:)?([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})(?:\.[0-7])?\b")
_XID = re.compile(r"\bXid (\d+)\b")
_SXID = re.compile(r"\bSXid (\d+)\b")
# Where to look in a tool's output for a check's problem, after the GPU's own block when the summary names one.
# A hint, not a parser: when nothing matches, the excerpt is the start of the file.
CHECK_HINTS: dict[str, tuple[str, ...]] = {
    "kmsg.xid": ("nvrm: xid",),
    "kmsg.sxid": ("sxid",),
    "memory.ecc_errors": ("ecc_uncorrectable_volatile", "<volatile>", "volatile"),
    "memory.ecc_mode": ("ecc_mode", "ecc mode"),
    "memory.remapped_rows": ("remapped_rows_pending", "remapped_row_pending", "remapped rows", "remapped_rows"),
    "memory.retired_pages": ("retired_pages", "retired pages"),
    "gpu.persistence": ("persistence_mode", "persistence mode"),
    "gpu.count": ("attached_gpus", "attached gpus", "gpu_count"),
    "gpu.model": ("product_name", "product name", '"name"'),
    "gpu.memory": ("fb_memory_usage", "memory_total_mib", "fb memory usage"),
    "driver.version": ("driver_version", "driver version"),
    "driver.loaded": ("driver_version", "nvidia-smi has failed", "driver version"),
    "driver.consistency": ("driver_version", "driver version"),
    "nvlink.fabric": ("fabric_state", "<state>"),
}
# Words of a summary that name the value at fault, and where that value is (the probe's JSON key, nvidia-smi's XML
# tag): tried before the check's own hints, in the order the summary names them, so a GPU's clusterUuid finding
# marks its clusterUuid line, not the first line of its block (its PCI bus id, which anchors the GPU).
PROBLEM_HINTS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "nvlink.fabric": (
        ("clusteruuid", ("fabric_cluster_uuid", "<clusteruuid>")),
        ("cliqueid", ("fabric_clique_id", "<cliqueid>")),
        ("status ", ("fabric_status", "<status>")),
        ("health ", ("fabric_health_summary", "<summary>")),
        ("bandwidth ", ("fabric_bandwidth", "<bandwidth>")),
        ("route recovery", ("fabric_route_recovery_in_progress", "<route_recovery_in_progress>")),
        ("route unhealthy", ("fabric_route_unhealthy", "<route_unhealthy>")),
        ("access timeout", ("fabric_access_timeout_recovery", "<access_timeout_recovery>")),
        ("incorrect configuration", ("fabric_incorrect_configuration", "<incorrect_configuration>")),
    ),
}
EXPAND_JSON_OVER = 400  # a JSON line longer than this is pretty-printed so the excerpt can show the right part


@dataclass(frozen=True)
class Excerpt:
    """Lines ``first_line``.. of an evidence file (1-based), already cleaned of control characters."""

    path: str
    href: str
    first_line: int
    lines: tuple[str, ...]
    matched: bool
    more_before: bool
    more_after: bool
    hit: int = -1  # index in ``lines`` of the line the problem is on; -1 when none was found
    reformatted: bool = False  # a one-line JSON document was pretty-printed to show the part that matters
    # The file's line each of ``lines`` is, or is part of (a pretty-printed document's lines all are its one line);
    # empty: ``first_line`` onwards, one each.
    sources: tuple[int, ...] = ()

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def _sources(self) -> tuple[int, ...]:
        return self.sources or tuple(range(self.first_line, self.first_line + len(self.lines)))

    @property
    def where(self) -> str:
        """``lines 20–29`` of the file, or ``line 1 (one line of JSON, pretty-printed)``: the file's own line
        numbers, never those of the pretty-printed form (a one-line file has no line 8)."""
        sources = self._sources()
        low, high = min(sources), max(sources)
        span = f"line {low}" if low == high else f"lines {low}\u2013{high}"
        return span + (" (one line of JSON, pretty-printed)" if self.reformatted else "")

    @property
    def numbered(self) -> list[tuple[str, str, bool]]:
        """(the file's line number, shown once per file line, line, the problem's line)."""
        sources = self._sources()
        return [(str(number) if i == 0 or number != sources[i - 1] else "", line, i == self.hit)
                for i, (number, line) in enumerate(zip(sources, self.lines))]


def safe_href(path: Optional[str]) -> Optional[str]:
    """A relative, percent-encoded link for an evidence path, or None when the path is not one we wrote."""
    if not path or "\\" in path or "\x00" in path:
        return None
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or ":" in pure.parts[0]:
        return None
    return quote(str(pure), safe="/")


def _clean(line: str) -> str:
    line = _CONTROL.sub("", line.rstrip("\r\n")).replace("\t", "    ")
    return line if len(line) <= LINE_LIMIT else line[: LINE_LIMIT - 1] + "\u2026"


def _needles(finding: Finding) -> tuple[list[str], list[str]]:
    """(anchors, hints): anchors find the right GPU or event, hints the right line after it (lower case)."""
    text = f"{finding.summary} {finding.observed if isinstance(finding.observed, str) else ''}"
    anchors: list[str] = []
    for match in _XID.finditer(text):
        anchors.append(f"): {match.group(1)},")  # NVRM: Xid (PCI:0000:2a:00): 79, pid=...
    for match in _SXID.finditer(text):
        anchors.append(f"): {match.group(1)},")  # nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 20034, Fatal, ...
        anchors.append(f"sxid {match.group(1)}")
    for match in _BUS_ID.finditer(text):
        anchors.append(f"{match.group(1)}:{match.group(2)}".lower())
    lowered = text.lower()
    named = sorted((lowered.find(word), values) for word, values in PROBLEM_HINTS.get(finding.check, ())
                   if word in lowered)
    hints = [hint for _at, values in named for hint in values] + list(CHECK_HINTS.get(finding.check, ()))
    return anchors, hints


def find_line(lines: list[str], finding: Finding) -> Optional[int]:
    """Index of the line where the finding's problem shows in ``lines``, or None."""
    lowered = [line.lower() for line in lines]
    anchors, hints = _needles(finding)
    start = 0
    for anchor in anchors:
        hit = next((i for i, line in enumerate(lowered) if anchor in line), None)
        if hit is not None:
            start = hit
            if not hints:
                return hit
            break
    for hint in hints:
        hit = next((i for i in range(start, len(lowered)) if hint in lowered[i]), None)
        if hit is not None:
            return hit
    return start if anchors and start else None


def excerpt(run_dir: Optional[Path], path: Optional[str], finding: Finding, max_lines: int = 10,
            before: int = 3) -> Optional[Excerpt]:
    """The lines of evidence ``path`` (relative to ``run_dir``) around ``finding``'s problem.

    Returns None when there is no run folder, no safe path, or the file cannot be read.
    """
    href = safe_href(path)
    if run_dir is None or href is None or path is None:
        return None
    root = run_dir.resolve()
    target = (run_dir / path).resolve()
    if root not in target.parents or not target.is_file():
        return None
    try:
        with open(target, "rb") as handle:
            raw = handle.read(READ_LIMIT)
    except OSError:
        return None
    lines = raw.decode("utf-8", errors="replace").splitlines()
    if not lines:
        return Excerpt(path, href, 1, ("(empty output)",), False, False, False)
    lines, sources = _expand_json(lines)
    reformatted = sources != list(range(1, len(lines) + 1))
    hit = find_line(lines, finding)
    first = max(0, hit - before) if hit is not None else 0
    last = min(len(lines), first + max_lines)
    return Excerpt(path, href, sources[first], tuple(_clean(line) for line in lines[first:last]), hit is not None,
                   first > 0, last < len(lines) or len(raw) >= READ_LIMIT,
                   hit - first if hit is not None else -1, reformatted,
                   tuple(sources[first:last]) if reformatted else ())


def _expand_json(lines: list[str]) -> tuple[list[str], list[int]]:
    """(lines, the file's line each one is): the first long line that is a JSON document (a probe's one-line
    output) pretty-printed, its lines all the document's own line."""
    for index, line in enumerate(lines[:5]):
        stripped = line.strip()
        if len(stripped) < EXPAND_JSON_OVER or stripped[0] not in "{[":
            continue
        try:
            document = json.loads(stripped)
        except ValueError:
            continue
        pretty = json.dumps(document, indent=1, ensure_ascii=False).splitlines()
        sources = list(range(1, index + 1)) + [index + 1] * len(pretty)
        sources += list(range(index + 2, len(lines) + 1))
        return lines[:index] + pretty + lines[index + 1:], sources
    return lines, list(range(1, len(lines) + 1))
