"""Two simulated GB200 NVL72 racks (inventories/gb200-2rack.yaml, 36 trays, one fault per kind of tray) at the quick
level in-process: exactly the expected fabric, recovery and domain findings, on the right trays and racks."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvdeploy.checks.nvlink_domain import evaluate_domains
from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.levels import load_levels
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import ClusterVerdict, ErrorReason, NodeResult, Remediation, Verdict
from nvdeploy.runner.engine import EngineOptions

CATALOG = ProfileCatalog()
LEVELS = load_levels()
ROOT = Path(__file__).resolve().parents[2]
INVENTORY = ROOT / "inventories" / "gb200-2rack.yaml"
MINE = ("nvlink.fabric", "gpu.recovery_action", "nvlink.domain")


def quick(tmp_path: Path, inventory: Path = INVENTORY):
    return run_validate(load_inventory(inventory, CATALOG), CATALOG, EngineOptions(checks=LEVELS["quick"]),
                        tmp_path / "reports", level="quick")


@pytest.fixture(scope="module")
def two_racks(tmp_path_factory):
    return quick(tmp_path_factory.mktemp("nvl72"))


def not_passing(outcome, checks=MINE):
    """(node, check, verdict, gpu) of every node finding of ``checks`` that is not PASS or SKIP."""
    return sorted((n.name, f.check, f.verdict.value, f.gpu) for n in outcome.run.nodes for f in n.findings
                  if f.check in checks and f.verdict not in (Verdict.PASS, Verdict.SKIP))


def test_two_racks_with_one_fault_per_tray_give_exactly_the_expected_tray_findings(two_racks):
    assert not_passing(two_racks) == sorted(
        [("tray01", "nvlink.fabric", "ERROR", i) for i in range(4)]
        + [("tray02", "nvlink.fabric", "FAIL", i) for i in range(4)]
        + [("tray03", "nvlink.fabric", "FAIL", 2),
           ("tray20", "gpu.recovery_action", "FAIL", 1),
           ("tray21", "nvlink.domain", "FAIL", None)])
    nodes = {n.name: n for n in two_racks.run.nodes}
    first = next(f for f in nodes["tray01"].findings if f.check == "nvlink.fabric")
    assert first.reason is ErrorReason.INCOMPLETE and "In Progress (3 h 0 min after boot)" in first.summary
    reset = next(f for f in nodes["tray20"].findings if f.check == "gpu.recovery_action")
    assert reset.remediation is Remediation.RESET_GPU and "'Reset'" in reset.summary
    split = next(f for f in nodes["tray21"].findings if f.check == "nvlink.domain")
    assert "clique 32765" in split.summary and "rack rack2's other trays" in split.summary
    # Every other check of the catalog passes on the healthy trays (the tray profile fits the simulated GB200).
    others = sorted((n.name, f.check, f.verdict.value) for n in two_racks.run.nodes for f in n.findings
                    if f.check not in MINE and not f.check.startswith("imex.")
                    and f.verdict not in (Verdict.PASS, Verdict.SKIP))
    assert others == []
    assert two_racks.run.verdict is ClusterVerdict.NOT_READY


def test_each_rack_is_judged_as_one_domain_naming_its_missing_trays(two_racks):
    domain = sorted((f.verdict.value, f.summary) for f in two_racks.run.cluster_findings if f.check == "nvlink.domain")
    assert [v for v, _ in domain] == ["FAIL", "FAIL", "FAIL"], domain
    rack1 = next(s for _, s in domain if s.startswith("rack rack1:"))
    assert "short: 16 of 18 trays, 64 of 72 GPUs" in rack1
    assert "missing tray[01-02]: no GPU registered (see nvlink.fabric)" in rack1 and "tray[03-18]" in rack1
    rack2 = [s for _, s in domain if s.startswith("rack rack2:")]
    assert len(rack2) == 2
    main = next(s for s in rack2 if "clique 32766" in s)
    assert "short: 17 of 18 trays, 68 of 72 GPUs" in main and "missing tray21: in clique 32765" in main
    alone = next(s for s in rack2 if "clique 32765" in s)
    assert "tray tray21 is in an NVLink domain of its own" in alone
    # The HTML report shows each domain as a rack: its trays, GPUs and what is wrong.
    html = (two_racks.run_dir / "report.html").read_text()
    table = html[html.index('id="nvlink-domains"'):]
    table = table[:table.index("</table>")]
    assert table.count("<tr>") == 4 and "tray[03-18]" in table and "64 / 72" in table and "rack rack2" in table


def test_healthy_racks_pass_the_domain_check(tmp_path):
    text = "\n".join(line.split("#")[0].rstrip() for line in INVENTORY.read_text().splitlines()
                     if "sim_faults" not in line)
    text = "\n".join(line for line in text.splitlines() if not line.strip().startswith("tray") or "[" in line)
    path = tmp_path / "healthy.yaml"
    path.write_text(text.replace("cluster: gb200-2rack", "cluster: gb200-healthy") + "\n")
    outcome = quick(tmp_path, path)
    domain = [f for f in outcome.run.cluster_findings if f.check == "nvlink.domain"]
    assert [(f.verdict, f.summary.split(":")[0]) for f in domain] == [(Verdict.PASS, "rack rack1"),
                                                                      (Verdict.PASS, "rack rack2")], domain
    assert "18 trays, 72 GPUs" in domain[0].summary
    assert not_passing(outcome) == []


def tray(name: str, domains: dict, profile: str = "gb200-nvl72@1") -> NodeResult:
    return NodeResult(name, (), profile=profile, facts={"nvlink_fabric": {"trays": 4, "gpus": 16,
                                                                          "domains": domains}})


def test_a_tray_split_across_domains_and_a_domain_spanning_racks_fail():
    a, b = "1111aaaa-0000-0000-0000-000000000001/7", "2222bbbb-0000-0000-0000-000000000002/7"
    nodes = [tray("t1", {a: [0, 1, 2, 3]}), tray("t2", {a: [0, 1], b: [2, 3]}), tray("t3", {a: [0, 1, 2, 3]}),
             tray("t4", {a: [0, 1, 2, 3]})]
    racks = {"t1": ["r1"], "t2": ["r1"], "t3": ["r1"], "t4": ["r2"]}
    updated, findings = evaluate_domains(nodes, racks)
    by_node = {n.name: [(f.verdict, f.summary) for f in n.findings] for n in updated}
    assert by_node["t2"][0][0] is Verdict.FAIL and "split across 2 NVLink domains" in by_node["t2"][0][1]
    assert by_node["t1"] == [] and by_node["t3"] == []
    spanning = next(f for f in findings if "clique 7 of cluster 1111aaaa" in f.summary)
    assert spanning.verdict is Verdict.FAIL and "spans racks r1, r2" in spanning.summary


def test_unreachable_trays_make_a_short_domain_error_not_fail():
    a = "1111aaaa-0000-0000-0000-000000000001/7"
    nodes = [tray("t1", {a: [0, 1, 2, 3]}), tray("t2", {a: [0, 1, 2, 3]}), tray("t3", {a: [0, 1, 2, 3]}),
             NodeResult("t4", (), profile="gb200-nvl72@1")]
    racks = {name: ["r1"] for name in ("t1", "t2", "t3", "t4")}
    _, findings = evaluate_domains(nodes, racks)
    assert [(f.verdict, f.reason) for f in findings] == [(Verdict.ERROR, ErrorReason.INCOMPLETE)]
    assert "missing t4: no fabric facts (not evaluated)" in findings[0].summary


def test_no_tray_profile_no_domain_findings():
    updated, findings = evaluate_domains([NodeResult("n1", (), profile="h100-sxm-8x@1")], {})
    assert findings == [] and updated[0].findings == ()


def test_without_rack_vars_a_short_domain_a_lone_tray_and_unregistered_trays_are_named():
    a, b = "1111aaaa-0000-0000-0000-000000000001/7", "2222bbbb-0000-0000-0000-000000000002/7"
    nodes = [tray("t1", {a: [0, 1, 2, 3]}), tray("t2", {a: [0, 1, 2, 3]}), tray("t3", {b: [0, 1, 2, 3]}),
             tray("t4", {}), NodeResult("t5", (), profile="gb200-nvl72@1")]
    updated, findings = evaluate_domains(nodes, None)
    summaries = sorted((f.verdict, f.summary) for f in findings)
    assert [v for v, _ in summaries] == [Verdict.FAIL] * 3, summaries
    assert any("clique 7 of cluster 1111aaaa: short: 2 of 4 trays, 8 of 16 GPUs (trays t[1-2])" in s
               for _, s in summaries)
    assert any("tray t3 is in an NVLink domain of its own" in s for _, s in summaries)
    assert any("2 tray(s) in no NVLink domain: t4: no GPU registered (see nvlink.fabric); t5: no fabric facts"
               in s for _, s in summaries)
    assert [f.verdict for f in next(n for n in updated if n.name == "t3").findings] == [Verdict.FAIL]


def test_a_domain_larger_than_the_profile_says_fails():
    a = "1111aaaa-0000-0000-0000-000000000001/7"
    nodes = [tray(f"t{i}", {a: [0, 1, 2, 3]}) for i in range(1, 6)]
    _, findings = evaluate_domains(nodes, {f"t{i}": ["r1"] for i in range(1, 6)})
    assert [(f.verdict, "too large: 5 of 4 trays, 20 of 16 GPUs" in f.summary) for f in findings] == [
        (Verdict.FAIL, True)]
