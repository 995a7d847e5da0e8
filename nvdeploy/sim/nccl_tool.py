"""A simulated nccl-tests ``all_reduce_perf`` (nccl-tests 2.13 layout), and ``env`` to pass it NCCL_* variables.

``all_reduce_perf -b MIN -e MAX -f FACTOR -g NGPUS -c CHECK`` prints the current header (``# nccl-tests
version``, ``# Collective test starting``, ``# nThread 1 nGpus N ... validation: C``, one ``#  Rank`` line per
GPU), ``NCCL version 2.21.5+cuda<cuda>`` when ``NCCL_DEBUG`` is VERSION or INFO, the result table (``%12li``
columns as nccl-tests prints them, ``N/A`` in ``#wrong`` with ``-c 0``), the footer (``# Out of bounds values :
N OK|FAILED``, ``# Avg bus bandwidth : X [OK|FAILED]`` against ``NCCL_TESTS_MIN_BW`` x 0.9) and ``# Collective
test concluded``; exit 1 when a value was wrong or the average is below the gate, as nccl-tests does.

Bandwidth: a healthy node reaches 1% above its hardware profile's ``nccl.all_reduce_busbw_gbps`` at 8 GiB
(~481 GB/s for 8x H100 SXM), less at smaller sizes; profiles without a ``nccl`` section get 45 GB/s (PCIe Gen5)
or 22 GB/s (Gen4). Environment: in process through ``env NAME=VALUE ... all_reduce_perf``; on a fake SSH node
the real ``env`` runs the fake tool, which reads its own environment. The ``all_reduce_perf`` tool itself is
registered in nvdeploy/sim/mpi_tool.py: on a fake node started by ``srun`` across nodes it prints the whole
multi-node job's table, which needs the multi-node code that builds on this module.

Faults:

- ``nccl_low_bw``: busbw at 60% of the healthy figure (below any 95% floor; the average fails the gate).
- ``nccl_wrong``: the in-place ``#wrong`` of the two largest sizes is 2048 and 4096; out of bounds 6144 FAILED.
- ``nccl_hang``: all_reduce_perf never returns.
- ``fleet_spread``, ``slower:<PCT>`` (nvdeploy/sim/perf.py): the busbw varies by node, or is PCT% of a healthy one.
- ``fabricmanager_down`` on NVSwitch SKUs: ``Test CUDA failure common.cu:941 'system not yet initialized'``
  replaces the table; ``driver_missing``: ``'no CUDA-capable device is detected'``; ``-g`` above the visible GPU
  count (``gpu_missing``): ``'invalid device ordinal'``.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Mapping, Sequence

from nvdeploy.sim import perf, tools
from nvdeploy.sim.scenario import NodeScenario, node_facts, register_fault
from nvdeploy.sim.tools import ToolOutput, register_tool

NCCL_VERSION = "2.21.5"
NCCL_CODE = 22105
NCCL_TESTS_VERSION = "2.13.10"
LOW_BW_FACTOR = 0.6
HEALTHY_MARGIN = 1.01
WRONG_VALUES = (2048, 4096)
SCENARIO_ENV = "NVD_SCENARIO_FILE"  # set in a fake SSH node's tool process (nvdeploy.sim.fake_tool)
_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}

register_fault("nccl_low_bw", "all_reduce_perf busbw at 60% of a healthy node's")
register_fault("nccl_wrong", "all_reduce_perf reports #wrong > 0 (data corruption) and exits 1")
register_fault("nccl_hang", "all_reduce_perf never returns")


def _bytes(text: str) -> int | None:
    text = text.strip().upper().rstrip("B")
    unit = text[-1:] if text[-1:] in _SIZE_UNITS and not text[-1:].isdigit() else ""
    number = text[:-1] if unit else text
    try:
        return int(float(number) * _SIZE_UNITS[unit])
    except ValueError:
        return None


def healthy_busbw(scenario: NodeScenario) -> float:
    """The 8 GiB all_reduce busbw (GB/s) a healthy node of the hardware profile reaches."""
    hw = scenario.hardware
    nccl = hw.extra.get("nccl") or {}
    if "all_reduce_busbw_gbps" in nccl:
        return float(nccl["all_reduce_busbw_gbps"]) * HEALTHY_MARGIN
    gen = int((hw.extra.get("pcie") or {}).get("gen", 4))
    return 45.0 if gen >= 5 else 22.0


def busbw_at(peak: float, size: int) -> float:
    """busbw at ``size`` bytes: the peak at >= 8 GiB, less below (latency and protocol overheads)."""
    distance = max(0.0, math.log2((8 << 30) / max(size, 1)))
    return peak * max(0.02, 1.0 - 0.03 * distance - 0.004 * distance * distance)


def _pid(scenario: NodeScenario, rank: int) -> int:
    return 20000 + int(hashlib.sha256(f"{scenario.name}/nccl/{rank}".encode()).hexdigest()[:6], 16) % 40000


def _time(us: float) -> str:
    if us >= 10000:
        return f"{us:7.0f}"
    return f"{us:7.1f}" if us >= 100 else f"{us:7.2f}"


def _options(args: Sequence[str]) -> dict[str, str] | None:
    short = {"-b": "minbytes", "--minbytes": "minbytes", "-e": "maxbytes", "--maxbytes": "maxbytes",
             "-f": "stepfactor", "--stepfactor": "stepfactor", "-g": "ngpus", "--ngpus": "ngpus", "-c": "check",
             "--check": "check", "-n": "iters", "--iters": "iters", "-w": "warmup_iters", "--warmup_iters":
             "warmup_iters", "-t": "nthreads", "--nthreads": "nthreads", "-G": "cudagraph", "--cudagraph": "cudagraph"}
    options = {"minbytes": "32M", "maxbytes": "32M", "stepfactor": "2", "ngpus": "1", "check": "1", "iters": "20",
               "warmup_iters": "5", "nthreads": "1", "cudagraph": "0"}
    i = 0
    args = list(args)
    while i < len(args):
        name = short.get(args[i])
        if name is None or i + 1 >= len(args):
            return None
        options[name] = args[i + 1]
        i += 2
    return options


def all_reduce_perf(scenario: NodeScenario, args: Sequence[str], env: Mapping[str, str]) -> ToolOutput:
    if scenario.has("nccl_hang"):
        return ToolOutput(b"", hang=True)
    options = _options(args)
    if options is None:
        return ToolOutput(b"", b"all_reduce_perf: invalid option (simulated: -b -e -f -g -c -n -w -t -G)\n", 1)
    low, high = _bytes(options["minbytes"]), _bytes(options["maxbytes"])
    try:
        factor, ngpus, check = int(options["stepfactor"]), int(options["ngpus"]), int(options["check"])
    except ValueError:
        return ToolOutput(b"", b"all_reduce_perf: invalid number\n", 1)
    if low is None or high is None or factor < 2 or ngpus < 1 or low > high:
        return ToolOutput(b"", b"all_reduce_perf: invalid size range\n", 1)
    facts = node_facts(scenario)
    host = facts.hostname
    header = [f"# nccl-tests version {NCCL_TESTS_VERSION} nccl-headers={NCCL_CODE} nccl-library={NCCL_CODE}",
              "# Collective test starting: all_reduce_perf",
              f"# nThread 1 nGpus {ngpus} minBytes {low} maxBytes {high} step: {factor}(factor) warmup iters: "
              f"{options['warmup_iters']} iters: {options['iters']} agg iters: 1 validation: {1 if check else 0} "
              f"graph: {options['cudagraph']}", "#", "# Using devices"]
    failure = None
    if scenario.has("driver_missing"):
        failure = "no CUDA-capable device is detected"
    elif ngpus > len(facts.gpus):
        failure = "invalid device ordinal"
    elif scenario.has("fabricmanager_down") and scenario.hardware.gpu.nvswitch:
        failure = "system not yet initialized"
    if failure is not None:
        text = "\n".join(header) + f"\n{host}: Test CUDA failure common.cu:941 '{failure}'\n" \
            f" .. {host} pid {_pid(scenario, 0)}: Test failure common.cu:891\n"
        return ToolOutput(text.encode(), rc=2)
    for rank, gpu in enumerate(facts.gpus[:ngpus]):
        header.append(f"#  Rank {rank:2d} Group  0 Pid {_pid(scenario, 0):6d} on {host:>10} device {rank:2d} "
                      f"[{gpu.lspci_address[:-2]}] {gpu.product_name}")
    if env.get("NCCL_DEBUG", "").upper() in ("VERSION", "INFO", "TRACE"):
        header.append(f"NCCL version {NCCL_VERSION}+cuda{facts.cuda_version}")
    header += ["#",
               "#                                                              out-of-place                       "
               "in-place          ",
               "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   "
               "algbw   busbw #wrong",
               "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  "
               "(GB/s)  (GB/s)       "]
    peak = healthy_busbw(scenario) * (LOW_BW_FACTOR if scenario.has("nccl_low_bw") else 1.0)
    peak *= perf.factor(scenario.name, scenario.faults)  # fleet_spread, slower:<PCT> (nvdeploy/sim/perf.py)
    sizes = []
    size = low
    while size <= high:
        sizes.append(size)
        size *= factor
    correction = 2.0 * (ngpus - 1) / ngpus if ngpus > 1 else 0.0
    rows, total, bws, wrong_total = [], 0.0, [], 0
    wrong_rows = dict(zip(sizes[::-1], WRONG_VALUES[::-1])) if scenario.has("nccl_wrong") else {}
    for size in sizes:
        cells = []
        for place, jitter in (("oop", 1.0), ("ip", 0.998)):
            busbw = busbw_at(peak, size) * jitter if correction else 0.0
            algbw = busbw / correction if correction else busbw_at(peak, size) * jitter
            us = size / (algbw * 1e3) if algbw else 0.0
            wrong = wrong_rows.get(size, 0) if place == "ip" else 0
            wrong_total += wrong
            cells.append(f"  {_time(us)}  {algbw:6.2f}  {busbw:6.2f}  {wrong if check else 'N/A':>5}")
            bws.append(busbw)
        rows.append(f"{size:12d}  {size // 4:12d}  {'float':>8}  {'sum':>6}  {-1:6d}" + "".join(cells))
    total = sum(bws) / len(bws) if bws else 0.0
    gate = env.get("NCCL_TESTS_MIN_BW")
    try:
        minimum = float(gate) if gate is not None else -1.0
    except ValueError:
        minimum = 0.0
    low_avg = minimum != -1.0 and total < minimum * 0.9
    footer = [f"# Out of bounds values : {wrong_total} {'FAILED' if wrong_total else 'OK'}",
              f"# Avg bus bandwidth    : {total:g} " + ("" if minimum == -1.0 else ("FAILED" if low_avg else "OK")),
              "#", "# Collective test concluded: all_reduce_perf", "#"]
    text = "\n".join(header + rows + footer) + "\n"
    return ToolOutput(text.encode(), rc=1 if wrong_total or low_avg else 0)


def process_env() -> dict[str, str]:
    """NCCL_* variables of this process, only when it runs as a fake tool on a fake SSH node."""
    if SCENARIO_ENV not in os.environ:
        return {}
    return {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}


@register_tool("env")
def _env(scenario: NodeScenario, args: Sequence[str]) -> ToolOutput:
    """``env [NAME=VALUE]... COMMAND [ARGS]``: the simulated tools that read their environment get it."""
    assignments: dict[str, str] = {}
    rest = list(args)
    while rest and "=" in rest[0] and not rest[0].startswith("-"):
        name, value = rest.pop(0).split("=", 1)
        assignments[name] = value
    if not rest:
        return ToolOutput("".join(f"{k}={v}\n" for k, v in assignments.items()).encode())
    if os.path.basename(rest[0]) == "all_reduce_perf":
        if scenario.has("hang"):
            return ToolOutput(b"", hang=True)
        return all_reduce_perf(scenario, rest[1:], assignments)
    return tools._run_tool(scenario, rest)  # the caller's run_tool applies the output filters once
