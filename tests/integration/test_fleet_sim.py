"""fleet.performance over a simulated fleet: 32 nodes whose healthy figures spread by +-1% (fleet_spread); one node
at 92% (slower:92), one GPU at 90% (slower_gpu:3:90) and one node at 96% (slower:96, above the nccl floor).
Exactly those are named, with their figure and deviation; the healthy 29 are not. A fleet under 8 nodes SKIPs."""

from __future__ import annotations

import json
import re
import shutil
import statistics
from pathlib import Path

import pytest

from nvdeploy.checks.fleet import FIGURES
from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.levels import load_levels
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import rebuild_reports, run_validate
from nvdeploy.results import ClusterVerdict, Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim import dcgm_tool, perf
from nvdeploy.sim.nccl_tool import HEALTHY_MARGIN

CATALOG = ProfileCatalog()
LEVELS = load_levels()
# The full level's node checks (DCGM r3 prints the per-GPU figure) and the fleet stage, without the multi-node
# stages (their own tests cover them).
CHECKS = tuple(c for c in LEVELS["full"] if c not in ("nccl.multinode", "rdma.gpudirect"))
SLOW, SLOW_GPU_NODE, SLIGHTLY_SLOW = "gpu07", "gpu19", "gpu25"
FAULTS = {SLOW: ["slower:92"], SLOW_GPU_NODE: ["slower_gpu:3:90"], SLIGHTLY_SLOW: ["slower:96"]}


def run(tmp_path: Path, count: int, faults: dict[str, list[str]], checks=CHECKS, level: str = "full"):
    lines = ["all:", "  vars: {connection: sim, profile: h100-sxm-8x, cluster: fleet, dcgm_timeout: 30, "
             "nccl_timeout: 30}", "  hosts:"]
    for i in range(1, count + 1):
        name = f"gpu{i:02d}"
        lines.append(f"    {name}: {{sim_faults: {json.dumps(['fleet_spread', *faults.get(name, [])])}}}")
    path = tmp_path / "fleet.yaml"
    path.write_text("\n".join(lines) + "\n")
    return run_validate(load_inventory(path, CATALOG), CATALOG, EngineOptions(checks=checks), tmp_path / "r",
                        level=level)


def fleet_findings(outcome):
    return {n.name: [f for f in n.findings if f.check == "fleet.performance"] for n in outcome.run.nodes}


def cluster_finding(outcome, figure):
    return next(f for f in outcome.run.cluster_findings
                if f.check == "fleet.performance" and f.observed["figure"] == figure)


def busbw(name: str, faults: list[str]) -> float:
    """What the simulated all_reduce_perf prints at 8 GiB for this node (%6.2f, out-of-place)."""
    return round(476 * HEALTHY_MARGIN * perf.factor(name, ["fleet_spread", *faults]), 2)


def gflops(name: str, gpu: int, faults: list[str]) -> float:
    return round(dcgm_tool.HEALTHY_GFLOPS * perf.factor(name, ["fleet_spread", *faults], gpu, 7), 2)


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    return run(tmp_path_factory.mktemp("fleet32"), 32, FAULTS)


def by_figure(findings) -> dict[str, list]:
    """A node's fleet findings by the figure they name: {figure id: [(GPU or -1, verdict)]}."""
    out: dict[str, list] = {}
    for f in findings:
        (figure,) = [fig.id for fig in FIGURES if re.sub(r"^GPU[0-9]+: ", "", f.summary).startswith(fig.what + " ")]
        out.setdefault(figure, []).append((f.gpu if f.gpu is not None else -1, f.verdict))
    return {k: sorted(v) for k, v in out.items()}


def test_exactly_the_slow_node_and_gpu_are_named(outcome):
    named = {name for name, found in fleet_findings(outcome).items() if found}
    assert named == {SLOW, SLOW_GPU_NODE, SLIGHTLY_SLOW}
    found = fleet_findings(outcome)
    # gpu07: its busbw, and each of its 8 GPUs' gigaflops and host copies; gpu19: GPU3's gigaflops only (its copies
    # are at full speed); gpu25 (4% slower, MAD ~0.5%): the same figures as gpu07.
    every_gpu = [(g, Verdict.FAIL) for g in range(8)]
    assert by_figure(found[SLOW]) == {"nccl_busbw": [(-1, Verdict.FAIL)], "dcgm_gflops": every_gpu,
                                      "nvbandwidth_h2d_gbps": every_gpu, "nvbandwidth_d2h_gbps": every_gpu}
    assert [(f.gpu, f.verdict) for f in found[SLOW_GPU_NODE]] == [(3, Verdict.FAIL)]
    assert found[SLOW_GPU_NODE][0].observed.endswith(" gigaflops")
    assert {k: [g for g, _ in v] for k, v in by_figure(found[SLIGHTLY_SLOW]).items()} == {
        "nccl_busbw": [-1], "dcgm_gflops": list(range(8)), "nvbandwidth_h2d_gbps": list(range(8)),
        "nvbandwidth_d2h_gbps": list(range(8))}
    assert all(f.verdict in (Verdict.WARN, Verdict.FAIL) for f in found[SLIGHTLY_SLOW])


def test_the_figures_and_deviations_are_the_measured_ones(outcome):
    nccl = cluster_finding(outcome, "nccl_busbw")
    values = nccl.observed["values"]
    assert len(values) == 32 and values[SLOW] == busbw(SLOW, FAULTS[SLOW])
    median = statistics.median(values.values())
    assert nccl.observed["median"] == pytest.approx(median, abs=1e-3)
    # The healthy figure, within the spread: the median sits at the healthy 480.76 GB/s +-1%.
    assert abs(median / 480.76 - 1) < 0.01
    (slow,) = [o for o in nccl.observed["outliers"] if o["node"] == SLOW]
    assert slow["value"] == busbw(SLOW, FAULTS[SLOW])
    assert slow["pct_below"] == pytest.approx((median - slow["value"]) / median * 100, abs=0.01)
    assert 7 <= slow["pct_below"] <= 9 and slow["z"] <= -5
    summary = next(f for f in fleet_findings(outcome)[SLOW] if f.gpu is None).summary
    assert f"{slow['value']:g} GB/s is {slow['pct_below']:.1f}% below the median of 32 h100-sxm-8x" in summary
    z_shown = float(re.search(r"robust z (-[0-9.]+)\)", summary).group(1))
    assert z_shown == pytest.approx(slow["z"], abs=0.06)

    gemm = cluster_finding(outcome, "dcgm_gflops")
    assert gemm.observed["samples"] == 256 and gemm.observed["nodes"] == 32
    (gpu3,) = [o for o in gemm.observed["outliers"] if o["node"] == SLOW_GPU_NODE]
    assert gpu3["gpu"] == 3 and gpu3["value"] == gflops(SLOW_GPU_NODE, 3, FAULTS[SLOW_GPU_NODE])
    assert 9 <= gpu3["pct_below"] <= 11 and gpu3["z"] <= -5
    gpu_finding = fleet_findings(outcome)[SLOW_GPU_NODE][0]
    assert gpu_finding.summary.startswith(f"GPU3: DCGM diag Diagnostic (GEMM) figure {gpu3['value']:g} gigaflops "
                                          f"is {gpu3['pct_below']:.1f}% below the median of 32 h100-sxm-8x")
    assert {o["node"] for o in gemm.observed["outliers"]} == {SLOW, SLOW_GPU_NODE, SLIGHTLY_SLOW}


def test_the_fleet_rule_catches_what_the_floor_passes(outcome):
    by_name = {n.name: n for n in outcome.run.nodes}
    nccl = [f for f in by_name[SLIGHTLY_SLOW].findings if f.check == "nccl.all_reduce"]
    assert [f.verdict for f in nccl] == [Verdict.PASS]  # 96% of a healthy node (101%) is above the 95% floor
    assert {f.check for f in by_name[SLIGHTLY_SLOW].findings
            if f.verdict not in (Verdict.PASS, Verdict.SKIP)} == {"fleet.performance"}
    healthy = [n for n in outcome.run.nodes if n.name not in FAULTS]
    assert len(healthy) == 29 and all(n.verdict is Verdict.PASS for n in healthy), \
        [(n.name, [f.summary for f in n.findings if f.verdict is not Verdict.PASS]) for n in healthy]
    assert outcome.run.verdict is ClusterVerdict.NOT_READY


def test_results_json_keeps_the_figures_and_the_header_the_rule(outcome):
    data = json.loads((outcome.run_dir / "results.json").read_text())
    gpu19 = next(n for n in data["nodes"] if n["name"] == SLOW_GPU_NODE)
    assert len(gpu19["facts"]["dcgm_diag_gflops"]) == 8
    header = json.loads((outcome.run_dir / "results.jsonl").read_text().splitlines()[0])
    # The profile's own fleet section (each figure's thresholds with its source, checks/profiles/h100-sxm-8x.yaml).
    section = header["fleet"]["h100-sxm-8x@2026.11.1"]
    assert (section["warn_z"], section["fail_z"], section["fail_min_pct"]) == (2, 3, 2)
    assert section["figures"]["dcgm_gflops"] == {"warn_pct": 3.5, "fail_pct": 7}


def test_a_report_rebuilt_from_the_journal_judges_alike(outcome, tmp_path):
    # Without results.json the run is rebuilt from results.jsonl (nodes held in memory, not spooled): the header's
    # rule gives the same findings.
    copy = tmp_path / "run"
    shutil.copytree(outcome.run_dir, copy)
    (copy / "results.json").unlink()
    rebuilt = rebuild_reports(copy)
    before = [(f.summary, f.verdict) for f in outcome.run.cluster_findings if f.check == "fleet.performance"]
    after = [(f.summary, f.verdict) for f in rebuilt.run.cluster_findings if f.check == "fleet.performance"]
    assert after == before and len(after) == 4
    assert {n.name for n in rebuilt.run.nodes if any(f.check == "fleet.performance" for f in n.findings)} == \
        {SLOW, SLOW_GPU_NODE, SLIGHTLY_SLOW}


def test_a_small_fleet_says_it_is_too_small(tmp_path):
    outcome = run(tmp_path, 3, {"gpu02": ["slower:80"]}, checks=LEVELS["standard"], level="standard")
    fleet = [f for f in outcome.run.cluster_findings if f.check == "fleet.performance"]
    assert [(f.observed["figure"], f.verdict) for f in fleet] == [
        ("nccl_busbw", Verdict.SKIP), ("dcgm_gflops", Verdict.SKIP), ("nvbandwidth_h2d_gbps", Verdict.SKIP),
        ("nvbandwidth_d2h_gbps", Verdict.SKIP)]
    assert "measured on 3 nodes, fewer than the 8 needed" in fleet[0].summary
    assert not any(fleet_findings(outcome).values())


def test_a_small_run_is_judged_against_the_baseline_run(tmp_path):
    checks = ("nccl.all_reduce", "fleet.performance")
    (tmp_path / "a").mkdir()
    accepted = run(tmp_path / "a", 10, {}, checks=checks, level="standard")
    assert [f.verdict for f in accepted.run.cluster_findings if f.check == "fleet.performance"] == [Verdict.PASS]
    # Three of those nodes again, one now at 92%: too few alone, judged among the accepted run's other 7.
    inventory = tmp_path / "b"
    inventory.mkdir()
    lines = ["all:", "  vars: {connection: sim, profile: h100-sxm-8x, cluster: fleet, nccl_timeout: 30}", "  hosts:"]
    lines += [f"    gpu0{i}: {{sim_faults: {json.dumps(['fleet_spread', *(['slower:92'] if i == 2 else [])])}}}"
              for i in (1, 2, 3)]
    (inventory / "fleet.yaml").write_text("\n".join(lines) + "\n")
    options = EngineOptions(checks=checks, fleet_baseline=str(accepted.run_dir))
    outcome = run_validate(load_inventory(inventory / "fleet.yaml", CATALOG), CATALOG, options, tmp_path / "r",
                           level="standard")
    (finding,) = [f for f in outcome.run.cluster_findings if f.check == "fleet.performance"]
    assert finding.verdict is Verdict.FAIL and finding.observed["nodes"] == 10
    assert f"(7 of them from baseline run {accepted.run.run_id})" in finding.summary
    assert [o["node"] for o in finding.observed["outliers"]] == ["gpu02"]
    assert {n.name for n in outcome.run.nodes if any(f.check == "fleet.performance" for f in n.findings)} == {"gpu02"}


def test_validate_baseline_gives_the_fleet_its_peers(tmp_path):
    from click.testing import CliRunner

    from nvdeploy.cli.app import cli

    def validate(count: int, slow: str, *extra: str):
        hosts = "".join(f"    gpu0{i}: {{sim_faults: [fleet_spread{', slower:92' if f'gpu0{i}' == slow else ''}]}}\n"
                        for i in range(1, count + 1))
        path = tmp_path / f"fleet{count}.yaml"
        path.write_text("all:\n  vars: {connection: sim, profile: h100-sxm-8x, cluster: cli}\n  hosts:\n" + hosts)
        result = CliRunner().invoke(cli, ["validate", "-i", str(path), "--level", "standard", "--out",
                                          str(tmp_path / "r"), "--no-history", *extra], catch_exceptions=False)
        run_dir = max((tmp_path / "r" / "cli").iterdir(), key=lambda p: p.stat().st_mtime_ns)
        return result, json.loads((run_dir / "results.json").read_text()), run_dir

    _, _, accepted = validate(9, "")
    result, data, _ = validate(2, "gpu02", "--baseline", str(accepted))
    (finding,) = [f for f in data["cluster_findings"] if f["check"] == "fleet.performance"
                  and f["observed"]["figure"] == "nccl_busbw"]
    assert finding["verdict"] == "FAIL" and "7 of them from baseline run" in finding["summary"], result.output
    assert result.exit_code == 1


def test_a_b300_node_with_slow_host_copies_is_named_on_the_nvbandwidth_figures(tmp_path):
    """8 HGX B300 nodes at standard, one at 92% (slower:92): its host copies still clear the nvbandwidth floors
    (45 GB/s; healthy ~56), and fleet.performance names it on both nvbandwidth figures, every GPU, and nobody else."""
    lines = ["all:", "  vars: {connection: sim, profile: b300-8x, cluster: b300, dcgm_timeout: 30, nccl_timeout: 30}",
             "  hosts:"]
    lines += [f"    b{i}: {{sim_faults: {json.dumps(['fleet_spread', *(['slower:92'] if i == 3 else [])])}}}"
              for i in range(1, 9)]
    path = tmp_path / "b300.yaml"
    path.write_text("\n".join(lines) + "\n")
    outcome = run_validate(load_inventory(path, CATALOG), CATALOG, EngineOptions(checks=LEVELS["standard"]),
                           tmp_path / "r", level="standard")
    slow = next(n for n in outcome.run.nodes if n.name == "b3")
    copies = [f for f in slow.findings if f.check == "nvbandwidth.copies"]
    assert copies and all(f.verdict is Verdict.PASS for f in copies), copies
    for figure in ("nvbandwidth_h2d_gbps", "nvbandwidth_d2h_gbps"):
        cluster = cluster_finding(outcome, figure)
        assert cluster.verdict is Verdict.FAIL and cluster.observed["nodes"] == 8, cluster.summary
        assert cluster.observed["samples"] == 64
        assert {(o["node"], o["gpu"]) for o in cluster.observed["outliers"]} == {("b3", g) for g in range(8)}
        assert all(7 <= o["pct_below"] <= 10 for o in cluster.observed["outliers"]), cluster.observed["outliers"]
    named = by_figure(fleet_findings(outcome)["b3"])
    assert named["nvbandwidth_h2d_gbps"] == named["nvbandwidth_d2h_gbps"] == [(g, Verdict.FAIL) for g in range(8)]
    summary = next(f.summary for f in fleet_findings(outcome)["b3"] if f.summary.startswith("GPU0: nvbandwidth h"))
    assert "below the median of 8 b300-8x" in summary and "pcie.link" in summary, summary
    assert {n for n, found in fleet_findings(outcome).items() if found} == {"b3"}


def test_a_node_with_slow_storage_is_named_per_path_and_the_floor_alone_passes_it(tmp_path):
    """10 H100 nodes at standard, each with two storage paths (floors far below the simulated 24/12 GB/s), one node at
    40% on storage (storage_slow:40): storage.throughput passes it on the floors, and fleet.performance names it on
    both figures of both paths, and nobody else."""
    paths = {"/data": {"read_gbps": 2, "write_gbps": 1}, "/local/nvme": {"read_gbps": 2, "write_gbps": 1}}
    lines = ["all:", "  vars: {connection: sim, profile: h100-sxm-8x, cluster: storage, dcgm_timeout: 30, "
             f"nccl_timeout: 30, storage_paths: {json.dumps(paths)}}}", "  hosts:"]
    lines += [f"    s{i:02d}: {{sim_faults: {json.dumps(['fleet_spread', *(['storage_slow:40'] if i == 4 else [])])}}}"
              for i in range(1, 11)]
    path = tmp_path / "storage.yaml"
    path.write_text("\n".join(lines) + "\n")
    checks = ("storage.throughput", "fleet.performance")
    outcome = run_validate(load_inventory(path, CATALOG), CATALOG, EngineOptions(checks=checks), tmp_path / "r",
                           level="standard")
    slow = next(n for n in outcome.run.nodes if n.name == "s04")
    measured = [f for f in slow.findings if f.check == "storage.throughput"]
    assert measured and all(f.verdict is Verdict.PASS for f in measured), measured
    named = fleet_findings(outcome)
    assert {n for n, found in named.items() if found} == {"s04"}, named
    for figure in ("storage_read_gbps", "storage_write_gbps"):
        cluster = cluster_finding(outcome, figure)
        assert cluster.verdict is Verdict.FAIL, cluster.summary
        outliers = cluster.observed["outliers"]
        assert {o["node"] for o in outliers} == {"s04"}, outliers
        assert all(55 <= o["pct_below"] <= 65 for o in outliers), outliers
    summaries = " | ".join(f.summary for f in named["s04"])
    assert "/data" in summaries and "/local/nvme" in summaries, summaries
