"""cuda.compat (NVIDIA's driver table, minor-version and forward compatibility) and gpu.mps (control daemon)."""

from __future__ import annotations

import pytest
from _catalog_helpers import CATALOG, context, result, run_check, sim_check, sim_results, timed_out

from nvdeploy.checks.cuda import compat_table, judge
from nvdeploy.collect.catalog import specs_for
from nvdeploy.collect.stack import CUDA_TOOLKITS, MPS_CONTROL, MPS_SCRIPT
from nvdeploy.parsers.cuda_install import Toolkit
from nvdeploy.results import ErrorReason, Remediation, Verdict
from nvdeploy.sim.scenario import NodeScenario


def only(findings):
    assert len(findings) == 1, findings
    return findings[0]


# --- the table ---------------------------------------------------------------------------------------------------

def test_table_rows_from_the_release_notes():
    table = compat_table()
    assert table.toolkits[(12, 4, 0)] == "550.54.14" and table.toolkits[(12, 4, 1)] == "550.54.15"
    assert table.toolkits[(13, 0, 0)] == "580.65.06" and table.minor_ranges[12] == ("525.60.13", "580")


@pytest.mark.parametrize("version, driver, datacenter, compat, verdict, words", [
    ("12.4.1", "550.54.15", True, None, Verdict.PASS, "CUDA 12.4 Update 1"),
    ("12.4.1", "550.54.14", True, None, Verdict.WARN, "minor version compatibility"),
    ("12.8.0", "535.161.08", True, None, Verdict.WARN, "< 570.26"),
    ("12.0.0", "520.61.05", True, None, Verdict.FAIL, "needs driver >= 525.60.13"),
    ("13.0.0", "550.90.07", True, None, Verdict.FAIL, "needs driver >= 580.65.06"),
    ("13.0.2", "550.90.07", True, "580.95.05", Verdict.PASS, "forward compatibility"),
    ("13.0.2", "550.90.07", False, "580.95.05", Verdict.FAIL, "not supported on GeForce"),
    ("13.0.2", "550.90.07", True, "580.65.06", Verdict.FAIL, "too old"),
    # runfile: a date instead of the update -> the strictest row of 12.6 (Update 3)
    ("12.6.20241114", "560.35.03", True, None, Verdict.WARN, "strictest row"),
    ("11.8.0", "550.90.07", True, None, Verdict.PASS, ">= 520.61.05"),
    # not in the table (newer than its edition): WARN, never PASS on guesswork
    ("13.3.1", "595.71.05", True, None, Verdict.WARN, "not in NVIDIA's table"),
])
def test_judge(version, driver, datacenter, compat, verdict, words):
    got, text = judge(Toolkit("/usr/local/cuda-x", version, compat), driver, datacenter, compat_table())
    assert got is verdict, text
    assert words in text


# --- the check on simulated nodes ------------------------------------------------------------------------------

def test_healthy_node_passes_with_the_toolkit_named():
    finding = only(sim_check("cuda.compat"))
    assert finding.verdict is Verdict.PASS
    assert finding.observed == {"/usr/local/cuda-12.4": "12.4.0"} and "550.54.14" in finding.summary
    assert finding.evidence == "evidence/node01/cuda_toolkits.out"


def test_newer_major_toolkit_fails_and_says_what_to_do():
    finding = only(sim_check("cuda.compat", "cuda_toolkit:13.0.2"))
    assert finding.verdict is Verdict.FAIL and finding.remediation is Remediation.REINSTALL
    assert finding.summary.startswith("/usr/local/cuda-13.0 (13.0.2): needs driver >= 580.95.05")


def test_forward_compat_package_recognised():
    finding = only(sim_check("cuda.compat", "cuda_toolkit:13.0.2", "cuda_compat:13.0"))
    assert finding.verdict is Verdict.PASS and "LD_LIBRARY_PATH=/usr/local/cuda-13.0/compat" in finding.summary


def test_minor_version_compat_is_warn():
    finding = only(sim_check("cuda.compat", "cuda_toolkit:12.8.1"))
    assert finding.verdict is Verdict.WARN and finding.remediation is Remediation.MONITOR


def test_no_toolkit_skips_unless_the_inventory_expects_one():
    assert only(sim_check("cuda.compat", "cuda_none")).verdict is Verdict.SKIP
    finding = only(sim_check("cuda.compat", "cuda_none", host_vars={"cuda_toolkit": "12.4"}))
    assert finding.verdict is Verdict.FAIL and finding.expected == "12.4"
    wrong = only(sim_check("cuda.compat", host_vars={"cuda_toolkit": "12.6"}))
    assert wrong.verdict is Verdict.FAIL and "CUDA 12.6 expected" in wrong.summary
    assert only(sim_check("cuda.compat", host_vars={"cuda_toolkit": "12.4"})).verdict is Verdict.PASS


def test_hung_missing_or_failed_find_is_error_never_pass():
    hung = only(sim_check("cuda.compat", "hang"))
    assert (hung.verdict, hung.reason) == (Verdict.ERROR, ErrorReason.TIMEOUT)
    smi = sim_results(NodeScenario("n", CATALOG.get("h100-sxm-8x")), ["nvidia_smi_xml"])
    for res, reason in ((result(CUDA_TOOLKITS, rc=127, stderr="sh: 1: find: not found\n"), ErrorReason.TOOL_MISSING),
                        (timed_out(CUDA_TOOLKITS), ErrorReason.TIMEOUT),
                        (result(CUDA_TOOLKITS, rc=2, stderr="find: unknown predicate `-printf'\n"),
                         ErrorReason.UNPARSEABLE)):
        finding = only(run_check("cuda.compat", context({**smi, CUDA_TOOLKITS: res})))
        assert (finding.verdict, finding.reason) == (Verdict.ERROR, reason), finding.summary


def test_toolkit_but_no_driver_is_error():
    finding = only(sim_check("cuda.compat", "driver_missing"))
    assert finding.verdict is Verdict.ERROR


def test_unreadable_subfolder_warns_but_judges():
    smi = sim_results(NodeScenario("n", CATALOG.get("h100-sxm-8x")), ["nvidia_smi_xml"])
    text = '\n== /usr/local/cuda-12.4/\n\n== /usr/local/cuda-12.4/version.json\n{"cuda": {"version": "12.4.1"}}\n'
    res = result(CUDA_TOOLKITS, text, rc=1, stderr="find: '/usr/local/secret': Permission denied\n")
    finding = only(run_check("cuda.compat", context({**smi, CUDA_TOOLKITS: res})))
    assert finding.verdict is Verdict.WARN and "Permission denied" in finding.summary


# --- gpu.mps -------------------------------------------------------------------------------------------------------

def test_mps_skips_when_not_asked():
    assert only(sim_check("gpu.mps")).verdict is Verdict.SKIP
    assert only(sim_check("gpu.mps", host_vars={"mps": "false"})).verdict is Verdict.SKIP


def test_mps_daemon_down_fails_with_the_start_command():
    finding = only(sim_check("gpu.mps", host_vars={"mps": True, "mps_pipe_dir": "/run/mps pipe"}))
    assert finding.verdict is Verdict.FAIL and finding.remediation is Remediation.TUNE
    assert "CUDA_MPS_PIPE_DIRECTORY='/run/mps pipe'" in finding.summary
    assert "nvidia-cuda-mps-control -d" in finding.summary


def test_mps_running_passes_and_lists_servers():
    assert only(sim_check("gpu.mps", "mps_running", host_vars={"mps": True})).verdict is Verdict.PASS
    # Real format: get_server_list prints one MPS server PID per line.
    finding = only(run_check("gpu.mps", context({MPS_CONTROL: result(MPS_CONTROL, "48213\n48290\n")},
                                                host_vars={"mps": True})))
    assert finding.verdict is Verdict.PASS and finding.observed == ["48213", "48290"]


def test_mps_without_bash_says_so():
    res = result(MPS_CONTROL, rc=127, stderr="timeout: failed to run command 'bash': No such file or directory\n")
    finding = only(run_check("gpu.mps", context({MPS_CONTROL: res}, host_vars={"mps": True})))
    assert finding.reason is ErrorReason.TOOL_MISSING and finding.summary.startswith("bash not found")


@pytest.mark.parametrize("res, reason", [
    (result(MPS_CONTROL, rc=127, stderr="sh: 1: nvidia-cuda-mps-control: not found\n"), ErrorReason.TOOL_MISSING),
    (timed_out(MPS_CONTROL), ErrorReason.TIMEOUT),
    (result(MPS_CONTROL, "some banner\n", rc=0), ErrorReason.UNPARSEABLE),
])
def test_mps_missing_hung_or_odd_is_error(res, reason):
    finding = only(run_check("gpu.mps", context({MPS_CONTROL: res}, host_vars={"mps": True})))
    assert (finding.verdict, finding.reason) == (Verdict.ERROR, reason)
    assert only(sim_check("gpu.mps", "mps_missing", host_vars={"mps": True})).reason is ErrorReason.TOOL_MISSING


def test_mps_dirs_travel_as_arguments_not_script_text():
    [spec] = specs_for([MPS_CONTROL], {"mps_pipe_dir": "/x; touch /tmp/pwned", "mps_log_dir": "/l"}, heavy=False)
    assert spec.argv[:4] == ("bash", "-c", MPS_SCRIPT, "nvdeploy-mps")
    assert spec.argv[4:] == ("/x; touch /tmp/pwned", "/l") and "/x" not in MPS_SCRIPT
