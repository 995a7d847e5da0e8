"""Prometheus textfile output for node_exporter's textfile collector (``--collector.textfile.directory``).

One gauge family per concept, every label value escaped (backslash, double quote, newline), written atomically
(temporary file in the same folder, then rename) so the collector never reads half a file. The file is readable
by others (0644): node_exporter usually runs as its own user. Point ``path`` at ``<textfile dir>/nvdeploy.prom``.

Metrics (all gauges):
- ``nvdeploy_run_info{cluster,run_id,phase,level,nvdeploy_version,profiles}`` 1
- ``nvdeploy_run_timestamp_seconds{cluster}``, ``nvdeploy_run_duration_seconds{cluster}``
- ``nvdeploy_cluster_verdict{cluster,verdict}`` 1 for the verdict of the run, 0 for the others
- ``nvdeploy_cluster_nodes{cluster,verdict}`` nodes per verdict
- ``nvdeploy_node_severity{cluster,node}`` the node's verdict: 0 SKIP, 1 PASS, 2 WARN, 3 ERROR, 4 FAIL
- ``nvdeploy_node_ready{cluster,node}`` 1 when the node passed (PASS, or SKIP only; WARN too unless fail-on-warn)
- ``nvdeploy_check_severity{cluster,node,check,verdict}`` for each check that did not pass on a node (WARN 2,
  ERROR 3, FAIL 4); a check that passed has no series, which keeps a 2,000-node fleet to a few thousand lines
- ``nvdeploy_node_info{cluster,node,profile,driver_version,cuda_version}`` 1; ``profile`` is always the stamped
  ``name@version`` form, on unreached nodes too (one profile, one label value, so joins and ``count by`` hold)
- ``nvdeploy_node_bandwidth_bytes_per_second{cluster,node,metric}`` (every bandwidth metric, see report.metrics)
  and ``nvdeploy_bandwidth_floor_bytes_per_second{cluster,metric,profile}`` the floor it is judged against, once
  per profile. Prometheus names carry base units: bytes per second, never GB/s or "gbps" (which reads as gigabits)
- ``nvdeploy_node_xid_events{cluster,node,xid}`` Xid events seen in the kernel log (from the ``xid_counts`` fact)
- ``nvdeploy_waived_until_seconds{cluster,node,check,gpu,verdict,owner}`` for each finding a waiver accepted
  (``node`` empty for a cluster finding, ``verdict`` the one it had): the Unix time its waiver lapses (the end of
  its last day, UTC), so ``nvdeploy_waived_until_seconds - time() < 7 * 86400`` names the waivers about to lapse
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Iterable, Mapping, Union

from nvdeploy.files import atomic_file
from nvdeploy.report.metrics import node_metrics
from nvdeploy.results import ClusterVerdict, Finding, RunResult, Verdict

# Bytes per second in one unit of each bandwidth unit a metric may carry (GB/s as nccl-tests means it: 1e9).
_BYTES_PER_SECOND = {"GB/s": 1e9, "GiB/s": 2.0 ** 30, "MB/s": 1e6, "MiB/s": 2.0 ** 20, "Gb/s": 1.25e8,
                     "Gbit/s": 1.25e8, "Gbps": 1.25e8}


def escape_label(value: object) -> str:
    """A label value as the text format wants it: ``\\`` -> ``\\\\``, ``"`` -> ``\\"``, newline -> ``\\n``."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: Mapping[str, object]) -> str:
    return "{" + ",".join(f'{k}="{escape_label(v)}"' for k, v in labels.items()) + "}"


def _number(value: float) -> str:
    if value != value:  # NaN
        return "NaN"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


class _Family:
    def __init__(self, name: str, help_text: str) -> None:
        self.name = name
        self.help = help_text
        self.samples: list[str] = []

    def add(self, labels: Mapping[str, object], value: float) -> None:
        self.samples.append(f"{self.name}{_labels(labels)} {_number(value)}")

    def lines(self) -> Iterable[str]:
        if not self.samples:
            return []
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} gauge", *self.samples]


def _epoch(timestamp: str) -> float:
    try:
        parsed = dt.datetime.fromisoformat(timestamp)
    except ValueError:
        return float("nan")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.timezone.utc)
    return parsed.timestamp()


def _stamp(profile: str, stamps: Mapping[str, str]) -> str:
    """A node's profile as ``name@version``: a node that was never reached carries the inventory's bare name."""
    if "@" in profile:
        return profile
    return stamps.get(profile, profile)


def _waived(family: _Family, base: Mapping[str, object], findings: Iterable[Finding]) -> None:
    """One series per waived finding's labels; two Xids of one GPU waived alike are one series (the first to lapse):
    a textfile with a series twice is rejected whole by node_exporter."""
    lapses: dict[tuple[str, str, str, str], float] = {}
    for finding in findings:
        waiver = finding.waiver
        if waiver is None:
            continue
        try:
            last_day = dt.datetime.fromisoformat(waiver.until).replace(tzinfo=dt.timezone.utc)
        except ValueError:
            continue
        key = (finding.check, "" if finding.gpu is None else str(finding.gpu), waiver.verdict.value, waiver.owner)
        end = (last_day + dt.timedelta(days=1)).timestamp()
        lapses[key] = min(end, lapses.get(key, end))
    for (check, gpu, verdict, owner), end in lapses.items():
        family.add({**base, "check": check, "gpu": gpu, "verdict": verdict, "owner": owner}, end)


def render_prometheus(run: RunResult) -> str:
    """The run in the Prometheus text exposition format (version 0.0.4)."""
    cluster = run.cluster
    fam = {name: _Family(f"nvdeploy_{name}", text) for name, text in [
        ("run_info", "The last nvdeploy run whose results are in this file."),
        ("run_timestamp_seconds", "When the last run finished (Unix time)."),
        ("run_duration_seconds", "How long the last run took."),
        ("cluster_verdict", "Cluster verdict of the last run: 1 for the current verdict, 0 for the others."),
        ("cluster_nodes", "Nodes per verdict in the last run."),
        ("node_severity", "Node verdict as a number: 0 SKIP, 1 PASS, 2 WARN, 3 ERROR, 4 FAIL."),
        ("node_ready", "1 when the node passed every check of the last run."),
        ("check_severity", "A check that did not pass on a node: 2 WARN, 3 ERROR, 4 FAIL (passing checks: no series)."),
        ("node_info", "Versions and profile of a node (always 1)."),
        ("node_bandwidth_bytes_per_second", "Bandwidth measured on the node, in bytes per second."),
        ("bandwidth_floor_bytes_per_second", "The profile floor a bandwidth is judged against, in bytes per second."),
        ("node_xid_events", "Xid events in the node's kernel log at the time of the run, by Xid code."),
        ("waived_until_seconds", "A finding a waiver accepted (its own verdict, the waiver's owner): when the waiver "
                                 "lapses, Unix time."),
    ]}
    fam["run_info"].add({"cluster": cluster, "run_id": run.run_id, "phase": run.phase, "level": run.level,
                         "nvdeploy_version": run.nvdeploy_version,
                         "profiles": ",".join(sorted(run.profiles.values()))}, 1)
    finished = _epoch(run.finished_at or run.started_at)
    if finished == finished:
        fam["run_timestamp_seconds"].add({"cluster": cluster}, finished)
    fam["run_duration_seconds"].add({"cluster": cluster}, round(run.duration_s, 3))
    for verdict in ClusterVerdict:
        if verdict is ClusterVerdict.PLAN and not run.plan:
            continue  # a validation's file keeps its three series; only a dry-run's says PLAN
        fam["cluster_verdict"].add({"cluster": cluster, "verdict": verdict.value}, int(run.verdict is verdict))
    for verdict, count in run.counts().items():
        fam["cluster_nodes"].add({"cluster": cluster, "verdict": verdict}, count)
    floors: dict[tuple[str, str], float] = {}
    ready_verdicts = {Verdict.PASS, Verdict.SKIP} | (set() if run.fail_on_warn else {Verdict.WARN})
    for node in run.nodes:
        base = {"cluster": cluster, "node": node.name}
        fam["node_severity"].add(base, node.verdict.severity)
        fam["node_ready"].add(base, int(node.verdict in ready_verdicts))
        worst: dict[str, Verdict] = {}
        for finding in node.findings:
            if finding.check not in worst or finding.verdict.severity > worst[finding.check].severity:
                worst[finding.check] = finding.verdict
        for check, verdict in worst.items():
            if verdict in (Verdict.WARN, Verdict.ERROR, Verdict.FAIL):
                fam["check_severity"].add({**base, "check": check, "verdict": verdict.value}, verdict.severity)
        _waived(fam["waived_until_seconds"], base, node.findings)
        profile = _stamp(node.profile, run.profiles)
        fam["node_info"].add({**base, "profile": profile,
                              "driver_version": node.facts.get("driver_version") or "",
                              "cuda_version": node.facts.get("cuda_version") or ""}, 1)
        for metric in node_metrics(node):
            factor = _BYTES_PER_SECOND.get(metric.unit)
            if factor is None:
                continue
            fam["node_bandwidth_bytes_per_second"].add({**base, "metric": metric.key}, round(metric.value * factor))
            if metric.floor is not None:
                floors[(metric.key, profile)] = round(metric.floor * factor)
        xids = node.facts.get("xid_counts")
        if isinstance(xids, Mapping):
            for xid, count in sorted(xids.items(), key=lambda item: str(item[0])):
                if isinstance(count, (int, float)) and not isinstance(count, bool):
                    fam["node_xid_events"].add({**base, "xid": xid}, count)
    _waived(fam["waived_until_seconds"], {"cluster": cluster, "node": ""}, run.cluster_findings)
    for (key, profile), floor in sorted(floors.items()):
        fam["bandwidth_floor_bytes_per_second"].add({"cluster": cluster, "metric": key, "profile": profile}, floor)
    lines = [line for family in fam.values() for line in family.lines()]
    return "\n".join(lines) + "\n"


def write_prometheus(run: RunResult, path: Union[str, Path]) -> Path:
    """Write :func:`render_prometheus` to ``path`` atomically (mode 0644) and return the path.

    Raises:
        OutputError: the folder does not exist or cannot be written (the CLI exits 2 with its message).
    """
    target = Path(path)
    # 0644: node_exporter's textfile collector reads it, usually as another user.
    with atomic_file(target, mode=0o644) as handle:
        handle.write(render_prometheus(run).encode("utf-8"))
    return target
