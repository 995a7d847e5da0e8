"""A dry-run is a plan: it says what the real run will do, follows the effects of its own steps (a driver change
that only a reboot loads, the hold and CDI spec of the new driver), and never says READY or NOT_READY anywhere.
The real install refuses before any change when its plan needs a reboot that --allow-reboot does not grant."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest
from test_deploy_sim import INSTALL, fresh_state, inventory, mutating_calls  # noqa: F401 - fixture

from nvdeploy.actions import StepStatus
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.install import run_install
from nvdeploy.phases.rollout import PhaseOptions
from nvdeploy.results import ClusterVerdict, ErrorReason, RunResult
from nvdeploy.sim import state

CATALOG = ProfileCatalog()
pytestmark = pytest.mark.timeout(120)
UPGRADE = {"gpu01": ["driver_mismatch"]}  # 535.161.08 installed and loaded, 550.90.07 wanted


def statuses(outcome, node: str = "gpu01") -> dict[str, StepStatus]:
    return {s.step: s.status for s in outcome.phases[0].steps[node]}


def test_a_dry_run_plans_the_reboot_a_driver_change_needs_and_stops_where_the_run_would(tmp_path):
    inv = inventory(tmp_path, UPGRADE)
    plan = run_install(inv, CATALOG, PhaseOptions(dry_run=True), tmp_path / "plan", INSTALL)
    steps = {s.step: s for s in plan.phases[0].steps["gpu01"]}
    assert steps["driver"].status is StepStatus.WOULD_CHANGE
    # the hold the new driver gets, not "nothing to hold" (its packages are not installed yet)
    assert steps["hold"].status is StepStatus.WOULD_CHANGE and "550.90.07" in str(steps["hold"].changes), steps["hold"]
    reboot = steps["reboot"]
    assert reboot.status is StepStatus.FAILED and reboot.reason is ErrorReason.REBOOT_REQUIRED, reboot
    assert "the run would stop here" in reboot.message and "535.161.08 is loaded" in reboot.message
    assert steps["cuda"].status is StepStatus.NOT_RUN
    assert plan.exit_code == 3 and plan.run.verdict is ClusterVerdict.PLAN
    assert mutating_calls("lab", "gpu01") == [] and state.snapshot_memory("lab") == {}
    # the real run does what the plan said: it stops at the reboot, and changes nothing before it
    real = run_install(inv, CATALOG, PhaseOptions(), tmp_path / "real", INSTALL)
    assert statuses(real)["reboot"] is StepStatus.FAILED and real.exit_code == 3
    assert mutating_calls("lab", "gpu01") == [] and state.snapshot_memory("lab") == {}


def test_with_allow_reboot_the_plan_equals_what_the_run_then_does(tmp_path):
    inv = inventory(tmp_path, UPGRADE)
    options = PhaseOptions(dry_run=True, allow_reboot=True)
    plan = run_install(inv, CATALOG, options, tmp_path / "plan", INSTALL)
    planned = statuses(plan)
    assert planned["reboot"] is StepStatus.WOULD_CHANGE
    cdi = next(s for s in plan.phases[0].steps["gpu01"] if s.step == "container_runtime")
    assert "driver 550.90.07" in str(cdi.changes), cdi  # the driver the reboot loads, not the one it replaces
    real = run_install(inv, CATALOG, PhaseOptions(allow_reboot=True), tmp_path / "real", INSTALL)
    done = statuses(real)
    assert {s for s, v in planned.items() if v is StepStatus.WOULD_CHANGE} == \
        {s for s, v in done.items() if v is StepStatus.CHANGED}
    real_cdi = next(s for s in real.phases[0].steps["gpu01"] if s.step == "container_runtime")
    assert "driver 550.90.07" in str(real_cdi.changes)
    assert real.run.verdict is ClusterVerdict.READY and real.exit_code == 0


def test_the_record_of_a_dry_run_is_a_plan_in_every_writer(tmp_path):
    inv = inventory(tmp_path, {"gpu01": ["bare"], "gpu02": [], "gpu03": []})
    plan = run_install(inv, CATALOG, PhaseOptions(dry_run=True), tmp_path / "plan", INSTALL)
    assert plan.run.plan and plan.run.verdict is ClusterVerdict.PLAN and plan.exit_code == 0
    assert plan.run.summary().startswith("A plan, not a readiness verdict")
    data = json.loads((plan.run_dir / "results.json").read_text())
    assert data["verdict"] == "PLAN" and data["kind"] == "plan"
    assert RunResult.from_dict(data).verdict is ClusterVerdict.PLAN  # a rebuilt report stays a plan
    html = (plan.run_dir / "report.html").read_text()
    body = re.sub(r"<style.*?</style>|<script.*?</script>", "", html, flags=re.S)
    assert not re.search(r"NOT.READY|\bREADY\b", body), re.findall(r".{40}READY.{40}", body)
    assert "install plan" in body and 'id="verdict">PLAN<' in body
    junit = ET.parse(plan.run_dir / "junit.xml").getroot()
    assert "READY" not in ET.tostring(junit, encoding="unicode")
    # identical nodes fold into one host range in the phases table, as on the terminal
    assert "gpu[02-03]" in body


def test_a_normal_run_is_not_a_plan(tmp_path):
    inv = inventory(tmp_path, {"gpu01": []})
    done = run_install(inv, CATALOG, PhaseOptions(), tmp_path / "r", INSTALL)
    assert not done.run.plan and done.run.verdict is ClusterVerdict.READY
    assert json.loads((done.run_dir / "results.json").read_text())["kind"] == "verdict"


def test_a_plans_prometheus_file_says_plan_and_passes_promtool(tmp_path):
    import os
    import shutil
    import subprocess

    from nvdeploy.report.prometheus import render_prometheus

    inv = inventory(tmp_path, {"gpu01": []})
    plan = run_install(inv, CATALOG, PhaseOptions(dry_run=True), tmp_path / "plan", INSTALL)
    text = render_prometheus(plan.run)
    assert 'verdict="PLAN"} 1' in text and 'verdict="READY"} 0' in text
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("NVDEPLOY_REQUIRE_SSHD"):
            pytest.fail("promtool is required in CI but missing (.ci/run installs it with apt-get install prometheus)")
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")
