"""``nvdeploy parse``: every real capture in tests/fixtures/real goes through ``parse auto`` without a traceback,
with its key facts right; exit codes; ``--verdicts --profile``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nvdeploy.cli.app import cli

REAL = Path(__file__).parent.parent / "fixtures" / "real"
FOLDER_FORMAT = {"dcgmi-diag-json": "dcgmi-diag", "dcgmi-diag-text": "dcgmi-diag", "nvvs": "dcgmi-diag",
                 "xid-logs": "kmsg"}
# The folders of `parse` formats (other folders hold captures of collectors `parse` does not read).
PARSE_FOLDERS = {*FOLDER_FORMAT, "nvidia-smi-xml", "nvidia-smi-text", "nvidia-smi-csv", "nvidia-smi-topo",
                 "nvidia-smi-nvlink", "dcgmi-discovery", "dcgmi-health", "nccl-tests", "ibstat", "fragments",
                 "nvbandwidth", "perftest", "nvidia-smi-mig"}
FILES = sorted(p for p in REAL.glob("*/*") if p.is_file() and p.suffix != ".tsv" and p.parent.name in PARSE_FOLDERS)
FRAGMENTS = REAL / "fragments"  # pasted pieces, named "<format>-..."


def _format_of(path: Path) -> str:
    if path.parent.name == "fragments":
        return next(f for f in ("dcgmi-diag", "dcgmi-discovery", "nvidia-smi-topo") if path.name.startswith(f + "-"))
    return FOLDER_FORMAT.get(path.parent.name, path.parent.name)
# Keys the issue requires per format ("null where the input does not say").
REQUIRED = {
    "nvidia-smi": ["driver_version", "cuda_version", "gpus"],
    "nvidia-smi-gpu": ["index", "name", "uuid", "pci_bus_id", "persistence_mode", "ecc_mode",
                       "ecc_uncorrectable_volatile", "remapped_rows_pending", "remapped_rows_failure",
                       "retired_pages_pending", "pcie_gen_current", "pcie_gen_max", "pcie_width_current",
                       "pcie_width_max", "memory_total_mib", "temperature_c", "power_limit_w", "mig_mode"],
    "nvidia-smi-topo": ["gpus", "matrix", "nics"],
    "nvidia-smi-nvlink": ["supported", "gpus"],
    "dcgmi-diag": ["format", "dcgm_version", "driver_version", "overall", "tests"],
    "dcgmi-discovery": ["gpus", "nvswitches"],
    "dcgmi-health": ["format", "overall", "entities", "watches_set", "errors", "complete"],
    "nccl-tests": ["collective", "nccl_version", "nranks", "rows", "avg_busbw", "max_busbw", "wrong_total",
                   "out_of_bounds", "errors", "complete"],
    "ibstat": ["devices"],
    "kmsg": ["xid_events", "xid_counts", "sxid_events", "aer_events"],
    "nvbandwidth": ["form", "version", "driver_version", "testcases", "error"],
    "perftest": ["test", "device", "link_type", "cuda", "rows", "complete", "errors"],
    "nvidia-smi-mig": ["profiles", "instances", "message", "fragment"],
}
# file name -> {path: value}; a path is dotted keys/indexes, '#key' is len(key).
KEY_FACTS: dict[str, dict[str, Any]] = {
    "r1-GB10-DGX-Spark-dcgm4.2.3-580.82.09-software-fail-persistence-sram-sentinel.json": {
        "format": "json", "dcgm_version": "4.2.3", "driver_version": "580.82.09", "overall": "FAIL",
        "tests.0.name": "software", "tests.0.results.0.gpu": 0, "tests.0.results.0.verdict": "FAIL"},
    "fragment-r3-T400-dcgm3x-all-skip-gpu_id-singular-user-elided-deployment.json": {
        "format": "json", "overall": "SKIP", "#tests": 5, "tests.0.name": "PCIe", "tests.0.results.0.gpu": 0},
    "r3-fail-early-8xH100-dcgm3.3.8-560.35.03-cuinit-system-not-initialized.txt": {
        "format": "text", "dcgm_version": "3.3.8", "driver_version": "560.35.03", "overall": "FAIL", "#tests": 13},
    "r3-srun-2xRTXPRO6000-Blackwell-dcgm3.3.9-570.172.08-all-skip-duplicated.txt": {
        "dcgm_version": "3.3.9", "driver_version": "570.172.08", "#tests": 15},
    "r4-dcgm2x-blacklist-era-all-pass-azure-fairwus3.txt": {"format": "text", "overall": "PASS", "#tests": 18},
    "nvvs-json-dcgm3.1.0-8gpu-pass-with-nulls-and-warning-prefix.json": {
        "format": "json", "dcgm_version": "3.1.0", "overall": "PASS", "#tests": 10, "#tests.0.results": 8},
    "8xA100-SXM4-40GB-dgx-with-6-nvswitches.txt": {
        "#gpus": 8, "#nvswitches": 6, "gpus.0.name": "A100-SXM4-40GB", "gpus.0.pci_bus_id": "00000000:07:00.0",
        "gpus.0.uuid": "GPU-1d82f4df-3cf9-150d-088b-52f18f8654e1"},
    "1xT4G-g5g-graviton-dcgm-exporter-4.4.2.txt": {"#gpus": 1, "gpus.0.name": "NVIDIA T4G"},
    "health-c-j-healthy-8gpu-gpu1-recovery-reset-unreported.json": {
        "format": "json", "overall": "Healthy", "#entities": 0, "complete": True},
    "health-check-g1-watches-not-enabled-dcgm3.3.6-container.txt": {
        "format": None, "watches_not_enabled": True, "complete": False},
    "4xP100-SXM2-ppc64le-dcgm1x-old-layout-nonzero-pci-domains.txt": {"#gpus": 4,
                                                                      "gpus.0.name": "Tesla P100-SXM2-16GB"},
    "ibstat-h100-node-8x-ib-ndr400-plus-mlx5_bond_0-all-active.txt": {
        "#devices": 9, "devices.0.ports.0.state": "Active", "devices.0.ports.0.rate_gbps": 400.0,
        "devices.8.name": "mlx5_bond_0", "devices.8.ports.0.link_layer": "Ethernet"},
    "ibstat-connectx4-state-initializing-no-subnet-manager-no-catype.txt": {
        "devices.0.ports.0.state": "Initializing", "devices.0.ports.0.rate_gbps": 100.0},
    "ibstat-connectx3-mt4099-fdr56-active.txt": {"devices.0.ports.0.rate_gbps": 56.0},
    "ibstatus-a100-azure-hdr200-all-active.txt": {"#devices": 9, "devices.0.ports.0.rate_gbps": 200.0},
    "ibv_devinfo-2x-connectx3-dual-port-port2-down.txt": {
        "#devices": 2, "devices.0.ports.0.state": "Active", "devices.0.ports.1.state": "Down"},
    "all_reduce_perf-8xA100-80GB-single-node-nccl2.16.2-hostname-placeholder.log": {
        "nccl_version": "2.16.2+cuda11.6", "nranks": 8, "#rows": 6, "max_busbw": 231.72, "wrong_total": 0,
        "out_of_bounds": 0, "complete": True, "rows.5.size_bytes": 1073741824, "rows.5.busbw_oop": 231.72},
    "all_reduce_perf-2node-16xH100-mpirun-gcp-a3mega.log": {
        "nranks": 16, "#rows": 31, "max_busbw": 338.82, "complete": True, "avg_busbw": 70.742},
    "all_reduce_perf-8xH100-cuda-system-not-yet-initialized-no-fabricmanager.log": {
        "#rows": 0, "complete": False,
        "errors.0": "test: Test CUDA failure common.cu:941 'system not yet initialized'"},
    "alltoall_perf-1xRTX5090-single-rank-inplace-wrong-NA.log": {"nranks": 1, "rows.0.wrong_ip": None,
                                                                 "rows.0.wrong_oop": 0},
    "all_gather_perf-2node-16xH100-a3mega-tcpxo-srun-l-rank-prefix-c0.log": {
        "#rows": 11, "max_busbw": 188.99, "rows.0.wrong_oop": None, "complete": True},
    "all_reduce_perf-2xRTX3090-NCCL_DEBUG-INFO-stub-library-failure.log": {
        "collective": "all_reduce_perf", "nccl_version": "2.15.5+cuda11.8", "#rows": 0, "complete": False},
    "8xH100-NV18-2numa-spaces.txt": {"#gpus": 8, "matrix.GPU0.GPU1": "NV18", "matrix.GPU7.GPU6": "NV18",
                                     "matrix.GPU3.GPU3": "X"},
    "8xA100-sxm4-NV12-2numa-spaces.txt": {"#gpus": 8, "matrix.GPU0.GPU7": "NV12"},
    "2gpu-PHB-no-nvlink.txt": {"gpus": ["GPU0", "GPU1"], "matrix.GPU0.GPU1": "PHB", "nics": []},
    "h100-80gb-hbm3-single-gpu-ansi-590.48.01.txt": {"gpus": ["GPU0"], "matrix.GPU0.GPU0": "X"},
    "a100-sxm4-80gb-8gpu-nvlink-status-12links-25GBs.txt": {
        "supported": True, "#gpus": 8, "#gpus.0.links": 12, "gpus.0.links.0.speed_gbps": 25.0,
        "gpus.0.links.0.active": True},
    "h100-80gb-hbm3-18links-590.48.01.txt": {"supported": True, "#gpus.0.links": 18,
                                             "gpus.0.links.17.speed_gbps": 26.562},
    "l40s-no-nvlink-595.80.txt": {"supported": False, "#gpus.0.links": 0},
    "h100-mig-mode-not-supported-590.48.01.txt": {"supported": False},
    "h100-8gpu-hgx-q-535.161.08.txt": {
        "driver_version": "535.161.08", "cuda_version": "12.2", "#gpus": 8, "gpus.0.name": "NVIDIA H100 80GB HBM3",
        "gpus.0.memory_total_mib": 81559, "gpus.0.pcie_gen_max": 5, "gpus.0.pcie_width_current": 16,
        "gpus.0.persistence_mode": True, "gpus.0.ecc_mode": True, "gpus.0.mig_mode": False},
    "h200-mig-enabled-idle-590.48.01.txt": {"gpus.0.name": "NVIDIA H200", "gpus.0.mig_mode": True},
    "l40s-load-595.80.txt": {"driver_version": "595.80", "gpus.0.name": "NVIDIA L40S",
                             "gpus.0.memory_total_mib": 46068},
    "default-table-8xH100-550.90.07.txt": {"driver_version": "550.90.07", "cuda_version": "12.4", "#gpus": 8},
    "a100-sxm4-80gb-mig-v12-535.54.03.xml": {"driver_version": "535.54.03", "gpus.0.name": "NVIDIA A100-SXM4-80GB",
                                             "gpus.0.memory_total_mib": 81920},
    "tesla-t4-v11-515.105.01.xml": {"driver_version": "515.105.01", "cuda_version": "11.7", "gpus.0.name": "Tesla T4"},
    "rtx-4090-v12-535.86.05.xml": {"gpus.0.name": "NVIDIA GeForce RTX 4090", "gpus.0.memory_total_mib": 24564},
    "h100-80gb-hbm3-query-gpu-all-fields-load-590.48.01.csv": {"driver_version": "590.48.01",
                                                               "gpus.0.name": "NVIDIA H100 80GB HBM3"},
    "h200-mig-query-gpu-all-fields-idle-590.48.01.csv": {"gpus.0.name": "NVIDIA H200",
                                                         "gpus.0.memory_total_mib": 143771},
    "journalctl-xid79-fallen-off-bus-continuation-lines.log": {"xid_counts": {"79": 1}, "xid_events.0.xid": 79},
    "default-table-windows-wddm-driver-model-rtx5060-616.92-kmd-umd-header.txt": {
        "driver_version": "616.92", "cuda_version": "13.4", "#gpus": 1, "gpus.0.persistence_mode": None,
        "gpus.0.pci_bus_id": "00000000:01:00.0", "gpus.0.memory_total_mib": 8151},
    "v0.8-1xrtx3080-575.64.03-d2h-CUDA_ERROR_INVALID_CONTEXT.txt": {
        "version": "v0.8", "#testcases": 1, "testcases.0.status": "Error"},
    "ib-write-bw-use-cuda-t4-roce-client.txt": {"cuda": True, "complete": True, "device": "mlx5_0"},
    "lgip-a100-sxm4-40gb-7-profiles-450.80.02.txt": {
        "#profiles": 7, "profiles.0.name": "MIG 1g.5gb", "profiles.0.profile_id": 19, "profiles.0.total": 7,
        "profiles.6.name": "MIG 7g.40gb", "profiles.6.ce": 7},
    "lgi-a100-40gb-two-3g.20gb-instances-450.80.02.txt": {
        "#instances": 2, "instances.1.instance_id": 2, "instances.1.placement_start": 0},
    "dmesg-nvswitch-sxid12028-nonfatal-link-error.log": {"xid_counts": {}, "#sxid_events": 1},
    "dmesg-xid64-row-remapper-all-reserved-rows-remapped.log": {"xid_counts": {"64": 1}},
    "dmesg-T-xid43-xid31-mmu-fault-xid94-contained-535.183.01.log": {"xid_counts": {"31": 1, "43": 2, "94": 1}},
    "kmsg-gb200-nvlink5-xid145-xid149-lines-COLLECTION.log": {"xid_counts": {"145": 7, "149": 7}},
    "dcgmi-diag-text-r2-gpu-memory-fail-gpu0-thermal-warning-no-header.txt": {
        "fragment": True, "complete": False, "overall": "FAIL", "gpu_verdicts.0.GPU Memory": "FAIL",
        "gpu_verdicts.7.GPU Memory": "PASS", "#gpu_verdicts": 8},
    "dcgmi-diag-text-r2-dcgm3.3.1-mid-table-gpu-memory-fail-gpu0-cut-both-ends.txt": {
        "fragment": True, "gpu_verdicts": {"0": {"GPU Memory": "FAIL"}, "1": {"GPU Memory": "PASS"}}},
    "dcgmi-diag-text-dcgm4.2.3-4x26b9-header-then-cut-at-memory-row.txt": {
        "fragment": False, "complete": False, "dcgm_version": "4.2.3", "gpu_verdicts.3.software": "PASS",
        "gpu_verdicts.all.memory": "PASS"},
    "dcgmi-diag-json-dcgm4-r3-8gpu-diagnostic-test-object-trailing-comma.json": {
        "format": "json", "fragment": True, "overall": None, "#gpu_verdicts": 8, "gpu_verdicts.5.diagnostic": "PASS"},
}


def parse(*args: str, input: str | None = None):
    result = CliRunner().invoke(cli, ["parse", *args], input=input)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def pick(data: Any, path: str) -> Any:
    count = path.startswith("#")
    for part in path.lstrip("#").split("."):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return len(data) if count else data


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.name}" for p in FILES])
def test_every_real_capture_parses_with_auto(path: Path):
    result = parse("auto", str(path))
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    fmt = _format_of(path)
    assert data["input_format"] == fmt
    assert isinstance(data["warnings"], list)
    family = "nvidia-smi" if fmt in ("nvidia-smi-xml", "nvidia-smi-text", "nvidia-smi-csv") else fmt
    for key in REQUIRED[family]:
        assert key in data, key
    if family == "nvidia-smi":
        for gpu in data["gpus"]:
            assert set(REQUIRED["nvidia-smi-gpu"]) <= set(gpu)
    for key, value in KEY_FACTS.get(path.name, {}).items():
        assert pick(data, key) == value, key


def test_every_key_fact_file_exists():
    names = {p.name for p in FILES}
    assert set(KEY_FACTS) <= names


def test_explicit_format_and_stdin():
    text = (REAL / "ibstat" / "ibstat-connectx6-mt4123-active-rate100.txt").read_text()
    result = parse("ibstat", "-", input=text)
    assert result.exit_code == 0 and json.loads(result.output)["devices"][0]["ports"][0]["rate_gbps"] == 100.0


def test_unknown_format_or_unreadable_file_exit_2(tmp_path):
    assert parse("bogus", str(FILES[0])).exit_code == 2
    missing = parse("auto", str(tmp_path / "nope.log"))
    assert missing.exit_code == 2 and "cannot read" in missing.output
    assert parse("auto", str(tmp_path)).exit_code == 2
    assert parse("auto", str(FILES[0]), "--verdicts").exit_code == 2
    assert parse("auto", str(FILES[0]), "--verdicts", "--profile", "nope").exit_code == 2


def test_garbage_gives_warnings_and_exit_0(tmp_path):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00\xff garbage \x1b[31m not a tool output\n" * 10)
    result = parse("auto", str(junk))
    assert result.exit_code == 0 and json.loads(result.output)["warnings"]
    forced = parse("nccl-tests", str(junk))
    data = json.loads(forced.output)
    assert forced.exit_code == 0 and data["rows"] == [] and data["warnings"]
    xml = parse("nvidia-smi-xml", str(junk))
    assert xml.exit_code == 0 and json.loads(xml.output)["gpus"] == []


def test_verdicts_with_a_profile():
    log = REAL / "nccl-tests" / "all_reduce_perf-8xH100-cuda-system-not-yet-initialized-no-fabricmanager.log"
    data = json.loads(parse("auto", str(log), "--verdicts", "--profile", "h100-sxm-8x").output)
    assert data["verdicts"]["profile"] == "h100-sxm-8x@2026.11.1" and data["verdicts"]["verdict"] == "FAIL"
    good = REAL / "nccl-tests" / "all_reduce_perf-8xA100-80GB-single-node-nccl2.16.2-hostname-placeholder.log"
    judged = json.loads(parse("auto", str(good), "--verdicts", "--profile", "a100-sxm-8x").output)["verdicts"]
    assert judged["verdict"] == "PASS"  # 231.72 GB/s at 1 GiB >= the 8x A100 floor (95% of 235 = 223.2)
    assert judged["findings"][0]["observed"] == 231.72
    topo = REAL / "nvidia-smi-topo" / "8xH100-NV18-2numa-spaces.txt"
    out = json.loads(parse("auto", str(topo), "--verdicts", "--profile", "h100-sxm-8x").output)["verdicts"]
    assert out["verdict"] == "PASS" and [f["check"] for f in out["findings"]] == ["nvlink.topology"]
    smi = REAL / "nvidia-smi-text" / "h100-8gpu-hgx-q-535.161.08.txt"
    checks = json.loads(parse("auto", str(smi), "--verdicts", "--profile", "h100-sxm-8x").output)["verdicts"]
    by_check = {f["check"]: f["verdict"] for f in checks["findings"]}
    assert by_check["gpu.count"] == "PASS" and by_check["pcie.link"] == "PASS"
    assert by_check["clocks.throttle"] == "FAIL"  # HW Power Brake Slowdown is Active in this capture


def test_pasted_fragment_verdicts_show_the_fail_and_stay_error_for_the_rest():
    """A headerless pasted piece of a dcgmi diag -r 2 table, judged: FAIL for GPU 0, ERROR for what it hides."""
    piece = FRAGMENTS / "dcgmi-diag-text-r2-gpu-memory-fail-gpu0-thermal-warning-no-header.txt"
    data = json.loads(parse("auto", str(piece), "--verdicts", "--profile", "h100-sxm-8x").output)
    assert data["input_format"] == "dcgmi-diag" and data["fragment"] is True
    verdicts = data["verdicts"]
    assert verdicts["verdict"] == "FAIL"
    by_verdict: dict[str, list[dict[str, Any]]] = {}
    for finding in verdicts["findings"]:
        by_verdict.setdefault(finding["verdict"], []).append(finding)
    (fail,) = by_verdict["FAIL"]
    assert fail["gpu"] == 0 and "GPU Memory failed" in fail["summary"] and "Thermal violations" in fail["summary"]
    errors = " | ".join(f["summary"] for f in by_verdict["ERROR"])
    assert "required test pcie is missing" in errors and "is a fragment" in errors
    assert "PASS" not in by_verdict


def test_pasted_json_fragment_that_only_passes_is_error_never_pass():
    piece = FRAGMENTS / "dcgmi-diag-json-dcgm4-r3-8gpu-diagnostic-test-object-trailing-comma.json"
    verdicts = json.loads(parse("auto", str(piece), "--verdicts", "--profile", "h100-sxm-8x").output)["verdicts"]
    assert verdicts["verdict"] == "ERROR"
    assert any("is a fragment" in f["summary"] for f in verdicts["findings"])
    assert all(f["verdict"] == "ERROR" for f in verdicts["findings"])


def test_fragment_from_stdin_with_explicit_format():
    text = "|                           | Fail - GPU: 3                                  |\n"
    data = json.loads(parse("dcgmi-diag", "-", input=text).output)
    assert data["fragment"] is True and data["gpu_verdicts"] == {"3": {"(test name not in the fragment)": "FAIL"}}
