"""--via slurm: multi-node nccl-tests run as ONE srun step from the controller (the cluster's MPI plugin), never
mpirun; the output is judged as mpirun's is. ``srun``/``mpirun`` here are recording stand-ins on PATH (real
subprocesses): the srun one prints the table the simulated tools would print."""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from nvdeploy.config.inventory import Host
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.multinode import MultiNodeRunner
from nvdeploy.results import ErrorReason, Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.runner.record import RunRecorder
from nvdeploy.sim.mpi_tool import multinode_table
from nvdeploy.sim.scenario import NodeScenario
from nvdeploy.slurm.srun import POOL_VAR, SrunOptions, SrunPool, nccl_srun_argv

CATALOG = ProfileCatalog()
PROFILE = "h100-sxm-8x"
NODES = ["gpu1", "gpu2", "gpu3"]


def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: str, srun_body: str = 'cat "$TABLE"') -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    (tmp_path / "table.txt").write_text(table)
    for name, body in (("srun", srun_body), ("mpirun", "exit 1"), ("scancel", "exit 0")):
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\nprintf "%s\\n" "{name} $*" >> {shlex.quote(str(calls))}\n{body}\n')
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("TABLE", str(tmp_path / "table.txt"))
    return calls


def table(faults: dict[str, tuple[str, ...]]) -> str:
    scenario = NodeScenario(NODES[0], CATALOG.get(PROFILE), faults.get(NODES[0], ()),
                            peers=tuple((n, faults.get(n, ())) for n in NODES[1:]))
    out = multinode_table(scenario, [(n, 8) for n in NODES], {"NCCL_DEBUG": "VERSION"},
                          ["-b", "8G", "-e", "8G", "-f", "2", "-g", "1", "-c", "1"],
                          {n: faults.get(n, ()) for n in NODES})
    return out.stdout.decode()


def runner(tmp_path: Path, mpi: str = "pmix", timeout: float = 60) -> tuple[MultiNodeRunner, SrunPool]:
    pool = SrunPool([], SrunOptions(mpi=mpi, job_name="nvdeploy-t"))
    hosts = [Host(n, {"profile": PROFILE, "connection": "slurm", POOL_VAR: pool.key, "nccl_timeout": timeout})
             for n in NODES]
    return MultiNodeRunner(hosts, CATALOG, EngineOptions(), RunRecorder(tmp_path / "run"), hosts), pool


@pytest.mark.parametrize("mpi", ["pmix", "none"])
def test_via_slurm_runs_one_srun_step_with_the_mpi_plugin_never_mpirun(tmp_path, monkeypatch, mpi):
    calls = tools(tmp_path, monkeypatch, table({}))
    multi, pool = runner(tmp_path, mpi)
    try:
        run = multi.run_group(NODES)
    finally:
        pool.release()
    lines = calls.read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("srun ") and not any(x.startswith("mpirun") for x in lines)
    argv = lines[0].split()
    assert f"--mpi={mpi}" in argv and "--nodes=3" in argv and "--nodelist=gpu1,gpu2,gpu3" in argv
    assert "--ntasks-per-node=8" in argv and "--gpus-per-node=8" in argv
    assert argv[-11:] == ["all_reduce_perf", "-b", "8G", "-e", "8G", "-f", "2", "-g", "1", "-c", "1"]
    assert run.ok and run.busbw is not None and run.busbw > 300
    assert all(a.verdict in (Verdict.PASS, Verdict.WARN) for a in run.assessments)
    assert run.evidence and b"# Avg bus bandwidth" in (tmp_path / "run" / run.evidence).read_bytes()
    assert pool.steps and pool.steps[0]["command"].startswith("srun --mpi=")


def test_srun_output_is_judged_as_mpiruns_a_slow_node_fails(tmp_path, monkeypatch):
    tools(tmp_path, monkeypatch, table({"gpu2": ("nccl_low_bw",)}))
    multi, pool = runner(tmp_path)
    try:
        run = multi.run_group(NODES)
    finally:
        pool.release()
    assert not run.ok and any(a.verdict is Verdict.FAIL and a.unit == "GB/s" for a in run.assessments)


def test_a_step_past_its_limit_is_cancelled_and_error_timeout(tmp_path, monkeypatch):
    calls = tools(tmp_path, monkeypatch, "", srun_body=f"exec {shlex.quote(sys.executable)} -c "
                  "'import time; time.sleep(120)'")
    multi, pool = runner(tmp_path)
    multi.deadline_at = time.monotonic() + 3  # the round's limit is capped by the deadline
    try:
        run = multi.run_group(NODES)
    finally:
        pool.release()
    (assessment,) = run.assessments
    assert assessment.verdict is Verdict.ERROR and assessment.reason is ErrorReason.TIMEOUT
    assert "srun on" in assessment.summary
    assert any(line.startswith("scancel --full --name=nvdeploy-t-nccl") for line in calls.read_text().splitlines())


def test_fewer_ranks_than_gpus_per_node_when_the_host_says_so() -> None:
    argv = nccl_srun_argv(["a", "b"], 8, SrunOptions(mpi="none"), ["all_reduce_perf"], 60, "j", ranks_per_node=2)
    assert "--mpi=none" in argv and "--ntasks-per-node=2" in argv and "--gpus-per-node=8" in argv


def test_ctrl_c_during_the_step_cancels_it_and_stops_srun(tmp_path, monkeypatch):
    pid_file = tmp_path / "srun.pid"
    calls = tools(tmp_path, monkeypatch, "", srun_body=f"echo $$ > {shlex.quote(str(pid_file))}; "
                  f"exec {shlex.quote(sys.executable)} -c 'import time; time.sleep(120)'")
    multi, pool = runner(tmp_path)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    def press_ctrl_c_once_srun_runs() -> None:
        for _ in range(600):
            if pid_file.exists() and pid_file.read_text().strip():
                break
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGALRM)  # handled in the main thread, as the CLI's SIGINT handler is

    previous = signal.signal(signal.SIGALRM, interrupt)
    presser = threading.Thread(target=press_ctrl_c_once_srun_runs, daemon=True)
    try:
        presser.start()
        with pytest.raises(KeyboardInterrupt):
            multi.run_group(NODES)
    finally:
        presser.join(70)
        signal.signal(signal.SIGALRM, previous)
        pool.release()
    assert any(line.startswith("scancel --full --name=nvdeploy-t-nccl") for line in calls.read_text().splitlines())
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # srun is gone (reaped), not left running
