"""The check catalog over simulated nodes: each new fault gives the right verdict on the right node only, at the
level that runs its check; quick runs no heavy collector; every profile's healthy node passes every level."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from nvdeploy.collect.catalog import COLLECTORS
from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.levels import load_levels
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import ClusterVerdict, ErrorReason, Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim.transport import SimTransport

CATALOG = ProfileCatalog()
LEVELS = load_levels()
ROOT = Path(__file__).resolve().parents[2]


def run(tmp_path: Path, hosts: dict, level: str = "full", profile: str = "h100-sxm-8x", extra_vars: str = ""):
    lines = ["all:", "  vars:", "    connection: sim", f"    profile: {profile}", "    dcgm_timeout: 1",
             "    nccl_timeout: 1"]
    lines += [f"    {line}" for line in extra_vars.splitlines() if line.strip()]
    lines.append("  hosts:")
    for name, faults in hosts.items():
        lines.append(f"    {name}: {{sim_faults: {json.dumps(faults)}}}" if faults else f"    {name}: {{}}")
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "cluster.yaml"
    path.write_text("\n".join(lines) + "\n")
    inventory = load_inventory(path, CATALOG)
    return run_validate(inventory, CATALOG, EngineOptions(checks=LEVELS[level]), tmp_path / "reports", level=level)


def node(outcome, name):
    return next(n for n in outcome.run.nodes if n.name == name)


def found(result_node, check):
    return [f for f in result_node.findings if f.check == check]


# fault, the first level that runs its check, check, verdict, reason
CASES = [
    ("nvlink_down", "quick", "nvlink.links", Verdict.FAIL, None),
    ("nvlink_down", "quick", "nvlink.topology", Verdict.FAIL, None),
    ("pcie_degraded", "quick", "pcie.link", Verdict.FAIL, None),
    ("fabricmanager_down", "quick", "fabric.manager", Verdict.FAIL, None),
    ("peermem_missing", "quick", "ib.peermem", Verdict.FAIL, None),
    ("thermal_throttle", "quick", "clocks.throttle", Verdict.FAIL, None),
    ("thermal_throttle", "quick", "clocks.temperature", Verdict.FAIL, None),
    ("mig_enabled", "quick", "gpu.mig", Verdict.FAIL, None),
    ("ib_port_down", "full", "ib.ports", Verdict.FAIL, None),
    ("dcgm_fail:pcie", "standard", "dcgm.diag_r2", Verdict.FAIL, None),
    ("dcgm_fail:memory", "standard", "dcgm.diag_r2", Verdict.FAIL, None),
    ("dcgm_fail:targeted_stress", "full", "dcgm.diag_r3", Verdict.FAIL, None),
    ("dcgm_fail:memory_bandwidth", "full", "dcgm.diag_r3", Verdict.FAIL, None),
    ("dcgm_missing", "standard", "dcgm.diag_r2", Verdict.ERROR, ErrorReason.TOOL_MISSING),
    ("dcgm_missing", "standard", "dcgm.discovery", Verdict.ERROR, ErrorReason.TOOL_MISSING),
    ("hostengine_down", "standard", "dcgm.diag_r2", Verdict.ERROR, ErrorReason.TOOL_MISSING),
    ("dcgm_hang", "standard", "dcgm.diag_r2", Verdict.ERROR, ErrorReason.TIMEOUT),
    ("dcgm_hang", "full", "dcgm.diag_r3", Verdict.ERROR, ErrorReason.TIMEOUT),
    ("nccl_low_bw", "standard", "nccl.all_reduce", Verdict.FAIL, None),
    ("nccl_wrong", "standard", "nccl.all_reduce", Verdict.FAIL, None),
    ("nccl_hang", "standard", "nccl.all_reduce", Verdict.ERROR, ErrorReason.TIMEOUT),
]
ORDER = ("quick", "standard", "full")


@pytest.mark.parametrize("fault, level, check, verdict, reason", CASES,
                         ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_fault_gives_its_verdict_on_its_node_only_at_its_level(tmp_path, fault, level, check, verdict, reason):
    outcome = run(tmp_path, {"good1": [], "bad": [fault], "good2": []}, level=level)
    bad = node(outcome, "bad")
    findings = found(bad, check)
    assert findings and Verdict.worst(f.verdict for f in findings) is verdict, bad.findings
    if reason is not None:
        assert findings[0].reason is reason
    assert bad.verdict is verdict or (bad.verdict is Verdict.FAIL and verdict is Verdict.ERROR)
    for good in ("good1", "good2"):
        assert node(outcome, good).verdict is Verdict.PASS, [f for f in node(outcome, good).findings
                                                             if f.verdict is not Verdict.PASS]
    # One level lower, the check does not run: the fault is not seen there.
    earlier = ORDER.index(level) - 1
    if earlier >= 0:
        lower = run(tmp_path / "lower", {"bad": [fault]}, level=ORDER[earlier])
        assert not found(node(lower, "bad"), check)


def test_quick_runs_no_heavy_collector_and_one_round_trip(tmp_path, monkeypatch):
    calls: list[list[str]] = []
    original = SimTransport.run_batch

    def spy(self, commands, deadline_s=None):
        calls.append([c.name for c in commands])
        return original(self, commands, deadline_s)

    monkeypatch.setattr(SimTransport, "run_batch", spy)
    heavy = {name for name, c in COLLECTORS.items() if c.heavy}
    outcome = run(tmp_path, {"a": [], "b": []}, level="quick")
    assert outcome.run.verdict is ClusterVerdict.READY
    assert len(calls) == 2 and not heavy & {name for batch in calls for name in batch}
    assert {"nvidia_smi_nvlink", "nvidia_smi_topo", "fabricmanager", "lsmod"} <= set(calls[0])
    calls.clear()
    run(tmp_path / "std", {"a": []}, level="standard")
    # the heavy tests one by one, then DCGM's health watches read again once they have had the tests' samples
    assert [b for b in calls[1:]] == [["dcgm_diag_r2"], ["dcgm_diag_gemm"], ["nccl_all_reduce"], ["nvbandwidth"],
                                      ["dcgm_health_after"]]
    calls.clear()
    run(tmp_path / "full", {"a": []}, level="full")
    assert [b for b in calls[1:]] == [["nccl_all_reduce"], ["nvbandwidth"], ["dcgm_diag_r3"], ["dcgm_health_after"]]
    assert "ibstat" in calls[0]


def test_full_level_replaces_dcgm_r2_by_r3():
    assert "dcgm.diag_r2" in LEVELS["standard"] and "dcgm.diag_r2" not in LEVELS["full"]
    assert "dcgm.diag_r3" in LEVELS["full"] and "ib.ports" in LEVELS["full"] and "ib.ports" not in LEVELS["standard"]
    for check in ("nvlink.links", "nvlink.topology", "pcie.link", "fabric.manager", "clocks.throttle", "gpu.mig",
                  "ib.peermem"):
        assert check in LEVELS["quick"]


@pytest.mark.parametrize("profile", CATALOG.names())
def test_healthy_nodes_of_every_profile_pass_the_full_level(tmp_path, profile):
    # A tray of an NVL72 rack passes only with its rack: a whole NVLink domain of trays (nvlink.domain).
    domain = CATALOG.get(profile).nvlink_domain
    # nvloom_cli and dcgmi mndiag are absent from a simulated tray unless the faults nvloom and mndiag put them
    # there (absent: ERROR not_run).
    hosts = {f"n{i}": (["nvloom", "mndiag"] if domain else []) for i in range(1, 1 + (domain.trays if domain else 2))}
    outcome = run(tmp_path, hosts, level="full", profile=profile)
    assert outcome.run.verdict is ClusterVerdict.READY, [
        (f.node, f.check, f.summary) for n in outcome.run.nodes for f in n.findings if f.verdict is not Verdict.PASS
        and f.verdict is not Verdict.SKIP]
    checks = {f.check: f.verdict for f in node(outcome, "n1").findings}
    if not CATALOG.get(profile).gpu.nvswitch:
        assert checks["nvlink.topology"] is Verdict.SKIP and checks["fabric.manager"] is Verdict.SKIP
    if "ib" not in CATALOG.get(profile).extra:
        assert checks["ib.ports"] is Verdict.SKIP and checks["ib.peermem"] is Verdict.SKIP
    assert {f.check for f in outcome.run.cluster_findings} >= {"cuda.consistency", "dcgm.consistency",
                                                                "nccl.consistency", "ofed.consistency"}


def test_stack_version_mismatch_names_the_node(tmp_path):
    outcome = run(tmp_path, {"gpu01": [], "gpu02": [], "gpu03": ["driver_mismatch"]}, level="standard")
    odd = node(outcome, "gpu03")
    assert [f.verdict for f in found(odd, "cuda.consistency")] == [Verdict.FAIL]
    assert [f.verdict for f in found(odd, "fabric.consistency")] == [Verdict.FAIL]
    cuda = next(f for f in outcome.run.cluster_findings if f.check == "cuda.consistency")
    assert cuda.summary == "2 CUDA versions in the cluster: gpu[01-02]: 12.4 | gpu03: 12.2"
    assert not found(node(outcome, "gpu01"), "cuda.consistency")


def test_nccl_facts_reach_results_json(tmp_path):
    outcome = run(tmp_path, {"a": [], "b": ["nccl_low_bw"]}, level="standard")
    data = json.loads((outcome.run_dir / "results.json").read_text())
    facts = {n["name"]: n["facts"] for n in data["nodes"]}
    assert facts["a"]["nccl_version"] == "2.21.5" and facts["a"]["nccl_all_reduce_busbw_gbps"] == 480.76
    assert facts["b"]["nccl_all_reduce_busbw_gbps"] == 288.46 and facts["a"]["dcgm_version"] == "3.3.5"
    low = found(node(outcome, "b"), "nccl.all_reduce")[0]
    assert (low.observed, low.expected, low.unit) == (288.46, ">= 452.2", "GB/s")
    assert (outcome.run_dir / "evidence" / "b" / "nccl_all_reduce.out").read_bytes().count(b"FAILED") == 1


@pytest.mark.parametrize("level", ["standard", "full"])
def test_demo_inventory_runs_in_seconds(tmp_path, level):
    started = time.monotonic()
    inventory = load_inventory(ROOT / "inventories" / "demo.yaml", CATALOG)
    outcome = run_validate(inventory, CATALOG, EngineOptions(checks=LEVELS[level]), tmp_path, level=level)
    assert time.monotonic() - started < 20
    assert outcome.run.verdict is ClusterVerdict.NOT_READY
    assert node(outcome, "gpu001").verdict is Verdict.PASS
    assert any(f.check == "dcgm.discovery" and f.verdict is Verdict.FAIL for f in node(outcome, "gpu003").findings)
