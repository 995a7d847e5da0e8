"""A simulated ``dcgmi health``: ``-s <flags>``, ``-c [-j]`` and ``-f``, in the layout of DCGM's own source
(NVIDIA/DCGM ``dcgmi/Health.cpp``, ``dcgmi/DcgmiOutput.cpp``: ``DcgmiOutputTree(28, 60)`` for text, the jsoncpp
``body``/``header`` tree for ``-j``, messages cut into about 54-character pieces at word ends). The healthy JSON
report matches the real capture in tests/fixtures/real/dcgmi-health; no public capture of an unhealthy one was
found, so the incident layout is rendered from that source. The messages are DCGM's (``dcgmlib/dcgm_errors.h``:
the ``_MSG`` text and its ``_NEXT`` step, as the host engine joins them).

Faults (registered in nvdeploy/sim/dcgm_tool.py):

- ``dcgm_health_warn``: GPU 3 reports a PCIe Warning (more than 8 replays per minute).
- ``dcgm_health_fail:<system>`` (``memory``, ``pcie``, ``nvlink``, ``thermal``, ``power``, ``inforom``,
  ``driver``): GPU 2 reports a Failure of that system.
- ``dcgm_health_late:<system>``: the same Failure, but only in a read made once the watches have had samples (the
  read after the heavy tests), not in the one right after they were set.

The collector's script (``sh -c`` with the two dcgmi calls, nvdeploy/collect/datacenter.py) is answered by a tool
hook that runs the same two simulated calls.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from typing import Any

from nvdeploy.sim.scenario import NodeScenario, node_facts
from nvdeploy.sim.tools import TOOL_HOOKS, ToolOutput

WARN_GPU = 3
FAIL_GPU = 2
MAX_PIECE = 54  # MAX_SIZE_OF_HEALTH_INFO in dcgmi/Health.cpp
GENERIC_ERROR_RC = 253  # DCGM_ST_GENERIC_ERROR (-3) as dcgmi's exit status
TRIAGE = "Check DCGM and system logs for errors. Reset GPU. Restart DCGM. Rerun diagnostics."
# system key -> (DCGM's system name, health, message with {gpu})
FAILURES: dict[str, tuple[str, str]] = {
    "memory": ("Memory system", "Detected 2 volatile double-bit ECC error(s) in GPU {gpu}. Drain the GPU and reset "
               "it or reboot the node."),
    "pcie": ("PCIe system", "Detected more than 8 PCIe replays per minute for GPU {gpu} : 412 Reconnect PCIe card. "
             "Run system side PCIE diagnostic utilities to verify hops off the GPU board. If issue is on the board, "
             "run the field diagnostic."),
    "nvlink": ("NVLINK system", "GPU {gpu}'s NvLink link 5 is currently down " + TRIAGE),
    "thermal": ("Thermal system", "Detected clocks event due to thermal violation in GPU {gpu}. Verify that the "
                "cooling on this machine is functional, including external, thermal material interface, fans, and "
                "any other components."),
    "power": ("Power system", "Cannot reliably read the power usage for GPU {gpu}. " + TRIAGE),
    "inforom": ("InfoROM system", "A corrupt InfoROM has been detected in GPU {gpu}. Flash the InfoROM to clear "
                "this corruption."),
    "driver": ("Driver", "Detected XID 79 for GPU {gpu} Please consult the documentation for details of this XID."),
}
WARNING = ("PCIe system", "Detected more than 8 PCIe replays per minute for GPU {gpu} : 13 Reconnect PCIe card. Run "
           "system side PCIE diagnostic utilities to verify hops off the GPU board. If issue is on the board, run "
           "the field diagnostic.")
# The collector's script (nvdeploy/collect/datacenter.py HEALTH_SCRIPT), matched by its helper name.
HEALTH_HELPER = "dcgm_health"


# A pseudo-argument the collector's hook adds to the check it runs right after setting the watches: a
# ``dcgm_health_late`` incident needs about a minute of samples, so that read cannot show it yet (over SSH, where
# the real sh runs the two calls, the fake dcgmi cannot tell the reads apart and shows it in both).
JUST_SET = "--nvd-just-set"


def incidents(scenario: NodeScenario, just_set: bool = False) -> list[tuple[int, str, str, str]]:
    """(GPU, system, health, message) of the scenario's faults, GPU then system order as DCGM sorts them;
    ``just_set``: a read seconds after the watches were set (no ``dcgm_health_late`` incident yet)."""
    indexes = [g.index for g in node_facts(scenario).gpus]
    if not indexes:
        return []
    out: list[tuple[int, str, str, str]] = []
    for fault in scenario.faults:
        if fault.startswith("dcgm_health_fail:") and fault.split(":", 1)[1] in FAILURES:
            system, message = FAILURES[fault.split(":", 1)[1]]
            gpu = min(FAIL_GPU, max(indexes))
            out.append((gpu, system, "Failure", message.format(gpu=gpu)))
        if fault.startswith("dcgm_health_late:") and fault.split(":", 1)[1] in FAILURES and not just_set:
            system, message = FAILURES[fault.split(":", 1)[1]]
            gpu = min(FAIL_GPU, max(indexes))
            out.append((gpu, system, "Failure", message.format(gpu=gpu)))
    if scenario.has("dcgm_health_warn"):
        gpu = min(WARN_GPU, max(indexes))
        out.append((gpu, WARNING[0], "Warning", WARNING[1].format(gpu=gpu)))
    return sorted(out, key=lambda i: i[0])


def pieces(message: str) -> list[str]:
    """A message cut as Health::AddErrorMessage cuts it (at a word end, at most about 54 characters a piece)."""
    words, out, line = message.replace("\n", " ").split(" "), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > MAX_PIECE:
            out.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        out.append(line)
    return out


def _worst(values: Sequence[str]) -> str:
    return "Failure" if "Failure" in values else "Warning" if "Warning" in values else "Healthy"


def report(scenario: NodeScenario, as_json: bool, just_set: bool = False) -> str:
    found = incidents(scenario, just_set)
    overall = _worst([h for _, _, h, _ in found])
    by_gpu: dict[int, list[tuple[str, str, str]]] = {}
    for gpu, system, health, message in found:
        by_gpu.setdefault(gpu, []).append((system, health, message))
    if as_json:
        body: dict[str, Any] = {"Overall Health": {"value": overall}}
        if by_gpu:
            children: dict[str, Any] = {}
            for gpu, items in by_gpu.items():
                errors = {system: {"overflow": pieces(message), "value": health} for system, health, message in items}
                children[str(gpu)] = {"children": {"Errors": {"children": errors}},
                                      "value": _worst([h for _, h, _ in items])}
            body["GPU"] = {"children": children}
        # jsoncpp's styled output as the real capture shows it: ' : ' separators, keys sorted, an object or array
        # opened on the line after its key (which keeps a trailing space); tab indents.
        text = json.dumps({"body": body, "header": ["Health Monitor Report"]}, indent="\t",
                          separators=(",", " : "), sort_keys=True)
        return re.sub(r'(?m)^(\t*)(".*") : ([{\[])$', "\\1\\2 : \n\\1\\3", text) + "\n"

    def row(left: str, right: str) -> str:
        return f"| {left:<25} | {right:<56} |\n"

    hline = "+" + "-" * 27 + "+" + "-" * 58 + "+\n"
    out = [hline, f"| {'Health Monitor Report':<85}|\n", "+" + "=" * 27 + "+" + "=" * 58 + "+\n",
           row("Overall Health", overall)]
    if by_gpu:
        out.append(row("GPU", ""))
        for gpu, items in by_gpu.items():
            out.append(row(f"-> {gpu}", _worst([h for _, h, _ in items])))
            out.append(row("   -> Errors", ""))
            for system, health, message in items:
                out.append(row(f"      -> {system}", health))
                out += [row("", piece) for piece in pieces(message)]
    out.append(hline)
    return "".join(out)


def health(scenario: NodeScenario, args: Sequence[str]) -> ToolOutput:
    """``dcgmi health`` after dcgm_tool's gates (installed, host engine up)."""
    args = list(args)
    if "-s" in args or "--set" in args:
        flag = args[args.index("-s" if "-s" in args else "--set") + 1:][:1]
        if not flag or not flag[0] or any(c not in "adimnptx" for c in flag[0]) or \
                ("a" in flag[0] and len(flag[0]) > 1):
            return ToolOutput(b"", b"PARSE ERROR:\n             Argument: -s (--set)\n"
                              b"             Invalid flags detected\n", 255)
        return ToolOutput(b"Health monitor systems set successfully.\n")
    if "-c" in args or "--check" in args:
        return ToolOutput(report(scenario, "-j" in args or "--json" in args, JUST_SET in args).encode())
    if "-f" in args or "--fetch" in args:
        systems = ("PCIe", "NVLINK", "Memory", "SM", "InfoROM", "Thermal", "Power", "Driver", "NvSwitch NF",
                   "NvSwitch F", "ConnectX")
        hline = "+" + "-" * 17 + "+" + "-" * 68 + "+\n"
        rows = "".join(f"| {name:<15} | {'Off' if name == 'SM' else 'On':<66} |\n" for name in systems)
        return ToolOutput(("Health monitor systems report\n" + hline + rows + hline).encode())
    return ToolOutput(b"", b"dcgmi health: one of -s, -c, -f or --clear is required (simulator)\n", 255)


def _hook(scenario: NodeScenario, argv: Sequence[str]) -> ToolOutput | None:
    """``sh -c HEALTH_SCRIPT dcgm_health``: the set, then (when it worked) the check, as the real shell runs them."""
    args = list(argv)
    if args and os.path.basename(args[0]) == "env":
        args = args[1:]
    if len(args) < 4 or os.path.basename(args[0]) != "sh" or args[1] != "-c" or args[3] != HEALTH_HELPER:
        return None
    from nvdeploy.sim.tools import run_tool

    first = run_tool(scenario, ["dcgmi", "health", "-g", "0", "-s", "a"])
    if first.rc != 0 or first.hang:
        return first
    second = run_tool(scenario, ["dcgmi", "health", "-g", "0", "-c", "-j", JUST_SET])
    return ToolOutput(first.stdout + second.stdout, first.stderr + second.stderr, second.rc, hang=second.hang)


TOOL_HOOKS.append(_hook)
