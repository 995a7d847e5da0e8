"""rdma.gpudirect rail by rail over real SSH (OpenSSH on loopback, the simulator's fake nvidia-smi, ibstat and
ib_write_bw on each node's PATH): 4 nodes in pairs (g1, g2) and (g3, g4); g2's mlx5_3 port is down (rail_down), g4's
mlx5_5 rail runs at 60% (rail_slow, below the 80% floor). Each node's 8 rails run side by side, each on its own TCP
port; exactly those two rails are named, by node, GPU, NIC and port."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases import gpudirect
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim.scenario import NodeScenario

CATALOG = ProfileCatalog()
PROFILE = CATALOG.get("h100-sxm-8x")
CHECKS = ("driver.loaded", "ib.ports", "rdma.rails", "rdma.gpudirect")
FAULTS = {"g2": ("rail_down:mlx5_3",), "g4": ("rail_slow:mlx5_5:60",)}

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("requires_sshd")]


def test_rail_faults_over_ssh_are_named_by_node_gpu_nic_and_port(ssh_cluster_factory, tmp_path: Path, monkeypatch):
    # The fake servers answer whenever their client comes: a short head start keeps the waves quick.
    monkeypatch.setattr(gpudirect, "HEAD_START_S", 0.3)
    names = ["g1", "g2", "g3", "g4"]
    cluster = ssh_cluster_factory([(n, NodeScenario(n, PROFILE, FAULTS.get(n, ())).to_json()) for n in names])
    path = tmp_path / "ssh.yaml"
    path.write_text(cluster.inventory_yaml(profile="h100-sxm-8x", command_timeout=120, connect_timeout=30))
    outcome = run_validate(load_inventory(path, CATALOG), CATALOG, EngineOptions(checks=CHECKS), tmp_path / "r",
                           level="full")
    nodes = {n.name: n for n in outcome.run.nodes}
    why = [(n.name, f.check, f.verdict.value, f.summary) for n in outcome.run.nodes for f in n.findings
           if f.verdict is not Verdict.PASS]
    bad = {(name, f.check, f.gpu) for name, node in nodes.items() for f in node.findings
           if f.verdict is not Verdict.PASS}
    assert bad == {("g2", "ib.ports", None), ("g2", "rdma.gpudirect", 3), ("g4", "rdma.gpudirect", 5)}, why
    (down,) = [f for f in nodes["g2"].findings if f.check == "rdma.gpudirect" and f.verdict is Verdict.FAIL]
    assert "rail GPU3 mlx5_3 port 1" in down.summary and "g2's mlx5_3 port 1 is Down (ibstat)" in down.summary
    assert "not started" in down.summary and down.evidence is None  # no perftest server left waiting for it
    slow = [f for f in nodes["g4"].findings if f.check == "rdma.gpudirect" and f.verdict is Verdict.FAIL]
    # Its pair's run and the re-test with a node that passed that rail (g1 serves it): both slow.
    assert [f.summary.split(" rail ")[0] for f in slow] == ["g3 -> g4", "g1 -> g4"]
    assert all("GPU5 mlx5_5 port 1" in f.summary and f.observed == pytest.approx(232.8) for f in slow)
    # Every node ran its 8 rails: 8 findings each on the healthy nodes, re-tests besides.
    assert all(len([f for f in nodes[n].findings if f.check == "rdma.gpudirect"]) >= 8 for n in names)
    rails = nodes["g1"].facts["gpudirect_rails"]
    assert rails["waves"] == [list(range(8))] and rails["compute_from"] == "ibstat"
    assert nodes["g3"].facts["rdma_gpudirect_rail_gbps"]["GPU5/mlx5_5"] == 388.0  # its re-test with g1
