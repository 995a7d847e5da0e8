"""fleet.performance over real SSH (OpenSSH on loopback, the simulator's fake tools on each node's PATH): 8 nodes
with the fleet's +-1% spread, one at 92% of a healthy node (slower:92) and one GPU at 90% (slower_gpu:3:90): the
same nodes and GPU are named as in process, with the figures the nodes printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.levels import load_levels
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim.scenario import NodeScenario

CATALOG = ProfileCatalog()
PROFILE = CATALOG.get("h100-sxm-8x")
# The node checks that measure (DCGM r3 prints the per-GPU figure, nccl-tests the busbw) and the fleet stage.
CHECKS = ("dcgm.diag_r3", "nccl.all_reduce", "fleet.performance")
FAULTS = {"gpu03": ("slower:92",), "gpu06": ("slower_gpu:3:90",)}

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("requires_sshd")]


def test_eight_nodes_over_ssh_name_the_slow_node_and_gpu(ssh_cluster_factory, tmp_path: Path):
    assert set(CHECKS) <= set(load_levels()["full"])
    names = [f"gpu{i:02d}" for i in range(1, 9)]
    cluster = ssh_cluster_factory([(n, NodeScenario(n, PROFILE, ("fleet_spread", *FAULTS.get(n, ()))).to_json())
                                   for n in names])
    path = tmp_path / "ssh.yaml"
    path.write_text(cluster.inventory_yaml(profile="h100-sxm-8x", command_timeout=120, connect_timeout=30))
    outcome = run_validate(load_inventory(path, CATALOG), CATALOG, EngineOptions(checks=CHECKS), tmp_path / "r",
                           level="full")
    nodes = {n.name: n for n in outcome.run.nodes}
    fleet = {name: [(f.gpu, f.verdict) for f in node.findings if f.check == "fleet.performance"]
             for name, node in nodes.items()}
    assert {name for name, found in fleet.items() if found} == {"gpu03", "gpu06"}
    assert sorted(fleet["gpu03"], key=lambda g: -1 if g[0] is None else g[0]) == \
        [(None, Verdict.FAIL)] + [(gpu, Verdict.FAIL) for gpu in range(8)]
    assert fleet["gpu06"] == [(3, Verdict.FAIL)]
    nccl = next(f for f in outcome.run.cluster_findings
                if f.check == "fleet.performance" and f.observed["figure"] == "nccl_busbw")
    # The figures the nodes' own all_reduce_perf printed over SSH.
    assert nccl.observed["values"] == {name: node.facts["nccl_all_reduce_busbw_gbps"] for name, node in nodes.items()}
    (slow,) = nccl.observed["outliers"]
    # 92% of a healthy node, each node +-1%: 6-9.5% below the median of 8 (FAIL by z where under 7%).
    assert nccl.observed["nodes"] == 8 and slow["node"] == "gpu03" and 6 <= slow["pct_below"] <= 9.5
    assert slow["verdict"] == "FAIL" and slow["z"] <= -5
