"""dcgm.discovery and dcgm.diag_r1..r4: per-GPU per-test verdicts; DCGM missing or unreachable is ERROR, never
FAIL or PASS; hard timeouts per level."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _catalog_helpers import CATALOG, context, result, run_check, sim_check, verdicts

from nvdeploy.collect.catalog import specs_for
from nvdeploy.results import ErrorReason, Remediation, Verdict
from nvdeploy.sim.scenario import NodeScenario
from nvdeploy.sim.tools import run_tool

REAL = Path(__file__).parent.parent / "fixtures" / "real"


def diag_text(*faults: str, level: int = 2, json: bool = True) -> tuple[str, int]:
    out = run_tool(NodeScenario("node01", CATALOG.get("h100-sxm-8x"), faults),
                   ["dcgmi", "diag", "-r", str(level)] + (["-j"] if json else []))
    return out.stdout.decode(), out.rc


def diag_ctx(text: str, level: int = 2, rc: int = 0, profile: str = "h100-sxm-8x"):
    name = f"dcgm_diag_r{level}"
    return context({name: result(name, text, rc=rc)}, profile=profile)


@pytest.mark.parametrize("level", [1, 2, 3, 4])
def test_healthy_node_passes_every_level(level):
    findings = sim_check(f"dcgm.diag_r{level}")
    assert verdicts(findings) == [Verdict.PASS], findings
    assert "DCGM 3.3.5" in findings[0].summary


def test_discovery_counts_gpus_against_the_profile():
    healthy = sim_check("dcgm.discovery")
    assert verdicts(healthy) == [Verdict.PASS] and healthy[0].summary == "DCGM sees 8 GPUs, 4 NVSwitches"
    missing = sim_check("dcgm.discovery", "gpu_missing")
    assert verdicts(missing) == [Verdict.FAIL] and (missing[0].observed, missing[0].expected) == (7, 8)
    assert missing[0].remediation is Remediation.ISOLATE
    text = (REAL / "dcgmi-discovery" / "8xA100-SXM4-40GB-dgx-with-6-nvswitches.txt").read_text()
    ctx = context({"dcgm_discovery": result("dcgm_discovery", text)}, profile="a100-sxm-8x")
    assert run_check("dcgm.discovery", ctx)[0].summary == "DCGM sees 8 GPUs, 6 NVSwitches"


def test_failed_test_is_fail_on_its_gpu_with_dcgms_message():
    findings = sim_check("dcgm.diag_r2", "dcgm_fail:pcie")
    assert verdicts(findings) == [Verdict.FAIL]
    assert findings[0].gpu == 2 and findings[0].summary.startswith("GPU2: PCIe failed: Bandwidth of GPU 2")
    assert findings[0].remediation is Remediation.ISOLATE
    software = sim_check("dcgm.diag_r1", "dcgm_fail:software")
    assert verdicts(software) == [Verdict.FAIL] and software[0].remediation is Remediation.INVESTIGATE


def test_the_level_decides_which_tests_run():
    assert verdicts(sim_check("dcgm.diag_r2", "dcgm_fail:targeted_stress")) == [Verdict.PASS]
    r3 = sim_check("dcgm.diag_r3", "dcgm_fail:targeted_stress")
    assert verdicts(r3) == [Verdict.FAIL] and "Targeted Stress failed" in r3[0].summary
    assert verdicts(sim_check("dcgm.diag_r3", "dcgm_fail:memtest")) == [Verdict.PASS]
    assert verdicts(sim_check("dcgm.diag_r4", "dcgm_fail:memtest")) == [Verdict.FAIL]


@pytest.mark.parametrize("check", ["dcgm.discovery", "dcgm.diag_r2"])
def test_dcgm_not_installed_is_error_never_fail_or_pass(check):
    findings = sim_check(check, "dcgm_missing")
    assert verdicts(findings) == [Verdict.ERROR]
    assert findings[0].reason is ErrorReason.TOOL_MISSING and "DCGM is not installed" in findings[0].summary
    assert findings[0].remediation is Remediation.REINSTALL


@pytest.mark.parametrize("check", ["dcgm.discovery", "dcgm.diag_r3"])
def test_hostengine_not_running_is_error(check):
    findings = sim_check(check, "hostengine_down")
    assert verdicts(findings) == [Verdict.ERROR]
    assert findings[0].reason is ErrorReason.TOOL_MISSING and "nv-hostengine is not running" in findings[0].summary


def test_hung_diag_is_a_timeout_error():
    findings = sim_check("dcgm.diag_r2", "dcgm_hang")
    assert verdicts(findings) == [Verdict.ERROR] and findings[0].reason is ErrorReason.TIMEOUT


def test_truncated_json_is_incomplete_never_pass():
    text, _ = diag_text()
    findings = run_check("dcgm.diag_r2", diag_ctx(text[: len(text) // 2]))
    assert Verdict.PASS not in verdicts(findings)
    assert any(f.reason is ErrorReason.INCOMPLETE for f in findings)
    assert all(f.verdict is Verdict.ERROR for f in findings)
    empty = run_check("dcgm.diag_r2", diag_ctx(""))
    assert verdicts(empty) == [Verdict.ERROR]


def test_required_test_skipped_is_error_but_optional_skip_is_fine():
    text, _ = diag_text(level=3)  # EUD Test is skipped (not installed): not required, still PASS
    assert verdicts(run_check("dcgm.diag_r3", diag_ctx(text, level=3))) == [Verdict.PASS]
    document = json.loads(text)
    pcie = document["DCGM GPU Diagnostic"]["test_categories"][1]["tests"][0]
    assert pcie["name"] == "PCIe"
    pcie["results"][0]["status"] = "Skip"
    skipped = json.dumps(document, indent="\t")
    findings = run_check("dcgm.diag_r3", diag_ctx(skipped, level=3))
    assert verdicts(findings) == [Verdict.ERROR] and findings[0].gpu == 0
    assert "required test PCIe was skipped" in findings[0].summary


def test_exit_226_needs_a_failed_test_in_the_output():
    failed, rc = diag_text("dcgm_fail:memory")
    assert rc == 226
    assert verdicts(run_check("dcgm.diag_r2", diag_ctx(failed, rc=rc))) == [Verdict.FAIL]
    clean, _ = diag_text()
    findings = run_check("dcgm.diag_r2", diag_ctx(clean, rc=226))
    assert verdicts(findings) == [Verdict.ERROR] and "226" in findings[0].summary


def test_text_output_is_read_as_a_fallback():
    text, rc = diag_text("dcgm_fail:pcie", json=False)
    findings = run_check("dcgm.diag_r2", diag_ctx(text, rc=rc))
    assert verdicts(findings) == [Verdict.FAIL] and findings[0].gpu == 2


def test_real_dcgm_outputs():
    gb10 = (REAL / "dcgmi-diag-json" / "r1-GB10-DGX-Spark-dcgm4.2.3-580.82.09-software-fail-persistence-sram-sentinel"
            ".json").read_text()
    findings = run_check("dcgm.diag_r1", diag_ctx(gb10, level=1, rc=226))
    assert verdicts(findings) == [Verdict.FAIL] and "Persistence mode for GPU 0 is disabled" in findings[0].summary
    nvvs = (REAL / "nvvs" / "nvvs-json-dcgm3.1.0-8gpu-pass-with-nulls-and-warning-prefix.json").read_text()
    assert verdicts(run_check("dcgm.diag_r1", diag_ctx(nvvs, level=1))) == [Verdict.PASS]
    cuinit = (REAL / "dcgmi-diag-text" / "r3-fail-early-8xH100-dcgm3.3.8-560.35.03-cuinit-system-not-initialized"
              ".txt").read_text()
    found = run_check("dcgm.diag_r3", diag_ctx(cuinit, level=3, rc=226))
    assert Verdict.FAIL in verdicts(found) and any("system not yet initialized" in f.summary for f in found)


def test_hard_timeout_per_level_and_override():
    names = [f"dcgm_diag_r{level}" for level in (1, 2, 3, 4)]
    specs = specs_for(names, {}, heavy=True)
    assert [s.timeout_s for s in specs] == [120.0, 1200.0, 3600.0, 10800.0]
    assert [s.argv for s in specs][1] == ("dcgmi", "diag", "-r", "2", "-j")
    assert {s.timeout_s for s in specs_for(names, {"dcgm_timeout": 30}, heavy=True)} == {30.0}
