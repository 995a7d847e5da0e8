"""Simulated nodes: the fake tools print the real tools' formats, and each fault changes exactly what it should."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.sim.fake_tool import FAKE_TOOLS, install_fake_tools, main
from nvdeploy.sim.scenario import HGX_BUSES, KNOWN_FAULTS, NodeScenario, pci_buses, validate_fault
from nvdeploy.sim.tools import DRIVER_MISSING_MESSAGE, ToolOutput, run_tool

CATALOG = ProfileCatalog()
PROFILES = CATALOG.names()
XML = ("nvidia-smi", "-q", "-x")
H100_BUS_IDS = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0",
                "00000000:9A:00.0", "00000000:AB:00.0", "00000000:BA:00.0", "00000000:DB:00.0"]
XID_LINE = re.compile(r"^\[\s*\d+\.\d{6}\] NVRM: Xid \(PCI:(?P<pci>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2})\): "
                      r"(?P<xid>\d+), pid=(?:'<unknown>'|\d+), name=\S+, (?P<text>.+)$")


def node(*faults: str, profile: str = "h100-sxm-8x", name: str = "gpu-node-01", **kw: object) -> NodeScenario:
    return NodeScenario(name, CATALOG.get(profile), faults=faults, **kw)  # type: ignore[arg-type]


def run(scenario: NodeScenario, *argv: str) -> ToolOutput:
    return run_tool(scenario, list(argv))


def smi_root(scenario: NodeScenario) -> ET.Element:
    out = run(scenario, *XML)
    assert out.rc == 0 and out.stderr == b""
    return ET.fromstring(out.stdout)


def gpu_facts(root: ET.Element) -> list[dict[str, str]]:
    """The per-GPU values the checks look at, by XML path."""
    paths = ("product_name", "uuid", "serial", "persistence_mode", "mig_mode/current_mig", "pci/pci_bus_id",
             "pci/pci_device_id", "pci/pci_gpu_link_info/pcie_gen/max_link_gen",
             "pci/pci_gpu_link_info/pcie_gen/current_link_gen", "pci/pci_gpu_link_info/link_widths/max_link_width",
             "pci/pci_gpu_link_info/link_widths/current_link_width", "fb_memory_usage/total", "ecc_mode/current_ecc",
             "ecc_errors/volatile/dram_uncorrectable", "ecc_errors/aggregate/dram_uncorrectable",
             "remapped_rows/remapped_row_unc", "remapped_rows/remapped_row_pending",
             "remapped_rows/remapped_row_failure", "temperature/gpu_temp", "gpu_power_readings/current_power_limit",
             "gpu_power_readings/default_power_limit", "vbios_version",
             "clocks_event_reasons/clocks_event_reason_hw_thermal_slowdown")
    return [{p: (g.findtext(p) or "") for p in paths} for g in root.findall("gpu")]


def diff(healthy: list[dict[str, str]], faulty: list[dict[str, str]]) -> dict[tuple[int, str], str]:
    assert len(healthy) == len(faulty)
    return {(i, k): b[k] for i, (a, b) in enumerate(zip(healthy, faulty)) for k in a if a[k] != b[k]}


def xid_lines(scenario: NodeScenario) -> list[re.Match[str]]:
    text = run(scenario, "dmesg").stdout.decode()
    return [m for m in map(XID_LINE.match, text.splitlines()) if m]


HEALTHY = node()
HEALTHY_GPUS = gpu_facts(smi_root(HEALTHY))


# ------------------------------------------------------------------------------------------- healthy nodes

@pytest.mark.parametrize("name", PROFILES)
def test_xml_matches_every_builtin_profile(name: str) -> None:
    profile = CATALOG.get(name)
    out = run(node(profile=name), "sudo", "-n", "--", *XML)
    text = out.stdout.decode()
    # NVL72 trays print the DTD v13 of their R580 drivers (the fabric health, the recovery action).
    dtd = "v13" if profile.nvlink_domain is not None else "v12"
    assert text.startswith(f'<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_{dtd}.dtd">\n'
                           "<nvidia_smi_log>\n\t<timestamp>")
    assert text.endswith("\t</gpu>\n\n</nvidia_smi_log>\n")
    root = ET.fromstring(out.stdout)
    assert root.findtext("driver_version") == profile.sim["driver_version"]
    assert root.findtext("cuda_version") == profile.sim["cuda_version"]
    assert root.findtext("attached_gpus") == str(profile.gpu.count)
    gpus = root.findall("gpu")
    assert len(gpus) == profile.gpu.count
    pcie = profile.extra["pcie"]
    for gpu in gpus:
        assert gpu.findtext("product_name") == profile.gpu.model
        assert gpu.findtext("fb_memory_usage/total") == f"{profile.gpu.memory_mib} MiB"
        assert gpu.findtext("pci/pci_device_id") == f"{profile.gpu.pci_device_id.upper()}10DE"
        assert gpu.findtext("pci/pci_bus_id") == gpu.get("id")
        assert gpu.findtext("vbios_version") == profile.sim["vbios_version"]
        assert gpu.findtext("persistence_mode") == "Enabled"
        assert gpu.findtext("ecc_mode/current_ecc") == "Enabled"
        assert gpu.findtext("mig_mode/current_mig") in ("Disabled", "N/A")
        assert gpu.findtext("gpu_power_readings/current_power_limit") == f"{profile.gpu.power_limit_w:.2f} W"
        assert gpu.findtext("gpu_power_readings/default_power_limit") == f"{profile.gpu.power_limit_w:.2f} W"
        link = gpu.find("pci/pci_gpu_link_info")
        assert link is not None
        assert link.findtext("pcie_gen/max_link_gen") == link.findtext("pcie_gen/current_link_gen") == str(pcie["gen"])
        assert link.findtext("link_widths/max_link_width") == link.findtext("link_widths/current_link_width") \
            == f"{pcie['width']}x"
        assert 30 <= int(gpu.findtext("temperature/gpu_temp", "").split()[0]) <= 40
        assert gpu.findtext("remapped_rows/remapped_row_pending") == "No"
        assert gpu.findtext("ecc_errors/volatile/dram_uncorrectable") == "0"
        assert {r.text for r in gpu.findall("clocks_event_reasons/*")} == {"Not Active"}
    lspci = run(node(profile=name), "lspci", "-D", "-n", "-d", "10de:").stdout.decode().splitlines()
    gpu_lines = [ln for ln in lspci if " 0302: " in ln]
    assert gpu_lines == [f"{g.get('id', '')[4:].lower()} 0302: 10de:{profile.gpu.pci_device_id} (rev a1)"
                         for g in gpus]
    switches = [ln for ln in lspci if " 0680: " in ln]
    assert bool(switches) == profile.gpu.nvswitch
    assert not xid_lines(node(profile=name))


def test_h100_layout_and_identity() -> None:
    root = smi_root(HEALTHY)
    assert [g.get("id") for g in root.findall("gpu")] == H100_BUS_IDS
    uuids = [g["uuid"] for g in HEALTHY_GPUS]
    assert len(set(uuids)) == 8
    assert all(re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", u) for u in uuids)
    assert all(re.fullmatch(r"\d{13}", g["serial"]) for g in HEALTHY_GPUS)
    switches = [ln for ln in run(HEALTHY, "lspci").stdout.decode().splitlines() if " 0680: " in ln]
    assert switches == [f"0000:0{n}:00.0 0680: 10de:22a3 (rev a1)" for n in (5, 6, 7, 8)]


def test_pci_buses_for_other_counts() -> None:
    assert pci_buses(8) == HGX_BUSES
    assert pci_buses(4) == HGX_BUSES[:4]
    many = pci_buses(16)
    assert len(set(many)) == 16 and max(many) <= 0xFF


def test_determinism_per_node_name() -> None:
    for argv in (XML, ("lspci",), ("dmesg",), ("journalctl", "-k"), ("nvidia-smi", "-L")):
        assert run(node("xid13"), *argv) == run(node("xid13"), *argv)
    other = gpu_facts(smi_root(node(name="gpu-node-02")))
    assert not {g["uuid"] for g in other} & {g["uuid"] for g in HEALTHY_GPUS}
    assert [g["serial"] for g in other] != [g["serial"] for g in HEALTHY_GPUS]


def test_sku_and_cluster_driver() -> None:
    scenario = node(sku=CATALOG.get("a100-sxm-8x"))
    assert scenario.hardware.name == "a100-sxm-8x" and HEALTHY.hardware is HEALTHY.profile
    gpus = gpu_facts(smi_root(scenario))
    assert {g["product_name"] for g in gpus} == {"NVIDIA A100-SXM4-80GB"}
    assert {g["fb_memory_usage/total"] for g in gpus} == {"81920 MiB"}
    root = smi_root(node(cluster_driver="570.172.08"))
    assert (root.findtext("driver_version"), root.findtext("cuda_version")) == ("570.172.08", "12.8")


# ------------------------------------------------------------------------------------------------- faults

def test_validate_fault() -> None:
    for fault in sorted(KNOWN_FAULTS) + ["xid79", "xid48", "xid13", "xid119"]:
        assert validate_fault(fault) is None, fault
    for bad in ("xid", "xid0", "xid-1", "XID79", "xid7x", "ecc", ""):
        message = validate_fault(bad)
        assert message and repr(bad) in message
    with pytest.raises(ValueError, match="unknown fault"):
        node("nope")
    assert node("xid79", "persistence_off", "xid13").xids == (79, 13)
    assert node("xid79").has("xid79") and not node("xid79").has("xid13")


@pytest.mark.parametrize("fault", ["unreachable", "auth_fail", "nvlink_down"])
def test_transport_and_reserved_faults_leave_tools_alone(fault: str) -> None:
    for argv in (XML, ("lspci",), ("dmesg",)):
        assert run(node(fault), *argv) == run(HEALTHY, *argv)


def test_hang() -> None:
    for argv in (XML, ("lspci",), ("dmesg",), ("journalctl",), ("sudo", "-n", "--", "dmesg"), ("dcgmi", "diag")):
        assert run(node("hang"), *argv).hang


def test_driver_missing() -> None:
    scenario = node("driver_missing")
    for argv in (XML, ("nvidia-smi", "--query-gpu=index", "--format=csv"), ("nvidia-smi",)):
        out = run(scenario, *argv)
        assert (out.stdout, out.stderr, out.rc) == (DRIVER_MISSING_MESSAGE.encode(), b"", 9)
    assert DRIVER_MISSING_MESSAGE == ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
                                      " Make sure that the latest NVIDIA driver is installed and running.\n")
    assert run(scenario, "lspci") == run(HEALTHY, "lspci")
    assert "NVRM: loading" not in run(scenario, "dmesg").stdout.decode()


def test_driver_mismatch() -> None:
    root = smi_root(node("driver_mismatch"))
    assert (root.findtext("driver_version"), root.findtext("cuda_version")) == ("535.161.08", "12.2")
    assert diff(HEALTHY_GPUS, gpu_facts(root)) == {}
    assert "Kernel Module  535.161.08 " in run(node("driver_mismatch"), "dmesg").stdout.decode()


def test_gpu_missing() -> None:
    scenario = node("gpu_missing")
    root = smi_root(scenario)
    assert root.findtext("attached_gpus") == "7"
    assert gpu_facts(root) == HEALTHY_GPUS[:7]
    assert run(scenario, "lspci") == run(HEALTHY, "lspci")
    assert len(run(scenario, "nvidia-smi", "-L").stdout.splitlines()) == 7


@pytest.mark.parametrize("fault, expected, xid", [
    ("persistence_off", {(i, "persistence_mode"): "Disabled" for i in range(8)}, None),
    ("ecc_uncorrectable", {(3, "ecc_errors/volatile/dram_uncorrectable"): "2",
                           (3, "ecc_errors/aggregate/dram_uncorrectable"): "2"}, (3, 48)),
    ("row_remap_pending", {(2, "remapped_rows/remapped_row_pending"): "Yes",
                           (2, "remapped_rows/remapped_row_unc"): "1"}, (2, 63)),
    ("row_remap_failure", {(5, "remapped_rows/remapped_row_failure"): "Yes"}, (5, 64)),
    ("pcie_degraded", {(4, "pci/pci_gpu_link_info/link_widths/current_link_width"): "8x"}, None),
    ("thermal_throttle", {(6, "temperature/gpu_temp"): "91 C",
                          (6, "clocks_event_reasons/clocks_event_reason_hw_thermal_slowdown"): "Active"}, None),
    ("mig_enabled", {(i, "mig_mode/current_mig"): "Enabled" for i in range(8)}, None),
])
def test_gpu_faults_change_exactly_their_fields(fault: str, expected: dict, xid: tuple[int, int] | None) -> None:
    scenario = node(fault)
    assert diff(HEALTHY_GPUS, gpu_facts(smi_root(scenario))) == expected
    found = [(m.group("pci"), int(m.group("xid"))) for m in xid_lines(scenario)]
    if xid is None:
        assert found == []
    else:
        assert found == [(H100_BUS_IDS[xid[0]][4:-2].lower(), xid[1])]


@pytest.mark.parametrize("xid, text", [
    (79, "GPU has fallen off the bus."),
    (48, "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, "
         "subpartition 0."),
    (13, "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address"),
    (94, "Contained: SM (0x1). RST: No, D-RST: No"),
    (63, "Row Remapper: New row marked for remapping, reset gpu to activate."),
    (31, None), (43, None), (74, None), (95, None), (119, None), (45, None), (999, None),
])
def test_xid_faults(xid: int, text: str | None) -> None:
    scenario = node(f"xid{xid}")
    assert diff(HEALTHY_GPUS, gpu_facts(smi_root(scenario))) == {}
    lines = xid_lines(scenario)
    assert [(m.group("pci"), int(m.group("xid"))) for m in lines] == [("0000:2a:00", xid)]
    if text:
        assert lines[0].group("text") == text
    dmesg = run(scenario, "dmesg").stdout.decode()
    assert f"NVRM: GPU at PCI:0000:2a:00: {HEALTHY_GPUS[1]['uuid']}" in dmesg
    journal = run(scenario, "journalctl", "-k").stdout.decode().splitlines()
    assert all(re.match(r"^[A-Z][a-z]{2} \d{2} \d{2}:\d{2}:\d{2} gpu-node-01 kernel: ", ln) for ln in journal)
    assert [ln.split(" kernel: ", 1)[1] for ln in journal] == [ln.split("] ", 1)[1] for ln in dmesg.splitlines()]


def test_several_xids_in_fault_order() -> None:
    found = [int(m.group("xid")) for m in xid_lines(node("xid79", "ecc_uncorrectable", "xid13"))]
    assert found == [79, 48, 13]


# --------------------------------------------------------------------------------------- other invocations

def test_query_gpu_csv() -> None:
    fields = "index,name,uuid,pci.bus_id,driver_version,persistence_mode,ecc.mode.current,memory.total,power.limit"
    out = run(node("persistence_off"), "nvidia-smi", f"--query-gpu={fields}", "--format=csv")
    lines = out.stdout.decode().splitlines()
    assert lines[0] == ("index, name, uuid, pci.bus_id, driver_version, persistence_mode, ecc.mode.current, "
                        "memory.total [MiB], power.limit [W]")
    assert lines[1] == (f"0, NVIDIA H100 80GB HBM3, {HEALTHY_GPUS[0]['uuid']}, 00000000:18:00.0, 550.90.07, "
                        "Disabled, Enabled, 81559 MiB, 700.00 W")
    assert len(lines) == 9
    bare = run(HEALTHY, "nvidia-smi", "--query-gpu=index,memory.total,power.limit", "--format=csv,noheader,nounits")
    assert bare.stdout.decode().splitlines()[7] == "7, 81559, 700.00"
    bad = run(HEALTHY, "nvidia-smi", "--query-gpu=index,bogus", "--format=csv")
    assert bad.rc == 2 and b'"bogus" is not a valid field' in bad.stdout
    for argv in (("nvidia-smi", "--bogus"), ("nvidia-smi", "--query-gpu=index"), ("nvidia-smi", "-q")):
        out = run(HEALTHY, *argv)
        assert out.rc == 2 and out.stdout.startswith(b"Invalid combination of input arguments")


def test_list_unknown_tools_and_builtins() -> None:
    assert run(HEALTHY, "nvidia-smi", "-L").stdout.decode().splitlines()[0] == \
        f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {HEALTHY_GPUS[0]['uuid']})"
    assert run(HEALTHY, "/usr/bin/gpu_burn") == ToolOutput(b"", b"sh: 1: gpu_burn: not found\n", 127)
    assert run(HEALTHY, "sudo", "-n", "--", "true").rc == 0
    assert run(HEALTHY, "sudo", "-n", "lspci") == run(HEALTHY, "lspci")


def test_scenario_json_round_trip() -> None:
    scenario = node("xid79", "gpu_missing", sku=CATALOG.get("h200-8x"), cluster_driver="550.54.15")
    data = json.loads(scenario.to_json())
    assert data == {"name": "gpu-node-01", "profile": "h100-sxm-8x", "faults": ["xid79", "gpu_missing"],
                    "sku": "h200-8x", "cluster_driver": "550.54.15", "peers": []}
    assert NodeScenario.from_json(scenario.to_json(), CATALOG) == scenario
    assert NodeScenario.from_json(HEALTHY.to_json(), CATALOG) == HEALTHY
    with pytest.raises(ValueError):
        NodeScenario.from_json('{"name": "n", "profile": "h100-sxm-8x", "extra": 1}', CATALOG)
    with pytest.raises(ValueError):
        NodeScenario.from_json('{"name": "n", "profile": "h100-sxm-8x", "faults": ["bogus"]}', CATALOG)


# ----------------------------------------------------------------------------------- the real parsers read it

def test_parsers_read_sim_output() -> None:
    smi = pytest.importorskip("nvdeploy.parsers.nvidia_smi")
    kmsg = pytest.importorskip("nvdeploy.parsers.kmsg")
    lspci = pytest.importorskip("nvdeploy.parsers.lspci")
    scenario = node("ecc_uncorrectable", "row_remap_pending", "row_remap_failure", "persistence_off", "xid79",
                    "gpu_missing")
    facts = smi.parse_xml(run(scenario, *XML).stdout.decode())
    assert facts.warnings == () and facts.driver_version == "550.90.07" and facts.gpu_count_reported == 7
    assert len(facts.gpus) == 7 and [g.index for g in facts.gpus] == list(range(7))
    assert all(g.persistence_mode is False and g.ecc_mode is True for g in facts.gpus)
    assert [g.ecc_uncorrectable_volatile for g in facts.gpus] == [0, 0, 0, 2, 0, 0, 0]
    assert [g.remapped_rows_pending for g in facts.gpus] == [False, False, True, False, False, False, False]
    assert [g.remapped_rows_failure for g in facts.gpus] == [False] * 5 + [True, False]
    assert {(g.memory_total_mib, g.power_limit_w, g.pcie_gen_current, g.pcie_width_current, g.mig_mode)
            for g in facts.gpus} == {(81559, 700.0, 5, 16, False)}
    assert facts.gpus[0].pci_bus_id == "00000000:18:00.0"
    log = kmsg.parse_kmsg(run(scenario, "dmesg").stdout.decode())
    assert log.xid_counts == {"48": 1, "63": 1, "64": 1, "79": 1} and log.warnings == ()
    assert kmsg.parse_kmsg(run(scenario, "journalctl", "-k").stdout.decode()).xid_counts == log.xid_counts
    bus = lspci.parse_lspci(run(scenario, "lspci", "-D", "-n", "-d", "10de:").stdout.decode())
    assert len(bus.gpus) == 8 and len(bus.nvswitches) == 4 and bus.warnings == ()
    csv = smi.parse_csv(run(scenario, "nvidia-smi", "--query-gpu=index,name,uuid,pci.bus_id,persistence_mode,"
                            "ecc.mode.current,memory.total,power.limit", "--format=csv").stdout.decode())
    assert len(csv.gpus) == 7 and csv.gpus[3].memory_total_mib == 81559 and csv.gpus[0].persistence_mode is False
    missing = smi.parse_xml(run(node("driver_missing"), *XML).stdout.decode())
    assert missing.gpus == () and missing.warnings


# ---------------------------------------------------------------------------------------- fake_tool entry

def _env(scenario_file: Path, bin_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(NVD_SCENARIO_FILE=str(scenario_file), PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}")
    return env


def test_fake_tools_via_subprocess(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    paths = install_fake_tools(bin_dir)
    assert [p.name for p in paths] == list(FAKE_TOOLS) and all(os.access(p, os.X_OK) for p in paths)
    assert paths[0].read_text().startswith("#!/bin/sh\n")
    scenario_file = tmp_path / "node.json"
    scenario_file.write_text(node("row_remap_pending").to_json())
    env = _env(scenario_file, bin_dir)
    done = subprocess.run([str(bin_dir / "nvidia-smi"), "-q", "-x"], env=env, cwd=tmp_path, capture_output=True,
                          timeout=60)
    assert (done.returncode, done.stderr) == (0, b"")
    assert done.stdout == run(node("row_remap_pending"), *XML).stdout
    assert ET.fromstring(done.stdout).findall("gpu")[2].findtext("remapped_rows/remapped_row_pending") == "Yes"
    via_path = subprocess.run(["sh", "-c", "lspci -D -n -d 10de: && gpu_burn"], env=env, cwd=tmp_path,
                              capture_output=True, timeout=60)
    assert via_path.stdout == run(HEALTHY, "lspci").stdout
    assert (via_path.returncode, via_path.stderr) == (127, b"sh: 1: gpu_burn: not found\n")
    scenario_file.write_text(node("driver_missing").to_json())
    failed = subprocess.run([str(bin_dir / "nvidia-smi")], env=env, capture_output=True, timeout=60)
    assert (failed.returncode, failed.stdout) == (9, DRIVER_MISSING_MESSAGE.encode())


def test_fake_tool_hang_is_killable(tmp_path: Path) -> None:
    install_fake_tools(tmp_path / "bin")
    scenario_file = tmp_path / "node.json"
    scenario_file.write_text(node("hang").to_json())
    proc = subprocess.Popen([str(tmp_path / "bin" / "dmesg")], env=_env(scenario_file, tmp_path / "bin"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(1.5)
        assert proc.poll() is None
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) != 0


def test_main_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    scenario_file = tmp_path / "node.json"
    scenario_file.write_text(node("xid48").to_json())
    monkeypatch.setenv("NVD_SCENARIO_FILE", str(scenario_file))
    assert main(["/some/bin/dmesg", "-T"]) == 0
    assert b"NVRM: Xid (PCI:0000:2a:00): 48, " in capfdbinary.readouterr().out
    monkeypatch.setattr(sys, "argv", [str(Path(main.__code__.co_filename)), "/x/bin/nvidia-smi", "--nope"])
    assert main() == 2
    monkeypatch.delenv("NVD_SCENARIO_FILE")
    assert main(["lspci"]) == 2
    assert b"NVD_SCENARIO_FILE" in capfdbinary.readouterr().err


def test_fake_tools_read_a_json_copy_of_the_profile_only_while_its_yaml_is_unchanged(tmp_path):
    import os
    import shutil

    from nvdeploy.config.profiles import ProfileCatalog
    from nvdeploy.sim.fake_tool import CachedProfiles

    folder = tmp_path / "profiles"
    folder.mkdir()
    shutil.copy(ProfileCatalog().folders[0] / "h100-sxm-8x.yaml", folder / "h100-sxm-8x.yaml")
    catalog = ProfileCatalog([folder])
    node = tmp_path / "node"
    node.mkdir()
    first = CachedProfiles(catalog, node).get("h100-sxm-8x")
    assert first == catalog.get("h100-sxm-8x") and (node / ".nvd-profile-h100-sxm-8x.json").is_file()
    assert CachedProfiles(ProfileCatalog([folder]), node).get("h100-sxm-8x") == first  # from the copy
    source = folder / "h100-sxm-8x.yaml"
    source.write_text(source.read_text().replace("description: 8x NVIDIA", "description: 8x changed NVIDIA"))
    changed = CachedProfiles(ProfileCatalog([folder]), node).get("h100-sxm-8x")
    assert changed == ProfileCatalog([folder]).get("h100-sxm-8x") and changed != first
    # A folder the node user cannot write: the YAML is read each time, nothing fails (as root, as CI runs, the
    # folder stays writable and the copy is simply rewritten; the answer is the same either way).
    os.chmod(node, 0o500)
    try:
        assert CachedProfiles(ProfileCatalog([folder]), node).get("h100-sxm-8x") == changed
    finally:
        os.chmod(node, 0o700)
