"""nvlink.links (nvidia-smi nvlink -s) and nvlink.topology (nvidia-smi topo -m) against the profile's nvlink data."""

from __future__ import annotations

from pathlib import Path

from _catalog_helpers import context, profile_with, result, run_check, sim_check, timed_out, verdicts

from nvdeploy.results import ErrorReason, Remediation, Verdict

REAL = Path(__file__).parent.parent / "fixtures" / "real"


def test_healthy_hgx_node_passes():
    links = sim_check("nvlink.links")
    assert verdicts(links) == [Verdict.PASS] and links[0].summary == "8 GPUs x 18 NVLinks up at 26.562 GB/s"
    topo = sim_check("nvlink.topology")
    assert verdicts(topo) == [Verdict.PASS] and "28 GPU pairs connected by NV18" in topo[0].summary


def test_nvlink_down_fails_gpu3_in_both_checks():
    links = sim_check("nvlink.links", "nvlink_down")
    assert verdicts(links) == [Verdict.FAIL]
    assert links[0].gpu == 3 and "link(s) 2, 9 inactive" in links[0].summary
    assert links[0].remediation is Remediation.REBOOT
    topo = sim_check("nvlink.topology", "nvlink_down")
    assert verdicts(topo) == [Verdict.FAIL]
    assert topo[0].gpu == 3 and topo[0].summary.startswith("GPU3 has lost NVLinks: 7 GPU pair(s) not connected by NV18")


def test_link_speed_and_count_come_from_the_profile():
    faster = profile_with("h100-sxm-8x", nvlink={"links": 18, "speed_gbps": 53.125})
    findings = sim_check("nvlink.links", profile=faster)
    assert verdicts(findings) == [Verdict.FAIL] * 8 and "at 26.562 GB/s" in findings[0].summary
    more = profile_with("h100-sxm-8x", nvlink={"links": 20, "speed_gbps": 26.562})
    assert "18 of 20 links listed" in sim_check("nvlink.links", profile=more)[0].summary


def test_skus_without_nvlink_or_nvswitch_skip():
    assert verdicts(sim_check("nvlink.links", profile="l40s-8x")) == [Verdict.SKIP]
    assert verdicts(sim_check("nvlink.topology", profile="l40s-8x")) == [Verdict.SKIP]
    assert verdicts(sim_check("nvlink.topology", profile="h100-pcie-8x")) == [Verdict.SKIP]


def test_mig_mode_and_driver_missing_are_errors():
    mig = sim_check("nvlink.links", "mig_enabled")
    assert verdicts(mig) == [Verdict.ERROR] and mig[0].reason is ErrorReason.NOT_RUN and "MIG" in mig[0].summary
    for check in ("nvlink.links", "nvlink.topology"):
        gone = sim_check(check, "driver_missing")
        assert verdicts(gone) == [Verdict.ERROR] and "exited 9" in gone[0].summary


def test_hung_or_missing_nvidia_smi_is_error():
    ctx = context({"nvidia_smi_nvlink": timed_out("nvidia_smi_nvlink")})
    assert run_check("nvlink.links", ctx)[0].reason is ErrorReason.TIMEOUT
    ctx = context({"nvidia_smi_topo": result("nvidia_smi_topo", "", rc=127, stderr="sh: 1: nvidia-smi: not found")})
    assert run_check("nvlink.topology", ctx)[0].reason is ErrorReason.TOOL_MISSING


def test_real_captures():
    text = (REAL / "nvidia-smi-nvlink" / "a100-sxm4-80gb-8gpu-nvlink-status-12links-25GBs.txt").read_text()
    ctx = context({"nvidia_smi_nvlink": result("nvidia_smi_nvlink", text)}, profile="a100-sxm-8x")
    assert verdicts(run_check("nvlink.links", ctx)) == [Verdict.PASS]
    topo = (REAL / "nvidia-smi-topo" / "8xA100-sxm4-NV12-2numa-spaces.txt").read_text()
    ctx = context({"nvidia_smi_topo": result("nvidia_smi_topo", topo)}, profile="a100-sxm-8x")
    assert verdicts(run_check("nvlink.topology", ctx)) == [Verdict.PASS]
    # The A100 matrix judged against the H100 profile (NV18 expected) is a FAIL on every pair.
    ctx = context({"nvidia_smi_topo": result("nvidia_smi_topo", topo)}, profile="h100-sxm-8x")
    assert verdicts(run_check("nvlink.topology", ctx)) == [Verdict.FAIL]
    pcie_only = (REAL / "nvidia-smi-topo" / "2gpu-PHB-no-nvlink.txt").read_text()
    ctx = context({"nvidia_smi_topo": result("nvidia_smi_topo", pcie_only)})
    finding = run_check("nvlink.topology", ctx)[0]
    assert finding.verdict is Verdict.FAIL and finding.observed == {"GPU0-GPU1": "PHB"}


def test_link_whose_state_cannot_be_read_is_error_naming_gpu_and_link_not_down():
    from nvdeploy.config.profiles import ProfileCatalog
    from nvdeploy.sim.scenario import NodeScenario
    from nvdeploy.sim.tools import run_tool

    scenario = NodeScenario("node01", ProfileCatalog().get("h100-sxm-8x"))
    text = run_tool(scenario, ["nvidia-smi", "nvlink", "-s"]).stdout.decode()
    head, gpu5, rest = text.partition("GPU 5:")
    rest = rest.replace("Link 4: 26.562 GB/s", "Link 4: Unknown Error", 1)
    findings = run_check("nvlink.links", context({"nvidia_smi_nvlink": result("nvidia_smi_nvlink",
                                                                              head + gpu5 + rest)}))
    assert [(f.verdict, f.gpu) for f in findings] == [(Verdict.ERROR, 5)], findings
    assert "state of link(s) 4 unknown ('Unknown Error')" in findings[0].summary
