from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nvdeploy.cli.app import cli
from nvdeploy.report import render_json
from nvdeploy.report.compare import RunDiff, compare_runs, render_diff_text
from nvdeploy.results import ErrorReason, Finding, NodeResult, Remediation, RunResult, Verdict
from nvdeploy.runner.folders import RunLoadError, find_run_dirs, load_run

ROOT = Path(__file__).resolve().parents[2]


def node(name: str, *findings: Finding, busbw: float | None = 478.0, driver: str = "550.90.07",
         facts: dict | None = None) -> NodeResult:
    items = [Finding("gpu.count", Verdict.PASS, "8 GPUs", node=name, observed=8, expected=8),
             Finding("memory.ecc_errors", Verdict.PASS, "no ECC errors", node=name, observed=0, expected=0)]
    if busbw is not None:
        items.append(Finding("nccl.all_reduce", Verdict.PASS, f"busbw {busbw}", node=name, observed=busbw,
                             expected=">= 452.2", unit="GB/s"))
    checks = {f.check for f in findings}
    items = [f for f in items if f.check not in checks] + list(findings)
    base = {"driver_version": driver, "cuda_version": "12.4", "nccl_version": "2.21.5", "gpu_count": 8}
    return NodeResult(name, tuple(items), facts={**base, **(facts or {})})


def run(run_id: str, *nodes: NodeResult, cluster_findings: tuple = ()) -> RunResult:
    return RunResult(run_id, "rack", "validate", tuple(nodes), cluster_findings=cluster_findings,
                     started_at=f"2026-{run_id[-2:]}-01T00:00:00+00:00")


def ecc(name: str) -> Finding:
    return Finding("memory.ecc_errors", Verdict.FAIL, "GPU3: 2 uncorrectable ECC errors", node=name, gpu=3,
                   remediation=Remediation.RESET_GPU)


BASE = run("q-08", node("gpu01"), node("gpu02", ecc("gpu02")), node("gpu03"), node("gpu04"),
           node("gpu05", Finding("system.reachable", Verdict.ERROR, "timeout", node="gpu05",
                                 reason=ErrorReason.TIMEOUT), busbw=None))
NEW = run("q-11", node("gpu01", ecc("gpu01"), driver="560.35.03"), node("gpu02", driver="560.35.03"),
          node("gpu03", busbw=450.0, driver="560.35.03"), node("gpu04", busbw=460.0, driver="560.35.03"),
          node("gpu06", Finding("kmsg.xid", Verdict.WARN, "Xid 13", node="gpu06"), driver="560.35.03"),
          cluster_findings=(Finding("driver.consistency", Verdict.FAIL, "2 versions",
                                    remediation=Remediation.REINSTALL),))


def test_new_failures_fixed_nodes_added_gone_drift_and_regressions():
    diff = compare_runs(BASE, NEW)
    assert [(c.node, c.check, c.before, c.after) for c in diff.new_failures] == [
        ("gpu01", "memory.ecc_errors", "PASS", "FAIL"), ("(cluster)", "driver.consistency", None, "FAIL")]
    assert diff.failing_nodes == ("gpu01",)
    assert diff.fixed_nodes == ("gpu02",)
    assert [(c.node, c.check, c.after) for c in diff.fixed_checks] == [("gpu02", "memory.ecc_errors", "PASS")]
    assert diff.added_nodes == ("gpu06",) and diff.removed_nodes == ("gpu05",)
    assert [c.node for c in diff.new_warnings] == ["gpu06"]
    assert {(d.node, d.component, d.before, d.after) for d in diff.drift} == {
        (n, "driver", "550.90.07", "560.35.03") for n in ("gpu01", "gpu02", "gpu03", "gpu04")}
    # gpu03 lost 5.9% (beyond 5%); gpu04 lost 3.8% (within the tolerance)
    assert [(r.node, r.metric, r.before, r.after, r.change_pct) for r in diff.regressions] == [
        ("gpu03", "nccl.all_reduce", 478.0, 450.0, -5.86)]
    assert diff.worse and diff.changed
    assert [r.node for r in compare_runs(BASE, NEW, tolerance_pct=3.0).regressions] == ["gpu03", "gpu04"]


def test_an_unchanged_run_has_no_differences():
    diff = compare_runs(BASE, BASE)
    assert not diff.changed and not diff.worse
    assert diff.headline() == "No change since baseline q-08."


def test_diff_round_trips_through_json():
    diff = compare_runs(BASE, NEW)
    assert RunDiff.from_dict(json.loads(json.dumps(diff.to_dict()))) == diff


def test_text_is_folded_and_names_every_kind_of_change():
    text = render_diff_text(compare_runs(BASE, NEW))
    assert ("New failures (2):\n  FAIL  (cluster)  driver.consistency (was not checked): 2 versions\n"
            "  FAIL  gpu01  memory.ecc_errors (was PASS): GPU3: 2 uncorrectable ECC errors") in text
    assert "gpu03  nccl.all_reduce: 478.0 -> 450.0 GB/s (-5.9%), floor 452.2" in text
    assert "Fixed nodes (1):\n  gpu02" in text
    assert "Nodes added (1):\n  gpu06" in text and "Nodes gone (1):\n  gpu05" in text
    assert "driver: 550.90.07 -> 560.35.03  gpu[01-04]" in text


def write_run(base: Path, result: RunResult) -> Path:
    folder = base / result.cluster / result.run_id
    folder.mkdir(parents=True)
    (folder / "results.json").write_bytes(render_json(result))
    return folder


def test_load_run_reads_results_json_or_the_journal_and_names_bad_folders(tmp_path):
    folder = write_run(tmp_path, BASE)
    assert load_run(folder) == RunResult.from_dict(json.loads((folder / "results.json").read_text()))
    with pytest.raises(RunLoadError, match="not an nvdeploy run folder"):
        load_run(tmp_path)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "results.json").write_text("{not json")
    with pytest.raises(RunLoadError, match="not a readable nvdeploy run"):
        load_run(broken)
    assert list(find_run_dirs(tmp_path)) == [broken, folder]  # <out>/<cluster>/<run> and a run folder itself


def test_cli_diff_prints_changes_and_exits_1_when_something_got_worse(tmp_path):
    a, b = write_run(tmp_path, BASE), write_run(tmp_path, NEW)
    result = CliRunner().invoke(cli, ["diff", str(a), str(b)])
    assert result.exit_code == 1, result.output
    assert "New failures (2):" in result.output and "Version drift (4 nodes):" in result.output
    assert CliRunner().invoke(cli, ["diff", str(a), str(a)]).exit_code == 0
    as_json = CliRunner().invoke(cli, ["diff", "--json", "--tolerance", "50", str(a), str(b)])
    assert json.loads(as_json.output)["regressions"] == []
    missing = CliRunner().invoke(cli, ["diff", str(a), str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "no such run folder" in missing.output


def test_demo_runs_compare_end_to_end(tmp_path):
    demo = ROOT / "inventories" / "demo.yaml"
    fixed = tmp_path / "fixed.yaml"
    fixed.write_text(demo.read_text().replace("sim_faults: [persistence_off]", "sim_faults: []"))
    runner = CliRunner()
    assert runner.invoke(cli, ["validate", "-i", str(demo), "--out", str(tmp_path / "a"), "-q"]).exit_code == 1
    assert runner.invoke(cli, ["validate", "-i", str(fixed), "--out", str(tmp_path / "b"), "-q"]).exit_code == 1
    first, second = (next((tmp_path / out / "demo").iterdir()) for out in ("a", "b"))  # run ids of one second
    result = runner.invoke(cli, ["diff", str(first), str(second)])
    assert result.exit_code == 0, result.output
    assert "Fixed nodes (1):\n  gpu016" in result.output


def _levelled(run_id: str, level: str, *nodes: NodeResult) -> RunResult:
    return RunResult(run_id, "rack", "validate", tuple(nodes), level=level,
                     started_at=f"2026-{run_id[-2:]}-01T00:00:00+00:00")


def test_checks_not_run_again_are_not_rechecked_not_unchanged(tmp_path):
    heavy = (Finding("dcgm.diag", Verdict.PASS, "dcgmi diag -r 2: all tests passed", node="n"),)
    standard = _levelled("s-08", "standard", *(node(n, *(replace_node(f, n) for f in heavy)) for n in ("gpu01",
                                                                                                         "gpu02")),
                         node("gpu03", Finding("system.reachable", Verdict.ERROR, "timeout", node="gpu03",
                                               reason=ErrorReason.TIMEOUT), busbw=None))
    quick = _levelled("q-09", "quick", node("gpu01", busbw=None), node("gpu02", busbw=None),
                      node("gpu03", busbw=None))
    diff = compare_runs(standard, quick)
    assert sorted((c.node, c.check, c.before) for c in diff.not_rechecked) == [
        ("gpu01", "dcgm.diag", "PASS"), ("gpu01", "nccl.all_reduce", "PASS"), ("gpu02", "dcgm.diag", "PASS"),
        ("gpu02", "nccl.all_reduce", "PASS")]
    assert diff.changed and not diff.worse
    assert diff.headline() != "No change since baseline s-08."
    assert "2 checks not re-checked on 2 nodes (level standard -> quick)" in diff.headline()
    text = render_diff_text(diff)
    assert text.splitlines()[0].startswith("Different levels: the baseline ran standard, this run quick")
    assert ("Not re-checked: ran in the baseline, not in this run (4):\n  gpu[01-02]  dcgm.diag (was PASS)\n"
            "  gpu[01-02]  nccl.all_reduce (was PASS)") in text
    assert RunDiff.from_dict(json.loads(json.dumps(diff.to_dict()))) == diff
    a, b = write_run(tmp_path, standard), write_run(tmp_path, quick)
    result = CliRunner().invoke(cli, ["diff", str(a), str(b)])
    assert result.exit_code == 3, result.output  # nothing got worse, but not everything was looked at again
    assert "No change" not in result.output and "Not re-checked" in result.output
    assert not compare_runs(quick, standard).not_rechecked  # the other way round: every check ran again


def replace_node(finding: Finding, name: str) -> Finding:
    from dataclasses import replace

    return replace(finding, node=name)


def test_same_level_and_same_checks_say_nothing_of_levels():
    diff = compare_runs(BASE, BASE)
    assert not diff.not_rechecked and not diff.levels_differ and diff.level_line() == ""
    assert not render_diff_text(diff).startswith("Different levels")
