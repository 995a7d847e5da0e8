"""The NVML node probe: shipped in one argument, same facts as nvidia-smi for the same node, safe fallback."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
import types
from dataclasses import asdict
from pathlib import Path

import pytest

from nvdeploy.collect.probe import nvml_probe
from nvdeploy.collect.probe.ship import MAX_ARGUMENT_BYTES, probe_argv
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.parsers.facts import node_facts
from nvdeploy.parsers.nvidia_smi import GpuFacts, parse_xml
from nvdeploy.parsers.nvml_json import parse_probe_json
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

    from nvdeploy.collect.probe import nvml_probe
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


GB200_XML = Path(__file__).parent.parent / "fixtures" / "real" / "nvidia-smi-xml" / \
    "gb200-4gpu-fabric-platforminfo-c2c-v13-580.173.02.xml"
FABRIC_FIELDS = [f for f in GpuFacts.__dataclass_fields__ if f.startswith("fabric_")]


def _fabric_nvml(*, v: bool = True, v1: bool = True, v_error: int = 0):
    """A pynvml-like namespace answering only the fabric calls, as a GB200 of the real capture does: registered in
    clique 2 of a cluster, health Healthy / Full bandwidth / no recovery, no timeout, configuration and partition
    not reported."""
    from nvdeploy.sim.fake_nvml import FabricInfoV3, NVMLError

    class FabricInfoV1(ctypes.Structure):
        _fields_ = [("clusterUuid", ctypes.c_uint8 * 16), ("status", ctypes.c_uint), ("cliqueId", ctypes.c_uint32),
                    ("state", ctypes.c_uint)]

    def fill(ref):
        info = ref._obj
        info.state, info.status, info.cliqueId = 3, 0, 2
        info.clusterUuid[:] = [0, 0, 0, 1] + [0] * 11 + [1]
        if hasattr(info, "healthMask"):
            info.healthMask = (2 << 0) | (2 << 2) | (2 << 4) | (2 << 6)
            info.healthSummary = 1
        return 0

    def fabric_v(handle, ref):
        if v_error:
            raise NVMLError(v_error)
        return fill(ref)

    nvml = types.SimpleNamespace(NVMLError=NVMLError, c_nvmlGpuFabricInfo_t=FabricInfoV1)
    if v:
        nvml.c_nvmlGpuFabricInfo_v3_t = FabricInfoV3
        nvml.nvmlDeviceGetGpuFabricInfoV = fabric_v
    if v1:
        nvml.nvmlDeviceGetGpuFabricInfo = lambda handle, ref: fill(ref)
    return nvml


def test_probe_reads_the_fabric_as_the_v13_xml_prints_it():
    xml_gpu = parse_xml(GB200_XML.read_text(encoding="utf-8")).gpus[0]
    probed = nvml_probe._fabric(_fabric_nvml(), handle=None)
    assert {k: probed[k] for k in FABRIC_FIELDS} == {k: getattr(xml_gpu, k) for k in FABRIC_FIELDS}


def test_probe_fabric_falls_back_for_older_drivers_and_bindings():
    # Driver without nvmlDeviceGetGpuFabricInfoV (FUNCTION_NOT_FOUND, 13): the v1 call, no health.
    old = nvml_probe._fabric(_fabric_nvml(v_error=13), handle=None)
    assert (old["fabric_state"], old["fabric_clique_id"], old["fabric_health_summary"]) == ("Completed", 2, None)
    assert old["fabric_bandwidth"] is None and old["fabric_route_unhealthy"] is None
    # A binding with neither call: every fabric fact is None (not read), and the probe still answers.
    bare = nvml_probe._grace_blackwell(types.SimpleNamespace(NVMLError=Exception), handle=None)
    assert set(bare) == {*FABRIC_FIELDS, "gpu_recovery_action", "chassis_serial", "slot_number", "tray_index",
                         "module_id", "c2c_mode"}
    assert set(bare.values()) == {None}
    # A GPU without a fabric (NOT_SUPPORTED, 3): recorded by name, which the facts read as "not supported".
    unsupported = nvml_probe._fabric(_fabric_nvml(v_error=3, v1=False), handle=None)
    assert unsupported["fabric_state"] == {"error": "NOT_SUPPORTED", "code": 3}
    facts = parse_probe_json(json.dumps({"gpus": [{"index": 0, **unsupported}]}) + "\n__NVD_PROBE_END__\n")
    assert facts.gpus[0].fabric_state is None and facts.gpus[0].errors == ()
