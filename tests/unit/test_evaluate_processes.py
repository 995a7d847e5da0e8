"""Evaluation in worker processes (a fleet run's parse and checks on the controller's other cores).

The same verdicts as in the node threads, a broken pool that costs no node its verdict, workers that Ctrl-C does
not kill and that do not outlive a run killed outright."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.levels import load_levels
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import CommandResult, NodeResult
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.runner.evaluate import (
    PROCESS_MIN_NODES,
    EvaluationJob,
    InlineEvaluator,
    ProcessEvaluator,
    auto_processes,
    evaluate,
)

CATALOG = ProfileCatalog()
DEMO = Path(__file__).resolve().parents[2] / "inventories" / "demo.yaml"


def _verdicts(nodes: list[NodeResult]) -> dict[str, list[tuple]]:
    # system.reachable's summary carries the connect time; every other field of every finding must be equal.
    return {node.name: sorted((f.check, f.verdict.value, f.gpu, f.reason, f.remediation.value, f.evidence,
                               *((f.summary, repr(f.observed)) if f.check != "system.reachable" else ()),
                               repr(f.expected))
                              for f in node.findings) for node in nodes}


def _run(tmp_path: Path, processes: int, level: str = "standard") -> list[NodeResult]:
    options = EngineOptions(checks=load_levels()[level], eval_processes=processes)
    outcome = run_validate(load_inventory(DEMO, CATALOG), CATALOG, options, tmp_path / f"out-{processes}")
    return list(outcome.run.nodes)


def test_worker_processes_give_every_node_the_verdicts_of_the_node_threads(tmp_path):
    inline, pooled = _run(tmp_path, 0), _run(tmp_path, 2)
    assert _verdicts(pooled) == _verdicts(inline)
    assert {n.name: dict(n.facts) for n in pooled} == {n.name: dict(n.facts) for n in inline}
    assert {n.name: n.verdict.value for n in pooled}["gpu003"] == "FAIL"  # the demo's faults are seen, not lost


def _job(name: str = "gpu001") -> EvaluationJob:
    profile = CATALOG.get("h100-sxm-8x")
    results = (CommandResult("nvidia_smi_xml", "nvidia-smi -q -x", 0, b"<not xml"),)
    return EvaluationJob(name, {}, profile, results, {}, ("gpu.count", "driver.loaded"))


def test_a_worker_killed_under_the_run_costs_no_verdict(tmp_path):
    evaluator = ProcessEvaluator(1)
    try:
        expected = evaluate(_job())
        assert evaluator(_job()) == expected
        for process in list(evaluator._pool._processes.values()):  # type: ignore[union-attr]
            os.kill(process.pid, signal.SIGKILL)
            process.join(10)
        assert evaluator(_job()) == expected  # the broken pool's job, evaluated here instead
        assert evaluator.broken
        assert evaluator(_job("gpu002")) == evaluate(_job("gpu002"))
    finally:
        evaluator.close()
    assert evaluator(_job()) == expected  # after close() too (a node still finishing when the run ends)


def test_ctrl_c_to_the_process_group_does_not_kill_the_workers():
    evaluator = ProcessEvaluator(1)
    try:
        evaluator(_job())
        (process,) = evaluator._pool._processes.values()  # type: ignore[union-attr]
        os.kill(process.pid, signal.SIGINT)
        time.sleep(0.5)
        assert process.is_alive()
        assert evaluator(_job()) == evaluate(_job()) and evaluator.broken is None
    finally:
        evaluator.close()


def test_workers_leave_when_their_run_is_killed_outright(tmp_path):
    script = textwrap.dedent("""
        import sys
        from nvdeploy.runner.evaluate import ProcessEvaluator
        evaluator = ProcessEvaluator(2)
        import time
        for future in [evaluator._pool.submit(time.sleep, 0.5) for _ in range(2)]:  # both workers started
            future.result()
        print(" ".join(str(p) for p in evaluator._pool._processes), flush=True)
        sys.stdin.read()
    """)
    run = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in run.stdout.readline().split()]  # type: ignore[union-attr]
        assert len(pids) == 2
        run.kill()
        run.wait(10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
            time.sleep(0.1)
        assert not [pid for pid in pids if _alive(pid)]
    finally:
        run.kill()


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"  # a zombie has left; only its reaping is owed (by init)


@pytest.mark.parametrize(("nodes", "cores", "expected"), [
    (PROCESS_MIN_NODES - 1, 16, 0), (PROCESS_MIN_NODES, 1, 0), (PROCESS_MIN_NODES, 2, 2), (10_000, 4, 4),
    (10_000, 64, 8),
])
def test_small_runs_and_one_core_controllers_keep_the_node_threads(nodes, cores, expected):
    assert auto_processes(nodes, cores) == expected


def test_the_inline_evaluator_is_evaluate():
    assert InlineEvaluator()(_job()) == evaluate(_job())


def _group_members(group: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2:].split()
            if int(fields[2]) == group and fields[0] != "Z":
                found.append(int(entry))
    return found


def test_ctrl_c_of_a_run_with_workers_keeps_every_finished_node_and_leaves_no_process(tmp_path):
    """Ctrl-C reaches the whole process group, workers included, as a terminal sends it."""
    inventory = tmp_path / "fleet.yaml"
    inventory.write_text("all:\n  vars: {cluster: fleet, connection: sim, profile: h100-sxm-8x, "
                         "driver_version: '550.90.07'}\n  hosts:\n    n[001-400]: {}\n")
    out = tmp_path / "out"
    run = subprocess.Popen([sys.executable, "-m", "nvdeploy", "validate", "-i", str(inventory), "--out", str(out),
                            "-q", "--no-history", "--forks", "8", "--eval-processes", "2"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        journal: list[Path] = []
        while time.monotonic() < deadline and run.poll() is None:
            journal = list(out.glob("*/*/results.jsonl"))
            if journal and journal[0].read_bytes().count(b"\n") > 30:
                break
            time.sleep(0.05)
        assert run.poll() is None, "the run ended before it could be interrupted"
        os.killpg(run.pid, signal.SIGINT)
        _, err = run.communicate(timeout=60)
        assert run.returncode == 130, err.decode(errors="replace")[-2000:]
        assert b"evaluation worker processes failed" not in err  # Ctrl-C broke no worker
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _group_members(run.pid):
            time.sleep(0.1)
        assert not _group_members(run.pid)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    doc = json.loads(next(out.glob("*/*/results.json")).read_text())
    verdicts = {n["name"]: n["verdict"] for n in doc["nodes"]}
    assert len(verdicts) == 400 and doc["verdict"] == "INCOMPLETE"
    passed = [name for name, verdict in verdicts.items() if verdict == "PASS"]
    assert len(passed) >= 30  # every node journaled before the signal (30 or more) was kept
    reasons = {f.get("reason") for n in doc["nodes"] if n["verdict"] != "PASS" for f in n["findings"]
               if f["verdict"] == "ERROR"}
    assert reasons <= {"interrupted"}, reasons  # no node ERROR of the evaluator's making


def test_a_job_the_pool_cannot_take_is_evaluated_in_the_thread():
    import threading

    evaluator = ProcessEvaluator(1)
    try:
        job = _job()
        unpicklable = EvaluationJob(job.node, {"lock": threading.Lock()}, job.profile, job.results, {},
                                    job.check_ids)
        assert evaluator(unpicklable) == evaluate(unpicklable) and evaluator.broken is None
    finally:
        evaluator.close()
