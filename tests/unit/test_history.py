from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from nvdeploy.cli.app import cli
from nvdeploy.report import render_json
from nvdeploy.results import Finding, NodeResult, Remediation, RunResult, Verdict
from nvdeploy.runner.history_db import (
    HistoryError,
    check_record,
    default_db_path,
    figure_record,
    list_runs,
    node_record,
    rebuild_history,
    record_run,
)


def quarter(run_id: str, started: str, ecc_failing: tuple[str, ...], driver: str = "550.90.07") -> RunResult:
    nodes = []
    for name in ("gpu01", "gpu02", "gpu03"):
        bad = name in ecc_failing
        nodes.append(NodeResult(name, (
            Finding("gpu.count", Verdict.PASS, "8 GPUs", node=name, observed=8, expected=8),
            Finding("memory.ecc_errors", Verdict.FAIL if bad else Verdict.PASS,
                    "GPU3: 2 uncorrectable ECC errors" if bad else "no ECC errors", node=name, gpu=3 if bad else None,
                    observed=2 if bad else 0, expected=0, remediation=Remediation.RESET_GPU if bad else
                    Remediation.NONE)), facts={"driver_version": driver, "cuda_version": "12.4"}))
    return RunResult(run_id, "rack", "validate", tuple(nodes), started_at=started, level="standard", user="ops")


RUNS = [quarter("2026q1", "2026-02-01T00:00:00+00:00", ("gpu02",)),
        quarter("2026q2", "2026-05-01T00:00:00+00:00", ()),
        quarter("2026q3", "2026-08-01T00:00:00+00:00", ("gpu02", "gpu03"), driver="560.35.03")]


def write_folders(out: Path) -> list[Path]:
    folders = []
    for run in RUNS:
        folder = out / run.cluster / run.run_id
        folder.mkdir(parents=True)
        (folder / "results.json").write_bytes(render_json(run))
        folders.append(folder)
    return folders


def test_runs_and_a_nodes_record_over_time(tmp_path):
    db = default_db_path(tmp_path)
    assert db == tmp_path / "history.sqlite"
    for run, folder in zip(RUNS, write_folders(tmp_path)):
        record_run(db, run, folder)
    record_run(db, RUNS[0], tmp_path / "rack" / "2026q1")  # recording again replaces, never duplicates
    runs = list_runs(db)
    assert [(r["run_id"], r["verdict"], r["fail"]) for r in runs] == [
        ("2026q1", "NOT_READY", 1), ("2026q2", "READY", 0), ("2026q3", "NOT_READY", 2)]
    assert [r["run_id"] for r in list_runs(db, limit=2)] == ["2026q2", "2026q3"]
    assert [r["run_id"] for r in list_runs(db, since="2026-04-01")] == ["2026q2", "2026q3"]
    record = node_record(db, "gpu02")
    assert [(r["run_id"], r["verdict"], [f["check_id"] for f in r["findings"]]) for r in record] == [
        ("2026q1", "FAIL", ["memory.ecc_errors"]), ("2026q2", "PASS", []), ("2026q3", "FAIL", ["memory.ecc_errors"])]
    assert json.loads(record[2]["versions"])["driver"] == "560.35.03"
    checks = check_record(db, "memory.ecc_errors")
    assert [(r["run_id"], r["nodes"].get("FAIL", [])) for r in checks] == [
        ("2026q1", ["gpu02"]), ("2026q2", []), ("2026q3", ["gpu02", "gpu03"])]


def test_deleting_the_database_loses_no_run(tmp_path):
    write_folders(tmp_path)
    db = default_db_path(tmp_path)
    outcome = rebuild_history(db, tmp_path)
    assert sorted(outcome.recorded) == ["2026q1", "2026q2", "2026q3"]
    before = list_runs(db)
    db.unlink()
    rebuild_history(db, tmp_path)
    assert list_runs(db) == [dict(r, recorded_at=a["recorded_at"]) for r, a in zip(before, list_runs(db))]


def test_rebuild_moves_a_corrupt_database_aside_and_keeps_runs_whose_folder_is_gone(tmp_path):
    folders = write_folders(tmp_path)
    db = default_db_path(tmp_path)
    rebuild_history(db, tmp_path)
    (folders[0] / "results.json").unlink()
    folders[0].rmdir()
    outcome = rebuild_history(db, tmp_path)
    assert outcome.kept_without_folder == ("2026q1",)
    assert rebuild_history(db, tmp_path, prune=True).pruned == ("2026q1",)
    db.write_bytes(b"this is not a database" * 100)
    outcome = rebuild_history(db, tmp_path)
    assert outcome.moved_aside and Path(outcome.moved_aside).read_bytes().startswith(b"this is not")
    assert [r["run_id"] for r in list_runs(db)] == ["2026q2", "2026q3"]


def test_a_missing_or_broken_database_is_a_clear_error(tmp_path):
    with pytest.raises(HistoryError, match="nvdeploy history rebuild"):
        list_runs(tmp_path / "none.sqlite")
    broken = tmp_path / "broken.sqlite"
    broken.write_bytes(b"x" * 4096)
    with pytest.raises(HistoryError, match="broken.sqlite"):
        record_run(broken, RUNS[0], tmp_path)


def test_history_cli(tmp_path, monkeypatch):
    write_folders(tmp_path / "reports")
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    missing = runner.invoke(cli, ["history"])
    assert missing.exit_code == 2 and "history rebuild" in missing.output
    rebuilt = runner.invoke(cli, ["history", "rebuild"])
    assert rebuilt.exit_code == 0 and "3 run(s) recorded" in rebuilt.output, rebuilt.output
    listing = runner.invoke(cli, ["history"]).output
    assert "2026q1" in listing and "2026q3" in listing and "NOT_READY" in listing
    node = runner.invoke(cli, ["history", "--node", "gpu03"]).output
    assert "gpu03 in 3 runs" in node and "FAIL  memory.ecc_errors GPU3: GPU3: 2 uncorrectable" in node
    check = runner.invoke(cli, ["history", "--check", "memory.ecc_errors", "--since", "2026-03-01"]).output
    assert "FAIL gpu[02-03]; PASS 1" in check and "2026q1" not in check
    both = runner.invoke(cli, ["history", "--node", "gpu02", "--check", "memory.ecc_errors"]).output
    assert "(observed 2)" in both
    other = tmp_path / "other.sqlite"
    assert runner.invoke(cli, ["history", "rebuild", "--db", str(other)]).exit_code == 0
    assert sqlite3.connect(other).execute("select count(*) from runs").fetchone() == (3,)


def test_validate_runs_can_be_recorded_and_listed(tmp_path):
    root = Path(__file__).resolve().parents[2]
    result = CliRunner().invoke(cli, ["validate", "-i", str(root / "inventories" / "demo.yaml"), "--limit",
                                      "gpu001,gpu011", "--out", str(tmp_path), "-q"])
    assert result.exit_code == 1
    run_dir = next((tmp_path / "demo").iterdir())
    from nvdeploy.runner.folders import load_run

    record_run(default_db_path(tmp_path), load_run(run_dir), run_dir)
    assert [r["nodes"] for r in list_runs(default_db_path(tmp_path))] == [2]
    assert check_record(default_db_path(tmp_path), "memory.ecc_errors")[0]["nodes"]["FAIL"] == ["gpu011"]


def test_every_finding_is_recorded_across_the_insert_batches(tmp_path, monkeypatch):
    """Finding rows go to sqlite in batches (a 10,000-node run's are never one list): none is lost or doubled at
    a batch's edge, and the cluster findings come last."""
    import nvdeploy.runner.history_db as history

    monkeypatch.setattr(history, "_BATCH_ROWS", 3)  # 2 findings per node: batches end mid-way and on a node's edge
    run = RUNS[2]
    run = RunResult(run.run_id, run.cluster, run.phase, run.nodes, started_at=run.started_at,
                    cluster_findings=(Finding("fabric.consistency", Verdict.WARN, "two versions"),))
    db = default_db_path(tmp_path)
    record_run(db, run, tmp_path)
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT node, check_id, verdict FROM findings ORDER BY rowid").fetchall()
    expected = [(n.name, f.check, f.verdict.value) for n in run.nodes for f in n.findings]
    assert rows == expected + [("", "fabric.consistency", "WARN")]


def _measured(run_id: str, started: str, busbw: float, gflops: dict) -> RunResult:
    node = NodeResult("gpu01", (Finding("nccl.all_reduce", Verdict.PASS, "busbw", node="gpu01"),),
                      profile="h100-sxm-8x@2026.11.1",
                      facts={"nccl_all_reduce_busbw_gbps": busbw, "dcgm_diag_gflops": {str(g): v for g, v in
                                                                                       gflops.items()}})
    return RunResult(run_id, "rack", "validate", (node,), started_at=started, level="standard", user="ops")


def test_a_nodes_figure_trend_through_the_cli(tmp_path):
    db = tmp_path / "h.sqlite"
    record_run(db, _measured("r1", "2026-09-01T00:00:00+00:00", 480.0, {0: 860.0, 1: 858.0}), tmp_path)
    record_run(db, quarter("r2", "2026-10-01T00:00:00+00:00", ()), tmp_path)  # quick: gpu01 without figures
    record_run(db, _measured("r3", "2026-11-01T00:00:00+00:00", 451.2, {0: 859.0, 1: 790.0}), tmp_path)
    rows = figure_record(db, "gpu01", "nccl_busbw")
    assert [(r["run_id"], r["values"]) for r in rows] == [("r1", {None: 480.0}), ("r2", {}), ("r3", {None: 451.2})]
    runner = CliRunner()
    out = runner.invoke(cli, ["history", "--db", str(db), "--node", "gpu01", "--figure", "nccl_busbw"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0].startswith("gpu01 nccl_busbw (nccl-tests all_reduce busbw") and "in 2 of 3 runs" in lines[0]
    assert lines[1].endswith("r1                          standard  480 GB/s")
    assert "not measured" in lines[2]
    assert lines[3].endswith("451.2 GB/s  -6.0% vs first")
    gpus = runner.invoke(cli, ["history", "--db", str(db), "--node", "gpu01", "--figure", "dcgm_gflops"]).output
    assert "790 gigaflops (GPU1)  -7.9% vs first  GPUs 859 790" in gpus, gpus
    bad = runner.invoke(cli, ["history", "--db", str(db), "--figure", "nccl_busbw"])
    assert bad.exit_code == 2 and "--figure shows one node's figure: give it with --node NODE" in bad.output
    unknown = runner.invoke(cli, ["history", "--db", str(db), "--node", "gpu01", "--figure", "gemm"])
    assert unknown.exit_code == 2 and "unknown figure 'gemm': one of nccl_busbw, dcgm_gflops" in unknown.output


def test_a_version_1_database_stays_readable_and_gets_the_figures_table(tmp_path):
    """A history written before figures were kept: its runs read as before, their figures as not measured."""
    db = tmp_path / "old.sqlite"
    record_run(db, quarter("old", "2026-02-01T00:00:00+00:00", ("gpu02",)), tmp_path)
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE figures")
    conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    assert [r["run_id"] for r in node_record(db, "gpu02")] == ["old"]
    assert [r["values"] for r in figure_record(db, "gpu02", "nccl_busbw")] == [{}]
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("2",)
    # A newer nvdeploy's number is never lowered by this one.
    conn.execute("UPDATE meta SET value = '9' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    list_runs(db)
    assert sqlite3.connect(db).execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("9",)


def test_runs_started_in_the_same_second_keep_the_order_they_were_recorded(tmp_path):
    """A run id ends in a random suffix: two runs of one second must not come back in the suffixes' order."""
    db = tmp_path / "h.sqlite"
    second = "2026-12-01T12:00:00+00:00"
    record_run(db, quarter("20261201-120000-zq7", second, ("gpu02",)), tmp_path)
    record_run(db, quarter("20261201-120000-a3k", second, ()), tmp_path)
    order = ["20261201-120000-zq7", "20261201-120000-a3k"]
    assert [r["run_id"] for r in node_record(db, "gpu02")] == order
    assert [r["run_id"] for r in node_record(db, "gpu02", check="memory.ecc_errors")] == order
    rows = check_record(db, "memory.ecc_errors")
    assert [(r["run_id"], r["nodes"]) for r in rows] == [
        (order[0], {"PASS": ["gpu01", "gpu03"], "FAIL": ["gpu02"]}),
        (order[1], {"PASS": ["gpu01", "gpu02", "gpu03"]})]
    assert [r["run_id"] for r in list_runs(db)] == order
    assert [r["run_id"] for r in list_runs(db, limit=1)] == order[1:]  # the newest recorded
