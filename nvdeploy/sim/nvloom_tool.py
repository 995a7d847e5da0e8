"""A simulated ``nvloom_cli`` (github.com/NVIDIA/nvloom) launched by the simulated mpirun across NVLink domain trays.

Absent by default, as on most nodes: mpirun then prints Open MPI's "unable to find the specified executable" and
exits 1. Present where every participant has the fault ``nvloom``. The output follows nvloom 1.3's print statements
(commit 2e7b742: cli/nvloom_cli.cpp, cli/util.cpp, cli/util.h, cli/testcases.cpp): the header, one ``Process`` line
per rank, per testcase ``Running``, its matrix, Min/Avg/Max/Total, ExecutionTime, Done. Two testcases are played:

- the bisect pattern (``bisect_*``): one column ``0``, one row per rank labelled ``i->peer`` with peer = (i + N/2)
  mod N, GPU i writing to its peer, so a slow GPU lowers its own row and its partner's row ``peer->i``;
- gpu-to-rack (``gpu_to_rack_*``): one column per rack GUID, one row per rank labelled with the rank, each cell
  the median of 5 copies (nvloom's default ``--gpuToRackSamples``) from GPU i to peers drawn at random from that
  rack (a fixed seed here, nvloom's is random), so a slow GPU is slow in its own row and barely in the others.

The figures are the simulator's own (no public capture gives one): 750 GB/s per copy, 60% of that for a copy to or
from a GPU of a tray with ``mnnvl_slow``; ``nvloom_fail`` on a participant makes nvloom stop on its first testcase.
"""

from __future__ import annotations

import random
import statistics
import zlib
from collections.abc import Mapping, Sequence

from nvdeploy.sim.scenario import NodeScenario, node_facts, register_fault
from nvdeploy.sim.tools import ToolOutput

register_fault("nvloom", "NVLink domain tray: NVIDIA's nvloom_cli is installed (nvloom.domain runs it where every "
               "tray of the domain has it; absent by default)")
register_fault("nvloom_fail", "NVLink domain tray: nvloom_cli stops on its first testcase with a CUDA error "
               "(nvloom.domain FAILs naming the testcase)")
HEALTHY_GBPS = 750.0
SLOW_FACTOR = 0.6
GPU_TO_RACK_SAMPLES = 5


def _copy(slow: Sequence[bool], src: int, dst: int, jitter: int) -> float:
    # A copy crosses the links of both GPUs: either one slow sets its pace.
    return HEALTHY_GBPS * (SLOW_FACTOR if slow[src] or slow[dst] else 1.0) * (1 - 0.001 * (jitter % 3))


def _matrix(name: str, ranks: int, slow: Sequence[bool], rack: str, seed: int) -> list[str]:
    """The matrix lines of one testcase (header row, rows) and its values."""
    if name.startswith("gpu_to_rack_"):
        rng = random.Random(seed)
        rows, values = [f"\t{rack}\t"], []
        for i in range(ranks):
            peers = rng.sample([j for j in range(ranks) if j != i], min(GPU_TO_RACK_SAMPLES, ranks - 1))
            value = sorted(_copy(slow, i, j, i + j) for j in peers)[len(peers) // 2] if peers else 0.0
            rows.append(f"{i}\t{value:.2f}\t" if value else f"{i}\tN/A\t")
            values.append(value)
        return rows + _summary(name, values)
    rows, values = ["\t0\t"], []
    for i in range(ranks):
        peer = (i + ranks // 2) % ranks
        value = _copy(slow, i, peer, i)
        rows.append(f"{i}->{peer}\t{value:.2f}\t")
        values.append(value)
    return rows + _summary(name, values)


def _summary(name: str, values: Sequence[float]) -> list[str]:
    kept = [v for v in values if v]
    return ["", f"Min {name} {min(kept):.2f} GB/s", f"Avg {name} {statistics.fmean(kept):.2f} GB/s",
            f"Max {name} {max(kept):.2f} GB/s", f"Total {name} {sum(kept):.2f} GB/s", ""]


def nvloom_output(scenario: NodeScenario, hosts: Sequence[tuple[str, int]],
                  faults: Mapping[str, tuple[str, ...] | None], program: Sequence[str]) -> ToolOutput:
    missing = [h for h, f in faults.items() if "nvloom" not in (f or ())]
    if missing:
        text = ("--------------------------------------------------------------------------\n"
                "mpirun was unable to find the specified executable file, and therefore\n"
                "did not launch the job.  This error was first reported for process\n"
                "rank 0; it may have occurred for other processes as well.\n\n"
                f"Node:       {missing[0]}\nExecutable: {program[0]}\n"
                "--------------------------------------------------------------------------\n")
        return ToolOutput(b"", text.encode(), 1)
    args = list(program[1:])
    testcases = args[args.index("-t") + 1:] if "-t" in args else ["bisect_device_to_device_write_sm"]
    facts = node_facts(scenario)
    ranks = [(host, local) for host, slots in hosts for local in range(slots)]
    pad = len(str(max(len(ranks) - 1, 1)))
    lines = ["nvloom_cli 1.3.0", "git commit: unknown", "NVCC version: 12.8", f"CUDA version: {facts.cuda_version}",
             f"Driver version: {facts.driver_version}", "Allocation strategy: reuse", "Buffer size: 512 MiB",
             "Iteration count: 16"]
    rack = f"{zlib.crc32((scenario.rack or scenario.name).encode()):08x}"
    for rank, (host, local) in enumerate(ranks):
        gpu = facts.gpus[local % len(facts.gpus)]
        lines.append(f"Process {rank:>{pad}} ({host}): device {local}: {gpu.product_name} "
                     f"({gpu.lspci_address[:-2].lower()}); rackGuid: {rack}")
    lines.append("")
    if any("nvloom_fail" in (f or ()) for f in faults.values()):
        lines += [f"Running {testcases[0]}"]
        err = f"Error running testcase {testcases[0]}: CUDA_ERROR_ILLEGAL_ADDRESS\n"
        return ToolOutput(("\n".join(lines) + "\n").encode(), err.encode(), 1)
    slow = [("mnnvl_slow" in (faults.get(h) or ())) for h, _ in ranks]
    seed = zlib.crc32(",".join(h for h, _ in hosts).encode())
    for name in testcases:
        lines += [f"Running {name}", *_matrix(name, len(ranks), slow, rack, seed),
                  f"ExecutionTime {name} 2.87 s", f"Done {name}", ""]
    return ToolOutput(("\n".join(lines) + "\n").encode())
