"""nvbandwidth.copies: the parser on real nvbandwidth text captures and the -j JSON layout of json_output.cpp, the
collector's command line, and the check's PASS / FAIL / ERROR / SKIP on real and simulated output (the simulated
Grace tray with c2c_slow fails its C2C-era host floor)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _catalog_helpers import CATALOG, context, profile_with, result, run_check, sim_check, timed_out, verdicts

from nvdeploy.collect.catalog import specs_for
from nvdeploy.config.profiles import load_profile_file
from nvdeploy.config.yamlfile import ConfigError
from nvdeploy.parsers.nvbandwidth import parse_nvbandwidth
from nvdeploy.results import ErrorReason, Remediation, Verdict

REAL = Path(__file__).parent.parent / "fixtures" / "real" / "nvbandwidth"
B300 = (REAL / "b300-sxm6-7gpu-v0.10.0-610.57.04-excerpt.txt").read_text()
AZURE = (REAL / "v0.10-2gpu-h2d-d2h-d2d-read-ce.txt").read_text()
CHECK = "nvbandwidth.copies"
H2D, D2H, D2D = "host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "device_to_device_memcpy_read_ce"


def b300_7gpu():
    """b300-8x with 7 GPUs: the public capture ran on 7 of a B300 system's GPUs (CUDA_VISIBLE_DEVICES 0-6)."""
    base = CATALOG.get("b300-8x")
    from dataclasses import replace

    return replace(base, gpu=replace(base.gpu, count=7))


def test_real_b300_text_capture_parses_every_testcase():
    run = parse_nvbandwidth(B300)
    assert run is not None and run.form == "text" and run.version == "v0.10.0" and run.driver_version == "610.57.04"
    assert [c.name for c in run.testcases] == [H2D, D2H, "host_to_device_bidirectional_memcpy_ce", D2D]
    h2d = run.testcase(H2D)
    assert h2d.status == "Passed" and h2d.matrix == ((55.59, 55.60, 55.60, 55.59, 55.58, 55.60, 55.58),)
    assert h2d.total == 389.15
    d2d = run.testcase(D2D)
    assert len(d2d.matrix) == 7 and d2d.matrix[0][0] is None and d2d.matrix[6][5] == 766.21 and d2d.total == 32140.19


def test_real_capture_without_header_and_with_note_lines_parses():
    run = parse_nvbandwidth(AZURE)
    assert [c.name for c in run.testcases] == [H2D, D2H, D2D]
    assert run.testcase(D2D).matrix == ((None, 276.07), (276.19, None))
    assert run.testcase(D2H).matrix == ((25.97, 26.00),)


def test_json_layout_of_json_output_cpp_parses():
    document = {"nvbandwidth": {"version": "v0.8", "git_version": "v0.8", "CUDA Runtime Version": 12080,
                                "Driver Version": "570.124.06", "GPU Device list": ["0: NVIDIA GB200 (...)"],
                                "testcases": [
                                    {"name": H2D, "status": "Passed", "bandwidth_description": "memcpy CE CPU(row) -> "
                                     "GPU(column) bandwidth (GB/s)", "bandwidth_matrix": [["180.5", "181"]],
                                     "sum": 361.5},
                                    {"name": D2D, "status": "Waived"},
                                    {"name": D2H, "status": "Error", "error": "CUDA_ERROR_OUT_OF_MEMORY"}]}}
    run = parse_nvbandwidth(json.dumps(document, indent=3))
    assert run.form == "json" and run.version == "v0.8" and run.driver_version == "570.124.06"
    assert run.testcase(H2D).matrix == ((180.5, 181.0),) and run.testcase(H2D).total == 361.5
    assert run.testcase(D2D).status == "Waived" and run.testcase(D2H).error == "CUDA_ERROR_OUT_OF_MEMORY"


def test_text_cut_before_sum_is_an_error_testcase_and_garbage_is_none():
    cut = B300[:B300.index("SUM device_to_device_memcpy_read_ce")]
    case = parse_nvbandwidth(cut).testcase(D2D)
    assert case.status == "Error" and "cut off" in case.error
    assert parse_nvbandwidth("garbage\n") is None
    assert parse_nvbandwidth('{"nvbandwidth": ') is None


def test_command_line_and_timeout_from_host_vars():
    spec = specs_for(["nvbandwidth"], {"nvbandwidth_path": "/opt/nvbandwidth/nvbandwidth", "nvbandwidth_timeout": 90},
                     heavy=True, profile=CATALOG.get("gb200-nvl72"))[0]
    assert spec.argv == ("/opt/nvbandwidth/nvbandwidth", "-j", "-t", H2D, D2H, D2D)
    assert spec.timeout_s == 90.0
    assert specs_for(["nvbandwidth"], {}, heavy=True)[0].timeout_s == 600.0


def test_real_b300_capture_passes_against_the_b300_floors():
    findings = run_check(CHECK, context({"nvbandwidth": result("nvbandwidth", B300)}, b300_7gpu()))
    assert verdicts(findings) == [Verdict.PASS] * 3
    assert "slowest 55.58 GB/s (GPU4) of 7 GPUs >= floor 45 GB/s" in findings[0].summary
    assert "slowest 764.16 GB/s" in findings[2].summary and "of 42 pairs" in findings[2].summary


def test_real_b300_capture_fails_a_grace_tray_floor_as_not_over_c2c():
    tray = profile_with("gb200-nvl72")
    from dataclasses import replace

    tray = replace(tray, gpu=replace(tray.gpu, count=7))
    findings = run_check(CHECK, context({"nvbandwidth": result("nvbandwidth", B300)}, tray))
    h2d, d2h, d2d = findings
    assert h2d.verdict is Verdict.FAIL and d2h.verdict is Verdict.FAIL and d2d.verdict is Verdict.PASS
    assert "below the floor 120 GB/s: GPU4 55.58" in h2d.summary and "did not go over NVLink-C2C" in h2d.summary
    assert h2d.gpu == 4 and h2d.remediation is Remediation.INVESTIGATE


def test_simulated_gb200_tray_passes_and_c2c_slow_fails_host_copies_only():
    healthy = sim_check(CHECK, profile="gb200-nvl72")
    assert verdicts(healthy) == [Verdict.PASS] * 3
    assert "floor 120 GB/s" in healthy[0].summary
    slow = sim_check(CHECK, "c2c_slow", profile="gb200-nvl72")
    assert verdicts(slow) == [Verdict.FAIL, Verdict.FAIL, Verdict.PASS]
    assert "did not go over NVLink-C2C" in slow[0].summary and "nvidia-smi c2c -s" in slow[0].summary
    # c2c_slow means nothing on HGX B300 (PCIe host path, no Grace): still PASS there.
    assert verdicts(sim_check(CHECK, "c2c_slow", profile="b300-8x")) == [Verdict.PASS] * 3


def test_simulated_gb300_tray_and_text_output_pass():
    assert verdicts(sim_check(CHECK, profile="gb300-nvl72")) == [Verdict.PASS] * 3


def test_profile_without_floors_is_skip_with_the_figure_never_pass():
    findings = sim_check(CHECK, profile="h100-sxm-8x")
    assert verdicts(findings) == [Verdict.SKIP] * 3
    assert "no host_to_device_gbps floor in the profile h100-sxm-8x" in findings[0].summary


def test_missing_tool_is_error_not_run_saying_how_to_install():
    findings = run_check(CHECK, context({"nvbandwidth": result("nvbandwidth", "", rc=127,
                                                               stderr="sh: 1: nvbandwidth: not found")},
                                        "gb200-nvl72"))
    assert verdicts(findings) == [Verdict.ERROR]
    assert findings[0].reason is ErrorReason.NOT_RUN and "github.com/NVIDIA/nvbandwidth" in findings[0].summary
    assert findings[0].remediation is Remediation.REINSTALL


def test_hang_no_device_waived_and_short_matrix_are_errors():
    hung = run_check(CHECK, context({"nvbandwidth": timed_out("nvbandwidth")}, "gb200-nvl72"))
    assert verdicts(hung) == [Verdict.ERROR] and hung[0].reason is ErrorReason.TIMEOUT
    nodev = sim_check(CHECK, "driver_missing", profile="gb200-nvl72")
    assert verdicts(nodev) == [Verdict.ERROR] and "CUDA_ERROR_NO_DEVICE" in nodev[0].summary
    waived = json.dumps({"nvbandwidth": {"testcases": [
        {"name": H2D, "status": "Passed", "bandwidth_matrix": [["150", "150", "150"]], "sum": 450},
        {"name": D2H, "status": "Passed", "bandwidth_matrix": [["150", "150", "150", "150"]], "sum": 600},
        {"name": D2D, "status": "Waived"}]}})
    findings = run_check(CHECK, context({"nvbandwidth": result("nvbandwidth", waived)}, "gb200-nvl72"))
    assert verdicts(findings) == [Verdict.ERROR, Verdict.PASS, Verdict.ERROR]
    assert "measured 3 GPUs, the profile has 4" in findings[0].summary
    assert findings[2].reason is ErrorReason.NOT_RUN and "waived" in findings[2].summary


def test_failed_verification_is_fail_isolate():
    text = json.dumps({"nvbandwidth": {"testcases": [
        {"name": H2D, "status": "Error", "error": "Invalid value when checking the pattern at 0x70a640000000"}]}})
    findings = run_check(CHECK, context({"nvbandwidth": result("nvbandwidth", text)}, "gb200-nvl72"))
    assert findings[0].verdict is Verdict.FAIL and findings[0].remediation is Remediation.ISOLATE
    assert [f.verdict for f in findings[1:]] == [Verdict.ERROR, Verdict.ERROR]


@pytest.mark.parametrize("body, message, key", [
    ("nvbandwidth: {host_to_device_gbps: 120, device_to_host_gbps: 120}\n", "missing required key",
     "nvbandwidth.sources"),
    ("nvbandwidth: {host_to_device_gbps: 120, device_to_host_gbps: 120, sources: [x], h2d: 3}\n", "unknown key",
     "nvbandwidth.h2d"),
    ("nvbandwidth: {host_to_device_gbps: -1, device_to_host_gbps: 120, sources: [x]}\n", "positive number",
     "nvbandwidth.host_to_device_gbps"),
])
def test_nvbandwidth_section_is_strict(tmp_path, body, message, key):
    text = (Path(CATALOG.get("b300-8x").path).read_text().split("# nvbandwidth.copies floors")[0]) + body
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_profile_file(path)
    assert message in str(caught.value) and key in str(caught.value) and "p.yaml" in str(caught.value)


def test_host_copy_figures_per_gpu_from_the_real_captures_for_the_fleet_rule():
    """fleet.performance's nvbandwidth figures: each GPU's host copies, as the real captures print them."""
    from nvdeploy.parsers.facts import nvbandwidth_figures, summary_facts

    b300 = nvbandwidth_figures(parse_nvbandwidth(B300))
    assert b300["nvbandwidth_h2d_gbps"] == {"0": 55.59, "1": 55.6, "2": 55.6, "3": 55.59, "4": 55.58, "5": 55.6,
                                            "6": 55.58}
    assert len(b300["nvbandwidth_d2h_gbps"]) == 7
    assert nvbandwidth_figures(parse_nvbandwidth(AZURE)) == {"nvbandwidth_h2d_gbps": {"0": 26.03, "1": 25.94},
                                                             "nvbandwidth_d2h_gbps": {"0": 25.97, "1": 26.0}}
    assert "nvbandwidth_h2d_gbps" in summary_facts({"nvbandwidth": parse_nvbandwidth(AZURE)})
    # A testcase that did not pass measured nothing to compare; no run, no figures.
    cut = parse_nvbandwidth(AZURE.split("SUM host_to_device_memcpy_ce")[0])
    assert nvbandwidth_figures(cut) == {} and nvbandwidth_figures(None) == {}
