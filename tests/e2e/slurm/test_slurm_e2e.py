"""End to end against a real Slurm 22.05 (slurmctld + 4 slurmd on this machine, tests/slurm/start-slurm.sh):
nodes from sinfo, drain/resume asserted with sinfo -R, --via slurm with per-node faults, node-check as a real
HealthCheckProgram, a maintenance window, and the faults (slurmctld down, node DOWN, hung task, Ctrl-C)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from slurm_harness import KILL_WAIT_MARGIN_S, PROFILE, SlurmTestCluster, prepare

# The tests of one xdist group run on one worker, which starts its own Slurm cluster (slurm_harness.py: its own
# folder and ports). Two groups, so the ~2.5 minutes of Slurm tests are not one worker's tail: the slowest three
# (a hung task's limit, slurmctld stopped and restarted twice) form the second.
pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("slurm")]
SECOND_CLUSTER = pytest.mark.xdist_group("slurm-2")
THEIRS = 'ops: fan "FAN2" $(touch /tmp/nvd-pwned) ; `id` | x'


def inventory(tmp_path: Path, group: str = "slurm: {partition: debug, timeout: 20}", extra: str = "",
              vars_: str = "command_timeout: 60") -> Path:
    path = tmp_path / "inv.yaml"
    path.write_text(f"all:\n  vars: {{profile: {PROFILE}, cluster: sl, {vars_}}}\n  children:\n    gpu:\n"
                    f"      {group}\n{extra}")
    return path


def latest(tmp_path: Path, name: str) -> list[Path]:
    """The file of the newest run (two runs can start in the same second: their ids do not sort by time)."""
    return sorted((tmp_path / "out").glob(f"*/*/{name}"), key=lambda p: p.stat().st_mtime)[-1:]


def results(tmp_path: Path) -> dict:
    (path,) = latest(tmp_path, "results.json")
    return json.loads(path.read_text())


def nodes_of(data: dict) -> dict:
    return {n["name"]: n for n in data["nodes"]}


def unreached(data: dict) -> dict:
    """Why each node could not be checked (system.reachable's ERROR summary): the message of a failed assertion."""
    return {n["name"]: f["summary"] for n in data["nodes"] for f in n["findings"]
            if f["check"] == "system.reachable" and f["verdict"] != "PASS"}


def bad_checks(node: dict) -> set:
    return {f["check"] for f in node["findings"] if f["verdict"] in ("FAIL", "ERROR")}


def validate(slurm: SlurmTestCluster, path: Path, tmp_path: Path, *args: str, timeout: float = 240):
    return slurm.nvdeploy("validate", "-i", str(path), "--out", str(tmp_path / "out"), "--no-history", *args,
                          timeout=timeout)


def test_nodes_from_real_sinfo_with_facts_and_gres(slurm: SlurmTestCluster, tmp_path: Path) -> None:
    slurm.cmd("scontrol", "update", "nodename=node4", "state=drain", f"reason={THEIRS}")
    listed = slurm.nvdeploy("inventory", "list", "-i", str(inventory(
        tmp_path, "slurm: {partition: debug, states: [idle]}", vars_="connection: sim")))
    assert listed.returncode == 0, listed.stderr
    assert [line.split("\t")[0] for line in listed.stdout.splitlines()] == ["node1", "node2", "node3"]
    done = validate(slurm, inventory(tmp_path, "slurm: {partition: debug}", vars_="connection: sim"), tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    data = nodes_of(results(tmp_path))
    assert data["node4"]["facts"]["slurm"]["state"] == "drained"
    assert data["node4"]["facts"]["slurm"]["reason"] == THEIRS
    assert data["node1"]["facts"]["slurm"]["gres_gpus"] == 8
    assert [f["verdict"] for f in data["node1"]["findings"] if f["check"] == "slurm.gres"] == ["PASS"]


def test_drain_failed_resume_only_what_nvdeploy_drained(slurm: SlurmTestCluster, tmp_path: Path) -> None:
    ours = "nvdeploy 20261130T010000Z-aaaaaa: gpu.count 7/8"
    slurm.cmd("scontrol", "update", "nodename=node3", "state=drain", f"reason={THEIRS}")
    slurm.cmd("scontrol", "update", "nodename=node4", "state=drain", f"reason={ours}")
    path = inventory(tmp_path, "slurm: {partition: debug, states: [idle, drained]}", vars_="connection: sim",
                     extra="      hosts:\n        node2: {sim_faults: [gpu_missing, xid79]}\n")
    dry = validate(slurm, path, tmp_path, "--drain-failed", "--resume-passed", "--slurm-dry-run")
    assert dry.returncode == 1
    assert "dry-run: scontrol update nodename=node2 state=drain 'reason=nvdeploy " in dry.stderr
    assert "dry-run: scontrol update nodename=node4 state=resume" in dry.stderr
    assert set(slurm.reasons()) == {"node3", "node4"}  # nothing changed
    done = validate(slurm, path, tmp_path, "--drain-failed", "--resume-passed")
    assert done.returncode == 1, done.stdout + done.stderr
    data = results(tmp_path)
    reasons = slurm.reasons()
    assert reasons["node2"] == f"nvdeploy {data['run_id']}: gpu.count 7/8, gpu.pci_visible 8/7, kmsg.xid Xid 79 x1"
    assert reasons["node3"] == THEIRS  # someone else's: never resumed, never overwritten
    # ours, and it passed: resumed (idle*, not responding, for a moment after a resume)
    assert "node4" not in reasons and slurm.states()["node4"].rstrip("*") == "idle"
    assert not Path("/tmp/nvd-pwned").exists()
    (phase,) = [p for p in data["phases"] if p["phase"] == "slurm"]
    actions = {a["node"]: a for a in phase["actions"]}
    assert actions["node2"]["message"] == "drained by this run" and actions["node2"]["status"] == "done"
    assert actions["node3"]["action"] == "leave" and "reason set by someone else" in actions["node3"]["message"]
    assert actions["node4"]["action"] == "resume" and actions["node4"]["status"] == "done"
    html = latest(tmp_path, "report.html")[0].read_text()
    assert "drained by this run" in html and "left drained: reason set by someone else" in html
    assert "Slurm idle, GRES gpu:8, partitions debug" in html  # node2's facts, in its section


def test_nodes_just_resumed_are_waited_for_not_reported_unreachable(slurm: SlurmTestCluster,
                                                                   tmp_path: Path) -> None:
    """Right after a resume Slurm shows a node "idle*" (not responding) until its next ping, and cannot allocate
    it: --via slurm waits for it (bounded) instead of reporting it unreachable (this failed CI once)."""
    for node in slurm.nodes:
        slurm.cmd("scontrol", "update", f"nodename={node}", "state=drain", "reason=maintenance")
        slurm.cmd("scontrol", "update", f"nodename={node}", "state=resume")
    print("\nstates right after the resume:", slurm.states(responding=True))
    slurm.set_faults("node2", ("gpu_missing",))
    done = validate(slurm, inventory(tmp_path), tmp_path, "--via", "slurm")
    data = results(tmp_path)
    assert done.returncode == 1, (done.stdout + done.stderr, unreached(data))
    assert not unreached(data)
    assert {n["name"]: n["verdict"] for n in data["nodes"]} == {"node1": "PASS", "node2": "FAIL", "node3": "PASS",
                                                               "node4": "PASS"}


def test_reason_with_quotes_and_metacharacters_is_one_argv_word(slurm: SlurmTestCluster) -> None:
    from nvdeploy.slurm.client import SlurmClient

    os.environ["SLURM_CONF"] = slurm.env["SLURM_CONF"]
    reason = "nvdeploy 20261201T000000Z-abcdef: kmsg.xid 79 'p\"q' $(touch /tmp/nvd-pwned2); `id` & | > x"
    SlurmClient(timeout_s=10).drain("node1", reason)
    assert slurm.reasons()["node1"] == reason
    assert not Path("/tmp/nvd-pwned2").exists()


def test_via_slurm_per_node_faults_judged_as_over_ssh(slurm: SlurmTestCluster, tmp_path: Path,
                                                     ssh_cluster_factory, requires_sshd) -> None:
    from nvdeploy.config.profiles import ProfileCatalog
    from nvdeploy.sim.scenario import NodeScenario

    faults = {"node1": (), "node2": ("gpu_missing",), "node3": ("xid79", "persistence_off"), "node4": ()}
    for node, node_faults in faults.items():
        slurm.set_faults(node, node_faults)
    started = time.monotonic()
    done = validate(slurm, inventory(tmp_path), tmp_path, "--via", "slurm")
    slurm_s = time.monotonic() - started
    assert done.returncode == 1, (done.stdout + done.stderr, unreached(results(tmp_path)))
    over_slurm = nodes_of(results(tmp_path))
    assert not unreached(results(tmp_path)), unreached(results(tmp_path))
    assert {n: d["connection"] for n, d in over_slurm.items()} == dict.fromkeys(faults, "slurm")
    profile = ProfileCatalog().get(PROFILE)
    cluster = ssh_cluster_factory([(n, NodeScenario(n, profile, f).to_json()) for n, f in faults.items()])
    ssh_inv = tmp_path / "ssh.yaml"
    ssh_inv.write_text(cluster.inventory_yaml(profile=PROFILE, command_timeout=60))
    started = time.monotonic()
    over = slurm.nvdeploy("validate", "-i", str(ssh_inv), "--out", str(tmp_path / "ssh"), "--no-history")
    ssh_s = time.monotonic() - started
    assert over.returncode == 1, over.stdout + over.stderr
    (ssh_results,) = (tmp_path / "ssh").glob("*/*/results.json")
    over_ssh = nodes_of(json.loads(ssh_results.read_text()))

    def comparable(node: dict) -> list:
        return sorted((f["check"], f["verdict"], f["summary"]) for f in node["findings"]
                      if f["check"] not in ("system.reachable", "slurm.gres"))

    for name in faults:
        slurm_side, ssh_side = comparable(over_slurm[name]), comparable(over_ssh[name])
        assert slurm_side == ssh_side, (name, sorted(set(slurm_side) ^ set(ssh_side)))
    assert bad_checks(over_slurm["node2"]) >= {"gpu.count"} and over_slurm["node1"]["verdict"] == "PASS"
    print(f"\nfan-out, 4 nodes, quick level, whole CLI run: --via slurm {slurm_s:.2f} s, over SSH {ssh_s:.2f} s")


def test_via_slurm_node_down_in_slurm_is_error_with_slurms_state(slurm: SlurmTestCluster, tmp_path: Path) -> None:
    slurm.cmd("scontrol", "update", "nodename=node4", "state=down", "reason=hw: PSU 2 failed")
    done = validate(slurm, inventory(tmp_path), tmp_path, "--via", "slurm")
    assert done.returncode == 3, done.stdout + done.stderr
    data = nodes_of(results(tmp_path))
    (reach,) = [f for f in data["node4"]["findings"] if f["check"] == "system.reachable"]
    assert reach["verdict"] == "ERROR" and reach["reason"] == "unreachable"
    assert reach["summary"] == "Slurm cannot start a task on node4: node is down (hw: PSU 2 failed)"
    assert all(data[n]["verdict"] == "PASS" for n in ("node1", "node2", "node3"))


@SECOND_CLUSTER
def test_via_slurm_hung_task_is_timeout_and_the_step_is_cancelled(slurm: SlurmTestCluster, tmp_path: Path) -> None:
    slurm.set_faults("node3", ("hang",))
    # The deadline ends node3's hang; the healthy nodes must finish well before it. At 25 s a loaded CI machine once
    # left node1 ERROR (its Python fake tools, all started at once, still running at the deadline).
    done = validate(slurm, inventory(tmp_path), tmp_path, "--via", "slurm", "--deadline", "45")
    assert done.returncode == 3, done.stdout + done.stderr
    data = nodes_of(results(tmp_path))
    reasons = {f["reason"] for f in data["node3"]["findings"] if f["verdict"] == "ERROR"}
    assert "timeout" in reasons, data["node3"]["findings"]
    assert data["node1"]["verdict"] == "PASS", [f for f in data["node1"]["findings"] if f["verdict"] != "PASS"]
    assert slurm.wait_for(lambda: not slurm.jobs(), 15), slurm.jobs()


def test_ctrl_c_during_the_job_cancels_it(slurm: SlurmTestCluster, tmp_path: Path) -> None:
    slurm.set_faults("node2", ("hang",))
    proc = slurm.popen("validate", "-i", str(inventory(tmp_path, vars_="command_timeout: 200")), "--out",
                       str(tmp_path / "out"), "--no-history", "--via", "slurm")
    try:
        assert slurm.wait_for(lambda: any("nvdeploy" in j for j in slurm.jobs()), 60), slurm.jobs()
        time.sleep(1.0)  # the step's tasks are running
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    # Cancelled: the job may stay COMPLETING until slurmd's KillWait (30 s) has passed and it sent SIGKILL.
    assert slurm.wait_for(lambda: not slurm.jobs(), KILL_WAIT_MARGIN_S), slurm.jobs()
    data = nodes_of(results(tmp_path))
    assert data["node2"]["verdict"] == "ERROR"


def _restart(slurm: SlurmTestCluster) -> None:
    import shutil

    slurm.stop()
    shutil.rmtree(slurm.dir, ignore_errors=True)
    started = slurm.start()
    assert started.returncode == 0, started.stderr
    prepare(slurm)


@SECOND_CLUSTER
def test_slurmctld_down_exit_2_with_slurms_message_before_any_node(slurm: SlurmTestCluster, tmp_path: Path) -> None:
    pid = int((slurm.dir / "slurmctld.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    try:
        done = validate(slurm, inventory(tmp_path, vars_="connection: sim"), tmp_path, timeout=120)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "Unable to contact slurm controller" in done.stderr or "no answer within" in done.stderr
        assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()
    finally:
        _restart(slurm)


@SECOND_CLUSTER
def test_slurmctld_down_after_validation_is_error_and_exit_3(slurm: SlurmTestCluster, tmp_path: Path) -> None:
    hosts = "      hosts:\n        node1: {sim_faults: [hang]}\n        node2: {sim_faults: [gpu_missing]}\n"
    path = inventory(tmp_path, vars_="connection: sim, command_timeout: 8", extra=hosts)
    proc = slurm.popen("validate", "-i", str(path), "--out", str(tmp_path / "out"), "--no-history",
                       "--drain-failed", "--slurm-timeout", "5")
    try:
        assert slurm.wait_for(lambda: (tmp_path / "out").exists(), 60)
        os.kill(int((slurm.dir / "slurmctld.pid").read_text()), signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 3, out + err
        data = results(tmp_path)
        (actions,) = [f for f in data["cluster_findings"] if f["check"] == "slurm.actions"]
        assert actions["verdict"] == "ERROR" and "scheduler step not completed" in actions["summary"]
        assert data["verdict"] == "NOT_READY"  # node2 still failed; the exit says the drain did not happen
    finally:
        if proc.poll() is None:
            proc.kill()
        _restart(slurm)


def test_node_check_as_slurm_health_check_program(slurm: SlurmTestCluster) -> None:
    node = slurm.node_dir("node3")
    env = dict(slurm.env, PATH=f"{node}/bin:/usr/bin:/bin", NVD_SCENARIO_FILE=f"{node}/scenario.json",
               NVDEPLOY_LOCK_DIR=f"{node}/lock")
    started = time.monotonic()
    healthy = subprocess.run([sys.executable, "-m", "nvdeploy", "node-check", "--profile", PROFILE, "--node",
                              "node3"], env=env, capture_output=True, text=True, timeout=60)
    seconds = time.monotonic() - started
    assert healthy.returncode == 0 and healthy.stdout.startswith("nvdeploy node-check node3: PASS"), healthy
    print(f"\nnode-check on a healthy fake-tool node: {seconds:.2f} s (process start to exit)")
    slurm.set_faults("node3", ("gpu_missing",))
    for name in ("node2", "node3"):
        (slurm.node_dir(name) / "health.on").touch()
    assert slurm.wait_for(lambda: slurm.reasons().get("node3", "").startswith("nvdeploy node-check "), 60), \
        slurm.reasons()
    assert "gpu.count 7/8" in slurm.reasons()["node3"] and "node2" not in slurm.reasons()
    slurm.set_faults("node3")
    assert slurm.wait_for(lambda: "node3" not in slurm.reasons(), 60), slurm.reasons()
    (node / "health.on").unlink()
    # A reason set by someone else is never resumed by the health check.
    slurm.cmd("scontrol", "update", "nodename=node2", "state=drain", f"reason={THEIRS}")
    time.sleep(5)
    assert slurm.reasons().get("node2") == THEIRS


def test_maintenance_window_end_to_end(slurm: SlurmTestCluster, tmp_path: Path) -> None:
    """Nodes from sinfo, a reservation, validation via srun, the faulty node drained with a readable reason, the
    healthy node nvdeploy had drained resumed, someone else's drain kept, the reservation gone, one report."""
    slurm.set_faults("node2", ("gpu_missing",))
    slurm.cmd("scontrol", "update", "nodename=node3", "state=drain", f"reason={THEIRS}")
    slurm.cmd("scontrol", "update", "nodename=node4", "state=drain",
              "reason=nvdeploy 20261130T010000Z-aaaaaa: gpu.count 7/8")
    path = inventory(tmp_path, "slurm: {partition: debug, states: [idle, drained]}")
    done = validate(slurm, path, tmp_path, "--via", "slurm", "--maintenance", "30m", "--wait-drain", "20s",
                    "--drain-failed", "--resume-passed")
    assert done.returncode == 1, done.stdout + done.stderr
    data = results(tmp_path)
    nodes = nodes_of(data)
    reasons = slurm.reasons()
    assert reasons["node2"] == f"nvdeploy {data['run_id']}: gpu.count 7/8, gpu.pci_visible 8/7"
    assert reasons["node3"] == THEIRS and "node4" not in reasons
    assert nodes["node4"]["verdict"] == "PASS" and nodes["node1"]["verdict"] == "PASS"
    assert nodes["node3"]["verdict"] == "ERROR"  # drained by someone else: Slurm cannot start a task there
    assert "reservation" not in slurm.cmd("scontrol", "show", "reservation").stdout.lower().replace(
        "no reservations in the system", "")
    (phase,) = [p for p in data["phases"] if p["phase"] == "slurm"]
    assert phase["reservation"]["name"] == f"nvdeploy-{data['run_id']}"
    assert phase["reservation"]["created"] and phase["reservation"]["deleted"]
    assert any("srun step" in note for note in phase["notes"])
    assert not slurm.jobs()


def test_node_with_a_slurm_job_gets_busy_for_heavy_checks(slurm: SlurmTestCluster, tmp_path: Path) -> None:
    submitted = slurm.cmd("sbatch", "-w", "node1", "-o", "/dev/null", "--wrap", "sleep 300")
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.split()[-1]
    assert slurm.wait_for(lambda: slurm.states().get("node1") in ("mix", "alloc"), 30), slurm.states()
    path = inventory(tmp_path, vars_="connection: sim")
    done = validate(slurm, path, tmp_path, "--level", "standard")
    assert done.returncode == 3, done.stdout + done.stderr
    nodes = nodes_of(results(tmp_path))
    heavy = [f for f in nodes["node1"]["findings"] if f["check"] == "dcgm.diag_r2"]
    assert [(f["verdict"], f["reason"]) for f in heavy] == [("ERROR", "busy")]
    assert f"Slurm job(s) running: {job} (root)" in heavy[0]["summary"]
    light = [f["verdict"] for f in nodes["node1"]["findings"] if f["check"] == "gpu.count"]
    assert light == ["PASS"]  # the quick checks still ran
    assert [f["verdict"] for f in nodes["node2"]["findings"] if f["check"] == "dcgm.diag_r2"] == ["PASS"]
    allowed = validate(slurm, path, tmp_path, "--level", "standard", "--allow-busy")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr


def test_via_slurm_node_with_a_job_is_busy_and_does_not_hold_up_the_others(slurm: SlurmTestCluster,
                                                                          tmp_path: Path) -> None:
    submitted = slurm.cmd("sbatch", "-w", "node2", "-o", "/dev/null", "--wrap", "sleep 300")
    assert submitted.returncode == 0, submitted.stderr
    assert slurm.wait_for(lambda: slurm.states().get("node2") in ("mix", "alloc"), 30), slurm.states()
    done = validate(slurm, inventory(tmp_path), tmp_path, "--via", "slurm", "--drain-failed", "--drain-on-error")
    assert done.returncode == 3, done.stdout + done.stderr
    nodes = nodes_of(results(tmp_path))
    (reach,) = [f for f in nodes["node2"]["findings"] if f["check"] == "system.reachable"]
    assert reach["reason"] == "busy" and "exclusive srun step cannot start there" in reach["summary"]
    assert [nodes[n]["verdict"] for n in ("node1", "node3", "node4")] == ["PASS"] * 3
    assert "node2" not in slurm.reasons()  # busy is not a fault: never drained for it


def test_via_slurm_standard_level_heavy_batches_run_as_steps_too(slurm: SlurmTestCluster, tmp_path: Path) -> None:
    slurm.set_faults("node3", ("dcgm_fail:memory",))
    done = validate(slurm, inventory(tmp_path), tmp_path, "--via", "slurm", "--level", "standard")
    assert done.returncode == 1, done.stdout + done.stderr
    data = results(tmp_path)
    nodes = nodes_of(data)
    verdicts = {n: {f["check"]: f["verdict"] for f in d["findings"]} for n, d in nodes.items()}
    assert verdicts["node1"]["dcgm.diag_r2"] == "PASS" and verdicts["node1"]["nccl.all_reduce"] == "PASS"
    assert verdicts["node3"]["dcgm.diag_r2"] == "FAIL"
    (phase,) = [p for p in data["phases"] if p["phase"] == "slurm"]
    steps = [note for note in phase["notes"] if note.startswith("srun step")]
    assert len(steps) <= 6, steps  # the nodes' batches are gathered: a step per stage, not per node


@pytest.mark.parametrize("pattern", ["bisect", "pairwise"])
def test_via_slurm_multinode_nccl_is_one_srun_step_and_names_the_slow_node(slurm: SlurmTestCluster, tmp_path: Path,
                                                                         pattern: str) -> None:
    """--level full --via slurm: multi-node nccl-tests run as srun steps (--mpi=none: Debian's Slurm has no PMIx)
    across the nodes, rank 0 of the simulated all_reduce_perf printing the job's table; bisection names the slow
    node. The test nodes have CPUs=2 (srun refuses --ntasks-per-node=8 there, even with --overcommit): 2 ranks
    per node (nccl_ranks_per_node)."""
    slurm.set_faults("node3", ("nccl_low_bw",))
    nodes = ["node1", "node2", "node3"]
    done = subprocess.run(
        [sys.executable, "-m", "nvdeploy", "validate", "-i", str(inventory(
            tmp_path, "slurm: {partition: debug, nodes: 'node[1-3]', timeout: 20}",
            vars_="command_timeout: 60, nccl_timeout: 60, nccl_ranks_per_node: 2")), "--out", str(tmp_path / "out"),
         "--no-history", "--via", "slurm", "--level", "full", "--srun-mpi", "none", "--nccl-pattern", pattern],
        capture_output=True, text=True, timeout=280, stdin=subprocess.DEVNULL, env=slurm.env)
    assert done.returncode == 1, done.stdout + done.stderr
    data = results(tmp_path)
    multi = {n: [f for f in d["findings"] if f["check"] == "nccl.multinode"] for n, d in nodes_of(data).items()}
    shown = "\n".join(f"{f.get('node')}: {f['verdict']} {f['summary']}" for f in
                      [*data["cluster_findings"], *(f for fs in multi.values() for f in fs)] if "nccl" in f["check"])
    assert [f["verdict"] for f in multi["node3"]] == ["FAIL"], shown
    assert [f["verdict"] for f in multi["node1"]] == ["PASS"] and [f["verdict"] for f in multi["node2"]] == ["PASS"]
    localised = [f for f in data["cluster_findings"] if f["check"] == "nccl.multinode" and "localised" in f["summary"]]
    assert localised and localised[0]["observed"] == "node3", data["cluster_findings"]
    (phase,) = [p for p in data["phases"] if p["phase"] == "slurm"]
    steps = [note for note in phase["notes"] if "-nccl" in note]
    assert steps and all("rc 0" in s or "rc 1" in s for s in steps), phase["notes"]
    assert set(nodes) <= set(nodes_of(data))
    assert slurm.wait_for(lambda: not slurm.jobs(), KILL_WAIT_MARGIN_S), slurm.jobs()
    print(f"\nmulti-node srun steps (3 nodes x 2 ranks, {pattern}): " + "; ".join(steps))


@SECOND_CLUSTER
def test_via_slurm_burn_in_is_a_step_for_its_whole_duration_and_names_the_throttling_gpu(
        slurm: SlurmTestCluster, tmp_path: Path) -> None:
    """validate --burn-in 1m --via slurm: the sampler and load run as a Slurm step on each node, in real time (the
    fake ``nvidia-smi -lms`` loops until the step's script stops it); the job's time limit covers the burn-in; the
    GPU that throttles after 15 s is named, the steady nodes pass, and no job is left."""
    for node in ("node1", "node2"):
        slurm.set_faults(node, ("slow:all_reduce_perf:8",))
    slurm.set_faults("node3", ("slow:all_reduce_perf:8", "throttle_after:0.25:5"))
    started = time.monotonic()
    done = validate(slurm, inventory(tmp_path, "slurm: {partition: debug, nodes: 'node[1-3]', timeout: 20}",
                                     vars_="command_timeout: 90"),
                    tmp_path, "--via", "slurm", "--burn-in", "1m", "--burn-in-interval", "2", timeout=280)
    took = time.monotonic() - started
    assert done.returncode == 1, done.stdout + done.stderr
    data = results(tmp_path)
    nodes = nodes_of(data)
    assert not unreached(data), unreached(data)
    stability = {n: [f for f in d["findings"] if f["check"] == "burnin.stability"] for n, d in nodes.items()}
    for name in ("node1", "node2"):
        assert len(stability[name]) == 8 and {f["verdict"] for f in stability[name]} == {"PASS"}, stability[name]
    failed = [f for f in stability["node3"] if f["verdict"] != "PASS"]
    assert [f["verdict"] for f in failed] == ["FAIL"] and failed[0]["summary"].startswith("GPU5: "), failed
    # Samples two seconds apart for the whole minute (2 s: the stability check's coverage, 53 s, holds even when a
    # loaded machine's fake nvidia-smi takes seconds to print its first row): the step ran for the burn-in, not cut
    # short by its time limit.
    samples = int(stability["node1"][0]["summary"].split(" samples")[0].rsplit(" ", 1)[-1])
    assert 22 <= samples <= 38, stability["node1"][0]["summary"]
    load = [f for n in ("node1", "node2", "node3") for f in nodes[n]["findings"] if f["check"] == "burnin.load"]
    assert load and {f["verdict"] for f in load} == {"PASS"}, load
    (phase,) = [p for p in data["phases"] if p["phase"] == "slurm"]
    # One step per stage: the burn-in's is the one that lasted the minute.
    step_s = [float(note.split(" s, rc ")[0].rsplit(" ", 1)[-1]) for note in phase["notes"]
              if note.startswith("srun step")]
    assert any(55 <= s < 90 for s in step_s), phase["notes"]
    assert slurm.wait_for(lambda: not slurm.jobs(), KILL_WAIT_MARGIN_S), slurm.jobs()
    print(f"\nburn-in 1 min over Slurm, 3 nodes: whole run {took:.1f} s; steps: "
          + "; ".join(n for n in phase["notes"] if n.startswith("srun step")))


@SECOND_CLUSTER
def test_via_slurm_sigterm_mid_burn_in_cancels_the_job_and_says_how_far_it_got(slurm: SlurmTestCluster,
                                                                               tmp_path: Path) -> None:
    for node in ("node1", "node2"):
        slurm.set_faults(node, ("slow:all_reduce_perf:8",))
    proc = slurm.popen("validate", "-i", str(inventory(tmp_path, "slurm: {partition: debug, nodes: 'node[1-2]', "
                                                      "timeout: 20}", vars_="command_timeout: 90")),
                       "--out", str(tmp_path / "out"), "--no-history", "--via", "slurm", "--burn-in", "10m",
                       "--burn-in-interval", "1")
    try:
        # A job per stage: the light batch's (name ...-1), then the burn-in's (...-2); SIGTERM 8 s into the latter.
        assert slurm.wait_for(lambda: any(j.split()[1:] and j.split()[1].endswith("-2") and "RUNNING" in j
                                          for j in slurm.jobs()), 120), slurm.jobs()
        time.sleep(8.0)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, out + err
    assert slurm.wait_for(lambda: not slurm.jobs(), KILL_WAIT_MARGIN_S), slurm.jobs()
    nodes = nodes_of(results(tmp_path))
    for name in ("node1", "node2"):
        burn = [f for f in nodes[name]["findings"] if f["check"].startswith("burnin.")]
        assert burn and {f["verdict"] for f in burn} == {"ERROR"}, burn
        assert any("into the 10m00s burn-in" in f["summary"] for f in burn), burn
    assert not slurm.reasons(), slurm.reasons()  # an interrupted burn-in drains nothing
