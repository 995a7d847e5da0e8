"""power.node (limits and idle draw per node) and the cluster stage's power.budget / power.cluster roll-up."""

from __future__ import annotations

from pathlib import Path

import pytest
from _catalog_helpers import CATALOG, context, result, run_check, sim_check

from nvdeploy.checks.cluster import evaluate_cluster
from nvdeploy.checks.power import evaluate_power, idle_draw_w
from nvdeploy.config.inventory import load_inventory
from nvdeploy.results import ClusterVerdict, Finding, NodeResult, Remediation, Verdict

XML = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "nvidia-smi-xml"


@pytest.mark.parametrize("name, draws", [
    ("a100-sxm4-80gb-mig-v12-535.54.03.xml", [67.03]),          # gpu_power_readings; module readings N/A
    ("tesla-p100-pcie-16gb-v11-510.47.03.xml", [26.16]),        # old power_readings
    ("dual-rtx-a5000-v13-590.44.01.xml", [6.52, 13.59]),        # 590: instant_power_draw, no power_draw
])
def test_idle_draw_from_real_xml(name, draws):
    assert idle_draw_w((XML / name).read_text()) == draws


def test_real_xml_node_power():
    text = (XML / "dual-rtx-a5000-v13-590.44.01.xml").read_text()
    ctx = context({"nvidia_smi_xml": result("nvidia_smi_xml", text)}, host_vars={"rack": "r7"})
    [finding] = run_check("power.node", ctx)
    assert finding.verdict is Verdict.PASS
    assert finding.observed == {"gpus": 2, "limit_w": 460.0, "draw_w": 20.11, "rack": "r7", "rack_budget_w": None}


def test_sim_node_power_and_lost_gpu():
    [finding] = sim_check("power.node", host_vars={"rack": "a", "rack_power_budget_w": 40000})
    assert finding.observed == {"gpus": 8, "limit_w": 5600.0, "draw_w": finding.observed["draw_w"], "rack": "a",
                                "rack_budget_w": 40000.0}
    assert finding.observed["draw_w"] and finding.observed["draw_w"] < 5600
    lost = sim_check("power.node", "gpu_lost")
    assert [(f.verdict, f.remediation) for f in lost] == [(Verdict.FAIL, Remediation.ISOLATE)]  # never counted 0 W


def node(name: str, limit: float, rack: str | None, budget: float | None, draw: float | None = 500.0) -> NodeResult:
    observed = {"gpus": 8, "limit_w": limit, "draw_w": draw, "rack": rack, "rack_budget_w": budget}
    return NodeResult(name, (Finding("power.node", Verdict.PASS, "x", node=name, observed=observed),))


def test_rack_over_budget_fails_and_names_the_rack():
    nodes = [node("gpu01", 5600, "r1", 10000), node("gpu02", 5600, "r1", 10000), node("gpu03", 5600, "r2", 6000)]
    found = evaluate_power(nodes)
    budget = [f for f in found if f.check == "power.budget"]
    assert [(f.verdict, f.observed) for f in budget] == [(Verdict.FAIL, 11200), (Verdict.PASS, 5600)]
    assert "rack r1 (gpu[01-02])" in budget[0].summary and "1200 W over" in budget[0].summary
    assert budget[0].remediation is Remediation.TUNE
    [total] = [f for f in found if f.check == "power.cluster"]
    assert total.observed["limit_w"] == 16800 and total.observed["draw_w"] == 1500
    assert "16.8 kW at the limits, 1.5 kW at idle" in total.summary


def test_no_budget_no_rack_unknown_draw():
    found = evaluate_power([node("a", 5600, None, None, None), node("b", 700, None, 1)])
    assert [f.check for f in found] == ["power.cluster"]  # a budget without a rack name binds nothing
    assert found[0].observed["draw_w"] is None and "at idle" not in found[0].summary
    assert evaluate_power([NodeResult("x", ())]) == []


def test_differing_budgets_smallest_applies():
    [budget, _] = evaluate_power([node("a", 5000, "r", 9000), node("b", 5000, "r", 12000)])
    assert budget.verdict is Verdict.FAIL and "the smallest applies" in budget.summary


def test_cluster_stage_makes_the_run_not_ready(tmp_path):
    from nvdeploy.phases.validate import run_validate
    from nvdeploy.runner.engine import EngineOptions

    path = tmp_path / "inv.yaml"
    path.write_text("all:\n  vars: {connection: sim, profile: h100-sxm-8x, rack: r1, rack_power_budget_w: 10000}\n"
                    "  hosts:\n    n1: {}\n    n2: {}\n")
    outcome = run_validate(load_inventory(path, CATALOG), CATALOG, EngineOptions(checks=("power.node",)),
                           tmp_path / "out")
    fails = [f for f in outcome.run.cluster_findings if f.verdict is Verdict.FAIL]
    assert [f.check for f in fails] == ["power.budget"] and outcome.run.verdict is ClusterVerdict.NOT_READY
    assert all(n.verdict is Verdict.PASS for n in outcome.run.nodes)
    nodes, cluster = evaluate_cluster(list(outcome.run.nodes))
    assert {f.check for f in cluster} >= {"power.budget", "power.cluster"}
    # The report's power block: kW per rack and for the cluster, at the limits and at idle.
    html = (outcome.run_dir / "report.html").read_text()
    block = html[html.index('id="power-table"'):]
    block = block[:block.index("</table>")]
    assert "<td>r1</td>" in block and "11.2 kW" in block and "<b>cluster</b>" in block


def test_a_rack_with_unmeasured_nodes_is_never_pass_on_a_partial_sum(tmp_path):
    """Six 5.6 kW nodes against 30 kW: one unreachable, one whose nvidia-smi hangs. The four measured sum to 22.4 kW,
    under budget, but all six at their limits draw 33.6 kW: the rack's total is unknown, so ERROR incomplete."""
    from nvdeploy.phases.validate import run_validate
    from nvdeploy.results import ErrorReason
    from nvdeploy.runner.engine import EngineOptions

    path = tmp_path / "inv.yaml"
    path.write_text("all:\n  vars: {connection: sim, profile: h100-sxm-8x, rack: r1, rack_power_budget_w: 30000}\n"
                    "  hosts:\n    n1: {}\n    n2: {}\n    n3: {}\n    n4: {}\n"
                    "    n5: {sim_faults: [unreachable]}\n    n6: {sim_faults: [smi_hang], command_timeout: 2}\n")
    outcome = run_validate(load_inventory(path, CATALOG), CATALOG,
                           EngineOptions(checks=("power.node",)), tmp_path / "out")
    [budget] = [f for f in outcome.run.cluster_findings if f.check == "power.budget"]
    assert (budget.verdict, budget.reason) == (Verdict.ERROR, ErrorReason.INCOMPLETE), budget.summary
    assert "22.4 kW" in budget.summary and "not measured: n[5-6] (2 of 6 nodes)" in budget.summary
    assert outcome.run.verdict is not ClusterVerdict.READY


def test_unmeasured_nodes_cannot_hide_a_rack_already_over_budget():
    found = evaluate_power([node("a", 5600, "r", 10000), node("b", 5600, "r", 10000), NodeResult("c", ())],
                           racks_of={"c": ["r", 10000]})
    [budget] = [f for f in found if f.check == "power.budget"]
    assert budget.verdict is Verdict.FAIL and "not measured: c (1 of 3 nodes)" in budget.summary


def test_a_rack_with_no_node_measured_is_error_not_silence():
    found = evaluate_power([NodeResult("c", ()), NodeResult("d", ())], racks_of={"c": ["r", 9000], "d": ["r", 9000]})
    assert [(f.check, f.verdict) for f in found] == [("power.budget", Verdict.ERROR)]
    assert "not measured: c,d (2 of 2 nodes)" in found[0].summary


def test_every_node_measured_is_still_judged_on_the_sum():
    found = evaluate_power([node("a", 4000, "r", 9000), node("b", 4000, "r", 9000)],
                           racks_of={"a": ["r", 9000], "b": ["r", 9000]})
    [budget] = [f for f in found if f.check == "power.budget"]
    assert budget.verdict is Verdict.PASS and "not measured" not in budget.summary
