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
# The share of the samples at each end of the run whose median SM clock is compared.
WINDOW_FRACTION = 0.1
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


def _judge_gpu(ctx: NodeContext, gpu: int, series: Sequence[Any], duration: float, interval_s: float,
               fail: set[str], warn: set[str], drop_limit: float) -> Finding:
    def finding(verdict: Verdict, summary: str, **kw: Any) -> Finding:
        return ctx.finding("burnin.stability", verdict, f"GPU{gpu}: {summary}", gpu=gpu, collector=SAMPLER, **kw)

    span = series[-1].t - series[0].t if series else 0.0
    needed = max(0.0, duration * COVERAGE_FRACTION - 2 * interval_s)
    if len(series) < MIN_SAMPLES or span < needed:
        return finding(Verdict.ERROR, f"{len(series)} sample(s) over {format_duration(span)} of the "
                       f"{format_duration(duration)} burn-in: too few to judge", observed=round(span, 1),
                       expected=f">= {needed:.0f}", unit="s",
                       reason=ErrorReason.INCOMPLETE, remediation=Remediation.INVESTIGATE)
    loaded = [s for s in series if not s.idle]
    known = [s for s in loaded if s.reasons is not None]
    if not known:
        return finding(Verdict.ERROR, "throttle reasons not readable in any sample under load ([N/A])",
                       reason=ErrorReason.UNPARSEABLE, remediation=Remediation.INVESTIGATE)
    bad_counts: dict[str, int] = {}
    first_bad: dict[str, float] = {}
    for sample in known:
        for name in decode(sample.reasons):
            if name in fail or name in warn:
                bad_counts[name] = bad_counts.get(name, 0) + 1
                first_bad.setdefault(name, sample.t)
    clocks = [s.sm_clock_mhz for s in loaded if s.sm_clock_mhz is not None]
    window = max(1, int(len(clocks) * WINDOW_FRACTION))
    first_clock = _median(clocks[:window]) if clocks else None
    last_clock = _median(clocks[-window:]) if clocks else None
    drop = (first_clock - last_clock) / first_clock * 100 if first_clock and last_clock is not None else None
    ecc = [s.ecc_uncorrected for s in series if s.ecc_uncorrected is not None]
    ecc_growth = max(ecc) - ecc[0] if ecc else None
    temps = [s.temperature_c for s in loaded if s.temperature_c is not None]
    power = [s.power_w for s in loaded if s.power_w is not None]
    curve = (f"SM clock {first_clock:g} -> {last_clock:g} MHz ({0.0 - drop + 0.0:+.1f}%)" if drop is not None
             else "SM clock not readable")
    shape = (f"{len(series)} samples over {format_duration(span)} ({len(loaded)} under load): {curve}"
             + (f", max {max(temps):g} C" if temps else "") + (f", max {max(power):g} W" if power else ""))
    problems: list[str] = []
    verdict = Verdict.PASS
    remediation = Remediation.NONE
    for name in sorted(bad_counts):
        problems.append(f"{name} in {bad_counts[name]} of {len(known)} samples from "
                        f"{format_duration(first_bad[name])}")
        if name in fail:
            verdict, remediation = Verdict.FAIL, Remediation.INVESTIGATE
        elif verdict is Verdict.PASS:
            verdict, remediation = Verdict.WARN, Remediation.MONITOR
    if drop is not None and drop > drop_limit:
        problems.append(f"SM clock fell {drop:.1f}% (limit {drop_limit:g}%)")
        verdict, remediation = Verdict.FAIL, Remediation.INVESTIGATE
    if ecc_growth:
        problems.append(f"uncorrected ECC errors grew by {ecc_growth} ({ecc[0]} -> {max(ecc)})")
        verdict, remediation = Verdict.FAIL, Remediation.ISOLATE
    if ecc_growth is None:
        shape += ", ECC not readable"
    if problems:
        return finding(verdict, "; ".join(problems) + f" ({shape})", observed=round(drop, 2) if drop is not None
                       else None, expected=f"no {'/'.join(sorted(fail | warn))}, clock fall <= {drop_limit:g}%",
                       unit="%", remediation=remediation)
    return finding(Verdict.PASS, f"stable under load: {shape}", observed=round(drop, 2) if drop is not None else None,
                   expected=f"<= {drop_limit:g}", unit="%")


@register("burnin.stability", collectors=(SAMPLER, LOAD))
def burnin_stability(ctx: NodeContext) -> list[Finding]:
    """Runs with ``validate --burn-in DURATION`` (``30m``, ``4h``): while the load repeats DCGM diag and nccl-tests
    for DURATION, ``nvidia-smi --query-gpu=timestamp,index,temperature.gpu,clocks.sm,clocks_event_reasons.active
    (clocks_throttle_reasons.active on older drivers),power.draw,ecc.errors.uncorrected.volatile.total -lms
    INTERVAL`` samples every GPU (``--burn-in-interval``, host var ``burnin_interval``, default 5 s). Per GPU,
    over the samples under load (GPU-idle bit clear): FAIL when a reason of the profile's ``burnin.fail`` is
    active (default: HW slowdown 0x8, SW thermal 0x20, HW thermal 0x40, HW power brake 0x80), when the median SM
    clock of the last 10% of the samples is below that of the first 10% by more than ``burnin.clock_drop_pct``
    (default 10%), or when uncorrected volatile ECC errors grew; WARN for ``burnin.warn`` (default SW power cap
    0x4: the GPU holding its power limit, which a power-bound test reaches on purpose). PASS: no such reason,
    the clock held, no ECC growth, and samples that span the duration; too few samples, a sampler that stopped
    early or throttle reasons never readable are ERROR. Remediation: INVESTIGATE cooling (fans, airflow, inlet
    temperature) and power delivery of a throttling GPU; ISOLATE one whose uncorrected ECC errors grew.

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
    for gpu in sorted(gpus):
        findings.append(_judge_gpu(ctx, gpu, run.series(gpu), run.duration_s, interval_s, fail, warn, drop_limit))
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
    own timeout, until DURATION has passed; then ``dmesg -k``. FAIL when an Xid event is in the kernel log after
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
