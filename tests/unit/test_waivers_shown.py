"""Waivers as the reader sees them: a waiver is decided once, in the run's record
(``Finding.waiver``: the verdict it had, owner, reason, last day), and the terminal, ``-v``, report.html, results.json,
junit.xml and the Prometheus file all show it from there; a cluster finding whose node findings are all waived is
waived with them; a rebuilt or resumed run judges its waivers on the day it started."""

from __future__ import annotations

import datetime as dt
import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest

from nvdeploy.checks.fleet import CHECK_ID as FLEET
from nvdeploy.cli.commands.run_end import verbose_lines
from nvdeploy.config import waivers as waiver_rules
from nvdeploy.config.waivers import Waiver
from nvdeploy.phases.validate import brief_of
from nvdeploy.report import render_json
from nvdeploy.report.html import render_html
from nvdeploy.report.junit import render_junit
from nvdeploy.report.prometheus import render_prometheus
from nvdeploy.report.text import summary_lines
from nvdeploy.report.view import matrix
from nvdeploy.results import ClusterVerdict, Finding, NodeResult, Remediation, RunResult, Verdict, Waived
from nvdeploy.runner.folders import finish_run
from nvdeploy.runner.record import NodeSpool

H100 = "h100-sxm-8x@2026.11.1"
STARTED = "2026-01-10T08:00:00+00:00"


def waiver(check: str, nodes: list[str], until: str = "2026-01-15", **extra) -> dict:
    return Waiver(check, frozenset(nodes), dt.date.fromisoformat(until), "jdoe@example.com", "RMA 4711 open",
                  file="waivers.yaml", line=2, **extra).to_dict()


def header(*waivers: dict, **more) -> dict:
    return {"run_id": "r1", "cluster": "c", "phase": "validate", "started_at": STARTED, "waivers": list(waivers),
            **more}


def remap_node(name: str = "gpu017") -> NodeResult:
    return NodeResult(name, (Finding("gpu.count", Verdict.PASS, "8 GPUs", node=name),
                             Finding("memory.remapped_rows", Verdict.FAIL, "GPU3: remapped rows pending", node=name,
                                     gpu=3, remediation=Remediation.RESET_GPU)), profile=H100)


def healthy(name: str) -> NodeResult:
    return NodeResult(name, (Finding("gpu.count", Verdict.PASS, "8 GPUs", node=name),
                             Finding("memory.remapped_rows", Verdict.PASS, "no remapped rows", node=name)),
                      profile=H100)


def waived_run(monkeypatch) -> RunResult:
    monkeypatch.setattr(waiver_rules, "today_utc", lambda: dt.date(2026, 1, 10))
    nodes = [healthy("gpu016"), remap_node(), healthy("gpu018")]
    return finish_run(header(waiver("memory.remapped_rows", ["gpu017"])), nodes, ["gpu016", "gpu017", "gpu018"],
                      False, 1.0, False)


NOTE = "WAIVED FAIL until 2026-01-15 (owner jdoe@example.com: RMA 4711 open; waivers.yaml:2)"


def test_the_waiver_is_decided_once_in_the_record_and_results_json_keeps_its_old_keys(monkeypatch):
    run = waived_run(monkeypatch)
    assert run.verdict is ClusterVerdict.READY
    (finding,) = [f for f in run.nodes[1].findings if f.check == "memory.remapped_rows"]
    assert finding.verdict is Verdict.SKIP and finding.summary == "GPU3: remapped rows pending"
    assert finding.waiver == Waived(Verdict.FAIL, "jdoe@example.com", "RMA 4711 open", "2026-01-15", "waivers.yaml:2")
    data = json.loads(render_json(run))
    (written,) = [f for f in data["nodes"][1]["findings"] if f["check"] == "memory.remapped_rows"]
    # An older reader still finds every key it knew, and the summary it knew: WAIVED, who, why, until when.
    assert written["verdict"] == "SKIP" and written["summary"] == f"{NOTE}: GPU3: remapped rows pending"
    assert written["waiver"] == {"verdict": "FAIL", "owner": "jdoe@example.com", "reason": "RMA 4711 open",
                                 "until": "2026-01-15", "where": "waivers.yaml:2"}
    assert "waiver" not in data["nodes"][0]["findings"][0]  # only where there is one
    assert RunResult.from_dict(data).nodes[1].findings[1] == finding  # nvdeploy report re-renders it alike


def test_the_terminal_and_verbose_lines_say_waived_who_why_and_until_when(monkeypatch):
    run = waived_run(monkeypatch)
    lines = summary_lines(run)
    assert f"PASS  gpu017  memory.remapped_rows: {NOTE}: GPU3: remapped rows pending" in lines
    assert "PASS  gpu[016,018]" in lines  # the waived node is not folded in with the clean ones
    assert verbose_lines(SimpleNamespace(run=run)) == [
        f"SKIP  gpu017 memory.remapped_rows GPU3: {NOTE}: GPU3: remapped rows pending"]


def test_the_report_shows_waived_in_the_matrix_and_who_why_until_when(monkeypatch):
    run = waived_run(monkeypatch)
    checks, rows = matrix(run)
    cells = {r["hosts"]: dict(zip(checks, (c for c, _new in r["cells"]))) for r in rows}
    assert cells["gpu017"]["memory.remapped_rows"] == "WAIVED" and cells["gpu[016,018]"]["memory.remapped_rows"] == \
        "PASS"
    page = render_html(run).decode()
    assert '<td class="c WAIVED"><a href="#waived">WAIVED</a></td>' in page
    row = page[page.index('<table id="waived-table">'):]
    row = row[row.index('<tr class="waived">'):row.index("</tr>", row.index('<tr class="waived">'))]
    for text in ("gpu017", "memory.remapped_rows", "WAIVED", "FAIL", "jdoe@example.com", "2026-01-15",
                 "RMA 4711 open", "waivers.yaml:2"):
        assert text in row, text


def test_junit_and_prometheus_say_it_too(monkeypatch):
    run = waived_run(monkeypatch)
    root = ET.fromstring(render_junit(run))
    skipped = root.find("testsuite[@name='c.gpu017']/testcase[@name='memory.remapped_rows']/skipped")
    assert skipped is not None and skipped.get("message", "").startswith(NOTE)
    assert "waived: FAIL accepted by jdoe@example.com until 2026-01-15: RMA 4711 open (waivers.yaml:2)" in \
        (skipped.text or "")
    text = render_prometheus(run)
    end = dt.datetime(2026, 1, 16, tzinfo=dt.timezone.utc).timestamp()
    assert (f'nvdeploy_waived_until_seconds{{cluster="c",node="gpu017",check="memory.remapped_rows",gpu="3",'
            f'verdict="FAIL",owner="jdoe@example.com"}} {int(end)}') in text


# --- the cluster finding a waived node finding stands behind ------------------------------------------------------

def fleet_nodes(slow: dict[str, float]) -> list[NodeResult]:
    names = [f"gpu{i:02d}" for i in range(1, 10)]
    return [NodeResult(n, (Finding("gpu.count", Verdict.PASS, "8 GPUs", node=n),), profile=H100,
                       facts={"nccl_all_reduce_busbw_gbps": slow.get(n, 480.0)}) for n in names]


def finish(tmp_path: Path, nodes: list[NodeResult], waivers: list[dict], spooled: bool) -> RunResult:
    order = [n.name for n in nodes]
    where: object = nodes
    if spooled:
        spool = NodeSpool(tmp_path, brief_of)  # the briefs a validate run keeps (its fleet facts)
        for node in nodes:
            spool.add(node)
        where = spool
    return finish_run(header(*waivers, fleet={H100: {}}), where, order, False, 1.0, False)  # type: ignore[arg-type]


@pytest.mark.parametrize("spooled", [False, True])
def test_a_waived_fleet_outlier_waives_its_cluster_finding_and_the_run_is_ready(tmp_path, monkeypatch, spooled):
    monkeypatch.setattr(waiver_rules, "today_utc", lambda: dt.date(2026, 1, 10))
    before = finish(tmp_path, fleet_nodes({"gpu04": 441.6}), [], spooled)
    assert before.verdict is ClusterVerdict.NOT_READY
    run = finish(tmp_path, fleet_nodes({"gpu04": 441.6}), [waiver(FLEET, ["gpu04"])], spooled)
    (cluster,) = [f for f in run.cluster_findings if f.check == FLEET]
    assert cluster.verdict is Verdict.SKIP and cluster.waiver is not None
    assert (cluster.waiver.verdict, cluster.waiver.owner, cluster.waiver.until) == (Verdict.FAIL, "jdoe@example.com",
                                                                                    "2026-01-15")
    assert run.verdict is ClusterVerdict.READY
    assert f"SKIP  cluster  {FLEET}: WAIVED FAIL until 2026-01-15" in "\n".join(summary_lines(run))


def test_a_cluster_finding_counts_while_one_of_its_node_findings_still_does(tmp_path, monkeypatch):
    monkeypatch.setattr(waiver_rules, "today_utc", lambda: dt.date(2026, 1, 10))
    run = finish(tmp_path, fleet_nodes({"gpu04": 441.6, "gpu07": 441.6}), [waiver(FLEET, ["gpu04"])], False)
    assert [f.verdict for f in run.cluster_findings if f.check == FLEET] == [Verdict.FAIL]
    assert run.verdict is ClusterVerdict.NOT_READY


def test_a_stage_s_cluster_finding_is_waived_with_its_node_findings(monkeypatch):
    """The multi-node stages' cluster findings (nccl.multinode, ...) reach finish_run before the waivers apply."""
    monkeypatch.setattr(waiver_rules, "today_utc", lambda: dt.date(2026, 1, 10))
    slow = NodeResult("gpu02", (Finding("nccl.multinode", Verdict.FAIL, "busbw low, localised", node="gpu02"),))
    stage = Finding("nccl.multinode", Verdict.FAIL, "all_reduce over 2 nodes below the floor: gpu02")
    run = finish_run(header(waiver("nccl.multinode", ["gpu02"])), [healthy("gpu01"), slow], ["gpu01", "gpu02"],
                     False, 1.0, False, [stage])
    assert [(f.verdict, f.waiver is not None) for f in run.cluster_findings] == [(Verdict.SKIP, True)]
    assert run.verdict is ClusterVerdict.READY


# --- the run's day, not today -------------------------------------------------------------------------------------

def test_a_rebuilt_run_judges_its_waivers_on_the_day_it_started(monkeypatch):
    # Rebuilt (nvdeploy report, --resume) a month later: the waiver lapsed since, but held when the run started.
    monkeypatch.setattr(waiver_rules, "today_utc", lambda: dt.date(2026, 2, 10))
    rebuilt = finish_run(header(waiver("memory.remapped_rows", ["gpu017"])), [remap_node()], ["gpu017"], False, 0.0,
                         False)
    assert rebuilt.nodes[0].findings[1].waiver is not None and rebuilt.verdict is ClusterVerdict.READY
    later = finish_run(header(waiver("memory.remapped_rows", ["gpu017"]), started_at="2026-01-16T00:30:00+00:00"),
                       [remap_node()], ["gpu017"], False, 0.0, False)
    assert later.nodes[0].findings[1].verdict is Verdict.FAIL and later.verdict is ClusterVerdict.NOT_READY
    assert waiver_rules.run_date("2026-01-15T23:30:00-02:00") == dt.date(2026, 1, 16)  # UTC, as the waiver's date
    assert waiver_rules.run_date("") == dt.date(2026, 2, 10)  # no start known: today


def test_promtool_accepts_the_waived_series(monkeypatch):
    """Prometheus's own linter on the file a waived run writes (the waiver's expiry series included)."""
    import shutil
    import subprocess

    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("NVDEPLOY_REQUIRE_SSHD"):
            pytest.fail("promtool is required in CI but missing (.ci/run installs it with apt-get install prometheus)")
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    text = render_prometheus(waived_run(monkeypatch))
    assert "nvdeploy_waived_until_seconds{" in text
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")
