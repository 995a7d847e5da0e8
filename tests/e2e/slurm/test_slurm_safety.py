"""The scheduler's state is safe whatever the run finds or however it ends, against the real Slurm 22.05 of
slurm_harness.py: resume only what this run re-checked, every ending (normal, error, Ctrl-C, SIGTERM, SIGHUP,
SIGKILL + ``nvdeploy slurm recover``) leaves no failed node schedulable, the reservation covers the run, an
unreadable job list is busy, and the ``--via slurm`` batch travels on stdin."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest
from slurm_harness import PROFILE, SlurmTestCluster

from nvdeploy.inventory import Host
from nvdeploy.slurm.client import SlurmClient
from nvdeploy.slurm.srun import SrunOptions, SrunPool
from nvdeploy.transport import batch
from nvdeploy.transport.base import CommandSpec

pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("slurm")]
MAX_ARG_STRLEN = 128 * 1024


def test_via_slurm_batch_larger_than_one_argv_word_travels_on_stdin(slurm: SlurmTestCluster,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch over MAX_ARG_STRLEN (one execve word) runs: srun gets it on stdin, not as an argument."""
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    words = ("a" * 90_000, "b" * 90_000)  # each word fits one argument on the node; the script does not
    spec = CommandSpec("big", ("printf", "%s%s", *words), 60)
    assert len(batch.build_script([spec]).encode()) > MAX_ARG_STRLEN
    pool = SrunPool([Host("node1", {})], SrunOptions(partition="debug", job_name="nvd-big"),
                    SlurmClient(timeout_s=10), gather_s=0.1)
    try:
        (result,) = pool.run("node1", [spec], 120.0)
    finally:
        pool.release()
    assert result.error is None and result.rc == 0, (result.error, result.error_detail, pool.steps)
    assert result.stdout == (words[0] + words[1]).encode()
    (step,) = pool.steps
    assert len(step["command"]) < 4096 and step["command"].endswith("<batch on stdin>")


def run_nvdeploy(slurm: SlurmTestCluster, *args: str, path_first: Optional[Path] = None,
                 timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(slurm.env)
    if path_first is not None:
        env["PATH"] = f"{path_first}:{env.get('PATH', '/usr/bin:/bin')}"
    return subprocess.run([sys.executable, "-m", "nvdeploy", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def sim_inventory(tmp_path: Path, extra: str = "", vars_: str = "") -> Path:
    path = tmp_path / "inv.yaml"
    path.write_text(f"all:\n  vars: {{profile: {PROFILE}, cluster: sl, connection: sim{vars_}}}\n  children:\n"
                    f"    gpu:\n      slurm: {{partition: debug, states: [idle, drained, draining, mixed, allocated]}}"
                    f"\n{extra}")
    return path


def results(tmp_path: Path) -> dict:
    (path,) = sorted((tmp_path / "out").glob("*/*/results.json"), key=lambda p: p.stat().st_mtime)[-1:]
    return json.loads(path.read_text())


def findings(data: dict, node: str, check: str) -> list[dict]:
    return [f for n in data["nodes"] if n["name"] == node for f in n["findings"] if f["check"] == check]


def test_unreadable_job_list_means_a_draining_node_is_not_idle(slurm: SlurmTestCluster, tmp_path: Path) -> None:
    """squeue fails: a draining node whose jobs may still run gets no heavy test (ERROR not_run), never a DCGM
    diag beside the job."""
    submitted = slurm.cmd("sbatch", "-w", "node1", "-o", "/dev/null", "--wrap", "sleep 300")
    assert submitted.returncode == 0, submitted.stderr
    assert slurm.wait_for(lambda: slurm.states().get("node1") in ("mix", "alloc"), 30), slurm.states()
    slurm.cmd("scontrol", "update", "nodename=node1", "state=drain", "reason=ops: retire after the job")
    assert slurm.wait_for(lambda: slurm.states().get("node1") == "drng", 30), slurm.states()
    broken = tmp_path / "bin"
    broken.mkdir()
    (broken / "squeue").write_text("#!/bin/sh\necho 'squeue: error: slurm_load_jobs error: Unable to contact "
                                   "slurm controller (connect failure)' >&2\nexit 1\n")
    (broken / "squeue").chmod(0o755)
    done = run_nvdeploy(slurm, "validate", "-i", str(sim_inventory(tmp_path)), "--out", str(tmp_path / "out"),
                        "--no-history", "--level", "standard", path_first=broken)
    assert done.returncode == 3, done.stdout + done.stderr
    data = results(tmp_path)
    (diag,) = findings(data, "node1", "dcgm.diag_r2")
    assert (diag["verdict"], diag["reason"]) == ("ERROR", "not_run"), diag
    assert "could not tell whether Slurm jobs still run" in diag["summary"] and "Unable to contact" in diag["summary"]
    assert [f["verdict"] for f in findings(data, "node1", "gpu.count")] == ["PASS"]  # the light checks ran
    assert [f["verdict"] for f in findings(data, "node2", "dcgm.diag_r2")] == ["PASS"]


DCGM_REASON = "nvdeploy 20261130T010000Z-aaaaaa: dcgm.diag_r2 Fail"


def slurm_phase(data: dict) -> dict:
    (phase,) = [p for p in data["phases"] if p["phase"] == "slurm"]
    return phase


def test_resume_passed_needs_the_checks_named_in_the_drain_reason(slurm: SlurmTestCluster, tmp_path: Path) -> None:
    """A node a standard run drained for DCGM, the fault still there: a quick run (no DCGM) says PASS but leaves it
    drained, saying why; a standard run that passes DCGM resumes it."""
    slurm.cmd("scontrol", "update", "nodename=node2", "state=drain", f"reason={DCGM_REASON}")
    extra = "      hosts:\n        node2: {sim_faults: ['dcgm_fail:memory']}\n"
    common = ("--out", str(tmp_path / "out"), "--no-history", "--resume-passed")
    quick = run_nvdeploy(slurm, "validate", "-i", str(sim_inventory(tmp_path, extra)), *common)
    assert quick.returncode == 0, quick.stdout + quick.stderr
    assert slurm.reasons().get("node2") == DCGM_REASON and slurm.states()["node2"] == "drain"
    actions = {a["node"]: a for a in slurm_phase(results(tmp_path))["actions"]}
    assert actions["node2"]["action"] == "leave", actions
    assert "this run did not run dcgm.diag_r2 (named in its drain reason)" in actions["node2"]["message"]
    standard = run_nvdeploy(slurm, "validate", "-i", str(sim_inventory(tmp_path)), *common, "--level", "standard")
    assert standard.returncode == 0, standard.stdout + standard.stderr
    assert "node2" not in slurm.reasons() and slurm.states()["node2"] == "idle"


def test_resume_passed_inside_the_reservation_drains_a_node_not_rechecked_again(slurm: SlurmTestCluster,
                                                                              tmp_path: Path) -> None:
    """--via slurm --maintenance resumes our drained nodes inside the reservation to reach them; one whose drain
    reason names a check this run did not run is drained again with that reason."""
    slurm.cmd("scontrol", "update", "nodename=node2", "state=drain", f"reason={DCGM_REASON}")
    path = tmp_path / "srun.yaml"
    path.write_text(f"all:\n  vars: {{profile: {PROFILE}, cluster: sl, command_timeout: 60}}\n  children:\n"
                    "    gpu:\n      slurm: {partition: debug, states: [idle, drained], timeout: 20}\n")
    done = run_nvdeploy(slurm, "validate", "-i", str(path), "--out", str(tmp_path / "out"), "--no-history",
                        "--via", "slurm", "--maintenance", "30m", "--resume-passed")
    assert done.returncode == 0, done.stdout + done.stderr
    assert slurm.reasons().get("node2") == DCGM_REASON and slurm.states()["node2"] == "drain"
    actions = {a["node"]: a for a in slurm_phase(results(tmp_path))["actions"]}
    assert actions["node2"]["action"] == "drain" and "this run did not run dcgm.diag_r2" in actions["node2"]["message"]
