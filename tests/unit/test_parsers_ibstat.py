"""ibstat / ibstatus / ibv_devinfo parser against real captures (tests/fixtures/real/ibstat, see PROVENANCE.tsv)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from nvdeploy.parsers.ibstat import UNNAMED_DEVICE, IbFacts, IbPort, parse_ibstat

IB_DIR = Path(__file__).parent.parent / "fixtures" / "real" / "ibstat"
ACTIVE_IB = {"state": "Active", "physical_state": "LinkUp", "link_layer": "InfiniBand"}
DOWN_ETH = {"state": "Down", "physical_state": "Disabled", "rate_gbps": 40.0, "link_layer": "Ethernet"}

# file -> device names in order, {device: {port: fields}}, fields every port has, device fields
EXPECT: dict[str, dict[str, Any]] = {
    "ibstat-connectx3-mt4099-fdr56-active.txt": {
        "names": ["mlx4_0"], "all": {**ACTIVE_IB, "rate_gbps": 56.0},
        "ports": {"mlx4_0": {1: {"base_lid": 1, "sm_lid": 1}}},
        "device": {"mlx4_0": {"ca_type": "MT4099", "firmware": "2.42.5000"}},
    },
    "ibstat-connectx4-state-initializing-no-subnet-manager-no-catype.txt": {
        "names": ["mlx5_0"], "all": {},
        "ports": {"mlx5_0": {1: {"state": "Initializing", "physical_state": "LinkUp", "rate_gbps": 100.0,
                                 "link_layer": "InfiniBand", "base_lid": 65535, "sm_lid": 0}}},
        "device": {"mlx5_0": {"ca_type": None, "firmware": "12.20.1010"}},
    },
    "ibstat-connectx6-mt4123-active-rate100.txt": {
        "names": ["mlx5_0"], "all": {**ACTIVE_IB, "rate_gbps": 100.0},
        "ports": {"mlx5_0": {1: {"base_lid": 762, "sm_lid": 8}}},
        "device": {"mlx5_0": {"ca_type": "MT4123", "firmware": "20.35.1012"}},
    },
    "ibstat-h100-node-12hca-ib-and-eth-3-down-disabled.txt": {
        "names": ["mlx5_0", "mlx5_1", "mlx5_10", "mlx5_11", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6",
                  "mlx5_7", "mlx5_8", "mlx5_9"], "all": {},
        "ports": {"mlx5_0": {1: {**ACTIVE_IB, "rate_gbps": 400.0}},
                  "mlx5_1": {1: {"state": "Active", "rate_gbps": 100.0, "link_layer": "Ethernet"}},
                  "mlx5_2": {1: DOWN_ETH}, "mlx5_7": {1: DOWN_ETH}, "mlx5_8": {1: DOWN_ETH},
                  "mlx5_9": {1: {**ACTIVE_IB, "rate_gbps": 400.0}}},
        "down": ["mlx5_2", "mlx5_7", "mlx5_8"],
    },
    "ibstat-h100-node-12hca-roce-2-down-polling-disabled.txt": {
        "names": ["mlx5_0", "mlx5_1", "mlx5_10", "mlx5_11", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6",
                  "mlx5_7", "mlx5_8", "mlx5_9"], "all": {"link_layer": "Ethernet"},
        "ports": {"mlx5_11": {1: {"state": "Down", "physical_state": "Polling", "rate_gbps": 40.0}},
                  "mlx5_5": {1: {"state": "Down", "physical_state": "Disabled", "rate_gbps": 40.0}},
                  "mlx5_0": {1: {"state": "Active", "rate_gbps": 400.0}},
                  "mlx5_1": {1: {"state": "Active", "rate_gbps": 100.0}}},
        "down": ["mlx5_11", "mlx5_5"],
    },
    "ibstat-h100-node-8x-ib-ndr400-plus-mlx5_bond_0-all-active.txt": {
        "names": ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9", "mlx5_bond_0"],
        "all": {"state": "Active", "physical_state": "LinkUp"},
        "ports": {"mlx5_0": {1: {"rate_gbps": 400.0, "link_layer": "InfiniBand"}},
                  "mlx5_bond_0": {1: {"rate_gbps": 200.0, "link_layer": "Ethernet"}}},
        "device": {"mlx5_bond_0": {"ca_type": "MT41692", "firmware": "32.38.3056"}},
    },
    "ibstatus-a100-azure-hdr200-all-active.txt": {
        "names": [f"mlx5_{i}" for i in range(9)], "all": {"state": "Active", "physical_state": "LinkUp"},
        "ports": {"mlx5_0": {1: {"rate_gbps": 200.0, "link_layer": "InfiniBand", "base_lid": 0x33BF, "sm_lid": 1}},
                  "mlx5_8": {1: {"rate_gbps": 40.0, "link_layer": "Ethernet", "base_lid": 0}}},
    },
    "ibv_devinfo-2x-connectx3-dual-port-port2-down.txt": {
        "names": ["mlx4_1", "mlx4_0"], "all": {"link_layer": "InfiniBand", "rate_gbps": None, "physical_state": None},
        "ports": {"mlx4_1": {1: {"state": "Active", "base_lid": 22, "sm_lid": 1}, 2: {"state": "Down", "sm_lid": 0}},
                  "mlx4_0": {1: {"state": "Active", "base_lid": 32, "sm_lid": 18}, 2: {"state": "Down"}}},
        "device": {"mlx4_0": {"ca_type": "MT4099", "firmware": "2.42.5000"}},
        "down": ["mlx4_1", "mlx4_0"],
    },
}


def test_every_fixture_has_expectations() -> None:
    assert sorted(p.name for p in IB_DIR.iterdir()) == sorted(EXPECT)


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_real_ibstat(name: str) -> None:
    expected = EXPECT[name]
    facts = parse_ibstat((IB_DIR / name).read_text(encoding="utf-8"))
    assert facts.warnings == ()
    assert [d.name for d in facts.devices] == expected["names"]
    devices = {d.name: d for d in facts.devices}
    for device in facts.devices:
        assert device.ports, device.name
        for port in device.ports:
            for key, value in expected["all"].items():
                assert getattr(port, key) == value, (device.name, port.port, key)
    for name_, ports in expected["ports"].items():
        by_number = {p.port: p for p in devices[name_].ports}
        for number, fields in ports.items():
            for key, value in fields.items():
                assert getattr(by_number[number], key) == value, (name_, number, key)
    for name_, fields in expected.get("device", {}).items():
        for key, value in fields.items():
            assert getattr(devices[name_], key) == value
    down = [d.name for d in facts.devices if any(p.state != "Active" and p.state != "Initializing" for p in d.ports)]
    assert down == expected.get("down", [])
    assert json.loads(json.dumps(facts.to_dict()))["devices"][0]["name"] == expected["names"][0]


IBV_DEVINFO_V = """hca_id:\tmlx5_0
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t28.39.1002
\tvendor_part_id:\t\t\t4129
\tphys_port_cnt:\t\t\t1
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_ACTIVE (4)
\t\t\tmax_mtu:\t\t4096 (5)
\t\t\tsm_lid:\t\t\t1
\t\t\tport_lid:\t\t77
\t\t\tactive_width:\t\t4X (2)
\t\t\tactive_speed:\t\t100.0 Gbps (128)
\t\t\tphys_state:\t\tLINK_UP (5)
\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:a088:c203:0049:1c5a
\t\t\tlink_layer:\t\tInfiniBand

hca_id:\tmlx5_1
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_INIT (2)
\t\t\tactive_width:\t\t1X (1)
\t\t\tactive_speed:\t\t25.0 Gbps (32)
\t\t\tphys_state:\t\tPOLLING (2)
\t\t\tlink_layer:\t\tEthernet
"""


def test_ibv_devinfo_verbose_rate_from_width_and_speed() -> None:
    facts = parse_ibstat(IBV_DEVINFO_V)
    assert facts.warnings == ()
    assert facts.devices[0].ca_type == "MT4129" and facts.devices[0].firmware == "28.39.1002"
    assert facts.devices[0].ports == (IbPort(1, "Active", "LinkUp", 400.0, "InfiniBand", 77, 1),)
    assert facts.devices[1].ports == (IbPort(1, "Initializing", "Polling", 25.0, "Ethernet"),)


def test_ibstatus_down_port_and_multi_port_ibstat() -> None:
    text = ("Infiniband device 'mlx5_3' port 1 status:\n\tstate:\t 1: DOWN\n\tphys state:\t 2: Polling\n"
            "\trate:\t 10 Gb/sec (4X)\n\tlink_layer:\t InfiniBand\n\n"
            "CA 'mlx4_0'\n\tCA type: MT4099\n\tPort 1:\n\t\tState: Active\n\t\tRate: 56\n"
            "\tPort 2:\n\t\tState: Armed\n\t\tPhysical state: LinkUp\n\t\tRate: 56\n")
    facts = parse_ibstat(text)
    assert facts.devices[0].ports == (IbPort(1, "Down", "Polling", 10.0, "InfiniBand"),)
    assert [(p.port, p.state) for p in facts.devices[1].ports] == [(1, "Active"), (2, "Armed")]


@pytest.mark.parametrize("text", ["", "\x00\x00", "ibstat: command not found\n", "\ufffd\ufffd\n"])
def test_bad_input_gives_no_devices_and_warns(text: str) -> None:
    facts = parse_ibstat(text)
    assert facts.devices == ()
    assert facts.warnings


def test_port_lines_before_any_device_are_a_pasted_piece() -> None:
    facts = parse_ibstat("Port 1:\n\tState: Down\n\tLink layer: InfiniBand\n")
    assert facts.fragment is True and facts.warnings
    assert [(d.name, [(p.port, p.state) for p in d.ports]) for d in facts.devices] == [(UNNAMED_DEVICE, [(1, "Down")])]
    assert parse_ibstat("CA 'mlx5_0'\n\tPort 1:\n\t\tState: Active\n").fragment is False


def test_device_without_ports_warns() -> None:
    facts = parse_ibstat("CA 'mlx5_0'\n\tCA type: MT4129\n")
    assert facts.devices[0].ports == () and any("mlx5_0" in w for w in facts.warnings)


def test_random_and_truncated_input_never_raises() -> None:
    rng = random.Random(9)
    texts = [p.read_text() for p in IB_DIR.iterdir()] + [IBV_DEVINFO_V]
    for text in texts:
        for cut in range(0, len(text), 13):
            assert isinstance(parse_ibstat(text[:cut]), IbFacts)
    for _ in range(300):
        seed = rng.choice(texts)
        cut = rng.randrange(len(seed))
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(40))).decode("utf-8", errors="replace")
        assert isinstance(parse_ibstat(seed[:cut] + junk + seed[cut:]), IbFacts)
    assert isinstance(parse_ibstat("CA 'x'\n Port 1:\n  Base lid: " + "9" * 5000 + "\n  Rate: 1e999\n"), IbFacts)
