"""nvloom.domain over two simulated GB200 NVL72 racks (inventories/gb200-2rack.yaml, 36 trays) at level full,
in-process: nvloom_cli absent (the default) is one ERROR not_run of the run saying how to get it, never PASS, and
no tray ERROR for it; present and healthy PASSes; one tray with slow multi-node NVLink (mnnvl_slow) is named with
its GPUs."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.levels import load_levels
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import ErrorReason, Remediation, Verdict
from nvdeploy.runner.engine import EngineOptions

CATALOG = ProfileCatalog()
ROOT = Path(__file__).resolve().parents[2]
CHECKS = ("nvlink.fabric", "nvlink.domain", "nvloom.domain", "dcgm.mndiag")


def _run(base: Path, present: bool, slow: bool, tool: str = "nvloom", fault: str = "mnnvl_slow"):
    text = (ROOT / "inventories" / "gb200-2rack.yaml").read_text()
    if present:
        # Every tray has the tool: the group's faults, and the hosts' own lists (which replace the group's).
        text = text.replace("sim_faults: [", f"sim_faults: [{tool}, ")
        for rack in ("rack1", "rack2"):
            old = f"vars: {{rack: {rack}}}"
            assert old in text
            text = text.replace(old, f"vars: {{rack: {rack}, sim_faults: [{tool}]}}")
    if slow:
        old = f"          sim_faults: [{tool}, fabric_unhealthy]"
        assert old in text
        text = text.replace(old, old + f"\n        tray10:\n          sim_faults: [{tool}, {fault}]")
    inventory = base / "gb200-2rack.yaml"
    inventory.write_text(text)
    assert "nvloom.domain" in load_levels()["full"] and "dcgm.mndiag" in load_levels()["full"]
    return run_validate(load_inventory(inventory, CATALOG), CATALOG, EngineOptions(checks=CHECKS),
                        base / "reports", level="full")


def mine(outcome, check="nvloom.domain"):
    return ([f for f in outcome.run.cluster_findings if f.check == check],
            {n.name: [f for f in n.findings if f.check == check] for n in outcome.run.nodes})


def _absent_said_once(cluster, nodes, tool: str, words: str) -> None:
    """The tool not installed: one finding of the run naming both domains and what to install; no tray gets an
    ERROR for it (the trays' own verdicts stay theirs), and it never PASSes."""
    ran = [f for f in cluster if f.verdict is not Verdict.SKIP]
    assert len(ran) == 1, [f.summary for f in ran]
    (finding,) = ran
    assert finding.verdict is Verdict.ERROR and finding.reason is ErrorReason.NOT_RUN
    assert finding.summary.startswith(f"{tool} not run on rack rack1, rack rack2") and words in finding.summary
    assert not any(found for found in nodes.values()), {n: f for n, f in nodes.items() if f}


@pytest.mark.parametrize("present,slow", [(False, False), (True, False), (True, True)])
def test_nvloom_domain(tmp_path, present, slow):
    outcome = _run(tmp_path, present, slow)
    cluster, nodes = mine(outcome)
    if not present:
        _absent_said_once(cluster, nodes, "nvloom_cli", "github.com/NVIDIA/nvloom")
        healthy = [n for n in outcome.run.nodes if n.name in ("tray04", "tray22")]
        assert all(n.verdict is not Verdict.ERROR for n in healthy), [n.findings for n in healthy]
        return
    ran = [f for f in cluster if f.verdict is not Verdict.SKIP]
    assert len(ran) == 2  # rack1 and the rack2 clique that has more than one tray
    in_domains = [name for name, found in nodes.items() if found]
    assert "tray04" in in_domains and "tray22" in in_domains and "tray01" not in in_domains
    if not slow:
        assert all(f.verdict is Verdict.PASS for f in ran), [f.summary for f in ran]
        assert all(f.verdict is Verdict.PASS for name in in_domains for f in nodes[name])
        return
    rack1 = next(f for f in ran if "rack1" in f.summary)
    assert rack1.verdict is Verdict.FAIL and rack1.remediation is Remediation.ISOLATE
    assert "tray10 GPU 0: 450.00 GB/s" in rack1.summary, rack1.summary
    failed = sorted((name, f.gpu) for name in in_domains for f in nodes[name] if f.verdict is not Verdict.PASS)
    assert failed == [("tray10", 0), ("tray10", 1), ("tray10", 2), ("tray10", 3)]
    assert all(f.remediation is Remediation.ISOLATE for f in nodes["tray10"])
    assert next(f for f in ran if "rack2" in f.summary).verdict is Verdict.PASS


@pytest.mark.parametrize("present,fail", [(False, False), (True, False), (True, True)])
def test_dcgm_mndiag(tmp_path, present, fail):
    outcome = _run(tmp_path, present, fail, tool="mndiag", fault="mndiag_fail")
    cluster, nodes = mine(outcome, "dcgm.mndiag")
    if not present:
        _absent_said_once(cluster, nodes, "dcgmi mndiag", "DCGM 4.3")
        # nvloom is absent too: both say not_run, once each, neither PASSes.
        _absent_said_once(*mine(outcome), "nvloom_cli", "github.com/NVIDIA/nvloom")
        return
    ran = [f for f in cluster if f.verdict is not Verdict.SKIP]
    assert len(ran) == 2
    in_domains = [name for name, found in nodes.items() if found]
    assert "tray04" in in_domains and "tray22" in in_domains and "tray01" not in in_domains
    if not fail:
        assert all(f.verdict is Verdict.PASS for f in ran), [f.summary for f in ran]
        assert all(f.verdict is Verdict.PASS for n in in_domains for f in nodes[n])
        return
    rack1 = next(f for f in ran if "rack1" in f.summary)
    assert rack1.verdict is Verdict.FAIL and "GPU 1: GPU 1 reported an uncorrectable error" in rack1.summary
    failed = sorted((n, f.gpu) for n in in_domains for f in nodes[n] if f.verdict is not Verdict.PASS)
    assert failed == [("tray10", 1)]
    assert next(f for f in ran if "rack2" in f.summary).verdict is Verdict.PASS


def test_nvloom_stopped_is_not_localised_and_never_pass(tmp_path):
    # nvloom_fail on tray10: nvloom stops on its testcase; the domain FAILs naming it and no tray of it PASSes.
    cluster, nodes = mine(_run(tmp_path, True, True, fault="nvloom_fail"))
    rack1 = next(f for f in cluster if "rack1" in f.summary)
    assert rack1.verdict is Verdict.FAIL and "CUDA_ERROR_ILLEGAL_ADDRESS" in rack1.summary
    rack1_trays = [f"tray{i:02d}" for i in range(4, 19)]
    assert all(nodes[t][0].verdict is Verdict.ERROR and nodes[t][0].reason is ErrorReason.INCOMPLETE
               for t in rack1_trays)
    assert next(f for f in cluster if "rack2" in f.summary and f.verdict is not Verdict.SKIP).verdict is Verdict.PASS


@pytest.mark.parametrize("check", ["nvloom.domain", "dcgm.mndiag"])
def test_no_run_starts_after_the_deadline_and_none_passes(tmp_path, check):
    import time

    from nvdeploy.phases.mndiag import run_mndiag
    from nvdeploy.phases.nvloom import run_nvloom
    from nvdeploy.runner.record import RunRecorder

    inventory = tmp_path / "gb200.yaml"
    inventory.write_text("""all:
  vars: {cluster: gb200-small, connection: sim, profile: gb200-nvl72, driver_version: "580.173.02",
         sim_faults: [nvloom, mndiag]}
  children:
    rack1: {vars: {rack: rack1}, hosts: {"t[1:3]": {}}}
""")
    hosts = load_inventory(inventory, CATALOG)
    options = EngineOptions(checks=("nvlink.fabric",))
    fabric = run_validate(hosts, CATALOG, options, tmp_path / "fabric", level="quick")
    stage = run_nvloom if check == "nvloom.domain" else run_mndiag
    nodes, cluster = stage(list(fabric.run.nodes), list(hosts.hosts), CATALOG, options,
                           RunRecorder(tmp_path / "late"), deadline_at=time.monotonic() - 1)
    assert [(f.verdict, f.reason) for f in cluster] == [(Verdict.ERROR, ErrorReason.NOT_RUN)]
    assert "--deadline" in cluster[0].summary
    found = [(n.name, f.verdict, f.reason) for n in nodes for f in n.findings if f.check == check]
    assert found == [(f"t{i}", Verdict.ERROR, ErrorReason.NOT_RUN) for i in (1, 2, 3)]
    # On time, the same three trays PASS.
    nodes, cluster = stage(list(fabric.run.nodes), list(hosts.hosts), CATALOG, options, RunRecorder(tmp_path / "on"))
    assert [f.verdict for f in cluster] == [Verdict.PASS], [f.summary for f in cluster]


def test_a_slow_tray_is_named_after_the_retest_and_its_bisect_partners_are_not(tmp_path):
    # The simulator prints nvloom's real bisect rows ("24->54": tray10's GPUs write to tray17/tray18's and back),
    # so the bisect alone lowers the rows of both trays; the gpu-to-rack re-test names tray10 only.
    outcome = _run(tmp_path, True, True)
    cluster, nodes = mine(outcome)
    rack1 = next(f for f in cluster if "rack1" in f.summary)
    assert "(24->54)" in rack1.summary and "gpu_to_rack_device_to_device_unidir_write_sm" in rack1.summary
    assert [f.verdict for t in ("tray17", "tray18") for f in nodes[t]] == [Verdict.PASS, Verdict.PASS]
    assert all("with tray1" in f.summary for f in nodes["tray10"])
    evidence = sorted(p.name for p in (tmp_path / "reports").rglob("nvloom_*"))
    assert any("localise" in name for name in evidence) and any("nvloom_00" in name for name in evidence)
