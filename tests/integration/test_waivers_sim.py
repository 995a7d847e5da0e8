"""Waivers over simulated nodes: a waived FAIL is WAIVED in results.json and the exit status until its date; past
it the finding counts again and the CLI names the waiver's file and line; a malformed waiver stops the run (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
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


def test_a_gpu_waiver_of_kmsg_xid_waives_that_gpu_s_xid_and_nothing_else(tmp_path):
    """Xid 13 on GPU 1 and Xid 63 on GPU 2 of one node: ``gpus: [1]`` waives the first, the second still counts."""
    (tmp_path / "cluster.yaml").write_text("all:\n  vars: {connection: sim, profile: h100-sxm-8x, cluster: waived}\n"
                                           "  hosts:\n    gpu014: {sim_faults: [xid13, row_remap_pending]}\n")
    (tmp_path / "waivers.yaml").write_text("waivers:\n  - check: kmsg.xid\n    nodes: gpu014\n    gpus: [1]\n"
                                           "    until: 2099-12-31\n    owner: ops\n    reason: user job\n")
    result = CliRunner().invoke(cli, ["validate", "-i", str(tmp_path / "cluster.yaml"), "--out", str(tmp_path / "r"),
                                      "--waivers", str(tmp_path / "waivers.yaml"), "--no-history"],
                                catch_exceptions=False)
    data = json.loads(next((tmp_path / "r" / "waived").glob("*/results.json")).read_text())
    xids = [(f["code"], f["gpu"], f["verdict"], (f.get("waiver") or {}).get("owner"))
            for f in data["nodes"][0]["findings"] if f["check"] == "kmsg.xid"]
    assert xids == [(13, 1, "SKIP", "ops"), (63, 2, "WARN", None)]
    lines = result.output.splitlines()  # gpu014 FAILs its remapped rows; its Xids follow, each on its own line
    assert any(line.startswith("      WARN kmsg.xid: Xid 63 x1 on 0000:3a:00 (GPU2)") for line in lines), lines
    assert any(line.startswith("      SKIP kmsg.xid: WAIVED WARN until 2099-12-31 (owner ops: user job; ") for line in
               lines), lines


@pytest.mark.parametrize("profile", ["h100-sxm-8x", "gb200-nvl72"])
def test_every_check_that_names_a_gpu_may_be_waived_by_gpu(tmp_path, profile):
    """Every simulated fault at the full level: a finding that names a GPU is of a check in GPU_CHECKS, or a waiver
    narrowed to that GPU would be refused (the list in nvdeploy/checks/gpu_findings.py is kept complete here)."""
    from nvdeploy.checks.gpu_findings import GPU_CHECKS
    from nvdeploy.sim import scenario

    faults = sorted(f for f in scenario.KNOWN_FAULTS | set(scenario.EXTRA_FAULTS)
                    if "hang" not in f and f not in scenario.EXTRA_FAULT_PATTERNS) + ["xid79", "dcgm_fail:memory"]
    (tmp_path / "all.yaml").write_text(
        f"all:\n  vars: {{connection: sim, profile: {profile}, cluster: faults, rack: r1}}\n  hosts:\n"
        + "".join(f"    n{i:02d}: {{sim_faults: ['{fault}']}}\n" for i, fault in enumerate(faults)))
    CliRunner().invoke(cli, ["validate", "-i", str(tmp_path / "all.yaml"), "--out", str(tmp_path / "r"), "-q",
                             "--no-history", "--level", "full"], catch_exceptions=False)
    data = json.loads(next((tmp_path / "r" / "faults").glob("*/results.json")).read_text())
    named = {f["check"] for n in data["nodes"] for f in n["findings"] if f["gpu"] is not None}
    named |= {f["check"] for f in data["cluster_findings"] if f["gpu"] is not None}
    assert "memory.remapped_rows" in named and "kmsg.xid" in named
    assert named <= GPU_CHECKS, sorted(named - GPU_CHECKS)
