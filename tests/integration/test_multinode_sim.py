"""Multi-node nccl-tests over simulated nodes: mpirun from a launcher, all / pairwise / bisect."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.levels import load_levels
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.multinode import mpirun_argv
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import ClusterVerdict, ErrorReason, Verdict
from nvdeploy.runner.engine import EngineOptions

CATALOG = ProfileCatalog()
FULL = load_levels()["full"]


def run(tmp_path: Path, faults: dict[str, list[str]], count: int = 16, pattern: str = "bisect"):
    lines = ["all:", "  vars: {connection: sim, profile: h100-sxm-8x, cluster: mn, nccl_timeout: 2}", "  hosts:"]
    for i in range(1, count + 1):
        name = f"gpu{i:02d}"
        lines.append(f"    {name}: {{sim_faults: {json.dumps(faults.get(name, []))}}}")
    path = tmp_path / "mn.yaml"
    path.write_text("\n".join(lines) + "\n")
    options = EngineOptions(checks=FULL, multinode_pattern=pattern)
    return run_validate(load_inventory(path, CATALOG), CATALOG, options, tmp_path / "r", level="full")


def multinode(outcome, name):
    node = next(n for n in outcome.run.nodes if n.name == name)
    return [f for f in node.findings if f.check == "nccl.multinode"]


@pytest.mark.parametrize("pattern", ["bisect", "pairwise"])
def test_one_slow_node_of_16_is_named(tmp_path, pattern):
    outcome = run(tmp_path, {"gpu11": ["nccl_low_bw"]}, pattern=pattern)
    assert [f.verdict for f in multinode(outcome, "gpu11")] == [Verdict.FAIL]
    for i in (1, 5, 10, 12, 16):
        assert [f.verdict for f in multinode(outcome, f"gpu{i:02d}")] == [Verdict.PASS]
    localised = [f for f in outcome.run.cluster_findings if f.check == "nccl.multinode" and "localised" in f.summary]
    assert localised and localised[0].observed == "gpu11"
    assert outcome.run.verdict is ClusterVerdict.NOT_READY


def test_healthy_cluster_passes_at_the_multinode_floor(tmp_path):
    outcome = run(tmp_path, {}, count=4)
    assert outcome.run.verdict is ClusterVerdict.READY, [f.summary for f in outcome.run.cluster_findings]
    first = next(f for f in outcome.run.cluster_findings if f.check == "nccl.multinode")
    assert first.verdict is Verdict.PASS and first.unit == "GB/s" and first.observed >= 351.5
    assert "NCCL 2.21.5" in first.summary
    evidence = outcome.run_dir / first.evidence
    assert b"# Avg bus bandwidth" in evidence.read_bytes()


def test_all_pattern_leaves_participants_inconclusive_not_failed(tmp_path):
    outcome = run(tmp_path, {"gpu03": ["nccl_low_bw"]}, count=4, pattern="all")
    for name in ("gpu01", "gpu02", "gpu03", "gpu04"):
        findings = multinode(outcome, name)
        assert [f.verdict for f in findings] == [Verdict.ERROR]
        assert findings[0].reason is ErrorReason.INCOMPLETE


def test_hung_collective_is_error_not_localised_by_guessing(tmp_path):
    outcome = run(tmp_path, {"gpu02": ["nccl_hang"]}, count=4)
    # gpu02 hangs its own single-node test too (ERROR), so it takes no part; the others run fine.
    assert [f.verdict for f in multinode(outcome, "gpu01")] == [Verdict.PASS]
    assert multinode(outcome, "gpu02") == []


def test_nodes_failing_other_checks_take_no_part(tmp_path):
    outcome = run(tmp_path, {"gpu02": ["xid79"], "gpu03": ["driver_missing"]}, count=3)
    skipped = [f for f in outcome.run.cluster_findings if f.check == "nccl.multinode"]
    assert skipped[0].verdict is Verdict.SKIP and "fewer than two healthy nodes" in skipped[0].summary


def test_mpirun_command_line_is_bounded_and_ring_for_pairs():
    from nvdeploy.config.inventory import Host

    hosts = [Host("gpu01", {"address": "10.0.0.1", "nccl_env": {"NCCL_IB_HCA": "mlx5"}}), Host("gpu02", {})]
    argv = mpirun_argv(hosts, 8, hosts[0], 600)
    assert argv[:3] == ("mpirun", "--timeout", "600")
    assert "NCCL_ALGO=RING" in argv and "NCCL_IB_HCA=mlx5" in argv
    assert argv[argv.index("-H") + 1] == "10.0.0.1:8,gpu02:8"
    assert argv[argv.index("-np") + 1] == "16"
    assert "-c" in argv and argv[argv.index("-c") + 1] == "1"
    three = mpirun_argv(hosts + [Host("gpu03", {})], 8, hosts[0], 600)
    assert "NCCL_ALGO=RING" not in three


def _stage(tmp_path: Path, faults: dict[str, list[str]], count: int, pattern: str, deadline_in: float):
    """The multi-node stage alone, over nodes that passed their own checks, with a given deadline."""
    import time as _time

    from nvdeploy.phases.multinode import run_multinode
    from nvdeploy.results import NodeResult
    from nvdeploy.runner.record import RunRecorder

    lines = ["all:", "  vars: {connection: sim, profile: h100-sxm-8x, cluster: mn, nccl_timeout: 2}", "  hosts:"]
    names = [f"gpu{i:02d}" for i in range(1, count + 1)]
    lines += [f"    {name}: {{sim_faults: {json.dumps(faults.get(name, []))}}}" for name in names]
    (tmp_path / "mn.yaml").write_text("\n".join(lines) + "\n")
    hosts = list(load_inventory(tmp_path / "mn.yaml", CATALOG).hosts)
    nodes = [NodeResult(h.name, ()) for h in hosts]
    recorder = RunRecorder(tmp_path / "run")
    try:
        return run_multinode(nodes, hosts, CATALOG, EngineOptions(checks=FULL), recorder, pattern,
                             _time.monotonic() + deadline_in)
    finally:
        recorder.close()


def _mpirun_evidence(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "run" / "evidence" / "_cluster").glob("nccl_multinode_*"))


@pytest.mark.parametrize("pattern", ["bisect", "all", "pairwise"])
def test_no_mpirun_round_starts_after_the_deadline(tmp_path, pattern):
    nodes, cluster = _stage(tmp_path, {}, 4, pattern, deadline_in=-1.0)
    assert _mpirun_evidence(tmp_path) == []
    assert cluster and all(f.verdict is Verdict.ERROR and f.reason is ErrorReason.NOT_RUN for f in cluster)
    assert "not started: the global --deadline passed" in cluster[0].summary
    for node in nodes:
        assert [(f.verdict, f.reason) for f in node.findings] == [(Verdict.ERROR, ErrorReason.NOT_RUN)]
        assert node.findings[0].summary == "multi-node all_reduce not run: the global --deadline passed"


def test_bisection_stops_at_the_deadline_and_names_nobody(tmp_path, monkeypatch):
    from nvdeploy.phases import multinode

    original = multinode.MultiNodeRunner.run_group

    def first_round_then_deadline(self, names):
        run = original(self, names)
        self.deadline_at = 0.0  # the deadline passes while the first (failing) round runs
        return run

    monkeypatch.setattr(multinode.MultiNodeRunner, "run_group", first_round_then_deadline)
    nodes, cluster = _stage(tmp_path, {"gpu03": ["nccl_low_bw"]}, 8, "bisect", deadline_in=3600.0)
    assert len(_mpirun_evidence(tmp_path)) == 1  # the whole set ran; no bisection step started
    assert cluster[0].verdict is Verdict.FAIL
    assert not [f for f in cluster if "localised" in f.summary]
    for node in nodes:
        assert [(f.verdict, f.reason) for f in node.findings] == [(Verdict.ERROR, ErrorReason.INCOMPLETE)]
        assert "bisect stopped: the global --deadline passed" in node.findings[0].summary


def test_round_timeouts_end_by_the_deadline():
    from nvdeploy.phases.multinode import round_timeouts

    assert round_timeouts(900, None) == (900, 930)
    assert round_timeouts(900, 10_000) == (900, 930)
    mpirun, command = round_timeouts(900, 100)
    assert mpirun == 75 and command == 100
    assert round_timeouts(900, 1.5) is None


def test_validate_passes_its_deadline_to_the_multinode_stage(tmp_path):
    # gpu05's lsmod answers after 60 s: the node stage ends at the 8 s deadline, so the stage after it may not
    # start a round; the four healthy nodes finished well before and would otherwise take part.
    lines = ["all:", "  vars: {connection: sim, profile: h100-sxm-8x, cluster: mn, nccl_timeout: 2,",
             "         command_timeout: 120}", "  hosts:", "    gpu[01-04]: {}",
             "    gpu05: {sim_faults: [slow:lsmod:60]}"]
    path = tmp_path / "mn.yaml"
    path.write_text("\n".join(lines) + "\n")
    options = EngineOptions(checks=FULL, deadline_s=8)
    outcome = run_validate(load_inventory(path, CATALOG), CATALOG, options, tmp_path / "r", level="full")
    cluster = [f for f in outcome.run.cluster_findings if f.check == "nccl.multinode"]
    assert [(f.verdict, f.reason) for f in cluster] == [(Verdict.ERROR, ErrorReason.NOT_RUN)], cluster
    assert "not started: the global --deadline passed" in cluster[0].summary
    assert not list((outcome.run_dir / "evidence").glob("_cluster/nccl_multinode_*"))
    assert outcome.run.verdict is ClusterVerdict.INCOMPLETE
