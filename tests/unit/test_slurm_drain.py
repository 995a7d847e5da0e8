"""Drain/resume policy (the NHC rule: resume only what nvdeploy drained), reasons, and the commands as argv."""

from __future__ import annotations

from typing import Sequence

from nvdeploy.results import ErrorReason, Finding, Verdict
from nvdeploy.slurm.client import Completed, SlurmClient
from nvdeploy.slurm.drain import REASON_MAX, Policy, apply_actions, build_reason, is_ours, plan_action
from nvdeploy.slurm.nodes import SlurmNode

RUN = "20261201T051300Z-1a2b3c"
GPU = Finding("gpu.count", Verdict.FAIL, "7 of 8", observed=7, expected=8)
XID = Finding("kmsg.xid", Verdict.FAIL, "Xid 79", observed=[79], expected=None)
OK = Finding("gpu.count", Verdict.PASS, "8 of 8", observed=8, expected=8)
ALL = Policy(drain_failed=True, resume_passed=True)


def node(state: str = "idle", flags: tuple = (), reason: str = "", user: str = "") -> SlurmNode:
    return SlurmNode("gpu007", state, flags, reason, user, "gpu:8")


def test_reason_names_the_failed_checks() -> None:
    assert build_reason(RUN, [GPU, XID, OK]) == f"nvdeploy {RUN}: gpu.count 7/8, kmsg.xid 79"
    assert is_ours(build_reason(RUN, [GPU]))
    assert is_ours("nvdeploy node-check 20261201T0513Z: gpu.count 7/8")
    assert not is_ours("nvdeploy broke it, ask Ann") and not is_ours("admin: PSU")


def test_reason_keeps_quotes_drops_control_characters_and_is_capped() -> None:
    hostile = Finding("kmsg.xid", Verdict.FAIL, "x", observed="it's \"bad\" $(rm -rf /); `id`\n\x1b[31m")
    text = build_reason(RUN, [hostile])
    assert "\n" not in text and "\x1b" not in text and '"bad" $(rm -rf /); `id`' in text
    many = [Finding(f"check.{i}", Verdict.FAIL, "x", observed=i, expected=i + 1) for i in range(100)]
    assert len(build_reason(RUN, many)) == REASON_MAX and build_reason(RUN, many).endswith("...")


def test_failed_node_is_drained_unless_someone_else_drained_it() -> None:
    action = plan_action("gpu007", Verdict.FAIL, [GPU], node(), ALL, RUN)
    assert (action.action, action.message) == ("drain", "drained by this run")
    theirs = plan_action("gpu007", Verdict.FAIL, [GPU], node(flags=("DRAIN",), reason="ops: RMA", user="ann"),
                         ALL, RUN)
    assert theirs.action == "leave" and "reason set by someone else" in theirs.message and "ann" in theirs.message
    ours = plan_action("gpu007", Verdict.FAIL, [GPU], node(flags=("DRAIN",), reason=f"nvdeploy {RUN}: x"), ALL, RUN)
    assert ours.action == "drain"  # our own older reason is refreshed


def test_passed_node_resumed_only_if_nvdeploy_drained_it() -> None:
    ours = node(flags=("DRAIN",), reason=f"nvdeploy {RUN}: gpu.count 7/8")
    assert plan_action("gpu007", Verdict.PASS, [OK], ours, ALL, RUN).action == "resume"
    theirs = node(flags=("DRAIN",), reason="nvdeploy is flaky here -- keep out (bob)")
    assert plan_action("gpu007", Verdict.PASS, [OK], theirs, ALL, RUN).action == "leave"
    assert plan_action("gpu007", Verdict.PASS, [OK], node(), ALL, RUN).action == "none"
    assert plan_action("gpu007", Verdict.WARN, [OK], ours, ALL, RUN).action == "none"  # only PASS resumes
    assert plan_action("gpu007", Verdict.PASS, [OK], ours, Policy(drain_failed=True), RUN).action == "none"


def test_error_nodes_drained_only_with_drain_on_error_and_never_for_busy() -> None:
    timeout = Finding("driver.loaded", Verdict.ERROR, "hung", reason=ErrorReason.TIMEOUT)
    busy = Finding("dcgm.diag_r2", Verdict.ERROR, "job 12", reason=ErrorReason.BUSY)
    assert plan_action("n", Verdict.ERROR, [timeout], node(), ALL, RUN).action == "none"
    on_error = Policy(drain_failed=True, drain_on_error=True)
    drained = plan_action("n", Verdict.ERROR, [timeout], node(), on_error, RUN)
    assert drained.action == "drain" and drained.reason.endswith("driver.loaded timeout")
    assert plan_action("n", Verdict.ERROR, [busy], node("mixed"), on_error, RUN).action == "none"
    assert plan_action("n", Verdict.FAIL, [GPU], None, ALL, RUN).action == "none"


class Recorder:
    def __init__(self, rc: int = 0, stderr: str = "") -> None:
        self.calls: list[list[str]] = []
        self.rc, self.stderr = rc, stderr

    def __call__(self, argv: Sequence[str], timeout: float) -> Completed:
        self.calls.append(list(argv))
        return Completed(tuple(argv), self.rc, "", self.stderr)


def test_reason_goes_to_scontrol_as_one_argv_word() -> None:
    runner = Recorder()
    hostile = Finding("kmsg.xid", Verdict.FAIL, "x", observed="a' b\"; $(touch /tmp/p)")
    action = plan_action("gpu007", Verdict.FAIL, [hostile], node(), ALL, RUN)
    (done,) = apply_actions([action], SlurmClient(runner=runner))
    assert done.status == "done"
    assert runner.calls == [["scontrol", "update", "nodename=gpu007", "state=drain", f"reason={action.reason}"]]


def test_dry_run_prints_and_runs_nothing_and_failures_keep_slurms_words() -> None:
    runner = Recorder()
    client = SlurmClient(runner=runner, dry_run=True)
    action = plan_action("gpu007", Verdict.FAIL, [GPU], node(), ALL, RUN)
    (done,) = apply_actions([action], client)
    assert runner.calls == [] and done.status == "dry_run"
    assert client.printed == [f"scontrol update nodename=gpu007 state=drain 'reason=nvdeploy {RUN}: gpu.count 7/8'"]
    failing = Recorder(1, "slurm_update error: Unable to contact slurm controller (connect failure)\n")
    (bad,) = apply_actions([action], SlurmClient(runner=failing))
    assert bad.status == "failed" and bad.error == "slurm_update error: Unable to contact slurm controller " \
                                                  "(connect failure)"


def test_resume_needs_every_check_of_the_drain_reason_run_and_passed_in_this_run() -> None:
    from nvdeploy.slurm.drain import reason_checks, resume_blocked

    dcgm = node(flags=("DRAIN",), reason=f"nvdeploy {RUN}: dcgm.diag_r2 Fail, gpu.count 7/8")
    assert reason_checks(dcgm.reason) == ("dcgm.diag_r2", "gpu.count")
    quick = plan_action("gpu007", Verdict.PASS, [OK], dcgm, Policy(resume_passed=True, level="quick"), RUN)
    assert quick.action == "leave" and "this run did not run dcgm.diag_r2" in quick.message
    diag_ok = Finding("dcgm.diag_r2", Verdict.PASS, "pass")
    standard = Policy(resume_passed=True, level="standard")
    assert plan_action("gpu007", Verdict.PASS, [OK, diag_ok], dcgm, standard, RUN).action == "resume"
    skipped = Finding("dcgm.diag_r2", Verdict.SKIP, "n/a")
    assert "dcgm.diag_r2 did not PASS" in (resume_blocked(dcgm.reason, [OK, skipped]) or "")
    # A reason that does not say which checks failed (cut short, or none named): only a full run resumes.
    cut = f"nvdeploy {RUN}: gpu.count 7/8, kmsg.x..."
    assert reason_checks(cut) is None and reason_checks(f"nvdeploy {RUN}: failed") is None
    assert "only a --level full run" in (resume_blocked(cut, [OK], "standard") or "")
    assert resume_blocked(cut, [OK], "full") is None


def test_a_long_reason_keeps_every_check_name() -> None:
    from nvdeploy.slurm.drain import reason_checks

    wordy = [Finding(f"check.c{i}", Verdict.FAIL, "x", observed="a long observed value " * 3) for i in range(6)]
    text = build_reason(RUN, wordy)
    assert len(text) <= REASON_MAX and reason_checks(text) == tuple(f"check.c{i}" for i in range(6))
