"""fleet.performance, burn-in and their rules over a simulated fleet that behaves as real GPUs do under
DCGM's plugins (nvdeploy/sim/burnin_tool.py PHASES: clocks follow the plugin, power-capped GEMM and Targeted Power
with SW power cap on every GPU, per-sample noise; sim/perf.py: a slow-GEMM GPU whose clock stays normal, +-1% spread).

A 10%-slow GPU is named at --level standard (DCGM's GEMM plugin alone, dcgm.gemm); a healthy fleet is READY at
standard, full and with a 30-minute burn-in, with no WARN (so --fail-on-warn passes it too); the burn-in's GEMM
figures reach the fleet (burnin_gflops)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.levels import load_levels
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import ClusterVerdict, Verdict
from nvdeploy.runner.engine import EngineOptions

CATALOG = ProfileCatalog()
LEVELS = load_levels()
# The multi-node stages have their own tests; here every node check of the level and fleet.performance.
NODE_ONLY = ("nccl.multinode", "rdma.gpudirect", "nccl.domain", "nvloom.domain", "dcgm.mndiag")


def run(tmp_path: Path, faults: dict[str, list[str]], level: str, count: int = 10, **options):
    lines = ["all:", "  vars: {connection: sim, profile: h100-sxm-8x, cluster: real}", "  hosts:"]
    for i in range(1, count + 1):
        name = f"gpu{i:02d}"
        lines.append(f"    {name}: {{sim_faults: {json.dumps(['fleet_spread', *faults.get(name, [])])}}}")
    path = tmp_path / "real.yaml"
    path.write_text("\n".join(lines) + "\n")
    checks = tuple(c for c in LEVELS[level] if c not in NODE_ONLY)
    if options.get("burn_in_s"):
        checks += ("burnin.stability", "burnin.load")
    if "fleet.performance" not in checks:
        checks += ("fleet.performance",)
    return run_validate(load_inventory(path, CATALOG), CATALOG, EngineOptions(checks=checks, **options),
                        tmp_path / "r", level=level)


def bad(outcome, *verdicts: Verdict):
    return sorted((n.name, f.check, f.gpu if f.gpu is not None else -1, f.verdict.value)
                  for n in outcome.run.nodes for f in n.findings if f.verdict in verdicts)


def test_a_ten_percent_slow_gpu_is_named_at_standard_by_gpu(tmp_path):
    outcome = run(tmp_path, {"gpu05": ["slower_gpu:3:90"]}, "standard")
    assert bad(outcome, Verdict.FAIL, Verdict.ERROR) == [("gpu05", "fleet.performance", 3, "FAIL")]
    named = [f for n in outcome.run.nodes for f in n.findings if f.check == "fleet.performance"]
    assert len(named) == 1, [f.summary for f in named]
    named = named[0]
    assert named.summary.startswith("GPU3: DCGM diag Diagnostic (GEMM) figure") and "below the median" in named.summary
    assert any(f.check == "dcgm.gemm" and f.verdict is Verdict.PASS for f in outcome.run.nodes[0].findings)


@pytest.mark.parametrize("level,burn_in", [("standard", None), ("full", None), ("standard", 1800.0)])
def test_a_healthy_fleet_is_ready_with_no_warning(tmp_path, level, burn_in):
    options = {"burn_in_s": burn_in, "burn_in_interval_s": 5.0} if burn_in else {}
    outcome = run(tmp_path, {}, level, **options)
    assert bad(outcome, Verdict.FAIL, Verdict.ERROR, Verdict.WARN) == []
    assert outcome.run.verdict is ClusterVerdict.READY
    assert not [f for f in outcome.run.cluster_findings if f.verdict not in (Verdict.PASS, Verdict.SKIP)]
    if burn_in:
        stability = [f for f in outcome.run.nodes[0].findings if f.check == "burnin.stability"]
        # Power-capped GEMM and Targeted Power on every GPU: the load's, at the peers' clock, not a WARN.
        assert len(stability) == 8 and "sw_power_cap in" in stability[0].summary
        assert "iteration 1 -> 10" in stability[0].summary


def test_a_short_burn_in_compares_the_same_plugin_not_two_phases(tmp_path):
    """5 minutes: its first tenth ran DCGM's memory plugin at 1980 MHz, its last tenth Targeted Power at 1600 MHz;
    judged by the same part of the same test in iterations 1 and 2, the healthy GPUs pass and a GPU 8% below its
    peers warns (power cap with a clock deficit)."""
    outcome = run(tmp_path, {"gpu02": ["slow_clock:6:92"]}, "quick", count=2, burn_in_s=300.0,
                  burn_in_interval_s=2.0)
    assert bad(outcome, Verdict.FAIL, Verdict.ERROR, Verdict.WARN) == [("gpu02", "burnin.stability", 6, "WARN")]


def test_the_burn_ins_gemm_figures_reach_the_fleet(tmp_path):
    outcome = run(tmp_path, {"gpu07": ["slow_clock:2:88"]}, "quick", burn_in_s=600.0, burn_in_interval_s=10.0)
    (figure,) = [f for f in outcome.run.cluster_findings
                 if isinstance(f.observed, dict) and f.observed.get("figure") == "burnin_gflops"]
    assert figure.verdict is Verdict.FAIL and figure.observed["outliers"][0]["node"] == "gpu07"
    assert figure.observed["outliers"][0]["gpu"] == 2
