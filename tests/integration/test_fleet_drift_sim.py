"""fleet.drift and the figure trend over simulated runs: an accepted run of 10 nodes, then the same 10 with one
node at 94% of itself (slower:94). validate --baseline names that node only, with its fall; the history shows the
same fall with ``history --node --figure``."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from nvdeploy.cli.app import cli


def _validate(tmp_path: Path, slow: str, *extra: str):
    hosts = "".join(f"    gpu{i:02d}: {{sim_faults: [fleet_spread{', slower:94' if f'gpu{i:02d}' == slow else ''}]}}\n"
                    for i in range(1, 11))
    path = tmp_path / "fleet.yaml"
    path.write_text("all:\n  vars: {connection: sim, profile: h100-sxm-8x, cluster: drift, nccl_timeout: 30}\n"
                    "  hosts:\n" + hosts)
    result = CliRunner().invoke(cli, ["validate", "-i", str(path), "--level", "standard", "--out",
                                      str(tmp_path / "r"), *extra], catch_exceptions=False)
    run_dir = max((tmp_path / "r" / "drift").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    return result, json.loads((run_dir / "results.json").read_text()), run_dir


def test_a_node_that_fell_since_the_accepted_run_is_warned_and_its_trend_shown(tmp_path):
    first, data, accepted = _validate(tmp_path, "")
    assert not [f for f in data["cluster_findings"] if f["check"] == "fleet.drift"], first.output  # no baseline
    result, data, _ = _validate(tmp_path, "gpu04", "--baseline", str(accepted))
    drift = {f["observed"]["figure"]: f for f in data["cluster_findings"] if f["check"] == "fleet.drift"}
    # slower:94 slows every figure the standard level measures: the busbw, each GPU's GEMM and its host copies.
    assert set(drift) == {"nccl_busbw", "dcgm_gflops", "nvbandwidth_h2d_gbps", "nvbandwidth_d2h_gbps"}, result.output
    cluster = drift["nccl_busbw"]
    assert cluster["verdict"] == "WARN" and cluster["observed"]["compared"] == 10, result.output
    assert [(d["node"], d["pct_fall"]) for d in cluster["observed"]["fallen"]] == [("gpu04", 6.0)]
    for figure in ("nvbandwidth_h2d_gbps", "nvbandwidth_d2h_gbps"):
        assert {(d["node"], d["gpu"]) for d in drift[figure]["observed"]["fallen"]} == {("gpu04", g) for g in range(8)}
    warned = {n["name"]: [f for f in n["findings"] if f["check"] == "fleet.drift"] for n in data["nodes"]}
    assert {name for name, found in warned.items() if found} == {"gpu04"}
    finding = next(f for f in warned["gpu04"] if f["gpu"] is None)
    assert " fell 6.0% since the accepted run " in finding["summary"] and finding["verdict"] == "WARN"
    trend = CliRunner().invoke(cli, ["history", "--db", str(tmp_path / "r" / "history.sqlite"), "--node", "gpu04",
                                     "--figure", "nccl_busbw"])
    assert trend.exit_code == 0 and "in 2 of 2 runs" in trend.output, trend.output
    assert trend.output.rstrip().endswith("-6.0% vs first"), trend.output
