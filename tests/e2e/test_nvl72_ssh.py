"""A small NVL72 rack over real SSH (fake GB200 trays behind sshd on loopback): the fabric, recovery-action and
domain findings are the same as the same trays give in-process."""

from __future__ import annotations

import json
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
QUICK = EngineOptions(checks=load_levels()["quick"])
PROFILE = CATALOG.get("gb200-nvl72")
MINE = ("nvlink.fabric", "gpu.recovery_action", "nvlink.domain")
TRAYS = {"tray01": (), "tray02": ("fabric_incomplete",), "tray03": ("domain_split", "recovery_reset"),
         "tray04": ("fabric_unhealthy",)}

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("requires_sshd")]


def comparable(outcome):
    nodes = sorted((n.name, f.check, f.verdict.value, f.gpu, f.summary) for n in outcome.run.nodes
                   for f in n.findings if f.check in MINE)
    cluster = sorted((f.verdict.value, f.summary) for f in outcome.run.cluster_findings if f.check == "nvlink.domain")
    return nodes, cluster


def test_a_small_rack_over_ssh_gives_the_same_domain_findings_as_in_process(ssh_cluster_factory, tmp_path: Path):
    cluster = ssh_cluster_factory([(name, NodeScenario(name, PROFILE, faults, cluster="nvl", rack="r1").to_json())
                                   for name, faults in TRAYS.items()])
    text = cluster.inventory_yaml(profile="gb200-nvl72", extra_host_vars={n: {"rack": "r1"} for n in TRAYS},
                                  command_timeout=120)
    (tmp_path / "ssh").mkdir()
    ssh_path = tmp_path / "ssh" / "nvl.yaml"
    ssh_path.write_text(text)
    over_ssh = run_validate(load_inventory(ssh_path, CATALOG), CATALOG, QUICK, tmp_path / "ssh" / "r")
    sim_path = tmp_path / "nvl.yaml"
    sim_path.write_text("all:\n  vars: {connection: sim, profile: gb200-nvl72, cluster: nvl, rack: r1}\n  hosts:\n"
                        + "".join(f"    {n}: {{sim_faults: {json.dumps(list(f))}}}\n" for n, f in TRAYS.items()))
    in_process = run_validate(load_inventory(sim_path, CATALOG), CATALOG, QUICK, tmp_path / "r")
    assert comparable(over_ssh) == comparable(in_process)
    nodes, domains = comparable(over_ssh)
    assert {(n, c, v) for n, c, v, _, _ in nodes if v != "PASS"} == {
        ("tray02", "nvlink.fabric", "ERROR"), ("tray03", "gpu.recovery_action", "FAIL"),
        ("tray03", "nvlink.domain", "FAIL"), ("tray04", "nvlink.fabric", "FAIL")}
    assert [v for v, _ in domains] == [Verdict.FAIL.value, Verdict.FAIL.value]
    assert any("missing tray02: no GPU registered" in s and "tray03: in clique 32765" in s for _, s in domains)
