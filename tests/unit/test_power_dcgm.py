"""DCGM diag's power tests feed the power records: power.node names each GPU whose Targeted Power / Pulse test did
not pass (with the watts DCGM reached and its target) and the dcgm.diag_rN finding that judges it, power.cluster
lists them for the report's Power section, and the FAIL itself stays dcgm.diag_rN's alone (counted once)."""

from __future__ import annotations

import json
from pathlib import Path

from _catalog_helpers import CATALOG, context, run_check, sim_results
from click.testing import CliRunner

from nvdeploy.checks.power import dcgm_power_results, describe_power_result, evaluate_power
from nvdeploy.cli.app import cli
from nvdeploy.parsers.dcgm import parse_dcgm_diag
from nvdeploy.results import Finding, NodeResult, Verdict
from nvdeploy.sim.scenario import NodeScenario

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
PROFILE = CATALOG.get("h100-sxm-8x")


def power_ctx(*faults: str, level: int = 3, host_vars=None):
    scenario = NodeScenario("node01", PROFILE, tuple(faults), PROFILE)
    results = sim_results(scenario, ["nvidia_smi_xml", f"dcgm_diag_r{level}"], host_vars)
    return context(results, PROFILE, host_vars)


def test_real_r4_text_power_test_passed_for_all_gpus():
    text = (REAL / "dcgmi-diag-text" / "r4-dcgm2x-blacklist-era-all-pass-azure-fairwus3.txt").read_text()
    entries = dcgm_power_results({"dcgm_diag": {4: parse_dcgm_diag(text)}})
    assert [(e["test"], e["verdict"], e["gpu"]) for e in entries if e["test"] == "Targeted Power"] == \
        [("Targeted Power", "PASS", None)]


def test_targeted_power_failure_is_named_beside_the_node_power_not_counted_twice():
    ctx = power_ctx("dcgm_fail:targeted_power")
    [power] = run_check("power.node", ctx)
    diag = run_check("dcgm.diag_r3", ctx)
    # One FAIL for the cause, dcgm.diag_r3's; power.node keeps its record and points at it.
    assert [(f.verdict, f.gpu) for f in diag if f.verdict is Verdict.FAIL] == [(Verdict.FAIL, 2)]
    assert power.verdict is Verdict.PASS
    [bad] = power.observed["dcgm_power"]
    assert (bad["gpu"], bad["verdict"], bad["reached_w"], bad["target_w"], bad["check"]) == \
        (2, "FAIL", 411.2, 630.0, "dcgm.diag_r3")
    assert power.observed["dcgm_power_passed"] == 7
    assert "DCGM power tests: GPU2: r3 Targeted Power FAIL, 411.2 W of 630 W (dcgm.diag_r3)" in power.summary


def test_passing_power_test_and_no_diag_leave_the_record_as_it_was():
    [passed] = run_check("power.node", power_ctx())
    assert passed.observed["dcgm_power"] == [] and passed.observed["dcgm_power_passed"] == 8
    assert "DCGM power tests passed (8 GPU results)" in passed.summary
    [r2] = run_check("power.node", power_ctx(level=2))  # r2 runs no power test: nothing added
    assert "dcgm_power" not in r2.observed and "DCGM" not in r2.summary


def test_cluster_record_lists_the_failures_for_the_power_section():
    bad = {"gpus": 8, "limit_w": 5600.0, "draw_w": 500.0, "rack": "r1", "rack_budget_w": None,
           "dcgm_power": [{"level": 3, "test": "Targeted Power", "gpu": 2, "verdict": "FAIL", "check": "dcgm.diag_r3",
                           "reached_w": 411.2, "target_w": 630.0}], "dcgm_power_passed": 7}
    good = {**bad, "dcgm_power": [], "dcgm_power_passed": 8}
    nodes = [NodeResult("gpu01", (Finding("power.node", Verdict.PASS, "x", node="gpu01", observed=bad),)),
             NodeResult("gpu02", (Finding("power.node", Verdict.PASS, "x", node="gpu02", observed=good),))]
    [total] = [f for f in evaluate_power(nodes) if f.check == "power.cluster"]
    assert total.verdict is Verdict.PASS
    assert total.observed["dcgm_power"] == ["gpu01 GPU2: r3 Targeted Power FAIL, 411.2 W of 630 W (dcgm.diag_r3)"]
    assert "DCGM power tests not passed: gpu01 GPU2" in total.summary
    [clean] = [f for f in evaluate_power(nodes[1:]) if f.check == "power.cluster"]
    assert clean.observed["dcgm_power"] == [] and "DCGM power tests passed on gpu02" in clean.summary
    assert describe_power_result({"level": 4, "test": "Pulse Test", "gpu": None, "verdict": "SKIP",
                                  "check": "dcgm.diag_r4"}) == "r4 Pulse Test SKIP (dcgm.diag_r4)"


def test_full_validate_counts_the_power_failure_once_and_shows_it_in_the_report(tmp_path):
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("all:\n  vars: {cluster: p, connection: sim, profile: h100-sxm-8x, rack: r1}\n  hosts:\n"
                         "    gpu001: {}\n    gpu002: {sim_faults: ['dcgm_fail:targeted_power']}\n")
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["validate", "-i", str(inventory), "--out", str(out), "--no-history", "-q",
                                   "--level", "full"], catch_exceptions=False)
    assert res.exit_code == 1, res.output
    [run_json] = list(out.glob("*/*/results.json"))
    run = json.loads(run_json.read_text())
    gpu002 = next(n for n in run["nodes"] if n["name"] == "gpu002")
    fails = [f for f in gpu002["findings"] if f["verdict"] == "FAIL"]
    assert [(f["check"], f["gpu"]) for f in fails] == [("dcgm.diag_r3", 2)]
    [power] = [f for f in gpu002["findings"] if f["check"] == "power.node"]
    assert power["verdict"] == "PASS" and "r3 Targeted Power FAIL" in power["summary"]
    [total] = [f for f in run["cluster_findings"] if f["check"] == "power.cluster"]
    assert total["observed"]["dcgm_power"] == ["gpu002 GPU2: r3 Targeted Power FAIL, 411.2 W of 630 W "
                                               "(dcgm.diag_r3)"]
    html = next(run_json.parent.glob("report.html")).read_text()
    assert 'id="power-dcgm"' in html and "gpu002 GPU2: r3 Targeted Power FAIL" in html
