"""system.versions (node) and the cluster-level version consistency checks (CUDA, DCGM, NCCL, OFED, fabric
manager), plus the small stack parsers and the strict profile schema of the catalog sections."""

from __future__ import annotations

import textwrap

import pytest
from _catalog_helpers import context, result, run_check, sim_check, verdicts

from nvdeploy.checks.cluster import evaluate_cluster, version_consistency
from nvdeploy.config.profiles import load_profile_file
from nvdeploy.config.yamlfile import ConfigError
from nvdeploy.parsers.stack import (
    parse_dcgmi_version,
    parse_fabricmanager_version,
    parse_lsmod,
    parse_ofed_version,
    parse_systemctl_state,
)
from nvdeploy.results import NodeResult, Remediation, Verdict


def test_system_versions_records_the_stack():
    findings = sim_check("system.versions")
    assert verdicts(findings) == [Verdict.PASS]
    assert findings[0].summary == ("driver 550.90.07, CUDA 12.4, DCGM 3.3.5, OFED 23.10-1.1.9.0, "
                                   "fabric manager 550.90.07")
    assert findings[0].observed["dcgm_version"] == "3.3.5"
    missing = sim_check("system.versions", "dcgm_missing")
    assert verdicts(missing) == [Verdict.PASS] and "(DCGM: not found)" in missing[0].summary
    nothing = run_check("system.versions", context({"dcgm_version": result("dcgm_version", "", rc=127)}))
    assert verdicts(nothing) == [Verdict.SKIP]


def nodes(key: str, values: dict[str, str]) -> list[NodeResult]:
    return [NodeResult(name, (), facts={key: value}) for name, value in values.items()]


def test_minority_version_fails_with_folded_ranges():
    values = {f"gpu{i:03d}": "2.21.5" for i in range(1, 128)}
    values["gpu128"] = "2.18.3"
    updated, cluster = version_consistency(nodes("nccl_version", values), "nccl_version", "nccl.consistency", "NCCL")
    assert cluster[0].verdict is Verdict.FAIL
    assert cluster[0].summary == "2 NCCL versions in the cluster: gpu[001-127]: 2.21.5 | gpu128: 2.18.3"
    bad = next(n for n in updated if n.name == "gpu128")
    assert [f.verdict for f in bad.findings] == [Verdict.FAIL] and bad.findings[0].remediation is Remediation.REINSTALL
    assert bad.findings[0].expected == "2.21.5"
    assert all(not n.findings for n in updated if n.name != "gpu128")


def test_consistent_versions_pass_and_single_nodes_are_not_judged():
    updated, cluster = version_consistency(nodes("ofed_version", {"a1": "23.10", "a2": "23.10"}), "ofed_version",
                                           "ofed.consistency", "OFED")
    assert [f.verdict for f in cluster] == [Verdict.PASS] and "all 2 nodes run OFED 23.10" in cluster[0].summary
    assert version_consistency(nodes("ofed_version", {"a1": "23.10"}), "ofed_version", "x", "OFED")[1] == []


def test_evaluate_cluster_covers_every_stack_component():
    facts = {"driver_version": "550.90.07", "cuda_version": "12.4", "dcgm_version": "3.3.5", "nccl_version": "2.21.5",
             "ofed_version": "23.10-1.1.9.0", "fabricmanager_version": "550.90.07"}
    odd = dict(facts, dcgm_version="3.1.8", fabricmanager_version="550.54.15")
    run = [NodeResult("n1", (), facts=facts), NodeResult("n2", (), facts=facts), NodeResult("n3", (), facts=odd)]
    updated, cluster = evaluate_cluster(run)
    by_check = {f.check: f.verdict for f in cluster}
    assert by_check == {"driver.consistency": Verdict.PASS, "cuda.consistency": Verdict.PASS,
                        "dcgm.consistency": Verdict.FAIL, "nccl.consistency": Verdict.PASS,
                        "ofed.consistency": Verdict.PASS, "fabric.consistency": Verdict.FAIL}
    n3 = next(n for n in updated if n.name == "n3")
    assert sorted(f.check for f in n3.findings) == ["dcgm.consistency", "fabric.consistency"]


def test_stack_parsers():
    lsmod = parse_lsmod("Module                  Size  Used by\nnvidia_peermem         16384  0\n"
                        "nvidia               8597504  29 nvidia_uvm,nvidia_peermem\n")
    assert lsmod.loaded("nvidia_peermem") and lsmod.modules["nvidia"] == 29 and not lsmod.loaded("Module")
    assert parse_systemctl_state("failed\n") == "failed" and parse_systemctl_state("Unit x not found.") is None
    assert parse_dcgmi_version("dcgmi  version: 3.3.5\n") == "3.3.5"
    assert parse_ofed_version("MLNX_OFED_LINUX-23.10-1.1.9.0:\n") == "23.10-1.1.9.0"
    assert parse_ofed_version("OFED-internal-24.04-0.6.6:\n") == "24.04-0.6.6"
    assert parse_fabricmanager_version("Fabric Manager version is : 535.104.05\n") == "535.104.05"
    assert parse_dcgmi_version(b"\xff\xfe") is None and parse_ofed_version(None) is None


BASE = """
    name: t
    version: "1"
    gpu: {count: 8, model: "X", memory_mib: 1, pci_device_id: "2330"}
"""


@pytest.mark.parametrize("section, message", [
    ("ib: {hcas: 8, rate: 400}", "unknown key in ib"),
    ("ib: {hcas: 8}", "missing required key"),
    ("throttle: {fail: [hw_melting]}", "clock-event reasons"),
    ("nccl: {all_reduce_busbw_gbps: 476, floor_pct: 195}", "percentage"),
    ("mig: {enabled: \"no\"}", "true or false"),
    ("nvlink: [18]", "must be a mapping"),
])
def test_profile_sections_are_strict(tmp_path, section, message):
    path = tmp_path / "t.yaml"
    path.write_text(textwrap.dedent(BASE) + section + "\n")
    with pytest.raises(ConfigError, match=message) as info:
        load_profile_file(path)
    assert "t.yaml" in info.value.render()


def test_profile_sections_are_loaded(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(textwrap.dedent(BASE) + "ib: {hcas: 4, rate_gbps: 200}\nmig: {enabled: true}\n"
                    "throttle: {fail: [hw_slowdown], warn: []}\n")
    profile = load_profile_file(path)
    assert profile.extra["ib"] == {"hcas": 4, "rate_gbps": 200} and profile.extra["mig"] == {"enabled": True}
