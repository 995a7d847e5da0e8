"""NVL72 trays and HGX B300: the profiles, nvlink.fabric and gpu.recovery_action on the real GB200/GB300 captures,
edited copies of them and simulated trays (nvidia-smi XML and the NVML probe)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from nvdeploy.config.profiles import load_profile_file
from nvdeploy.config.yamlfile import ConfigError
from nvdeploy.parsers.nvidia_smi import parse_text, parse_xml
from nvdeploy.parsers.nvlink import parse_nvlink
from nvdeploy.results import ErrorReason, Remediation, Verdict
from nvdeploy.sim.scenario import NodeScenario
from tests.unit._catalog_helpers import CATALOG, context, result, run_check, sim_results

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
GB200 = (REAL / "nvidia-smi-xml" / "gb200-4gpu-fabric-platforminfo-c2c-v13-580.173.02.xml").read_text()
GB300 = (REAL / "nvidia-smi-xml" / "gb300-4gpu-fabric-platforminfo-v13-580.173.02.xml").read_text()
B300_TABLE = (REAL / "nvidia-smi-text" / "b300-sxm6-ac-7gpu-default-table-r610-610.57.04.txt").read_text()
B300_NVLINK = (REAL / "nvidia-smi-nvlink" / "b300-sxm6-ac-18links-610.57.04.txt").read_text()


def on(xml: str, profile: str = "gb200-nvl72", uptime: str = "754.21 2981.10\n", check: str = "nvlink.fabric"):
    results = {"nvidia_smi_xml": result("nvidia_smi_xml", xml), "uptime": result("uptime", uptime)}
    return run_check(check, context(results, profile))


def gpu_block(xml: str, index: int) -> tuple[int, int]:
    """(start, end) of the index-th <gpu> element."""
    start = -1
    for _ in range(index + 1):
        start = xml.index("<gpu id=", start + 1)
    return start, xml.index("</gpu>", start)


def edit_gpu(xml: str, index: int, old: str, new: str) -> str:
    start, end = gpu_block(xml, index)
    block = xml[start:end]
    assert old in block, old
    return xml[:start] + block.replace(old, new) + xml[end:]


def edit_all(xml: str, old: str, new: str) -> str:
    assert old in xml, old
    return xml.replace(old, new)


# -- profiles -------------------------------------------------------------------------------------------------------


def test_nvl72_profiles_are_trays_of_an_18_tray_domain_without_fabric_manager():
    for name, model in (("gb200-nvl72", "NVIDIA GB200"), ("gb300-nvl72", "NVIDIA GB300")):
        profile = CATALOG.get(name)
        domain = profile.nvlink_domain
        assert domain is not None and (domain.trays, domain.gpus) == (18, 72)
        assert profile.gpu.count == 4 and profile.gpu.model == model
        assert not profile.gpu.nvswitch and not profile.gpu.nvlsm and profile.driver_flavour == "open"
        assert profile.extra["nvlink"] == {"links": 18, "speed_gbps": 53.125}
    b300 = CATALOG.get("b300-8x")
    assert b300.nvlink_domain is None and b300.gpu.count == 8 and b300.gpu.nvswitch and b300.gpu.nvlsm
    assert CATALOG.get("h100-sxm-8x").nvlink_domain is None


@pytest.mark.parametrize("xml, profile", [(GB200, "gb200-nvl72"), (GB300, "gb300-nvl72")])
def test_real_grace_blackwell_captures_match_their_profile(xml, profile):
    findings = {c: run_check(c, context({"nvidia_smi_xml": result("nvidia_smi_xml", xml)}, profile))
                for c in ("gpu.count", "gpu.model", "gpu.memory", "clocks.power_limit")}
    assert {c: [f.verdict for f in fs] for c, fs in findings.items()} == {c: [Verdict.PASS] for c in findings}


def test_real_b300_table_and_links_match_the_b300_profile():
    facts = parse_text(B300_TABLE)
    profile = CATALOG.get("b300-8x")
    # The capture's node shows 7 of its 8 GPUs; each is the profile's model and memory.
    assert len(facts.gpus) == 7
    assert {(g.name, g.memory_total_mib) for g in facts.gpus} == {(profile.gpu.model, profile.gpu.memory_mib)}
    links = parse_nvlink(B300_NVLINK)
    speeds = {link.speed_gbps for gpu in links.gpus for link in gpu.links}
    assert len(links.gpus) == 7 and {len(g.links) for g in links.gpus} == {18} and speeds == {53.125}


BASE = """name: t
version: "1"
gpu: {count: 4, model: "X", memory_mib: 1, pci_device_id: "2941"}
"""


@pytest.mark.parametrize("section, message, key", [
    ("nvlink_domain: {trays: 18, gpus: 64}", "trays x gpu.count = 18 x 4 = 72, got 64", "nvlink_domain.gpus"),
    ("nvlink_domain: {trays: 18, racks: 1, gpus: 72}", "unknown key in nvlink_domain", "nvlink_domain.racks"),
    ("nvlink_domain: {trays: 0, gpus: 0}", "positive integer", "nvlink_domain.trays"),
    ("nvlink_domain: {gpus: 72}", "missing required key", "nvlink_domain.trays"),
])
def test_nvlink_domain_section_is_strict(tmp_path, section, message, key):
    path = tmp_path / "t.yaml"
    path.write_text(textwrap.dedent(BASE) + section + "\n")
    with pytest.raises(ConfigError, match=message) as info:
        load_profile_file(path)
    assert key in info.value.render() and "t.yaml" in info.value.render()


# -- nvlink.fabric --------------------------------------------------------------------------------------------------


def test_real_gb200_and_gb300_trays_are_registered_and_healthy():
    for xml, profile, clique in ((GB200, "gb200-nvl72", 2), (GB300, "gb300-nvl72", 32766)):
        findings = on(xml, profile)
        assert [f.verdict for f in findings] == [Verdict.PASS], findings
        assert f"clique {clique}" in findings[0].summary and "4 GPUs registered" in findings[0].summary


def test_completed_with_a_failed_status_and_zero_ids_fails_that_gpu():
    xml = edit_gpu(GB200, 1, "<status>Success</status>", "<status>Insufficient Resources</status>")
    xml = edit_gpu(xml, 1, "<cliqueId>2</cliqueId>", "<cliqueId>0</cliqueId>")
    xml = edit_gpu(xml, 1, "<clusterUuid>00000001-0000-0000-0000-000000000001</clusterUuid>",
                   "<clusterUuid>00000000-0000-0000-0000-000000000000</clusterUuid>")
    findings = on(xml)
    assert [(f.verdict, f.gpu) for f in findings] == [(Verdict.FAIL, 1)]
    assert "status Insufficient Resources" in findings[0].summary and "cliqueId 0" in findings[0].summary
    assert "(all zero)" in findings[0].summary and findings[0].remediation is Remediation.ISOLATE


def test_completed_success_with_an_all_zero_cluster_uuid_is_not_pass():
    xml = edit_all(GB200, "<clusterUuid>00000001-0000-0000-0000-000000000001</clusterUuid>",
                   "<clusterUuid>00000000-0000-0000-0000-000000000000</clusterUuid>")
    findings = on(xml)
    assert [f.verdict for f in findings] == [Verdict.FAIL] * 4 and all("clusterUuid" in f.summary for f in findings)


@pytest.mark.parametrize("old, new, words", [
    ("<summary>Healthy</summary>", "<summary>Unhealthy</summary>", "health Unhealthy"),
    ("<bandwidth>Full</bandwidth>", "<bandwidth>Degraded</bandwidth>", "bandwidth Degraded"),
    ("<route_unhealthy>False</route_unhealthy>", "<route_unhealthy>True</route_unhealthy>", "route unhealthy"),
    ("<route_recovery_in_progress>False</route_recovery_in_progress>",
     "<route_recovery_in_progress>True</route_recovery_in_progress>", "route recovery in progress"),
    ("<access_timeout_recovery>False</access_timeout_recovery>",
     "<access_timeout_recovery>True</access_timeout_recovery>", "access timeout recovery"),
    ("<incorrect_configuration>N/A</incorrect_configuration>",
     "<incorrect_configuration>Insufficient NVLinks</incorrect_configuration>", "Insufficient NVLinks"),
])
def test_an_unhealthy_fabric_health_block_fails_the_gpu(old, new, words):
    findings = on(edit_gpu(GB200, 3, old, new))
    assert [(f.verdict, f.gpu) for f in findings] == [(Verdict.FAIL, 3)] and words in findings[0].summary


def test_incorrect_configuration_none_is_healthy():
    assert "<incorrect_configuration>None</incorrect_configuration>" in GB300  # as the GB300 capture prints it
    assert [f.verdict for f in on(GB300, "gb300-nvl72")] == [Verdict.PASS]


def test_in_progress_is_error_with_the_time_since_boot():
    xml = edit_gpu(GB200, 0, "<state>Completed</state>", "<state>In Progress</state>")
    findings = on(xml, uptime="754.21 2981.10\n")
    assert [(f.verdict, f.gpu, f.reason) for f in findings] == [(Verdict.ERROR, 0, ErrorReason.INCOMPLETE)]
    assert "In Progress (754 s after boot)" in findings[0].summary
    later = on(xml, uptime="7384.00 1.00\n")[0]
    assert "In Progress (2 h 3 min after boot)" in later.summary
    assert "time since boot unknown" in on(xml, uptime="")[0].summary


def test_not_supported_on_a_tray_profile_fails_and_na_on_hgx_skips():
    xml = edit_all(GB200, "<state>Completed</state>", "<state>Not Supported</state>")
    findings = on(xml)
    assert [f.verdict for f in findings] == [Verdict.FAIL] * 4 and "Not Supported" in findings[0].summary
    # The same GPUs judged against an HGX profile (no NVLink domain): nothing expected, SKIP.
    assert [f.verdict for f in on(xml, "b200-8x")] == [Verdict.SKIP]
    assert [f.verdict for f in on(GB200, "h100-sxm-8x")] == [Verdict.SKIP]


def test_an_unreadable_fabric_state_is_error_not_pass():
    xml = edit_gpu(GB200, 2, "<state>Completed</state>", "<state>Unknown Error</state>")
    findings = on(xml)
    assert [(f.verdict, f.gpu) for f in findings] == [(Verdict.ERROR, 2)] and "UNKNOWN" in findings[0].summary


def test_registered_without_a_health_block_warns():
    xml = edit_all(GB200, "<summary>Healthy</summary>", "<summary>Not Supported</summary>")
    xml = edit_all(xml, "<bandwidth>Full</bandwidth>", "<bandwidth>Not Supported</bandwidth>")
    findings = on(xml)
    assert [(f.verdict, f.remediation) for f in findings] == [(Verdict.WARN, Remediation.MONITOR)]


# -- gpu.recovery_action ----------------------------------------------------------------------------------------------


def test_recovery_action_none_passes_on_the_real_captures():
    for xml, profile in ((GB200, "gb200-nvl72"), (GB300, "gb300-nvl72")):
        assert [f.verdict for f in on(xml, profile, check="gpu.recovery_action")] == [Verdict.PASS]


@pytest.mark.parametrize("action, remediation", [
    # NVIDIA's names (GPU memory error management guide, "Error Recovery and Response Flags"); only None is in a
    # real capture. The names nvdeploy used before (GPU Reset, Node Reboot) are unknown actions now.
    ("Reset", Remediation.RESET_GPU), ("Reboot", Remediation.REBOOT), ("Drain P2P", Remediation.ISOLATE),
    ("Drain and Reset", Remediation.RESET_GPU), ("GPU Reset", Remediation.INVESTIGATE),
    ("Reset After Sunset", Remediation.INVESTIGATE)])
def test_a_recovery_action_fails_the_gpu_with_that_remediation(action, remediation):
    xml = edit_gpu(GB200, 2, "<gpu_recovery_action>None</gpu_recovery_action>",
                   f"<gpu_recovery_action>{action}</gpu_recovery_action>")
    findings = on(xml, check="gpu.recovery_action")
    assert [(f.verdict, f.gpu, f.remediation) for f in findings] == [(Verdict.FAIL, 2, remediation)]
    assert repr(action) in findings[0].summary


def test_no_recovery_action_on_older_drivers_skips_and_a_missing_one_errors():
    xml = GB200.replace("<gpu_recovery_action>None</gpu_recovery_action>", "")
    assert [f.verdict for f in on(xml, check="gpu.recovery_action")] == [Verdict.SKIP]
    one = edit_gpu(GB200, 0, "<gpu_recovery_action>None</gpu_recovery_action>", "")
    assert [(f.verdict, f.gpu) for f in on(one, check="gpu.recovery_action")] == [(Verdict.ERROR, 0)]


# -- simulated trays, through nvidia-smi and through the NVML probe ---------------------------------------------------


def sim_tray(*faults: str, profile: str = "gb200-nvl72", probe: bool = True, rack: str = "r1"):
    scenario = NodeScenario("tray07", CATALOG.get(profile), tuple(faults), cluster="lab", rack=rack)
    results = sim_results(scenario, ["nvidia_smi_xml", "uptime"])
    if not probe:
        results.pop("nvml_probe")
    ctx = context(results, profile, node="tray07")
    return ctx, {c: run_check(c, ctx) for c in ("nvlink.fabric", "gpu.recovery_action", "gpu.model", "gpu.count")}


@pytest.mark.parametrize("probe", [True, False], ids=["nvml-probe", "nvidia-smi-xml"])
def test_a_healthy_simulated_tray_passes_from_either_source(probe):
    ctx, found = sim_tray(probe=probe)
    assert ctx.facts["smi_source"] == ("nvml_probe" if probe else "nvidia_smi_xml")
    assert {c: [f.verdict for f in fs] for c, fs in found.items()} == {c: [Verdict.PASS] for c in found}
    assert "clique 32766" in found["nvlink.fabric"][0].summary


@pytest.mark.parametrize("probe", [True, False], ids=["nvml-probe", "nvidia-smi-xml"])
@pytest.mark.parametrize("fault, check, expected", [
    ("fabric_incomplete", "nvlink.fabric", [(Verdict.ERROR, i) for i in range(4)]),
    ("fabric_zero_uuid", "nvlink.fabric", [(Verdict.FAIL, i) for i in range(4)]),
    ("fabric_unhealthy", "nvlink.fabric", [(Verdict.FAIL, 2)]),
    ("recovery_reset", "gpu.recovery_action", [(Verdict.FAIL, 1)]),
    ("domain_split", "nvlink.fabric", [(Verdict.PASS, None)]),
])
def test_simulated_fabric_faults_read_the_same_from_either_source(probe, fault, check, expected):
    _, found = sim_tray(fault, probe=probe)
    assert [(f.verdict, f.gpu) for f in found[check]] == expected, found[check]
    if fault == "fabric_incomplete":
        assert "In Progress (3 h 0 min after boot)" in found[check][0].summary
    if fault == "fabric_unhealthy":
        assert "health Unhealthy; bandwidth Degraded" in found[check][0].summary
    if fault == "domain_split":
        assert "clique 32765" in found[check][0].summary


def test_simulated_tray_prints_the_v13_fabric_block_of_the_real_capture():
    ctx, _ = sim_tray()
    xml = ctx.results["nvidia_smi_xml"].text
    assert 'nvsmi_device_v13.dtd' in xml and "<c2c_mode>Enabled</c2c_mode>" in xml
    assert "<gpu_recovery_action>None</gpu_recovery_action>" in xml and "<peer_type>Switch Connected</peer_type>" in xml
    sim, real = parse_xml(xml).gpus[0], parse_xml(GB200).gpus[0]
    fields = ("fabric_state", "fabric_status", "fabric_health_summary", "fabric_bandwidth",
              "fabric_route_recovery_in_progress", "fabric_route_unhealthy", "fabric_access_timeout_recovery",
              "fabric_incorrect_configuration", "fabric_partition_assigned", "gpu_recovery_action", "c2c_mode")
    assert {f: getattr(sim, f) for f in fields} == {f: getattr(real, f) for f in fields}


def test_trays_of_one_rack_share_their_domain_and_other_racks_do_not():
    def ids(name: str, rack: str) -> set[tuple]:
        results = sim_results(NodeScenario(name, CATALOG.get("gb200-nvl72"), (), cluster="lab", rack=rack),
                              ["nvidia_smi_xml"])
        return {(g.fabric_cluster_uuid, g.fabric_clique_id) for g in parse_xml(results["nvidia_smi_xml"].text).gpus}

    assert ids("tray01", "r1") == ids("tray18", "r1") and len(ids("tray01", "r1")) == 1
    assert ids("tray19", "r2") != ids("tray01", "r1")


def test_hgx_output_is_unchanged_by_the_tray_simulation():
    results = sim_results(NodeScenario("n1", CATALOG.get("h100-sxm-8x"), ()), ["nvidia_smi_xml"])
    xml = results["nvidia_smi_xml"].text
    assert "nvsmi_device_v12.dtd" in xml and "c2c_mode" not in xml and "gpu_recovery_action" not in xml
    assert [f.verdict for f in run_check("nvlink.fabric", context(results, "h100-sxm-8x"))] == [Verdict.SKIP]


@pytest.mark.parametrize("check_id, words", [
    ("nvlink.fabric", ("nvmlDeviceGetGpuFabricInfoV", "PASS", "Completed", "Multi-Node Tuning Guide")),
    ("gpu.recovery_action", ("gpu_recovery_action", "PASS", "Drain and Reset", "nvmlGpuRecoveryAction_t")),
    ("nvlink.domain", ("clusterUuid + cliqueId", "PASS", "18", "Mission Control")),
])
def test_checks_show_documents_what_runs_pass_and_the_nvidia_remediation(check_id, words):
    from click.testing import CliRunner

    from nvdeploy.cli.app import cli

    out = CliRunner().invoke(cli, ["checks", "show", check_id])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert check_id in text and all(w in text for w in words), text


def test_the_probe_and_the_check_name_recovery_actions_alike():
    from nvdeploy.checks.nvlink_fabric import RECOVERY_ACTIONS as JUDGED
    from nvdeploy.collect.probe.nvml_probe import RECOVERY_ACTIONS as READ

    # nvmlGpuRecoveryAction_t 0-4, by NVIDIA's names: every one the probe can report is one the check knows.
    assert READ == {0: "None", 1: "Reset", 2: "Reboot", 3: "Drain P2P", 4: "Drain and Reset"}
    assert set(READ.values()) - {"None"} == set(JUDGED)


def test_clique_zero_on_an_otherwise_registered_gpu_fails_saying_why_and_how_to_waive():
    # NVIDIA's DRA driver accepts cliqueId 0 (a partition index); nvdeploy FAILs it: no registered GPU in a capture
    # has it, and it comes with failed registrations. The finding says so, and how to keep a real partition 0.
    xml = edit_gpu(GB200, 1, "<cliqueId>2</cliqueId>", "<cliqueId>0</cliqueId>")
    findings = on(xml)
    assert [(f.verdict, f.gpu) for f in findings] == [(Verdict.FAIL, 1)]
    assert "cliqueId 0 (seen only on registrations that failed" in findings[0].summary
    assert "waive nvlink.fabric" in findings[0].summary
