"""fleet.drift: a node's figure against its own figure in the accepted baseline run (pure rule and evaluator)."""

from __future__ import annotations

from nvdeploy.checks.fleet import Sample
from nvdeploy.checks.fleet_drift import DEFAULT_DRIFT_PCT, drift_pct_for, evaluate_drift, judge_drift
from nvdeploy.results import NodeResult, RunResult, Verdict

PROFILE = "h100-sxm-8x@2026.11.1"
_PROFILE_HEAD = "name: p\nversion: '1'\ngpu: {count: 8, model: X, memory_mib: 1000, pci_device_id: '0001'}\n"


def _node(name: str, busbw: float, gflops: dict | None = None, profile: str = PROFILE) -> NodeResult:
    facts = {"nccl_all_reduce_busbw_gbps": busbw}
    if gflops is not None:
        facts["dcgm_diag_gflops"] = {str(k): v for k, v in gflops.items()}
    return NodeResult(name, (), profile=profile, facts=facts)


def _run(run_id: str, nodes: list[NodeResult]) -> RunResult:
    return RunResult(run_id, "c", "validate", tuple(nodes), level="standard")


def test_judge_drift_names_only_a_fall_of_more_than_the_threshold() -> None:
    base = [Sample("a", 100.0), Sample("b", 100.0), Sample("c", 100.0), Sample("d", 0.0)]
    now = [Sample("a", 95.0), Sample("b", 94.9), Sample("c", 110.0), Sample("d", 50.0), Sample("new", 1.0)]
    compared, fallen = judge_drift(now, base, 5.0)
    assert [d.sample.node for d in compared] == ["a", "b", "c"]  # 'new' not in the baseline; 'd' had 0
    assert [(d.sample.node, round(d.pct_fall, 1)) for d in fallen] == [("b", 5.1)]  # exactly 5% is not "more"


def test_drift_threshold_from_the_profile() -> None:
    assert drift_pct_for(None, "nccl_busbw") == DEFAULT_DRIFT_PCT == 5.0
    section = {"drift_pct": 4, "figures": {"dcgm_gflops": {"drift_pct": 2}, "nccl_busbw": {"enabled": False}}}
    assert drift_pct_for(section, "dcgm_gflops") == 2.0
    assert drift_pct_for(section, "nccl_busbw") is None
    assert drift_pct_for({"drift_pct": 4}, "nccl_busbw") == 4.0


def test_a_node_degrading_inside_the_fleet_band_is_warned_by_gpu() -> None:
    """gpu01 was 3% above its peers and is now 3% below (inside fleet.performance's 3.5% band): -5.8% of itself."""
    gpus = {g: 850.0 for g in range(8)}
    baseline = _run("accepted", [_node("gpu01", 412.0, gpus), _node("gpu02", 400.0, gpus)])
    today = [_node("gpu01", 388.0, {**gpus, 3: 790.0}), _node("gpu02", 399.0, gpus), _node("gpu03", 400.0, gpus)]
    updated, cluster = evaluate_drift(today, {}, baseline)
    by_name = {n.name: n for n in updated}
    (busbw, gemm) = [f for f in by_name["gpu01"].findings]
    assert busbw.verdict is Verdict.WARN and busbw.check == "fleet.drift" and busbw.gpu is None
    assert busbw.summary.startswith("nccl-tests all_reduce busbw (single node, largest size) 388 GB/s fell 5.8% "
                                    "since the accepted run accepted (412 GB/s), more than fleet.drift_pct 5%")
    assert gemm.gpu == 3 and "fell 7.1%" in gemm.summary
    assert not by_name["gpu02"].findings and not by_name["gpu03"].findings
    assert [(f.observed["figure"], f.verdict) for f in cluster] == [("nccl_busbw", Verdict.WARN),
                                                                    ("dcgm_gflops", Verdict.WARN)]
    assert "2 nodes compared (2 samples), largest fall 5.8% (gpu01)" in cluster[0].summary
    assert cluster[0].observed["fallen"] == [{"node": "gpu01", "gpu": None, "value": 388.0, "baseline": 412.0,
                                              "pct_fall": 5.83}]


def test_no_baseline_no_finding_and_no_common_node_is_skip_never_pass() -> None:
    today = [_node("gpu01", 400.0)]
    assert evaluate_drift(today, {}, None) == (today, [])
    _, cluster = evaluate_drift(today, {}, _run("old", [_node("gpu09", 400.0)]))
    assert [f.verdict for f in cluster] == [Verdict.SKIP] and "no node measured it in both runs" in cluster[0].summary
    # Another SKU under the same node name is not compared; a new version of the same profile is.
    _, other = evaluate_drift(today, {}, _run("old", [_node("gpu01", 500.0, profile="a100-sxm-8x@1")]))
    assert other[0].verdict is Verdict.SKIP
    updated, same = evaluate_drift(today, {}, _run("old", [_node("gpu01", 500.0, profile="h100-sxm-8x@2025.1")]))
    assert same[0].verdict is Verdict.WARN and updated[0].findings[0].check == "fleet.drift"


def test_a_figure_turned_off_in_the_profile_is_not_judged() -> None:
    rules = {PROFILE: {"figures": {"nccl_busbw": {"enabled": False}}}}
    _, cluster = evaluate_drift([_node("gpu01", 300.0)], rules, _run("old", [_node("gpu01", 400.0)]))
    assert cluster == []


def test_drift_pct_in_the_profile_schema(tmp_path) -> None:
    import pytest

    from nvdeploy.checks.fleet import fleet_section
    from nvdeploy.config.profiles import load_profile_file
    from nvdeploy.config.yamlfile import ConfigError

    path = tmp_path / "p.yaml"
    path.write_text(_PROFILE_HEAD + "fleet:\n  drift_pct: 4\n  figures:\n    dcgm_gflops: {drift_pct: 3}\n")
    section = fleet_section(load_profile_file(path))
    assert drift_pct_for(section, "dcgm_gflops") == 3.0 and drift_pct_for(section, "nccl_busbw") == 4.0
    path.write_text(_PROFILE_HEAD + "fleet:\n  drift_pct: 0\n")
    with pytest.raises(ConfigError) as caught:
        load_profile_file(path)
    assert "fleet.drift_pct" in str(caught.value) and f"{path}:5" in str(caught.value)


def test_shown_with_its_rule() -> None:
    from nvdeploy.checks.registry import CLUSTER_CHECKS

    text = " ".join(CLUSTER_CHECKS["fleet.drift"].split())
    for needle in ("--baseline RUN_DIR", "``fleet.drift_pct``", "(default 5%)", "never PASS", "history --node N"):
        assert needle in text, needle


def test_a_waiver_may_name_fleet_drift(tmp_path) -> None:
    """The CLI's waiver loader knows the cluster stage's own ids, fleet.drift among them."""
    from nvdeploy.cli.app import _waivers

    path = tmp_path / "waivers.yaml"
    path.write_text("waivers:\n  - check: fleet.drift\n    nodes: gpu01\n    until: 2099-01-01\n"
                    "    owner: ops\n    reason: new cooling, baseline to be re-taken\n")
    (waiver,) = _waivers(path)
    assert waiver.check == "fleet.drift"
