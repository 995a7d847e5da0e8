"""firmware.*: the inventory parsed from real captures (nvidia-smi -q -x of three DTD generations and -q text,
ibstat and ibv_devinfo), the version order, and both checks on hand-made facts."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvdeploy.checks.firmware import compare_versions, firmware_minimum, label
from nvdeploy.checks.firmware_consistency import MUST_MATCH_FACT, evaluate_firmware
from nvdeploy.checks.registry import NodeContext
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.parsers.firmware import FirmwareFacts, FirmwareItem, gpu_firmware, node_firmware, parse_dmi
from nvdeploy.parsers.ibstat import parse_ibstat
from nvdeploy.results import NodeResult, Verdict

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"


def _read(name: str) -> str:
    return (REAL / name).read_text(encoding="utf-8")


def _by(items):
    return {(i.component, i.unit): i.version for i in items}


def test_xml_v13_gb200_every_gpu():
    items = _by(gpu_firmware(_read("nvidia-smi-xml/gb200-4gpu-fabric-platforminfo-c2c-v13-580.173.02.xml")))
    assert items[("gpu.vbios", "GPU 3")] == "97.00.B9.00.69"
    assert items[("gpu.inforom_image", "GPU 0")] == "G548.0201.00.06"
    assert items[("gpu.inforom_oem", "GPU 1")] == "2.1" and items[("gpu.inforom_ecc", "GPU 2")] == "7.16"
    assert items[("gpu.gsp", "GPU 0")] == "580.173.02"
    assert ("gpu.inforom_pwr", "GPU 0") not in items  # N/A is left out, never a version
    assert len({u for _c, u in items}) == 4


def test_xml_v12_a100_and_the_418_schema():
    a100 = _by(gpu_firmware(_read("nvidia-smi-xml/a100-sxm4-80gb-mig-v12-535.54.03.xml")))
    assert a100[("gpu.vbios", "GPU 0")] == "92.00.36.00.02" and a100[("gpu.inforom_ecc", "GPU 0")] == "6.16"
    assert a100[("gpu.gsp", "GPU 0")] == "535.54.03"
    p400 = _by(gpu_firmware(_read("nvidia-smi-xml/quadro-p400-no-doctype-418.43.xml")))
    assert p400 == {("gpu.vbios", "GPU 0"): "86.07.3B.00.4A", ("gpu.inforom_image", "GPU 0"): "G212.0500.00.01",
                    ("gpu.inforom_oem", "GPU 0"): "1.1"}


def test_q_text_8x_h100():
    items = gpu_firmware(_read("nvidia-smi-text/h100-8gpu-hgx-q-535.161.08.txt"))
    by = _by(items)
    assert {i.gpu for i in items} == set(range(8))
    assert by[("gpu.vbios", "GPU 7")] == "96.00.74.00.0D" and by[("gpu.inforom_image", "GPU 4")] == "G520.0200.00.05"
    assert by[("gpu.gsp", "GPU 2")] == "535.161.08" and ("gpu.inforom_pwr", "GPU 0") not in by


def test_connectx_firmware_per_ca_type():
    ib = parse_ibstat(_read("ibstat/ibstat-h100-node-8x-ib-ndr400-plus-mlx5_bond_0-all-active.txt"))
    items = node_firmware(None, ib, None).items
    seven = [i for i in items if i.component == "nic.firmware[MT4129]"]
    assert len(seven) == 8 and {i.version for i in seven} == {"28.41.1000"}
    assert _by(items)[("nic.firmware[MT41692]", "mlx5_bond_0")] == "32.38.3056"
    devinfo = node_firmware(None, parse_ibstat(_read("ibstat/ibv_devinfo-2x-connectx3-dual-port-port2-down.txt")),
                            None)
    assert {i.version for i in devinfo.items} == {"2.42.5000"} and len(devinfo.items) == 2
    no_type = node_firmware(None, parse_ibstat(
        _read("ibstat/ibstat-connectx4-state-initializing-no-subnet-manager-no-catype.txt")), None)
    assert [i.version for i in no_type.items] == ["12.20.1010"]


def test_dmi_markers_and_placeholders():
    facts = parse_dmi("\n== /sys/class/dmi/id/bios_version\n2.1\n\n== /sys/class/dmi/id/bios_date\n03/20/2024\n"
                      "\n== /sys/class/dmi/id/board_name\nDefault string\n")
    assert _by(facts.items) == {("system.bios_version", ""): "2.1", ("system.bios_date", ""): "03/20/2024"}
    assert parse_dmi("").items == () and parse_dmi(b"\x00garbage").items == ()


def test_bmc_firmware_from_the_ipmi_drivers_file():
    """The kernel prints the Get Device ID's firmware revision as "%u.%x"; a node without an IPMI interface (a VM,
    ipmi_si not loaded) has no marker for it, only find's complaint on stderr, and no BMC component."""
    facts = parse_dmi("\n== /sys/class/dmi/id/bios_version\n2.1\n"
                      "\n== /sys/class/ipmi/ipmi0/device/bmc/firmware_revision\n3.8\n")
    assert _by(facts.items) == {("system.bios_version", ""): "2.1", ("system.bmc_firmware", ""): "3.8"}
    assert ("system.bmc_firmware", "") not in _by(parse_dmi("\n== /sys/class/dmi/id/bios_version\n2.1\n").items)


@pytest.mark.parametrize("component,a,b,want", [
    ("gpu.vbios", "96.00.74.00.0D", "96.00.74.00.1C", -1),
    ("gpu.vbios", "96.00.B9.00.01", "96.00.74.00.01", 1),
    ("nic.firmware[MT4129]", "28.39.1002", "28.41.1000", -1),
    ("nic.firmware", "28.41.1000", "28.41.1000", 0),
    ("system.bios_date", "03/20/2024", "11/15/2023", 1),
    ("system.bios_version", "2.1", "2.1.1", -1),
])
def test_version_order(component, a, b, want):
    assert compare_versions(component, a, b) == want


def test_label():
    assert label("nic.firmware[MT4129]") == "ConnectX firmware (MT4129)" and label("gpu.vbios") == "VBIOS"


def _ctx(items, minimum=None):
    profile = ProfileCatalog().get("h100-sxm-8x")
    if minimum is not None:
        profile = type(profile)(**{**profile.__dict__, "extra": {**profile.extra, "firmware": {"minimum": minimum}}})
    return NodeContext("n1", {}, profile, {}, {"firmware": FirmwareFacts(tuple(items))})


ITEMS = (FirmwareItem("gpu.vbios", "GPU 0", "96.00.74.00.1C", 0),
         FirmwareItem("gpu.vbios", "GPU 1", "96.00.61.00.01", 1),
         FirmwareItem("nic.firmware[MT4129]", "mlx5_0", "28.41.1000"))


def test_minimum_fail_names_the_part_and_the_source():
    (finding,) = firmware_minimum(_ctx(ITEMS, {"gpu.vbios": {"version": "96.00.74.00.01", "source": "vendor KB"}}))
    assert finding.verdict is Verdict.FAIL and finding.gpu == 1
    assert "GPU 1 96.00.61.00.01" in finding.summary and "vendor KB" in finding.summary


def test_minimum_pass_error_and_skip():
    ok = firmware_minimum(_ctx(ITEMS, {"nic.firmware": {"version": "28.39.1002", "source": "s"}}))
    assert [f.verdict for f in ok] == [Verdict.PASS]
    missing = firmware_minimum(_ctx(ITEMS, {"system.bios_version": {"version": "2.0", "source": "s"}}))
    assert [f.verdict for f in missing] == [Verdict.ERROR]  # a minimum on what was not read is never PASS
    assert [f.verdict for f in firmware_minimum(_ctx(ITEMS))] == [Verdict.SKIP]


def _node(name, vbios, bios="2.1", must=None):
    facts = {"firmware": {"gpu.vbios": {f"GPU {i}": v for i, v in enumerate(vbios)}, "system.bios_version": {"": bios}}}
    if must:
        facts[MUST_MATCH_FACT] = must
    return NodeResult(name, (), profile="p@1", facts=facts)


def test_consistency_names_the_odd_gpu_and_folds_hosts():
    nodes = [_node(f"n{i:02d}", ["A"] * 4) for i in range(1, 7)]
    nodes[2] = _node("n03", ["A", "A", "B", "A"])
    nodes[4] = _node("n05", ["A"] * 4, bios="1.9")
    nodes[5] = _node("n06", ["A"] * 4, bios="1.9")
    updated, cluster = evaluate_firmware(nodes)
    named = {n.name: n.findings for n in updated if n.findings}
    assert set(named) == {"n03", "n05", "n06"}
    (odd_gpu,) = named["n03"]
    assert odd_gpu.verdict is Verdict.WARN and odd_gpu.gpu == 2 and "GPU 2 VBIOS B" in odd_gpu.summary
    bios = next(f for f in cluster if "system BIOS" in f.summary)
    assert "n[05-06]: 1.9" in bios.summary


def test_consistency_must_match_fails_and_a_tie_is_said_once_naming_no_node():
    updated, _ = evaluate_firmware([_node("a", ["A"], must=["gpu.vbios"]), _node("b", ["A"], must=["gpu.vbios"]),
                                    _node("c", ["B"], must=["gpu.vbios"])])
    assert [f.verdict for n in updated for f in n.findings] == [Verdict.FAIL]
    tie, cluster = evaluate_firmware([_node("a", ["A"]), _node("b", ["B"])])
    # two nodes, one version each: neither is the odd one, so neither gets a finding; the cluster says it
    assert not any(n.findings for n in tie) and "no majority" in cluster[0].summary
    assert cluster[0].verdict is Verdict.WARN and "a: A" in cluster[0].summary and "b: B" in cluster[0].summary
    alone, none = evaluate_firmware([_node("a", ["A"])])
    assert not none and not alone[0].findings
