"""The scheduler's state is safe whatever the run finds or however it ends, against the real Slurm 22.05 of
slurm_harness.py: resume only what this run re-checked, every ending (normal, error, Ctrl-C, SIGTERM, SIGHUP,
SIGKILL + ``nvdeploy slurm recover``) leaves no failed node schedulable, the reservation covers the run, an
unreadable job list is busy, and the ``--via slurm`` batch travels on stdin."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import pytest
from slurm_harness import KILL_WAIT_MARGIN_S, PROFILE, SlurmTestCluster

from nvdeploy.config.inventory import Host
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


OURS_FAULTY = "nvdeploy 20261130T010000Z-aaaaaa: gpu.count 7/8"
OURS_FIXED = "nvdeploy 20261130T010000Z-bbbbbb: gpu.count 7/8"
# What the run does to the scheduler, in order: each can be where a SIGKILL lands.
WRAPPED = """#!/bin/sh
case "$*" in
  *"create reservation"*) step=create;;
  *"delete reservationname"*) step=delete;;
  *"state=resume"*) step=resume;;
  *"state=drain"*) step=drain;;
  *) exec {real} "$@";;
esac
echo "$step" >>"$NVD_STEP_LOG"
[ "$NVD_KILL_AT" = "$step:before" ] && {{ kill -9 $PPID; exit 1; }}
{real} "$@"; rc=$?
[ "$NVD_KILL_AT" = "$step:after" ] && kill -9 $PPID
exit $rc
"""
SRUN = """#!/bin/sh
echo srun >>"$NVD_STEP_LOG"
[ "$NVD_KILL_AT" = "srun:before" ] && {{ kill -9 $PPID; exit 1; }}
exec {real} "$@"
"""


def window_setup(slurm: SlurmTestCluster, tmp_path: Path, faults_node1: tuple = ()) -> Path:
    """node2: drained by an earlier run and still faulty; node3: newly faulty; node4: drained by an earlier run,
    fixed since. The inventory: --via slurm over the debug partition."""
    slurm.cmd("scontrol", "update", "nodename=node2", "state=drain", f"reason={OURS_FAULTY}")
    slurm.cmd("scontrol", "update", "nodename=node4", "state=drain", f"reason={OURS_FIXED}")
    slurm.set_faults("node1", faults_node1)
    slurm.set_faults("node2", ("gpu_missing",))
    slurm.set_faults("node3", ("gpu_missing",))
    path = tmp_path / "srun.yaml"
    path.write_text(f"all:\n  vars: {{profile: {PROFILE}, cluster: sl, command_timeout: 200}}\n  children:\n"
                    "    gpu:\n      slurm: {partition: debug, states: [idle, drained], timeout: 20}\n")
    return path


def wrappers(tmp_path: Path) -> Path:
    folder = tmp_path / "wrap"
    folder.mkdir(exist_ok=True)
    for name, text in (("scontrol", WRAPPED), ("srun", SRUN)):
        real = shutil.which(name)
        assert real is not None
        (folder / name).write_text(text.format(real=real))
        (folder / name).chmod(0o755)
    return folder


WINDOW_ARGS = ("--via", "slurm", "--maintenance", "30m", "--drain-failed", "--resume-passed")


def run_dir_of(tmp_path: Path) -> Path:
    (state,) = (tmp_path / "out").glob("sl/*/slurm-state.json")
    return state.parent


def no_reservation(slurm: SlurmTestCluster) -> bool:
    return "nvdeploy-" not in slurm.cmd("scontrol", "show", "reservation").stdout


@pytest.mark.parametrize("kill_at", ["create:before", "create:after", "resume:after", "srun:before", "drain:after",
                                     "delete:before"])
def test_sigkill_at_each_step_of_the_window_then_recover(slurm: SlurmTestCluster, tmp_path: Path,
                                                         kill_at: str) -> None:
    """SIGKILL wherever it lands, then ``nvdeploy slurm recover``: no failed node schedulable, no reservation."""
    path = window_setup(slurm, tmp_path)
    log = tmp_path / "steps.log"
    env = dict(slurm.env, PATH=f"{wrappers(tmp_path)}:{slurm.env.get('PATH', os.environ['PATH'])}",
               NVD_KILL_AT=kill_at, NVD_STEP_LOG=str(log))
    killed = subprocess.run([sys.executable, "-m", "nvdeploy", "validate", "-i", str(path), "--out",
                             str(tmp_path / "out"), "--no-history", *WINDOW_ARGS], capture_output=True, text=True,
                            timeout=240, env=env, stdin=subprocess.DEVNULL)
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stdout + killed.stderr)
    print(f"\nkilled at {kill_at}; steps: {log.read_text().split()}; states: {slurm.states()}")
    run_dir = run_dir_of(tmp_path)
    assert not json.loads((run_dir / "slurm-state.json").read_text())["finished"]
    recovered = run_nvdeploy(slurm, "slurm", "recover", str(run_dir))
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    states, reasons = slurm.states(), slurm.reasons()
    assert states["node2"] == "drain" and reasons["node2"].startswith("nvdeploy "), (states, reasons)
    decided = kill_at in ("drain:after", "delete:before")  # the run had judged the nodes and written its plan
    if decided:
        assert states["node3"] == "drain" and "gpu.count 7/8" in reasons["node3"], (states, reasons)
        assert states["node4"] == "idle", states  # passed, resumed by the run's decision
    else:
        assert states["node3"] == "idle"  # never judged: as it was before the run
        assert reasons.get("node4") == OURS_FIXED and states["node4"] == "drain"  # not re-checked: drained again
    assert no_reservation(slurm)
    assert slurm.wait_for(lambda: not slurm.jobs(), KILL_WAIT_MARGIN_S), slurm.jobs()
    again = run_nvdeploy(slurm, "slurm", "recover", str(run_dir))
    assert again.returncode == 0 and "nothing to do" in again.stdout, again.stdout + again.stderr


def test_the_next_run_recovers_what_a_killed_run_left(slurm: SlurmTestCluster, tmp_path: Path) -> None:
    path = window_setup(slurm, tmp_path)
    env = dict(slurm.env, PATH=f"{wrappers(tmp_path)}:{slurm.env.get('PATH', os.environ['PATH'])}",
               NVD_KILL_AT="srun:before", NVD_STEP_LOG=str(tmp_path / "steps.log"))
    killed = subprocess.run([sys.executable, "-m", "nvdeploy", "validate", "-i", str(path), "--out",
                             str(tmp_path / "out"), "--no-history", *WINDOW_ARGS], capture_output=True, text=True,
                            timeout=240, env=env, stdin=subprocess.DEVNULL)
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert slurm.states()["node2"] in ("idle", "maint")  # resumed inside the reservation; the run is gone
    dead = run_dir_of(tmp_path).name
    following = run_nvdeploy(slurm, "validate", "-i", str(sim_inventory(tmp_path)), "--out", str(tmp_path / "out"),
                             "--no-history", "--drain-failed")
    assert f"slurm: run {dead} ended without putting the scheduler back; recovering it first" in following.stderr
    assert slurm.states()["node2"] == "drain" and slurm.reasons()["node2"].startswith("nvdeploy ")
    assert no_reservation(slurm)


@pytest.mark.parametrize("ending,code", [("SIGINT", 130), ("SIGTERM", 143), ("SIGHUP", 143)])
def test_signal_during_validation_puts_the_reopened_nodes_back(slurm: SlurmTestCluster, tmp_path: Path,
                                                               ending: str, code: int) -> None:
    path = window_setup(slurm, tmp_path, faults_node1=("hang",))
    proc = slurm.popen("validate", "-i", str(path), "--out", str(tmp_path / "out"), "--no-history", *WINDOW_ARGS)
    try:
        assert slurm.wait_for(lambda: any("nvdeploy" in j for j in slurm.jobs()), 60), slurm.jobs()
        assert "drain" not in slurm.states()["node2"]  # resumed inside the reservation: in the step now
        time.sleep(1.0)
        proc.send_signal(getattr(signal, ending))
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, out + err
    # The cancelled step's job may still be COMPLETING (slurmd escalates to SIGKILL after KillWait, 30 s by
    # default, later on a loaded machine); until it ends, a drained node reads "drng", not "drain".
    assert slurm.wait_for(lambda: not slurm.jobs(), KILL_WAIT_MARGIN_S), slurm.jobs()
    states, reasons = slurm.states(), slurm.reasons()
    assert reasons.get("node2") == OURS_FAULTY and states["node2"] == "drain", (states, reasons)
    assert reasons.get("node4") == OURS_FIXED and states["node4"] == "drain", (states, reasons)
    assert no_reservation(slurm)
    assert json.loads((run_dir_of(tmp_path) / "slurm-state.json").read_text())["finished"]


def test_an_error_after_validation_puts_the_reopened_nodes_back(slurm: SlurmTestCluster, tmp_path: Path) -> None:
    path = window_setup(slurm, tmp_path)
    inject = ("import sys, nvdeploy.slurm.window as w\n"
              "def boom(*args, **kwargs):\n    raise RuntimeError('boom after validation')\n"
              "w.SlurmWindow.finish = boom\nfrom nvdeploy.cli.app import main\nsys.argv[0] = 'nvdeploy'\nmain()\n")
    done = subprocess.run([sys.executable, "-c", inject, "validate", "-i", str(path), "--out", str(tmp_path / "out"),
                           "--no-history", *WINDOW_ARGS], capture_output=True, text=True, timeout=240,
                          env=slurm.env, stdin=subprocess.DEVNULL)
    assert done.returncode != 0 and "boom after validation" in done.stderr, done.stdout + done.stderr
    states, reasons = slurm.states(), slurm.reasons()
    assert reasons.get("node2") == OURS_FAULTY and states["node2"] == "drain", (states, reasons)
    assert reasons.get("node4") == OURS_FIXED and states["node4"] == "drain", (states, reasons)
    assert no_reservation(slurm)


def test_normal_end_finishes_the_journal(slurm: SlurmTestCluster, tmp_path: Path) -> None:
    path = window_setup(slurm, tmp_path)
    done = run_nvdeploy(slurm, "validate", "-i", str(path), "--out", str(tmp_path / "out"), "--no-history",
                        *WINDOW_ARGS)
    assert done.returncode == 1, done.stdout + done.stderr
    states = slurm.states()
    assert (states["node2"], states["node3"], states["node4"]) == ("drain", "drain", "idle"), states
    journal = json.loads((run_dir_of(tmp_path) / "slurm-state.json").read_text())
    assert journal["finished"] and journal["prior"]["node2"] == {"state": "drained", "drained": True,
                                                                 "reason": OURS_FAULTY}
    assert no_reservation(slurm)


def test_a_reservation_shorter_than_the_run_is_refused_with_the_figure(slurm: SlurmTestCluster,
                                                                      tmp_path: Path) -> None:
    """--maintenance 10m --level standard: DCGM r2 (1200 s) and nccl-tests (900 s) alone outlast it."""
    args = ("validate", "-i", str(sim_inventory(tmp_path)), "--out", str(tmp_path / "out"), "--no-history",
            "--level", "standard", "--maintenance", "10m", "--drain-failed")
    refused = run_nvdeploy(slurm, *args)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    # The figure grows with the heavy checks of the level (nvbandwidth's 600 s joined DCGM r2 and nccl-tests).
    assert re.search(r"--maintenance 10m is shorter than this run can take: up to [1-9]\d+m at level standard",
                     refused.stderr), refused.stderr
    assert "dcgm_diag_r2 1200 s" in refused.stderr and "Traceback" not in refused.stderr
    assert no_reservation(slurm) and not (tmp_path / "out").exists()
    bounded = run_nvdeploy(slurm, *args, "--deadline", "300")  # 300 s + the end's steps fit in 10 minutes
    assert bounded.returncode == 0, bounded.stdout + bounded.stderr
    assert no_reservation(slurm)
