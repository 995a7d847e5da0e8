"""Burn-in checks (``validate --burn-in DURATION``, nvdeploy/collect/burnin_commands.py): the GPUs stay healthy
under sustained load (``burnin.stability``, per GPU, from the sampler's time series) and the repeated tests keep
passing at the same speed (``burnin.load``, from the load's iterations). Pure: facts['burnin_sampler'] and
facts['burnin_load'] (nvdeploy/parsers/burnin.py) are read by their attributes; the checks import no parser.

The throttle bits are NVML's ``nvmlClocksEventReasons`` (formerly ``nvmlClocksThrottleReasons``; nvml.h, and
nvidia-ml-py's pynvml.py: ``nvmlClocksEventReasonGpuIdle = 1`` ... ``DisplayClockSetting = 256``), the value
nvidia-smi prints as ``clocks_event_reasons.active`` / ``clocks_throttle_reasons.active``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from nvdeploy.checks.gating import raw_gate, section
from nvdeploy.checks.registry import NodeContext, register
from nvdeploy.collect.burnin_commands import format_duration
from nvdeploy.results import ErrorReason, Finding, Remediation, Verdict

SAMPLER = "burnin_sampler"
LOAD = "burnin_load"
KMSG_AFTER = "burnin_kmsg"
KMSG = "kmsg"
# nvmlClocksEventReasons bit -> the name the profile's throttle lists use (config/profile_schema.py).
REASON_BITS: Mapping[int, str] = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
    0x100: "display_clocks_setting",
}
# Under load the GPU must not protect itself from heat or a power event. SW power cap (0x4) is the GPU holding its
# configured power limit, which a power-bound load such as DCGM's targeted_power reaches on purpose: WARN unless
# the profile's burnin.fail names it.
DEFAULT_FAIL = ("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
DEFAULT_WARN = ("sw_power_cap",)
DEFAULT_CLOCK_DROP_PCT = 10.0
# A later iteration's nccl-tests busbw below the first by more than this: above one node's run-to-run
# repeatability (~1-2%), as fleet.drift's 5%.
DEFAULT_FIGURE_DROP_PCT = 5.0
# Without step times: the share of the samples at each end of the run whose clock against the peers' is compared.
WINDOW_FRACTION = 0.1
# Each test step of an iteration in tenths: a sample is compared with the same tenth of the same step.
PHASE_BINS = 10
# A warn reason (SW power cap) counts only with the GPU's clock this much below its peers' at the same instants.
POWER_CAP_DEFICIT_PCT = 3.0
# The samples must span the duration but for the sampler's start and stop (a few intervals) and 5% of slack.
COVERAGE_FRACTION = 0.95
MIN_SAMPLES = 3
# The checks validate --burn-in adds to the level's.
CHECK_IDS = ("burnin.stability", "burnin.load")


def decode(mask: int) -> list[str]:
    return [name for bit, name in REASON_BITS.items() if mask & bit]


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def _policy(ctx: NodeContext) -> tuple[set[str], set[str], float]:
    policy = section(ctx, "burnin")
    fail = set(policy.get("fail") or DEFAULT_FAIL)
    warn = set(policy.get("warn") or DEFAULT_WARN) - fail
    return fail, warn, float(policy.get("clock_drop_pct") or DEFAULT_CLOCK_DROP_PCT)


@dataclass(frozen=True)
class Phases:
    """Where each sample falls in the load (from the load's step start times against the sampler's clock): by
    (test, tenth of the step) and iteration, so that a sample is compared with the same part of the same DCGM
    plugin in another iteration; ``complete``: the iterations that ran to their end inside the samples."""

    spans: tuple[tuple[float, float, str, int], ...] = ()  # (start t, end t, test, iteration)
    complete: tuple[int, ...] = ()

    def at(self, t: float) -> Optional[tuple[str, int, int]]:
        """(test, tenth, iteration) of the step running ``t`` seconds into the samples, None outside every step."""
        for begin, end, test, n in self.spans:
            if begin <= t < end:
                return test, min(PHASE_BINS - 1, int((t - begin) / (end - begin) * PHASE_BINS)), n
        return None


def phases_of(sampler: Any, load: Any) -> Phases:
    """The load's steps on the sampler's time line; empty when either has no times (an older load script)."""
    start = getattr(sampler, "start", None)
    steps = [s for s in (getattr(load, "steps", None) or ()) if getattr(s, "started", None) is not None]
    if start is None or not steps:
        return Phases()
    times = [(s.started - start).total_seconds() for s in steps]
    ended = getattr(load, "ended_at", None)
    ends = times[1:] + [(ended - start).total_seconds() if ended is not None else None]
    last_t = max((x.t for x in sampler.samples), default=0.0)
    spans = tuple((b, e, s.test, s.iteration) for b, e, s in zip(times, ends, steps) if e is not None and e > b)
    by_iteration: dict[int, list[tuple[float, float]]] = {}
    for b, e, _, n in spans:
        by_iteration.setdefault(n, []).append((b, e))
    complete = tuple(sorted(n for n, parts in by_iteration.items()
                            if len(parts) == 2 and max(e for _, e in parts) <= last_t + 1))
    return Phases(spans, complete)


def _peer_ratios(series: Sequence[Any], peers: Mapping[float, Mapping[int, float]],
                 gpu: int) -> list[tuple[Any, float]]:
    """(sample, its clock / the median clock of the node's other GPUs at the same instant) under load."""
    out = []
    for sample in series:
        others = [c for g, c in peers.get(round(sample.t, 1), {}).items() if g != gpu]
        if sample.sm_clock_mhz is not None and not sample.idle and others:
            middle = _median(others)
            if middle > 0:
                out.append((sample, sample.sm_clock_mhz / middle))
    return out


def _iteration_drop(loaded: Sequence[Any], phases: Phases) -> Optional[tuple[float, int, int, str]]:
    """(largest fall %, first iteration, last iteration, the step part) of the SM clock between the first and the
    last complete iteration, each part of each step against the same part: like with like."""
    if len(phases.complete) < 2:
        return None
    first, last = phases.complete[0], phases.complete[-1]
    parts: dict[tuple[str, int, int], list[float]] = {}
    for sample in loaded:
        where = phases.at(sample.t) if sample.sm_clock_mhz is not None else None
        if where is not None and where[2] in (first, last):
            parts.setdefault(where, []).append(sample.sm_clock_mhz)
    worst: Optional[tuple[float, int, int, str]] = None
    for (test, tenth, n), clocks in parts.items():
        later = parts.get((test, tenth, last)) if n == first else None
        if later and _median(clocks) > 0:
            drop = (_median(clocks) - _median(later)) / _median(clocks) * 100
            if worst is None or drop > worst[0]:
                worst = (drop, first, last, f"{test} {tenth * 10}-{tenth * 10 + 10}%")
    return worst


def _judge_gpu(ctx: NodeContext, gpu: int, series: Sequence[Any], duration: float, interval_s: float,
               fail: set[str], warn: set[str], drop_limit: float,
               peers: Optional[Mapping[float, Mapping[int, float]]] = None, phases: Phases = Phases()) -> Finding:
    def finding(verdict: Verdict, summary: str, **kw: Any) -> Finding:
        return ctx.finding("burnin.stability", verdict, f"GPU{gpu}: {summary}", gpu=gpu, collector=SAMPLER, **kw)

    span = series[-1].t - series[0].t if series else 0.0
    needed = max(0.0, duration * COVERAGE_FRACTION - 2 * interval_s)
    if len(series) < MIN_SAMPLES or span < needed:
        return finding(Verdict.ERROR, f"{len(series)} sample(s) over {format_duration(span)} of the "
                       f"{format_duration(duration)} burn-in: too few to judge", observed=round(span, 1),
                       expected=f">= {needed:.0f}", unit="s",
                       reason=ErrorReason.INCOMPLETE, remediation=Remediation.INVESTIGATE)
    loaded = [s for s in series if s.idle is False]
    known = [s for s in loaded if s.reasons is not None]
    if not known:
        if any(s.idle for s in series):
            # Every readable sample has the GPU-idle reason: the load never ran on it (burnin.load says why).
            return finding(Verdict.ERROR, f"never loaded: idle (GPU-idle reason 0x1) in every one of its "
                           f"{len(series)} samples; the burn-in's load did not run on it (burnin.load)",
                           reason=ErrorReason.NOT_RUN, remediation=Remediation.INVESTIGATE)
        return finding(Verdict.ERROR, "throttle reasons not readable in any sample under load ([N/A])",
                       reason=ErrorReason.UNPARSEABLE, remediation=Remediation.INVESTIGATE)
    ratios = _peer_ratios(loaded, peers or {}, gpu)
    deficit = (1 - _median([r for _, r in ratios])) * 100 if ratios else None
    bad_counts: dict[str, int] = {}
    first_bad: dict[str, float] = {}
    capped_ratios: dict[str, list[float]] = {}
    ratio_at = {id(sample): ratio for sample, ratio in ratios}
    for sample in known:
        for name in decode(sample.reasons):
            if name in fail or name in warn:
                bad_counts[name] = bad_counts.get(name, 0) + 1
                first_bad.setdefault(name, sample.t)
                if id(sample) in ratio_at:
                    capped_ratios.setdefault(name, []).append(ratio_at[id(sample)])
    clocks = [s.sm_clock_mhz for s in loaded if s.sm_clock_mhz is not None]
    dropped = _iteration_drop(loaded, phases)
    if dropped is not None:
        drop: Optional[float] = dropped[0]
        curve = (f"SM clock median {_median(clocks):g} MHz, iteration {dropped[1]} -> {dropped[2]} "
                 f"{-drop + 0.0:+.1f}% at most (same part of the same test: {dropped[3]})")
    elif ratios:
        # No step times (an older load script, or fewer than two whole iterations): the GPU's clock against its
        # peers' at the same instants, the first tenth of the samples against the last (all GPUs run the same test).
        window = max(1, int(len(ratios) * WINDOW_FRACTION))
        head, tail = _median([r for _, r in ratios[:window]]), _median([r for _, r in ratios[-window:]])
        drop = (head - tail) / head * 100 if head > 0 else None
        curve = (f"SM clock median {_median(clocks):g} MHz, against its peers' {-(drop or 0.0) + 0.0:+.1f}% from the "
                 "first tenth of the samples to the last")
    else:
        drop = None
        curve = f"SM clock median {_median(clocks):g} MHz" if clocks else "SM clock not readable"
    if deficit is not None:
        curve += f", {-deficit + 0.0:+.1f}% against its peers at the same instants"
    ecc = [s.ecc_uncorrected for s in series if s.ecc_uncorrected is not None]
    ecc_growth = max(ecc) - ecc[0] if ecc else None
    temps = [s.temperature_c for s in loaded if s.temperature_c is not None]
    power = [s.power_w for s in loaded if s.power_w is not None]
    shape = (f"{len(series)} samples over {format_duration(span)} ({len(loaded)} under load): {curve}"
             + (f", max {max(temps):g} C" if temps else "") + (f", max {max(power):g} W" if power else ""))
    problems: list[str] = []
    verdict = Verdict.PASS
    remediation = Remediation.NONE
    for name in sorted(bad_counts):
        text = f"{name} in {bad_counts[name]} of {len(known)} samples from {format_duration(first_bad[name])}"
        if name in fail:
            problems.append(text)
            verdict, remediation = Verdict.FAIL, Remediation.INVESTIGATE
            continue
        # A warn reason (SW power cap) is the GPU holding its power limit, which DCGM's GEMM and Targeted Power
        # plugins reach on purpose on every GPU: it counts only with a clock deficit against the peers under it.
        under = capped_ratios.get(name)
        short = (1 - _median(under)) * 100 if under else None
        if short is None and peers:
            continue  # peers to compare with, none at those instants: nothing to hold against it
        if short is not None and short <= POWER_CAP_DEFICIT_PCT:
            shape += f", {name} in {bad_counts[name]} samples at its peers' clock (the load's power limit)"
            continue
        problems.append(text + (f", its clock {short:.1f}% below its peers' there (limit {POWER_CAP_DEFICIT_PCT:g}%)"
                                if short is not None else ""))
        if verdict is Verdict.PASS:
            verdict, remediation = Verdict.WARN, Remediation.MONITOR
    if drop is not None and drop > drop_limit:
        problems.append(f"SM clock fell {drop:.1f}% (limit {drop_limit:g}%)")
        verdict, remediation = Verdict.FAIL, Remediation.INVESTIGATE
    if deficit is not None and deficit > drop_limit:
        problems.append(f"SM clock {deficit:.1f}% below its peers' at the same instants (limit {drop_limit:g}%)")
        verdict, remediation = Verdict.FAIL, Remediation.INVESTIGATE
    if ecc_growth:
        problems.append(f"uncorrected ECC errors grew by {ecc_growth} ({ecc[0]} -> {max(ecc)})")
        verdict, remediation = Verdict.FAIL, Remediation.ISOLATE
    if ecc_growth is None:
        shape += ", ECC not readable"
    observed = round(max(drop or 0.0, deficit or 0.0), 2) if drop is not None or deficit is not None else None
    if problems:
        return finding(verdict, "; ".join(problems) + f" ({shape})", observed=observed,
                       expected=f"no {'/'.join(sorted(fail | warn))}, clock fall <= {drop_limit:g}%",
                       unit="%", remediation=remediation)
    return finding(Verdict.PASS, f"stable under load: {shape}", observed=observed, expected=f"<= {drop_limit:g}",
                   unit="%")


def _peer_clocks(run: Any) -> dict[float, dict[int, float]]:
    """{instant (0.1 s): {GPU: SM clock}} of the samples under load: every GPU of a node runs the same test."""
    out: dict[float, dict[int, float]] = {}
    for sample in run.samples:
        if sample.sm_clock_mhz is not None and sample.idle is False:
            out.setdefault(round(sample.t, 1), {})[sample.gpu] = sample.sm_clock_mhz
    return out


@register("burnin.stability", collectors=(SAMPLER, LOAD))
def burnin_stability(ctx: NodeContext) -> list[Finding]:
    """Runs with ``validate --burn-in DURATION`` (``30m``, ``4h``): while the load repeats DCGM diag and nccl-tests
    for DURATION, ``nvidia-smi --query-gpu=timestamp,index,temperature.gpu,clocks.sm,clocks_event_reasons.active
    (clocks_throttle_reasons.active on older drivers),power.draw,ecc.errors.uncorrected.volatile.total -lms
    INTERVAL`` samples every GPU (``--burn-in-interval``, host var ``burnin_interval``, default 5 s) until the
    load ends (its last iteration may run past DURATION). The clock follows the DCGM plugin being run (boost on
    copies and nccl-tests, lower under the power-capped GEMM and Targeted Power), so like is compared with like.
    Per GPU, over the samples under load (GPU-idle bit clear): FAIL when a reason of the profile's ``burnin.fail``
    is active (default: HW slowdown 0x8, SW thermal 0x20, HW thermal 0x40, HW power brake 0x80); when its SM
    clock fell by more than ``burnin.clock_drop_pct`` (default 10%) from the first complete iteration to the last,
    each tenth of each test against the same tenth of the same test (by the load's step times; without them, its
    clock against its peers' at the same instants, first tenth of the samples against the last); when its clock
    is more than that below the median of the node's other GPUs at the same instants (all run the same test);
    or when uncorrected volatile ECC errors grew. ``burnin.warn`` (default SW power cap 0x4, the GPU holding its
    power limit, which DCGM's GEMM and Targeted Power reach on every GPU on purpose) is WARN only when the GPU's
    clock is more than 3% below its peers' under it. PASS: no such reason, the clock held, no ECC growth, and
    samples that span the duration; too few samples, a sampler that stopped early or throttle reasons never
    readable are ERROR, and a GPU idle in every sample is ERROR "never loaded". Remediation: INVESTIGATE
    cooling (fans, airflow, inlet temperature) and power delivery of a throttling GPU; ISOLATE one whose
    uncorrected ECC errors grew.

    Sources: the reason bits are NVML's nvmlClocksEventReasons (nvml.h; nvidia-ml-py's pynvml.py), printed by
    nvidia-smi as clocks_event_reasons.active (clocks_throttle_reasons.active before the rename)."""
    gated = raw_gate(ctx, "burnin.stability", SAMPLER, "the burn-in sampler (nvidia-smi)",
                     "install the NVIDIA driver's nvidia-smi")
    if gated:
        return gated
    run = ctx.facts.get("burnin_sampler")
    if run is None or run.duration_s is None:
        return [ctx.finding("burnin.stability", Verdict.ERROR, "the burn-in sampler printed no header: not its "
                            "output", reason=ErrorReason.UNPARSEABLE, collector=SAMPLER)]
    if run.ended is None:
        return [ctx.finding("burnin.stability", Verdict.ERROR, "the burn-in sampler's output is cut off (no end "
                            "line)", reason=ErrorReason.INCOMPLETE, collector=SAMPLER)]
    findings: list[Finding] = []
    if run.ended == "exited":
        findings.append(ctx.finding("burnin.stability", Verdict.ERROR, "nvidia-smi's sampling loop ended before "
                                    f"the burn-in did (exit {run.exit_rc}): the GPUs were not watched to the end",
                                    reason=ErrorReason.INCOMPLETE, remediation=Remediation.INVESTIGATE,
                                    collector=SAMPLER))
    fail, warn, drop_limit = _policy(ctx)
    interval_s = (run.interval_ms or 0) / 1000.0
    gpus = set(run.gpus()) | set(range(ctx.profile.gpu.count))
    peers, phases = _peer_clocks(run), phases_of(run, ctx.facts.get("burnin_load"))
    for gpu in sorted(gpus):
        findings.append(_judge_gpu(ctx, gpu, run.series(gpu), run.duration_s, interval_s, fail, warn, drop_limit,
                                   peers, phases))
    return findings


def _busbw(step: Any) -> Optional[float]:
    nccl = step.nccl
    return nccl.avg_busbw if nccl is not None else None


def _gemm_falls(steps: Sequence[Any], limit: float) -> tuple[dict[str, float], list[str]]:
    """Each GPU's DCGM Diagnostic (GEMM) figure of its first iteration, and a line per GPU whose figure in a later
    iteration is below that by more than ``limit`` percent (its worst iteration): a GPU that slows as it heats."""
    first: dict[str, float] = {}
    worst: dict[str, tuple[float, int]] = {}
    for step in steps:
        for gpu, gflops in step.gflops.items():
            if gpu not in first:
                first[gpu] = gflops
            elif first[gpu] > 0 and gflops < worst.get(gpu, (first[gpu], 0))[0]:
                worst[gpu] = (gflops, step.iteration)
    out = []
    for gpu in sorted(worst, key=int):
        gflops, n = worst[gpu]
        drop = (first[gpu] - gflops) / first[gpu] * 100
        if drop > limit:
            out.append(f"GPU{gpu} GEMM {gflops:g} gigaflops in iteration {n}, {drop:.1f}% below its first "
                       f"({first[gpu]:g}; limit {limit:g}%)")
    return first, out


def _new_xids(ctx: NodeContext) -> tuple[Optional[list[Any]], str]:
    """The Xid events of the kernel log after the burn-in that the light batch's log did not have (None: the log
    after it could not be read, with why)."""
    after = ctx.facts.get("burnin_kmsg")
    if after is None:
        result = ctx.results.get(KMSG_AFTER)
        why = "not run" if result is None else (result.error_detail or f"exit {result.rc}")
        return None, f"the kernel log after the burn-in could not be read ({why})"
    before = ctx.facts.get("kmsg")
    seen = {e.line for e in before.xid_events} if before is not None else set()
    return [e for e in after.xid_events if e.line not in seen], ""


@register("burnin.load", collectors=(SAMPLER, LOAD, KMSG_AFTER, KMSG))
def burnin_load(ctx: NodeContext) -> list[Finding]:
    """Runs with ``validate --burn-in DURATION``: iterations of ``dcgmi diag -r 3 -j`` (host var
    ``burnin_dcgm_level``; level 3's Diagnostic and Targeted Stress plugins are a GEMM load on every GPU, Targeted
    Power and Memory Bandwidth load power and memory) and the node's nccl-tests ``all_reduce_perf``, each under its
    own timeout, until DURATION has passed (three iterations in a row that end within 5 s stop it: a load that
    fails at once, ERROR); then ``dmesg -k``. FAIL when an Xid event is in the kernel log after
    the burn-in that was not in it before (the light batch's ``dmesg``), when any iteration's DCGM diag failed,
    when all_reduce_perf failed or counted wrong values, or when a later iteration's figure is below the first
    iteration's by more than the profile's ``burnin.figure_drop_pct`` (default 5%): the average bus bandwidth,
    and each GPU's GEMM gigaflops (named by GPU). PASS: every iteration passed at the first one's speed. ERROR
    when the load was cut off, a test did not finish or its output could not be read. Remediation: ISOLATE the
    node; the evidence file holds every iteration's output."""
    gated = raw_gate(ctx, "burnin.load", LOAD, "the burn-in load (dcgmi, all_reduce_perf)",
                     "install DCGM and nccl-tests")
    if gated:
        return gated
    run = ctx.facts.get("burnin_load")
    if run is None or not run.steps:
        return [ctx.finding("burnin.load", Verdict.ERROR, "the burn-in load ran no test", collector=LOAD,
                            reason=ErrorReason.UNPARSEABLE)]
    limit = float(section(ctx, "burnin").get("figure_drop_pct") or DEFAULT_FIGURE_DROP_PCT)
    failed: list[str] = []
    unknown: list[str] = []
    for step in run.steps:
        label = f"iteration {step.iteration} {step.test}"
        if step.rc is None:
            unknown.append(f"{label} cut off")
        elif step.rc in (124, 137):
            unknown.append(f"{label} timed out")
        elif step.rc == 127:
            unknown.append(f"{label}: tool not found")
        elif step.test == "dcgm":
            overall = step.dcgm.overall if step.dcgm is not None else None
            if overall == "FAIL":
                failed.append(f"{label} FAIL")
            elif overall not in ("PASS", "WARN") or step.dcgm.hostengine_unreachable:
                unknown.append(f"{label}: no result (exit {step.rc})")
        else:
            nccl = step.nccl
            if nccl is None or nccl.avg_busbw is None:
                unknown.append(f"{label}: no bus bandwidth (exit {step.rc})")
            elif nccl.wrong_total or step.rc != 0:
                failed.append(f"{label}: exit {step.rc}, #wrong {nccl.wrong_total}")
    figures = [(s.iteration, _busbw(s)) for s in run.steps if s.test == "nccl" and _busbw(s) is not None]
    first = figures[0][1] if figures else None
    fell = [(n, bw) for n, bw in figures[1:] if first and bw is not None and (first - bw) / first * 100 > limit]
    for n, bw in fell:
        failed.append(f"iteration {n} busbw {bw:g} GB/s, {(first - bw) / first * 100:.1f}% below the first "
                      f"({first:g}; limit {limit:g}%)")
    gemm_first, gemm_fell = _gemm_falls(run.steps, limit)
    failed.extend(gemm_fell)
    iterations = max(s.iteration for s in run.steps)
    shape = f"{iterations} iteration(s)" + (f", busbw {first:g} -> {figures[-1][1]:g} GB/s" if figures else "")
    if gemm_first:
        shape += f", GEMM on {len(gemm_first)} GPU(s)"
    if run.done is None:
        unknown.append("the load was cut off before its end")
    if getattr(run, "aborted", None):
        unknown.insert(0, f"the load failed at once in {run.aborted} iterations in a row and stopped: no GPU was "
                       "loaded (is dcgmi / nv-hostengine / all_reduce_perf there?)")
    xids, why = _new_xids(ctx)
    if xids is None:
        unknown.append(why)
    elif xids:
        named = ", ".join(f"Xid {e.xid}" + (f" on PCI:{e.pci}" if e.pci else "") for e in xids[:4])
        failed.insert(0, f"{len(xids)} Xid event(s) during the burn-in: {named}")
    if failed:
        return [ctx.finding("burnin.load", Verdict.FAIL, "; ".join(failed[:6]) + f" ({shape})",
                            observed=len(failed), expected=0, remediation=Remediation.ISOLATE, collector=LOAD)]
    if unknown:
        return [ctx.finding("burnin.load", Verdict.ERROR, "; ".join(unknown[:6]) + f" ({shape})",
                            reason=ErrorReason.INCOMPLETE, remediation=Remediation.INVESTIGATE, collector=LOAD)]
    return [ctx.finding("burnin.load", Verdict.PASS, f"every test passed: {shape}", observed=iterations,
                        collector=LOAD)]
