"""A simulated Open MPI ``mpirun`` launching nccl-tests across the simulated nodes of one cluster.

``mpirun [--timeout S] [-np N] -H host:slots,... [-x NAME=VALUE]... [--bind-to X] [--mca K V]... PROGRAM ARGS``
prints what a multi-node ``all_reduce_perf -g 1`` prints (one rank per GPU, ``#  Rank`` lines naming each host,
the result table and footer; nccl-tests 2.13 layout). The launcher knows the other hosts' faults from
``NodeScenario.peers`` (address -> faults).

Bandwidth: a healthy set reaches 1% above the hardware profile's ``nccl.multinode_busbw_gbps`` at 8 GiB. Faults
of any participant: ``nccl_low_bw`` or ``ib_port_down`` -> 60% of that (the slowest link sets the ring's pace);
``nccl_hang`` -> the run hangs, or, with ``--timeout``, mpirun stops it and exits 1 after printing Open MPI's
timeout message; ``unreachable`` -> the daemon on that host cannot start: Open MPI's error, no table, exit 1.

A run with ``NCCL_MNNVL_ENABLE=1`` (nccl.domain: the trays of one NVLink domain) goes over multi-node NVLink
instead: 1% above the profile's ``nvlink_domain.all_reduce_busbw_gbps`` (800 GB/s where the profile states none)
for a run of the figure's size (``all_reduce_ranks``, else the whole domain), and ``mnnvl_slow`` on any participant
-> 60% of that; the InfiniBand faults do not touch it. A group of another size keeps the algbw of that run (each
GPU's NVLink to the switch trays sets it), so its busbw scales with nccl-tests' all_reduce factor 2(n-1)/n: a pair
of trays (8 ranks) comes out about 11% below a full rack (the simulator's model, not a published figure). Without MNNVL
(``NCCL_MNNVL_ENABLE=0``, or unset) ``mnnvl_slow`` changes nothing: the ranks talk over InfiniBand.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from nvdeploy.config.hostrange import HostRangeError, expand
from nvdeploy.sim import perf
from nvdeploy.sim.nccl_tool import (
    HEALTHY_MARGIN,
    LOW_BW_FACTOR,
    NCCL_CODE,
    NCCL_TESTS_VERSION,
    NCCL_VERSION,
    SCENARIO_ENV,
    all_reduce_perf,
    busbw_at,
    process_env,
)
from nvdeploy.sim.nccl_tool import _bytes as parse_size
from nvdeploy.sim.nccl_tool import _time as fmt_time
from nvdeploy.sim.scenario import NodeScenario, node_facts, register_fault
from nvdeploy.sim.tools import ToolOutput, register_tool

register_fault("mnnvl_slow", "NVLink domain tray: its multi-node NVLink runs slow, so an all_reduce over the domain "
               "with NCCL_MNNVL_ENABLE=1 comes out at 60% of the profile's nvlink_domain figure (nccl.domain)")
# A healthy domain's busbw where the profile states no figure (gb300-nvl72): only for the simulated run.
DEFAULT_DOMAIN_BUSBW = 800.0

_WITH_VALUE = {"-np", "-n", "--np", "-H", "--host", "-x", "--bind-to", "--map-by", "--timeout", "--hostfile",
               "--report-state-on-timeout", "--mca", "-mca"}
_FLAGS = {"--allow-run-as-root", "--tag-output", "--oversubscribe", "--get-stack-traces", "--report-state-on-timeout",
          "-q", "--quiet"}


def _parse(args: Sequence[str]) -> tuple[dict[str, object], list[str]] | None:
    options: dict[str, object] = {"env": {}, "hosts": []}
    rest = list(args)
    while rest and rest[0].startswith("-"):
        option = rest.pop(0)
        if option in _FLAGS and option != "--report-state-on-timeout":
            continue
        if option in ("--mca", "-mca"):
            if len(rest) < 2:
                return None
            rest = rest[2:]
            continue
        if option not in _WITH_VALUE or not rest:
            return None
        value = rest.pop(0)
        if option == "-x":
            name, _, assigned = value.partition("=")
            options["env"][name] = assigned  # type: ignore[index]
        elif option in ("-H", "--host"):
            for item in value.split(","):
                host, _, slots = item.partition(":")
                options["hosts"].append((host, int(slots or 1)))  # type: ignore[union-attr]
        elif option in ("-np", "-n", "--np"):
            options["np"] = int(value)
        elif option == "--timeout":
            options["timeout"] = int(value)
    return options, rest


def _faults_of(scenario: NodeScenario, host: str) -> tuple[str, ...] | None:
    if host in (scenario.name, "localhost", "127.0.0.1"):
        return scenario.faults
    for address, faults in scenario.peers:
        if address == host:
            return faults
    return None


def _option(args: Sequence[str], flag: str, default: str) -> str:
    return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else default


def slurm_step_hosts() -> list[tuple[str, int]] | None:
    """(node, ranks) of the Slurm step this process is one task of, when srun started it directly across more
    than one node (``srun --ntasks-per-node=G all_reduce_perf``), as a rank of multi-node nccl-tests; None
    otherwise. A command inside the node batch is also a task's descendant in a multi-node step (one task per
    node), but its parent is the batch's shell, not slurmstepd."""
    env = os.environ
    if "SLURM_PROCID" not in env:
        return None
    try:
        parent = Path(f"/proc/{os.getppid()}/comm").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if parent != "slurmstepd":
        return None
    nodes: list[str] = []
    try:
        for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", env.get("SLURM_STEP_NODELIST")
                               or env.get("SLURM_JOB_NODELIST", "")):
            nodes += expand(part)
        tasks = int(env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or 0)
    except (HostRangeError, ValueError):
        return None
    if len(nodes) < 2:
        return None
    return [(node, max(1, tasks // len(nodes))) for node in nodes]


def slurm_rank_output(scenario: NodeScenario, args: Sequence[str], env: Mapping[str, str]) -> ToolOutput | None:
    """``all_reduce_perf`` as one rank of a multi-node Slurm step (``srun --mpi=none``: no MPI to gather the ranks,
    so each rank knows its step from Slurm's variables): rank 0 prints the whole job's table, computed from every
    node's faults (``NodeScenario.peers``) as the simulated mpirun does; the other ranks print nothing. None when
    this process is not such a rank."""
    hosts = slurm_step_hosts()
    if hosts is None:
        return None
    if os.environ.get("SLURM_PROCID") != "0":
        return ToolOutput(b"")
    faults = {host: _faults_of(scenario, host) for host, _ in hosts}
    unknown = [h for h, f in faults.items() if f is None or "unreachable" in f]
    if unknown:
        return ToolOutput(b"", f"all_reduce_perf: no scenario for step node(s) {', '.join(unknown)}\n".encode(), 1)
    return multinode_table(scenario, hosts, env, args, faults)


@register_tool("all_reduce_perf")
def _all_reduce_perf(scenario: NodeScenario, args: Sequence[str]) -> ToolOutput:
    """Registered here rather than in nccl_tool.py: a rank of a multi-node Slurm step prints this module's table."""
    env = process_env()
    ranked = slurm_rank_output(scenario, args, env) if SCENARIO_ENV in os.environ else None
    return ranked if ranked is not None else all_reduce_perf(scenario, args, env)


@register_tool("mpirun")
def mpirun(scenario: NodeScenario, args: Sequence[str]) -> ToolOutput:
    parsed = _parse(args)
    if parsed is None or not parsed[1]:
        return ToolOutput(b"", b"mpirun: unrecognized or incomplete command line (simulated)\n", 1)
    options, program = parsed
    hosts: list[tuple[str, int]] = options["hosts"]  # type: ignore[assignment]
    env: Mapping[str, str] = options["env"]  # type: ignore[assignment]
    if hosts and program[0].endswith("nvloom_cli"):
        from nvdeploy.sim.nvloom_tool import nvloom_output

        return nvloom_output(scenario, hosts, {host: _faults_of(scenario, host) for host, _ in hosts}, program)
    if not hosts or not program[0].endswith("all_reduce_perf"):
        return ToolOutput(b"", b"simulated mpirun runs all_reduce_perf on -H hosts only\n", 1)
    faults = {host: _faults_of(scenario, host) for host, _ in hosts}
    unknown = [h for h, f in faults.items() if f is None or "unreachable" in f]
    if unknown:
        text = ("--------------------------------------------------------------------------\n"
                "ORTE was unable to reliably start one or more daemons.\n"
                f"This usually is caused by:\n* not finding the required libraries and/or binaries on\n"
                f"  one or more nodes ({', '.join(unknown)}).\n"
                "--------------------------------------------------------------------------\n")
        return ToolOutput(b"", text.encode(), 1)
    return multinode_table(scenario, hosts, env, program[1:], faults, options.get("timeout"))  # type: ignore[arg-type]


def multinode_table(scenario: NodeScenario, hosts: Sequence[tuple[str, int]], env: Mapping[str, str],
                    program: Sequence[str], faults: Mapping[str, tuple[str, ...] | None],
                    timeout: int | None = None) -> ToolOutput:
    """What rank 0 of a multi-node ``all_reduce_perf -g 1`` prints (shared by mpirun and a Slurm step)."""
    every = {f for fs in faults.values() for f in fs or ()}
    if "nccl_hang" in every:
        if timeout is not None:
            message = (f"--------------------------------------------------------------------------\n"
                       f"The user-provided time limit for job execution has been reached:\n\n"
                       f"  Timeout: {timeout} seconds\n\nThe job will now be aborted.\n"
                       f"--------------------------------------------------------------------------\n")
            return ToolOutput(b"", message.encode(), 1, delay_s=float(timeout))
        return ToolOutput(b"", hang=True)
    nccl = scenario.hardware.extra.get("nccl") or {}
    domain = getattr(scenario.hardware, "nvlink_domain", None)
    if env.get("NCCL_MNNVL_ENABLE") == "1" and domain is not None:
        peak = float(domain.all_reduce_busbw_gbps or DEFAULT_DOMAIN_BUSBW) * HEALTHY_MARGIN
        size, ranks = float(getattr(domain, "floor_ranks", domain.gpus)), sum(slots for _, slots in hosts)
        peak *= ((ranks - 1) / ranks) / ((size - 1) / size) if ranks > 1 and size > 1 else 1.0
        if "mnnvl_slow" in every:
            peak *= LOW_BW_FACTOR
    else:
        peak = float(nccl.get("multinode_busbw_gbps", 45.0)) * HEALTHY_MARGIN
        if every & {"nccl_low_bw", "ib_port_down"}:
            peak *= LOW_BW_FACTOR
    # A synchronous collective goes as fast as its slowest member (slower:<PCT>, nvdeploy/sim/perf.py).
    peak *= min((perf.slower_factor(f or ()) for f in faults.values()), default=1.0)
    ranks = sum(slots for _, slots in hosts)
    program = ["all_reduce_perf", *program]
    low = parse_size(_option(program, "-b", "8G")) or 1
    high = parse_size(_option(program, "-e", "8G")) or low
    factor = int(_option(program, "-f", "2"))
    gpus = node_facts(scenario).gpus
    lines = [f"# nccl-tests version {NCCL_TESTS_VERSION} nccl-headers={NCCL_CODE} nccl-library={NCCL_CODE}",
             "# Collective test starting: all_reduce_perf",
             f"# nThread 1 nGpus 1 minBytes {low} maxBytes {high} step: {factor}(factor) warmup iters: 5 iters: 20 "
             "agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    rank = 0
    for host, slots in hosts:
        for local in range(slots):
            gpu = gpus[local % len(gpus)]
            lines.append(f"#  Rank {rank:2d} Group  0 Pid {40000 + rank:6d} on {host:>10} device {local:2d} "
                         f"[{gpu.lspci_address[:-2]}] {gpu.product_name}")
            rank += 1
    if env.get("NCCL_DEBUG", "").upper() in ("VERSION", "INFO", "TRACE"):
        lines.append(f"NCCL version {NCCL_VERSION}+cuda{node_facts(scenario).cuda_version}")
    lines += ["#", "#                                                              out-of-place                       "
              "in-place          ",
              "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   "
              "algbw   busbw #wrong",
              "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  "
              "(GB/s)  (GB/s)       "]
    correction = 2.0 * (ranks - 1) / ranks
    size, bws = low, []
    while size <= high:
        cells = []
        for jitter in (1.0, 0.998):
            busbw = busbw_at(peak, size) * jitter
            algbw = busbw / correction
            cells.append(f"  {fmt_time(size / (algbw * 1e3))}  {algbw:6.2f}  {busbw:6.2f}  {0:>5}")
            bws.append(busbw)
        lines.append(f"{size:12d}  {size // 4:12d}  {'float':>8}  {'sum':>6}  {-1:6d}" + "".join(cells))
        size *= factor
    average = sum(bws) / len(bws)
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {average:g} ", "#",
              "# Collective test concluded: all_reduce_perf", "#"]
    return ToolOutput(("\n".join(lines) + "\n").encode())
