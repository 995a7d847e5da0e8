"""The GPU-stack checks (containers, CUDA, MPS, power, RDMA) in the catalog: `nvdeploy checks show ID` prints each,
the levels list them."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from nvdeploy.cli.app import cli
from nvdeploy.config.levels import load_levels

NODE = ("cuda.compat", "gpu.mps", "container.runtime", "container.gpu_run", "power.node")
CLUSTER = ("rdma.gpudirect", "power.budget", "power.cluster")


@pytest.mark.parametrize("check_id", NODE + CLUSTER)
def test_checks_show_prints_what_the_check_runs(check_id):
    out = CliRunner().invoke(cli, ["checks", "show", check_id])
    assert out.exit_code == 0, out.output
    assert out.output.startswith(check_id) and ("PASS" in out.output or "power.node" in out.output)


def test_levels():
    levels = load_levels()
    assert {"cuda.compat", "gpu.mps", "container.runtime", "power.node"} <= set(levels["quick"])
    assert "container.gpu_run" in levels["standard"] and "container.gpu_run" not in levels["quick"]
    assert "rdma.gpudirect" in levels["full"] and "rdma.gpudirect" not in levels["standard"]
