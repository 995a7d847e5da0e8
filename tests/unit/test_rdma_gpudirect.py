"""rdma.gpudirect: perftest's real output, the pair verdict, and the pair stage over simulated nodes."""

from __future__ import annotations

from pathlib import Path

import pytest
from _catalog_helpers import CATALOG, result, timed_out

from nvdeploy.checks.rdma import expectation, judge_pair
from nvdeploy.config.inventory import load_inventory
from nvdeploy.parsers.perftest import parse_perftest
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import ClusterVerdict, ErrorReason, Remediation, Verdict
from nvdeploy.runner.engine import EngineOptions

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "perftest"
OK_SERVER = result("gpudirect_server", "server table\n")


def test_real_gpudirect_client_output():
    parsed = parse_perftest((REAL / "ib-write-bw-use-cuda-t4-roce-client.txt").read_text())
    assert parsed.cuda and parsed.gpu_name == "Tesla T4" and parsed.device == "mlx5_0"
    assert parsed.link_type == "Ethernet" and parsed.test == "RDMA_Write BW Test"
    assert len(parsed.rows) == 23 and parsed.complete and parsed.bw_gbps == 22.99
    assert parsed.errors == ()


def test_real_duration_run_has_no_peak():
    parsed = parse_perftest((REAL / "ib-write-bw-roce-duration-single-row.txt").read_text())
    assert [(r.size_bytes, r.peak_gbps, r.average_gbps) for r in parsed.rows] == [(65536, 0.0, 98.03)]
    assert parsed.complete and not parsed.cuda


def test_real_server_banner_only_is_incomplete():
    parsed = parse_perftest((REAL / "ib-write-bw-server-waiting-cut.txt").read_text())
    assert parsed.rows == () and not parsed.complete and parsed.bw_gbps is None


def test_cut_table_is_not_complete_and_mb_units_convert():
    text = (REAL / "ib-write-bw-roce-duration-single-row.txt").read_text()
    cut = text.rstrip("\n").rsplit("\n", 1)[0]  # the closing dashes never arrived
    assert parse_perftest(cut).rows and not parse_perftest(cut).complete
    mb = parse_perftest(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
                        " 65536      1000           11000.00           10000.00             0.16\n" + "-" * 40 + "\n")
    assert mb.bw_gbps == pytest.approx(83.886, abs=0.01)


def test_judge_pair():
    good = (REAL / "ib-write-bw-use-cuda-t4-roce-client.txt").read_text()
    ok = judge_pair("a -> b", result("c", good), parse_perftest(good), OK_SERVER, 25, 80)
    assert ok.verdict is Verdict.PASS and ok.observed == 22.99 and ok.expected == ">= 20"
    slow = judge_pair("a -> b", result("c", good), parse_perftest(good), OK_SERVER, 100, 80)
    assert slow.verdict is Verdict.FAIL and slow.remediation is Remediation.INVESTIGATE
    plain = (REAL / "ib-write-bw-roce-duration-single-row.txt").read_text()
    nocuda = judge_pair("a -> b", result("c", plain), parse_perftest(plain), OK_SERVER, 100, 80)
    assert nocuda.verdict is Verdict.FAIL and "without a GPU buffer" in nocuda.summary


@pytest.mark.parametrize("client, server, reason", [
    (result("c", rc=127, stderr="sh: 1: ib_write_bw: not found\n"), OK_SERVER, ErrorReason.TOOL_MISSING),
    (result("c"), result("s", rc=127), ErrorReason.TOOL_MISSING),
    (timed_out("c"), OK_SERVER, ErrorReason.TIMEOUT),
    (result("c", " Couldn't connect to 10.0.0.1:18515\n Unable to open file descriptor for socket connection\n",
            rc=1), OK_SERVER, ErrorReason.INCOMPLETE),
])
def test_pair_that_did_not_run_is_error(client, server, reason):
    verdict = judge_pair("a -> b", client, parse_perftest(client.text), server, 400, 80)
    assert (verdict.verdict, verdict.reason) == (Verdict.ERROR, reason)


def test_profile_floor():
    assert expectation(CATALOG.get("h100-sxm-8x"), {}) == (400.0, 80.0)
    assert expectation(CATALOG.get("l40s-8x"), {})[0] is None


def run(tmp_path, hosts: str, checks=("driver.loaded", "rdma.gpudirect"), profile="h100-sxm-8x"):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "inv.yaml"
    path.write_text(f"all:\n  vars: {{connection: sim, profile: {profile}}}\n  hosts:\n{hosts}")
    return run_validate(load_inventory(path, CATALOG), CATALOG, EngineOptions(checks=checks), tmp_path / "out",
                        level="full")


def test_stage_localises_the_slow_node(tmp_path):
    outcome = run(tmp_path, "    n1: {}\n    n2: {}\n    n3: {sim_faults: [gpudirect_slow]}\n    n4: {}\n")
    verdicts = {n.name: n.verdict for n in outcome.run.nodes}
    assert verdicts == {"n1": Verdict.PASS, "n2": Verdict.PASS, "n3": Verdict.FAIL, "n4": Verdict.PASS}
    assert outcome.run.verdict is ClusterVerdict.NOT_READY
    failed = [f for f in outcome.run.cluster_findings if f.check == "rdma.gpudirect" and f.verdict is Verdict.FAIL]
    assert failed and all("n3" in f.summary for f in failed)
    evidence = (outcome.run_dir / failed[0].evidence).read_text()
    assert "initializing CUDA" in evidence and "RDMA_Write BW Test" in evidence


def test_stage_without_a_good_partner_is_inconclusive(tmp_path):
    outcome = run(tmp_path, "    n1: {sim_faults: [gpudirect_slow]}\n    n2: {}\n")
    [finding] = [f for f in outcome.run.nodes[1].findings if f.check == "rdma.gpudirect"]
    assert (finding.verdict, finding.reason) == (Verdict.ERROR, ErrorReason.INCOMPLETE)
    assert "not localised" in finding.summary


def test_stage_skips_and_errors(tmp_path):
    skipped = run(tmp_path / "a", "    n1: {}\n    n2: {}\n", profile="l40s-8x")
    assert [f.verdict for f in skipped.run.cluster_findings if f.check == "rdma.gpudirect"] == [Verdict.SKIP]
    missing = run(tmp_path / "b", "    n1: {sim_faults: [perftest_missing]}\n    n2: {}\n")
    assert {f.reason for n in missing.run.nodes for f in n.findings if f.check == "rdma.gpudirect"} == \
        {ErrorReason.TOOL_MISSING}
    alone = run(tmp_path / "c", "    n1: {}\n    n2: {sim_faults: [driver_missing]}\n")
    assert "fewer than two" in next(f.summary for f in alone.run.cluster_findings if f.check == "rdma.gpudirect")
