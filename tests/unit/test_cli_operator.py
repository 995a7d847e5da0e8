"""The operator's command line, end to end through click: what each command prints and exits with."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from nvdeploy.cli.app import cli

ROOT = Path(__file__).resolve().parents[2]


def invoke(*args: str, **kwargs):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, **kwargs)


def test_prometheus_file_uses_base_units_and_one_profile_form(tmp_path, write_inventory):
    inventory = write_inventory("""
all:
  vars: {cluster: prom, connection: sim, profile: h100-sxm-8x, driver_version: "550.90.07"}
  hosts:
    gpu[01-02]: {}
    gpu03: {sim_faults: [unreachable]}
""")
    prom = tmp_path / "nvdeploy.prom"
    result = invoke("validate", "-i", str(inventory), "--out", str(tmp_path / "reports"), "--level", "standard",
                    "--prometheus", str(prom), "--no-history", "-q")
    assert result.exit_code == 3, result.output  # gpu03 unreached: INCOMPLETE
    text = prom.read_text()
    assert "gbps" not in text.replace("fact:", "")  # no GB/s-named family; fact keys keep their own names
    assert re.search(r'^nvdeploy_node_bandwidth_bytes_per_second\{cluster="prom",node="gpu01",'
                     r'metric="nccl\.all_reduce"\} [0-9]{11,}$', text, re.M), text
    profiles = set(re.findall(r'^nvdeploy_node_info\{[^}]*profile="([^"]*)"', text, re.M))
    assert len(profiles) == 1 and next(iter(profiles)).startswith("h100-sxm-8x@"), profiles
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("NVDEPLOY_REQUIRE_SSHD"):
            pytest.fail("promtool is required in CI but missing (.ci/run installs it with apt-get install prometheus)")
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_size_assumes_memory_efficient_attention_and_says_so():
    default = invoke("size", "--model", "llama-3-70b", "--tokens", "15T", "--profile", "h100-sxm-8x")
    assert default.exit_code == 0, default.output
    assert "memory-efficient attention (FlashAttention; --attention eager to store the scores)" in default.output
    # 34*s*b*h*L = 34 x 8192 x 8192 x 80 bytes = 182.5 GB of activations per GPU, not 1,900.5 with the scores
    assert "182.5 GB per GPU stay unsharded" in default.output and "1900.5" not in default.output
    eager = invoke("size", "--model", "llama-3-70b", "--tokens", "15T", "--profile", "h100-sxm-8x",
                   "--attention", "eager")
    assert "1900.5 GB per GPU stay unsharded" in eager.output and "eager attention (scores stored)" in eager.output


def test_size_rounds_gpus_up_to_whole_nodes_and_prints_both():
    result = invoke("size", "--model", "llama-3-70b", "--tokens", "15T", "--activation-checkpointing",
                    "--profile", "h100-sxm-8x")
    assert result.exit_code == 0, result.output
    head, row = [line.split() for line in result.output.splitlines() if line.startswith(("profile ", "h100-sxm-8x "))]
    cells = dict(zip(head[:5], row))   # "min GPUs" is two words: only the columns before it
    assert (cells["GPUs"], cells["nodes"], cells["fits"]) == ("24", "3", "yes")
    assert row[4] == "18"                # the memory minimum, printed beside the whole-node count
    assert "18 GPUs would fit; 24 = 3 whole node(s) of 8 GPUs" in result.output


def test_install_dry_run_says_what_would_change_and_gives_no_verdict(tmp_path):
    result = invoke("install", "-i", str(ROOT / "inventories" / "demo.yaml"), "--dry-run", "--out", str(tmp_path))
    lines = result.output.splitlines()
    last = next(line for line in lines if line.startswith("DRY-RUN"))
    assert "READY" not in result.output and "passed" not in last, last   # a plan is not a readiness verdict
    assert re.match(r"DRY-RUN: \d+ step\(s\) would change 16 node\(s\); \d+ step\(s\) already as wanted and \d+ "
                    r"skipped would be left alone", last), last
    assert "not a readiness verdict" in last
    # gpu003 lost a GPU off the bus: installing DCGM cannot bring it back, so that is a check, not a change
    assert "7 GPUs -> 8 GPUs" not in result.output
    assert "then would check: dcgmi discovery -l is 7 GPUs now, 8 GPUs expected" in result.output
    plan = (next((tmp_path / "demo").iterdir()) / "install-plan.txt").read_text()
    for text in (result.output, plan):
        # the pin file is a unified diff under its step; nothing of its content lands in column 0
        assert "            +++ /etc/apt/preferences.d/nvdeploy-nvidia-driver\n" in text
        assert "            +Pin-Priority: 1001\n" in text
        assert not [line for line in text.splitlines() if line.startswith(("Package:", "Pin:", "Pin-Priority:"))]
        would_run = [line for line in text.splitlines() if "nvdeploy-write $'# nvdeploy: hold" in line]
        assert would_run and all(line.startswith("            would run: ") for line in would_run)


def test_run_names_a_refused_reboot_as_results_json_does(tmp_path, write_inventory):
    inventory = write_inventory("""
all:
  vars: {cluster: lab, connection: sim, profile: h100-sxm-8x, driver_version: "550.90.07"}
  hosts:
    gpu01: {sim_faults: [driver_mismatch]}
""")
    result = invoke("run", "-i", str(inventory), "--out", str(tmp_path))
    assert "FAILED" not in result.output
    # refused before any change: the plan needs the reboot (the driver is not left installed and unloaded)
    assert re.search(r"^  ERROR   reboot \(reboot_required\): refused before any change: the plan needs it: reboot "
                     "required", result.output, re.M), result.output
    assert re.search(r"^install: .* 0 FAIL, 1 ERROR \(reboot_required\), ", result.output, re.M), result.output
    data = json.loads((next((tmp_path / "lab").iterdir()) / "results.json").read_text())
    reboot = next(f for f in data["nodes"][0]["findings"] if f["check"] == "install.reboot")
    assert (reboot["verdict"], reboot["reason"]) == ("ERROR", "reboot_required")
