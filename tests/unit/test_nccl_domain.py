"""nccl.domain: the judgement of one domain run (floor, no floor never PASS), how trays are grouped into NVLink
domains from their fabric facts, the profile key's schema, and the simulated mpirun over multi-node NVLink."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvdeploy.checks.nccl import Assessment, NcclExpectation
from nvdeploy.config.inventory import Host
from nvdeploy.config.profiles import ProfileCatalog, load_profile_file
from nvdeploy.config.yamlfile import ConfigError
from nvdeploy.phases.domain import MNNVL_ON, NO_FLOOR, domain_expectation, group_domains, judge, no_floor_said
from nvdeploy.phases.multinode import GroupRun, mpirun_argv
from nvdeploy.results import Finding, NodeResult, Verdict
from nvdeploy.runner.pairing import localise_by_peers

CATALOG = ProfileCatalog()
UUID = "05e71f39-1111-2222-3333-444455556666"


def run(verdict: Verdict, busbw: float = 848.4) -> GroupRun:
    return GroupRun(("tray01", "tray02"), verdict is Verdict.PASS,
                    (Assessment(verdict, f"all_reduce_perf on tray[01-02] busbw {busbw:g} GB/s", observed=busbw,
                                unit="GB/s"),), None, busbw)


def test_the_gb200_floor_comes_from_the_published_full_rack_run():
    exp = domain_expectation(CATALOG.get("gb200-nvl72"))
    assert (exp.busbw_gbps, exp.floor_pct, exp.floor_gbps) == (840.0, 95.0, 798.0)
    # No citable GB300 NVL72 figure: no floor, and the check SKIPs.
    assert domain_expectation(CATALOG.get("gb300-nvl72")).floor_gbps is None
    assert domain_expectation(CATALOG.get("b300-8x")).floor_gbps is None


def test_a_run_without_a_floor_is_skip_with_its_figure_never_pass():
    verdict, summary = judge(run(Verdict.PASS), NcclExpectation())
    assert verdict is Verdict.SKIP and NO_FLOOR in summary and "848.4 GB/s" in summary
    assert judge(run(Verdict.PASS), NcclExpectation(840, 95))[0] is Verdict.PASS
    # FAIL and ERROR stand with or without a floor (#wrong, a hang).
    assert judge(run(Verdict.FAIL, 509.0), NcclExpectation(840, 95))[0] is Verdict.FAIL
    assert judge(run(Verdict.ERROR), NcclExpectation())[0] is Verdict.ERROR


def tray(name: str, clique: str | None, failed: bool = False) -> NodeResult:
    findings = (Finding("gpu.recovery_action", Verdict.FAIL, "reset", node=name),) if failed else ()
    facts = {"nvlink_fabric": {"trays": 18, "gpus": 72,
                               "domains": {f"{UUID}/{clique}": [0, 1, 2, 3]} if clique else {}}}
    return NodeResult(name, findings, profile="gb200-nvl72", facts=facts)


def host(name: str, rack: str) -> Host:
    return Host(name, {"profile": "gb200-nvl72", "rack": rack})


def test_trays_are_grouped_by_their_fabric_clique_healthy_ones_take_part():
    nodes = [tray("t1", "1"), tray("t2", "1", failed=True), tray("t3", "1"), tray("t4", None),
             tray("t5", "2"), tray("t6", "2"), tray("t7", "3")]
    hosts = [host("t1", "r1"), host("t2", "r1"), host("t3", "r1"), host("t4", "r1"), host("t5", "r2"),
             host("t6", "r2"), host("t7", "r2")]
    domains = group_domains(nodes, hosts, CATALOG)
    assert [(d.name, d.trays, d.left_out, d.expected_trays) for d in domains] == [
        ("rack r1", ("t1", "t3"), ("t2",), 18),
        ("rack r2 (clique 2 of cluster 05e71f39)", ("t5", "t6"), (), 18),
        ("rack r2 (clique 3 of cluster 05e71f39)", ("t7",), (), 18)]


def test_a_domain_run_turns_multi_node_nvlink_on_over_the_launchers_nccl_env():
    hosts = [Host("t1", {"nccl_env": {"NCCL_MNNVL_ENABLE": "0", "NCCL_IB_HCA": "mlx5"}}), Host("t2", {})]
    argv = mpirun_argv(hosts, 4, hosts[0], 900, MNNVL_ON)
    assert "NCCL_MNNVL_ENABLE=1" in argv and "NCCL_NVLS_ENABLE=1" in argv and "NCCL_IB_HCA=mlx5" in argv
    assert "NCCL_MNNVL_ENABLE=0" not in argv
    assert "NCCL_MNNVL_ENABLE=1" not in mpirun_argv(hosts, 4, hosts[0], 900)


@pytest.mark.parametrize("old, line, message, key", [
    ("  all_reduce_busbw_gbps: 840\n", "  all_reduce_busbw_gbps: -5\n", "positive number",
     "nvlink_domain.all_reduce_busbw_gbps"),
    ("  floor_pct: 95\n", "  floor_pct: 150\n", "percentage", "nvlink_domain.floor_pct"),
    ("  floor_pct: 95\n", "  busbw: 800\n", "unknown key", "nvlink_domain.busbw"),
])
def test_the_domain_floor_keys_are_schema_checked(tmp_path, old, line, message, key):
    text = Path(CATALOG.get("gb200-nvl72").path).read_text().replace(old, line, 1)
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_profile_file(path)
    assert message in str(caught.value) and key in str(caught.value) and "p.yaml" in str(caught.value)


def test_the_slurm_budget_books_the_domain_stage_only_where_a_profile_has_a_domain():
    from nvdeploy.slurm.budget import _stages_s

    trays = [host(f"t{i}", "r1") for i in range(36)]
    hgx = [Host(f"h{i}", {"profile": "b300-8x"}) for i in range(36)]
    assert _stages_s(trays, ["nccl.domain"], "bisect", CATALOG) > 0
    assert _stages_s(hgx, ["nccl.domain"], "bisect", CATALOG) == 0


REAL_RACK = (Path(__file__).resolve().parents[1] / "fixtures" / "real" / "nccl-tests"
             / "all_reduce_perf-gb200-nvl72-full-rack-72ranks-excerpt.log")


def test_the_published_full_rack_run_clears_the_gb200_floor_at_8_gib():
    """The real capture the floor rests on (coreweave/nccl-tests pull request 43): 72 ranks, busbw 834.57 /
    846.82 GB/s at 8 GiB, judged PASS against 798; the same rack's 1 GiB row (724) would not be, so the floor is
    read at 8 GiB only."""
    from nvdeploy.checks.nccl import assess
    from nvdeploy.parsers.nccl_tests import parse_nccl_tests

    facts = parse_nccl_tests(REAL_RACK.read_text())
    assert facts.nranks == 72 and facts.wrong_total == 0
    exp = domain_expectation(CATALOG.get("gb200-nvl72"))
    verdicts = [(a.verdict, a.observed) for a in assess(facts, None, ranks=72, exp=exp)]
    assert (Verdict.PASS, 846.82) in verdicts and all(v is not Verdict.FAIL for v, _ in verdicts)
    at_1g = next(r for r in facts.rows if r.size_bytes == 1 << 30)
    assert max(at_1g.busbw_oop, at_1g.busbw_ip) < exp.floor_gbps


def test_multinode_stage_turns_mnnvl_off_only_on_nvlink_domain_trays(tmp_path):
    """nccl.multinode's mpirun: NCCL_MNNVL_ENABLE=0 NCCL_NVLS_ENABLE=0 on GB200 trays (the InfiniBand is what it
    judges), nothing added on HGX nodes, whose NVLS inside a node is part of their normal figure."""
    from nvdeploy.config.inventory import load_inventory
    from nvdeploy.config.levels import load_levels
    from nvdeploy.config.profiles import ProfileCatalog
    from nvdeploy.phases.validate import run_validate
    from nvdeploy.runner.engine import EngineOptions

    catalog = ProfileCatalog()
    for profile, driver, on_trays in (("gb200-nvl72", "580.173.02", True), ("h100-sxm-8x", "550.90.07", False)):
        path = tmp_path / f"{profile}.yaml"
        path.write_text(f"all:\n  vars: {{cluster: c, connection: sim, profile: {profile}, "
                        f"driver_version: \"{driver}\"}}\n  hosts: {{\"n[1:2]\": {{}}}}\n")
        outcome = run_validate(load_inventory(path, catalog), catalog,
                               EngineOptions(checks=("nccl.multinode",) + tuple(load_levels()["quick"])),
                               tmp_path / f"out-{profile}", level="full")
        summaries = [f.summary for f in outcome.run.cluster_findings if f.check == "nccl.multinode"]
        bad = [(n.name, f.check, f.summary) for n in outcome.run.nodes for f in n.findings
               if f.verdict.value in ("FAIL", "ERROR")]
        assert any("all_reduce_perf on n[1-2]" in s for s in summaries), (summaries, bad)
        assert all(("NCCL_MNNVL_ENABLE=0 NCCL_NVLS_ENABLE=0" in s) is on_trays for s in summaries
                   if "all_reduce_perf on" in s), (profile, summaries)


def test_the_floor_holds_for_the_group_size_it_was_measured_on_only():
    gb200 = CATALOG.get("gb200-nvl72")
    assert gb200.nvlink_domain.floor_ranks == 72 and "72 ranks" in gb200.nvlink_domain.source
    assert domain_expectation(gb200, 72).floor_gbps == 798.0
    # A pair of trays (8 ranks) and a rack short of trays (60 ranks) have no sourced figure: no floor, SKIP.
    assert domain_expectation(gb200, 8).floor_gbps is None and domain_expectation(gb200, 60).floor_gbps is None
    verdict, summary = judge(run(Verdict.PASS, 752.8), domain_expectation(gb200, 8), no_floor_said(gb200, 8))
    assert verdict is Verdict.SKIP and "for 8 ranks" in summary and "72-rank run" in summary


def test_a_pair_of_domain_trays_keeps_nccls_own_algorithm():
    hosts = [Host("t1", {}), Host("t2", {})]
    assert "NCCL_ALGO=RING" in mpirun_argv(hosts, 4, hosts[0], 900, MNNVL_ON)  # the InfiniBand stage's pairs
    assert not any(w.startswith("NCCL_ALGO") for w in mpirun_argv(hosts, 4, hosts[0], 900, MNNVL_ON,
                                                                   force_ring=False))


def _measure(slow: set, figures: list):
    def measure(group):
        figures.append(tuple(group))
        return 450.0 if slow & set(group) else 750.0
    return measure


def test_peers_name_the_slow_node_and_clear_its_partner():
    runs: list = []
    found = localise_by_peers([f"t{i}" for i in range(1, 10)], _measure({"t4"}, runs))
    assert found.named == ("t4",) and found.unresolved == () and found.median == 750.0
    # Pairs t1-t2 ... t7-t8, the odd t9 with t1; then t3 and t4 each with a node of a good pair.
    assert runs[:5] == [("t1", "t2"), ("t3", "t4"), ("t5", "t6"), ("t7", "t8"), ("t9", "t1")]
    assert runs[5:] == [("t3", "t1"), ("t4", "t1")]


def test_peers_without_enough_pairs_or_a_clearing_retest_name_no_one():
    assert localise_by_peers(["t1", "t2"], _measure({"t1"}, [])).named == ()
    assert localise_by_peers(["t1", "t2"], _measure({"t1"}, [])).unresolved == ("t1", "t2")

    calls = iter([750.0, 450.0, 750.0, 750.0, 750.0])  # t3-t4 low, but both re-test fine: a transient, unresolved
    found = localise_by_peers(["t1", "t2", "t3", "t4", "t5", "t6"], lambda group: next(calls))
    assert found.named == () and found.unresolved == ("t3", "t4")
    healthy = localise_by_peers(["t1", "t2", "t3", "t4"], _measure(set(), []))
    assert healthy.named == () and healthy.unresolved == ()
