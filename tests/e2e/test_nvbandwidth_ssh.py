"""nvbandwidth.copies over real SSH (fake GB200 trays behind sshd on loopback): the fake nvbandwidth answers -j with
the tray profile's figures, a tray with c2c_slow FAILs its host copies at PCIe speed, and the findings are the same
as the same trays give in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import run_validate
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim.scenario import NodeScenario

CATALOG = ProfileCatalog()
OPTIONS = EngineOptions(checks=("nvbandwidth.copies",))
PROFILE = CATALOG.get("gb200-nvl72")
TRAYS = {"tray01": (), "tray02": ("c2c_slow",)}

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("requires_sshd")]


def findings(outcome):
    return sorted((n.name, f.verdict.value, f.gpu, f.summary) for n in outcome.run.nodes for f in n.findings
                  if f.check == "nvbandwidth.copies")


def test_c2c_slow_tray_fails_its_host_copies_over_ssh_as_in_process(ssh_cluster_factory, tmp_path: Path):
    cluster = ssh_cluster_factory([(name, NodeScenario(name, PROFILE, faults, cluster="nvl", rack="r1").to_json())
                                   for name, faults in TRAYS.items()])
    text = cluster.inventory_yaml(profile="gb200-nvl72", extra_host_vars={n: {"rack": "r1"} for n in TRAYS},
                                  command_timeout=120)
    (tmp_path / "ssh").mkdir()
    ssh_path = tmp_path / "ssh" / "nvl.yaml"
    ssh_path.write_text(text)
    over_ssh = run_validate(load_inventory(ssh_path, CATALOG), CATALOG, OPTIONS, tmp_path / "ssh" / "r")
    sim_path = tmp_path / "nvl.yaml"
    sim_path.write_text("all:\n  vars: {connection: sim, profile: gb200-nvl72, cluster: nvl, rack: r1}\n  hosts:\n"
                        + "".join(f"    {n}: {{sim_faults: {json.dumps(list(f))}}}\n" for n, f in TRAYS.items()))
    in_process = run_validate(load_inventory(sim_path, CATALOG), CATALOG, OPTIONS, tmp_path / "r")
    assert findings(over_ssh) == findings(in_process)
    assert [(n, v, g) for n, v, g, _ in findings(over_ssh)] == [
        ("tray01", "PASS", None), ("tray01", "PASS", None), ("tray01", "PASS", None),
        ("tray02", "FAIL", 2), ("tray02", "FAIL", 2), ("tray02", "PASS", None)]
    slow = [s for n, v, _, s in findings(over_ssh) if v == "FAIL"]
    assert all("below the floor 120 GB/s" in s and "did not go over NVLink-C2C" in s for s in slow)
