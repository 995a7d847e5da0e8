"""The check catalog's standard level over real SSH (OpenSSH on loopback, the simulator's fake tools on each node's
PATH): DCGM r2 and single-node nccl-tests, one node with nccl_low_bw."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.levels import load_levels
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import ClusterVerdict, Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim.scenario import NodeScenario

CATALOG = ProfileCatalog()
PROFILE = CATALOG.get("h100-sxm-8x")
STANDARD = EngineOptions(checks=load_levels()["standard"])

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("requires_sshd")]


def scenario(name: str, *faults: str) -> tuple[str, str]:
    return name, NodeScenario(name, PROFILE, tuple(faults)).to_json()


def test_standard_level_over_ssh_names_the_slow_node(ssh_cluster_factory, tmp_path: Path):
    cluster = ssh_cluster_factory([scenario("gpu01"), scenario("gpu02", "nccl_low_bw")])
    path = tmp_path / "ssh.yaml"
    path.write_text(cluster.inventory_yaml(profile="h100-sxm-8x", command_timeout=120, connect_timeout=30))
    outcome = run_validate(load_inventory(path, CATALOG), CATALOG, STANDARD, tmp_path / "reports", level="standard")
    nodes = {n.name: n for n in outcome.run.nodes}
    healthy = nodes["gpu01"]
    assert healthy.verdict is Verdict.PASS, [f for f in healthy.findings if f.verdict is not Verdict.PASS]
    checks = {f.check for f in healthy.findings}
    assert {"dcgm.discovery", "dcgm.diag_r2", "nccl.all_reduce", "nvlink.links", "fabric.manager",
            "ib.peermem", "system.versions"} <= checks
    nccl = next(f for f in healthy.findings if f.check == "nccl.all_reduce")
    assert nccl.observed == 480.76 and "NCCL 2.21.5" in nccl.summary and "NCCL_DEBUG=VERSION" in nccl.summary
    slow = nodes["gpu02"]
    bad = [f for f in slow.findings if f.verdict is not Verdict.PASS and f.verdict is not Verdict.SKIP]
    assert [(f.check, f.verdict) for f in bad] == [("nccl.all_reduce", Verdict.FAIL)]
    assert (bad[0].observed, bad[0].expected) == (288.46, ">= 452.2")
    assert outcome.run.verdict is ClusterVerdict.NOT_READY and outcome.exit_code == 1
    # NCCL_DEBUG and NCCL_TESTS_MIN_BW reached the tool through the node's real env(1): its own gate failed too.
    evidence = (outcome.run_dir / "evidence" / "gpu02" / "nccl_all_reduce.out").read_text()
    assert "NCCL version 2.21.5" in evidence and "# Avg bus bandwidth    : 271.166 FAILED" in evidence
    assert slow.facts["nccl_all_reduce_busbw_gbps"] == 288.46 and healthy.facts["dcgm_version"] == "3.3.5"


def test_standard_level_gives_the_same_findings_over_ssh_and_sim(ssh_cluster_factory, tmp_path: Path):
    faults = [(), ("dcgm_fail:pcie",), ("nvlink_down", "peermem_missing"), ("dcgm_missing", "nccl_wrong")]
    cluster = ssh_cluster_factory([scenario(f"n{i}", *f) for i, f in enumerate(faults)])
    path = tmp_path / "ssh.yaml"
    path.write_text(cluster.inventory_yaml(profile="h100-sxm-8x", command_timeout=120, connect_timeout=30))
    over_ssh = {n.name: n for n in run_validate(load_inventory(path, CATALOG), CATALOG, STANDARD,
                                                tmp_path / "r1", level="standard").run.nodes}
    sim = tmp_path / "sim.yaml"
    sim.write_text("all:\n  vars: {connection: sim, profile: h100-sxm-8x}\n  hosts:\n" + "".join(
        f"    n{i}: {{sim_faults: {list(f)!r}}}\n".replace("'", '"') for i, f in enumerate(faults)))
    over_sim = {n.name: n for n in run_validate(load_inventory(sim, CATALOG), CATALOG, STANDARD,
                                               tmp_path / "r2", level="standard").run.nodes}

    def comparable(node):
        return sorted((f.check, f.verdict.value, f.summary, str(f.observed)) for f in node.findings
                      if f.check != "system.reachable")

    for name in over_sim:
        assert comparable(over_ssh[name]) == comparable(over_sim[name]), name
