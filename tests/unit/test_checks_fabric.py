"""fabric.manager: nvidia-fabricmanager active (and at the driver's version) on NVSwitch SKUs."""

from __future__ import annotations

from _catalog_helpers import CATALOG, context, result, run_check, sim_check, sim_results, verdicts

from nvdeploy.results import ErrorReason, Remediation, Verdict
from nvdeploy.sim.scenario import NodeScenario


def test_active_fabric_manager_passes_with_its_version():
    findings = sim_check("fabric.manager")
    assert verdicts(findings) == [Verdict.PASS] and findings[0].summary == "nvidia-fabricmanager active (550.90.07)"


def test_fabric_manager_down_fails_with_the_cuda_symptom():
    findings = sim_check("fabric.manager", "fabricmanager_down")
    assert verdicts(findings) == [Verdict.FAIL]
    assert findings[0].observed == "failed" and "system not yet initialized" in findings[0].summary
    assert findings[0].remediation is Remediation.REINSTALL
    inactive = context({"fabricmanager": result("fabricmanager", "inactive\n", rc=3)})
    assert run_check("fabric.manager", inactive)[0].remediation is Remediation.REBOOT


def test_version_other_than_the_driver_fails():
    found = sim_check("fabric.manager", "driver_mismatch")  # driver 535.161.08, fabric manager follows the driver
    assert verdicts(found) == [Verdict.PASS]
    results = sim_results(NodeScenario("node01", CATALOG.get("h100-sxm-8x")), ["nvidia_smi_xml", "fabricmanager"])
    results["fabricmanager_version"] = result("fabricmanager_version", "Fabric Manager version is : 535.104.05\n")
    findings = run_check("fabric.manager", context(results))
    assert verdicts(findings) == [Verdict.FAIL] and (findings[0].observed, findings[0].expected) == (
        "535.104.05", "550.90.07")


def test_skus_without_nvswitch_skip():
    assert verdicts(sim_check("fabric.manager", profile="l40s-8x")) == [Verdict.SKIP]
    assert verdicts(sim_check("fabric.manager", profile="h100-pcie-8x")) == [Verdict.SKIP]


def test_no_systemctl_or_odd_answer_is_error():
    ctx = context({"fabricmanager": result("fabricmanager", "", rc=127, stderr="sh: 1: systemctl: not found")})
    assert run_check("fabric.manager", ctx)[0].reason is ErrorReason.TOOL_MISSING
    ctx = context({"fabricmanager": result("fabricmanager", "System has not been booted with systemd\n", rc=1)})
    finding = run_check("fabric.manager", ctx)[0]
    assert finding.verdict is Verdict.ERROR and finding.reason is ErrorReason.UNPARSEABLE
