"""The progress status model: the line text, the counters, the painter's throttle, and when nothing is shown."""

from __future__ import annotations

import io

import pytest

from nvdeploy.progress import (
    PLAIN_PREFIX,
    Painter,
    RunProgress,
    Slowest,
    Snapshot,
    clock,
    eta_s,
    progress_for,
    status_line,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Gone(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError(5, "Input/output error")


def screen(text: str) -> list[str]:
    """What a terminal shows for ``text``: each line with carriage returns applied, trailing blanks dropped."""
    shown = []
    for raw in text.split("\n"):
        cells: list[str] = []
        col = 0
        for char in raw:
            if char == "\r":
                col = 0
                continue
            if col < len(cells):
                cells[col] = char
            else:
                cells.append(char)
            col += 1
        shown.append("".join(cells).rstrip())
    return shown


def test_clock_and_eta():
    assert [clock(s) for s in (0, 7.9, 754, 3723, -3)] == ["0:00", "0:07", "12:34", "1:02:03", "0:00"]
    assert eta_s(0, 1000, 60.0) is None  # no node finished yet: no rate to judge by
    assert eta_s(250, 1000, 60.0) == pytest.approx(180.0)  # 750 left at 250 per minute
    assert eta_s(1000, 1000, 60.0) == 0


def test_status_line_text():
    snap = Snapshot(total=1000, done=412, running=64, failed=3, errors=1, elapsed_s=754,
                    slowest=Slowest("gpu0042", 372, "dcgm.diag"))
    assert status_line(snap) == ("412/1000 done, 64 running, 524 left | FAIL 3 ERROR 1 | 12:34 elapsed, ETA 17:56 | "
                                 "slowest gpu0042 6:12 in dcgm.diag")
    assert status_line(snap, prefix=PLAIN_PREFIX).startswith("nvdeploy: 412/1000 done")
    before_first = Snapshot(total=10, done=0, running=10, failed=0, errors=0, elapsed_s=3)
    assert status_line(before_first) == "0/10 done, 10 running, 0 left | FAIL 0 ERROR 0 | 0:03 elapsed, ETA --"
    finished = Snapshot(total=10, done=10, running=0, failed=0, errors=2, elapsed_s=65)
    assert status_line(finished) == "10/10 done, 0 running, 0 left | FAIL 0 ERROR 2 | 1:05 elapsed"
    staged = Snapshot(total=4, done=4, running=0, failed=0, errors=0, elapsed_s=9, stage="cluster stage: nccl")
    assert status_line(staged).endswith("0:09 elapsed, cluster stage: nccl")


def test_status_line_fits_the_width_short_form_first():
    snap = Snapshot(total=1000, done=412, running=64, failed=3, errors=1, elapsed_s=754,
                    slowest=Slowest("gpu0042", 372, "dcgm.diag"))
    short = status_line(snap, width=96)
    assert short == "412/1000 done, 64 running, 524 left | FAIL 3 ERROR 1 | 12:34, ETA 17:56 | gpu0042 6:12 dcgm.diag"
    for width in (79, 40, 5):
        cut = status_line(snap, width=width)
        assert len(cut) <= width and cut.endswith("...")


def test_names_cannot_drive_the_terminal():
    snap = Snapshot(1, 0, 1, 0, 0, 1.0, Slowest("evil\x1b]0;pwned\x07", 1.0, "light batch"))
    line = status_line(snap)
    assert "\x1b" not in line and "\x07" not in line and "evil?]0;pwned?" in line


def test_counters_track_running_done_verdicts_and_the_slowest_node():
    now = FakeClock()
    progress = RunProgress(now=now)
    progress.begin(5)
    for name in ("a", "b", "c"):
        progress.node_started(name)
        now.now += 1
    progress.doing("a", "light batch")
    progress.doing("b", "dcgm.diag")
    progress.doing("zz", "ignored")  # a node not running (already finished) changes nothing
    snap = progress.snapshot()
    assert (snap.total, snap.done, snap.running, snap.left, snap.elapsed_s) == (5, 0, 3, 2, 3.0)
    assert snap.slowest == Slowest("a", 3.0, "light batch")
    progress.node_finished("a", "FAIL")
    progress.node_finished("c", "ERROR")
    snap = progress.snapshot()
    assert (snap.done, snap.running, snap.failed, snap.errors) == (2, 1, 1, 1)
    assert snap.slowest == Slowest("b", 2.0, "dcgm.diag")  # the oldest node STILL running
    progress.node_finished("b", "PASS")
    assert progress.snapshot().slowest is None
    assert progress.snapshot().done == 3


def test_events_never_draw_only_the_painter_tick_does():
    stream = Terminal()
    painter = Painter(stream, interval_s=3600, live=True, width=200)
    progress = RunProgress(painter)  # not begun: no painter thread, so every frame below is an explicit tick
    progress._total = 1000
    for i in range(1000):
        progress.node_started(f"n{i}")
        progress.doing(f"n{i}", "light batch")
        progress.node_finished(f"n{i}", "PASS")
    assert stream.getvalue() == ""  # 3,000 events, not one write
    for _ in range(3):
        painter.tick(progress)
    frames = stream.getvalue().split("\r")[1:]
    assert len(frames) == 3 and all(f.startswith("1000/1000 done") for f in frames)


def test_live_line_redraws_in_place_and_is_erased_at_the_end():
    stream = Terminal()
    painter = Painter(stream, interval_s=3600, live=True, width=200)
    progress = RunProgress(painter)
    progress.begin(2)  # the painter thread draws its first frame at once, then waits an hour
    progress.node_started("gpu01")
    progress.node_finished("gpu01", "FAIL")
    progress.end()
    out = stream.getvalue()
    assert out.startswith("\r0/2 done") or out.startswith("\r1/2 done")
    assert "\n" not in out  # a live line never scrolls the terminal
    assert screen(out) == [""]  # erased: what is printed next starts on a clean line
    stream.write("READY: all good\n")
    assert screen(stream.getvalue())[0] == "READY: all good"


def test_live_line_pads_over_a_longer_previous_frame():
    stream = Terminal()
    painter = Painter(stream, interval_s=3600, live=True, width=200)
    progress = RunProgress(painter)
    progress._total = 3
    progress.node_started("a-very-long-node-name-0001")
    painter.tick(progress)
    progress.node_finished("a-very-long-node-name-0001", "PASS")
    painter.tick(progress)
    assert screen(stream.getvalue()) == [status_line(progress.snapshot())]


def test_plain_lines_end_with_the_final_counts():
    stream = io.StringIO()
    painter = Painter(stream, interval_s=3600, live=False)
    progress = RunProgress(painter)
    progress.begin(2)
    progress.node_started("a")
    painter.tick(progress)
    progress.node_finished("a", "ERROR")
    progress.node_started("b")
    progress.node_finished("b", "PASS")
    progress.end()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and "\r" not in stream.getvalue()
    assert lines[0].startswith("nvdeploy: 0/2 done, 1 running, 1 left | FAIL 0 ERROR 0")
    assert lines[1].startswith("nvdeploy: 2/2 done, 0 running, 0 left | FAIL 0 ERROR 1 |")


def test_what_is_shown_where():
    assert progress_for(io.StringIO(), quiet=False, every_s=None) is None  # a pipe: nothing, no counters either
    assert progress_for(Terminal(), quiet=True, every_s=None) is None  # -q on a terminal: nothing
    assert progress_for(Terminal(), quiet=False, every_s=0) is None  # --progress 0: nothing
    live = progress_for(Terminal(), quiet=False, every_s=None)
    assert live is not None and live._painter is not None and live._painter.live
    plain = progress_for(io.StringIO(), quiet=True, every_s=30)  # asked for explicitly: wins over -q
    assert plain is not None and plain._painter is not None and not plain._painter.live
    assert plain._painter.interval_s == 30


def test_nothing_is_printed_in_a_pipe_during_a_run():
    stream = io.StringIO()
    progress = progress_for(stream, quiet=False, every_s=None)
    assert progress is None
    assert stream.getvalue() == ""


def test_a_vanished_terminal_does_not_fail_the_run():
    painter = Painter(Gone(), interval_s=3600, live=True, width=80)
    progress = RunProgress(painter)
    progress.begin(1)
    progress.node_started("a")
    painter.tick(progress)
    progress.end()  # no exception
    assert progress.snapshot().running == 1
