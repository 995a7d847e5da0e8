"""Waivers: a named finding accepted on named nodes (and GPUs) until a date, with an owner and a reason.

```yaml
# waivers.yaml (validate --waivers FILE)
waivers:
  - check: memory.remapped_rows      # a check id (nvdeploy checks list)
    nodes: gpu017                     # a host, a folded range (gpu[017-019]) or a list of them
    gpus: [3]                         # optional: only these GPUs' findings
    until: 2027-01-15                 # the last day (UTC) it holds
    owner: jdoe@example.com
    reason: "remapped rows: RMA 4711 open"
  - check: dcgm.diag_r3
    nodes: gpu[020-021]
    gpus: [0]
    dcgm_error_codes: [101]           # optional: DCGM itself ignores these error codes (dcgmi diag --ignoreErrorCodes)
    until: 2027-01-15
    owner: jdoe@example.com
    reason: "known Xid 79 history, RMA 4712"
  - check: kmsg.xid
    nodes: gpu014
    xid_codes: [13]                   # optional, kmsg.xid only: only these Xids (an Xid 79 beside them still counts)
    until: 2027-01-15
    owner: jdoe@example.com
    reason: "Xid 13 from a user's job, ticket 4713"
```

A waived WARN or FAIL becomes SKIP (it no longer counts towards the verdict or the exit status) and carries the
waiver (results.py ``Waived``: the verdict it had, owner, reason, last day, file:line), from which every writer
shows it WAIVED with who accepted it, why and until when; results.json's summary of it still starts ``WAIVED
<verdict> until <date> (owner ...: reason; file:line)`` for older readers. ERROR is never waived: could not
determine is not a known fault. A cluster finding that sums up its check's node findings (an outlier, a version
that differs) is waived with them once every one of them that counted is (:func:`waive_cluster`). A waiver holds
up to its date as of the day its run started (:func:`run_date`), however late the run is resumed or rebuilt; past
it it waives nothing: the finding counts again, and :func:`expired` gives the error naming its file and line (the
run goes on: a nightly validation does not stop the day a waiver lapses). A malformed waiver, an unknown check, or
``gpus`` on a check whose findings name no GPU (it would waive nothing) is a ConfigError naming the file, line and
key (:func:`load_waivers`): the run does not start.

``dcgm_error_codes`` (a waiver of a ``dcgm.diag_rN`` check only) goes further: until the date, the node's
``dcgmi diag`` runs with ``--ignoreErrorCodes`` for those codes on the waiver's GPUs (all of them without
``gpus``), so DCGM itself does not fail a test on the waived error and the rest of that test still counts
(:func:`dcgm_ignore_error_codes`). The option's syntax is DCGM's own (DCGM 4.1.0 and later;
dcgmi/CommandLineParser.cpp and nvvs IgnoreErrorCodesHelper.cpp in NVIDIA/DCGM): ``28,140`` on every GPU,
``gpu0:28;gpu1:140,92`` per GPU, a GPU named once; only the codes in :data:`DCGM_IGNORABLE` are accepted (any other
makes dcgmi reject the whole run), so the schema accepts only those.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from pathlib import Path
from typing import AbstractSet, Any, Iterable, Mapping, Optional, Sequence, Union

from nvdeploy.config.hostrange import HostRangeError, expand
from nvdeploy.config.yamlfile import ConfigError, line_of, load_yaml_file
from nvdeploy.results import Finding, NodeResult, Verdict, Waived

KEYS = {"check", "nodes", "gpus", "until", "owner", "reason", "dcgm_error_codes", "xid_codes"}
REQUIRED = ("check", "nodes", "until", "owner", "reason")
WAIVABLE = (Verdict.WARN, Verdict.FAIL)
# The check whose findings carry an Xid (Finding.code), the one a waiver's ``xid_codes`` may narrow.
XID_CHECK = "kmsg.xid"
# The error codes nvvs lets --ignoreErrorCodes name (its defaultValidErrorCodes, IgnoreErrorCodesHelper.cpp; the
# numbers from dcgmlib/dcgm_errors.h of NVIDIA/DCGM).
DCGM_IGNORABLE = {40: "DCGM_FR_THERMAL_VIOLATIONS", 41: "DCGM_FR_THERMAL_VIOLATIONS_TS",
                  80: "DCGM_FR_ROW_REMAP_FAILURE", 81: "DCGM_FR_UNCONTAINED_ERROR", 85: "DCGM_FR_PENDING_ROW_REMAP",
                  101: "DCGM_FR_XID_ERROR"}
# The checks whose collector is dcgmi diag, one per diag level.
DCGM_DIAG_CHECKS = tuple(f"dcgm.diag_r{level}" for level in (1, 2, 3, 4))


@dataclass(frozen=True)
class Waiver:
    check: str
    nodes: frozenset[str]
    until: dt.date
    owner: str
    reason: str
    gpus: Optional[frozenset[int]] = None
    file: str = ""
    line: Optional[int] = None
    dcgm_error_codes: Optional[frozenset[int]] = None
    xid_codes: Optional[frozenset[int]] = None

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line is not None else self.file

    def active(self, today: dt.date) -> bool:
        return today <= self.until

    def to_dict(self) -> dict[str, Any]:
        """Plain data for the run's header (a resumed or rebuilt run applies the same waivers)."""
        return {"check": self.check, "nodes": sorted(self.nodes), "until": self.until.isoformat(), "owner": self.owner,
                "reason": self.reason, "gpus": sorted(self.gpus) if self.gpus is not None else None,
                "file": self.file, "line": self.line,
                "dcgm_error_codes": sorted(self.dcgm_error_codes) if self.dcgm_error_codes is not None else None,
                "xid_codes": sorted(self.xid_codes) if self.xid_codes is not None else None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Waiver:
        gpus = data.get("gpus")
        codes = data.get("dcgm_error_codes")
        xids = data.get("xid_codes")
        return cls(str(data["check"]), frozenset(data["nodes"]), dt.date.fromisoformat(data["until"]),
                   str(data["owner"]), str(data["reason"]), frozenset(gpus) if gpus is not None else None,
                   str(data.get("file", "")), data.get("line"), frozenset(codes) if codes is not None else None,
                   frozenset(xids) if xids is not None else None)

    def covers(self, finding: Finding, node: str) -> bool:
        if finding.check != self.check or node not in self.nodes or finding.verdict not in WAIVABLE:
            return False
        if self.xid_codes is not None and finding.code not in self.xid_codes:
            return False
        return self.gpus is None or finding.gpu in self.gpus

    def waived(self, verdict: Verdict) -> Waived:
        """What a finding of ``verdict`` this waiver accepts carries (results.py Waived)."""
        return Waived(verdict, self.owner, self.reason, self.until.isoformat(), self.where)


def _date(value: Any, file: str, line: Optional[int]) -> dt.date:
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value.strip())
        except ValueError:
            pass
    raise ConfigError(f"must be a date YYYY-MM-DD, got {value!r}", file, line, "until")


def _nodes(value: Any, file: str, line: Optional[int]) -> frozenset[str]:
    items = value if isinstance(value, list) else [value]
    out: set[str] = set()
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise ConfigError(f"must be a host, a folded range or a list of them, got {item!r}", file, line, "nodes")
        try:
            out.update(expand(item.strip()))
        except HostRangeError as exc:
            raise ConfigError(f"not a host range: {exc}", file, line, "nodes") from None
    return frozenset(out)


def _gpus(value: Any, check: str, gpu_checks: Optional[AbstractSet[str]], file: str,
          line: Optional[int]) -> frozenset[int]:
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in items):
        raise ConfigError(f"must be a GPU index or a list of them, got {value!r}", file, line, "gpus")
    if gpu_checks is not None and check not in gpu_checks:
        # Its findings never name a GPU, so a waiver narrowed to GPUs would waive nothing, silently.
        raise ConfigError(f"{check}'s findings name no GPU, so a waiver of it cannot be narrowed to GPUs: leave "
                          "'gpus' out to waive it on the whole node" + (" (or name the Xids with 'xid_codes')"
                                                                        if check == XID_CHECK else ""),
                          file, line, "gpus")
    return frozenset(items)


def _xid_codes(value: Any, check: str, file: str, line: Optional[int]) -> frozenset[int]:
    key = "xid_codes"
    if check != XID_CHECK:
        raise ConfigError(f"only a waiver of {XID_CHECK} can name Xids (this one waives {check})", file, line, key)
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in items):
        raise ConfigError(f"must be an Xid number or a list of them, got {value!r}", file, line, key)
    return frozenset(items)


def _dcgm_codes(value: Any, check: str, file: str, line: Optional[int]) -> frozenset[int]:
    key = "dcgm_error_codes"
    if check not in DCGM_DIAG_CHECKS:
        raise ConfigError(f"only a waiver of a dcgm.diag_rN check can name DCGM error codes (this one waives {check})",
                          file, line, key)
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        raise ConfigError(f"must be a DCGM error code or a list of them, got {value!r}", file, line, key)
    unknown = sorted(set(items) - set(DCGM_IGNORABLE))
    if unknown:
        allowed = ", ".join(f"{code} ({name})" for code, name in sorted(DCGM_IGNORABLE.items()))
        raise ConfigError(f"DCGM cannot be told to ignore {', '.join(map(str, unknown))}: dcgmi diag "
                          f"--ignoreErrorCodes accepts only {allowed}", file, line, key)
    return frozenset(items)


def parse_waivers(data: Any, file: str, known_checks: Optional[Iterable[str]] = None,
                  gpu_checks: Optional[Iterable[str]] = None) -> list[Waiver]:
    """The waivers of a loaded waivers file, expired ones included (:func:`expired` names them). Raises
    ConfigError (file, line, key) for a malformed entry, a check not in ``known_checks`` or ``gpus`` on a check not
    in ``gpu_checks`` (the checks whose findings name a GPU; each only when given)."""
    if not isinstance(data, dict) or not isinstance(data.get("waivers"), list):
        raise ConfigError("a waivers file needs a 'waivers:' list", file, line_of(data), "waivers")
    known = set(known_checks) if known_checks is not None else None
    per_gpu = frozenset(gpu_checks) if gpu_checks is not None else None
    entries = data["waivers"]
    out: list[Waiver] = []
    for index, entry in enumerate(entries):
        line = line_of(entries, index)
        if not isinstance(entry, dict):
            raise ConfigError("each waiver must be a mapping (check, nodes, until, owner, reason)", file, line,
                              f"waivers[{index}]")
        for key in entry:
            if key not in KEYS:
                raise ConfigError(f"unknown key in a waiver (allowed: {', '.join(sorted(KEYS))})", file,
                                  line_of(entry, key), str(key))
        for key in REQUIRED:
            if key not in entry:
                raise ConfigError("missing required key", file, line, key)
        for key in ("check", "owner", "reason"):
            if not isinstance(entry[key], str) or not entry[key].strip():
                raise ConfigError("must be a non-empty string", file, line_of(entry, key), key)
        check = entry["check"].strip()
        if known is not None and check not in known:
            raise ConfigError(f"unknown check {check!r} (see 'nvdeploy checks list')", file, line_of(entry, "check"),
                              "check")
        until = _date(entry["until"], file, line_of(entry, "until"))
        waiver = Waiver(check, _nodes(entry["nodes"], file, line_of(entry, "nodes")), until, entry["owner"].strip(),
                        entry["reason"].strip(),
                        _gpus(entry["gpus"], check, per_gpu, file, line_of(entry, "gpus")) if "gpus" in entry
                        else None, file, line,
                        _dcgm_codes(entry["dcgm_error_codes"], check, file, line_of(entry, "dcgm_error_codes"))
                        if "dcgm_error_codes" in entry else None,
                        _xid_codes(entry["xid_codes"], check, file, line_of(entry, "xid_codes"))
                        if "xid_codes" in entry else None)
        out.append(waiver)
    return out


def expired(waivers: Sequence[Waiver], today: dt.date) -> list[str]:
    """One error line per waiver past its date, naming its file and line: it waives nothing any more."""
    return [f"{w.where}: waiver of {w.check} on {len(w.nodes)} node(s) by {w.owner} expired on "
            f"{w.until.isoformat()} (today is {today.isoformat()}): its findings count again; renew the date or "
            "remove it" for w in waivers if not w.active(today)]


def load_waivers(path: Union[str, Path], known_checks: Optional[Iterable[str]] = None,
                 gpu_checks: Optional[Iterable[str]] = None) -> list[Waiver]:
    """Read and check a waivers file (see :func:`parse_waivers`)."""
    return parse_waivers(load_yaml_file(path), str(path), known_checks, gpu_checks)


def today_utc() -> dt.date:
    return dt.datetime.now(dt.timezone.utc).date()


def run_date(started_at: Any) -> dt.date:
    """The day (UTC) a run started (its header's ``started_at``): its waivers are judged on that day however late
    it is resumed or rebuilt, so one run's findings are judged alike. Today when the start is not readable."""
    try:
        started = dt.datetime.fromisoformat(str(started_at))
    except ValueError:
        return today_utc()
    if started.tzinfo is None:
        return started.date()
    return started.astimezone(dt.timezone.utc).date()


def dcgm_ignore_error_codes(waivers: Sequence[Waiver], node: str, today: dt.date,
                            gpu_count: Optional[int] = None) -> str:
    """The ``--ignoreErrorCodes`` value for ``node``'s dcgmi diag from the active waivers that name DCGM error
    codes; "" when none does. Codes of a waiver without ``gpus`` hold on every GPU: alone they are DCGM's
    all-GPU form (``40,101``); beside per-GPU ones they are written into each GPU's entry, since DCGM takes an
    all-GPU entry only on its own. GPUs at or beyond ``gpu_count`` (the profile's, when known) are left out, and so
    are all-GPU codes beside per-GPU ones when the count is unknown: DCGM rejects the whole run for a GPU it does
    not test, and a waiver must never widen to GPUs it does not name."""
    everywhere: set[int] = set()
    per_gpu: dict[int, set[int]] = {}
    for waiver in waivers:
        if not waiver.dcgm_error_codes or node not in waiver.nodes or not waiver.active(today):
            continue
        if waiver.gpus is None:
            everywhere.update(waiver.dcgm_error_codes)
            continue
        for gpu in waiver.gpus:
            if gpu_count is None or gpu < gpu_count:
                per_gpu.setdefault(gpu, set()).update(waiver.dcgm_error_codes)
    if not per_gpu:
        return ",".join(str(code) for code in sorted(everywhere))
    if everywhere and gpu_count is not None:
        for gpu in range(gpu_count):
            per_gpu.setdefault(gpu, set()).update(everywhere)
    return ";".join(f"gpu{gpu}:{','.join(str(c) for c in sorted(codes))}" for gpu, codes in sorted(per_gpu.items()))


def waive(finding: Finding, node: str, waivers: Sequence[Waiver], today: dt.date) -> Finding:
    """``finding`` as SKIP carrying its waiver when an active waiver covers it, else unchanged."""
    for waiver in waivers:
        if waiver.active(today) and waiver.covers(finding, node):
            return replace(finding, verdict=Verdict.SKIP, waiver=waiver.waived(finding.verdict))
    return finding


def apply_waivers(nodes: Sequence[NodeResult], waivers: Sequence[Waiver], today: dt.date) -> list[NodeResult]:
    """Every node with its covered findings waived; a node with nothing waived is returned as it was."""
    if not waivers:
        return list(nodes)
    out = []
    for node in nodes:
        findings = tuple(waive(f, node.name, waivers, today) for f in node.findings)
        changed = any(a is not b for a, b in zip(findings, node.findings))
        out.append(replace(node, findings=findings) if changed else node)
    return out


def waive_cluster(findings: Sequence[Finding], node_waivers: Mapping[str, Sequence[Waived]],
                  counting: AbstractSet[str]) -> list[Finding]:
    """The cluster findings, those a waiver reaches through their nodes waived. A WARN or FAIL cluster finding sums
    up its check's node findings (the outliers of fleet.performance, the nodes whose driver differs), so once a
    waiver accepted one of them (``node_waivers``: check -> what the waived node findings carry) and none is left
    that counts (``counting``: the checks with a WARN or FAIL node finding not waived), it is waived too, under the
    waiver that lapses first: the day that one does, the node finding and the cluster finding count again. Whole
    checks, not figures: a fleet.performance outlier still counting keeps every FAIL of that check counting. A
    cluster finding no node finding stands behind (a rack's power budget) is never waived."""
    out = []
    for finding in findings:
        accepted = node_waivers.get(finding.check)
        if finding.verdict in WAIVABLE and accepted and finding.check not in counting:
            first = min(accepted, key=lambda w: w.until)
            finding = replace(finding, verdict=Verdict.SKIP, waiver=replace(first, verdict=finding.verdict))
        out.append(finding)
    return out
