"""MIG layouts over simulated fleets: optimize applies a mig-parted layout per GPU, validate's gpu.mig then names
exactly the GPU whose instances drifted (mig_drift:<GPU>) on a 16-node fleet; a second run changes nothing; the
dry-run's plan is what the run does; a busy node and a VM whose GPUs cannot be reset are refused before any change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvdeploy.actions import StepStatus
from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.optimize import run_optimize
from nvdeploy.phases.playbook import resolve_playbook
from nvdeploy.phases.rollout import PhaseOptions
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import ErrorReason, Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim import state

CATALOG = ProfileCatalog()
OPTIMIZE = resolve_playbook(None, "optimize")
MIG = PhaseOptions(tags=("mig",))
pytestmark = pytest.mark.timeout(300)
LAYOUTS = """version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  training-and-inference:
    - devices: [0, 1, 2, 3]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
    - devices: [4, 5]
      device-filter: "0x233010DE"
      mig-enabled: true
      mig-devices: {"4g.40gb": 1, "3g.40gb": 1}
    - devices: [6, 7]
      mig-enabled: false
"""
DRIFT_NODE, DRIFT_GPU = "gpu07", 4


@pytest.fixture(autouse=True)
def fresh_state():
    state.reset_memory()
    yield
    state.reset_memory()


def inventory(tmp_path: Path, faults: dict[str, list[str]], count: int = 16, profile: str = "h100-sxm-8x",
              layout: str = "training-and-inference", cluster: str = "mig", extra: str = ""):
    (tmp_path / "mig-parted.yaml").write_text(LAYOUTS)
    lines = ["all:", f"  vars: {{connection: sim, profile: {profile}, cluster: {cluster}, mig_config: {layout}, "
             f"mig_config_file: mig-parted.yaml{extra}}}", "  hosts:"]
    for i in range(1, count + 1):
        name = f"gpu{i:02d}"
        lines.append(f"    {name}: {{sim_faults: {json.dumps(faults.get(name, []))}}}")
    path = tmp_path / "inv.yaml"
    path.write_text("\n".join(lines) + "\n")
    return load_inventory(path, CATALOG)


def layout_step(outcome, node: str):
    return next(s for s in outcome.phases[0].steps[node] if s.step == "mig_layout")


def mutating(cluster: str, node: str) -> list[list[str]]:
    return [c["argv"] for c in state.memory_calls(cluster, node) if c["mutates"]]


def test_mig_drift_is_named_exactly_on_a_16_node_fleet(tmp_path):
    inv = inventory(tmp_path, {DRIFT_NODE: [f"mig_drift:{DRIFT_GPU}"]})
    applied = run_optimize(inv, CATALOG, MIG, tmp_path / "o", OPTIMIZE)
    statuses = {node: layout_step(applied, node) for node in applied.phases[0].steps}
    assert {n for n, s in statuses.items() if s.status is StepStatus.CHANGED} == set(statuses) - {DRIFT_NODE}
    drifted = statuses[DRIFT_NODE]
    assert drifted.status is StepStatus.FAILED and drifted.message == (
        f"verify: GPU{DRIFT_GPU} MIG is Enabled, 4g.40gb x1, expected Enabled, 4g.40gb x1, 3g.40gb x1")
    outcome = run_validate(inv, CATALOG, EngineOptions(checks=("gpu.mig",)), tmp_path / "v", level="quick")
    findings = {n.name: [f for f in n.findings if f.check == "gpu.mig"] for n in outcome.run.nodes}
    named = {node: found for node, found in findings.items() if any(f.verdict is not Verdict.PASS for f in found)}
    assert set(named) == {DRIFT_NODE}
    (fail,) = named[DRIFT_NODE]
    assert fail.verdict is Verdict.FAIL and fail.gpu == DRIFT_GPU
    assert "missing 3g.40gb x1" in fail.summary and fail.expected == "4g.40gb x1, 3g.40gb x1"
    assert fail.observed == "4g.40gb x1"
    for node, (finding,) in findings.items():
        if node != DRIFT_NODE:
            assert finding.verdict is Verdict.PASS and finding.summary.startswith("8 GPU(s) as MIG layout")
    # the light batch ran the two listings
    assert {"mig_lgi", "mig_lci"} <= {e.collector for e in outcome.run.nodes[0].evidence}


def test_apply_then_verify_is_idempotent_and_persisted(tmp_path):
    inv = inventory(tmp_path, {}, count=2)
    first = run_optimize(inv, CATALOG, MIG, tmp_path / "o1", OPTIMIZE)
    step = layout_step(first, "gpu01")
    assert step.status is StepStatus.CHANGED
    assert [c.item for c in step.changes] == [f"GPU{i} MIG" for i in range(6)]  # GPUs 6-7 stay Disabled: no change
    assert step.changes[4].after == "Enabled, 4g.40gb x1, 3g.40gb x1"
    calls = len(state.memory_calls("mig", "gpu01"))
    again = run_optimize(inv, CATALOG, MIG, tmp_path / "o2", OPTIMIZE)
    assert layout_step(again, "gpu01").status is StepStatus.OK
    later = state.memory_calls("mig", "gpu01")[calls:]
    assert later and not [c for c in later if c["mutates"]]  # probed, nothing changed
    stored = state.memory_state("mig", "gpu01")
    assert stored is not None and len(stored.mig_gpus["0"]["gis"]) == 7
    assert "6" not in stored.mig_gpus  # a GPU already as the layout says was never touched


def test_the_dry_run_plan_is_what_the_run_then_does(tmp_path):
    inv = inventory(tmp_path, {}, count=1, profile="a100-sxm-8x")
    (tmp_path / "mig-parted.yaml").write_text(LAYOUTS.replace('"0x233010DE"', '"0x20B210DE"'))  # A100-SXM4-80GB
    plan = run_optimize(inv, CATALOG, PhaseOptions(tags=("mig",), dry_run=True), tmp_path / "p", OPTIMIZE)
    planned = layout_step(plan, "gpu01")
    assert planned.status is StepStatus.WOULD_CHANGE and mutating("mig", "gpu01") == []
    would = [c.command for c in planned.commands if c.mutates and not c.executed]
    assert any(c.endswith("nvidia-smi -i 0,1,2,3,4,5 -mig 1") for c in would)
    assert any(c.endswith("nvidia-smi -i 0,1,2,3,4,5 -r") for c in would)  # A100: the change stays pending
    # the GPU clients that would hold the GPUs open are stopped around the reset, then started again
    stop = next(i for i, c in enumerate(would) if c.endswith("systemctl stop nvidia-persistenced nvidia-dcgm"))
    start = next(i for i, c in enumerate(would) if c.endswith("systemctl start nvidia-persistenced nvidia-dcgm"))
    assert stop < would.index(next(c for c in would if c.endswith(" -r"))) < start
    run = run_optimize(inv, CATALOG, MIG, tmp_path / "r", OPTIMIZE)
    done = layout_step(run, "gpu01")
    assert done.status is StepStatus.CHANGED, done.message
    assert [c.command for c in done.commands if c.mutates and c.executed] == would
    assert [(c.item, c.before, c.after) for c in done.changes] == [(c.item, c.before, c.after) for c in planned.changes]
    stored = state.memory_state("mig", "gpu01")
    assert stored is not None and stored.services["nvidia-persistenced"] == [True, True]
    assert stored.services["nvidia-dcgm"] == [True, True]


def test_a_busy_node_is_refused_naming_its_processes_and_nothing_changes(tmp_path):
    inv = inventory(tmp_path, {"gpu01": ["gpu_busy"]}, count=1)
    outcome = run_optimize(inv, CATALOG, MIG, tmp_path / "o", OPTIMIZE)
    step = layout_step(outcome, "gpu01")
    assert step.status is StepStatus.FAILED and step.reason is ErrorReason.BUSY
    assert "pid 41230 python3" in step.message and "drain the node" in step.message
    assert mutating("mig", "gpu01") == []


def test_a_vm_needs_a_reboot_refused_before_any_change_without_allow_reboot(tmp_path):
    inv = inventory(tmp_path, {"gpu01": ["vm_passthrough", "power_capped"]}, count=1)
    outcome = run_optimize(inv, CATALOG, PhaseOptions(), tmp_path / "o", OPTIMIZE)
    step = layout_step(outcome, "gpu01")
    assert step.status is StepStatus.FAILED and step.reason is ErrorReason.REBOOT_REQUIRED
    assert "needs a reboot" in step.message and "--allow-reboot" in step.message
    # refused up front: not even the power limit the node also needed was changed
    assert mutating("mig", "gpu01") == []
    plan = run_optimize(inv, CATALOG, PhaseOptions(dry_run=True), tmp_path / "p", OPTIMIZE)
    assert "the run would stop here" in layout_step(plan, "gpu01").message


def test_a_vm_with_allow_reboot_reboots_once_and_gets_its_layout(tmp_path):
    inv = inventory(tmp_path, {"gpu01": ["vm_passthrough"]}, count=1, extra=", reboot_timeout: 60")
    outcome = run_optimize(inv, CATALOG, PhaseOptions(tags=("mig",), allow_reboot=True), tmp_path / "o", OPTIMIZE)
    step = layout_step(outcome, "gpu01")
    assert step.status is StepStatus.CHANGED, step.message
    assert [argv for argv in mutating("mig", "gpu01") if argv[-1] in ("reboot", "-r")] == [["reboot"]]
    stored = state.memory_state("mig", "gpu01")
    assert stored is not None and stored.boots == 2 and len(stored.mig_gpus["0"]["gis"]) == 7


def test_without_a_layout_the_mig_mode_step_and_check_are_as_before(tmp_path):
    path = tmp_path / "inv.yaml"
    path.write_text("all:\n  vars: {connection: sim, profile: h100-sxm-8x, cluster: plain}\n  hosts:\n    gpu01: {}\n")
    inv = load_inventory(path, CATALOG)
    outcome = run_optimize(inv, CATALOG, MIG, tmp_path / "o", OPTIMIZE)
    steps = {s.step: s for s in outcome.phases[0].steps["gpu01"]}
    assert steps["mig"].status is StepStatus.OK and steps["mig_layout"].status is StepStatus.SKIPPED
    checked = run_validate(inv, CATALOG, EngineOptions(checks=("gpu.mig",)), tmp_path / "v", level="quick")
    (finding,) = [f for f in checked.run.nodes[0].findings if f.check == "gpu.mig"]
    assert finding.verdict is Verdict.PASS and finding.summary == "MIG mode Disabled on every GPU"
    # not collected without a layout
    assert not {"mig_lgi", "mig_lci"} & {e.collector for e in checked.run.nodes[0].evidence}


def test_the_mig_enabled_host_var_is_what_optimize_sets_and_gpu_mig_expects(tmp_path):
    path = tmp_path / "inv.yaml"
    path.write_text("all:\n  vars: {connection: sim, profile: h100-sxm-8x, cluster: mode, mig_enabled: true}\n"
                    "  hosts:\n    gpu01: {}\n")
    inv = load_inventory(path, CATALOG)
    outcome = run_optimize(inv, CATALOG, MIG, tmp_path / "o", OPTIMIZE)
    assert next(s for s in outcome.phases[0].steps["gpu01"] if s.step == "mig").status is StepStatus.CHANGED
    checked = run_validate(inv, CATALOG, EngineOptions(checks=("gpu.mig",)), tmp_path / "v", level="quick")
    (finding,) = [f for f in checked.run.nodes[0].findings if f.check == "gpu.mig"]
    assert finding.verdict is Verdict.PASS and finding.summary == "MIG mode Enabled on every GPU"
