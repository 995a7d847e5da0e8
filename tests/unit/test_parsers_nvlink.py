"""nvidia-smi nvlink -s parser against real captures (tests/fixtures/real/nvidia-smi-nvlink, see PROVENANCE.tsv)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from nvdeploy.parsers.nvlink import NvlinkFacts, NvlinkLink, parse_nvlink

NVLINK_DIR = Path(__file__).parent.parent / "fixtures" / "real" / "nvidia-smi-nvlink"

# file -> supported, GPU indices, name, links per GPU, speed of every link, first GPU's uuid and message
EXPECT: dict[str, dict[str, Any]] = {
    "a100-sxm4-80gb-8gpu-nvlink-status-12links-25GBs.txt": {
        "supported": True, "indices": list(range(8)), "name": "NVIDIA A100-SXM4-80GB", "links": 12, "speed": 25.0,
        "uuid": "GPU-5269b708-678a-b1a8-60f0-c90406537486", "message": None,
    },
    "a100-sxm4-80gb-gpu7-12links-good.txt": {
        "supported": True, "indices": [7], "name": "NVIDIA A100-SXM4-80GB", "links": 12, "speed": 25.0,
        "uuid": "GPU-c7e253b0-c227-6f10-e860-7482c85e7ce8", "message": None,
    },
    "b300-sxm6-ac-18links-610.57.04.txt": {
        "supported": True, "indices": list(range(7)), "name": "NVIDIA B300 SXM6 AC", "links": 18, "speed": 53.125,
        "uuid": "GPU-bce5282f-d716-d136-5759-b7181a7a55df", "message": None,
    },
    "h100-80gb-hbm3-18links-590.48.01.txt": {
        "supported": True, "indices": [0], "name": "NVIDIA H100 80GB HBM3", "links": 18, "speed": 26.562,
        "uuid": "GPU-00000000-0000-0000-0000-000000000000", "message": None,
    },
    "h100-mig-mode-not-supported-590.48.01.txt": {
        "supported": False, "indices": [0], "name": "NVIDIA H100 80GB HBM3", "links": 0, "speed": None,
        "uuid": "GPU-00000000-0000-0000-0000-000000000000",
        "message": "Nvlink queries are not supported for Devices in MIG mode",
    },
    "l40s-no-nvlink-595.80.txt": {
        "supported": False, "indices": [0], "name": "NVIDIA L40S", "links": 0, "speed": None,
        "uuid": "GPU-00000000-0000-0000-0000-000000000000", "message": "Device does not have or support Nvlink",
    },
}


def test_every_fixture_has_expectations() -> None:
    assert sorted(p.name for p in NVLINK_DIR.iterdir()) == sorted(EXPECT)


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_real_nvlink(name: str) -> None:
    expected = EXPECT[name]
    facts = parse_nvlink((NVLINK_DIR / name).read_text(encoding="utf-8"))
    assert facts.warnings == ()
    assert facts.supported is expected["supported"]
    assert [g.index for g in facts.gpus] == expected["indices"]
    assert facts.gpus[0].uuid == expected["uuid"]
    assert facts.gpus[0].message == expected["message"]
    for gpu in facts.gpus:
        assert gpu.name == expected["name"]
        assert [link.link for link in gpu.links] == list(range(expected["links"]))
        assert all(link.active and link.speed_gbps == expected["speed"] for link in gpu.links)
    assert json.loads(json.dumps(facts.to_dict()))["supported"] is expected["supported"]


def test_inactive_links_and_mixed_gpus() -> None:
    text = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)\n\t Link 0: 26.562 GB/s\n\t Link 1: <inactive>\n"
            "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-bbbb)\n"
            "NVML: Unable to retrieve NVLink information as all links are inActive\n")
    facts = parse_nvlink(text)
    assert facts.supported is True and facts.warnings == ()
    assert facts.gpus[0].links == (NvlinkLink(0, True, 26.562), NvlinkLink(1, False, None))
    assert facts.gpus[1].links == ()
    assert facts.gpus[1].message is not None and "all links are inActive" in facts.gpus[1].message


def test_all_links_inactive_message_means_not_supported() -> None:
    facts = parse_nvlink("GPU 0: NVIDIA L40S (UUID: GPU-x)\n"
                         "NVML: Unable to retrieve NVLink information as all links are inActive\n")
    assert facts.supported is False
    assert facts.gpus[0].message == "NVML: Unable to retrieve NVLink information as all links are inActive"


def test_gpu_lines_without_anything_else_mean_no_nvlink() -> None:
    facts = parse_nvlink("GPU 0: NVIDIA L40S (UUID: GPU-1)\nGPU 1: NVIDIA L40S (UUID: GPU-2)\n")
    assert facts.supported is False
    assert [g.index for g in facts.gpus] == [0, 1] and facts.gpus[1].uuid == "GPU-2"


def test_other_units_and_unreadable_values() -> None:
    facts = parse_nvlink("GPU 3: X (UUID: GPU-3)\n Link 0: 500 MB/s\n Link 1: ???\n")
    assert facts.gpus[0].links[0] == NvlinkLink(0, True, 0.5)
    assert facts.gpus[0].links[1] == NvlinkLink(1, False, None)
    assert any("Link 1" in w for w in facts.warnings)


def test_link_lines_without_gpu_header() -> None:
    facts = parse_nvlink("\t Link 0: 25 GB/s\n")
    assert facts.supported is True
    assert facts.gpus[0].index == -1 and facts.gpus[0].links == (NvlinkLink(0, True, 25.0),)
    assert facts.warnings


@pytest.mark.parametrize("text", ["", "\n\n", "\x00", "Failed to initialize NVML: Driver/library version mismatch\n",
                                  "\ufffd\ufffd random\n"])
def test_bad_input_is_unknown_with_warning(text: str) -> None:
    facts = parse_nvlink(text)
    assert facts.supported is None and facts.gpus == ()
    assert facts.warnings


def test_random_and_truncated_input_never_raises() -> None:
    rng = random.Random(3)
    for path in NVLINK_DIR.iterdir():
        text = path.read_text()
        for cut in range(0, len(text), 5):
            assert isinstance(parse_nvlink(text[:cut]), NvlinkFacts)
    for _ in range(200):
        blob = bytes(rng.randrange(256) for _ in range(rng.randrange(300))).decode("utf-8", errors="replace")
        assert isinstance(parse_nvlink("GPU 0: " + blob + "\n Link 1: " + blob), NvlinkFacts)
