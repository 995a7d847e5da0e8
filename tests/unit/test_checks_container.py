"""container.runtime: CDI devices vs the driver's GPUs, stale CDI specs, docker/containerd set up for NVIDIA."""

from __future__ import annotations

from pathlib import Path

import pytest
from _catalog_helpers import CATALOG, context, result, run_check, sim_check, sim_results, timed_out

from nvdeploy.collect.catalog import specs_for
from nvdeploy.collect.stack import CDI_LIST, CONTAINER_FILES, CONTAINER_RUN
from nvdeploy.parsers.container import (
    containerd_nvidia,
    docker_nvidia,
    parse_cdi_list,
    parse_container_files,
    spec_driver,
)
from nvdeploy.results import ErrorReason, Remediation, Verdict
from nvdeploy.sim.scenario import NodeScenario
from nvdeploy.sim.tools import run_tool

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "container"
CHECK = "container.runtime"


def only(findings):
    assert len(findings) == 1, findings
    return findings[0]


def test_real_cdi_list_of_8_h100():
    cdi = parse_cdi_list((REAL / "cdi-list-h100-8x.stdout").read_text(), (REAL / "cdi-list-h100-8x.stderr").read_text())
    assert cdi.gpu_indices == tuple(range(8)) and cdi.found == 17 and len(cdi.gpu_names) == 17


def test_real_cdi_list_with_counts_after_the_name():
    cdi = parse_cdi_list((REAL / "cdi-list-t4-with-counts-1.17.0.txt").read_text())
    assert cdi.gpu_indices == (0,) and cdi.found == 2


def test_real_listing_of_a_node_without_runtime():
    files = parse_container_files((REAL / "find-container-files-no-runtime.stdout").read_text())
    assert files.binaries == () and files.files == {}
    assert "No such file or directory" in (REAL / "find-container-files-no-runtime.stderr").read_text()


def test_listing_with_binaries_configs_and_specs():
    text = ("\n== /usr/bin/dockerd\n\n== /usr/bin/containerd\n\n== /etc/docker/daemon.json\n"
            '{"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}}\n'
            "\n== /etc/cdi/nvidia.yaml\ncdiVersion: 0.5.0\n"
            "  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.550.90.07\n")
    files = parse_container_files(text)
    assert files.docker and files.containerd
    assert docker_nvidia(files.files["/etc/docker/daemon.json"]) == (True, "runtimes.nvidia")
    assert spec_driver(files.cdi_specs()["/etc/cdi/nvidia.yaml"]) == "550.90.07"


@pytest.mark.parametrize("text, ok", [
    ('{"features": {"cdi": true}}', True),
    ('{"default-runtime": "nvidia", "runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}', True),
    ('{"log-driver": "json-file"}', False),
    ("{not json", None),
])
def test_docker_config(text, ok):
    assert docker_nvidia(text)[0] is ok


def test_containerd_config():
    assert containerd_nvidia('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n')[0]
    assert containerd_nvidia('[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true\n')[0]
    assert not containerd_nvidia("version = 2\n")[0]


def test_healthy_container_node_passes():
    finding = only(sim_check(CHECK, "container_ready"))
    assert finding.verdict is Verdict.PASS and finding.observed["cdi_gpus"] == 8


def test_no_runtime_skips_and_none_declared_skips():
    assert only(sim_check(CHECK)).verdict is Verdict.SKIP
    assert only(sim_check(CHECK, "container_ready", host_vars={"container_runtime": "none"})).verdict is Verdict.SKIP


@pytest.mark.parametrize("faults, words", [
    (("docker",), "docker not set up for NVIDIA GPUs"),
    (("containerd",), "containerd not set up for NVIDIA GPUs"),
    (("cdi_stale",), "generated for driver 535.161.08, the node runs 550.90.07"),
    (("cdi_short",), "CDI lists 7 GPUs, the driver 8 (missing GPU [7])"),
])
def test_gaps_fail_with_the_command_that_fixes_them(faults, words):
    finding = only(sim_check(CHECK, *faults))
    assert finding.verdict is Verdict.FAIL and finding.remediation is Remediation.TUNE
    assert words in finding.summary and "nvidia-ctk" in finding.summary


def test_missing_or_hung_tools_are_error():
    assert only(sim_check(CHECK, "bare", "docker")).reason is ErrorReason.TOOL_MISSING  # no nvidia-ctk
    assert only(sim_check(CHECK, "container_ready", "hang")).reason is ErrorReason.TIMEOUT
    scenario = NodeScenario("n", CATALOG.get("h100-sxm-8x"), ("container_ready",))
    base = sim_results(scenario, [CONTAINER_FILES, "nvidia_smi_xml"])
    for cdi, reason in ((timed_out(CDI_LIST), ErrorReason.TIMEOUT),
                        (result(CDI_LIST, rc=1, stderr="ERRO[0000] failed to load CDI specs\n"),
                         ErrorReason.UNPARSEABLE)):
        finding = only(run_check(CHECK, context({**base, CDI_LIST: cdi})))
        assert (finding.verdict, finding.reason) == (Verdict.ERROR, reason)


# --- container.gpu_run ---------------------------------------------------------------------------------------------

IMAGE = {"container_image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}
RUN = "container.gpu_run"


def test_gpu_run_skips_without_an_image_and_runs_true():
    assert only(sim_check(RUN)).verdict is Verdict.SKIP
    [spec] = specs_for([CONTAINER_RUN], {}, heavy=False)
    assert spec.argv == ("true",)
    [spec] = specs_for([CONTAINER_RUN], {**IMAGE, "container_timeout": 42}, heavy=False)
    assert spec.argv == ("docker", "run", "--rm", "--pull=never", "--gpus", "all", IMAGE["container_image"],
                         "nvidia-smi", "-L") and spec.timeout_s == 42


def test_gpu_run_passes_when_the_container_sees_every_gpu():
    finding = only(sim_check(RUN, "container_ready", host_vars=IMAGE))
    assert finding.verdict is Verdict.PASS and finding.observed == 8


def test_real_no_toolkit_error_fails_with_the_fix():
    scenario = NodeScenario("n", CATALOG.get("h100-sxm-8x"))
    smi = sim_results(scenario, ["nvidia_smi_xml"])
    err = (REAL / "docker-run-gpus-no-toolkit.stderr").read_text()
    finding = only(run_check(RUN, context({**smi, CONTAINER_RUN: result(CONTAINER_RUN, rc=125, stderr=err)},
                                          host_vars=IMAGE)))
    assert finding.verdict is Verdict.FAIL and finding.remediation is Remediation.TUNE
    assert "nvidia-ctk runtime configure --runtime=docker" in finding.summary
    assert only(sim_check(RUN, "ctk_missing", host_vars=IMAGE)).verdict is Verdict.FAIL


def test_container_seeing_fewer_gpus_fails_naming_them():
    scenario = NodeScenario("n", CATALOG.get("h100-sxm-8x"))
    smi = sim_results(scenario, ["nvidia_smi_xml"])
    full = run_tool(scenario, ["nvidia-smi", "-L"]).stdout.decode()
    seven = "".join(full.splitlines(keepends=True)[:7])
    finding = only(run_check(RUN, context({**smi, CONTAINER_RUN: result(CONTAINER_RUN, seven)}, host_vars=IMAGE)))
    assert finding.verdict is Verdict.FAIL and "missing GPU [7]" in finding.summary


def test_gpu_run_errors_and_image_missing():
    assert only(sim_check(RUN, host_vars=IMAGE)).reason is ErrorReason.TOOL_MISSING  # no docker
    assert only(sim_check(RUN, "container_ready", "hang", host_vars=IMAGE)).reason is ErrorReason.TIMEOUT
    missing = only(sim_check(RUN, "container_ready", "image_missing", host_vars=IMAGE))
    assert missing.verdict is Verdict.FAIL and "No such image" in missing.summary
    scenario = NodeScenario("n", CATALOG.get("h100-sxm-8x"))
    smi = sim_results(scenario, ["nvidia_smi_xml"])
    odd = only(run_check(RUN, context({**smi, CONTAINER_RUN: result(CONTAINER_RUN, "hello\n")}, host_vars=IMAGE)))
    assert (odd.verdict, odd.reason) == (Verdict.ERROR, ErrorReason.UNPARSEABLE)
