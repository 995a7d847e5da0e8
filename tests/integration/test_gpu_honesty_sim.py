"""The engine over the simulated transport, at level quick: unknown per-GPU values, lost GPUs and NVSwitch SXids
reach the verdicts, the node verdicts and the report (switch, link and the quoted kernel-log line); nodes printing
the R610 nvidia-smi layouts get the verdicts of older drivers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.levels import load_levels
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import ClusterVerdict, Remediation, Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim.scenario import ECC_UNKNOWN_GPU, LOST_GPU

CATALOG = ProfileCatalog()


def run(tmp_path: Path, hosts: dict, profile: str = "h100-sxm-8x"):
    lines = ["all:", "  vars: {connection: sim, profile: " + profile + "}", "  hosts:"]
    lines += [f"    {name}: {{sim_faults: {json.dumps(faults)}}}" for name, faults in hosts.items()]
    path = tmp_path / "cluster.yaml"
    path.write_text("\n".join(lines) + "\n")
    options = EngineOptions(checks=load_levels()["quick"])
    return run_validate(load_inventory(path, CATALOG), CATALOG, options, tmp_path / "reports")


def test_each_new_fault_on_its_node_only(tmp_path):
    outcome = run(tmp_path, {"ok": [], "ecc": ["ecc_unknown"], "lost": ["gpu_lost"], "fatal": ["sxid_fatal"],
                             "warn": ["sxid_nonfatal"]})
    nodes = {n.name: n for n in outcome.run.nodes}
    assert nodes["ok"].verdict is Verdict.PASS
    assert [f.check for f in nodes["ok"].findings if f.check.startswith("kmsg.")] == ["kmsg.xid", "kmsg.sxid"]
    assert nodes["ecc"].verdict is Verdict.ERROR
    assert [(f.check, f.gpu) for f in nodes["ecc"].findings if f.verdict is not Verdict.PASS
            and f.verdict is not Verdict.SKIP] == [("memory.ecc_errors", ECC_UNKNOWN_GPU)]
    assert nodes["lost"].verdict is Verdict.FAIL
    assert all(f.remediation is Remediation.ISOLATE for f in nodes["lost"].findings if f.verdict is Verdict.FAIL)
    # The Xid 79 too: its PCI address is the lost GPU's (the driver still lists it, as GPU_IS_LOST).
    assert {f.gpu for f in nodes["lost"].findings if f.verdict is Verdict.FAIL} == {LOST_GPU}
    assert nodes["fatal"].verdict is Verdict.FAIL
    assert [(f.check, f.verdict) for f in nodes["fatal"].findings if f.verdict is not Verdict.PASS
            and f.verdict is not Verdict.SKIP] == [("kmsg.sxid", Verdict.FAIL)]
    assert nodes["warn"].verdict is Verdict.WARN
    assert outcome.run.verdict is ClusterVerdict.NOT_READY

    html = (outcome.run_dir / "report.html").read_text()
    assert "SXid 20034 (Fatal) x1 on nvidia-nvswitch3 (PCI 0000:08:00.0), link 48" in html
    assert "SXid (PCI:0000:08:00.0): 20034, Fatal, Link 48 LTSSM Fault Up" in html
    assert f"GPU{ECC_UNKNOWN_GPU} (00000000:DB:00.0): uncorrectable ECC error counters unknown" in html
    saved = json.loads((outcome.run_dir / "results.json").read_text())
    fatal = next(n for n in saved["nodes"] if n["name"] == "fatal")
    assert any(f["check"] == "kmsg.sxid" and f["verdict"] == "FAIL" for f in fatal["findings"])
    assert fatal["facts"]["sxid_counts"] == {"20034": 1}
    assert next(n for n in saved["nodes"] if n["name"] == "lost")["facts"]["gpus_lost"] == [LOST_GPU]


def test_sxid_check_skips_on_a_pcie_sku(tmp_path):
    outcome = run(tmp_path, {"pcie": ["sxid_fatal"]}, profile="l40s-8x")
    node = outcome.run.nodes[0]
    assert [f.verdict for f in node.findings if f.check == "kmsg.sxid"] == [Verdict.SKIP]


# The checks that read the versions and the power limits R610 moved: they must judge, not SKIP or ERROR.
R610_MOVED = ("driver.version", "clocks.power_limit", "power.node")


def _verdicts(node) -> list[tuple[str, str, object]]:
    return sorted((f.check, f.verdict.value, f.gpu) for f in node.findings)


@pytest.mark.parametrize("profile", ["h200-8x", "l40s-8x"])
def test_r610_nodes_get_the_verdicts_of_older_drivers(tmp_path, profile):
    # Fault smi_r610: nvidia-smi prints the R610 layouts. GPU facts from the NVML probe, and (no_python) from the
    # R610 XML itself: the same verdicts as the older layouts either way.
    outcome = run(tmp_path, {"old": [], "r610": ["smi_r610"], "old-xml": ["no_python"],
                             "r610-xml": ["smi_r610", "no_python"]}, profile=profile)
    nodes = {n.name: n for n in outcome.run.nodes}
    assert _verdicts(nodes["r610"]) == _verdicts(nodes["old"])
    assert _verdicts(nodes["r610-xml"]) == _verdicts(nodes["old-xml"])
    old_driver = next(f for f in nodes["old"].findings if f.check == "driver.version").observed
    for name in ("r610", "r610-xml"):
        node = nodes[name]
        assert node.verdict is nodes["old"].verdict
        judged = {f.check: f for f in node.findings if f.check in R610_MOVED}
        assert set(judged) == set(R610_MOVED), name
        for check, finding in judged.items():
            assert finding.verdict is Verdict.PASS, (name, check, finding.summary)
        assert judged["driver.version"].observed == old_driver is not None
    saved = json.loads((outcome.run_dir / "results.json").read_text())
    facts = {n["name"]: n["facts"] for n in saved["nodes"]}
    assert facts["r610-xml"]["driver_version"] == facts["old-xml"]["driver_version"]
    assert facts["r610-xml"]["gpu_facts_source"] == "nvidia_smi_xml"
