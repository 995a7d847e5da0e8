"""Waivers over simulated nodes: a waived FAIL is WAIVED in results.json and the exit status until its date; past
it the finding counts again and the CLI names the waiver's file and line; a malformed waiver stops the run (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from nvdeploy.cli.app import cli

INVENTORY = """all:
  vars: {connection: sim, profile: h100-sxm-8x, cluster: waived}
  hosts:
    gpu001: {}
    gpu002: {sim_faults: [row_remap_pending]}
"""


def waivers(until: str) -> str:
    return ("waivers:\n"
            "  - check: memory.remapped_rows\n"
            "    nodes: gpu[002-003]\n"
            "    gpus: [2]\n"
            f"    until: {until}\n"
            "    owner: jdoe@example.com\n"
            "    reason: RMA 4711 open\n")


def validate(tmp_path: Path, waiver_text: str):
    (tmp_path / "cluster.yaml").write_text(INVENTORY)
    (tmp_path / "waivers.yaml").write_text(waiver_text)
    result = CliRunner().invoke(cli, ["validate", "-i", str(tmp_path / "cluster.yaml"), "--out", str(tmp_path / "r"),
                                      "--waivers", str(tmp_path / "waivers.yaml"), "--no-history"],
                                catch_exceptions=False)
    runs = sorted((tmp_path / "r" / "waived").iterdir()) if (tmp_path / "r" / "waived").is_dir() else []
    data = json.loads((runs[-1] / "results.json").read_text()) if runs else None
    return result, data


def remap_findings(data) -> list[dict]:
    node = next(n for n in data["nodes"] if n["name"] == "gpu002")
    return [f for f in node["findings"] if f["check"] == "memory.remapped_rows"]


def test_a_waived_fail_does_not_change_the_exit_code(tmp_path):
    result, data = validate(tmp_path, waivers("2099-12-31"))
    assert result.exit_code == 0, result.output
    (finding,) = [f for f in remap_findings(data) if f["gpu"] == 2]
    assert finding["verdict"] == "SKIP"
    assert finding["summary"].startswith("WAIVED FAIL until 2099-12-31 (owner jdoe@example.com: RMA 4711 open; "
                                         f"{tmp_path / 'waivers.yaml'}:2): GPU2")
    assert data["verdict"] == "READY"


def test_past_its_date_the_finding_counts_again_and_the_waiver_is_named(tmp_path):
    result, data = validate(tmp_path, waivers("2020-01-31"))
    assert result.exit_code == 1, result.output
    assert [f["verdict"] for f in remap_findings(data) if f["gpu"] == 2] == ["FAIL"]
    assert (f"nvdeploy: error: {tmp_path / 'waivers.yaml'}:2: waiver of memory.remapped_rows on 2 node(s) by "
            "jdoe@example.com expired on 2020-01-31") in result.output


def test_a_malformed_waiver_stops_the_run_naming_file_and_line(tmp_path):
    result, data = validate(tmp_path, waivers("someday"))
    assert result.exit_code == 2 and data is None
    assert f"{tmp_path / 'waivers.yaml'}:5: key 'until': must be a date YYYY-MM-DD" in result.output


def test_a_resumed_run_keeps_the_waivers_it_started_with(tmp_path):
    result, data = validate(tmp_path, waivers("2099-12-31"))
    run_dir = next((tmp_path / "r" / "waived").iterdir())
    resumed = CliRunner().invoke(cli, ["validate", "--resume", str(run_dir), "-i", str(tmp_path / "cluster.yaml"),
                                       "--waivers", str(tmp_path / "waivers.yaml")], catch_exceptions=False)
    assert resumed.exit_code == 2 and "a resumed run keeps the waivers it started with" in resumed.output
    header = json.loads((run_dir / "results.jsonl").read_text().splitlines()[0])
    assert [w["check"] for w in header["waivers"]] == ["memory.remapped_rows"]
