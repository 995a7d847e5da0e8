"""``slurm-state.json`` and :func:`recover` without a scheduler: a fake client that keeps the nodes' state and
records the calls. Real Slurm runs the same paths in tests/e2e/slurm/test_slurm_safety.py."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Optional

import pytest

from nvdeploy.slurm.client import SlurmError
from nvdeploy.slurm.journal import FILE, JournalError, SchedulerJournal, recover, unfinished_runs
from nvdeploy.slurm.nodes import SlurmNode

OURS = "nvdeploy 20261202T1500Z-abc123: gpu.count 7/8"
THEIRS = "bad DIMM, ticket 4711"


class FakeSlurm:
    """Nodes by name; drain/resume change them; ``fail`` makes a call raise Slurm's error."""

    def __init__(self, *nodes: SlurmNode, reservations: tuple[str, ...] = ()) -> None:
        self.nodes_by_name = {n.name: n for n in nodes}
        self.reservations = set(reservations)
        self.calls: list[str] = []
        self.fail: dict[str, str] = {}

    def _maybe_fail(self, call: str) -> None:
        self.calls.append(call)
        for prefix, message in self.fail.items():
            if call.startswith(prefix):
                raise SlurmError(call.split(), message)

    def nodes(self, names: Optional[str] = None) -> list[SlurmNode]:
        self._maybe_fail(f"nodes {names}")
        wanted = names.split(",") if names else list(self.nodes_by_name)
        return [self.nodes_by_name[n] for n in wanted if n in self.nodes_by_name]

    def drain(self, node: str, reason: str) -> None:
        self._maybe_fail(f"drain {node} {reason}")
        self.nodes_by_name[node] = replace(self.nodes_by_name[node], flags=("DRAIN",), reason=reason)

    def resume(self, node: str) -> None:
        self._maybe_fail(f"resume {node}")
        self.nodes_by_name[node] = replace(self.nodes_by_name[node], flags=(), reason="")

    def delete_reservation(self, name: str) -> None:
        self._maybe_fail(f"delete {name}")
        if name not in self.reservations:
            raise SlurmError(["scontrol"], "Reservation is invalid")
        self.reservations.discard(name)


def idle(name: str) -> SlurmNode:
    return SlurmNode(name, "idle")


def drained(name: str, reason: str) -> SlurmNode:
    return SlurmNode(name, "idle", ("DRAIN",), reason)


def journal(tmp_path: Path, **fields) -> SchedulerJournal:
    made = SchedulerJournal(tmp_path / FILE, "20261202T1500Z-abc123", **fields)
    made.save()
    return SchedulerJournal.load(tmp_path)


def test_a_node_reopened_for_the_run_and_not_judged_fit_is_drained_again_with_its_old_reason(tmp_path: Path) -> None:
    slurm = FakeSlurm(idle("gpu1"), reservations=("nvdeploy-x",))
    state = journal(tmp_path, reopened={"gpu1": OURS}, reservation="nvdeploy-x")
    assert recover(state, slurm) == []
    assert slurm.nodes_by_name["gpu1"].drained and slurm.nodes_by_name["gpu1"].reason == OURS
    # The nodes first, while the reservation still keeps others' jobs off them; then the reservation.
    assert slurm.calls == ["nodes gpu1", f"drain gpu1 {OURS}", "delete nvdeploy-x"]
    assert SchedulerJournal.load(tmp_path).finished


def test_a_reopened_node_the_run_decided_to_drain_gets_the_new_reason(tmp_path: Path) -> None:
    new = "nvdeploy 20261202T1500Z-abc123: kmsg.xid Xid 79 x1"
    slurm = FakeSlurm(idle("gpu1"))
    state = journal(tmp_path, reopened={"gpu1": OURS}, plan=[{"node": "gpu1", "action": "drain", "reason": new}])
    assert recover(state, slurm) == []
    assert slurm.nodes_by_name["gpu1"].reason == new


def test_a_reopened_node_the_run_judged_fit_is_left_in_service(tmp_path: Path) -> None:
    slurm = FakeSlurm(idle("gpu1"))
    state = journal(tmp_path, reopened={"gpu1": OURS}, plan=[{"node": "gpu1", "action": "resume", "reason": ""}])
    assert recover(state, slurm) == []
    assert not slurm.nodes_by_name["gpu1"].drained and slurm.calls == ["nodes gpu1"]


def test_a_planned_resume_never_resumes_a_node_someone_else_drained_since(tmp_path: Path) -> None:
    slurm = FakeSlurm(drained("gpu1", THEIRS), drained("gpu2", OURS))
    plan = [{"node": n, "action": "resume", "reason": ""} for n in ("gpu1", "gpu2")]
    assert recover(journal(tmp_path, plan=plan), slurm) == []
    assert slurm.nodes_by_name["gpu1"].reason == THEIRS  # their reason counts
    assert not slurm.nodes_by_name["gpu2"].drained


def test_a_planned_drain_keeps_someone_elses_later_drain(tmp_path: Path) -> None:
    slurm = FakeSlurm(drained("gpu1", THEIRS), idle("gpu2"))
    plan = [{"node": n, "action": "drain", "reason": OURS} for n in ("gpu1", "gpu2")]
    assert recover(journal(tmp_path, plan=plan), slurm) == []
    assert slurm.nodes_by_name["gpu1"].reason == THEIRS and slurm.nodes_by_name["gpu2"].reason == OURS
    assert not any(call.startswith("drain gpu1") for call in slurm.calls)


def test_recover_is_idempotent(tmp_path: Path) -> None:
    slurm = FakeSlurm(idle("gpu1"), reservations=("nvdeploy-x",))
    state = journal(tmp_path, reopened={"gpu1": OURS}, reservation="nvdeploy-x")
    assert recover(state, slurm) == []
    calls = len(slurm.calls)
    assert recover(SchedulerJournal.load(tmp_path), slurm) == [] and len(slurm.calls) == calls


def test_a_reservation_already_gone_is_not_a_failure(tmp_path: Path) -> None:
    slurm = FakeSlurm(idle("gpu1"))
    assert recover(journal(tmp_path, reservation="nvdeploy-gone"), slurm) == []
    assert SchedulerJournal.load(tmp_path).finished


def test_what_failed_is_named_and_the_journal_stays_unfinished_for_the_next_try(tmp_path: Path) -> None:
    slurm = FakeSlurm(idle("gpu1"), reservations=("nvdeploy-x",))
    slurm.fail = {"drain gpu1": "Invalid user id", "delete": "Unable to contact slurm controller"}
    state = journal(tmp_path, reopened={"gpu1": OURS, "gpu9": OURS}, reservation="nvdeploy-x")
    failed = recover(state, slurm)
    assert failed == ["drain gpu1: Invalid user id", "gpu9: Slurm does not list it",
                      "could not delete reservation nvdeploy-x: Unable to contact slurm controller"]
    assert not SchedulerJournal.load(tmp_path).finished
    slurm.fail = {}
    assert recover(SchedulerJournal.load(tmp_path), slurm) == ["gpu9: Slurm does not list it"]
    assert slurm.nodes_by_name["gpu1"].reason == OURS and not slurm.reservations


def test_an_unreadable_scheduler_is_a_failure_but_the_reservation_still_goes(tmp_path: Path) -> None:
    slurm = FakeSlurm(idle("gpu1"), reservations=("nvdeploy-x",))
    slurm.fail = {"nodes": "Unable to contact slurm controller (connect failure)"}
    failed = recover(journal(tmp_path, reopened={"gpu1": OURS}, reservation="nvdeploy-x"), slurm)
    assert failed == ["could not read the nodes' states: Unable to contact slurm controller (connect failure)"]
    assert not slurm.reservations


@pytest.mark.parametrize("text, says", [(None, "no such file"), ("{not json", "not readable as JSON"),
                                        ('{"version": 99, "prior": {}}', "not an nvdeploy scheduler state file")])
def test_a_bad_state_file_is_named(tmp_path: Path, text: Optional[str], says: str) -> None:
    if text is not None:
        (tmp_path / FILE).write_text(text)
    with pytest.raises(JournalError, match=says) as err:
        SchedulerJournal.load(tmp_path)
    assert str(tmp_path / FILE) in str(err.value)


def test_unfinished_runs_skips_finished_live_and_named_runs(tmp_path: Path) -> None:
    def run(name: str, **fields) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        SchedulerJournal(folder / FILE, name, **fields).save()
        return folder

    dead = run("dead", pid=2**22 + 12345)  # above any pid_max: that process is gone
    run("done", finished=True, pid=2**22 + 12345)
    run("live", pid=os.getpid())
    run("this", pid=2**22 + 12345)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / FILE).write_text("{}")
    assert unfinished_runs(tmp_path, skip="this") == [dead]
    assert json.loads((dead / FILE).read_text())["finished"] is False
