"""The burn-in's two scripts on a simulated node (collect/burnin_commands.py), in simulated time: the answer comes
at once, its timestamps and iterations are those a run of DURATION would print (a 4-hour burn-in costs no wait).

The sampler prints one row per GPU per interval from :data:`SIM_TIME`: a healthy GPU under load warms from 55 C to
about 70 C over ten minutes at a steady SM clock of :data:`LOAD_CLOCK_MHZ`, near its power limit, no clock-event
reason active; its uncorrected ECC count is the node's (fault ``ecc``). The load runs ``ceil(DURATION /``
:data:`ITERATION_S` ``)`` iterations of the simulated ``dcgmi diag`` and ``all_reduce_perf``, each as that tool
answers on this node (its faults included).

Fault ``throttle_after:<MIN>[:<GPU>]`` (every GPU without ``:<GPU>``): after MIN minutes of load the GPU overheats:
its temperature climbs past 87 C, SW thermal slowdown (0x20) is active and, two minutes later, HW thermal slowdown
(0x40) too, and its SM clock falls to :data:`THROTTLED_CLOCK_MHZ` over five minutes; the DCGM Diagnostic (GEMM)
figure of the load's iterations falls with it (read at each iteration's middle). On a fake SSH node, whose real
shell runs the load script, the fake ``dcgmi`` knows no time into the load: only the sampler shows the throttle.

A GPU's clock under load is :data:`LOAD_CLOCK_MHZ` times the node's measured-figure factor (sim/perf.py:
``fleet_spread``, ``slower``, ``slower_gpu``); fault ``hot_gpu:<GPU>:<C>`` makes the GPU run C degrees hotter.
"""

from __future__ import annotations

import datetime
import hashlib
import math
import os
import re
from collections.abc import Sequence
from typing import Optional

from nvdeploy.collect.burnin_commands import (
    EVENT_FIELD,
    FAST_FAIL_ITERATIONS,
    LOAD_HELPER,
    QUERY_FIELDS,
    SAMPLER_HELPER,
    THROTTLE_FIELD,
)
from nvdeploy.sim import perf
from nvdeploy.sim.dcgm_tool import DIAG_FAILED_RC
from nvdeploy.sim.scenario import NodeScenario, node_facts, register_fault
from nvdeploy.sim.smi_xml import SIM_TIME
from nvdeploy.sim.tools import (
    FIRST_XID_UPTIME,
    TOOL_HOOKS,
    ToolOutput,
    _strip_sudo,
    kernel_log,
    run_tool,
    xid_line,
)

LOAD_CLOCK_MHZ = 1980.0
THROTTLED_CLOCK_MHZ = 1410.0
ITERATION_S = 180.0
SW_POWER_CAP = 0x4
# What one iteration runs, in order: DCGM r3's plugins, then nccl-tests; (name, seconds of the ITERATION_S, a healthy
# GPU's SM clock, the clock-event reasons active). Under the Diagnostic (GEMM) and Targeted Power plugins a GPU draws
# its power limit (DCGM's plugin reference: Diagnostic "stresses the GPU by drawing substantial power", Targeted
# Power holds a power target, https://docs.nvidia.com/datacenter/dcgm/latest/reference/diagnostics/plugins/), so
# the driver holds it there by its clock: SW power cap (0x4) active, the clock below its boost; copies, memory
# bandwidth and nccl-tests are not power-bound and run at the boost clock.
PHASES = (("memory", 20.0, LOAD_CLOCK_MHZ, 0), ("diagnostic", 45.0, 1650.0, SW_POWER_CAP),
          ("targeted_stress", 30.0, 1830.0, 0), ("targeted_power", 35.0, 1600.0, SW_POWER_CAP),
          ("memory_bandwidth", 20.0, LOAD_CLOCK_MHZ, 0), ("nccl", 30.0, LOAD_CLOCK_MHZ, 0))
DCGM_PART_S = sum(seconds for name, seconds, _, _ in PHASES if name != "nccl")
# Under fleet_spread, each sample's clock varies by up to this much (the driver's boost steps, sensor timing).
SAMPLE_NOISE_PCT = 0.5
SLOW_CLOCK = re.compile(r"slow_clock:([0-9]{1,3}):((?:100|[1-9][0-9]?)(?:\.[0-9]+)?)")
# A simulated sampler answers at most this many rows per GPU (a 24 h run at 1 s); longer runs are thinned.
MAX_ROWS_PER_GPU = 86400
THROTTLE_AFTER = re.compile(r"throttle_after:([0-9]+(?:\.[0-9]+)?)(?::([0-9]+))?")
HOT_GPU = re.compile(r"hot_gpu:([0-9]{1,3}):([0-9]{1,2}(?:\.[0-9]+)?)")
BURNIN_XID = re.compile(r"burnin_xid:([1-9][0-9]{0,3})(?::([0-9]+))?")
SW_THERMAL = 0x20
HW_THERMAL = 0x40

register_fault("throttle_after", "throttle_after:<MIN>[:<GPU>]: under burn-in load the GPU (every GPU without "
               ":<GPU>) overheats after MIN minutes: thermal slowdown active, SM clock falling",
               pattern=THROTTLE_AFTER.pattern)
register_fault("slow_clock", "slow_clock:<GPU>:<PCT>: under burn-in load the GPU clocks at PCT% of a healthy one in "
               "every phase, its SW power cap active throughout (it reaches its power limit at a lower clock: its "
               "silicon or power delivery), and its burn-in GEMM figure falls with it", pattern=SLOW_CLOCK.pattern)
register_fault("hot_gpu", "hot_gpu:<GPU>:<C>: under burn-in load the GPU runs C degrees hotter than a healthy one "
               "(its cooling), no throttle reason active", pattern=HOT_GPU.pattern)
register_fault("burnin_xid", "burnin_xid:<XID>[:<GPU>]: the GPU (GPU 0 without :<GPU>) raises Xid XID during the "
               "burn-in's load: in the kernel log afterwards (dmesg -k), not before", pattern=BURNIN_XID.pattern)


def _hotter(scenario: NodeScenario) -> dict[int, float]:
    """{GPU: degrees C above a healthy GPU under load} of the node's ``hot_gpu`` faults."""
    out: dict[int, float] = {}
    for fault in scenario.faults:
        match = HOT_GPU.fullmatch(fault)
        if match:
            out[int(match.group(1))] = float(match.group(2))
    return out


def _throttle(scenario: NodeScenario) -> dict[Optional[int], float]:
    """{GPU or None for every GPU: seconds of load before it throttles}."""
    out: dict[Optional[int], float] = {}
    for fault in scenario.faults:
        match = THROTTLE_AFTER.fullmatch(fault)
        if match:
            out[int(match.group(2)) if match.group(2) is not None else None] = float(match.group(1)) * 60
    return out


def phase_at(t: float) -> tuple[str, float, int]:
    """(what runs, a healthy GPU's SM clock, the reasons active) ``t`` seconds into the load."""
    into = t % ITERATION_S
    for name, seconds, clock, reasons in PHASES:
        if into < seconds:
            return name, clock, reasons
        into -= seconds
    name, _, clock, reasons = PHASES[-1]
    return name, clock, reasons


def _slow_clock(scenario: NodeScenario) -> dict[int, float]:
    """{GPU: its clock's share of a healthy GPU's} of the node's ``slow_clock`` faults."""
    return {int(m.group(1)): float(m.group(2)) / 100 for m in map(SLOW_CLOCK.fullmatch, scenario.faults) if m}


def _clock(t: float, after: Optional[float]) -> float:
    """The SM clock ``t`` seconds into the load of a GPU that throttles ``after`` seconds in (None: never): the phase's,
    falling towards THROTTLED_CLOCK_MHZ (below every phase's) over five minutes of throttling."""
    clock = phase_at(t)[1]
    if after is None or t < after:
        return clock
    return clock - (clock - THROTTLED_CLOCK_MHZ) * min(1.0, (t - after) / 300.0)


def _noise(name: str, gpu: int, t: float) -> float:
    digest = hashlib.sha256(f"{name}/{gpu}/{t:.3f}/clock".encode()).digest()
    return 1.0 + SAMPLE_NOISE_PCT / 100 * (2 * int.from_bytes(digest[:8], "big") / float(1 << 64) - 1)


def _row(when: datetime.datetime, gpu: int, t: float, after: Optional[float], power_limit: float,
         ecc: str, clock_factor: float = 1.0, hotter_c: float = 0.0) -> str:
    temperature = 55.0 + 15.0 * min(1.0, t / 600.0) + hotter_c
    clock, reasons = _clock(t, after) * clock_factor, phase_at(t)[2]
    if after is not None and t >= after:
        hot = t - after
        temperature = min(93.0, 87.0 + hot / 60.0)
        reasons = SW_THERMAL | (HW_THERMAL if hot >= 120 else 0)
    power = round(power_limit * (1.0 if reasons & SW_POWER_CAP else 0.93 if reasons == 0 else 0.8) + (gpu % 3), 2)
    stamp = when.strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
    return f"{stamp}, {gpu}, {temperature:.0f}, {clock:.0f}, 0x{reasons:016X}, {power:.2f}, {ecc}\n"


def sampler_text(scenario: NodeScenario, duration_s: float, interval_ms: int, until_s: Optional[float] = None) -> str:
    """The sampler's output; ``until_s``: it samples on until then (the load's end), past the duration."""
    facts = node_facts(scenario)
    fields = ",".join(f.replace("{reasons}", EVENT_FIELD) for f in QUERY_FIELDS)
    out = [f"@@burnin-sampler {int(duration_s)} {interval_ms} {fields}\n"]
    if not facts.driver_loaded:  # nvidia-smi's loop exits at once, as the real one does (exit 9)
        return "".join(out) + "@@end exited 9\n"
    length = max(duration_s, until_s or 0.0)
    step = max(interval_ms / 1000.0, length / MAX_ROWS_PER_GPU)
    count = int(length / step) + 1
    out += [_rows_at(scenario, n * step) for n in range(count)]
    out.append("@@end running\n")
    return "".join(out)


def _rows_at(scenario: NodeScenario, t: float) -> str:
    """One sample of every GPU ``t`` seconds into the load."""
    facts = node_facts(scenario)
    throttle = _throttle(scenario)
    when = SIM_TIME + datetime.timedelta(seconds=t)
    rows = []
    last = max((g.index for g in facts.gpus), default=0)
    hotter = _hotter(scenario)
    slow = _slow_clock(scenario)
    # slower_gpu is a GPU slow at GEMM whose clock stays normal (a bad SM, not a clock cap): it is left out here.
    faults = [f for f in scenario.faults if not perf.SLOWER_GPU.fullmatch(f)]
    for gpu in facts.gpus:
        after = throttle.get(gpu.index, throttle.get(None))
        ecc = str(gpu.dram_uncorrectable_volatile) if gpu.ecc_enabled else "[N/A]"
        # The node's measured-figure factor (sim/perf.py: fleet_spread, slower) holds its clock too.
        factor = perf.factor(scenario.name, faults, gpu.index, last) * slow.get(gpu.index, 1.0)
        if "fleet_spread" in scenario.faults:
            factor *= _noise(scenario.name, gpu.index, t)
        row = _row(when, gpu.index, t, after, gpu.power_limit_w or 700.0, ecc, factor, hotter.get(gpu.index, 0.0))
        if gpu.index in slow:
            row = row.replace(", 0x0000000000000000, ", f", 0x{SW_POWER_CAP:016X}, ")
        rows.append(row)
    return "".join(rows)


_SAMPLER_QUERIES = {",".join(f.replace("{reasons}", field) for f in QUERY_FIELDS)
                    for field in (EVENT_FIELD, THROTTLE_FIELD)}


def _sampler_loop(scenario: NodeScenario, args: Sequence[str]) -> Optional[ToolOutput]:
    """``nvidia-smi --query-gpu=<the sampler's fields> --format=csv,noheader,nounits -lms MS`` as the sampler
    script starts it on a fake SSH node (a real shell runs the script there): a sample every MS in real time,
    seconds counted from the tool's start, until it is killed."""
    if len(args) != 5 or args[0] != "nvidia-smi" or args[3] != "-lms" or not args[4].isdigit():
        return None
    if args[1].removeprefix("--query-gpu=") not in _SAMPLER_QUERIES or args[2] != "--format=csv,noheader,nounits":
        return None
    if not node_facts(scenario).driver_loaded:
        return ToolOutput(b"", b"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                          b"Make sure that the latest NVIDIA driver is installed and running.\n\n", 9)
    return ToolOutput(_rows_at(scenario, 0.0).encode(), repeat_s=max(1, int(args[4])) / 1000.0,
                      repeat=lambda elapsed: _rows_at(scenario, elapsed).encode())


_GFLOPS_MESSAGE = re.compile(r"GPU (\d+) calculated at approximately ([0-9.]+) gigaflops")


def _gemm_at(scenario: NodeScenario, dcgm_json: str, t: float) -> str:
    """The diag's output for an iteration ``t`` seconds into the load: a throttling GPU's Diagnostic (GEMM) figure
    falls with its SM clock."""
    throttle = _throttle(scenario)
    slow = _slow_clock(scenario)
    if not throttle and not slow:
        return dcgm_json

    def scaled(match: re.Match) -> str:
        gpu = int(match.group(1))
        after = throttle.get(gpu, throttle.get(None))
        # Read in the middle of the iteration's Diagnostic phase, against a healthy GPU's clock there.
        at = t - t % ITERATION_S + PHASES[0][1] + PHASES[1][1] / 2
        factor = _clock(at, after) / _clock(at, None) * slow.get(gpu, 1.0)
        return f"GPU {gpu} calculated at approximately {float(match.group(2)) * factor:.2f} gigaflops"

    return _GFLOPS_MESSAGE.sub(scaled, dcgm_json)


def _stamp(t: float) -> str:
    return (SIM_TIME + datetime.timedelta(seconds=t)).strftime("%Y/%m/%d %H:%M:%S")


def _fails_at_once(dcgm: ToolOutput, nccl: ToolOutput) -> bool:
    """Both tests of an iteration end at once: dcgmi missing or nv-hostengine down, and nccl-tests missing or failing
    to start (the load script stops after three such iterations: collect/burnin_commands.py)."""
    return dcgm.rc not in (0, DIAG_FAILED_RC) and nccl.rc != 0


def load_iterations(scenario: NodeScenario, duration_s: float, nccl_argv: Sequence[str]) -> tuple[int, float]:
    """(iterations, seconds) the load runs on this node: whole iterations until the duration has passed, or three
    at once when both tests fail at once."""
    if _fails_at_once(run_tool(scenario, ("dcgmi", "diag", "-r", "3", "-j")), run_tool(scenario, tuple(nccl_argv))):
        return FAST_FAIL_ITERATIONS, 1.0
    iterations = max(1, math.ceil(duration_s / ITERATION_S))
    return iterations, iterations * ITERATION_S


def load_text(scenario: NodeScenario, duration_s: float, level: str, nccl_argv: Sequence[str],
              ignore_codes: str = "-") -> str:
    # Each iteration prints what that tool prints on this node: computed once, the node does not change meanwhile
    # (but for a throttling GPU's GEMM figure, read at the middle of the iteration).
    diag = ("dcgmi", "diag", "-r", level, "-j") + (("--ignoreErrorCodes", ignore_codes) if ignore_codes != "-" else ())
    dcgm = run_tool(scenario, diag)
    nccl = run_tool(scenario, tuple(nccl_argv))
    fast = _fails_at_once(dcgm, nccl)
    iterations = FAST_FAIL_ITERATIONS if fast else max(1, math.ceil(duration_s / ITERATION_S))
    step = 0.0 if fast else ITERATION_S
    out = []
    for n in range(1, iterations + 1):
        start = (n - 1) * step
        text = _gemm_at(scenario, dcgm.stdout.decode(errors="replace"), start + 0.5 * ITERATION_S)
        out.append(f"@@iteration {n} dcgm {_stamp(start)}\n{text}\n@@rc {dcgm.rc}\n")
        out.append(f"@@iteration {n} nccl {_stamp(start + DCGM_PART_S * step / ITERATION_S)}\n"
                   f"{nccl.stdout.decode(errors='replace')}\n@@rc {nccl.rc}\n")
    if fast:
        out.append(f"@@abort {iterations}\n")
    out.append(f"@@end {_stamp(iterations * step)}\n@@done {iterations}\n")
    return "".join(out)


def kernel_log_after(scenario: NodeScenario) -> str:
    """``dmesg -k`` once the burn-in ended: the node's kernel log and the Xids of its ``burnin_xid`` faults."""
    facts = node_facts(scenario)
    lines = [kernel_log(scenario)]
    for n, fault in enumerate(scenario.faults):
        match = BURNIN_XID.fullmatch(fault)
        if not match:
            continue
        index = int(match.group(2) or 0)
        gpu = next((g for g in facts.pci_gpus if g.index == index), facts.pci_gpus[0] if facts.pci_gpus else None)
        if gpu is not None:
            stamp = FIRST_XID_UPTIME + 7200.0 + 13.5 * n  # two hours later than the log's own Xids
            lines.append(f"[{stamp:12.6f}] {xid_line(scenario, gpu, int(match.group(1)), 100 + n)}\n")
    return "".join(lines)


def _hook(scenario: NodeScenario, argv: Sequence[str]) -> Optional[ToolOutput]:
    # sh -c SAMPLER nvdeploy-burnin-sampler DURATION INTERVAL_MS
    # sh -c LOAD nvdeploy-burnin-load DURATION LEVEL DCGM_TIMEOUT NCCL_TIMEOUT IGNORE NCCL_ARGV...
    args = list(argv)
    if _strip_sudo(args) == ["dmesg", "-k"] and not scenario.has("hang"):
        return ToolOutput(kernel_log_after(scenario).encode())
    if len(args) < 6 or args[0] != "sh" or args[1] != "-c" or args[3] not in (SAMPLER_HELPER, LOAD_HELPER):
        return None
    if not args[4].isdigit():
        return ToolOutput(b"", b"sh: 1: arithmetic expression: expecting primary\n", 2)
    duration = float(args[4])
    if args[3] == SAMPLER_HELPER:
        interval = int(args[5]) if args[5].isdigit() and int(args[5]) > 0 else 5000
        if scenario.has("hang"):
            return ToolOutput(b"", hang=True)
        # With a done file (the 7th and 8th words) it samples on until the load's end, which it knows here as the
        # load's own simulated length (of the same node, for the same duration).
        until = None
        if len(args) >= 8 and args[6].isdigit():
            until = min(duration + int(args[6]), load_iterations(scenario, duration, ("all_reduce_perf",))[1])
        return ToolOutput(sampler_text(scenario, duration, interval, until).encode(),
                          virtual_s=max(duration, until or 0.0))
    if len(args) < 11:
        return ToolOutput(b"", b"sh: 1: shift: can't shift that many\n", 2)
    _, seconds = load_iterations(scenario, duration, args[10:])
    return ToolOutput(load_text(scenario, duration, args[5], args[10:], args[8]).encode(), virtual_s=seconds)


def _loop_hook(scenario: NodeScenario, argv: Sequence[str]) -> Optional[ToolOutput]:
    args = list(argv)
    return _sampler_loop(scenario, [os.path.basename(args[0]), *args[1:]]) if args else None


TOOL_HOOKS.append(_hook)
# Before the nvidia-smi of the stateful nodes (systools), which knows no -lms loop. The sampler runs without sudo.
TOOL_HOOKS.insert(0, _loop_hook)
