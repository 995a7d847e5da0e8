from __future__ import annotations

import dataclasses
import json
import re
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from nvdeploy.report import BASELINE_FILE, load_saved_diff, write_reports
from nvdeploy.report.chart import bandwidth_charts
from nvdeploy.report.compare import compare_runs
from nvdeploy.report.evidence import excerpt, safe_href
from nvdeploy.report.html import render_html, report_script
from nvdeploy.report.view import action_list, action_text, matrix, why
from nvdeploy.results import ErrorReason, EvidenceRecord, Finding, NodeResult, Remediation, RunResult, Verdict

PROFILE = "h100-sxm-8x@2026.11.1"


def node(name: str, *findings: Finding, facts: dict | None = None) -> NodeResult:
    base = [Finding("gpu.count", Verdict.PASS, "8 GPUs", node=name, observed=8, expected=8)]
    checks = {f.check for f in findings}
    return NodeResult(name, tuple([f for f in base if f.check not in checks] + list(findings)), profile=PROFILE,
                      facts=facts if facts is not None else {"driver_version": "550.90.07"})


def fail(name: str, check: str = "memory.ecc_errors", action: Remediation = Remediation.RESET_GPU,
         summary: str = "GPU3 (00000000:5D:00.0): 2 volatile uncorrectable ECC error(s)", **kw) -> Finding:
    return Finding(check, Verdict.FAIL, summary, node=name, remediation=action, **kw)


def busbw(name: str, value: float, floor: float = 452.2) -> Finding:
    verdict = Verdict.PASS if value >= floor else Verdict.FAIL
    return Finding("nccl.all_reduce", verdict, f"busbw {value} GB/s", node=name, observed=value,
                   expected=f">= {floor:g}", unit="GB/s")


def run_of(*nodes: NodeResult, **kw) -> RunResult:
    return RunResult("20261130T000000Z-abc", "rack", "validate", tuple(nodes), started_at="2026-11-30T10:00:00+00:00",
                     profiles={"h100-sxm-8x": PROFILE}, inventory="inv.yaml", user="ops", **kw)


class Parsed(HTMLParser):
    def __init__(self, html: str) -> None:
        super().__init__()
        self.ids: dict[str, dict[str, str | None]] = {}
        self.links: list[str] = []
        self.scripts: list[dict[str, str | None]] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if "id" in attributes:
            self.ids[attributes["id"] or ""] = attributes
        if tag == "a" and attributes.get("href"):
            self.links.append(attributes["href"] or "")
        if tag == "script":
            self.scripts.append(attributes)


def test_identical_rows_fold_into_host_ranges_worst_first():
    nodes = [node(f"gpu{i:03d}") for i in range(1, 11)] + [node("gpu004", fail("gpu004"))]
    nodes = [n for n in nodes if n.name != "gpu004" or n.verdict is Verdict.FAIL]
    checks, rows = matrix(run_of(*nodes))
    assert checks == ["gpu.count", "memory.ecc_errors"]
    assert [(r["hosts"], r["verdict"], r["count"]) for r in rows] == [
        ("gpu004", "FAIL", 1), ("gpu[001-003,005-010]", "PASS", 9)]
    assert rows[0]["cells"] == (("PASS", False), ("FAIL", False))
    assert rows[1]["cells"][1] == ("", False)  # the check did not run there: shown as a dash, not PASS


def test_action_list_orders_by_urgency_and_folds_nodes_with_the_same_work():
    run = run_of(node("gpu001", fail("gpu001", "gpu.persistence", Remediation.TUNE, "persistence off")),
                 node("gpu002", fail("gpu002", "kmsg.xid", Remediation.ISOLATE, "Xid 79"),
                      fail("gpu002", "gpu.count", Remediation.ISOLATE, "7 of 8 GPUs")),
                 node("gpu003", fail("gpu003")), node("gpu004", fail("gpu004")),
                 node("gpu005", Finding("system.reachable", Verdict.ERROR, "connect timed out", node="gpu005",
                                        reason=ErrorReason.UNREACHABLE)))
    steps = action_list(run)
    assert [(s["action"], s["hosts"]) for s in steps] == [
        ("ISOLATE", "gpu002"), ("RESET_GPU", "gpu[003-004]"), ("TUNE", "gpu001"), ("INVESTIGATE", "gpu005")]
    assert [i["check"] for i in steps[0]["items"]] == ["gpu.count", "kmsg.xid"]
    text = action_text(run, steps)
    assert "1. ISOLATE gpu002 (1 node): drain from the scheduler" in text
    assert "2. RESET_GPU gpu[003-004] (2 nodes)" in text
    assert "   - ERROR system.reachable: connect timed out [unreachable x1]" in text
    assert "5. Re-validate: nvdeploy validate -i inv.yaml --level quick --limit 'gpu[001-005]'" in text
    assert "<" not in text  # plain text for a ticket


def test_why_names_the_deciding_checks():
    run = run_of(node("a", fail("a")), node("b", fail("b")), node("c", fail("c", "kmsg.xid")), node("d"))
    assert why(run) == ("3 of 4 nodes failed (3 FAIL, 1 PASS); failing: memory.ecc_errors on 2 nodes, "
                        "kmsg.xid on 1 node.")
    incomplete = run_of(node("a"), node("b", Finding("system.reachable", Verdict.ERROR, "x", node="b",
                                                     reason=ErrorReason.TIMEOUT)))
    assert why(incomplete).endswith("not determined: system.reachable on 1 node (timeout: 1).")
    assert why(run_of(node("a"))) == "All 1 nodes passed (1 PASS)."


def test_first_screen_has_verdict_counts_profile_level_who_when_version():
    run = run_of(node("gpu001", fail("gpu001")), node("gpu002"), nvdeploy_version="9.9.9", duration_s=75.0)
    html = render_html(run).decode()
    parsed = Parsed(html)
    for element in ("verdict", "why", "counts", "count-FAIL", "count-PASS", "toolbar", "only-action", "search",
                    "action-text", "matrix-table", "nodes-table", "nvd-data"):
        assert element in parsed.ids, element
    head = html[html.index("<body>"): html.index('id="matrix"')]
    for text in ("NOT READY", "1 of 2 nodes failed", PROFILE, "quick", "ops", "2026-11-30 10:00 UTC", "1 min 15 s",
                 "9.9.9", "20261130T000000Z-abc"):
        assert text in head, text


def test_hostile_node_names_reach_the_script_only_as_escaped_json():
    evil = '</script><script>document.title="owned"</script>'
    run = run_of(node(evil, fail(evil, summary='<img src=x onerror="document.title=1">')))
    html = render_html(run).decode()
    assert "<script>document.title" not in html and "<img src=x" not in html
    data = re.search(r'<script type="application/json" id="nvd-data">(.*?)</script>', html, re.S).group(1)
    assert json.loads(data)["nodes"] == [evil]
    assert "<" not in data and ">" not in data
    assert len(Parsed(html).scripts) == 2
    assert html.count(report_script()) == 1


def test_evidence_links_are_relative_and_never_a_scheme_or_outside_the_run():
    assert safe_href("evidence/gpu 01/kmsg.out") == "evidence/gpu%2001/kmsg.out"
    for bad in ("javascript:alert(1)", "/etc/passwd", "../../etc/passwd", "evidence/../../x", "C:\\x", "data:x",
                "", None, "https://example.com/x"):
        assert safe_href(bad) is None, bad
    run = run_of(node("gpu001", fail("gpu001", evidence="javascript:alert(1)")),
                 node("gpu002", fail("gpu002", evidence="evidence/gpu002/nvidia_smi_xml.out")))
    links = Parsed(render_html(run).decode()).links
    assert "evidence/gpu002/nvidia_smi_xml.out" in links
    assert not any(link.startswith("javascript") for link in links)


def test_excerpt_shows_the_lines_around_the_problem(tmp_path):
    folder = tmp_path / "evidence" / "gpu001"
    folder.mkdir(parents=True)
    kmsg = [f"[    {i}.000000] boring line {i}" for i in range(40)]
    kmsg[25] = "[ 1234.567890] NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>', name=<script>x</script>, fell off"
    (folder / "kmsg.out").write_text("\n".join(kmsg) + "\n")
    finding = fail("gpu001", "kmsg.xid", Remediation.ISOLATE, "Xid 79 x1 on 0000:2a:00: GPU has fallen off the bus",
                   evidence="evidence/gpu001/kmsg.out")
    found = excerpt(tmp_path, "evidence/gpu001/kmsg.out", finding)
    assert found is not None and found.matched
    assert found.first_line == 23 and found.lines[found.hit].startswith("[ 1234.567890] NVRM: Xid")
    html = render_html(run_of(node("gpu001", finding)), run_dir=tmp_path).decode()
    assert "name=&lt;script&gt;x&lt;/script&gt;, fell off</mark>" in html
    assert 'href="evidence/gpu001/kmsg.out"' in html


def test_excerpt_of_a_one_line_json_probe_is_pretty_printed_at_the_gpu(tmp_path):
    gpus = [{"index": i, "pci_bus_id": f"00000000:{bus}:00.0", "persistence_mode": True,
             "ecc_uncorrectable_volatile": 2 if bus == "5D" else 0} for i, bus in enumerate(["18", "2A", "3A", "5D"])]
    (tmp_path / "evidence").mkdir()
    (tmp_path / "evidence" / "probe.out").write_text(json.dumps({"gpus": gpus}) + "\n__END__\n")
    found = excerpt(tmp_path, "evidence/probe.out", fail("n", evidence="evidence/probe.out"))
    assert found is not None and found.reformatted
    assert found.lines[found.hit].strip() == '"ecc_uncorrectable_volatile": 2'


def test_excerpt_refuses_paths_outside_the_run_folder(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0\n")
    run_dir = tmp_path / "run"
    (run_dir / "evidence").mkdir(parents=True)
    (run_dir / "evidence" / "link.out").symlink_to(secret)
    for path in ("../secret.txt", "evidence/link.out", str(secret)):
        assert excerpt(run_dir, path, fail("n", evidence=path)) is None


def test_bandwidth_chart_marks_nodes_below_the_floor_and_low_outliers():
    nodes = [node(f"gpu{i:02d}", busbw(f"gpu{i:02d}", 478.0 + (i % 3))) for i in range(1, 13)]
    nodes += [node("gpu13", busbw("gpu13", 401.5)), node("gpu14", busbw("gpu14", 455.0)),
              node("gpu15", Finding("nccl.all_reduce", Verdict.PASS, "fact only", node="gpu15"),
                   facts={"nccl_busbw_gbps": 470.0})]
    charts = bandwidth_charts(run_of(*nodes))
    assert [c.title for c in charts] == ["nccl.all_reduce", "nccl_busbw_gbps"]
    chart = charts[0]
    assert chart.layout == "bars" and chart.floor == 452.2
    assert chart.below_floor == ("gpu13",) and chart.low == ("gpu14",)
    assert chart.points[0].node == "gpu13" and chart.points[0].kind == "floor"
    html = render_html(run_of(*nodes)).decode()
    assert "<svg" in html and "floor 452.2" in html and "below floor" in html
    assert "Below floor (1):</b> <span class=\"mono\">gpu13</span>" in html


def test_bandwidth_chart_for_a_big_fleet_is_a_rank_plot_with_named_outliers():
    nodes = [node(f"gpu{i:04d}", busbw(f"gpu{i:04d}", 470.0 + (i % 10))) for i in range(1, 301)]
    nodes[41] = node("gpu0042", busbw("gpu0042", 300.0))
    chart = bandwidth_charts(run_of(*nodes))[0]
    assert chart.layout == "rank" and len(chart.points) == 300
    named = [p for p in chart.points if p.label]
    assert [p.node for p in named] == ["gpu0042"]
    assert chart.plot_top <= named[0].label_y <= chart.plot_bottom


def test_baseline_comparison_is_shown_and_survives_a_re_render(tmp_path):
    base = run_of(node("gpu001"), node("gpu002", fail("gpu002")), node("gpu003"))
    new = run_of(node("gpu001", fail("gpu001", "kmsg.xid", Remediation.ISOLATE, "Xid 79")), node("gpu002"),
                 node("gpu004"))
    diff = compare_runs(base, new)
    paths = write_reports(new, tmp_path, diff=diff)
    assert paths["baseline"] == tmp_path / BASELINE_FILE
    html = (tmp_path / "report.html").read_text()
    assert 'id="baseline"' in html and 'id="diff-new"' in html and "FAIL<sup>new</sup>" in html
    assert "1 new failure on 1 node; 1 node fixed; 1 node added; 1 node gone" in html
    (tmp_path / "report.html").unlink()
    write_reports(new, tmp_path)  # nvdeploy report RUN_DIR: the saved comparison is used again
    assert 'id="diff-new"' in (tmp_path / "report.html").read_text()
    assert load_saved_diff(tmp_path) == diff


def test_evidence_budget_keeps_a_fleet_of_failures_small(tmp_path):
    (tmp_path / "evidence").mkdir()
    (tmp_path / "evidence" / "big.out").write_text(("x" * 200 + "\n") * 50)
    nodes = [node(f"n{i}", fail(f"n{i}", evidence="evidence/big.out")) for i in range(40)]
    html = render_html(run_of(*nodes), run_dir=tmp_path, excerpt_budget=5_000).decode()
    assert "evidence excerpts left out to keep this file small" in html
    assert html.count('class="excerpt"') == 40  # every finding still links to its file


def test_two_thousand_nodes_stay_small_and_fast(tmp_path):
    nodes = []
    for i in range(1, 2001):
        name = f"gpu{i:04d}"
        extra = [fail(name, evidence="evidence/x.out")] if i % 20 == 0 else []
        nodes.append(NodeResult(name, tuple([Finding(f"check.{c}", Verdict.PASS, "fine", node=name)
                                             for c in range(15)] + [busbw(name, 470.0 + i % 9)] + extra),
                                evidence=tuple(EvidenceRecord(c, c, f"evidence/{name}/{c}.out", 0, 10, False, "", 0.1)
                                               for c in ("a", "b")),
                                facts={"driver_version": "550.90.07", "gpu_count": 8}))
    started = time.perf_counter()
    html = render_html(run_of(*nodes), run_dir=tmp_path)
    assert time.perf_counter() - started < 20
    assert len(html) < 15_000_000
    assert b"gpu[0001-0019,0021-0039" in html


@pytest.mark.parametrize("interrupted", [True, False])
def test_interrupted_runs_say_so_first(interrupted):
    html = render_html(run_of(node("a"), interrupted=interrupted)).decode()
    assert ("INTERRUPTED: partial results" in html) is interrupted


def test_report_re_renders_from_the_journal_after_a_crash(tmp_path):
    from nvdeploy.runner.folders import load_run
    from nvdeploy.runner.record import RunRecorder

    recorder = RunRecorder(tmp_path)
    recorder.journal({"type": "run", "run_id": "r1", "cluster": "c", "phase": "validate", "hosts": ["a", "b"],
                      "started_at": "2026-11-30T10:00:00+00:00"})
    recorder.node_done(node("a", fail("a")))
    recorder.close()
    run = load_run(tmp_path)
    assert [n.name for n in run.nodes] == ["a", "b"] and run.interrupted
    assert run.nodes[1].findings[0].reason is ErrorReason.INTERRUPTED
    write_reports(run, Path(tmp_path))
    assert "NOT READY" in (tmp_path / "report.html").read_text()


@pytest.mark.parametrize("collector, marked", [("nvml_probe", '"fabric_cluster_uuid": '),
                                                ("nvidia_smi_xml", "<clusterUuid>")])
def test_excerpt_of_a_cluster_uuid_finding_marks_the_cluster_uuid_and_names_the_file_s_own_lines(tmp_path, collector,
                                                                                                  marked):
    """A tray's all-zero clusterUuid is marked on its clusterUuid line, not on the GPU's PCI bus
    id that finds the GPU; a one-line probe output pretty-printed is "line 1", never "lines 8-17"."""
    from _catalog_helpers import CATALOG, context, run_check, sim_results

    from nvdeploy.sim.scenario import NodeScenario

    profile = CATALOG.get("gb200-nvl72")
    results = sim_results(NodeScenario("tray02", profile, ("fabric_zero_uuid",), rack="r1"),
                          [collector, "nvidia_smi_xml", "uptime"])
    folder = tmp_path / "evidence" / "tray02"
    folder.mkdir(parents=True)
    (folder / f"{collector}.out").write_bytes(results[collector].stdout)
    finding = run_check("nvlink.fabric", context(results, profile, node="tray02"))[0]
    assert "clusterUuid 00000000-0000-0000-0000-000000000000" in finding.summary and finding.gpu == 0
    finding = dataclasses.replace(finding, evidence=f"evidence/tray02/{collector}.out")
    found = excerpt(tmp_path, f"evidence/tray02/{collector}.out", finding)
    assert found is not None and found.matched
    assert found.lines[found.hit].strip().startswith(marked), found.lines
    total = len(results[collector].stdout.decode().splitlines())
    if collector == "nvml_probe":
        assert total <= 2 and found.where == "line 1 (one line of JSON, pretty-printed)"
        assert [number for number, _line, _hit in found.numbered] == ["1"] + [""] * (len(found.lines) - 1)
    else:
        low, high = found.first_line, found.first_line + len(found.lines) - 1
        assert found.where == f"lines {low}\u2013{high}" and high <= total
    html = render_html(run_of(node("tray02", finding)), run_dir=tmp_path).decode()
    assert f"evidence/tray02/{collector}.out, {found.where}" in html
