"""What Slurm says about its nodes: pure parsers of ``sinfo --json`` and ``scontrol -o show node``.

Slurm 22.05's ``sinfo --json`` (openapi v0.0.38) gives one object per node with ``state`` a lowercase string
and ``state_flags`` a list (``"idle"`` + ``["DRAIN"]``); Slurm 23.02 and later's ``scontrol --json show node``
gives ``state`` as a list (``["IDLE", "DRAIN"]``). The text form (``scontrol -o show node``: one line per node,
``Key=Value`` pairs, ``State=IDLE+DRAIN``, ``Reason=text [user@time]`` last) is what every version prints.
Both land in the same :class:`SlurmNode`; nothing here runs a command.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional

# Base states as ``sinfo -t`` names them; flags (DRAIN, MAINT, RESERVED, ...) are kept apart.
_BASE_STATES = {"IDLE", "ALLOCATED", "MIXED", "DOWN", "ERROR", "FUTURE", "UNKNOWN", "COMPLETING"}
_TEXT_KEY = re.compile(r"(?:^|\s)([A-Za-z_]+)=")
_REASON_TAIL = re.compile(r"\s*\[([^\[\]@]*)@([^\[\]]*)\]\s*$")
_GPU_GRES = re.compile(r"^gpu(?::([A-Za-z0-9_.-]+))?:(\d+)")


class SlurmParseError(ValueError):
    """The scheduler's output could not be read (not JSON, no node list, a line without NodeName)."""


@dataclass(frozen=True)
class SlurmNode:
    """One node as Slurm sees it."""

    name: str
    state: str                      # the base state, lowercase: idle, allocated, mixed, down, ...
    flags: tuple[str, ...] = ()     # upper case: DRAIN, MAINT, RESERVED, NOT_RESPONDING ("*" in sinfo), ...
    reason: str = ""
    reason_user: str = ""
    gres: str = ""                  # as configured: gpu:h100:8, gpu:8, gpu:h100:8(S:0-1),shard:...
    partitions: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    alloc_cpus: int = 0
    address: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def drained(self) -> bool:
        """DRAIN flag set (``sinfo`` shows ``drain`` when empty, ``drng`` while jobs still run)."""
        return "DRAIN" in self.flags

    @property
    def busy(self) -> bool:
        """Jobs hold (part of) the node."""
        return self.state in ("allocated", "mixed", "completing") or self.alloc_cpus > 0

    @property
    def short_state(self) -> str:
        """The state as ``sinfo -t`` filters it: drained (idle+DRAIN), draining (jobs+DRAIN), else the base."""
        if self.drained:
            return "draining" if self.busy else "drained"
        return self.state

    @property
    def gpus(self) -> Optional[int]:
        return gres_gpu_count(self.gres)

    @property
    def gpu_type(self) -> str:
        return gres_gpu_type(self.gres)

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.short_state, "base_state": self.state, "flags": list(self.flags),
                "reason": self.reason, "reason_user": self.reason_user, "gres": self.gres,
                "gres_gpus": self.gpus, "gres_gpu_type": self.gpu_type, "partitions": list(self.partitions),
                "features": list(self.features), "alloc_cpus": self.alloc_cpus}


def _gpu_items(gres: str) -> Iterable[re.Match[str]]:
    for item in (gres or "").split(","):
        match = _GPU_GRES.match(item.strip())
        if match:
            yield match


def gres_gpu_count(gres: str) -> Optional[int]:
    """GPUs in a GRES string (``gpu:h100:8``, ``gpu:8(S:0-1)``, ``gpu:a:4,gpu:b:4``); None when it has none."""
    counts = [int(m.group(2)) for m in _gpu_items(gres)]
    return sum(counts) if counts else None


def gres_gpu_type(gres: str) -> str:
    types = sorted({m.group(1) for m in _gpu_items(gres) if m.group(1)})
    return ",".join(types)


def _split_words(value: Any) -> tuple[str, ...]:
    """``"a,b"`` / ``["a", "b"]`` / ``"(null)"`` / ``""`` -> a tuple of names."""
    if isinstance(value, list):
        items = [str(v) for v in value]
    elif isinstance(value, str):
        items = value.split(",")
    else:
        items = []
    return tuple(i.strip() for i in items if i.strip() and i.strip() not in ("(null)", "N/A"))


def _state_from(base: Any, flags: Any) -> tuple[str, tuple[str, ...]]:
    words: list[str] = []
    for part in (base if isinstance(base, list) else [base]):
        if isinstance(part, str):
            words.extend(w for w in re.split(r"[+]", part) if w)
    words.extend(str(f) for f in (flags or []) if isinstance(f, str))
    state = "unknown"
    rest: list[str] = []
    for word in words:
        upper = word.upper().rstrip("*~#!%$@^-")
        if upper in _BASE_STATES and state == "unknown":
            state = upper.lower()
        elif upper and upper not in rest:
            rest.append(upper)
    if words and words[0].endswith("*") and "NOT_RESPONDING" not in rest:
        rest.append("NOT_RESPONDING")
    return state, tuple(rest)


def parse_json(text: str) -> list[SlurmNode]:
    """Nodes from ``sinfo --json`` (22.05) or ``scontrol --json show node`` (23.02+)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SlurmParseError(f"not JSON: {exc}") from None
    nodes = data.get("nodes") if isinstance(data, dict) else None
    errors = data.get("errors") if isinstance(data, dict) else None
    if errors and not nodes:
        # Slurm 22.05's sinfo --json exits 0 with {"errors": [{"error": "Unspecified error"}], "nodes": []} when
        # slurmctld is down: an empty list here is a failure, never "no nodes".
        words = "; ".join(str(e.get("error", e)) if isinstance(e, dict) else str(e) for e in errors)
        raise SlurmParseError(f"Slurm's JSON reports errors and no nodes: {words}")
    if not isinstance(nodes, list):
        raise SlurmParseError("no 'nodes' list in Slurm's JSON (sinfo --json of Slurm 23.02+ has none: "
                              "use scontrol --json show node)")
    out = []
    for entry in nodes:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        state, flags = _state_from(entry.get("state"), entry.get("state_flags"))
        alloc = entry.get("alloc_cpus", 0)
        out.append(SlurmNode(
            name=entry["name"], state=state, flags=flags, reason=str(entry.get("reason") or ""),
            reason_user=str(entry.get("reason_set_by_user") or ""), gres=str(entry.get("gres") or ""),
            partitions=_split_words(entry.get("partitions")), features=_split_words(entry.get("features")),
            alloc_cpus=alloc if isinstance(alloc, int) else 0, address=str(entry.get("address") or "")))
    return out


def _text_fields(line: str) -> dict[str, str]:
    """``Key=Value`` pairs of one ``scontrol -o`` line. Values may hold spaces (``OS=Linux 6.1 #1 SMP``), so a
    value runs to the next `` Key=``; ``Reason`` is last and taken whole (it is free text from an operator)."""
    reason = None
    head = line
    cut = re.search(r"(?:^|\s)Reason=", line)
    if cut:
        head, reason = line[: cut.start()], line[cut.end():]
    fields: dict[str, str] = {}
    keys = list(_TEXT_KEY.finditer(head))
    for index, match in enumerate(keys):
        end = keys[index + 1].start() if index + 1 < len(keys) else len(head)
        fields[match.group(1)] = head[match.end():end].strip()
    if reason is not None:
        fields["Reason"] = reason.rstrip("\n")
    return fields


def parse_text(text: str) -> list[SlurmNode]:
    """Nodes from ``scontrol -o show node`` (one line per node)."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = _text_fields(line)
        name = fields.get("NodeName", "")
        if not name:
            raise SlurmParseError(f"line {number} of scontrol's output has no NodeName=: {line[:80]!r}")
        state, flags = _state_from(fields.get("State", "UNKNOWN"), [])
        reason, user = fields.get("Reason", ""), ""
        tail = _REASON_TAIL.search(reason)
        if tail:
            reason, user = reason[: tail.start()], tail.group(1)
        reason = "" if reason in ("(null)", "none") else reason
        try:
            alloc = int(fields.get("CPUAlloc", "0") or 0)
        except ValueError:
            alloc = 0
        gres = fields.get("Gres", "")
        out.append(SlurmNode(
            name=name, state=state, flags=flags, reason=reason, reason_user=user,
            gres="" if gres == "(null)" else gres, partitions=_split_words(fields.get("Partitions", "")),
            features=_split_words(fields.get("AvailableFeatures", "")), alloc_cpus=alloc,
            address=fields.get("NodeAddr", "")))
    return out


def matches_states(node: SlurmNode, states: Iterable[str]) -> bool:
    """``states: [idle, drained]`` as an operator means it (gotcha: ``sinfo -t idle`` also lists drained nodes)."""
    wanted = {s.lower() for s in states}
    if not wanted:
        return True
    names = {node.short_state}
    if node.short_state == "drained":
        names.add("drain")
    if node.short_state == "draining":
        names |= {"drng", "drain"}
    if "MAINT" in node.flags:
        names.add("maint")
    if "RESERVED" in node.flags:
        names.add("reserved")
    return bool(names & wanted)


def node_from_facts(name: str, facts: Mapping[str, Any]) -> SlurmNode:
    """The inverse of :meth:`SlurmNode.to_dict` (facts carried in a host's ``slurm_node`` variable)."""
    return SlurmNode(name=name, state=str(facts.get("base_state", "unknown")), flags=tuple(facts.get("flags", ())),
                     reason=str(facts.get("reason", "")), reason_user=str(facts.get("reason_user", "")),
                     gres=str(facts.get("gres", "")), partitions=tuple(facts.get("partitions", ())),
                     features=tuple(facts.get("features", ())), alloc_cpus=int(facts.get("alloc_cpus", 0) or 0))
