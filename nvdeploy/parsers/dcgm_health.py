"""``dcgmi health -c [-j]`` (DCGM's background health watches) -> per-entity health and incidents. Pure, never
raises.

The layout comes from DCGM's own source (NVIDIA/DCGM ``dcgmi/Health.cpp``, ``dcgmi/DcgmiOutput.cpp``; the text
layout is stable from DCGM 2.x to 4.x, ``DcgmiOutputTree(28, 60)``):

- JSON (``-j``): ``{"body": {"Overall Health": {"value": H}, "<entity group>": {"children": {"<id>": {"value": H,
  "children": {"Errors": {"children": {"<system>": {"value": H, "overflow": [message pieces]}}}}}}}},
  "header": ["Health Monitor Report"]}``. The entity group is DCGM's name for it (``GPU``, ``Switch``,
  ``ConnectX``, ``CPU``...), the system ``PCIe system``, ``NVLINK system``, ``Memory system``, ``SM system``,
  ``InfoROM system``, ``Thermal system``, ``Power system``, ``Driver``, ``ConnectX system`` (DCGM prints
  ``Internal error`` for a system it has no name for, the NVSwitch ones among them). H is ``Healthy``, ``Warning``,
  ``Failure`` (or ``Internal error``). A system's message is every incident of that system joined by ", ", cut
  into pieces of about 54 characters at word ends: the pieces are joined back with spaces here.
- text: the same tree as a two-column table (``| Overall Health            | Healthy |``, ``| GPU |``,
  ``| -> 0 | Warning |``, ``|    -> Errors |``, ``|       -> Memory system | Failure |``, then the message
  pieces on rows with an empty left cell).

dcgmi prints no error code for an incident (the API's ``error.code`` stays inside DCGM), so a fact carries the
message only. The collector sets the watches first (``dcgmi health -g 0 -s a``): its ``Health monitor systems set
successfully.`` line may come before the report. ``Error: ...`` lines (watches not enabled, group not found, no
host engine) are kept in ``errors``.

Real captures: tests/fixtures/real/dcgmi-health (a healthy ``-c -j`` report, the set line, the not-enabled
error). No real capture of an unhealthy report was found in public repos or issue threads: the unhealthy layouts
the tests read are built from the source above, not captured (tests/unit/test_dcgm_health.py says so).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

HEALTH_VALUES = ("Healthy", "Warning", "Failure")
SET_OK = "Health monitor systems set successfully."
REPORT_HEADER = "Health Monitor Report"
# dcgmi's line when no watch is set on the group (nothing to report yet: not a verdict).
NOT_ENABLED_RE = re.compile(r"Health watches not enabled", re.IGNORECASE)
HOSTENGINE_RE = re.compile(r"unable to (?:establish a connection|connect to)|host ?engine connection",
                           re.IGNORECASE)
_ROW_RE = re.compile(r"^\|\s(?P<left>[^|]*?)\s*\|\s?(?P<right>.*?)\s*\|\s*$")
_HEADER_RE = re.compile(r"^\|\s*Health Monitor Report\s*\|\s*$")
_HLINE_RE = re.compile(r"^\+[-=+]+\+\s*$")
_LEVEL_RE = re.compile(r"^(?P<indent>\s*)->\s*(?P<label>.*)$")


@dataclass(frozen=True)
class HealthIncident:
    system: str  # "PCIe system", "Memory system", "Driver", ...
    health: str  # "Warning", "Failure", ...
    message: str


@dataclass(frozen=True)
class HealthEntity:
    group: str  # "GPU", "Switch", "ConnectX", ...
    entity_id: Optional[int]
    health: Optional[str]
    incidents: tuple[HealthIncident, ...] = ()
    label: str = ""  # the id as printed, when it is not a number


@dataclass(frozen=True)
class DcgmHealth:
    format: Optional[str] = None  # "json" | "text" | None (no report)
    overall: Optional[str] = None
    entities: tuple[HealthEntity, ...] = ()
    watches_set: bool = False  # the "set successfully" line of ``-s`` is there
    errors: tuple[str, ...] = ()  # dcgmi's "Error: ..." lines
    watches_not_enabled: bool = False
    hostengine_unreachable: bool = False
    complete: bool = False  # the report ended as dcgmi ends it (JSON closed, table footer)
    warnings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def gpus(self) -> tuple[HealthEntity, ...]:
        return tuple(e for e in self.entities if e.group.upper() == "GPU")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _id(label: str) -> Optional[int]:
    return int(label) if label.strip().isdigit() else None


def _join(pieces: list[str]) -> str:
    return re.sub(r"\s+", " ", " ".join(p.strip() for p in pieces if p and p.strip())).strip()


def _value(node: Any) -> Optional[str]:
    if isinstance(node, dict):
        value = node.get("value")
        return str(value).strip() if value is not None else None
    return None


def _children(node: Any) -> dict[str, Any]:
    if isinstance(node, dict) and isinstance(node.get("children"), dict):
        return node["children"]
    return {}


def _from_json(data: Any, warnings: list[str]) -> tuple[Optional[str], list[HealthEntity]]:
    body = data.get("body") if isinstance(data, dict) else None
    if not isinstance(body, dict):
        warnings.append("JSON without a 'body' object")
        return None, []
    overall = _value(body.get("Overall Health"))
    entities: list[HealthEntity] = []
    for group, node in body.items():
        if group == "Overall Health":
            continue
        for label, entity in _children(node).items():
            incidents = []
            for system, sysnode in _children(_children(entity).get("Errors")).items():
                overflow = sysnode.get("overflow") if isinstance(sysnode, dict) else None
                pieces = [str(p) for p in overflow] if isinstance(overflow, list) else []
                incidents.append(HealthIncident(system, _value(sysnode) or "?", _join(pieces)))
            entities.append(HealthEntity(group, _id(label), _value(entity), tuple(incidents),
                                         label="" if _id(label) is not None else label))
    return overall, entities


@dataclass
class _Node:
    group: str
    label: str
    health: Optional[str] = None
    systems: list[list[Any]] = field(default_factory=list)  # [system, health, [pieces]]


def _from_text(lines: list[str], warnings: list[str]) -> tuple[Optional[str], list[HealthEntity], bool, bool]:
    """(overall, entities, header seen, footer seen) from the table."""
    overall: Optional[str] = None
    header = footer = False
    group = ""
    nodes: list[_Node] = []
    current: Optional[_Node] = None
    target: Optional[list[str]] = None  # where a continuation row's text goes
    rows_after_header = 0
    for raw in lines:
        line = raw.rstrip()
        if _HEADER_RE.match(line):
            header, footer = True, False
            continue
        if _HLINE_RE.match(line):
            if header and rows_after_header:
                footer = True
            continue
        match = _ROW_RE.match(line)
        if not match:
            continue
        rows_after_header += 1
        footer = False
        left, right = match.group("left"), match.group("right").strip()
        if not left.strip():
            if target is not None and right:
                target.append(right)
            continue
        level = _LEVEL_RE.match(left)
        if level is None:  # level 0: "Overall Health" or an entity group name
            if left.strip() == "Overall Health":
                overall = right or None
            else:
                group, current, target = left.strip(), None, None
            continue
        depth = len(level.group("indent")) // 3 + 1
        label = level.group("label").strip()
        if depth == 1:
            if not group:  # a pasted piece that starts below its group row: GPU, the group DCGM nearly always lists
                group = "GPU"
                warnings.append("entity rows without their group row: taken as GPUs")
            current = _Node(group, label, right or None)
            nodes.append(current)
            target = None
        elif depth == 2:
            target = None  # the "Errors" row
        elif current is not None:
            pieces: list[str] = []
            current.systems.append([label, right or "?", pieces])
            target = pieces
        else:
            warnings.append(f"a system row without its entity: {line.strip()[:80]}")
    entities = [HealthEntity(n.group, _id(n.label), n.health,
                             tuple(HealthIncident(s, h, _join(p)) for s, h, p in n.systems),
                             label="" if _id(n.label) is not None else n.label) for n in nodes]
    return overall, entities, header, footer


def parse_dcgm_health(text: str) -> DcgmHealth:
    """The report of ``dcgmi health -c`` or ``-c -j`` (after an optional ``-s`` line). Never raises."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    if not isinstance(text, str):
        return DcgmHealth(warnings=("not text",))
    text = text.replace("\r\n", "\n").replace("\x00", "")
    warnings: list[str] = []
    lines = text.split("\n")
    errors = tuple(line.strip()[:300] for line in lines if line.strip().lower().startswith("error"))
    common: dict[str, Any] = {
        "watches_set": SET_OK.lower() in text.lower(),
        "errors": errors,
        "watches_not_enabled": bool(NOT_ENABLED_RE.search(text)),
        "hostengine_unreachable": bool(HOSTENGINE_RE.search(text)),
    }
    start = text.find("{")
    if start >= 0 and '"body"' in text[start:]:
        try:
            data, _ = json.JSONDecoder().raw_decode(text[start:])
        except ValueError as exc:
            warnings.append(f"JSON cut off or not readable: {exc}")
            overall = _overall_fallback(text[start:])
            return DcgmHealth("json", overall, (), complete=False, warnings=tuple(warnings), **common)
        overall, entities = _from_json(data, warnings)
        header = data.get("header") if isinstance(data, dict) else None
        if not (isinstance(header, list) and REPORT_HEADER in header):
            warnings.append("JSON without the 'Health Monitor Report' header")
        if overall is None:
            warnings.append("no 'Overall Health' value")
        return DcgmHealth("json", overall, tuple(entities), complete=overall is not None,
                          warnings=tuple(warnings), **common)
    overall, entities, header, footer = _from_text(lines, warnings)
    if not header and overall is None and not entities:
        return DcgmHealth(None, warnings=tuple(warnings), **common)
    if not footer:
        warnings.append("the table has no closing line (cut off?)")
    return DcgmHealth("text", overall, tuple(entities), complete=header and footer and overall is not None,
                      warnings=tuple(warnings), **common)


def _overall_fallback(text: str) -> Optional[str]:
    """The overall value of a cut-off JSON report (said, never trusted: the report is incomplete)."""
    match = re.search(r'"Overall Health"\s*:\s*\{\s*"value"\s*:\s*"([^"]*)"', text)
    return match.group(1) if match else None
