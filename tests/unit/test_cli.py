from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from nvdeploy.cli.app import cli

ROOT = Path(__file__).resolve().parents[2]


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_demo_exits_1_and_names_exactly_the_faulty_nodes(tmp_path):
    result = invoke("validate", "-i", str(ROOT / "inventories" / "demo.yaml"), "--out", str(tmp_path))
    assert result.exit_code == 1, result.output
    run_dir = next((tmp_path / "demo").iterdir())
    data = json.loads((run_dir / "results.json").read_text())
    failing = sorted(n["name"] for n in data["nodes"] if n["verdict"] == "FAIL")
    assert failing == ["gpu003", "gpu006", "gpu011", "gpu013", "gpu016"]
    warned = sorted(n["name"] for n in data["nodes"] if n["verdict"] == "WARN")
    assert warned == ["gpu014"]
    assert "NOT_READY" in result.output
    assert f"report: {run_dir / 'report.html'}" in result.output


def test_builtin_inventory_by_name(tmp_path, monkeypatch):
    # A folder with reports/ (a checkout) keeps its runs there; elsewhere they go to the state folder
    # (tests/unit/test_cli_state_dir.py).
    (tmp_path / "reports").mkdir()
    monkeypatch.chdir(tmp_path)
    result = invoke("validate", "-i", "demo", "--limit", "gpu001,gpu002", "-q")
    assert result.exit_code == 0, result.output
    assert "READY" in result.output
    assert (tmp_path / "reports" / "demo").is_dir()


def test_bad_inventory_exits_2_with_file_line_key_and_no_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("all:\n  vars:\n    profile: h100-sxm-8x\n    driver_version: 550.120\n  hosts: {a: {}}\n")
    proc = subprocess.run([sys.executable, "-m", "nvdeploy", "validate", "-i", str(bad), "--out", str(tmp_path)],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
    assert proc.returncode == 2
    assert f"{bad}:4: key 'driver_version'" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_missing_inventory_exits_2(tmp_path):
    result = invoke("inventory", "check", "-i", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 2
    assert "cannot read file" in result.output


def test_inventory_list_with_limit():
    result = invoke("inventory", "list", "-i", str(ROOT / "inventories" / "demo.yaml"), "--limit", "rack2,!gpu01[0-2]")
    assert result.exit_code == 0
    names = [line.split("\t")[0] for line in result.output.splitlines()]
    assert names == ["gpu009", "gpu013", "gpu014", "gpu015", "gpu016"]


def test_unwritable_report_folder_exits_2(tmp_path):
    blocker = tmp_path / "ro"
    blocker.write_text("a file where the report folder should be")
    result = invoke("validate", "-i", str(ROOT / "inventories" / "demo.yaml"), "--limit", "gpu001",
                    "--out", str(blocker / "reports"))
    assert result.exit_code == 2
    assert "cannot create the run folder" in result.output


def test_fail_on_warn_turns_warn_into_not_ready(tmp_path):
    args = ["validate", "-i", str(ROOT / "inventories" / "demo.yaml"), "--limit", "gpu014", "--out", str(tmp_path)]
    assert invoke(*args).exit_code == 0
    assert invoke(*args, "--fail-on-warn").exit_code == 1


def test_checks_list_and_show():
    listing = invoke("checks", "list").output
    assert "kmsg.xid" in listing and "gpu.count" in listing
    shown = invoke("checks", "show", "kmsg.xid")
    assert shown.exit_code == 0 and "Xid" in shown.output
    assert invoke("checks", "show", "nope").exit_code == 2


def test_report_command_rebuilds(tmp_path):
    invoke("validate", "-i", str(ROOT / "inventories" / "demo.yaml"), "--limit", "gpu001", "--out", str(tmp_path))
    run_dir = next((tmp_path / "demo").iterdir())
    (run_dir / "report.html").unlink()
    result = invoke("report", str(run_dir))
    assert result.exit_code == 0
    assert (run_dir / "report.html").exists()


def test_baseline_prometheus_and_history_are_wired_into_validate(tmp_path):
    demo = str(ROOT / "inventories" / "demo.yaml")
    first = invoke("validate", "-i", demo, "--limit", "gpu00[1-4]", "--out", str(tmp_path))
    assert first.exit_code == 1
    baseline = next((tmp_path / "demo").iterdir())
    prom = tmp_path / "nvdeploy.prom"
    second = invoke("validate", "-i", demo, "--limit", "gpu00[1-2]", "--out", str(tmp_path), "--baseline",
                    str(baseline), "--prometheus", str(prom))
    assert second.exit_code == 0, second.output
    assert "Nodes gone (2)" in second.output and "gpu[003-004]" in second.output
    assert "nvdeploy_run_info" in prom.read_text()
    history = invoke("history", "--db", str(tmp_path / "history.sqlite"))
    assert history.output.count("demo") >= 2
    latest = next(p for p in (tmp_path / "demo").iterdir() if p != baseline)
    assert (latest / "baseline.json").exists()
