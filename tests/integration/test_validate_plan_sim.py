"""validate --dry-run plans and starts nothing; --check and --playbook choose what a validation runs."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from nvdeploy.cli.app import cli

ROOT = Path(__file__).resolve().parents[2]
DEMO = str(ROOT / "inventories" / "demo.yaml")

pytestmark = pytest.mark.timeout(120)


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_validate_dry_run_says_what_would_run_where_and_writes_nothing(tmp_path):
    out = tmp_path / "state"
    result = invoke("validate", "-i", DEMO, "--dry-run", "--level", "standard", "--drain-failed", "--out", str(out))
    assert result.exit_code == 0, result.output
    text = result.output
    assert "validate plan (dry-run: nothing is started on any node): 16 node(s) of demo, level standard" in text
    assert "gpu[001-016] (16 node(s); sim, h100-sxm-8x@" in text  # identical plans folded
    assert "then heavy, alone: dcgm_diag_r2 (20 min): dcgmi diag -r 2 -j" in text
    assert "all_reduce_perf" in text and "nvidia_smi_xml (60 s)" in text
    assert "Slurm: nodes that FAIL would be drained" in text
    assert "time: nodes 64 at a time (1 wave(s))" in text
    assert "READY" not in text.replace("readiness", "")
    assert not out.exists() or not any(out.rglob("*.json"))  # no run folder, no history


def test_validate_dry_run_never_connects_to_a_node(tmp_path):
    """A host that listens on loopback: the plan is made without a single connection to it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    accepted: list = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept())
            except OSError:
                pass

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    port = server.getsockname()[1]
    inventory = tmp_path / "ssh.yaml"
    inventory.write_text(f"all:\n  vars:\n    profile: h100-sxm-8x\n    ssh_port: {port}\n    ssh_user: ops\n"
                         "  hosts:\n    gpu01: {address: 127.0.0.1}\n")
    try:
        result = invoke("validate", "-i", str(inventory), "--dry-run", "--level", "full")
    finally:
        stop.set()
        watcher.join(5)
        server.close()
    assert result.exit_code == 0, result.output
    assert "gpu01 (1 node(s); ssh, h100-sxm-8x@" in result.output and "dcgm_diag_r3" in result.output
    assert accepted == []


def test_check_runs_the_dcgm_levels_a_level_does_not_and_only_them(tmp_path):
    result = invoke("validate", "-i", DEMO, "--check", "dcgm.diag_r1,dcgm.diag_r4", "--out", str(tmp_path), "-q")
    assert result.exit_code == 0, result.output
    data = json.loads(next(tmp_path.rglob("results.json")).read_text())
    checks = {f["check"] for n in data["nodes"] for f in n["findings"]}
    assert checks == {"system.reachable", "dcgm.diag_r1", "dcgm.diag_r4"}, checks
    assert data["cluster_findings"] == []  # no version or power judgement it did not collect for
    glob = invoke("validate", "-i", DEMO, "--check", "memory.*", "--dry-run")
    assert glob.exit_code == 0 and "4 node check(s)" in glob.output, glob.output


def test_an_unknown_check_or_a_bad_playbook_exits_2_naming_it(tmp_path):
    bad = invoke("validate", "-i", DEMO, "--check", "dcgm.diag_r9", "--dry-run")
    assert bad.exit_code == 2 and "'dcgm.diag_r9' names no check" in bad.output
    playbook = tmp_path / "mine.yaml"
    playbook.write_text("levels:\n  quick:\n    - gpu.count\n    - nope.check\n")
    wrong = invoke("validate", "-i", DEMO, "--playbook", str(playbook), "--dry-run")
    assert wrong.exit_code == 2 and "nope.check" in wrong.output and f"{playbook}:4" in wrong.output, wrong.output


def test_a_playbook_of_ones_own_sets_the_levels(tmp_path):
    playbook = tmp_path / "mine.yaml"
    playbook.write_text("levels:\n  quick:\n    - gpu.count\n    - memory.ecc_errors\n")
    result = invoke("validate", "-i", DEMO, "--playbook", str(playbook), "--out", str(tmp_path / "s"), "-q")
    assert result.exit_code in (0, 1), result.output
    data = json.loads(next((tmp_path / "s").rglob("results.json")).read_text())
    checks = {f["check"] for n in data["nodes"] for f in n["findings"]}
    # a level's run: its checks, and the cluster stage's version consistency of what they read
    assert {"gpu.count", "memory.ecc_errors"} <= checks <= {"system.reachable", "gpu.count", "memory.ecc_errors",
                                                             "driver.consistency", "cuda.consistency",
                                                             "firmware.consistency"}, checks
