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
import math
import os
import re
from collections.abc import Sequence
from typing import Optional

from nvdeploy.collect.burnin_commands import EVENT_FIELD, LOAD_HELPER, QUERY_FIELDS, SAMPLER_HELPER, THROTTLE_FIELD
from nvdeploy.sim import perf
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


def _clock(t: float, after: Optional[float]) -> float:
    """The SM clock ``t`` seconds into the load of a GPU that throttles ``after`` seconds in (None: never)."""
    if after is None or t < after:
        return LOAD_CLOCK_MHZ
    return LOAD_CLOCK_MHZ - (LOAD_CLOCK_MHZ - THROTTLED_CLOCK_MHZ) * min(1.0, (t - after) / 300.0)


def _row(when: datetime.datetime, gpu: int, t: float, after: Optional[float], power_limit: float,
         ecc: str, clock_factor: float = 1.0, hotter_c: float = 0.0) -> str:
    temperature = 55.0 + 15.0 * min(1.0, t / 600.0) + hotter_c
    clock, reasons = _clock(t, after) * clock_factor, 0
    if after is not None and t >= after:
        hot = t - after
        temperature = min(93.0, 87.0 + hot / 60.0)
        reasons = SW_THERMAL | (HW_THERMAL if hot >= 120 else 0)
    power = round(power_limit * (0.93 if reasons == 0 else 0.8) + (gpu % 3), 2)
    stamp = when.strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
    return f"{stamp}, {gpu}, {temperature:.0f}, {clock:.0f}, 0x{reasons:016X}, {power:.2f}, {ecc}\n"


def sampler_text(scenario: NodeScenario, duration_s: float, interval_ms: int) -> str:
    facts = node_facts(scenario)
    fields = ",".join(f.replace("{reasons}", EVENT_FIELD) for f in QUERY_FIELDS)
    out = [f"@@burnin-sampler {int(duration_s)} {interval_ms} {fields}\n"]
    if not facts.driver_loaded:  # nvidia-smi's loop exits at once, as the real one does (exit 9)
        return "".join(out) + "@@end exited 9\n"
    step = max(interval_ms / 1000.0, duration_s / MAX_ROWS_PER_GPU)
    count = int(duration_s / step) + 1
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
    for gpu in facts.gpus:
        after = throttle.get(gpu.index, throttle.get(None))
        ecc = str(gpu.dram_uncorrectable_volatile) if gpu.ecc_enabled else "[N/A]"
        # The node's measured-figure factor (sim/perf.py: fleet_spread, slower, slower_gpu) holds its clock too.
        rows.append(_row(when, gpu.index, t, after, gpu.power_limit_w or 700.0, ecc,
                         perf.factor(scenario.name, scenario.faults, gpu.index, last), hotter.get(gpu.index, 0.0)))
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
    if not throttle:
        return dcgm_json

    def scaled(match: re.Match) -> str:
        gpu = int(match.group(1))
        factor = _clock(t, throttle.get(gpu, throttle.get(None))) / LOAD_CLOCK_MHZ
        return f"GPU {gpu} calculated at approximately {float(match.group(2)) * factor:.2f} gigaflops"

    return _GFLOPS_MESSAGE.sub(scaled, dcgm_json)


def load_text(scenario: NodeScenario, duration_s: float, level: str, nccl_argv: Sequence[str],
              ignore_codes: str = "-") -> str:
    iterations = max(1, math.ceil(duration_s / ITERATION_S))
    # Each iteration prints what that tool prints on this node: computed once, the node does not change meanwhile
    # (but for a throttling GPU's GEMM figure, read at the middle of the iteration).
    diag = ("dcgmi", "diag", "-r", level, "-j") + (("--ignoreErrorCodes", ignore_codes) if ignore_codes != "-" else ())
    dcgm = run_tool(scenario, diag)
    nccl = run_tool(scenario, tuple(nccl_argv))
    out = []
    for n in range(1, iterations + 1):
        text = _gemm_at(scenario, dcgm.stdout.decode(errors="replace"), (n - 0.5) * ITERATION_S)
        out.append(f"@@iteration {n} dcgm\n{text}\n@@rc {dcgm.rc}\n")
        out.append(f"@@iteration {n} nccl\n{nccl.stdout.decode(errors='replace')}\n@@rc {nccl.rc}\n")
    out.append(f"@@done {iterations}\n")
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
        return ToolOutput(sampler_text(scenario, duration, interval).encode(), virtual_s=duration)
    if len(args) < 10:
        return ToolOutput(b"", b"sh: 1: shift: can't shift that many\n", 2)
    iterations = max(1, math.ceil(duration / ITERATION_S))
    return ToolOutput(load_text(scenario, duration, args[5], args[9:], args[8]).encode(),
                      virtual_s=iterations * ITERATION_S)


def _loop_hook(scenario: NodeScenario, argv: Sequence[str]) -> Optional[ToolOutput]:
    args = list(argv)
    return _sampler_loop(scenario, [os.path.basename(args[0]), *args[1:]]) if args else None


TOOL_HOOKS.append(_hook)
# Before the nvidia-smi of the stateful nodes (systools), which knows no -lms loop. The sampler runs without sudo.
TOOL_HOOKS.insert(0, _loop_hook)
