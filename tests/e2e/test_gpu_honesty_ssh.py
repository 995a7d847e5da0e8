"""End to end over real SSH (OpenSSH's sshd on loopback, fake GPU tools on each node's PATH): a GPU whose ECC
counters cannot be read is ERROR naming it, a lost GPU is FAIL ISOLATE, a fatal NVSwitch SXid is FAIL."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.levels import load_levels
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import ClusterVerdict, Remediation, Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim.scenario import ECC_UNKNOWN_GPU, LOST_GPU, NodeScenario

CATALOG = ProfileCatalog()
PROFILE = CATALOG.get("h100-sxm-8x")

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("requires_sshd")]


def scenario(name: str, *faults: str) -> tuple[str, str]:
    return name, NodeScenario(name, PROFILE, tuple(faults)).to_json()


def test_unknown_lost_and_nvswitch_faults_over_real_ssh(ssh_cluster_factory, tmp_path: Path):
    cluster = ssh_cluster_factory([scenario("gpu01"), scenario("gpu02", "ecc_unknown"),
                                   scenario("gpu03", "sxid_fatal"), scenario("gpu04", "gpu_lost")])
    path = tmp_path / "ssh.yaml"
    path.write_text(cluster.inventory_yaml(profile="h100-sxm-8x", command_timeout=120, connect_timeout=30))
    options = EngineOptions(checks=load_levels()["quick"])
    outcome = run_validate(load_inventory(path, CATALOG), CATALOG, options, tmp_path / "reports")
    nodes = {n.name: n for n in outcome.run.nodes}

    assert nodes["gpu01"].verdict is Verdict.PASS, [f for f in nodes["gpu01"].findings if f.verdict is not
                                                     Verdict.PASS]

    ecc = [f for f in nodes["gpu02"].findings if f.check == "memory.ecc_errors"]
    assert [(f.verdict, f.gpu) for f in ecc] == [(Verdict.ERROR, ECC_UNKNOWN_GPU)]
    assert f"GPU{ECC_UNKNOWN_GPU} (00000000:DB:00.0)" in ecc[0].summary and "UNKNOWN" in ecc[0].summary
    assert nodes["gpu02"].verdict is Verdict.ERROR

    sxid = [f for f in nodes["gpu03"].findings if f.check == "kmsg.sxid"]
    assert [f.verdict for f in sxid] == [Verdict.FAIL]
    assert "nvidia-nvswitch3 (PCI 0000:08:00.0), link 48" in sxid[0].summary
    assert sxid[0].remediation is Remediation.REBOOT
    assert [f.verdict for f in nodes["gpu03"].findings if f.check == "kmsg.xid"] == [Verdict.PASS]

    lost = [f for f in nodes["gpu04"].findings if f.gpu == LOST_GPU]
    assert {f.check for f in lost} >= {"driver.loaded", "gpu.count", "memory.ecc_errors", "pcie.link"}
    assert {(f.verdict, f.remediation) for f in lost} == {(Verdict.FAIL, Remediation.ISOLATE)}
    # The other seven GPUs of the lost GPU's node were judged, not skipped.
    assert not [f for f in nodes["gpu04"].findings if f.verdict is Verdict.ERROR]

    assert outcome.run.verdict is ClusterVerdict.NOT_READY
    assert outcome.exit_code == 1
    evidence = (outcome.run_dir / "evidence" / "gpu03" / "kmsg.out").read_bytes()
    assert b"SXid (PCI:0000:08:00.0): 20034, Fatal" in evidence
