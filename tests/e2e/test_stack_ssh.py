"""cuda.compat, gpu.mps, container.runtime and container.gpu_run over real SSH (OpenSSH on loopback, the
simulator's fake find, MPS control, nvidia-ctk and docker on each node's PATH; the MPS collector's ``sh -c`` pipe
runs in the node's real bash)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import ErrorReason, Remediation, Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim.scenario import NodeScenario

CATALOG = ProfileCatalog()
PROFILE = CATALOG.get("h100-sxm-8x")
CHECKS = EngineOptions(checks=("driver.loaded", "cuda.compat", "gpu.mps", "container.runtime", "container.gpu_run",
                               "power.node"))
IMAGE = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("requires_sshd")]


def scenario(name: str, *faults: str) -> tuple[str, str]:
    return name, NodeScenario(name, PROFILE, tuple(faults)).to_json()


def test_cuda_compat_and_mps_over_ssh(ssh_cluster_factory, tmp_path: Path):
    cluster = ssh_cluster_factory([
        scenario("ok"), scenario("newcuda", "cuda_toolkit:13.0.2"),
        scenario("fwdcompat", "cuda_toolkit:13.0.2", "cuda_compat:13.0"), scenario("minor", "cuda_toolkit:12.8.1"),
        scenario("mpsup", "mps_running"), scenario("mpsdown"), scenario("mpsgone", "mps_missing"),
        scenario("ctr", "container_ready"), scenario("stale", "cdi_stale"), scenario("bare_docker", "docker"),
        scenario("noctk", "ctk_missing")])
    mps = {"mps": True, "rack": "r1", "rack_power_budget_w": 12000}
    path = tmp_path / "ssh.yaml"
    path.write_text(cluster.inventory_yaml(
        profile="h100-sxm-8x", command_timeout=120, connect_timeout=30,
        extra_host_vars={"mpsup": {**mps, "mps_pipe_dir": "/run/nvidia mps"}, "mpsdown": mps, "mpsgone": mps,
                         "ctr": {"container_image": IMAGE}, "noctk": {"container_image": IMAGE},
                         "ok": {"rack": "r2", "rack_power_budget_w": 6000}}))
    outcome = run_validate(load_inventory(path, CATALOG), CATALOG, CHECKS, tmp_path / "reports")
    found = {(n.name, f.check): f for n in outcome.run.nodes for f in n.findings}

    ok = found[("ok", "cuda.compat")]
    assert ok.verdict is Verdict.PASS and ok.observed == {"/usr/local/cuda-12.4": "12.4.0"}
    # The build machine's own /usr/local (it has a CUDA 13.0 folder) never leaks into a fake node.
    assert "cuda-13.0" not in str(ok.observed)
    new = found[("newcuda", "cuda.compat")]
    assert (new.verdict, new.remediation) == (Verdict.FAIL, Remediation.REINSTALL)
    assert "needs driver >= 580.95.05" in new.summary
    assert found[("fwdcompat", "cuda.compat")].verdict is Verdict.PASS
    assert "forward compatibility" in found[("fwdcompat", "cuda.compat")].summary
    assert found[("minor", "cuda.compat")].verdict is Verdict.WARN

    assert found[("ok", "gpu.mps")].verdict is Verdict.SKIP
    up = found[("mpsup", "gpu.mps")]
    assert up.verdict is Verdict.PASS and "/run/nvidia mps" in up.summary
    down = found[("mpsdown", "gpu.mps")]
    assert (down.verdict, down.remediation) == (Verdict.FAIL, Remediation.TUNE)
    gone = found[("mpsgone", "gpu.mps")]
    assert (gone.verdict, gone.reason) == (Verdict.ERROR, ErrorReason.TOOL_MISSING)

    assert found[("ok", "container.runtime")].verdict is Verdict.SKIP  # no runtime on the node
    ready = found[("ctr", "container.runtime")]
    assert ready.verdict is Verdict.PASS and ready.observed["cdi_gpus"] == 8
    stale = found[("stale", "container.runtime")]
    assert stale.verdict is Verdict.FAIL and "generated for driver 535.161.08" in stale.summary
    unset = found[("bare_docker", "container.runtime")]
    assert unset.verdict is Verdict.FAIL and "nvidia-ctk runtime configure --runtime=docker" in unset.summary

    assert found[("ok", "container.gpu_run")].verdict is Verdict.SKIP  # no image named
    run = found[("ctr", "container.gpu_run")]
    assert run.verdict is Verdict.PASS and run.observed == 8
    noctk = found[("noctk", "container.gpu_run")]
    assert noctk.verdict is Verdict.FAIL and "could not select device driver" in noctk.summary
    assert found[("noctk", "container.runtime")].reason is ErrorReason.TOOL_MISSING  # no nvidia-ctk

    # Power: rack r1 (3 nodes x 8 x 700 W = 16.8 kW) is over its 12 kW budget, r2 (one node, 5.6 kW) is not.
    budgets = {f.summary.split(" (")[0]: f for f in outcome.run.cluster_findings if f.check == "power.budget"}
    assert budgets["rack r1"].verdict is Verdict.FAIL and budgets["rack r1"].observed == 16800
    assert budgets["rack r2"].verdict is Verdict.PASS
    assert found[("ok", "power.node")].observed["draw_w"] > 0

    # Evidence: the raw listing and the daemon's own words, as the node printed them.
    evidence = outcome.run_dir / "evidence"
    assert "== /usr/local/cuda-13.0/compat/libcuda.so.580.95.05" in (evidence / "fwdcompat" / "cuda_toolkits.out") \
        .read_text()
    assert "Cannot find MPS control daemon process" in (evidence / "mpsdown" / "mps_control.out").read_text()


def test_gpudirect_pairs_over_ssh(ssh_cluster_factory, tmp_path: Path):
    # Pairs (g1, g2) and (g3, g4) run side by side; g4 is slow as the client, then again when re-tested against
    # g1, so only g4 is named. perftest's server and client run on different nodes, each under its own timeout.
    cluster = ssh_cluster_factory([scenario("g1"), scenario("g2"), scenario("g3"), scenario("g4", "gpudirect_slow")])
    path = tmp_path / "ssh.yaml"
    path.write_text(cluster.inventory_yaml(profile="h100-sxm-8x", command_timeout=120, connect_timeout=30))
    outcome = run_validate(load_inventory(path, CATALOG), CATALOG,
                           EngineOptions(checks=("driver.loaded", "rdma.gpudirect")), tmp_path / "reports",
                           level="full")
    verdicts = {n.name: n.verdict for n in outcome.run.nodes}
    why = [(n.name, f.check, f.verdict.value, f.summary) for n in outcome.run.nodes for f in n.findings
           if f.verdict is not Verdict.PASS]
    assert verdicts == {"g1": Verdict.PASS, "g2": Verdict.PASS, "g3": Verdict.PASS, "g4": Verdict.FAIL}, why
    slow = [f for f in outcome.run.nodes[3].findings if f.check == "rdma.gpudirect"]
    assert [f.summary.split(" rail ")[0] for f in slow] == ["g3 -> g4", "g1 -> g4"]  # its pair, then the re-test
    # Without rdma.rails there is no rail map: the default rail only, and each finding says so.
    assert all("rail GPU0 mlx5_0 port 1 [no rail map: the default rail only]" in f.summary for f in slow)
    assert all((f.verdict, f.observed, f.expected) == (Verdict.FAIL, 180.0, ">= 320") for f in slow)
    evidence = sorted((outcome.run_dir / "evidence" / "_cluster").glob("gpudirect_*_g3-g4_mlx5_0_client.out"))
    assert evidence and "BW average[Gb/sec]" in evidence[0].read_text()


def test_gpudirect_dmabuf_path_over_ssh(ssh_cluster_factory, tmp_path: Path):
    # The kernel_driver collector is GNU find over /proc on the node; the fake find answers for the node's module
    # flavour (open_modules) and kernel. Open modules without nvidia_peermem: DMA-BUF, PASS; proprietary: FAIL.
    cluster = ssh_cluster_factory([scenario("legacy"), scenario("dmabuf", "peermem_missing", "open_modules"),
                                   scenario("nopath", "peermem_missing")])
    path = tmp_path / "ssh.yaml"
    path.write_text(cluster.inventory_yaml(profile="h100-sxm-8x", command_timeout=120, connect_timeout=30))
    outcome = run_validate(load_inventory(path, CATALOG), CATALOG,
                           EngineOptions(checks=("driver.loaded", "ib.peermem")), tmp_path / "reports")
    found = {n.name: f for n in outcome.run.nodes for f in n.findings if f.check == "ib.peermem"}
    assert (found["legacy"].verdict, found["legacy"].observed) == (Verdict.PASS, "nvidia_peermem")
    assert (found["dmabuf"].verdict, found["dmabuf"].observed) == (Verdict.PASS, "dma-buf")
    assert "open kernel module 550.90.07 on kernel 5.15.0-105-generic" in found["dmabuf"].summary
    assert found["nopath"].verdict is Verdict.FAIL and "proprietary" in found["nopath"].summary
    evidence = (outcome.run_dir / "evidence" / "dmabuf" / "kernel_driver.out").read_text()
    assert "NVIDIA UNIX Open Kernel Module for x86_64" in evidence and "== /proc/sys/kernel/osrelease" in evidence
