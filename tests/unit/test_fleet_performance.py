"""fleet.performance: the median/MAD rule over one figure (zero spread, fewer than the minimum of nodes, a 32-node
fleet), its thresholds from the profile, the findings it makes, and the DCGM Diagnostic figure it reads."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from nvdeploy.checks.fleet import (
    CHECK_ID,
    DEFAULT_RULE,
    FIGURES,
    FleetRule,
    Sample,
    evaluate_fleet,
    fleet_section,
    judge,
    judge_split,
    robust_z,
    rule_for,
)
from nvdeploy.checks.registry import CLUSTER_CHECKS
from nvdeploy.config.levels import load_levels
from nvdeploy.config.profile_schema import FLEET_FIGURES
from nvdeploy.config.profiles import load_profile_file
from nvdeploy.config.yamlfile import ConfigError
from nvdeploy.parsers.dcgm import parse_dcgm_diag
from nvdeploy.parsers.facts import diag_gflops
from nvdeploy.results import Finding, NodeResult, Remediation, Verdict

REAL = Path(__file__).parent.parent / "fixtures" / "real"
H100 = "h100-sxm-8x@2026.11.1"


def fleet(values: list[float]) -> list[Sample]:
    return [Sample(f"gpu{i + 1:02d}", v) for i, v in enumerate(values)]


def node(name: str, profile: str = H100, **facts) -> NodeResult:
    return NodeResult(name, (Finding("gpu.count", Verdict.PASS, "8 GPUs", node=name),), profile=profile, facts=facts)


# --- the rule -------------------------------------------------------------------------------------------------------

def test_zero_spread_judges_by_percent_only():
    # Every healthy simulated node reports the same figure: MAD 0, so no z; the percent rule still names nodes.
    samples = fleet([480.0] * 9 + [446.4, 463.2, 470.0])  # 7.0%, 3.5% and 2.08% below
    result = judge(samples)
    assert result.median == 480.0 and result.mad == 0.0
    named = {o.sample.node: (o.verdict, round(o.pct_below, 2), o.z) for o in result.outliers}
    assert named == {"gpu10": (Verdict.FAIL, 7.0, None), "gpu11": (Verdict.WARN, 3.5, None)}
    assert result.verdict is Verdict.FAIL


def test_all_alike_passes():
    result = judge(fleet([480.0] * 8))
    assert result.verdict is Verdict.PASS and result.outliers == () and result.nodes == 8


@pytest.mark.parametrize("count", [1, 2, 7])
def test_fewer_than_eight_nodes_skip_and_say_so(count):
    # A fleet of two is never PASS, even with one node far below the other.
    result = judge(fleet([480.0, 200.0, 480.0, 480.0, 480.0, 480.0, 480.0][:count]))
    assert result.verdict is Verdict.SKIP and result.outliers == ()
    assert f"measured on {count} node" in result.reason and "fewer than the 8 needed" in result.reason


def test_minimum_counts_nodes_not_gpus():
    # 4 nodes x 8 GPUs are 32 samples but 4 nodes: too few peers.
    samples = [Sample(f"n{n}", 859.0, gpu) for n in range(4) for gpu in range(8)]
    assert judge(samples).verdict is Verdict.SKIP
    assert judge(samples, FleetRule(min_nodes=4)).verdict is Verdict.PASS


def test_thirty_two_node_fleet_names_only_the_straggler():
    healthy = [480.76 * (1 + (i - 15.5) / 15.5 * 0.01) for i in range(31)]  # +-1% around the healthy figure
    values = healthy[:6] + [480.76 * 0.92] + healthy[6:]
    result = judge(fleet(values))
    assert result.nodes == 32
    median = statistics.median(values)
    mad = statistics.median(abs(v - median) for v in values)
    assert [o.sample.node for o in result.outliers] == ["gpu07"]
    straggler = result.outliers[0]
    assert straggler.verdict is Verdict.FAIL
    assert straggler.pct_below == pytest.approx((median - values[6]) / median * 100, abs=1e-4)
    assert straggler.z == pytest.approx(0.6745 * (values[6] - median) / mad)
    assert straggler.z < -5 and 7.5 < straggler.pct_below < 8.5


def test_robust_z_alone_warns_and_fails():
    # Median 100, MAD 0.5: Azure's robust z, "< -2.0 Investigate, < -3.0 Drain". 1.5% below is z -2.02 (WARN by z
    # alone, under 3.5%); 2.5% below is z -3.37 (FAIL by z, under 7%, above the 2% a re-test could move it).
    base = [100.0] * 5 + [99.5] * 3 + [100.5] * 3
    warn = judge(fleet(base + [98.5]))
    assert (warn.median, warn.mad) == (100.0, 0.5)
    (outlier,) = warn.outliers
    assert outlier.verdict is Verdict.WARN and outlier.pct_below == 1.5 and outlier.z == pytest.approx(-2.0235)
    fail = judge(fleet(base + [97.5]))
    (outlier,) = fail.outliers
    assert outlier.verdict is Verdict.FAIL and outlier.pct_below == 2.5 and outlier.z == pytest.approx(-3.3725)


def test_a_z_only_fail_needs_a_deviation_above_repeatability():
    # 19 nodes within +-0.2% and one 1.2% below is z -7.8 in so tight a fleet, yet within the
    # tools' 1-2% repeatability: no FAIL (it FAILed); 1.6% below WARNs; at 2.5% below it FAILs.
    values = [480.0 * (1 + 0.002 * ((i % 5) - 2) / 2) for i in range(19)]
    assert judge(fleet(values + [480.0 * 0.988])).outliers == ()
    assert judge(fleet(values + [480.0 * 0.988]), FleetRule(z_min_pct=1)).outliers[0].verdict is Verdict.WARN
    (outlier,) = judge(fleet(values + [480.0 * 0.984])).outliers
    assert outlier.z is not None and outlier.z < -5 and outlier.verdict is Verdict.WARN
    (outlier,) = judge(fleet(values + [480.0 * 0.975])).outliers
    assert outlier.verdict is Verdict.FAIL


def test_nan_and_infinite_figures_are_error_never_pass():
    # a NaN compares false with every threshold.
    nodes = [node(f"gpu{i:02d}", nccl_all_reduce_busbw_gbps=480.0) for i in range(1, 10)]
    nodes[2] = node("gpu03", nccl_all_reduce_busbw_gbps=float("nan"))
    nodes[4] = node("gpu05", nccl_all_reduce_busbw_gbps=float("inf"),
                    dcgm_diag_gflops={**{str(g): 859.0 for g in range(7)}, "7": float("-inf")})
    updated, cluster = evaluate_fleet(nodes, {})
    by_name = {n.name: [f for f in n.findings if f.check == CHECK_ID] for n in updated}
    (nan,) = by_name["gpu03"]
    assert nan.verdict is Verdict.ERROR and "is nan" in nan.summary
    got = sorted((f.verdict.value, -1 if f.gpu is None else f.gpu) for f in by_name["gpu05"])
    assert got == [("ERROR", -1), ("ERROR", 7)]
    busbw = next(f for f in cluster if f.observed["figure"] == "nccl_busbw")
    assert busbw.observed["nodes"] == 7


def test_two_populations_are_named_and_judged_apart():
    # two storage tiers (or NIC speeds) in one profile, 5/5: the slow half is no outlier.
    values = [10.0 + 0.05 * i for i in range(5)] + [5.0 + 0.03 * i for i in range(5)]
    result = judge_split(fleet(values), FleetRule(min_nodes=8))
    assert judge(fleet(values), FleetRule(min_nodes=8)).verdict is Verdict.FAIL  # as one fleet: half of it FAILs
    assert result.verdict is Verdict.WARN and result.outliers == ()
    assert result.split is not None and set(result.split[0]) == {f"gpu{i:02d}" for i in range(6, 11)}
    # One slow node is an outlier, not a population.
    assert judge_split(fleet([480.0 + i * 0.5 for i in range(9)] + [400.0])).split is None


def test_a_peer_group_judges_its_nodes_apart():
    nodes = [node(f"gpu{i:02d}", nccl_all_reduce_busbw_gbps=480.0 if i <= 10 else 240.0,
                  peer_group="ndr" if i <= 10 else "hdr") for i in range(1, 21)]
    updated, cluster = evaluate_fleet(nodes, {})
    assert not [f for n in updated for f in n.findings if f.check == CHECK_ID]
    busbw = sorted((f.observed.get("peer_group"), f.verdict) for f in cluster if f.observed["figure"] == "nccl_busbw")
    assert busbw == [("hdr", Verdict.PASS), ("ndr", Verdict.PASS)]


def test_z_needs_the_minimum_deviation():
    # A spread below the tools' repeatability: 0.5% below the median is z -6.7 but not named by default.
    values = [480.0 + (0.05 if i % 2 else -0.05) for i in range(10)] + [477.6]
    assert judge(fleet(values)).outliers == ()
    strict = judge(fleet(values), FleetRule(z_min_pct=0))
    assert [(o.sample.node, o.verdict) for o in strict.outliers] == [("gpu11", Verdict.WARN)]
    stricter = judge(fleet(values), FleetRule(z_min_pct=0, fail_min_pct=0))
    assert [(o.sample.node, o.verdict) for o in stricter.outliers] == [("gpu11", Verdict.FAIL)]


def test_above_the_median_is_never_an_outlier():
    assert judge(fleet([480.0] * 9 + [600.0])).outliers == ()


def test_median_zero_is_skip_not_pass():
    result = judge(fleet([0.0] * 9))
    assert result.verdict is Verdict.SKIP and "median is 0" in result.reason


def test_robust_z_without_spread():
    assert robust_z(470.0, 480.0, 0.0) is None
    assert robust_z(470.0, 480.0, 2.0) == pytest.approx(-3.3725)


# --- thresholds from the profile ------------------------------------------------------------------------------------

def test_rule_defaults_overrides_and_per_figure():
    assert rule_for(None, "nccl_busbw") == DEFAULT_RULE == FleetRule(8, 3.5, 7.0, 2.0, 3.0, 1.5, 2.0)
    section = {"min_nodes": 10, "warn_pct": 3, "figures": {"nccl_busbw": {"fail_pct": 6}, "dcgm_gflops":
                                                         {"enabled": False}}}
    assert rule_for(section, "nccl_busbw") == FleetRule(min_nodes=10, warn_pct=3, fail_pct=6)
    assert rule_for(section, "dcgm_gflops") is None


def test_figures_listed_in_the_schema():
    assert tuple(f.id for f in FIGURES) == FLEET_FIGURES


def write_profile(tmp_path: Path, fleet_yaml: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text("name: p\nversion: '1'\ngpu: {count: 8, model: X, memory_mib: 1000, pci_device_id: '0001'}\n"
                    + fleet_yaml)
    return path


def test_profile_fleet_section_loads_and_goes_to_the_header(tmp_path):
    profile = load_profile_file(write_profile(
        tmp_path, "fleet:\n  min_nodes: 10\n  fail_z: 4\n  figures:\n    dcgm_gflops: {warn_pct: 2, enabled: true}\n"))
    section = fleet_section(profile)
    assert section == {"min_nodes": 10, "fail_z": 4, "figures": {"dcgm_gflops": {"warn_pct": 2, "enabled": True}}}
    json.dumps(section)  # the run's header carries it
    assert rule_for(section, "dcgm_gflops") == FleetRule(min_nodes=10, fail_z=4, warn_pct=2)


@pytest.mark.parametrize("body, key, line", [
    ("fleet:\n  warn_pct: -1\n", "fleet.warn_pct", 5),
    ("fleet:\n  min_node: 8\n", "fleet.min_node", 5),
    ("fleet:\n  min_nodes: 1\n", "fleet.min_nodes", 5),
    ("fleet:\n  figures:\n    gemm: {warn_pct: 2}\n", "fleet.figures", 5),
    ("fleet:\n  figures:\n    nccl_busbw: {warn: 2}\n", "fleet.figures", 5),
])
def test_bad_fleet_section_names_file_line_and_key(tmp_path, body, key, line):
    path = write_profile(tmp_path, body)
    with pytest.raises(ConfigError) as caught:
        load_profile_file(path)
    text = str(caught.value)
    assert key in text and str(path) in text and f":{line}" in text


def test_in_the_standard_level_and_shown_with_rule_and_sources():
    assert CHECK_ID in load_levels()["standard"]
    text = CLUSTER_CHECKS[CHECK_ID]
    for needle in ("median", "MAD", "0.6745", "3.5%", "-``fail_z`` (default 3)", "Investigate",
                   "-3.0 Drain", "Warn < 3.5%", "(8) nodes: judged", "--baseline",
                   "never PASS", "github.com/Azure/ai-infrastructure-on-azure", "cluster_outlier_detection/SKILL.md",
                   "nccl_busbw",
                   "dcgm_gflops"):
        assert needle in text, needle


# --- findings -------------------------------------------------------------------------------------------------------

def test_node_and_gpu_outliers_are_named_with_figure_median_and_deviation():
    nodes = [node(f"gpu{i:02d}", nccl_all_reduce_busbw_gbps=480.0,
                  dcgm_diag_gflops={str(g): 859.0 for g in range(8)}) for i in range(1, 10)]
    nodes[3] = node("gpu04", nccl_all_reduce_busbw_gbps=441.6, dcgm_diag_gflops={str(g): 859.0 for g in range(8)})
    nodes[5] = node("gpu06", nccl_all_reduce_busbw_gbps=480.0,
                    dcgm_diag_gflops={**{str(g): 859.0 for g in range(8)}, "3": 773.1})
    updated, cluster = evaluate_fleet(nodes, {})
    by_name = {n.name: [f for f in n.findings if f.check == CHECK_ID] for n in updated}
    assert {name for name, found in by_name.items() if found} == {"gpu04", "gpu06"}
    (busbw,) = by_name["gpu04"]
    assert busbw.verdict is Verdict.FAIL and busbw.gpu is None and busbw.observed == "441.6 GB/s"
    assert busbw.expected == ">= 463.2 GB/s, robust z > -2"  # WARN starts 3.5% below the median
    assert busbw.remediation is Remediation.INVESTIGATE and busbw.profile == H100
    assert "441.6 GB/s is 8.0% below the median of 9 h100-sxm-8x@2026.11.1 nodes (480 GB/s" in busbw.summary
    assert "no spread (MAD 0)" in busbw.summary
    (gemm,) = by_name["gpu06"]
    assert gemm.gpu == 3 and gemm.verdict is Verdict.FAIL and gemm.summary.startswith("GPU3: DCGM diag Diagnostic")
    assert "10.0% below the median of 9 h100-sxm-8x@2026.11.1 nodes, 72 GPUs (859 gigaflops" in gemm.summary
    assert [f.observed["figure"] for f in cluster] == ["nccl_busbw", "dcgm_gflops"]
    assert all(f.verdict is Verdict.FAIL for f in cluster)
    assert cluster[0].observed["outliers"] == [{"node": "gpu04", "gpu": None, "value": 441.6, "pct_below": 8.0,
                                                "z": None, "verdict": "FAIL"}]
    assert "gpu06 GPU3 773.1 gigaflops (-10.0%) FAIL" in cluster[1].summary
    assert cluster[1].observed["values"]["gpu06"] == 773.1  # the node's slowest GPU
    assert cluster[1].observed["values"]["gpu01"] == 859.0
    # The healthy nodes are the same objects: nothing to re-journal.
    assert updated[0] is nodes[0]


def test_profiles_are_separate_fleets_and_a_small_one_skips():
    nodes = [node(f"a{i}", nccl_all_reduce_busbw_gbps=480.0) for i in range(8)]
    nodes += [node(f"b{i}", "l40s-8x@1", nccl_all_reduce_busbw_gbps=v) for i, v in enumerate((22.0, 22.0, 10.0))]
    updated, cluster = evaluate_fleet(nodes, {})
    verdicts = {f.profile: f.verdict for f in cluster}
    assert verdicts == {H100: Verdict.PASS, "l40s-8x@1": Verdict.SKIP}
    skip = next(f for f in cluster if f.verdict is Verdict.SKIP)
    assert "measured on 3 nodes, fewer than the 8 needed" in skip.summary
    assert all(not [f for f in n.findings if f.check == CHECK_ID] for n in updated)
    passed = next(f for f in cluster if f.verdict is Verdict.PASS)
    assert "median 480 GB/s" in passed.summary and "none 3.5% below the median" in passed.summary


def test_nothing_measured_nothing_said_and_profile_can_turn_a_figure_off():
    assert evaluate_fleet([node(f"n{i}") for i in range(10)], {}) == ([node(f"n{i}") for i in range(10)], [])
    nodes = [node(f"n{i}", nccl_all_reduce_busbw_gbps=480.0) for i in range(10)]
    _, cluster = evaluate_fleet(nodes, {H100: {"figures": {"nccl_busbw": {"enabled": False}}}})
    assert cluster == []


def test_profile_thresholds_apply():
    nodes = [node(f"n{i}", nccl_all_reduce_busbw_gbps=480.0) for i in range(9)]
    nodes.append(node("slow", nccl_all_reduce_busbw_gbps=460.8))  # 4% below
    _, cluster = evaluate_fleet(nodes, {})
    assert cluster[0].verdict is Verdict.WARN
    _, cluster = evaluate_fleet(nodes, {H100: {"warn_pct": 5}})
    assert cluster[0].verdict is Verdict.PASS
    _, cluster = evaluate_fleet(nodes, {H100: {"min_nodes": 11}})
    assert cluster[0].verdict is Verdict.SKIP


# --- the DCGM Diagnostic figure --------------------------------------------------------------------------------------

def test_gflops_read_from_a_real_dcgm4_diagnostic_object():
    text = (REAL / "fragments" / "dcgmi-diag-json-dcgm4-r3-8gpu-diagnostic-test-object-trailing-comma.json").read_text()
    facts = parse_dcgm_diag(text)
    # The capture has info lists on GPUs 0-2, the gigaflops line on GPUs 0 and 1 only.
    assert diag_gflops({3: facts}) == {"0": 859.08, "1": 859.08}
    assert diag_gflops({}) == {}


# --- peers from the accepted baseline run ----------------------------------------------------------------------------

def baseline_run(count: int = 10, profile: str = H100):
    from nvdeploy.results import RunResult

    nodes = tuple(node(f"old{i:02d}", profile, nccl_all_reduce_busbw_gbps=480.0 + (i % 3) * 0.5) for i in range(count))
    return RunResult("20261101T000000Z-abcdef", "rack", "validate", nodes)


def test_a_small_run_is_judged_among_the_baseline_s_nodes():
    nodes = [node("gpu01", nccl_all_reduce_busbw_gbps=480.5), node("gpu02", nccl_all_reduce_busbw_gbps=441.6)]
    _, alone = evaluate_fleet(nodes, {})
    assert alone[0].verdict is Verdict.SKIP and "validate --baseline RUN_DIR" in alone[0].summary
    updated, cluster = evaluate_fleet(nodes, {}, baseline_run())
    (finding,) = cluster
    assert finding.verdict is Verdict.FAIL and finding.observed["nodes"] == 12
    assert "12 h100-sxm-8x@2026.11.1 nodes (10 of them from baseline run 20261101T000000Z-abcdef)" in finding.summary
    # Only this run's nodes are named; the baseline's are peers.
    assert [o["node"] for o in finding.observed["outliers"]] == ["gpu02"]
    assert set(finding.observed["values"]) == {"gpu01", "gpu02"}
    (slow,) = [f for f in updated[1].findings if f.check == CHECK_ID]
    assert "below the median of 12 h100-sxm-8x@2026.11.1 nodes (10 of them from baseline run" in slow.summary


def test_baseline_peers_of_another_profile_or_too_few_do_not_count():
    nodes = [node("gpu01", nccl_all_reduce_busbw_gbps=480.0), node("gpu02", nccl_all_reduce_busbw_gbps=441.6)]
    _, cluster = evaluate_fleet(nodes, {}, baseline_run(profile="l40s-8x@1"))
    assert cluster[0].verdict is Verdict.SKIP
    _, cluster = evaluate_fleet(nodes, {}, baseline_run(count=5))
    assert cluster[0].verdict is Verdict.SKIP and "measured on 2 nodes" in cluster[0].summary
    # A node of this run that was also in the baseline counts once, with today's figure.
    again = baseline_run(count=7)
    nodes = [node("old00", nccl_all_reduce_busbw_gbps=440.0)]
    _, cluster = evaluate_fleet(nodes, {}, again)
    assert cluster[0].verdict is Verdict.SKIP  # 7 nodes in all


# --- the report's bandwidth chart agrees with the findings ------------------------------------------------------------

def test_the_bandwidth_chart_marks_the_nodes_fleet_performance_named():
    from nvdeploy.report.chart import bandwidth_charts
    from nvdeploy.results import RunResult

    def measured(name: str, busbw: float) -> NodeResult:
        return NodeResult(name, (Finding("nccl.all_reduce", Verdict.PASS, "busbw", node=name, observed=busbw,
                                         expected=">= 452.2", unit="GB/s"),), profile=H100,
                          facts={"nccl_all_reduce_busbw_gbps": busbw})

    nodes = [measured(f"gpu{i:02d}", 480.0 + (i % 3) * 0.5) for i in range(1, 10)] + [measured("gpu10", 461.0)]
    # 461 is 4% below: under the chart's own 5% rule, a WARN for fleet.performance.
    updated, cluster = evaluate_fleet(nodes, {})
    assert [o["node"] for o in cluster[0].observed["outliers"]] == ["gpu10"]
    judged = bandwidth_charts(RunResult("r", "c", "validate", tuple(updated), cluster_findings=tuple(cluster)))
    assert judged[0].low == ("gpu10",)
    alone = bandwidth_charts(RunResult("r", "c", "validate", tuple(nodes)))
    assert alone[0].low == ()


def test_a_gpu_clocking_below_its_peers_under_the_burn_in_load_is_named():
    """The burn-in's median SM clock under load, per GPU: a GPU held back by its cooling or power delivery clocks
    below its peers' without any throttle reason active, and only the fleet rule sees it."""
    from nvdeploy.parsers.burnin import parse_sampler
    from nvdeploy.parsers.facts import burnin_load_medians

    header = ("@@burnin-sampler 20 1000 timestamp,index,temperature.gpu,clocks.sm,clocks_event_reasons.active,"
              "power.draw,ecc.errors.uncorrected.volatile.total")
    rows = [f"2026/07/14 08:12:{10 + t:02d}.000, {g}, 65, {1980 if g != 2 else 1830}, 0x{0x1 if t < 2 else 0:016X}, "
            f"600.00, 0" for t in range(12) for g in range(4)]
    # The first two samples are idle (the load not yet started, 0x1) and at an idle clock: not counted.
    rows[:8] = [r.replace(", 1980,", ", 345,").replace(", 1830,", ", 345,") for r in rows[:8]]
    clocks = burnin_load_medians(parse_sampler("\n".join([header, *rows, "@@end running"]) + "\n"))
    assert clocks == {"0": 1980.0, "1": 1980.0, "2": 1830.0, "3": 1980.0}
    nodes = [node(f"gpu{i:02d}", burnin_sm_clock_mhz={str(g): 1980.0 for g in range(8)}) for i in range(1, 10)]
    nodes.append(node("gpu10", burnin_sm_clock_mhz={**{str(g): 1980.0 for g in range(8)}, "2": 1830.0}))
    judged, cluster = evaluate_fleet(nodes)
    (finding,) = [f for f in cluster if f.observed and f.observed.get("figure") == "burnin_sm_clock"]
    assert finding.verdict is Verdict.FAIL and "gpu10 GPU2 1830 MHz (-7.6%) FAIL" in finding.summary
    (named,) = [f for n in judged for f in n.findings if f.check == CHECK_ID]
    assert named.node == "gpu10" and named.gpu == 2 and "cooling" in named.summary


def test_a_gpu_hotter_than_the_same_gpu_of_its_peers_warns_and_is_never_fail_by_default():
    """Lower is better: the outliers are above the median, and a GPU is compared with the same GPU slot of the
    other nodes (the GPUs nearest the exhaust run hotter by design: GPU7 at 78 C on every node is no outlier)."""
    slots = {str(g): 66.0 + g * 1.5 for g in range(8)}  # 66 ... 76.5 C: the chassis' own gradient
    nodes = [node(f"gpu{i:02d}", burnin_temperature_c=dict(slots)) for i in range(1, 10)]
    nodes.append(node("gpu10", burnin_temperature_c={**slots, "2": 79.0}))  # GPU2 is 10 C above its slot's 69
    judged, cluster = evaluate_fleet(nodes)
    temperature = [f for f in cluster if f.observed and f.observed.get("figure") == "burnin_temperature"]
    assert len(temperature) == 8  # one judgement per GPU slot
    (hot,) = [f for f in temperature if f.verdict is not Verdict.PASS]
    assert hot.verdict is Verdict.WARN and hot.observed["path"] == "2"
    assert "gpu10 79 C (+14.5%) WARN" in hot.summary and "1 above their peers" in hot.summary
    (named,) = [f for n in judged for f in n.findings if f.check == CHECK_ID]
    assert named.node == "gpu10" and named.gpu == 2 and named.verdict is Verdict.WARN
    assert "GPU2 79 C is 14.5% above the median" in named.summary and "cooling" in named.summary
    assert named.expected.startswith("<= 72.45 C")
    # A profile may make it FAIL.
    _, cluster = evaluate_fleet(nodes, {H100: {"figures": {"burnin_temperature": {"fail_pct": 10}}}})
    assert [f.verdict for f in cluster if f.observed and f.observed.get("path") == "2"
            and f.observed.get("figure") == "burnin_temperature"] == [Verdict.FAIL]


def test_a_cooler_gpu_is_never_a_temperature_outlier_and_drift_leaves_temperature_out():
    from nvdeploy.checks.fleet_drift import measured_figures

    result = judge(fleet([70.0] * 9 + [60.0]), DEFAULT_RULE, higher_is_better=False)
    assert result.verdict is Verdict.PASS and result.outliers == ()
    hot = judge(fleet([70.0] * 9 + [74.0]), FleetRule(warn_pct=5.0, fail_pct=100.0), higher_is_better=False)
    assert [(o.sample.node, o.verdict, round(o.pct_below, 2)) for o in hot.outliers] == [("gpu10", Verdict.WARN,
                                                                                           5.71)]
    assert "burnin_temperature" not in {f.id for f in measured_figures([node("n", burnin_temperature_c={"0": 1})])}
