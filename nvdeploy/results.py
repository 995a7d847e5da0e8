"""The result model shared by every stage: verdicts, command results, findings, node and run results.

Every value that crosses a module boundary is a frozen dataclass. Results are serialised to plain dicts
(``to_dict``) for ``results.jsonl``/``results.json`` and read back with ``from_dict``, so a crashed run can be
re-rendered from its journal.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import json
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, NamedTuple, Optional, Sequence

SCHEMA_VERSION = 1


class Verdict(str, enum.Enum):
    """Outcome of one check. Ordered by severity so the worst one wins."""

    SKIP = "SKIP"
    PASS = "PASS"
    WARN = "WARN"
    ERROR = "ERROR"
    FAIL = "FAIL"

    @property
    def severity(self) -> int:
        return _SEVERITY[self]

    @classmethod
    def worst(cls, verdicts: Iterable[Verdict], default: Optional[Verdict] = None) -> Verdict:
        """Return the most severe verdict; ``default`` (ERROR if not given) when there is none.

        An empty list is never PASS: a node for which nothing was evaluated could not be determined.
        """
        found = list(verdicts)
        if not found:
            return default if default is not None else cls.ERROR
        return max(found, key=lambda v: v.severity)


# FAIL outranks ERROR: a node with a proven fault is NOT_READY even if something else could not be checked.
# SKIP (not applicable) ranks lowest: a node whose checks passed or did not apply has passed.
_SEVERITY = {Verdict.SKIP: 0, Verdict.PASS: 1, Verdict.WARN: 2, Verdict.ERROR: 3, Verdict.FAIL: 4}


class ErrorReason(str, enum.Enum):
    """Why an ERROR verdict could not be determined."""

    UNREACHABLE = "unreachable"
    HOST_KEY = "host_key"
    AUTH = "auth"
    TIMEOUT = "timeout"
    CONNECTION_LOST = "connection_lost"
    SUDO = "sudo"
    TOOL_MISSING = "tool_missing"
    UNPARSEABLE = "unparseable"
    INCOMPLETE = "incomplete"
    NOT_RUN = "not_run"
    INTERRUPTED = "interrupted"
    # Another workload holds the node: GPU compute processes, a Slurm job, or another nvdeploy run's lock.
    BUSY = "busy"
    # A folder nvdeploy would use on the node (its run lock's, its temp folder's, an MPS pipe folder) is a link,
    # another user's, or writable by others: nothing was run through it.
    LOCK = "lock"
    # The change is made but only takes effect after a reboot nvdeploy was not allowed to do (--allow-reboot).
    REBOOT_REQUIRED = "reboot_required"


class Remediation(str, enum.Enum):
    """What an operator should do about a finding."""

    NONE = "NONE"
    ISOLATE = "ISOLATE"
    REBOOT = "REBOOT"
    RESET_GPU = "RESET_GPU"
    REINSTALL = "REINSTALL"
    TUNE = "TUNE"
    MONITOR = "MONITOR"
    INVESTIGATE = "INVESTIGATE"
    # The check never ran to its end because the run was interrupted: ``nvdeploy validate --resume`` runs it.
    RESUME = "RESUME"


class ClusterVerdict(str, enum.Enum):
    READY = "READY"
    NOT_READY = "NOT_READY"
    INCOMPLETE = "INCOMPLETE"
    # A dry-run: it planned and changed nothing, so it says nothing about readiness (RunResult.plan).
    PLAN = "PLAN"


class ExitCode(enum.IntEnum):
    READY = 0
    NOT_READY = 1
    USAGE = 2
    INCOMPLETE = 3
    INTERRUPTED = 130
    TERMINATED = 143


_ATOMS = (str, int, float, bool, type(None))


def plain(value: Any) -> Any:
    """``value`` as ``dataclasses.asdict`` would give it (nested dataclasses as dicts, containers copied), with a
    fast path for the scalars almost every observed/expected value is."""
    if isinstance(value, _ATOMS):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(plain(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    if isinstance(value, dict):
        return type(value)((plain(k), plain(v)) for k, v in value.items())
    return copy.deepcopy(value)


@dataclass(frozen=True)
class CommandResult:
    """What one command on a node produced.

    ``rc`` is None when the command did not finish (timeout, lost connection). ``stdout``/``stderr`` hold at
    most the capped bytes; ``stdout_total`` counts every byte the node sent. ``error`` is set when the
    transport, not the command, failed.
    """

    name: str
    command: str
    rc: Optional[int]
    stdout: bytes = b""
    stderr: bytes = b""
    duration_s: float = 0.0
    timed_out: bool = False
    truncated: bool = False
    stdout_total: int = 0
    stderr_total: int = 0
    error: Optional[ErrorReason] = None
    error_detail: str = ""

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out and self.error is None

    @property
    def completed(self) -> bool:
        """The command ran to its end and we have its exit status and all of its output."""
        return self.rc is not None and not self.timed_out and self.error is None and not self.truncated

    @property
    def text(self) -> str:
        """Standard output decoded once, leniently: parsers read text, the raw bytes go to evidence."""
        return self.stdout.decode("utf-8", errors="replace")

    @property
    def err_text(self) -> str:
        return self.stderr.decode("utf-8", errors="replace")


# The word every writer shows for a waived finding in place of its verdict (a waived finding's verdict is SKIP).
WAIVED = "WAIVED"


@dataclass(frozen=True)
class Waived:
    """A finding a waiver accepted (config/waivers.py): the verdict it had, who accepted it, why, and the last day
    (UTC, ISO date) it holds; ``where`` is the waiver's file:line. Decided once, when the run's record is made
    (runner/folders.py finish_run): the finding is then SKIP, and every writer shows it from this, never from text."""

    verdict: Verdict
    owner: str
    reason: str
    until: str
    where: str = ""

    @property
    def note(self) -> str:
        """``WAIVED FAIL until 2027-01-15 (owner jdoe: RMA 4711 open; waivers.yaml:2)``: results.json's summary of a
        waived finding has started so since waivers exist, and older readers know one by it."""
        where = f"; {self.where}" if self.where else ""
        return f"{WAIVED} {self.verdict.value} until {self.until} (owner {self.owner}: {self.reason}{where})"

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict.value, "owner": self.owner, "reason": self.reason, "until": self.until,
                "where": self.where}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Waived:
        return cls(Verdict(data["verdict"]), str(data.get("owner", "")), str(data.get("reason", "")),
                   str(data.get("until", "")), str(data.get("where", "")))


@dataclass(frozen=True)
class Finding:
    """One check's verdict on one node (or on the cluster when ``node`` is empty).

    ``code``: the numbered event the finding is about where there is one (the Xid of a kmsg.xid finding), so a
    waiver can name it. ``waiver``: set when a waiver accepted the finding; ``verdict`` is then SKIP and
    ``summary`` the check's own words (:attr:`display_summary` prefixes the waiver's note)."""

    check: str
    verdict: Verdict
    summary: str
    node: str = ""
    observed: Any = None
    expected: Any = None
    unit: str = ""
    gpu: Optional[int] = None
    reason: Optional[ErrorReason] = None
    remediation: Remediation = Remediation.NONE
    evidence: Optional[str] = None
    profile: str = ""
    code: Optional[int] = None
    waiver: Optional[Waived] = None

    @property
    def display_summary(self) -> str:
        """The summary as a reader is shown it: after the waiver's note when waived."""
        return f"{self.waiver.note}: {self.summary}" if self.waiver is not None else self.summary

    def to_dict(self) -> dict[str, Any]:
        # Explicit, not dataclasses.asdict: asdict deep-copies every field through its generic recursion, the
        # largest serialisation cost of a fleet run (every finding is written to the journal and results.json).
        data: dict[str, Any] = {
            "check": self.check,
            "verdict": self.verdict.value,
            # With the waiver's note in front, as results.json had it before "waiver" existed.
            "summary": self.display_summary,
            "node": self.node,
            "observed": plain(self.observed),
            "expected": plain(self.expected),
            "unit": self.unit,
            "gpu": self.gpu,
            "reason": self.reason.value if self.reason else None,
            "remediation": self.remediation.value,
            "evidence": self.evidence,
            "profile": self.profile,
        }
        # Only where set: two keys more on every finding would grow a fleet's results.json for nothing.
        if self.code is not None:
            data["code"] = self.code
        if self.waiver is not None:
            data["waiver"] = self.waiver.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        waiver = Waived.from_dict(data["waiver"]) if isinstance(data.get("waiver"), Mapping) else None
        summary = str(data.get("summary", ""))
        if waiver is not None and summary.startswith(waiver.note + ": "):
            summary = summary[len(waiver.note) + 2:]
        code = data.get("code")
        return cls(
            check=str(data["check"]),
            verdict=Verdict(data["verdict"]),
            summary=summary,
            node=str(data.get("node", "")),
            observed=data.get("observed"),
            expected=data.get("expected"),
            unit=str(data.get("unit", "")),
            gpu=data.get("gpu"),
            reason=ErrorReason(data["reason"]) if data.get("reason") else None,
            remediation=Remediation(data.get("remediation", "NONE")),
            evidence=data.get("evidence"),
            profile=str(data.get("profile", "")),
            code=code if isinstance(code, int) and not isinstance(code, bool) else None,
            waiver=waiver,
        )


@dataclass(frozen=True)
class EvidenceRecord:
    """A raw output kept on disk: where it is, how big it really was, and whether it was cut."""

    collector: str
    command: str
    path: str
    rc: Optional[int]
    bytes_total: int
    truncated: bool
    sha256: str
    duration_s: float
    error: Optional[str] = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "collector": self.collector,
            "command": self.command,
            "path": self.path,
            "rc": self.rc,
            "bytes_total": self.bytes_total,
            "truncated": self.truncated,
            "sha256": self.sha256,
            "duration_s": self.duration_s,
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvidenceRecord:
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})  # type: ignore[arg-type]


@dataclass(frozen=True)
class NodeResult:
    """Everything known about one node after a run."""

    name: str
    findings: tuple[Finding, ...]
    address: str = ""
    profile: str = ""
    connection: str = ""
    duration_s: float = 0.0
    evidence: tuple[EvidenceRecord, ...] = ()
    facts: Mapping[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> Verdict:
        return Verdict.worst(f.verdict for f in self.findings)

    @property
    def interrupted(self) -> bool:
        """The run was interrupted before this node finished: ``--resume`` checks it again."""
        return any(f.reason is ErrorReason.INTERRUPTED for f in self.findings)

    def with_findings(self, extra: Iterable[Finding]) -> NodeResult:
        return replace(self, findings=self.findings + tuple(extra))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "verdict": self.verdict.value,
            "address": self.address,
            "profile": self.profile,
            "connection": self.connection,
            "duration_s": round(self.duration_s, 3),
            "findings": [f.to_dict() for f in self.findings],
            "evidence": [e.to_dict() for e in self.evidence],
            "facts": dict(self.facts),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodeResult:
        return cls(
            name=str(data["name"]),
            findings=tuple(Finding.from_dict(f) for f in data.get("findings", [])),
            address=str(data.get("address", "")),
            profile=str(data.get("profile", "")),
            connection=str(data.get("connection", "")),
            duration_s=float(data.get("duration_s", 0.0)),
            evidence=tuple(EvidenceRecord.from_dict(e) for e in data.get("evidence", [])),
            facts=dict(data.get("facts", {})),
        )


# The facts a brief keeps by default: what the reports' node table shows.
BRIEF_FACTS = ("driver_version", "cuda_version", "gpu_count", "gpu_model")


class NodeBrief(NamedTuple):
    """What a run keeps in memory of a finished node once its full result is on disk (runner/record.py NodeSpool):
    enough for the run's verdict and counts, the folded matrix, the "All nodes" table and the cluster checks.

    ``checks``, ``facts`` and ``kept`` are shared between nodes with equal values (a healthy fleet has a handful of
    distinct ones), so a brief costs about one small tuple per node."""

    name: str
    verdict: Verdict
    profile: str = ""
    duration_s: float = 0.0
    address: str = ""
    # The worst verdict of each check, in the order the node's findings first name it.
    checks: tuple[tuple[str, Verdict], ...] = ()
    # The facts the cluster checks and the reports' node table read (a subset of NodeResult.facts).
    facts: Mapping[str, Any] = {}
    # The findings the cluster checks read (power.node), in order.
    kept: tuple[Finding, ...] = ()
    # The run was interrupted before this node finished (NodeResult.interrupted).
    interrupted: bool = False
    # The checks a waiver accepted a finding of (Finding.waiver), in order: the reports read those nodes back.
    waived: tuple[str, ...] = ()

    @classmethod
    def of(cls, node: NodeResult, fact_keys: Iterable[str] = BRIEF_FACTS, keep: Iterable[str] = ()) -> NodeBrief:
        worst: dict[str, Verdict] = {}
        interrupted = False
        waived: dict[str, None] = {}
        for finding in node.findings:
            interrupted = interrupted or finding.reason is ErrorReason.INTERRUPTED
            if finding.waiver is not None:
                waived[finding.check] = None
            current = worst.get(finding.check)
            if current is None or finding.verdict.severity > current.severity:
                worst[finding.check] = finding.verdict
        wanted = set(keep)
        return cls(node.name, Verdict.worst(worst.values()), node.profile, node.duration_s, node.address,
                   tuple(worst.items()), {k: node.facts[k] for k in fact_keys if k in node.facts},
                   tuple(f for f in node.findings if f.check in wanted) if wanted else (), interrupted,
                   tuple(waived))


def node_briefs(nodes: Sequence[NodeResult]) -> Sequence[NodeBrief]:
    """The briefs of ``nodes``: kept by a spooled node list, computed (one pass) for nodes held in memory."""
    briefs = getattr(nodes, "briefs", None)
    if briefs is not None:
        return briefs  # type: ignore[no-any-return]
    return [NodeBrief.of(n) for n in nodes]


# Facts compared for version drift, beyond any fact whose name ends in "_version".
_VERSION_FACTS = ("firmware", "vbios", "inforom")


def version_facts(node: NodeResult) -> dict[str, str]:
    """component -> version text, from facts named ``*_version`` (and firmware/VBIOS/InfoROM facts)."""
    out = {}
    for key, value in node.facts.items():
        name = str(key)
        lowered = name.lower()
        if not (lowered.endswith("_version") or any(word in lowered for word in _VERSION_FACTS)):
            continue
        if value is None or value == "" or isinstance(value, bool):
            continue
        component = name[: -len("_version")] if lowered.endswith("_version") else name
        if lowered == "firmware" and isinstance(value, Mapping):
            # {component: {unit: version}} (firmware.minimum): one entry per component, so that a diff names the
            # component that changed and how, not the whole inventory.
            out.update({f"{name}.{part}": _units(units) for part, units in value.items()})
            continue
        out[component] = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return out


def _units(units: Any) -> str:
    """'96.00.74.00.1C' when every unit runs it, else each version after its units ('GPU 5: 96.00.61.00.01; ...')."""
    if not isinstance(units, Mapping):
        return str(units)
    by_version: dict[str, list[str]] = {}
    for unit, version in units.items():
        by_version.setdefault(str(version), []).append(str(unit))
    if len(by_version) == 1:
        return next(iter(by_version))
    return "; ".join(f"{', '.join(names)}: {version}" for version, names in sorted(by_version.items()))


def node_verdicts(nodes: Sequence[NodeResult]) -> list[Verdict]:
    briefs = getattr(nodes, "briefs", None)
    if briefs is not None:
        return [b.verdict for b in briefs]
    return [n.verdict for n in nodes]


def cluster_verdict(node_verdicts: Iterable[Verdict], fail_on_warn: bool = False) -> ClusterVerdict:
    """READY only when every node passed (SKIP-only nodes count as passed); any FAIL is NOT_READY."""
    verdicts = list(node_verdicts)
    if not verdicts:
        return ClusterVerdict.INCOMPLETE
    if any(v is Verdict.FAIL or (fail_on_warn and v is Verdict.WARN) for v in verdicts):
        return ClusterVerdict.NOT_READY
    if any(v is Verdict.ERROR for v in verdicts):
        return ClusterVerdict.INCOMPLETE
    return ClusterVerdict.READY


def exit_code_for(verdict: ClusterVerdict, interrupted: bool = False, signal_exit: int = 130) -> int:
    if interrupted:
        return signal_exit
    return {
        ClusterVerdict.READY: ExitCode.READY,
        ClusterVerdict.NOT_READY: ExitCode.NOT_READY,
        ClusterVerdict.INCOMPLETE: ExitCode.INCOMPLETE,
        # Callers pass RunResult.outcome, which a plan has too; a plan without one exits as it could be made.
        ClusterVerdict.PLAN: ExitCode.READY,
    }[verdict]


@dataclass(frozen=True)
class RunResult:
    """A whole run: its identity, every node, cluster-level findings and the verdict."""

    run_id: str
    cluster: str
    phase: str
    # A tuple, or (a validate run's nodes) a sequence that reads each node back from disk: iterate it, do not
    # build lists of it (runner/record.py SpooledNodes).
    nodes: Sequence[NodeResult]
    cluster_findings: tuple[Finding, ...] = ()
    started_at: str = ""
    finished_at: str = ""
    duration_s: float = 0.0
    level: str = "quick"
    profiles: Mapping[str, str] = field(default_factory=dict)
    interrupted: bool = False
    fail_on_warn: bool = False
    nvdeploy_version: str = ""
    inventory: str = ""
    user: str = ""
    # install / optimize / run: one entry per phase (steps, changes before -> after, re-validation), as plain data
    # (nvdeploy/phases/rollout.py PhaseResult.to_dict). Empty for a plain validate run.
    phases: tuple[Mapping[str, Any], ...] = ()
    # A dry-run (install, optimize, run --dry-run): a plan, never a readiness verdict. Decided here, once: every
    # writer shows ``verdict`` (PLAN) and ``summary``, and none says READY or NOT_READY for it.
    plan: bool = False

    @property
    def verdict(self) -> ClusterVerdict:
        return ClusterVerdict.PLAN if self.plan else self.outcome

    @property
    def outcome(self) -> ClusterVerdict:
        """What the nodes' verdicts add up to: the verdict of a run that is not a plan, and a plan's exit status
        (a plan that could not be made for a node, FAIL or ERROR, exits non-zero)."""
        verdicts = node_verdicts(self.nodes) + [f.verdict for f in self.cluster_findings]
        verdict = cluster_verdict(verdicts, self.fail_on_warn)
        if self.interrupted and verdict is ClusterVerdict.READY:
            return ClusterVerdict.INCOMPLETE
        return verdict

    def counts(self) -> dict[str, int]:
        counts = {v.value: 0 for v in Verdict}
        for verdict in node_verdicts(self.nodes):
            counts[verdict.value] += 1
        return counts

    def summary(self) -> str:
        """One sentence: the verdict and why."""
        counts = self.counts()
        total = len(self.nodes)
        if self.plan:
            return self._plan_summary(total, counts)
        parts = [f"{counts[v]} {v}" for v in ("FAIL", "ERROR", "WARN", "PASS", "SKIP") if counts[v]]
        head = {
            ClusterVerdict.READY: f"All {total} nodes passed",
            ClusterVerdict.NOT_READY: f"{counts['FAIL']} of {total} nodes failed"
            if counts["FAIL"]
            else f"{total} nodes checked; cluster-level or warning checks failed",
            ClusterVerdict.INCOMPLETE: f"No failure found, but {counts['ERROR']} of {total} nodes could not be "
            "fully checked",
        }[self.verdict]
        if self.interrupted:
            head = "Run interrupted; " + head[0].lower() + head[1:]
        return f"{head} ({', '.join(parts) or 'no nodes'})."

    def _plan_summary(self, total: int, counts: Mapping[str, int]) -> str:
        would = sum(int((p.get("counts") or {}).get("would_change", 0)) for p in self.phases)
        changing = len({n.get("name") for p in self.phases for n in p.get("nodes") or ()
                        if any(s.get("status") == "would_change" for s in n.get("steps") or ())})
        head = f"A plan, not a readiness verdict: nothing was changed on the {total} node(s)"
        if self.interrupted:
            head = "Dry-run interrupted; " + head[0].lower() + head[1:]
        text = f"{head}; {would} step(s) would change {changing} node(s)"
        unplanned = counts["FAIL"] + counts["ERROR"]
        if unplanned:
            text += f"; {unplanned} node(s) could not be planned ({counts['FAIL']} FAIL, {counts['ERROR']} ERROR)"
        return text + "."

    def to_dict(self, nodes: bool = True) -> dict[str, Any]:
        """The run as plain data; ``nodes=False`` leaves ``nodes`` empty (a streaming writer adds them one by one)."""
        data = self._to_dict(nodes)
        if self.phases:
            data["phases"] = [dict(p) for p in self.phases]
        return data

    def _to_dict(self, nodes: bool = True) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "run_id": self.run_id,
            "cluster": self.cluster,
            "phase": self.phase,
            "level": self.level,
            "verdict": self.verdict.value,
            # "plan" for a dry-run (verdict PLAN), "verdict" for every other run
            "kind": "plan" if self.plan else "verdict",
            "summary": self.summary(),
            "counts": self.counts(),
            "interrupted": self.interrupted,
            "fail_on_warn": self.fail_on_warn,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "duration_s": round(self.duration_s, 3),
            "profiles": dict(self.profiles),
            "nvdeploy_version": self.nvdeploy_version,
            "inventory": self.inventory,
            "user": self.user,
            "cluster_findings": [f.to_dict() for f in self.cluster_findings],
            "nodes": [n.to_dict() for n in self.nodes] if nodes else [],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunResult:
        return cls(
            run_id=str(data["run_id"]),
            cluster=str(data["cluster"]),
            phase=str(data.get("phase", "validate")),
            nodes=tuple(NodeResult.from_dict(n) for n in data.get("nodes", [])),
            cluster_findings=tuple(Finding.from_dict(f) for f in data.get("cluster_findings", [])),
            started_at=str(data.get("started_at", "")),
            finished_at=str(data.get("finished_at", "")),
            duration_s=float(data.get("duration_s", 0.0)),
            level=str(data.get("level", "quick")),
            profiles=dict(data.get("profiles", {})),
            interrupted=bool(data.get("interrupted", False)),
            fail_on_warn=bool(data.get("fail_on_warn", False)),
            nvdeploy_version=str(data.get("nvdeploy_version", "")),
            inventory=str(data.get("inventory", "")),
            user=str(data.get("user", "")),
            phases=tuple(dict(p) for p in data.get("phases", []) if isinstance(p, dict)),
            plan=data.get("kind") == "plan",
        )
