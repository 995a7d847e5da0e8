"""dcgm.health: ``dcgmi health -s a`` then ``-c -j`` -> per-GPU, per-system verdicts.

Real captures (tests/fixtures/real/dcgmi-health): a healthy ``-c -j`` report, the ``-s a`` line, the
"watches not enabled" error. No public capture of an unhealthy report was found: the Warning/Failure layouts
below are the ones DCGM's source prints (NVIDIA/DCGM dcgmi/Health.cpp and dcgmi/DcgmiOutput.cpp, rendered by
nvdeploy/sim/dcgm_health_tool.py), and the text rows checked against DCGM's own unit test
(dcgmi/tests/HealthTests.cpp, ``Health::GenerateOutputFromResponse``) - built, not captured.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _catalog_helpers import context, result, run_check, sim_check, verdicts

from nvdeploy.collect.catalog import COLLECTORS
from nvdeploy.collect.datacenter import DCGM_HEALTH, HEALTH_SCRIPT
from nvdeploy.config.levels import load_levels
from nvdeploy.parsers.dcgm_health import parse_dcgm_health
from nvdeploy.parsers.detect import detect_format
from nvdeploy.results import ErrorReason, Remediation, Verdict
from nvdeploy.sim import dcgm_health_tool
from nvdeploy.sim.scenario import NodeScenario
from nvdeploy.sim.tools import run_tool

REAL = Path(__file__).parent.parent / "fixtures" / "real" / "dcgmi-health"
HEALTHY_JSON = REAL / "health-c-j-healthy-8gpu-gpu1-recovery-reset-unreported.json"
SET_LINE = REAL / "health-s-a-set-successfully.txt"
NOT_ENABLED = REAL / "health-check-g1-watches-not-enabled-dcgm3.3.6-container.txt"

# The rows DCGM's own unit test expects from Health::GenerateOutputFromResponse (dcgmi/tests/HealthTests.cpp,
# NVIDIA/DCGM 72fa3fe), assembled into the table DcgmiOutputTree(28, 60) prints around them; the messages are the
# test's own. Built from the source, not a capture.
SOURCE_TABLE = """\
+---------------------------+----------------------------------------------------------+
| Health Monitor Report                                                                |
+===========================+==========================================================+
| Overall Health            | Failure                                                  |
| GPU                       |                                                          |
| -> 0                      | Warning                                                  |
|    -> Errors              |                                                          |
|       -> Memory system    | Warning                                                  |
|                           | The car is red? Are you sure because that doesn't seem   |
|                           | like the color I ordered.                                |
| -> 1                      | Failure                                                  |
|    -> Errors              |                                                          |
|       -> Memory system    | Failure                                                  |
|                           | Green can be emerald and beautiful, but there are        |
|                           | shades of green which are sure to disappoint.            |
|       -> SM system        | Warning                                                  |
|                           | The guards wear Kholin blue because otherwise they'd be  |
|                           | lame.                                                    |
+---------------------------+----------------------------------------------------------+
"""


def health_ctx(text: str, rc: int = 0, stderr: str = ""):
    return context({"dcgm_health": result("dcgm_health", text, rc=rc, stderr=stderr)})


def sim_health(*faults: str, json_out: bool = True) -> str:
    scenario = NodeScenario("node01", context({}).profile, tuple(faults))
    flags = ["-c", "-j"] if json_out else ["-c"]
    return run_tool(scenario, ["dcgmi", "health", "-g", "0", *flags]).stdout.decode()


# -- parser ----------------------------------------------------------------------------------------------------

def test_real_healthy_json_report():
    facts = parse_dcgm_health(HEALTHY_JSON.read_text())
    assert facts.format == "json" and facts.overall == "Healthy" and facts.complete
    assert facts.entities == () and facts.errors == () and not facts.warnings


def test_real_set_line_then_report_is_one_answer():
    facts = parse_dcgm_health(SET_LINE.read_text() + HEALTHY_JSON.read_text())
    assert facts.watches_set and facts.overall == "Healthy" and facts.complete
    alone = parse_dcgm_health(SET_LINE.read_text())
    assert alone.watches_set and alone.format is None and not alone.complete


def test_real_watches_not_enabled_error():
    facts = parse_dcgm_health(NOT_ENABLED.read_text())
    assert facts.format is None and facts.watches_not_enabled and not facts.complete
    assert facts.errors == ("Error: Health watches not enabled. Please enable watches.",)


@pytest.mark.parametrize("path", sorted(REAL.iterdir()), ids=lambda p: p.name)
def test_every_real_capture_is_detected_as_dcgmi_health(path):
    assert detect_format(path.read_text()) == "dcgmi-health"


def test_source_table_per_gpu_and_system():
    assert {len(line) for line in SOURCE_TABLE.splitlines()} == {88}  # DcgmiOutputTree(28, 60)
    facts = parse_dcgm_health(SOURCE_TABLE)
    assert facts.format == "text" and facts.complete and facts.overall == "Failure"
    gpu0, gpu1 = facts.gpus
    assert (gpu0.entity_id, gpu0.health, gpu1.entity_id, gpu1.health) == (0, "Warning", 1, "Failure")
    assert gpu0.incidents[0].system == "Memory system" and gpu0.incidents[0].health == "Warning"
    assert gpu0.incidents[0].message == ("The car is red? Are you sure because that doesn't seem like the color "
                                         "I ordered.")
    assert [(i.system, i.health) for i in gpu1.incidents] == [("Memory system", "Failure"), ("SM system", "Warning")]
    assert gpu1.incidents[1].message == "The guards wear Kholin blue because otherwise they'd be lame."


def test_json_and_text_of_the_same_report_agree():
    faults = ("dcgm_health_warn", "dcgm_health_fail:memory")
    as_json, as_text = parse_dcgm_health(sim_health(*faults)), parse_dcgm_health(sim_health(*faults, json_out=False))
    assert as_json.format == "json" and as_text.format == "text"
    assert as_json.overall == as_text.overall == "Failure"
    assert as_json.entities == as_text.entities
    assert [(g.entity_id, g.incidents[0].system) for g in as_json.gpus] == [(2, "Memory system"), (3, "PCIe system")]
    assert as_json.gpus[1].incidents[0].message.startswith("Detected more than 8 PCIe replays per minute for GPU 3")


def test_cut_off_reports_are_incomplete():
    text = sim_health("dcgm_health_fail:pcie")
    cut = parse_dcgm_health(text[: len(text) // 2])
    assert cut.format == "json" and not cut.complete and cut.warnings
    table = sim_health("dcgm_health_fail:pcie", json_out=False)
    assert not parse_dcgm_health(table.rsplit("+", 3)[0]).complete


@pytest.mark.parametrize("text", ["", "\x00\x01garbage", "{", '{"body": 3}', "| -> x | |", "+--+\n| a | b |\n"])
def test_odd_input_never_raises(text):
    facts = parse_dcgm_health(text)
    assert not facts.complete or facts.overall is not None


# -- check -----------------------------------------------------------------------------------------------------

def test_real_healthy_report_passes():
    findings = run_check("dcgm.health", health_ctx(SET_LINE.read_text() + HEALTHY_JSON.read_text()))
    assert verdicts(findings) == [Verdict.PASS] and "Healthy" in findings[0].summary


def test_warning_is_warn_on_its_gpu():
    findings = sim_check("dcgm.health", "dcgm_health_warn")
    assert verdicts(findings) == [Verdict.WARN]
    assert findings[0].gpu == 3 and findings[0].remediation is Remediation.MONITOR
    assert "GPU3: PCIe system Warning: Detected more than 8 PCIe replays" in findings[0].summary


@pytest.mark.parametrize("system, name, action", [
    ("memory", "Memory system", Remediation.RESET_GPU), ("pcie", "PCIe system", Remediation.ISOLATE),
    ("nvlink", "NVLINK system", Remediation.ISOLATE), ("thermal", "Thermal system", Remediation.INVESTIGATE),
    ("power", "Power system", Remediation.INVESTIGATE), ("inforom", "InfoROM system", Remediation.INVESTIGATE),
    ("driver", "Driver", Remediation.RESET_GPU)])
def test_failure_is_fail_naming_gpu_system_and_message(system, name, action):
    findings = sim_check("dcgm.health", f"dcgm_health_fail:{system}")
    assert verdicts(findings) == [Verdict.FAIL]
    fail = findings[0]
    assert fail.gpu == 2 and fail.remediation is action and fail.summary.startswith(f"GPU2: {name} Failure: ")
    assert "GPU 2" in fail.summary  # DCGM's message, joined back from its pieces
    assert fail.observed == "Failure" and fail.expected == "Healthy"


def test_warning_and_failure_on_two_gpus_are_both_reported():
    findings = sim_check("dcgm.health", "dcgm_health_warn", "dcgm_health_fail:thermal")
    assert sorted((f.gpu, f.verdict.value) for f in findings) == [(2, "FAIL"), (3, "WARN")]


def test_source_table_failure_and_warnings():
    findings = run_check("dcgm.health", health_ctx(SOURCE_TABLE))
    assert [(f.gpu, f.verdict) for f in findings] == [(0, Verdict.WARN), (1, Verdict.FAIL), (1, Verdict.WARN)]
    assert findings[1].remediation is Remediation.RESET_GPU


@pytest.mark.parametrize("fault", ["dcgm_missing", "hostengine_down"])
def test_dcgm_absent_is_error_as_for_the_other_dcgm_checks(fault):
    health = sim_check("dcgm.health", fault)
    discovery = sim_check("dcgm.discovery", fault)
    assert verdicts(health) == verdicts(discovery) == [Verdict.ERROR]
    assert health[0].reason is discovery[0].reason is ErrorReason.TOOL_MISSING
    assert health[0].remediation is discovery[0].remediation is Remediation.REINSTALL
    assert health[0].summary.split(": ", 1)[1] == discovery[0].summary.split(": ", 1)[1] or \
        health[0].summary == discovery[0].summary


def test_watches_not_enabled_is_error_never_pass():
    findings = run_check("dcgm.health", health_ctx(NOT_ENABLED.read_text(), rc=253))
    assert verdicts(findings) == [Verdict.ERROR] and findings[0].reason is ErrorReason.NOT_RUN
    assert "not enabled" in findings[0].summary


def test_set_failure_is_error():
    text = "Error: Unable to set health watches. Return: The Group is not found\n"
    findings = run_check("dcgm.health", health_ctx(text, rc=253))
    assert verdicts(findings) == [Verdict.ERROR] and "The Group is not found" in findings[0].summary


@pytest.mark.parametrize("text", ["", "garbage\n", '{"body": {}}', '{"body": {"Overall Health": {"value": "Healthy"'])
def test_unreadable_or_cut_off_is_error(text):
    findings = run_check("dcgm.health", health_ctx(text))
    assert verdicts(findings) == [Verdict.ERROR]
    assert findings[0].reason in (ErrorReason.UNPARSEABLE, ErrorReason.INCOMPLETE)


def test_healthy_report_with_a_failing_exit_status_is_error():
    findings = run_check("dcgm.health", health_ctx(HEALTHY_JSON.read_text(), rc=1))
    assert verdicts(findings) == [Verdict.ERROR]


def test_unknown_health_words_are_error_never_pass():
    report = json.loads(sim_health("dcgm_health_fail:pcie"))
    report["body"]["GPU"]["children"]["2"]["children"]["Errors"]["children"]["PCIe system"]["value"] = "Internal error"
    report["body"]["Overall Health"]["value"] = "Internal error"
    findings = run_check("dcgm.health", health_ctx(json.dumps(report)))
    assert Verdict.PASS not in verdicts(findings) and Verdict.ERROR in verdicts(findings)


# -- collector, catalog, playbook ------------------------------------------------------------------------------

def test_collector_is_one_light_command_with_one_timeout():
    assert COLLECTORS["dcgm_health"] is DCGM_HEALTH and not DCGM_HEALTH.heavy
    assert DCGM_HEALTH.argv[:3] == ("env", "sh", "-c") and DCGM_HEALTH.argv[3] == HEALTH_SCRIPT
    # The batch itself runs these; a collector's argv[0] must not be one of them.
    assert DCGM_HEALTH.argv[0] not in ("cat", "head", "wc", "dd", "tail", "sh")
    assert "dcgmi health -g 0 -s a" in HEALTH_SCRIPT and "dcgmi health -g 0 -c -j" in HEALTH_SCRIPT
    assert DCGM_HEALTH.argv[4] == dcgm_health_tool.HEALTH_HELPER


def test_simulated_set_rejects_what_dcgmi_rejects():
    scenario = NodeScenario("node01", context({}).profile)
    for flags, rc in (("a", 0), ("pmitndx", 0), ("ap", 255), ("q", 255)):
        assert run_tool(scenario, ["dcgmi", "health", "-g", "0", "-s", flags]).rc == rc, flags


def test_dcgm_health_is_in_the_quick_level():
    levels = load_levels()
    assert "dcgm.health" in levels["quick"] and "dcgm.health" in levels["full"]


def test_simulated_healthy_report_is_the_real_capture():
    # The capture's indentation is 8 spaces as the issue shows it; the simulator writes jsoncpp's tabs.
    assert sim_health().replace("\t", " " * 8) == HEALTHY_JSON.read_text()


def test_a_pasted_piece_fails_what_it_shows_and_stays_error_for_the_rest():
    piece = "\n".join(SOURCE_TABLE.splitlines()[10:17]) + "\n"  # GPU 1's rows only: no header, group row, footer
    assert detect_format(piece) == "dcgmi-health"
    facts = parse_dcgm_health(piece)
    assert not facts.complete and facts.entities[0].entity_id == 1
    findings = run_check("dcgm.health", health_ctx(piece))
    assert [(f.gpu, f.verdict) for f in findings] == [(1, Verdict.FAIL), (1, Verdict.WARN), (None, Verdict.ERROR)]
    assert findings[-1].reason is ErrorReason.INCOMPLETE
