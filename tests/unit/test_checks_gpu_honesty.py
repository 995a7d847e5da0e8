"""Per-GPU honesty: a GPU whose value is unknown is ERROR naming that GPU, a lost GPU is FAIL ISOLATE, in every check
that judges a per-GPU value, whether the facts come from nvidia-smi's XML or from the NVML probe."""

from __future__ import annotations

import re

import pytest
from _catalog_helpers import CATALOG, context, result, run_check, sim_results, verdicts

from nvdeploy.collect.probe.ship import probe_argv
from nvdeploy.parsers.nvidia_smi import parse_csv, parse_text, parse_xml
from nvdeploy.results import ErrorReason, Remediation, Verdict
from nvdeploy.sim.scenario import ECC_UNKNOWN_GPU, LOST_GPU, NodeScenario
from nvdeploy.sim.tools import run_tool

# Every check that judges a value of each GPU from nvidia-smi -q -x / NVML.
PER_GPU_CHECKS = ("gpu.model", "gpu.memory", "gpu.persistence", "memory.ecc_mode", "memory.ecc_errors",
                  "memory.remapped_rows", "memory.retired_pages", "pcie.link", "clocks.throttle",
                  "clocks.temperature", "clocks.power_limit", "gpu.mig")
SOURCES = ("nvidia_smi", "nvml_probe")


def facts_results(faults: tuple[str, ...], source: str, profile: str = "h100-sxm-8x") -> dict:
    scenario = NodeScenario("node01", CATALOG.get(profile), faults)
    results = sim_results(scenario, ["nvidia_smi_xml", "lspci"])
    results.pop("nvml_probe", None)  # the batch may carry the probe: each source is tested on its own
    if source == "nvml_probe":
        probe = run_tool(scenario, list(probe_argv()))
        results["nvml_probe"] = result("nvml_probe", probe.stdout.decode(), rc=probe.rc)
    return results


def check(check_id: str, faults: tuple[str, ...] = (), source: str = "nvidia_smi", profile: str = "h100-sxm-8x"):
    results = facts_results(faults, source, profile)
    ctx = context(results, profile)
    assert ctx.facts["smi_source"] == ("nvml_probe" if source == "nvml_probe" else "nvidia_smi_xml")
    return run_check(check_id, ctx)


def xml_check(check_id: str, edit, profile: str = "h100-sxm-8x"):
    """Run ``check_id`` on the simulated healthy node's XML after ``edit(xml) -> xml``."""
    scenario = NodeScenario("node01", CATALOG.get(profile))
    xml = run_tool(scenario, ["nvidia-smi", "-q", "-x"]).stdout.decode()
    return run_check(check_id, context({"nvidia_smi_xml": result("nvidia_smi_xml", edit(xml))}, profile))


def on_gpu(xml: str, index: int, pattern: str, replacement: str) -> str:
    """Apply a regex substitution inside the ``index``-th <gpu> section only."""
    parts = xml.split("<gpu id=")
    parts[index + 1] = re.sub(pattern, replacement, parts[index + 1])
    return "<gpu id=".join(parts)


# ----------------------------------------------------------------------------------------- one unknown GPU

@pytest.mark.parametrize("source", SOURCES)
def test_one_gpu_with_unreadable_ecc_counters_is_error_naming_it(source):
    findings = check("memory.ecc_errors", ("ecc_unknown",), source)
    assert verdicts(findings) == [Verdict.ERROR]
    only = findings[0]
    assert only.gpu == ECC_UNKNOWN_GPU and f"GPU{ECC_UNKNOWN_GPU} (00000000:DB:00.0)" in only.summary
    assert "UNKNOWN" in only.summary and only.reason is ErrorReason.UNPARSEABLE


@pytest.mark.parametrize("check_id", [c for c in PER_GPU_CHECKS if c != "memory.ecc_errors"])
def test_unreadable_ecc_counters_do_not_leak_into_other_checks(check_id):
    assert Verdict.ERROR not in verdicts(check(check_id, ("ecc_unknown",)))


def test_one_gpu_of_eight_reading_na_ecc_counters_is_error_not_pass():
    # The review's case: 7 GPUs report 0, GPU 2 prints N/A for every uncorrectable count.
    findings = xml_check("memory.ecc_errors", lambda xml: on_gpu(
        xml, 2, r"<((?:sram|dram)_uncorrectable\w*)>0</", r"<\1>N/A</"))
    assert verdicts(findings) == [Verdict.ERROR]
    assert findings[0].gpu == 2 and "GPU2 (00000000:3A:00.0)" in findings[0].summary
    assert "N/A" in findings[0].summary


def test_unknown_error_in_one_count_is_not_summed_as_zero():
    findings = xml_check("memory.ecc_errors", lambda xml: on_gpu(
        xml, 5, r"<dram_uncorrectable>0</", "<dram_uncorrectable>Unknown Error</"))
    assert [(f.verdict, f.gpu) for f in findings] == [(Verdict.ERROR, 5)]


def test_one_gpu_without_row_remapping_state_is_error_while_the_others_report_it():
    findings = xml_check("memory.remapped_rows", lambda xml: on_gpu(
        xml, 4, r"<remapped_row_(pending|failure)>No</", r"<remapped_row_\1>N/A</"))
    assert [(f.verdict, f.gpu) for f in findings] == [(Verdict.ERROR, 4)]
    assert "GPU4" in findings[0].summary and "other GPUs report it" in findings[0].summary


def test_feature_absent_on_every_gpu_stays_skip():
    # HBM GPUs remap rows instead of retiring pages: N/A everywhere is "not supported", not unknown.
    assert verdicts(check("memory.retired_pages")) == [Verdict.SKIP]


@pytest.mark.parametrize("check_id, pattern, replacement", [
    ("gpu.memory", r"(<fb_memory_usage>\s*<total>)[^<]*<", r"\1N/A<"),
    ("gpu.persistence", r"<persistence_mode>Enabled<", "<persistence_mode>Unknown Error<"),
    ("memory.ecc_mode", r"<current_ecc>Enabled<", "<current_ecc>N/A<"),
    ("pcie.link", r"<current_link_width>16x<", "<current_link_width>Unknown Error<"),
    ("clocks.temperature", r"<gpu_temp>\d+ C<", "<gpu_temp>N/A<"),
    ("clocks.power_limit", r"<current_power_limit>[^<]*<", "<current_power_limit>Unknown Error<"),
    ("gpu.model", r"<product_name>[^<]*<", "<product_name>Unknown Error<"),
    ("gpu.mig", r"<current_mig>Disabled<", "<current_mig>N/A<"),
    ("clocks.throttle", r"<clocks_event_reason_hw_slowdown>Not Active<",
     "<clocks_event_reason_hw_slowdown>Unknown Error<"),
])
def test_each_per_gpu_check_names_the_one_gpu_it_cannot_judge(check_id, pattern, replacement):
    findings = xml_check(check_id, lambda xml: on_gpu(xml, 3, pattern, replacement))
    assert [(f.verdict, f.gpu) for f in findings] == [(Verdict.ERROR, 3)], findings
    assert "GPU3 (00000000:5D:00.0)" in findings[0].summary


def test_ecc_disabled_gpu_is_reported_by_ecc_mode_not_as_unknown_counters():
    def ecc_off(xml):
        xml = on_gpu(xml, 1, r"<(current|pending)_ecc>Enabled<", r"<\1_ecc>Disabled<")
        return on_gpu(xml, 1, r"<((?:sram|dram)_\w*)>0</", r"<\1>N/A</")

    assert [(f.verdict, f.gpu) for f in xml_check("memory.ecc_mode", ecc_off)] == [(Verdict.FAIL, 1)]
    assert verdicts(xml_check("memory.ecc_errors", ecc_off)) == [Verdict.PASS]


# ---------------------------------------------------------------------------------------------- lost GPU

@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("check_id", PER_GPU_CHECKS)
def test_lost_gpu_is_fail_isolate_in_every_per_gpu_check(check_id, source):
    findings = check(check_id, ("gpu_lost",), source)
    lost = [f for f in findings if f.gpu == LOST_GPU]
    assert [(f.verdict, f.remediation) for f in lost] == [(Verdict.FAIL, Remediation.ISOLATE)], findings
    assert "GPU_IS_LOST" in lost[0].summary and f"GPU{LOST_GPU}" in lost[0].summary
    assert Verdict.PASS not in verdicts(findings)
    assert all(f.gpu == LOST_GPU for f in findings if f.verdict is not Verdict.SKIP)


@pytest.mark.parametrize("source", SOURCES)
def test_lost_gpu_fails_driver_and_count_and_the_others_are_still_judged(source):
    results = facts_results(("gpu_lost",), source)
    assert results["nvidia_smi_xml"].rc == 15
    ctx = context(results)
    assert ctx.facts["smi_status"].usable
    for check_id in ("driver.loaded", "gpu.count"):
        findings = run_check(check_id, ctx)
        assert [(f.verdict, f.remediation, f.gpu) for f in findings] == [
            (Verdict.FAIL, Remediation.ISOLATE, LOST_GPU)], findings
    assert "7 of 8 GPUs usable" in run_check("gpu.count", ctx)[0].summary
    # The seven other GPUs are judged: a real fault on one of them is still found.
    with_ecc = context(facts_results(("gpu_lost", "ecc_uncorrectable"), source))
    found = {(f.verdict, f.gpu) for f in run_check("memory.ecc_errors", with_ecc)}
    assert found == {(Verdict.FAIL, 3), (Verdict.FAIL, LOST_GPU)}


def test_exit_15_without_a_lost_gpu_in_the_table_is_still_a_node_failure():
    scenario = NodeScenario("node01", CATALOG.get("h100-sxm-8x"))
    xml = run_tool(scenario, ["nvidia-smi", "-q", "-x"]).stdout.decode()
    ctx = context({"nvidia_smi_xml": result("nvidia_smi_xml", xml, rc=15)})
    assert not ctx.facts["smi_status"].usable
    assert verdicts(run_check("driver.loaded", ctx)) == [Verdict.FAIL]
    assert verdicts(run_check("memory.ecc_errors", ctx)) == [Verdict.ERROR]


# ------------------------------------------------------------------------------------------ parsers

def test_nvidia_smi_error_words_are_unknown_never_zero():
    text = ("index, name, pci.bus_id, ecc.errors.uncorrected.volatile.total, memory.total [MiB], temperature.gpu\n"
            "0, NVIDIA H100 80GB HBM3, 00000000:18:00.0, [Unknown Error], 81559 MiB, 35\n"
            "1, [GPU is lost], 00000000:2A:00.0, [GPU is lost], [GPU is lost], [GPU is lost]\n"
            "2, NVIDIA H100 80GB HBM3, 00000000:3A:00.0, [N/A], [Not Supported], 36\n")
    first, second, third = parse_csv(text).gpus
    assert first.ecc_uncorrectable_volatile is None and first.error("ecc_uncorrectable_volatile") == "UNKNOWN"
    assert first.memory_total_mib == 81559 and not first.lost
    assert second.lost and second.name is None and second.error("temperature_c") == "GPU_IS_LOST"
    assert third.ecc_uncorrectable_volatile is None and third.memory_total_mib is None and not third.errors


def test_q_text_unknown_error_is_named():
    text = ("Attached GPUs                             : 1\nGPU 00000000:18:00.0\n"
            "    Product Name                          : NVIDIA H100 80GB HBM3\n"
            "    Persistence Mode                      : Unknown Error\n"
            "    Temperature\n        GPU Current Temp                  : 34 C\n")
    gpu = parse_text(text).gpus[0]
    assert gpu.persistence_mode is None and gpu.error("persistence_mode") == "UNKNOWN"
    assert gpu.temperature_c == 34.0


def test_gpu_facts_serialise_their_errors():
    scenario = NodeScenario("node01", CATALOG.get("h100-sxm-8x"), ("ecc_unknown",))
    gpu = parse_xml(run_tool(scenario, ["nvidia-smi", "-q", "-x"]).stdout.decode()).gpus[ECC_UNKNOWN_GPU]
    assert gpu.to_dict()["errors"] == {"ecc_uncorrectable_aggregate": "UNKNOWN",
                                       "ecc_uncorrectable_volatile": "UNKNOWN"}


def test_gpu_the_probe_got_no_handle_for_is_error_in_each_check():
    import json

    results = facts_results((), "nvml_probe")
    body, marker, rest = results["nvml_probe"].text.partition("__NVD_PROBE_END__")
    data = json.loads(body)
    data["gpus"][5] = {"index": 5, "lost": False, "error": "UNKNOWN", "code": 999}
    results["nvml_probe"] = result("nvml_probe", json.dumps(data) + "\n" + marker + rest)
    ctx = context(results)
    for check_id in ("gpu.memory", "memory.ecc_errors", "pcie.link", "clocks.temperature"):
        findings = run_check(check_id, ctx)
        assert [(f.verdict, f.gpu) for f in findings] == [(Verdict.ERROR, 5)], findings
        assert "no handle: UNKNOWN" in findings[0].summary


@pytest.mark.parametrize("xml", ["<nvidia_smi_log><gpu id=\"0\"><a></b></gpu></nvidia_smi_log>",
                                 "<nvidia_smi_log></nvidia_smi_log>",
                                 "<nvidia_smi_log><gpu>&bogus;</gpu></nvidia_smi_log>"])
def test_garbled_xml_is_error_even_when_the_probe_read_every_gpu(xml):
    """The probe's GPUs are used without reading the XML's per-GPU fields (a fleet run's cost), but an XML that does not
    parse still makes the node ERROR unparseable, as before."""
    from nvdeploy.parsers.facts import node_facts
    from nvdeploy.parsers.nvidia_smi import xml_understood

    results = facts_results((), "nvml_probe")
    assert xml_understood(results["nvidia_smi_xml"].text)
    good = node_facts(results)
    assert good["smi_source"] == "nvml_probe" and len(good["smi"].gpus) == 8 and good["smi_status"].usable
    results["nvidia_smi_xml"] = result("nvidia_smi_xml", xml)
    assert not xml_understood(xml)
    bad = node_facts(results)
    assert bad["smi_status"].verdict is Verdict.ERROR and bad["smi_status"].reason is ErrorReason.UNPARSEABLE
    assert bad["smi"] == parse_xml(xml)  # what the report shows: the XML's own (GPU-less) reading, as before


def test_xml_understood_agrees_with_parse_xml_on_every_real_capture():
    from pathlib import Path

    from nvdeploy.parsers.nvidia_smi import xml_understood

    captures = sorted(Path(__file__).resolve().parents[1].glob("fixtures/real/**/*.xml"))
    assert captures
    for path in captures:
        text = path.read_text(errors="replace")
        parsed = parse_xml(text)
        assert xml_understood(text) == (bool(parsed.gpus) or not parsed.warnings), path
