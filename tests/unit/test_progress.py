"""The progress status model: the line text, the counters, the painter's throttle, and when nothing is shown; the
ETA held back until the rate means something, then steady; every line within 80 columns on a 10,000-node run."""

from __future__ import annotations

import heapq
import io

import pytest

from nvdeploy.runner.progress import (
    PLAIN_PREFIX,
    EtaEstimate,
    Painter,
    RunProgress,
    Slowest,
    Snapshot,
    clock,
    eta_ready,
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
                    slowest=Slowest("gpu0042", 372, "dcgm.diag"), eta_s=eta_s(412, 1000, 754))
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
                    slowest=Slowest("gpu0042", 372, "dcgm.diag"), eta_s=1076)
    short = status_line(snap, width=96)
    assert short == "412/1000 done, 64 running, 524 left | FAIL 3 ERROR 1 | 12:34, ETA 17:56 | gpu0042 6:12 dcgm.diag"
    # Narrower: the left, then the running counts give way to the whole slowest node; then it is cut, then left out.
    assert status_line(snap, width=90) == ("412/1000 done, 64 running | FAIL 3 ERROR 1 | 12:34, ETA 17:56 | "
                                           "gpu0042 6:12 dcgm.diag")
    assert status_line(snap, width=79) == "412/1000 done | FAIL 3 ERROR 1 | 12:34, ETA 17:56 | gpu0042 6:12 dcgm.diag"
    assert status_line(snap, width=70) == "412/1000 done | FAIL 3 ERROR 1 | 12:34, ETA 17:56 | gpu0042 6:12"
    assert status_line(snap, width=60) == "412/1000 done | FAIL 3 ERROR 1 | 12:34, ETA 17:56"
    for width in (40, 5):  # only then is the line itself cut
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


# ------------------------------------------------------------------------------------------ the ETA


def _run(total: int, workers: int, quick_every: int = 0, quick_first: int = 0) -> list[tuple[float, float]]:
    """(start, end) of each node of a run, ``workers`` at a time: nodes that fail at once (0.4 s; every
    ``quick_every``-th node, or the first ``quick_first``), the others in 50-70 s (a fixed spread, no randomness)."""
    took = [0.4 if i < quick_first or (quick_every and i % quick_every == 3) else 50.0 + (i * 7919) % 21
            for i in range(total)]
    free = [0.0] * min(workers, total)
    nodes = []
    for duration in took:
        start = heapq.heappop(free)
        nodes.append((start, start + duration))
        heapq.heappush(free, start + duration)
    return nodes


def _etas(nodes: list[tuple[float, float]]) -> list[tuple[float, int, object]]:
    """(elapsed, done, ETA) once a second, as the painter feeds the estimate."""
    total = len(nodes)
    by_end = sorted(nodes, key=lambda node: node[1])
    first_end = by_end[0][1]
    wave = [end for start, end in nodes if start < first_end]
    estimate = EtaEstimate()
    out = []
    now, done, took, wave_done = 0.0, 0, 0.0, 0
    while True:
        while done < total and by_end[done][1] <= now:
            start, end = by_end[done]
            took += end - start
            wave_done += start < first_end
            done += 1
        if done == total:
            return out
        eta = estimate.update(now, done, total, took / done if done else 0.0, len(wave), wave_done)
        out.append((now, done, eta))
        now += 1.0


def test_eta_of_the_first_seconds_is_held_back():
    # The run: 500 nodes, 64 at a time, some unreachable (done in 0.4 s) among them.
    nodes = _run(500, 64, quick_every=25)
    ends = [end for _start, end in nodes]
    raw = [eta_s(sum(e <= t for e in ends), 500, t) for t in (1.0, 40.0, 70.0)]
    assert raw[0] < 200 and raw[1] > 3600 and raw[2] < 500  # the old ETA: 3 minutes, then 1.8 hours, then 7 minutes
    frames = _etas(nodes)
    shown = [(t, done) for t, done, eta in frames if eta is not None]
    assert all(eta is None for t, done, eta in frames if t < 40)  # none until half the first wave is done
    assert shown and shown[0][0] >= 40 and shown[0][1] >= 25  # ... and 5 % of the nodes


def test_eta_once_shown_counts_down_steadily_and_about_right():
    for total, workers, every, first in ((500, 64, 25, 0), (500, 64, 0, 0), (500, 64, 0, 20), (10_000, 64, 50, 0),
                                         (2000, 256, 7, 0), (1000, 32, 10, 0), (100, 64, 0, 0)):
        nodes = _run(total, workers, every, first)
        end = max(e for _s, e in nodes)
        frames = [(t, eta) for t, _done, eta in _etas(nodes) if eta is not None]
        case = (total, workers, every, first)
        assert frames, case
        # From one second to the next, the ETA moves by the second that passed plus at most 2 % of itself (a wave
        # of nodes finishing together): never the minutes-long jumps of the raw extrapolation.
        for (t0, e0), (t1, e1) in zip(frames, frames[1:]):
            assert abs((e0 - (t1 - t0)) - e1) <= 0.02 * e0 + 1, (case, t0, e0, e1)
        # And about right from its first showing: within 40 % of the time really left, over the run's first three
        # quarters (the last nodes finish in one ragged wave no rate foresees).
        for t, eta in frames[: len(frames) * 3 // 4]:
            assert abs(eta - (end - t)) <= 0.4 * (end - t) + 10, (case, t, eta, end - t)


def test_eta_needs_half_the_first_wave_a_share_of_the_nodes_and_some_time():
    assert not eta_ready(2, 10, 60.0, 1, 1)  # at least 3 nodes
    assert eta_ready(3, 10, 60.0, 1, 1)
    assert not eta_ready(499, 10_000, 3600.0, 64, 64) and eta_ready(500, 10_000, 3600.0, 64, 64)  # 5 %
    assert not eta_ready(100, 500, 100.0, 64, 31) and eta_ready(100, 500, 100.0, 64, 32)  # half the first wave
    assert not eta_ready(100, 500, 9.9, 64, 64)  # 10 s
    assert not eta_ready(40, 40, 100.0, 40, 40)  # done: nothing to estimate
    # The first value: the rate over the time since half a node's time, (100 - 30) s: 400 left take 280 s.
    assert EtaEstimate().update(100.0, 100, 500, 60.0, 64, 64) == pytest.approx(280.0)


def test_run_progress_shows_the_eta_once_half_the_first_wave_is_done():
    now = FakeClock()
    progress = RunProgress(now=now)
    progress.begin(200)
    for i in range(64):
        progress.node_started(f"n{i}")
    now.now += 30
    for i in range(31):
        progress.node_finished(f"n{i}", "PASS")
    progress.node_started("n64")  # a replacement: not of the first wave
    now.now += 10
    progress.node_finished("n64", "PASS")
    assert progress.snapshot().eta_s is None  # 32 done, but 31 of the first wave's 64
    assert "ETA --" in status_line(progress.snapshot())
    progress.node_finished("n31", "PASS")
    snap = progress.snapshot()
    # 33 done in 40 s, taking (31 x 30 + 10 + 40) / 33 ~ 29.7 s each: 167 left at 33 per (40 - 29.7 / 2) s.
    node_s = (31 * 30 + 10 + 40) / 33
    assert snap.eta_s == pytest.approx(167 * (40 - node_s / 2) / 33)
    assert f"ETA {clock(snap.eta_s)}" in status_line(snap)


# ------------------------------------------------------------------------------------------ 80 columns

LONG_NAME = "rack17-chassis04-sled2-very-long-inventory-name-gpu-node-" + "x" * 60 + "-0042"


@pytest.mark.parametrize("width", [79, 80])
def test_line_fits_80_columns_on_10000_nodes_with_long_names(width):
    cases = 0
    for done in (0, 1, 4321, 9744, 9999):
        for failed, errors in ((0, 0), (12, 3), (done // 2, done - done // 2)):
            for elapsed in (3.0, 754.0, 39 * 3600 + 59 * 60 + 59.0):
                for eta in (None, 61.0, 99 * 3600.0):
                    for slow in (None, Slowest("gpu0042", 372, "dcgm.diag"), Slowest(LONG_NAME, 36_000, "x" * 90)):
                        running = min(256, 10_000 - done)
                        snap = Snapshot(10_000, done, running, failed, errors, elapsed, slow, eta_s=eta)
                        line = status_line(snap, width=width)
                        cases += 1
                        assert len(line) <= width, line
                        # What the operator reads first is always there whole: counts, verdicts, time, ETA.
                        assert line.startswith(f"{done}/10000 done"), line
                        assert f"FAIL {failed} ERROR {errors} | {clock(elapsed)}" in line, line
                        assert (f"ETA {clock(eta)}" if eta is not None else "ETA --") in line, line
    assert cases == 5 * 3 * 3 * 3 * 3


def test_slowest_node_is_cut_in_its_middle_and_the_stage_to_its_label():
    snap = Snapshot(10_000, 4321, 256, 12, 3, 754.0, Slowest(LONG_NAME, 372, "dcgm.diag"), eta_s=3600.0)
    line = status_line(snap, width=79)
    assert line.startswith("4321/10000 done | FAIL 12 ERROR 3 | 12:34, ETA 1:00:00 | rack17-")
    assert line.endswith("-0042 6:12") and "..." in line and len(line) <= 79
    staged = Snapshot(10_000, 10_000, 0, 4000, 99, 39 * 3600.0, stage="cluster stage: GPUDirect RDMA (perftest pairs)")
    assert status_line(staged, width=79) == ("10000/10000 done | FAIL 4000 ERROR 99 | 39:00:00 | "
                                             "GPUDirect RDMA (perftest ...")


def test_live_painter_on_an_80_column_terminal_never_wraps():
    stream = Terminal()  # no real terminal behind it: the painter takes 80 columns, and keeps one free
    painter = Painter(stream, interval_s=3600, live=True)
    now = FakeClock()
    progress = RunProgress(painter, now=now)
    progress._total = 10_000
    progress.node_started(LONG_NAME)
    for i in range(255):
        progress.node_started(f"gpu{i:05d}")
    now.now += 36_000
    painter.tick(progress)
    frame = stream.getvalue().split("\r")[-1]
    assert len(frame) <= 79 and frame.startswith("0/10000 done")
