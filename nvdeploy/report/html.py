"""The self-contained HTML report: the answer first, every failure one click from its evidence, nothing to install.

Jinja2 with autoescape on (explicitly, not by file extension); nothing from a node or an inventory is marked
safe. The page's Content-Security-Policy is ``default-src 'none'``: no remote load of any kind, styles inline,
and one script, our own constant text (``templates/report.js.j2``), allowed by its sha256 hash. The script gets
its data from a ``<script type="application/json">`` block written with ``|tojson`` (which escapes ``<``, ``>``,
``&`` and quotes), and only changes classes and ``textContent``: nothing from a node is ever executed.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import io
import json
from pathlib import Path
from typing import IO, Any, Optional, Sequence

import jinja2
from markupsafe import Markup

from nvdeploy.config.hostrange import fold
from nvdeploy.report.burnin_chart import burnin_charts
from nvdeploy.report.chart import LOW_PCT, bandwidth_charts
from nvdeploy.report.compare import RunDiff, group_changes, group_drift
from nvdeploy.report.evidence import Excerpt, excerpt, safe_href
from nvdeploy.report.view import (
    CELL_TEXT,
    NEEDS_ACTION,
    action_list,
    action_text,
    attention,
    firmware_rows,
    fold_phase_nodes,
    matrix,
    not_run,
    not_run_text,
    resume_command,
    waived_findings,
    why,
)
from nvdeploy.results import NodeBrief, NodeResult, RunResult, node_briefs

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("nvdeploy.report", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENV.globals["fold"] = fold
_ENV.globals["fold_phase_nodes"] = fold_phase_nodes

# Beyond this many characters of evidence excerpts, further findings only link to their file (2,000 failing
# nodes must not make a 100 MB page).
EXCERPT_BUDGET = 3_000_000
OPEN_SECTIONS = 25  # node sections shown unfolded when there are at most this many
VALUE_LIMIT = 160  # characters of an observed/expected value shown in a table cell
ORDER = ("FAIL", "ERROR", "WARN", "PASS", "SKIP")
WRITE_CHUNK = 1 << 16  # characters of rendered page gathered per write
FOLD_NODES_OVER = 1000  # beyond this many nodes, the "All nodes" table folds the nodes that need no action


def report_script() -> str:
    """The report's script, exactly as embedded (its hash is in the CSP)."""
    loader = _ENV.loader
    assert loader is not None
    return loader.get_source(_ENV, "report.js.j2")[0]


def script_hash(script: str) -> str:
    """The CSP source expression for ``script``: ``'sha256-<base64>'``."""
    digest = hashlib.sha256(script.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


def content_security_policy(script: str) -> str:
    return (f"default-src 'none'; script-src {script_hash(script)}; style-src 'unsafe-inline'; img-src data:; "
            "base-uri 'none'; form-action 'none'")


def _value(value: Any, unit: str = "") -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, default=str) if isinstance(value, (dict, list)) \
        else str(value)
    text = " ".join(text.split())
    if len(text) > VALUE_LIMIT:
        text = text[: VALUE_LIMIT - 1] + "\u2026"
    return f"{text} {unit}".strip() if unit else text


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    value = float(count)
    for unit in ("KB", "MB", "GB"):
        value /= 1024
        if value < 1024 or unit == "GB":
            break
    return f"{value:.1f} {unit}"


def _node_sections(nodes: list[tuple[int, NodeResult]], run_dir: Optional[Path],
                   budget: int) -> tuple[list[dict[str, Any]], int]:
    sections = []
    used = 0
    dropped = 0
    for index, node in nodes:
        items = []
        for finding in node.findings:
            if finding.verdict not in NEEDS_ACTION:
                continue
            found: Optional[Excerpt] = None
            if run_dir is not None and finding.evidence:
                if used < budget:
                    found = excerpt(run_dir, finding.evidence, finding)
                    used += sum(len(line) + 8 for line in found.lines) if found else 0
                else:
                    dropped += 1
            items.append({"finding": finding, "excerpt": found, "href": safe_href(finding.evidence),
                          "observed": _value(finding.observed, finding.unit if finding.observed is not None else ""),
                          "expected": _value(finding.expected, finding.unit if finding.expected is not None else "")})
        items.sort(key=lambda item: -item["finding"].verdict.severity)
        evidence = []
        for record in node.evidence:
            href = safe_href(record.path)
            if href is not None:
                evidence.append({"name": Path(record.path).name, "href": href, "size": _size(record.bytes_total or 0),
                                 "rc": record.rc, "truncated": record.truncated})
        sections.append({"index": index, "node": node, "findings": items, "evidence": evidence,
                         "open": len(nodes) <= OPEN_SECTIONS,
                         "bad_checks": sorted({f.check for f in node.findings if f.verdict in NEEDS_ACTION})})
    return sections, dropped


def _gpus(facts: Any) -> str:
    count = facts.get("gpu_count")
    model = facts.get("gpu_model")
    if count is None and not model:
        return ""
    return f"{count if count is not None else '?'} \u00d7 {model}" if model else str(count)


def _all_nodes(briefs: Sequence[NodeBrief]) -> tuple[list[dict[str, Any]], list[list[int]]]:
    """(rows, groups) of the "All nodes" table. Up to FOLD_NODES_OVER nodes, one row per node. Beyond, a row per
    node that needs action, and the others folded into one host-range row per identical (verdict, driver, CUDA,
    GPUs, profile), so a 10,000-node fleet is a table of tens of rows, not 10,000; ``groups`` holds the node
    indexes of each folded row, for the page's search. Rows name the node's brief (name, profile, duration):
    the table needs nothing of the full result."""
    fold_ok = len(briefs) > FOLD_NODES_OVER
    out: list[dict[str, Any]] = []
    folded: dict[tuple[str, ...], dict[str, Any]] = {}
    for index, node in enumerate(briefs):
        if not_run(node):  # listed once, folded, by the caller
            continue
        verdict = node.verdict
        action = verdict in NEEDS_ACTION
        row = {"index": index, "node": node, "verdict": verdict.value, "action": action,
               "driver": _value(node.facts.get("driver_version")), "cuda": _value(node.facts.get("cuda_version")),
               "gpus": _value(_gpus(node.facts))}
        if action or not fold_ok:
            row["bad"] = ", ".join(sorted({check for check, worst in node.checks if worst in NEEDS_ACTION}))
            out.append(row)
            continue
        key = (row["verdict"], row["driver"], row["cuda"], row["gpus"], node.profile)
        group = folded.get(key)
        if group is None:
            group = folded[key] = {**row, "bad": "", "group": len(folded), "indexes": [], "names": [],
                                   "low": node.duration_s, "high": node.duration_s}
            out.append(group)
        group["indexes"].append(index)
        group["names"].append(node.name)
        group["low"] = min(group["low"], node.duration_s)
        group["high"] = max(group["high"], node.duration_s)
    groups = []
    for row in out:
        if "group" in row:
            row["hosts"] = fold(row.pop("names"))
            groups.append(row["indexes"])
    return out, groups


def _when(timestamp: str) -> str:
    try:
        parsed = dt.datetime.fromisoformat(timestamp)
    except ValueError:
        return timestamp
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(dt.timezone.utc)
        return parsed.strftime("%Y-%m-%d %H:%M UTC")
    return parsed.strftime("%Y-%m-%d %H:%M")


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s"


def _meta(run: RunResult) -> list[tuple[str, str]]:
    profiles = ", ".join(sorted(set(run.profiles.values()))) or "none"
    return [("Profile", profiles), ("Level", run.level), ("Started", _when(run.started_at) if run.started_at else "?"),
            ("Duration", _duration(run.duration_s)), ("Run by", run.user or "?"), ("Run id", run.run_id),
            ("Inventory", run.inventory or "?"), ("nvdeploy", run.nvdeploy_version or "?")]


def _sizing_rows(run: RunResult, briefs: Sequence[NodeBrief]) -> list[dict[str, Any]]:
    """Measured vs profile/datasheet figures (busbw, power) that ``nvdeploy size --run`` would use; empty when the
    run measured none. A profile the built-in catalog lacks (or cannot read) just has no reference figure."""
    from nvdeploy.config.profiles import ProfileCatalog
    from nvdeploy.config.yamlfile import ConfigError
    from nvdeploy.sizing.measured import comparison_rows
    from nvdeploy.sizing.sku import sku_figures

    names = {stamp.split("@", 1)[0] for stamp in run.profiles.values()}
    names.update(brief.profile.split("@", 1)[0] for brief in briefs if brief.profile)
    skus = {}
    try:
        catalog = ProfileCatalog()
    except FileNotFoundError:
        return comparison_rows(run, {})
    for name in sorted(names):
        try:
            skus[name] = sku_figures(catalog.get(name))
        except (KeyError, ConfigError, OSError):
            continue
    return comparison_rows(run, skus)


def render_html(run: RunResult, diff: Optional[RunDiff] = None, run_dir: Optional[Path] = None,
                excerpt_budget: int = EXCERPT_BUDGET) -> bytes:
    """The report as one self-contained HTML file (see :func:`write_html`)."""
    buffer = io.BytesIO()
    write_html(run, buffer, diff=diff, run_dir=run_dir, excerpt_budget=excerpt_budget)
    return buffer.getvalue()


def write_html(run: RunResult, out: IO[bytes], diff: Optional[RunDiff] = None, run_dir: Optional[Path] = None,
               excerpt_budget: int = EXCERPT_BUDGET) -> None:
    """Stream the report as one self-contained HTML file into ``out`` (the page is never held whole in memory).

    Args:
        run: the run to show.
        diff: a comparison with a baseline run (:func:`nvdeploy.report.compare.compare_runs`), shown when given.
        run_dir: the run folder, to read evidence excerpts from (links are relative to it either way).
        excerpt_budget: characters of evidence excerpts at most; later findings link to their file only.
    """
    # One pass over the briefs for the matrix and the node table; only the nodes that need action are read back
    # (once) for the action list, the why and their sections.
    briefs = node_briefs(run.nodes)
    needing = attention(run, briefs)
    checks, rows = matrix(run, diff, briefs)
    steps = action_list(run, needing, run_dir)
    # A node the interrupt cut off has no findings to show, only that it was not run: one line for all of them.
    unrun = [i for i, brief in enumerate(briefs) if not_run(brief)]
    sections, dropped = _node_sections([item for item in needing if not not_run(item[1])],
                                       Path(run_dir) if run_dir is not None else None, excerpt_budget)
    script = report_script()
    verdict = run.verdict.value
    diff_groups = None
    if diff is not None:
        diff_groups = {"new_failures": group_changes(diff.new_failures),
                       "new_warnings": group_changes(diff.new_warnings),
                       "fixed_checks": group_changes(diff.fixed_checks), "drift": group_drift(diff.drift),
                       "not_rechecked": group_changes(diff.not_rechecked)}
    all_nodes, groups = _all_nodes(briefs)
    # Who accepted what until when, node findings and cluster findings: the matrix's WAIVED cells link here.
    waived = [{"node": briefs[i].name if i >= 0 else "(cluster)", "finding": f}
              for i, f in waived_findings(run, briefs)]
    burned, burnin_left_out = burnin_charts(run)
    data = {"nodes": [b.name for b in briefs], "rows": [r["indexes"] for r in rows], "groups": groups,
            "not_run": unrun}
    not_run_hosts = fold([briefs[i].name for i in unrun]) if unrun else ""
    chunks = _ENV.get_template("report.html.j2").generate(
        run=run, verdict=verdict, verdict_text=verdict.replace("_", " "), why=why(run, needing), counts=run.counts(),
        order=ORDER, meta=_meta(run), steps=steps, action_text=action_text(run, steps, run_dir), checks=checks,
        rows=rows, not_run_count=len(unrun), not_run_hosts=not_run_hosts, not_run_text=not_run_text(run, run_dir),
        resume_command=resume_command(run, run_dir),
        cell_text=CELL_TEXT, cluster_findings=list(run.cluster_findings), sizing_rows=_sizing_rows(run, briefs),
        firmware=firmware_rows(run),
        diff=diff, diff_groups=diff_groups, charts=bandwidth_charts(run), low_pct=LOW_PCT, sections=sections,
        burnin_charts=burned, burnin_left_out=burnin_left_out,
        excerpts_dropped=dropped, all_nodes=all_nodes, waived=waived, data=data, script=Markup(script),  # noqa: S704
        csp=Markup(content_security_policy(script)),  # noqa: S704 - our constant: quotes must stay quotes
        rendered_at=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    pending: list[str] = []
    size = 0
    for chunk in chunks:
        pending.append(chunk)
        size += len(chunk)
        if size >= WRITE_CHUNK:
            out.write("".join(pending).encode("utf-8"))
            pending, size = [], 0
    out.write("".join(pending).encode("utf-8"))
