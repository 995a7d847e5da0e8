"""lspci parser: numeric (-n), -nn and named output; GPUs vs NVSwitches vs other NVIDIA functions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvdeploy.parsers.lspci import LspciDevice, LspciFacts, parse_lspci

REAL = Path(__file__).parent.parent / "fixtures" / "real"

HGX_H100_NUMERIC = """\
0000:18:00.0 0302: 10de:2330 (rev a1)
0000:2a:00.0 0302: 10de:2330 (rev a1)
0000:3a:00.0 0302: 10de:2330 (rev a1)
0000:5d:00.0 0302: 10de:2330 (rev a1)
0000:9a:00.0 0302: 10de:2330 (rev a1)
0000:ab:00.0 0302: 10de:2330 (rev a1)
0000:ba:00.0 0302: 10de:2330 (rev a1)
0000:db:00.0 0302: 10de:2330 (rev a1)
0000:05:00.0 0680: 10de:22a3 (rev a1)
0000:06:00.0 0680: 10de:22a3 (rev a1)
0000:07:00.0 0680: 10de:22a3 (rev a1)
0000:08:00.0 0680: 10de:22a3 (rev a1)
"""

WORKSTATION_NAMED = """\
00:00.0 Host bridge: Intel Corporation Device 7a04 (rev 01)
00:01.0 PCI bridge: Intel Corporation Device 7a01 (rev 01)
01:00.0 VGA compatible controller: NVIDIA Corporation AD102 [GeForce RTX 4090] (rev a1)
01:00.1 Audio device: NVIDIA Corporation Device 22ba (rev a1)
02:00.0 3D controller: NVIDIA Corporation GA100 [A100 PCIe 80GB] (rev a1)
03:00.0 Ethernet controller: Mellanox Technologies MT2910 Family [ConnectX-7]
"""

NN_OUTPUT = """\
0000:18:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)
0000:05:00.0 Bridge [0680]: NVIDIA Corporation GH100 [H100 NVSwitch] [10de:22a3] (rev a1)
0000:19:00.0 Ethernet controller [0200]: Mellanox Technologies MT2910 Family [ConnectX-7] [15b3:1021]
0000:65:00.0 VGA compatible controller [0300]: ASPEED Technology, Inc. ASPEED Graphics Family [1a03:2000] (rev 52)
"""


def test_numeric_hgx() -> None:
    facts = parse_lspci(HGX_H100_NUMERIC)
    assert len(facts.gpus) == 8 and len(facts.nvswitches) == 4 and facts.other == ()
    assert facts.gpus[0] == LspciDevice("0000:18:00.0", "0302", "2330")
    assert {d.device_id for d in facts.nvswitches} == {"22a3"}
    assert facts.warnings == ()
    json.dumps(facts.to_dict())


def test_named_plain_lspci() -> None:
    facts = parse_lspci(WORKSTATION_NAMED)
    assert [(d.bus_id, d.class_code, d.device_id) for d in facts.gpus] == [
        ("0000:01:00.0", "0300", None),
        ("0000:02:00.0", "0302", None),
    ]
    assert facts.other == (LspciDevice("0000:01:00.1", "0403", "22ba"),)
    assert facts.nvswitches == ()


def test_nn_output_ignores_other_vendors() -> None:
    facts = parse_lspci(NN_OUTPUT)
    assert facts.gpus == (LspciDevice("0000:18:00.0", "0302", "2330"),)
    assert facts.nvswitches == (LspciDevice("0000:05:00.0", "0680", "22a3"),)
    assert facts.other == ()  # the ASPEED BMC VGA and the NIC are not NVIDIA


def test_named_bridge_is_nvswitch_but_pci_bridge_is_not() -> None:
    facts = parse_lspci(
        "0000:c5:00.0 Bridge: NVIDIA Corporation Device 22a3 (rev a1)\n"
        "0000:c6:00.0 PCI bridge: NVIDIA Corporation Device 1ad0 (rev a1)\n"
    )
    assert facts.nvswitches == (LspciDevice("0000:c5:00.0", "0680", "22a3"),)
    assert facts.other == (LspciDevice("0000:c6:00.0", "0604", "1ad0"),)


def test_audio_function_is_other() -> None:
    facts = parse_lspci("0000:01:00.0 0300: 10de:2684 (rev a1)\n0000:01:00.1 0403: 10de:22ba (rev a1)\n")
    assert [d.bus_id for d in facts.gpus] == ["0000:01:00.0"]
    assert [d.class_code for d in facts.other] == ["0403"]


def test_numeric_without_domain_and_class_prefix() -> None:
    facts = parse_lspci("3b:00.0 0302: 10de:20b5 (rev a1)\n3c:00.0 Class 0302: 10de:20b5 (rev a1)\n")
    assert [d.bus_id for d in facts.gpus] == ["0000:3b:00.0", "0000:3c:00.0"]


def test_verbose_detail_lines_and_duplicates_are_skipped() -> None:
    text = (
        "0000:18:00.0 3D controller: NVIDIA Corporation Device 2330 (rev a1)\n"
        "\tSubsystem: NVIDIA Corporation Device 16c1\n"
        "\tKernel driver in use: nvidia\n"
        "0000:18:00.0 3D controller: NVIDIA Corporation Device 2330 (rev a1)\n"
    )
    facts = parse_lspci(text)
    assert facts.gpus == (LspciDevice("0000:18:00.0", "0302", "2330"),)


BAD = {
    "empty": "",
    "blank": "\n   \n",
    "garbage": "lorem ipsum\nfoo bar baz\n",
    "nul": "\x00\x00\x00",
    "invalid-utf8": b"\xff\xfe\x80 NVIDIA \xc3".decode("utf-8", errors="replace"),
    "error": "pcilib: Cannot open /proc/bus/pci\nlspci: Cannot find any working access method.\n",
    "not-found": "bash: lspci: command not found\n",
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_warns(name: str) -> None:
    facts = parse_lspci(BAD[name])
    assert isinstance(facts, LspciFacts)
    assert facts.gpus == () and facts.nvswitches == ()
    assert facts.warnings


def test_nul_inside_line_is_removed() -> None:
    facts = parse_lspci("0000:18:00.0 0302:\x00 10de:2330 (rev a1)\n")
    assert facts.gpus == (LspciDevice("0000:18:00.0", "0302", "2330"),)
    assert any("NUL" in w for w in facts.warnings)


def test_unknown_nvidia_line_warns() -> None:
    facts = parse_lspci("something NVIDIA something\n")
    assert facts.gpus == () and any("not understood" in w for w in facts.warnings)


@pytest.mark.parametrize("path", sorted(p for p in REAL.rglob("*") if p.is_file()), ids=lambda p: p.name)
def test_other_tools_output_never_raises(path: Path) -> None:
    facts = parse_lspci(path.read_bytes().decode("utf-8", errors="replace"))
    assert isinstance(facts, LspciFacts)


def test_truncated_never_raises() -> None:
    for i in range(len(HGX_H100_NUMERIC) + 1):
        assert isinstance(parse_lspci(HGX_H100_NUMERIC[:i]), LspciFacts)
