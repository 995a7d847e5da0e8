"""A simulated ``nvloom_cli`` (github.com/NVIDIA/nvloom) launched by the simulated mpirun across NVLink domain trays.

Absent by default, as on most nodes: mpirun then prints Open MPI's "unable to find the specified executable" and
exits 1. Present where every participant has the fault ``nvloom``. The output follows nvloom 1.3's format strings
(cli/nvloom_cli.cpp, cli/util.cpp, cli/util.h): the header, one ``Process`` line per rank, per testcase
``Running``, a one-column matrix (one row per rank, the bisect pattern), Min/Avg/Max/Total, ExecutionTime, Done.
The figures are the simulator's own (no public capture gives one): 750 GB/s per GPU, 60% of that on the GPUs of a
tray with ``mnnvl_slow``; ``nvloom_fail`` on a participant makes nvloom stop on its first testcase.
"""

from __future__ import annotations

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
    for name in testcases:
        values = [HEALTHY_GBPS * (SLOW_FACTOR if "mnnvl_slow" in (faults.get(h) or ()) else 1.0) * (1 - 0.001 * (r % 3))
                  for r, (h, _) in enumerate(ranks)]
        lines += [f"Running {name}", "\t0\t"]
        lines += [f"{r}\t{v:.2f}\t" for r, v in enumerate(values)]
        lines += ["", f"Min {name} {min(values):.2f} GB/s", f"Avg {name} {sum(values) / len(values):.2f} GB/s",
                  f"Max {name} {max(values):.2f} GB/s", f"Total {name} {sum(values):.2f} GB/s", "",
                  f"ExecutionTime {name} 2.87 s", f"Done {name}", ""]
    return ToolOutput(("\n".join(lines) + "\n").encode())
