"""nvidia-smi topo -m / -mp parser against real captures (tests/fixtures/real/nvidia-smi-topo, see PROVENANCE.tsv)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from nvdeploy.parsers.topo import TopoFacts, parse_topo

TOPO_DIR = Path(__file__).parent.parent / "fixtures" / "real" / "nvidia-smi-topo"
GPUS8 = tuple(f"GPU{i}" for i in range(8))

# file -> gpus, the link type printed between every pair of distinct GPUs, and affinity of the first/last GPU.
EXPECT: dict[str, dict[str, Any]] = {
    "2gpu-NV2-nvlink-bridge.txt": {
        "gpus": ("GPU0", "GPU1"), "link": "NV2",
        "affinity": {"GPU1": {"CPU Affinity": "0-23", "NUMA Affinity": "N/A"}},
    },
    "2gpu-PHB-no-nvlink.txt": {
        "gpus": ("GPU0", "GPU1"), "link": "PHB",
        "affinity": {"GPU0": {"CPU Affinity": "0-11", "NUMA Affinity": "N/A"}},
    },
    "8xA100-sxm4-NV12-2numa-spaces.txt": {
        "gpus": GPUS8, "link": "NV12",
        "affinity": {"GPU0": {"CPU Affinity": "0-23", "NUMA Affinity": "0"},
                     "GPU7": {"CPU Affinity": "24-47", "NUMA Affinity": "1"}},
    },
    "8xH100-NV18-2numa-spaces.txt": {
        "gpus": GPUS8, "link": "NV18",
        "affinity": {"GPU3": {"CPU Affinity": "0-51", "NUMA Affinity": "0"},
                     "GPU4": {"CPU Affinity": "52-103", "NUMA Affinity": "1"}},
    },
    "h100-80gb-hbm3-single-gpu-ansi-590.48.01.txt": {
        "gpus": ("GPU0",), "link": None,
        "affinity": {"GPU0": {"CPU Affinity": "0-19", "NUMA Affinity": "0", "GPU NUMA ID": "N/A"}},
    },
    "rtx-pro-6000-blackwell-2gpu-topo-mp-PIX-spaces.txt": {
        "gpus": ("GPU0", "GPU1"), "link": "PIX",
        "affinity": {"GPU1": {"CPU Affinity": "0-47", "NUMA Affinity": "0", "GPU NUMA ID": "N/A"}},
    },
}

H100_WITH_NICS = (
    "\t\x1b[4mGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV18\tPXB\tSYS\t0-55,112-167\t0\t\tN/A\n"
    "GPU1\tNV18\t X \tSYS\tPXB\t56-111,168-223\t1\t\tN/A\n"
    "NIC0\tPXB\tSYS\t X \tSYS\t\t\t\t\n"
    "NIC1\tSYS\tPXB\tSYS\t X \n"
    "\nLegend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n\n"
    "NIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_bond_0\n\n"
)
OLD_DRIVER_MLX_COLUMNS = (
    "        GPU0    GPU1    mlx5_0  mlx5_bond_0     CPU Affinity\n"
    "GPU0     X      NV1     SYS     SYS     0-19\n"
    "GPU1    NV1      X      PHB     PHB     0-19\n"
    "mlx5_0  SYS     PHB      X      PIX\n"
    "mlx5_bond_0     SYS     PHB     PIX      X\n"
)


# Captures with NIC rows (8-12 NICs): GPUs, NIC columns, the NIC Legend's size, and cells that show the pairing.
NIC_EXPECT: dict[str, dict[str, Any]] = {
    "8xA100-SXM4-40GB-dgx-NIC0-9-legend-PXB-pairs-storage-NICs-525.105.17-tabs.txt": {
        "nics": 10, "legend": 10, "cells": {("GPU1", "NIC0"): "PXB", ("GPU0", "NIC8"): "SYS", ("NIC8", "NIC9"): "PIX"}},
    "8xA100-dgx-mlx5_0-11-columns-no-nic-legend-PXB-pairs-storage-PIX-pairs-tabs.txt": {
        "nics": 12, "legend": 0, "cells": {("GPU4", "mlx5_6"): "PXB", ("mlx5_11", "mlx5_10"): "PIX"}},
    "8xH100-topo-mp-NIC0-11-legend-gpu0-gpu4-three-PIX-nics-dell-tabs.txt": {
        "nics": 12, "legend": 12,
        "cells": {("GPU0", "NIC2"): "PIX", ("GPU0", "GPU1"): "NODE", ("GPU7", "NIC11"): "PIX"}},
    "8xHopper-NV18-NIC0-11-legend-single-numa-0-191-gpu3-NIC5-bond-nic-pairs-tabs.txt": {
        "nics": 12, "legend": 12,
        "cells": {("GPU3", "NIC5"): "PIX", ("GPU3", "NIC3"): "NODE", ("NIC3", "NIC4"): "PIX"}},
}


def test_every_fixture_has_expectations() -> None:
    assert sorted(p.name for p in TOPO_DIR.iterdir()) == sorted([*EXPECT, *NIC_EXPECT])


@pytest.mark.parametrize("name", sorted(NIC_EXPECT))
def test_real_topo_with_nics(name: str) -> None:
    expected = NIC_EXPECT[name]
    facts = parse_topo((TOPO_DIR / name).read_text(encoding="utf-8"))
    assert facts.warnings == ()
    assert facts.gpus == GPUS8 and len(facts.nics) == expected["nics"] and len(facts.nic_names) == expected["legend"]
    assert sorted(facts.matrix) == sorted((*facts.gpus, *facts.nics))
    for (row, column), cell in expected["cells"].items():
        assert facts.matrix[row][column] == cell and facts.matrix[column][row] == cell
    assert all(facts.matrix[d][d] == "X" for d in (*facts.gpus, *facts.nics))
    assert sorted(facts.affinity) == list(GPUS8)  # NIC rows have no affinity cells


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_real_topo(name: str) -> None:
    expected = EXPECT[name]
    facts = parse_topo((TOPO_DIR / name).read_text(encoding="utf-8"))
    assert facts.warnings == ()
    assert facts.gpus == expected["gpus"]
    assert facts.nics == ()
    assert sorted(facts.matrix) == sorted(expected["gpus"])
    for row in facts.gpus:
        assert facts.matrix[row][row] == "X"
        assert sorted(facts.matrix[row]) == sorted(facts.gpus)
        for column in facts.gpus:
            if column != row:
                assert facts.matrix[row][column] == expected["link"], (row, column)
    for row, cells in expected["affinity"].items():
        assert facts.affinity[row] == cells
    assert json.loads(json.dumps(facts.to_dict()))["gpus"] == list(expected["gpus"])


def test_tabs_nic_columns_and_nic_legend() -> None:
    facts = parse_topo(H100_WITH_NICS)
    assert facts.warnings == ()
    assert facts.gpus == ("GPU0", "GPU1")
    assert facts.nics == ("NIC0", "NIC1")
    assert facts.matrix["GPU0"] == {"GPU0": "X", "GPU1": "NV18", "NIC0": "PXB", "NIC1": "SYS"}
    assert facts.matrix["NIC1"] == {"GPU0": "SYS", "GPU1": "PXB", "NIC0": "SYS", "NIC1": "X"}
    assert facts.nic_names == {"NIC0": "mlx5_0", "NIC1": "mlx5_bond_0"}
    assert facts.affinity["GPU1"] == {"CPU Affinity": "56-111,168-223", "NUMA Affinity": "1", "GPU NUMA ID": "N/A"}
    assert "NIC0" not in facts.affinity


def test_old_driver_names_rdma_devices_directly() -> None:
    facts = parse_topo(OLD_DRIVER_MLX_COLUMNS)
    assert facts.gpus == ("GPU0", "GPU1")
    assert facts.nics == ("mlx5_0", "mlx5_bond_0")
    assert facts.matrix["GPU1"]["mlx5_0"] == "PHB"
    assert facts.matrix["mlx5_bond_0"] == {"GPU0": "SYS", "GPU1": "PHB", "mlx5_0": "PIX", "mlx5_bond_0": "X"}
    assert facts.warnings == ()
    assert facts.affinity["GPU0"] == {"CPU Affinity": "0-19"}


def test_prompt_and_crlf_around_matrix() -> None:
    text = "$ nvidia-smi topo -m\r\n" + (TOPO_DIR / "2gpu-NV2-nvlink-bridge.txt").read_text().replace("\n", "\r\n")
    facts = parse_topo(text)
    assert facts.matrix["GPU1"]["GPU0"] == "NV2"
    assert facts.warnings == ()


def test_truncated_matrix_warns_and_keeps_rows() -> None:
    text = (TOPO_DIR / "8xH100-NV18-2numa-spaces.txt").read_text()
    facts = parse_topo(text[: text.index("GPU5  NV18") + 20])
    assert facts.gpus == GPUS8
    assert facts.matrix["GPU4"]["GPU7"] == "NV18"
    assert len(facts.matrix["GPU5"]) < 8
    assert any("GPU5" in w for w in facts.warnings)
    assert any("GPU6, GPU7" in w for w in facts.warnings)


@pytest.mark.parametrize("text", ["", "   \n", "\x00\x00", "No devices were found\n", "garbage \ufffd\ufffd\n"])
def test_bad_input_gives_nothing_and_warns(text: str) -> None:
    facts = parse_topo(text)
    assert facts.gpus == () and facts.matrix == {}
    assert facts.warnings


def test_random_and_truncated_input_never_raises() -> None:
    rng = random.Random(7)
    texts = [p.read_text() for p in TOPO_DIR.iterdir()] + [H100_WITH_NICS, OLD_DRIVER_MLX_COLUMNS]
    for text in texts:
        for cut in range(0, len(text), 7):
            assert isinstance(parse_topo(text[:cut]), TopoFacts)
    for _ in range(200):
        blob = bytes(rng.randrange(256) for _ in range(rng.randrange(300))).decode("utf-8", errors="replace")
        assert isinstance(parse_topo(blob + "\nGPU0 X NV1\n"), TopoFacts)
