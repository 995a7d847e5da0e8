"""The controller's wait for a batch, stage by stage: the node's lines that say its commands started and ended, read
only where a tool cannot fake them; parse_output (SSH, local and Slurm alike) unchanged by them; each stage's
bounded time counted from the line that began it; and, over the local transport with a shell that starts late, a
hung command reported by the node's own timeout, never "no complete answer" (what a loaded machine gave before)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Optional

import pytest

from nvdeploy.results import ErrorReason
from nvdeploy.transport import batch, batch_budget
from nvdeploy.transport.base import CommandSpec
from nvdeploy.transport.batch_budget import BatchBudget
from nvdeploy.transport.local import LocalTransport

STARTED = batch.STARTED_MARKER + b"\n"
RAN = batch.RAN_MARKER + b"\n"
END = batch.END_MARKER + b"\n"


def frame(index: int, rc: int, out: bytes = b"", err: bytes = b"") -> bytes:
    return (f"__NVD_CMD {index} rc={rc} out={len(out)}/{len(out)} err={len(err)}/{len(err)}__\n".encode()
            + out + err)


def sudo_line(rc: int, err: bytes) -> bytes:
    return f"__NVD_SUDO__ rc={rc} err={len(err)}\n".encode() + err


# ------------------------------------------------------------------------------------------ the node's lines


def test_stage_of_reads_the_lines_before_any_frame():
    assert batch.stage_of(b"") == batch.NOT_STARTED
    assert batch.stage_of(STARTED[:-1]) == batch.NOT_STARTED  # the line is not complete yet
    assert batch.stage_of(STARTED) == batch.STARTED
    assert batch.stage_of(STARTED + RAN) == batch.RAN
    assert batch.stage_of(STARTED + RAN + frame(0, 0, b"x") + END) == batch.RAN
    # After the password check's early line, whatever sudo said in it.
    assert batch.stage_of(sudo_line(0, b"")) == batch.NOT_STARTED
    assert batch.stage_of(sudo_line(1, b"Sorry, try again.\n") + STARTED) == batch.STARTED
    assert batch.stage_of(sudo_line(1, b"x" * 40)[:20]) == batch.NOT_STARTED  # the sudo line is still cut


def test_no_tool_output_can_fake_the_lines():
    # Tool output only ever comes inside frames, after both lines; sudo's own stderr is skipped by its length.
    assert batch.stage_of(frame(0, 0, STARTED + RAN)) == batch.NOT_STARTED
    assert batch.stage_of(sudo_line(1, STARTED + RAN)) == batch.NOT_STARTED
    assert batch.stage_of(STARTED + frame(0, 0, RAN)) == batch.STARTED


def test_parse_output_reads_the_same_results_with_the_lines():
    specs = [CommandSpec("a", ("echo", "a"), 5), CommandSpec("b", ("false",), 5), CommandSpec("c", ("sleep", "9"), 1)]
    frames = frame(0, 0, b"a\n") + frame(1, 1, b"", b"no\n") + frame(2, 124)
    plain = batch.parse_output(specs, frames + END, 0.5)
    assert batch.parse_output(specs, STARTED + RAN + frames + END, 0.5) == plain
    assert [r.rc for r in plain] == [0, 1, None] and plain[2].error is ErrorReason.TIMEOUT
    # After the password check's line too (the password-gated batch), and cut off after the start: INCOMPLETE.
    assert batch.parse_output(specs, sudo_line(0, b"") + STARTED + RAN + frames + END, 0.5) == plain
    cut = batch.parse_output(specs, STARTED, 0.5, ErrorReason.TIMEOUT, "no complete answer")
    assert all(r.error is ErrorReason.TIMEOUT and r.rc is None for r in cut)
    # A batch refused by the node lock or an unsafe folder prints its line first, before any start: unchanged.
    busy = batch.parse_output(specs, b"__NVD_BUSY__ user=a run=r since=t pid=1\n" + END, 0.1)
    assert all(r.error is ErrorReason.BUSY for r in busy)


def test_the_script_prints_the_lines_after_the_launches_and_the_waits():
    specs = [CommandSpec("a", ("echo", "a"), 5), CommandSpec("s", ("id",), 5, sudo=True)]
    script = batch.build_script(specs, sudo_password=True)
    started = script.index(f"printf '{batch.STARTED_MARKER.decode()}\\n'")
    ran = script.index(f"printf '{batch.RAN_MARKER.decode()}\\n'")
    assert script.index("sudo -S -p '' -- true") < script.rindex("nvd_p1=$!") < started  # the check, the launches
    assert started < script.rindex('wait "$nvd_p1"') < ran < script.index("exec cat")  # the waits, the frames


# ------------------------------------------------------------------------------------------ the clock


def test_each_stage_counts_from_the_line_that_began_it():
    budget = BatchBudget(run_s=23.0, now=100.0, start_s=30.0, wrap_s=30.0)
    assert budget.left(100.0) == 30.0  # the start: 30 s, or the commands' limit if longer
    assert budget.left(125.0) == 5.0  # a shell that starts late: still waited for...
    budget.observe(STARTED, 125.0)
    assert budget.left(125.0) == 23.0  # ...and the commands get their whole limit from their start
    assert budget.left(147.0) == 1.0
    budget.observe(STARTED + RAN, 140.0)
    assert budget.left(140.0) == 30.0  # then the sweep and the transfer: 30 s (never less than the run had left)
    budget.observe(STARTED + RAN + frame(0, 0, b"x" * 1000), 150.0)  # more output changes nothing
    assert budget.left(170.0) == 0.0 and "output did not arrive within 30 s" in budget.expired()


def test_what_each_expiry_says():
    not_started = BatchBudget(run_s=9.0, now=0.0)
    assert not_started.left(30.0) <= 0
    assert not_started.expired() == "no answer: the node had not started the commands 30 s after the request"
    running = BatchBudget(run_s=9.0, now=0.0)
    running.observe(STARTED, 1.0)
    assert running.left(10.0) <= 0 and "still running 9 s after the node started them" in running.expired()
    deadline = BatchBudget(run_s=9.0, now=0.0, total_s=4.0)
    assert deadline.left(4.0) <= 0 and deadline.expired() == "no complete answer within 4 s (the run's --deadline)"
    deadline.observe(STARTED, 1.0)
    assert deadline.left(2.0) == 2.0  # the run's deadline bounds every stage
    fixed = BatchBudget.fixed(0.3, now=0.0)
    fixed.observe(STARTED, 0.1)  # not a batch: its output means nothing
    assert fixed.left(0.3) <= 0 and fixed.expired() == "no complete answer within 0 s"


def test_start_time_covers_the_password_check_and_long_commands():
    assert BatchBudget(run_s=9.0, now=0.0, start_s=30.0).start_s == 30.0
    assert BatchBudget(run_s=608.0, now=0.0, start_s=30.0).start_s == 608.0  # what the whole batch had before
    with_check = BatchBudget(run_s=9.0, now=0.0, start_s=30.0, sudo_check=True)
    assert with_check.start_s == 30.0 + batch.SUDO_CHECK_TIMEOUT_S + batch.KILL_GRACE_S
    specs = [CommandSpec("a", ("true",), 15), CommandSpec("b", ("true",), 5, sudo=True)]
    assert batch_budget.batch_budget(specs, True, None, 0.0).start_s == with_check.start_s
    assert batch_budget.batch_budget(specs, True, None, 0.0).run_s == 15 + batch_budget.RUN_SLACK_S
    assert batch_budget.batch_budget(specs[:1], True, None, 0.0).start_s == 30.0  # no sudo command: no check


# ------------------------------------------------------------------------------------------ a shell that starts late

LATE_S = 10  # longer than the old limit counted from the request: the commands' timeout (1 s) + 8 s


class _LateShell(LocalTransport):
    """A node whose shell starts LATE_S seconds after the request (a loaded machine), or never (``late_s`` None)."""

    def __init__(self, pids: Path, late_s: Optional[int]) -> None:
        super().__init__()
        wait = "sleep 3600" if late_s is None else f"sleep {late_s}"
        # sh -c CODE PIDS SCRIPT: $0 is the pid file, $1 the batch script.
        self.shell = ("/bin/sh", "-c", f'echo $$ >>"$0"; {wait}; exec /bin/sh -c "$1"', str(pids))


@pytest.fixture
def late_node(tmp_path, monkeypatch):
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setenv("NVDEPLOY_LOCK_DIR", str(tmp_path / "lock"))
    pids = tmp_path / "pids"
    yield pids
    for line in pids.read_text().split() if pids.exists() else []:
        try:
            os.killpg(int(line), signal.SIGKILL)  # each batch's shell leads a session of its own
        except ProcessLookupError:
            pass


def test_a_late_shell_still_reports_the_nodes_own_timeout(late_node):
    specs = [CommandSpec("smi", ("sleep", "60"), 1), CommandSpec("echo", ("echo", "hi"), 1)]
    hung, echo = _LateShell(late_node, LATE_S).run_batch(specs)
    # Before: ERROR timeout "batch exceeded 9 s" for both, sent 9 s after the request while the shell still slept.
    assert (hung.error, hung.error_detail, hung.timed_out) == (ErrorReason.TIMEOUT, "timed out after 1 s", True)
    assert (echo.rc, echo.stdout, echo.error) == (0, b"hi\n", None)
    assert hung.duration_s >= LATE_S


def test_a_shell_that_never_starts_is_an_error_not_a_hang(late_node, monkeypatch):
    monkeypatch.setattr(batch_budget, "START_S", 0.0)  # the start then gets the commands' limit: 1 + 8 s
    (result,) = _LateShell(late_node, None).run_batch([CommandSpec("smi", ("nvidia-smi",), 1)])
    assert result.error is ErrorReason.TIMEOUT and result.rc is None
    assert result.error_detail == "no answer: the node had not started the commands 9 s after the request"
