"""The operator's command line, end to end through click: what each command prints and exits with."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from nvdeploy.cli import cli

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
