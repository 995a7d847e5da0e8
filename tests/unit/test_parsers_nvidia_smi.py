"""nvidia-smi parsers against real captured output (tests/fixtures/real, see PROVENANCE.tsv) and hostile input."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from nvdeploy.parsers.nvidia_smi import GpuFacts, SmiFacts, parse_csv, parse_text, parse_version, parse_xml

REAL = Path(__file__).parent.parent / "fixtures" / "real"
XML_DIR = REAL / "nvidia-smi-xml"
TEXT_DIR = REAL / "nvidia-smi-text"
CSV_DIR = REAL / "nvidia-smi-csv"

H100_8_BUS = ["00000000:19:00.0", "00000000:3B:00.0", "00000000:4C:00.0", "00000000:5D:00.0",
              "00000000:9B:00.0", "00000000:BB:00.0", "00000000:CB:00.0", "00000000:DB:00.0"]

# file -> expected facts. "top": SmiFacts fields; "n": number of GPUs; "all": fields every GPU has;
# "gpu": {position: fields}. Every fixture file must have an entry (see test_every_fixture_has_expectations).
XML_EXPECT: dict[str, dict[str, Any]] = {
    "a100-sxm4-80gb-mig-v12-535.54.03.xml": {
        "top": {"driver_version": "535.54.03", "cuda_version": "12.2", "gpu_count_reported": 4}, "n": 1,
        "gpu": {0: {"index": None, "name": "NVIDIA A100-SXM4-80GB", "pci_bus_id": "00000000:01:00.0",
                    "uuid": "GPU-513536b6-7d19-9063-b049-1e69664bb298", "serial": "1650522003820",
                    "mig_mode": True, "ecc_mode": True, "persistence_mode": False,
                    "ecc_uncorrectable_volatile": 0, "ecc_uncorrectable_aggregate": 0,
                    "remapped_rows_pending": None, "retired_pages_pending": None, "retired_pages_double_bit": None,
                    "memory_total_mib": 81920, "power_limit_w": 500.0, "default_power_limit_w": 500.0,
                    "pcie_gen_current": 4, "pcie_width_current": 16, "temperature_c": 27.0,
                    "clocks_event_reasons_active": ()}},
        "warn": "4 attached GPU(s) but 1 GPU section",
    },
    "a10g-v11-515.105.01.xml": {
        "top": {"driver_version": "515.105.01", "cuda_version": "11.7", "gpu_count_reported": 1}, "n": 1,
        "gpu": {0: {"index": 0, "name": "NVIDIA A10G", "pci_bus_id": "00000000:00:1E.0", "ecc_mode": True,
                    "ecc_uncorrectable_volatile": 0, "remapped_rows_pending": False, "remapped_rows_failure": False,
                    "remapped_rows_uncorrectable": 0, "pcie_gen_current": 1, "pcie_gen_max": 4,
                    "pcie_width_current": 8, "pcie_width_max": 16, "memory_total_mib": 23028, "power_limit_w": 300.0,
                    "mig_mode": None, "clocks_event_reasons_active": ("gpu_idle",)}},
    },
    "dual-rtx-a5000-v13-590.44.01.xml": {
        "top": {"driver_version": "590.44.01", "cuda_version": "13.1", "gpu_count_reported": 2}, "n": 2,
        "all": {"name": "NVIDIA RTX A5000", "persistence_mode": True, "ecc_mode": False,
                "ecc_uncorrectable_volatile": None, "remapped_rows_pending": False, "power_limit_w": 230.0,
                "memory_total_mib": 24564, "clocks_event_reasons_active": ("gpu_idle",)},
        "gpu": {0: {"index": 0, "pci_bus_id": "00000000:81:00.0"}, 1: {"index": 1, "pci_bus_id": "00000000:C1:00.0"}},
    },
    # Grace-Blackwell v13: the per-GPU fabric, platformInfo, C2C and recovery-action elements become facts;
    # N/A stays None.
    "gb200-4gpu-fabric-platforminfo-c2c-v13-580.173.02.xml": {
        "top": {"driver_version": "580.173.02", "cuda_version": "13.0", "gpu_count_reported": 4}, "n": 4,
        "all": {"name": "NVIDIA GB200", "power_limit_w": 1200.0, "fabric_state": "Completed",
                "fabric_status": "Success", "fabric_clique_id": 2,
                "fabric_cluster_uuid": "00000001-0000-0000-0000-000000000001", "fabric_health_summary": "Healthy",
                "fabric_bandwidth": "Full", "fabric_route_recovery_in_progress": False,
                "fabric_route_unhealthy": False, "fabric_access_timeout_recovery": False,
                "fabric_incorrect_configuration": None, "fabric_partition_assigned": None,
                "gpu_recovery_action": "None", "chassis_serial": "1820000000001", "slot_number": 14,
                "tray_index": 4, "c2c_mode": True},
        "gpu": {0: {"index": 0, "pci_bus_id": "00000000:29:00.0", "module_id": 2},
                1: {"module_id": 1}, 2: {"module_id": 4}, 3: {"index": 3, "module_id": 3}},
    },
    "gb300-4gpu-fabric-platforminfo-v13-580.173.02.xml": {
        "top": {"driver_version": "580.173.02", "cuda_version": "13.0", "gpu_count_reported": 4}, "n": 4,
        "all": {"name": "NVIDIA GB300", "fabric_state": "Completed", "fabric_clique_id": 32766,
                "fabric_health_summary": "Healthy", "fabric_incorrect_configuration": "None",
                "fabric_partition_assigned": None, "slot_number": 25, "tray_index": 15, "c2c_mode": True},
        "gpu": {0: {"pci_bus_id": "00000008:06:00.0", "module_id": 2}},
    },
    "gtx-1660-ti-graphics-device-name-418.43-no-doctype.xml": {
        "top": {"driver_version": "418.43", "cuda_version": "10.1", "gpu_count_reported": 1}, "n": 1,
        "gpu": {0: {"name": "Graphics Device", "ecc_mode": None, "ecc_uncorrectable_volatile": None, "mig_mode": None,
                    "remapped_rows_pending": None, "power_limit_w": 130.0, "memory_total_mib": 5912}},
    },
    "quadro-p400-no-doctype-418.43.xml": {
        "top": {"driver_version": "418.43", "cuda_version": "10.1", "gpu_count_reported": 1}, "n": 1,
        "gpu": {0: {"name": "Quadro P400", "pci_bus_id": "00000000:43:00.0", "persistence_mode": False,
                    "power_limit_w": None, "memory_total_mib": 1998, "pcie_gen_current": 1, "pcie_gen_max": 3,
                    "retired_pages_pending": None, "clocks_event_reasons_active": ("gpu_idle",)}},
    },
    "rtx-2080-windows-wddm-v11-516.59.xml": {
        "top": {"driver_version": "516.59", "cuda_version": "11.7", "gpu_count_reported": 1}, "n": 1,
        "gpu": {0: {"name": "NVIDIA GeForce RTX 2080", "persistence_mode": None, "power_limit_w": 275.0,
                    "default_power_limit_w": 275.0, "memory_total_mib": 8192, "ecc_mode": None}},
    },
    "rtx-4090-v12-535.86.05.xml": {
        "top": {"driver_version": "535.86.05", "cuda_version": "12.2", "gpu_count_reported": 1}, "n": 1,
        "gpu": {0: {"name": "NVIDIA GeForce RTX 4090", "ecc_mode": False, "ecc_uncorrectable_volatile": None,
                    "remapped_rows_pending": False, "persistence_mode": True, "power_limit_w": 450.0}},
    },
    "tesla-p100-pcie-16gb-v11-510.47.03.xml": {
        "top": {"driver_version": "510.47.03", "cuda_version": "11.6", "gpu_count_reported": 1}, "n": 1,
        # aggregate single-bit device_memory is 3: correctable, so it must not leak into the uncorrectable sums
        "gpu": {0: {"name": "Tesla P100-PCIE-16GB", "ecc_mode": True, "ecc_uncorrectable_volatile": 0,
                    "ecc_uncorrectable_aggregate": 0, "retired_pages_pending": False, "retired_pages_double_bit": 0,
                    "remapped_rows_pending": None, "memory_total_mib": 16384, "power_limit_w": 250.0}},
    },
    "tesla-t4-v11-515.105.01.xml": {
        "top": {"driver_version": "515.105.01", "cuda_version": "11.7", "gpu_count_reported": 1}, "n": 1,
        "gpu": {0: {"name": "Tesla T4", "retired_pages_double_bit": 0, "retired_pages_pending": False,
                    "power_limit_w": 70.0, "memory_total_mib": 15360, "clocks_event_reasons_active": ()}},
    },
}

TEXT_EXPECT: dict[str, dict[str, Any]] = {
    "a10-q-535.129.03.txt": {
        "top": {"driver_version": "535.129.03", "cuda_version": "12.2", "gpu_count_reported": 1}, "n": 1,
        # PROVENANCE calls this capture healthy, but it shows 4 uncorrectable remapped rows with a remap pending
        "gpu": {0: {"index": 0, "name": "NVIDIA A10", "pci_bus_id": "00000000:07:00.0", "remapped_rows_pending": True,
                    "remapped_rows_uncorrectable": 4, "remapped_rows_failure": False, "ecc_mode": True,
                    "ecc_uncorrectable_volatile": 0, "memory_total_mib": 23028, "power_limit_w": 150.0}},
    },
    # R610: the table header says "KMD Version: ... CUDA UMD Version: ...".
    "default-table-2xB200-kmd-cuda-umd-header-610.43.02-EXCERPT.txt": {
        "top": {"driver_version": "610.43.02", "cuda_version": "13.3", "gpu_count_reported": 2}, "n": 2,
        "all": {"name": "NVIDIA B200", "persistence_mode": True, "power_limit_w": 1000.0,
                "memory_total_mib": 183359, "ecc_uncorrectable_volatile": 0, "mig_mode": False},
        "gpu": {0: {"index": 0, "pci_bus_id": "00000000:63:00.0", "temperature_c": 26.0},
                1: {"index": 1, "pci_bus_id": "00000000:68:00.0", "temperature_c": 30.0}},
    },
    # HGX B300 (7 of its GPUs visible), the R610 header; one GPU per row group, domain 0001 on the second half.
    "b300-sxm6-ac-7gpu-default-table-r610-610.57.04.txt": {
        "top": {"driver_version": "610.57.04", "cuda_version": "13.3", "gpu_count_reported": 7}, "n": 7,
        "all": {"name": "NVIDIA B300 SXM6 AC", "persistence_mode": True, "power_limit_w": 1100.0,
                "memory_total_mib": 275040, "ecc_uncorrectable_volatile": 0, "mig_mode": False},
        "gpu": {0: {"index": 0, "pci_bus_id": "00000000:1A:00.0", "temperature_c": 28.0},
                6: {"index": 6, "pci_bus_id": "00000001:DB:00.0", "temperature_c": 38.0}},
    },
    "default-table-rtx5070-kmd-cuda-umd-header-610.43.02-EXCERPT.txt": {
        "top": {"driver_version": "610.43.02", "cuda_version": "13.3", "gpu_count_reported": 1}, "n": 1,
        "gpu": {0: {"index": 0, "persistence_mode": False, "power_limit_w": 70.0, "memory_total_mib": 12227,
                    "ecc_uncorrectable_volatile": None}},
        "warn": "name truncated",
    },
    # Windows (R610+ header): the first cell ends with the Driver-Model (WDDM), not Persistence-M, which Windows
    # does not have: read, persistence mode unknown and not shown.
    "default-table-windows-wddm-driver-model-rtx5060-616.92-kmd-umd-header.txt": {
        "top": {"driver_version": "616.92", "cuda_version": "13.4", "gpu_count_reported": 1}, "n": 1,
        "gpu": {0: {"index": 0, "persistence_mode": None, "pci_bus_id": "00000000:01:00.0", "power_limit_w": 65.0,
                    "memory_total_mib": 8151, "temperature_c": 64.0, "ecc_uncorrectable_volatile": None,
                    "shown": ("name", "pci_bus_id", "ecc_uncorrectable_volatile", "temperature_c", "power_limit_w",
                              "memory_total_mib", "mig_mode")}},
        "warn": "Driver-Model WDDM",
    },
    # R610 -q: the deprecated lines carry a note, KMD/CUDA UMD Version are preferred, the limits sit one level
    # deeper under "GPU Ceiling Power Limit".
    "q-h200-kmd-version-power-ceiling-610.43.02-RECONSTRUCTED.txt": {
        "top": {"driver_version": "610.43.02", "cuda_version": "13.3", "gpu_count_reported": 1}, "n": 1,
        "gpu": {0: {"index": 0, "name": "NVIDIA H200", "pci_bus_id": "00000000:83:00.0", "power_limit_w": 700.0,
                    "default_power_limit_w": 700.0}},
        "warn": "excerpt",
    },
    "a100-8gpu-page-retirement-clean-535.86.10.txt": {
        "top": {"driver_version": "535.86.10", "cuda_version": "12.2", "gpu_count_reported": 8}, "n": 8,
        "all": {"name": None, "retired_pages_double_bit": 0, "retired_pages_pending": False,
                "ecc_uncorrectable_volatile": None, "remapped_rows_pending": None},
        "gpu": {0: {"index": 0, "pci_bus_id": "00000001:00:00.0"}, 7: {"index": 7, "pci_bus_id": "00000008:00:00.0"}},
    },
    "a100-sxm4-80gb-xid63-remapped-rows-pending-excerpt-510.73.08.txt": {
        "top": {"driver_version": "510.73.08", "cuda_version": "11.6", "gpu_count_reported": 8}, "n": 1,
        "gpu": {0: {"index": None, "name": "NVIDIA A100-SXM4-80GB", "pci_bus_id": "00000000:10:1C.0",
                    "remapped_rows_pending": True, "remapped_rows_failure": False, "remapped_rows_uncorrectable": 0,
                    "ecc_uncorrectable_volatile": 0, "ecc_uncorrectable_aggregate": 0,
                    "retired_pages_double_bit": None, "memory_total_mib": None, "ecc_mode": None}},
        "warn": "excerpt",
    },
    "default-table-8xH100-550.90.07.txt": {
        "top": {"driver_version": "550.90.07", "cuda_version": "12.4", "gpu_count_reported": 8}, "n": 8,
        "all": {"name": "NVIDIA H100 80GB HBM3", "persistence_mode": True, "memory_total_mib": 81559,
                "power_limit_w": 700.0, "mig_mode": False, "ecc_uncorrectable_volatile": 0},
        "gpu": {i: {"index": i, "pci_bus_id": bus} for i, bus in enumerate(H100_8_BUS)},
    },
    "default-table-rtx4090-ERR-fan-525.125.06-old-layout.txt": {
        "top": {"driver_version": "525.125.06", "cuda_version": "12.0", "gpu_count_reported": 1}, "n": 1,
        "gpu": {0: {"index": 0, "name": "NVIDIA GeForce ...", "persistence_mode": False, "memory_total_mib": 23028,
                    "temperature_c": 38.0, "power_limit_w": 450.0, "pci_bus_id": "00000000:01:00.0", "mig_mode": None}},
        "warn": "truncated",
    },
    "ecc-sram-uncorrectable-volatile1-aggregate5-excerpt.txt": {
        "top": {"driver_version": None, "cuda_version": None, "gpu_count_reported": None}, "n": 1,
        "gpu": {0: {"ecc_uncorrectable_volatile": 1, "ecc_uncorrectable_aggregate": 5, "name": None,
                    "pci_bus_id": None, "index": None}},
        "warn": "header",
    },
    "h100-80gb-hbm3-idle-590.48.01.txt": {
        "top": {"driver_version": "590.48.01", "cuda_version": "13.1", "gpu_count_reported": 1}, "n": 1,
        "gpu": {0: {"index": 0, "name": "NVIDIA H100 80GB HBM3", "pci_bus_id": "00000000:00:09.0",
                    "persistence_mode": True, "ecc_mode": True, "ecc_uncorrectable_volatile": 0,
                    "remapped_rows_pending": False, "retired_pages_double_bit": None, "pcie_gen_current": 5,
                    "pcie_gen_max": 5, "pcie_width_current": 16, "pcie_width_max": 16, "memory_total_mib": 81559,
                    "temperature_c": 41.0, "power_limit_w": 700.0, "default_power_limit_w": 700.0, "mig_mode": False,
                    "clocks_event_reasons_active": ("gpu_idle",)}},
    },
    "h100-8gpu-hgx-q-535.161.08.txt": {
        "top": {"driver_version": "535.161.08", "cuda_version": "12.2", "gpu_count_reported": 8}, "n": 8,
        # labelled healthy, yet every GPU reports HW Slowdown and HW Power Brake Slowdown active
        "all": {"name": "NVIDIA H100 80GB HBM3", "ecc_uncorrectable_volatile": 0, "remapped_rows_pending": False,
                "clocks_event_reasons_active": ("hw_slowdown", "hw_power_brake_slowdown"), "power_limit_w": 700.0},
        "gpu": {i: {"index": i, "pci_bus_id": bus} for i, bus in enumerate(H100_8_BUS)},
    },
    "h200-mig-default-table-590.48.01.txt": {
        "top": {"driver_version": "590.48.01", "cuda_version": "13.1", "gpu_count_reported": 1}, "n": 1,
        "gpu": {0: {"index": 0, "name": "NVIDIA H200", "mig_mode": True, "memory_total_mib": 143771,
                    "persistence_mode": True, "ecc_uncorrectable_volatile": None, "pci_bus_id": "00000000:83:00.0"}},
    },
    "h200-mig-enabled-idle-590.48.01.txt": {
        "top": {"driver_version": "590.48.01", "cuda_version": "13.1", "gpu_count_reported": 1}, "n": 1,
        "gpu": {0: {"name": "NVIDIA H200", "mig_mode": True, "memory_total_mib": 143771,
                    "ecc_uncorrectable_volatile": 0,
                    "remapped_rows_pending": None, "power_limit_w": 700.0}},
    },
    "l40s-load-595.80.txt": {
        "top": {"driver_version": "595.80", "cuda_version": "13.2", "gpu_count_reported": 1}, "n": 1,
        "gpu": {0: {"name": "NVIDIA L40S", "persistence_mode": False, "ecc_mode": True, "remapped_rows_pending": False,
                    "memory_total_mib": 46068, "power_limit_w": 350.0, "clocks_event_reasons_active": ()}},
    },
    "rtx4090-8gpu-q-535.154.05.txt": {
        "top": {"driver_version": "535.154.05", "cuda_version": "12.2", "gpu_count_reported": 8}, "n": 8,
        "all": {"name": "NVIDIA GeForce RTX 4090", "ecc_mode": False, "ecc_uncorrectable_volatile": None,
                "remapped_rows_pending": False, "power_limit_w": 450.0},
        "gpu": {0: {"index": 0, "pci_bus_id": "00000000:01:00.0"}, 1: {"index": 1, "pci_bus_id": "00000000:21:00.0"}},
    },
}

CSV_EXPECT: dict[str, dict[str, Any]] = {
    "h100-80gb-hbm3-query-gpu-all-fields-load-590.48.01.csv": {
        "top": {"driver_version": "590.48.01", "gpu_count_reported": 1}, "n": 1,
        "gpu": {0: {"index": 0, "name": "NVIDIA H100 80GB HBM3", "pci_bus_id": "00000000:00:09.0",
                    "persistence_mode": True, "ecc_mode": True, "ecc_uncorrectable_volatile": 0,
                    "remapped_rows_pending": False, "retired_pages_pending": None, "memory_total_mib": 81559,
                    "power_limit_w": 700.0, "default_power_limit_w": 700.0, "pcie_gen_current": 5,
                    "pcie_width_max": 16, "temperature_c": 59.0, "mig_mode": False,
                    "clocks_event_reasons_active": ()}},
    },
    "h100-query-retired-pages-empty-590.48.01.csv": {
        "top": {"driver_version": None}, "n": 1,
        "gpu": {0: {"name": "NVIDIA H100 80GB HBM3", "pci_bus_id": "00000000:00:09.0",
                    "retired_pages_double_bit": None}},
    },
    "h200-mig-query-gpu-all-fields-idle-590.48.01.csv": {
        "top": {"driver_version": "590.48.01", "gpu_count_reported": 1}, "n": 1,
        "gpu": {0: {"name": "NVIDIA H200", "mig_mode": True, "memory_total_mib": 143771, "remapped_rows_pending": None,
                    "clocks_event_reasons_active": ("gpu_idle",)}},
    },
    "rtx-pro-6000-blackwell-2gpu-power-ecc-units-in-values-570.172.08.csv": {
        "top": {"driver_version": None, "gpu_count_reported": None}, "n": 2,
        "all": {"name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "power_limit_w": 600.0,
                "ecc_uncorrectable_volatile": 0, "temperature_c": 25.0},
        "gpu": {0: {"index": 0}, 1: {"index": 1}},
    },
    # No ECC: [N/A] mode, DRAM and totals, 0 only for the SRAM parity/SEC-DED counts. Unknown, never 0.
    "rtx4090-no-ecc-query-gpu-ecc-na-sram-zero-RECONSTRUCTED.csv": {
        "top": {"driver_version": None}, "n": 1,
        "gpu": {0: {"index": 0, "name": "NVIDIA GeForce RTX 4090", "ecc_mode": None,
                    "ecc_uncorrectable_volatile": None, "ecc_uncorrectable_aggregate": None}},
    },
    "tesla-p100-pcie-16gb-query-gpu-510.47.03.csv": {
        "top": {"driver_version": None}, "n": 1,
        "gpu": {0: {"index": None, "name": "Tesla P100-PCIE-16GB", "uuid": "GPU-ef1b2c9b-38d8-2090-2bd1-f567a3eb42a6",
                    "temperature_c": 37.0, "memory_total_mib": None}},
    },
}

CASES = [(XML_DIR, parse_xml, XML_EXPECT), (TEXT_DIR, parse_text, TEXT_EXPECT), (CSV_DIR, parse_csv, CSV_EXPECT)]
FIXTURES = [
    pytest.param(d / name, fn, exp, id=f"{d.name}/{name}") for d, fn, table in CASES for name, exp in table.items()
]
ALL_FILES = sorted(p for d, _, _ in CASES for p in d.iterdir() if p.is_file())


def _read(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="replace")


def _check(facts: SmiFacts, expected: dict[str, Any]) -> None:
    for key, value in expected.get("top", {}).items():
        assert getattr(facts, key) == value, key
    assert len(facts.gpus) == expected["n"]
    for gpu in facts.gpus:
        for key, value in expected.get("all", {}).items():
            assert getattr(gpu, key) == value, (gpu.index, key)
    for pos, fields in expected.get("gpu", {}).items():
        for key, value in fields.items():
            assert getattr(facts.gpus[pos], key) == value, (pos, key)
    if "warn" in expected:
        assert any(expected["warn"] in w for w in facts.warnings), facts.warnings


@pytest.mark.parametrize("directory,table", [(d, t) for d, _, t in CASES], ids=lambda v: getattr(v, "name", ""))
def test_every_fixture_has_expectations(directory: Path, table: dict[str, Any]) -> None:
    assert sorted(p.name for p in directory.iterdir()) == sorted(table)


@pytest.mark.parametrize("path,parse,expected", FIXTURES)
def test_real_fixture_facts(path: Path, parse: Any, expected: dict[str, Any]) -> None:
    facts = parse(_read(path))
    assert facts.format == ("xml" if parse is parse_xml else "csv" if parse is parse_csv else "text")
    _check(facts, expected)
    json.dumps(facts.to_dict())  # plain, serialisable


@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
@pytest.mark.parametrize("parse", [parse_xml, parse_text, parse_csv])
def test_any_parser_on_any_fixture_never_raises(path: Path, parse: Any) -> None:
    facts = parse(_read(path))
    assert isinstance(facts, SmiFacts)
    assert all(isinstance(g, GpuFacts) for g in facts.gpus)


def test_to_dict_shapes() -> None:
    facts = parse_xml(_read(XML_DIR / "dual-rtx-a5000-v13-590.44.01.xml"))
    d = facts.to_dict()
    assert d["format"] == "xml" and d["driver_version"] == "590.44.01"
    assert isinstance(d["gpus"], list) and len(d["gpus"]) == 2
    assert d["gpus"][0]["clocks_event_reasons_active"] == ["gpu_idle"]
    assert isinstance(d["warnings"], list)


# ------------------------------------------------------------------------------------------- hostile input

ERRORS = [
    (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
        "NVIDIA driver is installed and running.\n\n"
    ),
    "No devices were found\n",
    "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 550.54\n",
]


@pytest.mark.parametrize("parse", [parse_xml, parse_text, parse_csv])
@pytest.mark.parametrize("message", ERRORS, ids=["no-driver", "no-devices", "nvml-mismatch"])
def test_nvidia_smi_error_messages(parse: Any, message: str) -> None:
    facts = parse(message)
    assert facts.gpus == ()
    first = message.splitlines()[0]
    assert any(first[:40] in w for w in facts.warnings), facts.warnings


BAD = {
    "empty": "",
    "blank": "   \n\n\t\n",
    "garbage": "lorem ipsum dolor\n\tsit amet : consectetur\n<<<>>>",
    "nul": "\x00\x00GPU 00000000:18:00.0\x00\n    Product Name : X\x00",
    "invalid-utf8": b"\xff\xfe\xfa<nvidia_smi_log>\x80\x81 Driver Version : 1\xc3".decode("utf-8", errors="replace"),
    "binary": bytes(range(256)).decode("latin-1"),
    "traceback": 'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\nValueError: boom\n',
    "xml-garbage": "<nvidia_smi_log><gpu id='x'><product_name>a</product_name></gpu",
    "not-nvsmi-xml": "<?xml version='1.0'?><html><body>hi</body></html>",
}


@pytest.mark.parametrize("parse", [parse_xml, parse_text, parse_csv])
@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_gives_no_gpus_and_a_warning(parse: Any, name: str) -> None:
    facts = parse(BAD[name])
    assert isinstance(facts, SmiFacts)
    assert facts.warnings, name
    if name != "nul" or parse is not parse_text:
        assert facts.gpus == ()


def test_nul_bytes_are_removed_and_reported() -> None:
    facts = parse_text(BAD["nul"])
    assert any("NUL" in w for w in facts.warnings)
    assert facts.gpus[0].pci_bus_id == "00000000:18:00.0" and facts.gpus[0].name == "X"


def test_invalid_utf8_is_reported() -> None:
    assert any("undecodable" in w for w in parse_text(BAD["invalid-utf8"]).warnings)


@pytest.mark.parametrize("name", sorted(p.name for p in XML_DIR.iterdir()))
@pytest.mark.parametrize("fraction", [0.05, 0.5, 0.97])
def test_truncated_xml(name: str, fraction: float) -> None:
    text = _read(XML_DIR / name)
    facts = parse_xml(text[: int(len(text) * fraction)])
    assert facts.gpus == ()
    assert any("truncated" in w for w in facts.warnings)


def test_truncated_xml_keeps_complete_header_fields() -> None:
    text = _read(XML_DIR / "tesla-t4-v11-515.105.01.xml")
    facts = parse_xml(text[: len(text) // 2])
    assert facts.driver_version == "515.105.01" and facts.gpu_count_reported == 1 and facts.gpus == ()


def test_xml_without_doctype_and_with_doctype_agree() -> None:
    text = _read(XML_DIR / "tesla-t4-v11-515.105.01.xml")
    stripped = "\n".join(ln for ln in text.splitlines() if not ln.startswith("<!DOCTYPE"))
    assert parse_xml(text).gpus == parse_xml(stripped).gpus


@pytest.mark.parametrize("doc", [
    (
        '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]>'
        "<nvidia_smi_log><driver_version>&e;</driver_version></nvidia_smi_log>"
    ),
    (
        '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
        '<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">]><nvidia_smi_log><driver_version>&c;</driver_version>'
        "</nvidia_smi_log>"
    ),
])
def test_xml_entities_are_never_expanded(doc: str) -> None:
    facts = parse_xml(doc)
    assert facts.driver_version is None
    assert facts.warnings


def test_xml_gpu_count_mismatch_leaves_index_unset() -> None:
    facts = parse_xml(_read(XML_DIR / "a100-sxm4-80gb-mig-v12-535.54.03.xml"))
    assert facts.gpu_count_reported == 4 and [g.index for g in facts.gpus] == [None]


def test_xml_old_double_bit_schema_and_active_reasons() -> None:
    doc = """<nvidia_smi_log><driver_version>470.1</driver_version><attached_gpus>1</attached_gpus>
    <gpu id="00000000:3B:00.0"><product_name>Tesla V100</product_name>
    <ecc_errors><volatile><single_bit><total>9</total></single_bit>
    <double_bit><device_memory>2</device_memory><register_file>1</register_file><total>3</total></double_bit></volatile>
    <aggregate><double_bit><device_memory>4</device_memory><l2_cache>N/A</l2_cache><total>N/A</total></double_bit>
    </aggregate></ecc_errors>
    <clocks_throttle_reasons><clocks_throttle_reason_hw_slowdown>Active</clocks_throttle_reason_hw_slowdown>
    <clocks_throttle_reason_sw_thermal_slowdown>Active</clocks_throttle_reason_sw_thermal_slowdown>
    <clocks_throttle_reason_gpu_idle>Not Active</clocks_throttle_reason_gpu_idle></clocks_throttle_reasons>
    </gpu></nvidia_smi_log>"""
    gpu = parse_xml(doc).gpus[0]
    assert gpu.ecc_uncorrectable_volatile == 3  # the double_bit total, single-bit ignored
    assert gpu.ecc_uncorrectable_aggregate == 4  # total N/A -> sum of the readable components
    assert gpu.clocks_event_reasons_active == ("hw_slowdown", "sw_thermal_slowdown")
    assert gpu.index == 0


def test_xml_v13_sram_parity_and_secded_are_summed() -> None:
    doc = """<nvidia_smi_log><gpu id="00000000:01:00.0"><ecc_errors><volatile>
    <sram_correctable>7</sram_correctable><sram_uncorrectable_parity>1</sram_uncorrectable_parity>
    <sram_uncorrectable_secded>2</sram_uncorrectable_secded><dram_correctable>5</dram_correctable>
    <dram_uncorrectable>4</dram_uncorrectable></volatile></ecc_errors></gpu></nvidia_smi_log>"""
    assert parse_xml(doc).gpus[0].ecc_uncorrectable_volatile == 7


def test_text_alert_lines_become_warnings() -> None:
    text = _read(TEXT_DIR / "a10-q-535.129.03.txt")
    text = "WARNING: infoROM is corrupted at gpu 0000:07:00.0\n" + text
    facts = parse_text(text)
    assert any("infoROM is corrupted" in w for w in facts.warnings)
    assert len(facts.gpus) == 1 and facts.gpus[0].name == "NVIDIA A10"


def test_text_old_throttle_labels_map_to_xml_names() -> None:
    text = """Driver Version : 418.1
Attached GPUs : 1
GPU 00000000:01:00.0
    Clocks Throttle Reasons
        Idle                        : Active
        Display Clock Setting       : Active
        HW Slowdown                 : Not Active
    ECC Errors
        Volatile
            Double Bit
                Device Memory       : 1
                Total               : 1
"""
    gpu = parse_text(text).gpus[0]
    assert gpu.clocks_event_reasons_active == ("gpu_idle", "display_clocks_setting")
    assert gpu.ecc_uncorrectable_volatile == 1


def test_csv_without_header_warns() -> None:
    facts = parse_csv("0, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 81559\n"
                      "1, NVIDIA H100 80GB HBM3, 00000000:2A:00.0, 81559\n")
    assert facts.gpus == ()
    assert any("header" in w for w in facts.warnings)


def test_csv_nounits_and_na_values() -> None:
    text = ("index, name, pci.bus_id, driver_version, persistence_mode, ecc.mode.current, "
            "ecc.errors.uncorrected.volatile.total, memory.total [MiB], temperature.gpu, power.limit [W], "
            "pcie.link.gen.current, pcie.link.gen.max, pcie.link.width.current, pcie.link.width.max, "
            "mig.mode.current, uuid, serial, enforced.power.limit [W], power.default_limit [W]\n"
            "0, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 550.54.15, Enabled, Enabled, 2, 81559, 31, [N/A], "
            "4, 5, 8, 16, [Not Supported], GPU-abc, 1652, 650.00, 700.00\n")
    gpu = parse_csv(text).gpus[0]
    assert parse_csv(text).driver_version == "550.54.15"
    assert (gpu.index, gpu.ecc_uncorrectable_volatile, gpu.memory_total_mib, gpu.temperature_c) == (0, 2, 81559, 31.0)
    assert gpu.power_limit_w == 650.0  # power.limit N/A -> enforced limit
    assert gpu.default_power_limit_w == 700.0
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max, gpu.pcie_width_current, gpu.pcie_width_max) == (4, 5, 8, 16)
    assert gpu.mig_mode is None and gpu.persistence_mode is True and gpu.serial == "1652"


def test_csv_reason_bitmask_fallback() -> None:
    text = "index, clocks_event_reasons.active\n0, 0x0000000000000048\n"
    assert parse_csv(text).gpus[0].clocks_event_reasons_active == ("hw_slowdown", "hw_thermal_slowdown")


def test_text_table_stops_at_mig_and_process_tables() -> None:
    facts = parse_text(_read(TEXT_DIR / "h200-mig-default-table-590.48.01.txt"))
    assert [g.index for g in facts.gpus] == [0]


def test_random_bytes_never_raise() -> None:
    rng = random.Random(1234)
    seeds = [_read(p) for p in ALL_FILES]
    for _ in range(150):
        base = rng.choice(seeds)
        start = rng.randrange(len(base))
        chunk = list(base[start:start + rng.randrange(1, 4000)])
        for _ in range(rng.randrange(0, 20)):
            if chunk:
                chunk[rng.randrange(len(chunk))] = chr(rng.randrange(0, 0x2FF))
        text = "".join(chunk)
        for parse in (parse_xml, parse_text, parse_csv):
            assert isinstance(parse(text), SmiFacts)


VERSION_DIR = REAL / "nvidia-smi-version"


def test_version_output_prefers_the_kmd_line_over_the_deprecated_driver_line() -> None:
    r610 = parse_version(_read(VERSION_DIR / "version-kmd-line-deprecated-driver-610.43.02-RECONSTRUCTED.txt"))
    assert (r610.driver_version, r610.cuda_version, r610.warnings) == ("610.43.02", "13.3", ())
    old = parse_version("NVIDIA-SMI version  : 580.95.05\nNVML version        : 580.95\n"
                        "DRIVER version      : 580.95.05\nCUDA Version        : 13.0\n")
    assert (old.driver_version, old.cuda_version) == ("580.95.05", "13.0")
    # Only the deprecated line, no KMD line: unknown with a warning, never "Deprecated, see KMD version".
    bare = parse_version("NVIDIA-SMI version  : 610.88\nDRIVER version      : Deprecated, see KMD version\n")
    assert bare.driver_version is None and bare.warnings


def test_every_version_capture_reads() -> None:
    for path in VERSION_DIR.iterdir():
        assert parse_version(_read(path)).driver_version is not None, path.name


def test_deprecated_version_note_is_removed_wherever_it_appears() -> None:
    note = " [Deprecated; will be removed in CUDA 14.0. Use KMD Version instead]"
    xml = _read(XML_DIR / "dual-rtx-a5000-v13-590.44.01.xml").replace(
        "<driver_version>590.44.01</driver_version>", f"<driver_version>590.44.01{note}</driver_version>")
    assert parse_xml(xml).driver_version == "590.44.01"
    text = _read(TEXT_DIR / "l40s-load-595.80.txt")
    lines = [ln + note if ln.startswith(("Driver Version", "CUDA Version")) else ln for ln in text.split("\n")]
    facts = parse_text("\n".join(lines))
    assert (facts.driver_version, facts.cuda_version) == ("595.80", "13.2")


def test_dram_count_na_next_to_sram_zeros_is_unknown_in_xml_and_text() -> None:
    # A card that counts SRAM errors but has no DRAM ECC: the SRAM zeros alone must not read as "no error".
    xml = _read(XML_DIR / "dual-rtx-a5000-v13-590.44.01.xml")
    for tag in ("sram_uncorrectable_parity", "sram_uncorrectable_secded"):
        xml = xml.replace(f"<{tag}>N/A</{tag}>", f"<{tag}>0</{tag}>")
    assert [g.ecc_uncorrectable_volatile for g in parse_xml(xml).gpus] == [None, None]
    text = _read(TEXT_DIR / "l40s-load-595.80.txt").replace(
        "DRAM Uncorrectable                         : 0", "DRAM Uncorrectable                         : N/A")
    gpu = parse_text(text).gpus[0]
    assert (gpu.ecc_uncorrectable_volatile, gpu.ecc_uncorrectable_aggregate) == (None, None)
