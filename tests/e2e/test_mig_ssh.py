"""MIG layouts over real SSH (OpenSSH on loopback, the simulator's fake tools on each node's PATH, state in each
node's nvd-state.json): optimize applies the layout through sudo, validate's gpu.mig (nvidia-smi mig -lgi / -lci in
the light batch) names exactly the GPU whose instances drifted (mig_drift:2), and a second optimize changes nothing on
the healthy nodes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nvdeploy.actions import StepStatus
from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.optimize import run_optimize
from nvdeploy.phases.playbook import resolve_playbook
from nvdeploy.phases.rollout import PhaseOptions
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim import state
from nvdeploy.sim.scenario import NodeScenario

CATALOG = ProfileCatalog()
PROFILE = CATALOG.get("h100-sxm-8x")
OPTIMIZE = resolve_playbook(None, "optimize")
LAYOUT = """version: v1
mig-configs:
  half-and-half:
    - devices: [0, 1, 2, 3]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
    - devices: [4, 5, 6, 7]
      mig-enabled: false
"""
FAULTS = {"gpu02": ("mig_drift:2",)}

pytestmark = [pytest.mark.timeout(600), pytest.mark.usefixtures("requires_sshd")]


def test_mig_drift_over_ssh_is_named_and_a_second_run_changes_nothing(ssh_cluster_factory, tmp_path: Path):
    names = ["gpu01", "gpu02", "gpu03"]
    cluster = ssh_cluster_factory([(n, NodeScenario(n, PROFILE, ("sudo_nopasswd", *FAULTS.get(n, ()))).to_json())
                                   for n in names])
    (tmp_path / "mig-parted.yaml").write_text(LAYOUT)
    data = yaml.safe_load(cluster.inventory_yaml(profile="h100-sxm-8x", command_timeout=120, connect_timeout=30))
    data["all"]["vars"].update({"sudo": True, "mig_config": "half-and-half", "mig_config_file": "mig-parted.yaml"})
    path = tmp_path / "ssh.yaml"
    path.write_text(yaml.safe_dump(data))
    inv = load_inventory(path, CATALOG)

    applied = run_optimize(inv, CATALOG, PhaseOptions(tags=("mig",)), tmp_path / "o1", OPTIMIZE)
    steps = {node: next(s for s in found if s.step == "mig_layout") for node, found in applied.phases[0].steps.items()}
    assert steps["gpu01"].status is StepStatus.CHANGED and steps["gpu03"].status is StepStatus.CHANGED
    assert steps["gpu02"].status is StepStatus.FAILED and "GPU2 MIG is Enabled, 3g.40gb x1" in steps["gpu02"].message

    outcome = run_validate(inv, CATALOG, EngineOptions(checks=("gpu.mig",)), tmp_path / "v", level="quick")
    findings = {n.name: [f for f in n.findings if f.check == "gpu.mig"] for n in outcome.run.nodes}
    assert {name for name, found in findings.items() if any(f.verdict is not Verdict.PASS for f in found)} == \
        set(FAULTS)
    (fail,) = findings["gpu02"]
    assert fail.verdict is Verdict.FAIL and fail.gpu == 2 and "missing 3g.40gb x1" in fail.summary
    assert [f.verdict for f in findings["gpu01"]] == [Verdict.PASS]

    log_before = len(state.read_file_state(cluster.node("gpu01").home)[1])
    again = run_optimize(inv, CATALOG, PhaseOptions(tags=("mig",)), tmp_path / "o2", OPTIMIZE)
    step = next(s for s in again.phases[0].steps["gpu01"] if s.step == "mig_layout")
    assert step.status is StepStatus.OK, step.message
    stored, log = state.read_file_state(cluster.node("gpu01").home)
    assert not [c for c in log[log_before:] if c["mutates"]]
    assert stored is not None and [len(stored.mig_gpus[str(i)]["gis"]) for i in range(4)] == [2, 2, 2, 2]
