"""Progress of a long run: counters the engine bumps per event, and one thread that shows them at a fixed rate.

The engine's cost is O(1) per event (a node starts, a node now runs a collector, a node finishes): a counter under
a lock, or one attribute write. Nothing is formatted or printed on an engine thread; one painter thread reads a
snapshot a few times a second (a terminal) or every N seconds (``--progress N``, a log or a pipe) and draws it.

On a terminal the status is one line redrawn in place with ``\\r`` and erased when the run ends, so the summary
printed after it starts on a clean line. In a pipe, or with ``-q``, nothing is shown unless ``--progress`` asks.

The ETA (see :class:`EtaEstimate`) is held back until the rate nodes finish at says something: in the first
seconds the only nodes done are those that failed fast (unreachable, refused), and extrapolating from them gave a
500-node run "ETA 6:00" that became "ETA 33:00" a minute later.
"""

from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional, TextIO

# A live line redrawn four times a second reads as live and costs nothing measurable.
LIVE_INTERVAL_S = 0.25
# Whatever the node names or terminal, a status line never wraps (a wrapped line cannot be redrawn with \r).
DEFAULT_WIDTH = 80
# Plain lines land in logs next to other tools' output: they say whose they are. The live line has no room to.
PLAIN_PREFIX = "nvdeploy: "
# When the ETA is shown (EtaEstimate): at least this many nodes done, this share of the run, and this long in.
ETA_MIN_DONE = 3
ETA_MIN_SHARE = 0.05
ETA_MIN_ELAPSED_S = 10.0
# The predicted end time follows a new estimate with this time constant: a wave of nodes finishing together moves
# the ETA by seconds, not minutes, while a rate that really changed is followed within a minute or two.
ETA_SMOOTHING_S = 30.0
# Below this many columns the slowest node (or the cluster stage) is left out rather than cut to nothing; a step
# cut below _MIN_STEP is left out, and the room goes to the node's name.
_MIN_TAIL = 16
_MIN_STEP = 8


@dataclass(frozen=True)
class Slowest:
    """The node running the longest now, and what it runs (connect, the light batch, a heavy collector)."""

    name: str
    running_s: float
    step: str


@dataclass(frozen=True)
class Snapshot:
    total: int
    done: int
    running: int
    failed: int
    errors: int
    elapsed_s: float
    slowest: Optional[Slowest] = None
    stage: str = ""  # after the nodes: the cluster stage (multi-node nccl-tests) that runs now
    eta_s: Optional[float] = None  # None: not known yet (see EtaEstimate), shown as "ETA --"

    @property
    def left(self) -> int:
        return max(0, self.total - self.done - self.running)


def clock(seconds: float) -> str:
    """0:07, 12:34, 1:02:03."""
    whole = max(0, int(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def eta_s(done: int, total: int, elapsed_s: float) -> Optional[float]:
    """Seconds until every node is done at the rate nodes finished so far; None before the first one finished."""
    if done <= 0 or elapsed_s <= 0:
        return None
    return max(0, total - done) * elapsed_s / done


def eta_ready(done: int, total: int, elapsed_s: float, wave: int, wave_done: int) -> bool:
    """Whether enough of the run is done for its rate to be extrapolated.

    Three conditions, each against one way the early rate misleads:

    - half of the first wave done (``wave``: the nodes that started before any node finished, one per worker;
      ``wave_done``: how many of them have finished), so about a node's typical time has passed. Before that the
      nodes done are the quick ones (unreachable, refused, a node that failed its first command), not the run's
      typical node. A run that fits in one wave shows an ETA only once half of it is done.
    - 5 % of the nodes (and at least 3): a few odd nodes are never the whole sample. On 10,000 nodes that is 500,
      so the ETA appears after about 5 % of the run's time, with 95 % of it left to use it.
    - 10 s elapsed: the rate of the first seconds is mostly the time it took to connect.

    Not covered: a block of quick nodes larger than the first wave (a whole rack unreachable, first in the
    inventory): nothing counted so far tells those from the rest, so the first ETA is too short and then grows.
    """
    need = max(ETA_MIN_DONE, math.ceil(total * ETA_MIN_SHARE))
    return total > done >= need and elapsed_s >= ETA_MIN_ELAPSED_S and 2 * wave_done >= wave


class EtaEstimate:
    """The ETA shown: held back until :func:`eta_ready`, then a smoothed end time.

    The rate: nodes run a pool of workers at a time, so they finish in waves, and by the time ``elapsed`` a pool
    has finished about ``(elapsed - node_s / 2) / node_s`` waves (``node_s``: the mean time of a node so far). The
    plain average ``done / elapsed`` counts the pool's filling time as if nodes were finishing, and gave ETAs up to
    twice too long in the first minutes of simulated runs (500 to 10,000 nodes, 32 to 256 workers, some failing
    at once); ``done / (elapsed - node_s / 2)`` was within 40 % of the real time left from its first showing.
    The end time it gives (elapsed + left / rate) is followed by an exponential moving average with
    :data:`ETA_SMOOTHING_S` (weighted by the time between updates, so it does not matter how often the painter
    asks), and the ETA is that end time minus the time elapsed. Fed one observation per frame; no clock of its own.
    """

    def __init__(self, smoothing_s: float = ETA_SMOOTHING_S) -> None:
        self.smoothing_s = smoothing_s
        self._end: Optional[float] = None  # the smoothed end time, seconds since the run began
        self._at = 0.0

    def update(self, elapsed_s: float, done: int, total: int, node_s: float, wave: int,
               wave_done: int) -> Optional[float]:
        """The ETA in seconds at ``elapsed_s`` with ``done`` of ``total`` nodes finished, taking ``node_s`` each on
        average (see :func:`eta_ready` for ``wave``), or None (not yet)."""
        if not eta_ready(done, total, elapsed_s, wave, wave_done):
            return None
        left = eta_s(done, total, max(1.0, elapsed_s - node_s / 2))
        assert left is not None  # done > 0 when ready
        end = elapsed_s + left
        if self._end is None:
            self._end = end
        elif elapsed_s > self._at:
            weight = 1.0 - math.exp(-(elapsed_s - self._at) / self.smoothing_s)
            self._end += weight * (end - self._end)
        self._at = max(self._at, elapsed_s)
        return max(0.0, self._end - elapsed_s)


def _printable(text: str) -> str:
    # Node names and collector names come from an inventory: never let one drive the terminal.
    return "".join(c if c.isprintable() else "?" for c in text)


def status_line(snap: Snapshot, width: Optional[int] = None, prefix: str = "") -> str:
    """The one-line status: counts, verdicts so far, time, ETA and the slowest node still running.

    Over ``width`` the line takes its short form (no "elapsed", no "slowest ... in"); then the left and running
    counts give way to the slowest node (or the cluster stage), which is cut to the room left (see _tail) or, with
    less than _MIN_TAIL columns for it, left out. The counts done, FAIL and ERROR, the time and the ETA are kept
    longest: on 80 columns they always fit whole (up to a million nodes), whatever the node names.
    """
    eta = "" if snap.stage or snap.done >= snap.total else clock(snap.eta_s) if snap.eta_s is not None else "--"
    counts = f"{snap.done}/{snap.total} done"
    busy = f"{counts}, {snap.running} running, {snap.left} left"
    verdicts = f"FAIL {snap.failed} ERROR {snap.errors}"
    slow = snap.slowest
    line = ""
    for short in (False, True):
        parts = [busy, verdicts,
                 clock(snap.elapsed_s) + ("" if short else " elapsed") + (f", {snap.stage}" if snap.stage else "")
                 + (f", ETA {eta}" if eta else "")]
        if slow is not None:
            parts.append(f"{slow.name} {clock(slow.running_s)} {slow.step}" if short
                         else f"slowest {slow.name} {clock(slow.running_s)} in {slow.step}")
        line = _printable(prefix + " | ".join(parts))
        if width is None or len(line) <= width:
            return line
    assert width is not None
    timing = clock(snap.elapsed_s) + (f", ETA {eta}" if eta else "")
    # During a cluster stage every node is done: its running and left counts say nothing.
    shown = (counts,) if snap.stage else (busy, f"{counts}, {snap.running} running", counts)
    heads = [_printable(prefix + " | ".join((head, verdicts, timing))) for head in shown]
    # The running/left counts give way to the slowest node (whole, then cut) before it is left out.
    for whole in (True, False):
        for line in heads:
            tail = _tail(snap, width - len(line) - len(" | "), whole)
            if tail:
                return line + " | " + tail
    for line in heads:
        if len(line) <= width:
            return line
    return line[:max(0, width - 3)] + "..."


def _tail(snap: Snapshot, room: int, whole: bool) -> str:
    """The slowest node (or the stage) in at most ``room`` columns, or "" when it does not fit (``whole``: uncut;
    else in a useful form: the step cut, then left out, then the node's name cut in its middle, since the number
    that tells nodes apart is usually at its end; a stage by its label alone, then cut)."""
    if room < _MIN_TAIL:
        return ""
    if snap.stage:
        stage = _printable(snap.stage)
        if whole:
            return stage if len(stage) <= room else ""
        return _cut_end(stage.split(": ", 1)[-1], room)
    slow = snap.slowest
    if slow is None:
        return ""
    name, step, took = _printable(slow.name), _printable(slow.step), clock(slow.running_s)
    text = f"{name} {took} {step}"
    if len(text) <= room:
        return text
    if whole:
        return ""
    step_room = room - len(name) - len(took) - 2
    if step_room >= _MIN_STEP:
        return f"{name} {took} {_cut_end(step, step_room)}"
    return f"{_cut_middle(name, room - len(took) - 1)} {took}"


def _cut_end(text: str, room: int) -> str:
    return text if len(text) <= room else text[:max(0, room - 3)] + "..."


def _cut_middle(text: str, room: int) -> str:
    if len(text) <= room:
        return text
    keep = max(0, room - 3)
    tail = (keep + 1) // 2
    return text[:keep - tail] + "..." + text[len(text) - tail:]


class _Activity:
    """What one running node does now: written by its own worker thread (one attribute), read by the painter."""

    __slots__ = ("first", "name", "started", "step")

    def __init__(self, name: str, started: float, first: bool) -> None:
        self.name = name
        self.started = started
        self.step = "connect"
        self.first = first  # started before any node finished: of the run's first wave


class RunProgress:
    """Counters of one run. The engine calls node_started / doing / node_finished; begin and end frame the run.

    ``painter`` (optional) is started by begin and stopped by end; without one this is only counters.
    """

    def __init__(self, painter: Optional[Painter] = None, now: Callable[[], float] = time.monotonic) -> None:
        self._now = now
        self._lock = threading.Lock()
        self._painter = painter
        self._began = now()
        self._total = 0
        self._done = 0
        self._failed = 0
        self._errors = 0
        self._stage = ""
        # For the ETA: the first wave (nodes started before any finished) and how many of it are done, and the
        # time the finished nodes took together.
        self._wave = 0
        self._wave_done = 0
        self._node_time = 0.0
        self._eta = EtaEstimate()
        # Insertion-ordered: the first entry is the node that started first and is still running, the slowest.
        self._running: dict[str, _Activity] = {}

    def begin(self, total: int) -> None:
        with self._lock:
            self._began = self._now()
            self._total = total
        if self._painter is not None:
            self._painter.start(self)

    def end(self) -> None:
        if self._painter is not None:
            self._painter.stop(self)

    def node_started(self, name: str) -> None:
        with self._lock:
            first = self._done == 0
            self._running[name] = _Activity(name, self._now(), first)
            self._wave += first

    def doing(self, name: str, step: str) -> None:
        """The node now runs ``step``: one dict lookup and one attribute write, no lock (the painter only reads)."""
        activity = self._running.get(name)
        if activity is not None:
            activity.step = step

    def node_finished(self, name: str, verdict: str) -> None:
        with self._lock:
            activity = self._running.pop(name, None)
            if activity is not None:
                self._node_time += self._now() - activity.started
                self._wave_done += activity.first
            self._done += 1
            if verdict == "FAIL":
                self._failed += 1
            elif verdict == "ERROR":
                self._errors += 1

    def stage(self, text: str) -> None:
        self._stage = text

    def snapshot(self) -> Snapshot:
        with self._lock:
            now = self._now()
            first = next(iter(self._running.values()), None)
            slowest = None if first is None else Slowest(first.name, now - first.started, first.step)
            elapsed = now - self._began
            node_s = self._node_time / self._done if self._done else 0.0
            eta = self._eta.update(elapsed, self._done, self._total, node_s, self._wave, self._wave_done)
            return Snapshot(self._total, self._done, len(self._running), self._failed, self._errors,
                            elapsed, slowest, self._stage, eta)


class Painter:
    """One thread that draws ``RunProgress`` snapshots onto ``stream`` every ``interval_s``; never per event.

    live: one line redrawn in place (a terminal), erased by stop. plain: one line per interval, and a last one
    with the final counts at stop (a log or a pipe).
    """

    def __init__(self, stream: TextIO, interval_s: float, live: bool, width: Optional[int] = None) -> None:
        self.stream = stream
        self.interval_s = interval_s
        self.live = live
        self.width = width
        self._drawn = 0  # length of the live line on screen, to blank it out
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def tick(self, progress: RunProgress) -> None:
        """Draw one frame (the painter thread calls this once per interval)."""
        line = status_line(progress.snapshot(), self._width())
        try:
            if self.live:
                self.stream.write("\r" + line.ljust(self._drawn))
                self._drawn = len(line)
            else:
                self.stream.write(PLAIN_PREFIX + line + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away: progress is not worth failing the run for
            self._stop.set()

    def start(self, progress: RunProgress) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, args=(progress,), name="nvd-progress", daemon=True)
        self._thread.start()

    def stop(self, progress: RunProgress) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        try:
            if self.live:
                if self._drawn:
                    self.stream.write("\r" + " " * self._drawn + "\r")
                    self._drawn = 0
            else:
                self.stream.write(status_line(progress.snapshot(), prefix=PLAIN_PREFIX) + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def _loop(self, progress: RunProgress) -> None:
        # A live line draws at once (a run shorter than one interval still shows it); plain lines wait an interval.
        if self.live:
            self.tick(progress)
        while not self._stop.wait(self.interval_s):
            self.tick(progress)

    def _width(self) -> Optional[int]:
        if not self.live:
            return self.width
        if self.width is not None:
            return self.width
        try:
            columns = os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, ValueError, AttributeError):
            columns = 0
        # One column short of the edge: some terminals wrap when the last column is written.
        return (columns or DEFAULT_WIDTH) - 1


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def progress_for(stream: TextIO, quiet: bool, every_s: Optional[float]) -> Optional[RunProgress]:
    """The progress of a run shown on ``stream`` (stderr), or None when nothing is to be shown (then the engine
    does no progress work at all).

    ``every_s`` (``--progress``): a plain line every that many seconds wherever stderr goes; 0 shows nothing.
    Without it: a live line on a terminal, nothing in a pipe or with ``quiet``.
    """
    if every_s is not None:
        return RunProgress(Painter(stream, every_s, live=False)) if every_s > 0 else None
    if quiet or not _is_tty(stream):
        return None
    return RunProgress(Painter(stream, LIVE_INTERVAL_S, live=True))
