"""dcgm.health over simulated nodes at the quick level: a health Failure FAILs its node naming the GPU and the
system, a Warning WARNs, DCGM missing is ERROR, healthy nodes PASS; the set and the check run as one light
collector in the node's one batch."""

from __future__ import annotations

import json
from pathlib import Path

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.levels import load_levels
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import ClusterVerdict, ErrorReason, Remediation, Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim.transport import SimTransport

CATALOG = ProfileCatalog()
LEVELS = load_levels()


def run(tmp_path: Path, hosts: dict, level: str = "quick"):
    lines = ["all:", "  vars:", "    connection: sim", "    profile: h100-sxm-8x", "  hosts:"]
    for name, faults in hosts.items():
        lines.append(f"    {name}: {{sim_faults: {json.dumps(faults)}}}" if faults else f"    {name}: {{}}")
    path = tmp_path / "cluster.yaml"
    path.write_text("\n".join(lines) + "\n")
    inventory = load_inventory(path, CATALOG)
    return run_validate(inventory, CATALOG, EngineOptions(checks=LEVELS[level]), tmp_path / "reports", level=level)


def spy_batches(monkeypatch) -> list[list[str]]:
    """The collector names of every batch the simulated nodes are sent, in order."""
    batches: list[list[str]] = []
    original = SimTransport.run_batch

    def spy(self, commands, deadline_s=None):
        batches.append([c.name for c in commands])
        return original(self, commands, deadline_s)

    monkeypatch.setattr(SimTransport, "run_batch", spy)
    return batches


def health(outcome, name):
    node = next(n for n in outcome.run.nodes if n.name == name)
    return node, [f for f in node.findings if f.check == "dcgm.health"]


def test_failure_warning_and_healthy_nodes_at_quick(tmp_path, monkeypatch):
    batches = spy_batches(monkeypatch)
    outcome = run(tmp_path, {"good": [], "warm": ["dcgm_health_warn"], "bad": ["dcgm_health_fail:nvlink"]})
    assert outcome.run.verdict is ClusterVerdict.NOT_READY
    node, found = health(outcome, "bad")
    assert [f.verdict for f in found] == [Verdict.FAIL] and node.verdict is Verdict.FAIL
    assert found[0].gpu == 2 and found[0].remediation is Remediation.ISOLATE
    assert found[0].summary.startswith("GPU2: NVLINK system Failure: GPU 2's NvLink link 5 is currently down")
    # the evidence is the collector's whole answer: the set line, then the JSON report
    evidence = (Path(outcome.run_dir) / found[0].evidence).read_text()
    assert evidence.startswith("Health monitor systems set successfully.\n{") and '"NVLINK system"' in evidence
    node, found = health(outcome, "warm")
    assert [f.verdict for f in found] == [Verdict.WARN] and found[0].gpu == 3
    node, found = health(outcome, "good")
    assert [f.verdict for f in found] == [Verdict.PASS] and node.verdict is Verdict.PASS
    # one light collector in the nodes' batches, never a round trip of its own
    assert all(batch.count("dcgm_health") == 1 for batch in batches if "nvidia_smi_nvlink" in batch)
    assert ["dcgm_health"] not in batches


def test_dcgm_missing_is_error_and_the_run_incomplete(tmp_path):
    outcome = run(tmp_path, {"a": [], "nodcgm": ["dcgm_missing"]})
    assert outcome.run.verdict is ClusterVerdict.INCOMPLETE
    _, found = health(outcome, "nodcgm")
    assert [f.verdict for f in found] == [Verdict.ERROR] and found[0].reason is ErrorReason.TOOL_MISSING
    _, found = health(outcome, "a")
    assert [f.verdict for f in found] == [Verdict.PASS]


def test_watches_read_again_after_the_heavy_tests_show_what_the_first_read_could_not(tmp_path, monkeypatch):
    """The watches need about a minute of samples: an incident that shows only later (dcgm_health_late) is missed by
    the read right after they are set, and named by the read after the heavy tests; quick runs no heavy test and
    no second read."""
    batches = spy_batches(monkeypatch)
    (tmp_path / "q").mkdir()
    (tmp_path / "s").mkdir()
    quick = run(tmp_path / "q", {"late": ["dcgm_health_late:pcie"]})
    assert [f.verdict for f in health(quick, "late")[1]] == [Verdict.PASS]
    assert not any("dcgm_health_after" in b for b in batches)
    batches.clear()
    standard = run(tmp_path / "s", {"late": ["dcgm_health_late:pcie"], "good": []}, level="standard")
    node, found = health(standard, "late")
    assert [(f.verdict, f.gpu) for f in found] == [(Verdict.FAIL, 2)], found
    assert found[0].summary.startswith("after the heavy tests: GPU2: PCIe system Failure")
    assert found[0].remediation is Remediation.ISOLATE and node.verdict is Verdict.FAIL
    good = health(standard, "good")[1]
    assert [f.verdict for f in good] == [Verdict.PASS] and "read again after the heavy tests: Healthy" in \
        good[0].summary
    # the second read is the node's last round trip: after the heavy tests
    late_batches = [b for b in batches if "dcgm_health_after" in b]
    assert late_batches == [["dcgm_health_after"], ["dcgm_health_after"]]


def test_no_second_read_on_a_node_whose_heavy_tests_were_held_back(tmp_path, monkeypatch):
    """A busy node runs no heavy test (the busy guard): nothing was loaded, so there is no "after the heavy tests"
    read to make, and dcgm.health says what its first read said."""
    batches = spy_batches(monkeypatch)
    outcome = run(tmp_path, {"busy": ["gpu_busy"]}, level="standard")
    assert not any("dcgm_health_after" in b for b in batches), batches
    found = health(outcome, "busy")[1]
    assert [f.verdict for f in found] == [Verdict.PASS] and "read again" not in found[0].summary
