"""The burn-in's two outputs (nvdeploy/collect/burnin_commands.py): the sampler's CSV time series and the load's
iterations. Pure, never raises: odd lines become warnings.

The sampler's rows are ``nvidia-smi --query-gpu=timestamp,index,temperature.gpu,clocks.sm,<reasons>,power.draw,
ecc.errors.uncorrected.volatile.total --format=csv,noheader,nounits``: each field as the real tool prints it in
the 590.48.01 capture tests/fixtures/real/nvidia-smi-csv/h100-80gb-hbm3-query-gpu-all-fields-load-590.48.01.csv
(``2026/07/14 08:12:53.353``, ``0``, ``59``, ``0x0000000000000000``, ``631.95`` without units, ``0``). A value
nvidia-smi cannot read is ``[N/A]`` or ``[Not Supported]`` (ECC counters of a GPU without ECC): that field is None
for that sample, the sample is kept. No public capture of a long ``-lms`` series with throttling was found: the
series in the tests are built from those real row formats.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field
from typing import Optional

from nvdeploy.parsers.dcgm import DcgmDiagFacts, diagnostic_gflops, parse_dcgm_diag
from nvdeploy.parsers.nccl_tests import NcclFacts, parse_nccl_tests

_HEADER = re.compile(r"@@burnin-sampler\s+(\d+)\s+(\d+)\s+(\S+)\s*$")
GPU_IDLE = 0x1
_END = re.compile(r"@@end\s+(running|exited\s+(-?\d+))\s*$")
_TIMESTAMP = "%Y/%m/%d %H:%M:%S.%f"


@dataclass(frozen=True)
class Sample:
    """One GPU at one instant; ``t`` seconds since the series' first timestamp; None: not readable ([N/A])."""

    t: float
    gpu: int
    temperature_c: Optional[float] = None
    sm_clock_mhz: Optional[float] = None
    reasons: Optional[int] = None
    power_w: Optional[float] = None
    ecc_uncorrected: Optional[int] = None

    @property
    def idle(self) -> Optional[bool]:
        """The GPU-idle reason (nvmlClocksEventReasonGpuIdle, 0x1): it had no work at that instant; None when the
        reasons were not readable."""
        return bool(self.reasons & GPU_IDLE) if self.reasons is not None else None


@dataclass(frozen=True)
class SamplerRun:
    """``duration_s``/``interval_ms``/``fields`` from the script's header (None without it); ``ended``: ``running``
    (stopped at the end of the duration, as planned), ``exited`` (nvidia-smi's loop ended by itself, ``exit_rc``),
    None: cut off before the script's last line."""

    duration_s: Optional[float] = None
    interval_ms: Optional[int] = None
    fields: tuple[str, ...] = ()
    samples: tuple[Sample, ...] = ()
    ended: Optional[str] = None
    exit_rc: Optional[int] = None
    warnings: tuple[str, ...] = ()
    # The first sample's timestamp (the node's local time, as the load's step lines print it): ``t`` counts from it.
    start: Optional[datetime.datetime] = None

    def gpus(self) -> tuple[int, ...]:
        return tuple(sorted({s.gpu for s in self.samples}))

    def series(self, gpu: int) -> tuple[Sample, ...]:
        return tuple(s for s in self.samples if s.gpu == gpu)


def _value(text: str) -> Optional[str]:
    value = text.strip()
    if not value or (value.startswith("[") and value.endswith("]")) or value in ("N/A", "Not Supported"):
        return None
    return value


def _float(text: str) -> Optional[float]:
    value = _value(text)
    if value is None:
        return None
    value = value.split()[0]  # "631.95 W" when nounits was not honoured
    try:
        return float(value)
    except ValueError:
        return None


def _int(text: str) -> Optional[int]:
    value = _value(text)
    if value is None:
        return None
    try:
        return int(value, 16) if value.lower().startswith("0x") else int(value)
    except ValueError:
        return None


def _time(text: str) -> Optional[datetime.datetime]:
    try:
        return datetime.datetime.strptime(text.strip(), _TIMESTAMP)
    except ValueError:
        return None


def parse_sampler(text: str) -> SamplerRun:
    """The sampler's output -> its samples, header and end line. Rows whose timestamp or GPU index cannot be read
    are dropped with a warning (at most a few are named)."""
    duration: Optional[float] = None
    interval: Optional[int] = None
    fields: tuple[str, ...] = ()
    ended: Optional[str] = None
    exit_rc: Optional[int] = None
    raw: list[tuple[datetime.datetime, list[str]]] = []
    warnings: list[str] = []
    dropped = 0
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        header = _HEADER.match(stripped)
        if header:
            duration, interval = float(header.group(1)), int(header.group(2))
            fields = tuple(header.group(3).split(","))
            continue
        end = _END.match(stripped)
        if end:
            ended = "running" if end.group(1) == "running" else "exited"
            exit_rc = int(end.group(2)) if end.group(2) is not None else None
            continue
        cells = [c.strip() for c in stripped.split(",")]
        when = _time(cells[0]) if cells else None
        if when is None or len(cells) < 2 or _int(cells[1]) is None:
            dropped += 1
            if len(warnings) < 3:
                warnings.append(f"not a sample row: {stripped[:120]!r}")
            continue
        raw.append((when, cells))
    if dropped > len(warnings):
        warnings.append(f"{dropped} line(s) in all were not sample rows")
    start = min((w for w, _ in raw), default=None)
    samples = []
    for when, cells in raw:
        cells = cells + [""] * (7 - len(cells))
        samples.append(Sample(t=(when - start).total_seconds() if start else 0.0, gpu=_int(cells[1]) or 0,
                              temperature_c=_float(cells[2]), sm_clock_mhz=_float(cells[3]), reasons=_int(cells[4]),
                              power_w=_float(cells[5]), ecc_uncorrected=_int(cells[6])))
    return SamplerRun(duration, interval, fields, tuple(samples), ended, exit_rc, tuple(warnings), start)


@dataclass(frozen=True)
class LoadStep:
    """One test of one iteration: ``test`` dcgm or nccl, its exit status (None: cut off before ``@@rc``) and the
    parsed output."""

    iteration: int
    test: str
    rc: Optional[int]
    dcgm: Optional[DcgmDiagFacts] = None
    nccl: Optional[NcclFacts] = None
    # When it started (the node's local time; None from a load script that printed no time).
    started: Optional[datetime.datetime] = None

    @property
    def gflops(self) -> dict[str, float]:
        """{GPU index (str): gigaflops} of this iteration's DCGM Diagnostic (GEMM) test; {} for nccl, or a level
        without that test."""
        return diagnostic_gflops(self.dcgm) if self.dcgm is not None else {}


@dataclass(frozen=True)
class LoadRun:
    """``done``: the iteration count of ``@@done`` (None: the script was cut off); ``aborted``: the iterations in a
    row that ended at once when the script stopped for it (``@@abort``); ``ended_at``: when it ended."""

    steps: tuple[LoadStep, ...] = ()
    done: Optional[int] = None
    warnings: tuple[str, ...] = field(default=())
    aborted: Optional[int] = None
    ended_at: Optional[datetime.datetime] = None


_STEP = re.compile(r"@@iteration\s+(\d+)\s+(dcgm|nccl)(?:\s+(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d))?\s*$")
_ABORT = re.compile(r"@@abort\s+(\d+)\s*$")
_ENDED = re.compile(r"@@end\s+(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d)\s*$")
_RC = re.compile(r"@@rc\s+(-?\d+)\s*$")
_DONE = re.compile(r"@@done\s+(\d+)\s*$")


def parse_load(text: str) -> LoadRun:
    steps: list[LoadStep] = []
    current: Optional[tuple[int, str, Optional[datetime.datetime]]] = None
    body: list[str] = []
    done: Optional[int] = None
    aborted: Optional[int] = None
    ended_at: Optional[datetime.datetime] = None

    def close(rc: Optional[int]) -> None:
        if current is None:
            return
        output = "\n".join(body)
        n, test, started = current
        steps.append(LoadStep(n, test, rc, dcgm=parse_dcgm_diag(output) if test == "dcgm" else None,
                              nccl=parse_nccl_tests(output) if test == "nccl" else None, started=started))

    for line in text.splitlines():
        stripped = line.strip()
        step = _STEP.match(stripped)
        if step:
            close(None)
            started = _time(step.group(3) + ".000") if step.group(3) else None
            current, body = (int(step.group(1)), step.group(2), started), []
            continue
        if current is None and (_ABORT.match(stripped) or _ENDED.match(stripped)):
            abort, end = _ABORT.match(stripped), _ENDED.match(stripped)
            if abort:
                aborted = int(abort.group(1))
            if end:
                ended_at = _time(end.group(1) + ".000")
            continue
        rc = _RC.match(stripped)
        if rc and current is not None:
            close(int(rc.group(1)))
            current, body = None, []
            continue
        finished = _DONE.match(stripped)
        if finished:
            done = int(finished.group(1))
            continue
        if current is not None:
            body.append(line)
    close(None)
    return LoadRun(tuple(steps), done, aborted=aborted, ended_at=ended_at)
