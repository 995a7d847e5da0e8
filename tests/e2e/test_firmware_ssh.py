"""firmware.* over real SSH (OpenSSH on loopback, the simulator's fake tools on each node's PATH): 4 nodes, one with
an odd VBIOS on GPU 2 (vbios_mismatch:2), one with old ConnectX firmware (cx_fw_old), one with an older BIOS
(bios_mismatch): the DMI files come through the fake ``find``, the rest through nvidia-smi and ibstat, and exactly
those parts are named."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim.scenario import NodeScenario

CATALOG = ProfileCatalog()
PROFILE = CATALOG.get("h100-sxm-8x")
CHECKS = ("firmware.minimum", "firmware.consistency")
FAULTS = {"gpu02": ("vbios_mismatch:2",), "gpu03": ("cx_fw_old",), "gpu04": ("bios_mismatch",)}

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("requires_sshd")]


def test_firmware_faults_over_ssh_are_named(ssh_cluster_factory, tmp_path: Path):
    names = [f"gpu{i:02d}" for i in range(1, 6)]
    cluster = ssh_cluster_factory([(n, NodeScenario(n, PROFILE, FAULTS.get(n, ())).to_json()) for n in names])
    path = tmp_path / "ssh.yaml"
    path.write_text(cluster.inventory_yaml(profile="h100-sxm-8x", command_timeout=120, connect_timeout=30))
    outcome = run_validate(load_inventory(path, CATALOG), CATALOG, EngineOptions(checks=CHECKS), tmp_path / "r",
                           level="quick")
    nodes = {n.name: n for n in outcome.run.nodes}
    named = {name: [f for f in node.findings if f.check == "firmware.consistency"] for name, node in nodes.items()}
    assert {name for name, found in named.items() if found} == set(FAULTS)
    (vbios,) = named["gpu02"]
    assert vbios.verdict is Verdict.WARN and vbios.gpu == 2 and "96.00.61.00.01" in vbios.summary
    (cx,) = named["gpu03"]
    assert "28.39.1002" in cx.summary and cx.expected == "28.41.1000"
    assert {f.observed for f in named["gpu04"]} == {"1.6a", "08/11/2023"}
    assert nodes["gpu01"].facts["firmware"]["system.bios_version"] == {"": "2.1"}
