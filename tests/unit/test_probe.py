"""The NVML node probe: shipped in one argument, same facts as nvidia-smi for the same node, safe fallback."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict

import pytest

from nvdeploy.parse_facts import node_facts
from nvdeploy.parsers.nvidia_smi import parse_xml
from nvdeploy.parsers.nvml_json import parse_probe_json
from nvdeploy.probe.ship import MAX_ARGUMENT_BYTES, probe_argv
from nvdeploy.profiles import ProfileCatalog
from nvdeploy.results import CommandResult
from nvdeploy.sim.fake_nvml import run_probe
from nvdeploy.sim.scenario import NodeScenario
from nvdeploy.sim.tools import run_tool

CATALOG = ProfileCatalog()
FAULTS = [(), ("persistence_off",), ("ecc_uncorrectable",), ("row_remap_pending",), ("row_remap_failure",),
          ("gpu_missing",), ("driver_mismatch",), ("pcie_degraded",), ("thermal_throttle",), ("mig_enabled",),
          ("ecc_unknown",), ("gpu_lost",), ("gpu_lost", "ecc_unknown")]


@pytest.mark.parametrize("profile", CATALOG.names())
@pytest.mark.parametrize("faults", FAULTS, ids=lambda f: "+".join(f) or "healthy")
def test_probe_and_nvidia_smi_give_the_same_facts(profile, faults):
    scenario = NodeScenario("gpu01", CATALOG.get(profile), faults)
    from_xml = parse_xml(run_tool(scenario, ["nvidia-smi", "-q", "-x"]).stdout.decode())
    from_probe = parse_probe_json(run_probe(scenario).stdout.decode())
    assert from_probe.gpus, from_probe.warnings
    assert from_probe.driver_version == from_xml.driver_version
    assert from_probe.cuda_version == from_xml.cuda_version
    assert [asdict(g) for g in from_probe.gpus] == [asdict(g) for g in from_xml.gpus]


def test_payload_fits_in_one_command_line_argument():
    argv = probe_argv()
    assert len(argv[-1].encode()) < MAX_ARGUMENT_BYTES
    assert sum(len(a.encode()) for a in argv) < 128 * 1024


def test_shipped_probe_runs_with_a_real_python_and_reports_nvml_unusable():
    # This machine has no NVIDIA driver: the shipped probe must load pynvml from its payload, fail cleanly and
    # say so, so the caller falls back to nvidia-smi.
    done = subprocess.run(list(probe_argv(sys.executable)), capture_output=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 3, done.stderr
    facts = parse_probe_json(done.stdout.decode())
    assert not facts.gpus
    assert "NVML" in facts.warnings[0]
    assert json.loads(done.stdout.decode().split("__NVD_PROBE_END__")[0])["error"]


def _result(name: str, output) -> CommandResult:
    return CommandResult(name, name, output.rc, output.stdout, output.stderr)


def test_probe_facts_are_used_and_nvidia_smi_is_the_fallback():
    scenario = NodeScenario("gpu01", CATALOG.get("h100-sxm-8x"))
    smi = _result("nvidia_smi_xml", run_tool(scenario, ["nvidia-smi", "-q", "-x"]))
    probe = _result("nvml_probe", run_tool(scenario, list(probe_argv())))
    assert node_facts({"nvidia_smi_xml": smi, "nvml_probe": probe})["smi_source"] == "nvml_probe"
    no_python = NodeScenario("gpu01", CATALOG.get("h100-sxm-8x"), ("no_python",))
    missing = _result("nvml_probe", run_tool(no_python, list(probe_argv())))
    assert missing.rc == 127
    facts = node_facts({"nvidia_smi_xml": smi, "nvml_probe": missing})
    assert facts["smi_source"] == "nvidia_smi_xml"
    assert len(facts["smi"].gpus) == 8


def test_nvidia_smi_exit_status_still_decides_when_the_probe_works():
    scenario = NodeScenario("gpu01", CATALOG.get("h100-sxm-8x"), ("driver_missing",))
    smi = _result("nvidia_smi_xml", run_tool(scenario, ["nvidia-smi", "-q", "-x"]))
    probe = _result("nvml_probe", run_tool(scenario, list(probe_argv())))
    assert probe.rc == 3  # NVML: driver not loaded
    facts = node_facts({"nvidia_smi_xml": smi, "nvml_probe": probe})
    assert not facts["smi_status"].usable
    assert "driver not loaded" in facts["smi_status"].summary


def test_truncated_or_garbage_probe_output_is_not_used():
    assert not parse_probe_json('{"format": "nvml", "gpus": [{"index": 0').gpus
    assert not parse_probe_json("\x00\xff garbage __NVD_PROBE_END__").gpus
    assert parse_probe_json("").warnings


def test_probe_records_which_nvml_error_it_got():
    scenario = NodeScenario("gpu01", CATALOG.get("h100-sxm-8x"), ("gpu_lost", "ecc_unknown"))
    data = json.loads(run_probe(scenario).stdout.decode().split("__NVD_PROBE_END__")[0])
    lost, unknown, healthy = data["gpus"][6], data["gpus"][7], data["gpus"][0]
    assert lost["lost"] is True and lost["temperature_c"] == {"error": "GPU_IS_LOST", "code": 15}
    assert lost["pci_bus_id"] == "00000000:BA:00.0"
    assert unknown["ecc_uncorrectable_volatile"] == {"error": "UNKNOWN", "code": 999} and unknown["lost"] is False
    # HBM GPUs do not retire pages: recorded as NOT_SUPPORTED, read back as "no such feature", not unknown.
    assert healthy["retired_pages_pending"] == {"error": "NOT_SUPPORTED", "code": 3}
    facts = parse_probe_json(run_probe(scenario).stdout.decode())
    assert facts.gpus[6].lost and facts.gpus[6].error("temperature_c") == "GPU_IS_LOST"
    assert facts.gpus[7].error("ecc_uncorrectable_volatile") == "UNKNOWN"
    assert facts.gpus[0].retired_pages_pending is None and facts.gpus[0].errors == ()


def test_probe_json_without_error_records_still_reads():
    # A probe of an older nvdeploy wrote null for every NVML error: still facts, just without reasons.
    old = json.dumps({"format": "nvml", "driver_version": "550.90.07", "gpus": [{"index": 0, "temperature_c": None}]})
    facts = parse_probe_json(old + "\n__NVD_PROBE_END__\n")
    assert facts.gpus[0].temperature_c is None and facts.gpus[0].errors == () and not facts.gpus[0].lost


def test_gpu_without_a_handle_is_recorded_with_its_error():
    import io

    from nvdeploy.probe import nvml_probe
    from nvdeploy.sim.fake_nvml import NVMLError, fake_nvml
    from nvdeploy.sim.scenario import node_facts

    nvml = fake_nvml(node_facts(NodeScenario("gpu01", CATALOG.get("h100-sxm-8x"))))
    handles = nvml.nvmlDeviceGetHandleByIndex

    def handle(index):
        if index in (2, 5):
            raise NVMLError(15 if index == 2 else 999)
        return handles(index)

    nvml.nvmlDeviceGetHandleByIndex = handle
    out = io.StringIO()
    assert nvml_probe.main(nvml, out=out) == 0
    data = json.loads(out.getvalue().split("__NVD_PROBE_END__")[0])
    assert data["gpus"][2] == {"index": 2, "lost": True, "error": "GPU_IS_LOST", "code": 15}
    assert data["gpus"][5] == {"index": 5, "lost": False, "error": "UNKNOWN", "code": 999}
    gpus = parse_probe_json(out.getvalue()).gpus
    assert gpus[2].lost and gpus[2].index == 2
    assert not gpus[5].lost and gpus[5].error("handle") == "UNKNOWN" and gpus[5].name is None
