"""Progress of a long run: counters the engine bumps per event, and one thread that shows them at a fixed rate.

The engine's cost is O(1) per event (a node starts, a node now runs a collector, a node finishes): a counter under
a lock, or one attribute write. Nothing is formatted or printed on an engine thread; one painter thread reads a
snapshot a few times a second (a terminal) or every N seconds (``--progress N``, a log or a pipe) and draws it.

On a terminal the status is one line redrawn in place with ``\\r`` and erased when the run ends, so the summary
printed after it starts on a clean line. In a pipe, or with ``-q``, nothing is shown unless ``--progress`` asks.
"""

from __future__ import annotations

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


def _printable(text: str) -> str:
    # Node names and collector names come from an inventory: never let one drive the terminal.
    return "".join(c if c.isprintable() else "?" for c in text)


def status_line(snap: Snapshot, width: Optional[int] = None, prefix: str = "") -> str:
    """The one-line status: counts, verdicts so far, time, ETA and the slowest node still running.

    Over ``width`` the line takes its short form (no "elapsed", no "slowest ... in"), and is cut only if that is
    still too wide: the slowest node is the part an operator looks for on a long run.
    """
    eta = "" if snap.stage or snap.done >= snap.total else _eta_text(snap)
    slow = snap.slowest
    for short in (False, True):
        parts = [f"{snap.done}/{snap.total} done, {snap.running} running, {snap.left} left",
                 f"FAIL {snap.failed} ERROR {snap.errors}",
                 clock(snap.elapsed_s) + ("" if short else " elapsed") + (f", {snap.stage}" if snap.stage else "")
                 + (f", ETA {eta}" if eta else "")]
        if slow is not None:
            parts.append(f"{slow.name} {clock(slow.running_s)} {slow.step}" if short
                         else f"slowest {slow.name} {clock(slow.running_s)} in {slow.step}")
        line = _printable(prefix + " | ".join(parts))
        if width is None or len(line) <= width:
            return line
    return line[:max(0, width - 3)] + "..."


def _eta_text(snap: Snapshot) -> str:
    eta = eta_s(snap.done, snap.total, snap.elapsed_s)
    return clock(eta) if eta is not None else "--"


class _Activity:
    """What one running node does now: written by its own worker thread (one attribute), read by the painter."""

    __slots__ = ("name", "started", "step")

    def __init__(self, name: str, started: float) -> None:
        self.name = name
        self.started = started
        self.step = "connect"


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
            self._running[name] = _Activity(name, self._now())

    def doing(self, name: str, step: str) -> None:
        """The node now runs ``step``: one dict lookup and one attribute write, no lock (the painter only reads)."""
        activity = self._running.get(name)
        if activity is not None:
            activity.step = step

    def node_finished(self, name: str, verdict: str) -> None:
        with self._lock:
            self._running.pop(name, None)
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
            return Snapshot(self._total, self._done, len(self._running), self._failed, self._errors,
                            now - self._began, slowest, self._stage)


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
