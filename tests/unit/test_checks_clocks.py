"""clocks.throttle, clocks.temperature, clocks.power_limit and gpu.mig: thresholds from the profile."""

from __future__ import annotations

import re

from _catalog_helpers import CATALOG, context, profile_with, result, run_check, sim_check, verdicts

from nvdeploy.results import Remediation, Verdict
from nvdeploy.sim.scenario import NodeScenario, node_facts
from nvdeploy.sim.smi_xml import render_xml


def test_healthy_node_passes_every_clock_check():
    for check in ("clocks.throttle", "clocks.temperature", "clocks.power_limit", "gpu.mig"):
        assert verdicts(sim_check(check)) == [Verdict.PASS], check


def test_thermal_throttle_fails_gpu6_only():
    throttle = sim_check("clocks.throttle", "thermal_throttle")
    assert verdicts(throttle) == [Verdict.FAIL]
    assert throttle[0].gpu == 6 and "hw_thermal_slowdown" in throttle[0].summary and "91 C" in throttle[0].summary
    assert throttle[0].remediation is Remediation.INVESTIGATE
    temperature = sim_check("clocks.temperature", "thermal_throttle")
    assert verdicts(temperature) == [Verdict.FAIL]
    assert (temperature[0].gpu, temperature[0].observed, temperature[0].unit) == (6, 91.0, "C")


def test_throttle_verdicts_come_from_the_profile():
    # The same throttled GPU: WARN when the profile lists the reasons as warnings, PASS when it lists none.
    warn_only = profile_with("h100-sxm-8x", throttle={"fail": [], "warn": ["hw_thermal_slowdown"]})
    findings = sim_check("clocks.throttle", "thermal_throttle", profile=warn_only)
    assert verdicts(findings) == [Verdict.WARN] and findings[0].remediation is Remediation.MONITOR
    ignore = profile_with("h100-sxm-8x", throttle={"fail": [], "warn": []})
    assert verdicts(sim_check("clocks.throttle", "thermal_throttle", profile=ignore)) == [Verdict.PASS]
    assert verdicts(sim_check("clocks.throttle", profile=profile_with("h100-sxm-8x", throttle=None))) == [Verdict.SKIP]


def test_temperature_limit_is_profile_data():
    from dataclasses import replace

    base = CATALOG.get("h100-sxm-8x")
    hot = replace(base, gpu=replace(base.gpu, max_temperature_c=30))
    assert Verdict.FAIL in verdicts(sim_check("clocks.temperature", profile=hot))


def _xml_with_power_limit(watts: float) -> str:
    scenario = NodeScenario("node01", CATALOG.get("h100-sxm-8x"))
    text = render_xml(node_facts(scenario))
    return re.sub(r"<current_power_limit>[^<]*</current_power_limit>",
                  f"<current_power_limit>{watts:.2f} W</current_power_limit>", text, count=1)


def test_power_limit_different_from_the_profile_warns_tune():
    ctx = context({"nvidia_smi_xml": result("nvidia_smi_xml", _xml_with_power_limit(500))})
    findings = run_check("clocks.power_limit", ctx)
    assert verdicts(findings) == [Verdict.WARN]
    assert (findings[0].gpu, findings[0].observed, findings[0].expected) == (0, 500.0, 700)
    assert findings[0].remediation is Remediation.TUNE


def test_mig_enabled_fails_and_profile_can_expect_it():
    findings = sim_check("gpu.mig", "mig_enabled")
    assert verdicts(findings) == [Verdict.FAIL] and findings[0].observed == "Enabled"
    assert findings[0].remediation is Remediation.TUNE
    wants_mig = profile_with("h100-sxm-8x", mig={"enabled": True})
    assert verdicts(sim_check("gpu.mig", "mig_enabled", profile=wants_mig)) == [Verdict.PASS]
    assert verdicts(sim_check("gpu.mig", profile=wants_mig)) == [Verdict.FAIL]


def test_mig_is_skipped_on_gpus_without_mig():
    assert verdicts(sim_check("gpu.mig", profile="l40s-8x")) == [Verdict.SKIP]


def test_driver_missing_is_error_for_every_clock_check():
    for check in ("clocks.throttle", "clocks.temperature", "clocks.power_limit", "gpu.mig"):
        assert verdicts(sim_check(check, "driver_missing")) == [Verdict.ERROR], check
