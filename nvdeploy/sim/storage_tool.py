"""The storage throughput script on a simulated node (collect/storage_commands.py): the same framing, with fio's
JSON (or dd's summary line) for each path, and its faults.

A healthy path writes at :data:`HEALTHY_WRITE_GBPS` and reads at :data:`HEALTHY_READ_GBPS`, times the node's
measured-figure factor (nvdeploy/sim/perf.py: ``fleet_spread``, ``slower:<PCT>``) and ``storage_slow:<PCT>``.

Faults (``sim_faults``; ``:<PATH>`` limits one to that path, without it every path has it):

- ``storage_slow:<PCT>``: every path's read and write at PCT% (1-100) of a healthy node's;
- ``storage_missing[:<PATH>]``: the path does not exist (not mounted);
- ``storage_readonly[:<PATH>]``: mktemp fails with "Read-only file system";
- ``storage_hang[:<PATH>]``: the path does not answer: its per-path ``timeout`` ends it (``@@status timeout``);
- ``storage_no_fio``: fio is not installed: dd measures, one stream.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Optional

from nvdeploy.collect.storage_commands import HELPER
from nvdeploy.sim import perf
from nvdeploy.sim.scenario import NodeScenario, register_fault
from nvdeploy.sim.tools import TOOL_HOOKS, ToolOutput

HEALTHY_READ_GBPS = 24.0
HEALTHY_WRITE_GBPS = 12.0
FIO_VERSION = "fio-3.33"
_PCT = r"(?:100|[1-9][0-9]?)(?:\.[0-9]+)?"
STORAGE_SLOW = re.compile(rf"storage_slow:({_PCT})")
_PATHED = {name: re.compile(rf"{name}(?::(/\S*))?") for name in ("storage_missing", "storage_readonly",
                                                                  "storage_hang")}

register_fault("storage_slow", "storage_slow:<PCT>: every storage path's read and write throughput at PCT% of a "
               "healthy node's", pattern=STORAGE_SLOW.pattern)
register_fault("storage_missing", "storage_missing[:<PATH>]: the storage path does not exist (not mounted)",
               pattern=_PATHED["storage_missing"].pattern)
register_fault("storage_readonly", "storage_readonly[:<PATH>]: the storage path is mounted read-only",
               pattern=_PATHED["storage_readonly"].pattern)
register_fault("storage_hang", "storage_hang[:<PATH>]: the storage path hangs (its per-path timeout ends it)",
               pattern=_PATHED["storage_hang"].pattern)
register_fault("storage_no_fio", "fio is not installed: the storage test measures with dd")


def _has(scenario: NodeScenario, fault: str, path: str) -> bool:
    for name in scenario.faults:
        match = _PATHED[fault].fullmatch(name)
        if match and (match.group(1) is None or match.group(1).rstrip("/") == path.rstrip("/")):
            return True
    return False


def storage_factor(scenario: NodeScenario) -> float:
    out = perf.factor(scenario.name, scenario.faults)
    for fault in scenario.faults:
        match = STORAGE_SLOW.fullmatch(fault)
        if match:
            out *= float(match.group(1)) / 100
    return out


def fio_json(job: str, direction: str, gbps: float, size_mib: int) -> str:
    """A fio 3.x JSON document with the fields the parser reads (shaped like tests/fixtures/real/fio)."""
    io_bytes = size_mib << 20
    bw_bytes = int(gbps * 1e9)
    runtime_ms = max(1, int(io_bytes / bw_bytes * 1000))
    idle = {"io_bytes": 0, "io_kbytes": 0, "bw_bytes": 0, "bw": 0, "iops": 0.0, "runtime": 0, "total_ios": 0}
    busy = {"io_bytes": io_bytes, "io_kbytes": io_bytes >> 10, "bw_bytes": bw_bytes, "bw": bw_bytes >> 10,
            "iops": round(bw_bytes / (1 << 20), 6), "runtime": runtime_ms, "total_ios": size_mib}
    document = {"fio version": FIO_VERSION, "timestamp": 1796230523, "time": "Wed Dec  2 16:55:23 2026",
                "jobs": [{"jobname": job, "groupid": 0, "error": 0, "eta": 0, "elapsed": 1,
                          "read": busy if direction == "read" else idle,
                          "write": busy if direction == "write" else idle,
                          "trim": idle, "job_runtime": runtime_ms}]}
    return json.dumps(document, indent=2).replace('": ', '" : ') + "\n"


def dd_line(gbps: float, size_mib: int) -> str:
    size = size_mib << 20
    seconds = size / (gbps * 1e9)
    return (f"{size_mib}+0 records in\n{size_mib}+0 records out\n{size} bytes ({size / 1e9:.1f} GB, "
            f"{size / (1 << 30):.1f} GiB) copied, {seconds:.5f} s, {gbps:.1f} GB/s\n")


def _path_section(scenario: NodeScenario, path: str, size_mib: int, limit: str) -> str:
    out = [f"@@nvd-storage {path}\n"]
    if _has(scenario, "storage_hang", path):
        return "".join(out + [f"@@status timeout {limit}\n", "@@end 124\n"])
    if _has(scenario, "storage_missing", path):
        return "".join(out + ["@@status missing\n", "@@end 0\n"])
    if _has(scenario, "storage_readonly", path):
        return "".join(out + [f"@@status nowrite mktemp: failed to create file via template "
                              f"'{path}/.nvdeploy-storage.XXXXXXXX': Read-only file system\n", "@@end 0\n"])
    factor = storage_factor(scenario)
    figures = {"write": round(HEALTHY_WRITE_GBPS * factor, 3), "read": round(HEALTHY_READ_GBPS * factor, 3)}
    fio = not scenario.has("storage_no_fio")
    out.append(f"@@tool {'fio' if fio else 'dd'}\n")
    for direction in ("write", "read"):
        out.append(f"@@step {direction}\n")
        out.append(fio_json(f"nvdeploy-{direction}", direction, figures[direction], size_mib) if fio
                   else dd_line(figures[direction], size_mib))
        out.append("@@rc 0\n")
    return "".join(out + ["@@status ok\n", "@@end 0\n"])


def _hook(scenario: NodeScenario, argv: Sequence[str]) -> Optional[ToolOutput]:
    # sh -c OUTER nvdeploy-storage SIZE RUNTIME LIMIT INNER PATH...
    args = list(argv)
    if len(args) < 8 or args[0] != "sh" or args[1] != "-c" or args[3] != HELPER:
        return None
    size = int(args[4]) if args[4].isdigit() else 1024
    text = "".join(_path_section(scenario, path, size, args[6]) for path in args[8:]) + "@@done\n"
    return ToolOutput(text.encode())


TOOL_HOOKS.append(_hook)
