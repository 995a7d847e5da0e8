"""A simulated ``dcgmi`` (DCGM 3.3): ``--version``, ``discovery -l``, ``diag -r 1|2|3|4 [-j]``, ``diag -r diagnostic
[-p diagnostic.test_duration=S] -j`` (the Diagnostic plugin alone) and ``health``
(nvdeploy/sim/dcgm_health_tool.py).

``diag -j`` prints the DCGM 3.x JSON layout (``"DCGM GPU Diagnostic"`` with ``test_categories``, ``gpu_ids`` for
deployment tests and one ``gpu_id`` per GPU for the others, ``version``, then ``"Driver Version Detected"``);
without ``-j`` the DCGM 3.x text table (27/48-column cells, messages wrapped at 45 characters). Tests per level:
r1 the deployment tests; r2 + PCIe and GPU Memory; r3 + Diagnostic, Targeted Stress, Targeted Power, Memory
Bandwidth (and EUD Test, skipped: not installed); r4 + Memtest and Pulse Test. Exit 226 when a test failed.

Faults:

- ``dcgm_fail:<test>`` (``pcie``, ``memory``, ``diagnostic``, ``targeted_stress``, ``targeted_power``,
  ``memory_bandwidth``, ``memtest``, ``pulse_test``, ``software``): that test fails on GPU 2 with DCGM's message,
  at the levels that run it only (``dcgm_fail:targeted_stress`` passes ``-r 2`` and fails ``-r 3``).
- ``dcgm_missing``: every ``dcgmi`` call is "not found" (exit 127); nvidia-dcgm is inactive.
- ``hostengine_down``: ``dcgmi --version`` works, ``discovery``/``diag`` cannot reach nv-hostengine (exit 255).
- ``dcgm_hang``: ``dcgmi diag`` never returns (the collector's hard timeout ends it); other calls answer.
- ``fabricmanager_down`` (nvdeploy/sim/datacenter.py), on NVSwitch SKUs: the CUDA-based tests fail on every GPU
  with "Unable to initialize CUDA library: 'system not yet initialized'" and PCIe is skipped, as real DCGM does.
- ``fleet_spread``, ``slower:<PCT>``, ``slower_gpu:<GPU>:<PCT>`` (nvdeploy/sim/perf.py): the Diagnostic test's
  per-GPU gigaflops info message (JSON only) varies by node and GPU, or is PCT% of a healthy GPU's.
- ``driver_missing``: nv-hostengine cannot start (as ``hostengine_down``); ``gpu_missing``: DCGM lists one GPU less.
- ``dcgm_health_warn``, ``dcgm_health_fail:<system>``: ``dcgmi health -c`` reports a PCIe Warning on GPU 3, or a
  Failure of that system on GPU 2 (nvdeploy/sim/dcgm_health_tool.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from nvdeploy.sim import dcgm_health_tool, perf
from nvdeploy.sim.scenario import NodeScenario, node_facts, register_fault
from nvdeploy.sim.tools import ToolOutput, register_tool

DCGM_VERSION = "3.3.5"
FAIL_GPU = 2
HEALTHY_GFLOPS = 859.08
H100_BF16_TFLOPS = 989.4
DIAG_FAILED_RC = 226
HOSTENGINE_RC = 255
HOSTENGINE_ERROR = ("Error: unable to establish a connection to the specified host: localhost\n"
                    "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n")
DEPLOYMENT = ("Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS-related Blocks", "Persistence Mode",
              "Environmental Variables", "Page Retirement/Row Remap", "Graphics Processes", "Inforom")
# (level first run, category, display name, fault key, needs CUDA)
TESTS = (
    (2, "Integration", "PCIe", "pcie", True),
    (2, "Hardware", "GPU Memory", "memory", True),
    (3, "Hardware", "Diagnostic", "diagnostic", True),
    (3, "Stress", "Targeted Stress", "targeted_stress", True),
    (3, "Stress", "Targeted Power", "targeted_power", True),
    (3, "Stress", "Memory Bandwidth", "memory_bandwidth", True),
    (3, "Stress", "EUD Test", "eud", False),
    (4, "Hardware", "Memtest", "memtest", True),
    (4, "Stress", "Pulse Test", "pulse_test", True),
)
FAIL_MESSAGES = {
    "pcie": "Bandwidth of GPU {gpu} in direction host to device of 8.12 did not exceed minimum required bandwidth "
            "of 18.00.",
    "memory": "1 faulty memory elements detected on GPU {gpu}. Drain the GPU and reset it or reboot the node.",
    "diagnostic": "Detected 12 double-precision GEMM errors on GPU {gpu}: results do not match. Run a field "
                  "diagnostic on the GPU.",
    "targeted_stress": "Max stress level of 2103.4 did not reach desired stress level of 4500.0 for GPU {gpu}.",
    "targeted_power": "Max power of 411.2 did not reach desired power minimum targeted_power of 630.0 for GPU {gpu}.",
    "memory_bandwidth": "GPU {gpu} only achieved a memory bandwidth of 1210.45 GB/s, failing to meet 2800.00 GB/s "
                        "for test 1.",
    "memtest": "Memtest found 4 errors on GPU {gpu}: test 7 (random pattern). Drain and check the GPU.",
    "pulse_test": "Pulse test failed for GPU {gpu}: the power supply could not sustain the power transients.",
    "software": "GPU {gpu} has uncorrectable memory errors and row remapping failed. Drain and reset the GPU.",
}
CUINIT_MESSAGE = ("GPU {gpu} Error using CUDA API cuInit Check DCGM and system logs for errors. Reset GPU. Restart "
                  "DCGM. Rerun diagnostics. Unable to initialize CUDA library: 'system not yet initialized'. . "
                  "Please check if a CUDA sample program can be run successfully on this host. Refer to "
                  "https://github.com/nvidia/cuda-samples")
FAIL_TESTS = tuple(FAIL_MESSAGES)
# The text table's shorter names (DCGM 3.3 text output) for the JSON's long ones.
TEXT_NAMES = {"Permissions and OS-related Blocks": "Permissions and OS Blocks",
              "Environmental Variables": "Environment Variables"}

register_fault("dcgm_fail", "dcgm_fail:<test>: the DCGM diag test fails on GPU 2 (" + ", ".join(FAIL_TESTS) + ")",
               pattern=r"dcgm_fail:(?:" + "|".join(FAIL_TESTS) + ")")
register_fault("dcgm_missing", "dcgmi not installed (exit 127)")
register_fault("hostengine_down", "nv-hostengine not running: dcgmi discovery/diag cannot connect")
register_fault("dcgm_hang", "dcgmi diag never returns")
register_fault("dcgm_health_warn", "dcgmi health -c: GPU 3 PCIe Warning (more than 8 replays per minute)")
register_fault("dcgm_health_late", "dcgm_health_late:<system>: a Failure of that system on GPU 2 that only a read "
               "made after the watches had samples shows (the one after the heavy tests)",
               pattern=r"dcgm_health_late:(?:" + "|".join(dcgm_health_tool.FAILURES) + ")")
register_fault("dcgm_health_fail", "dcgm_health_fail:<system>: dcgmi health -c reports a Failure of that system on "
               "GPU 2 (" + ", ".join(dcgm_health_tool.FAILURES) + ")",
               pattern=r"dcgm_health_fail:(?:" + "|".join(dcgm_health_tool.FAILURES) + ")")


def failing_tests(scenario: NodeScenario) -> set[str]:
    return {f.split(":", 1)[1] for f in scenario.faults if f.startswith("dcgm_fail:")}


def _not_found() -> ToolOutput:
    return ToolOutput(b"", b"sh: 1: dcgmi: not found\n", 127)


def _hostengine_down(scenario: NodeScenario) -> bool:
    return scenario.has("hostengine_down") or scenario.has("driver_missing")


@register_tool("dcgmi")
def dcgmi(scenario: NodeScenario, args: Sequence[str]) -> ToolOutput:
    if scenario.has("dcgm_missing"):
        return _not_found()
    if list(args) in (["--version"], ["-v"]):
        return ToolOutput(f"dcgmi  version: {DCGM_VERSION}\n\n".encode())
    if not args:
        return ToolOutput(b"", b"dcgmi: missing command (discovery, diag, ...)\n", 255)
    if args[0] == "mndiag":
        from nvdeploy.sim.mndiag_tool import mndiag

        return mndiag(scenario, args[1:])
    if args[0] not in ("discovery", "diag", "health"):
        return ToolOutput(b"", f"dcgmi: unsupported subcommand {args[0]!r} in the simulator\n".encode(), 255)
    if args[0] == "diag" and scenario.has("dcgm_hang"):
        return ToolOutput(b"", hang=True)
    if _hostengine_down(scenario):
        return ToolOutput(HOSTENGINE_ERROR.encode(), rc=HOSTENGINE_RC)
    if args[0] == "discovery":
        return _discovery(scenario, args[1:])
    if args[0] == "health":
        return dcgm_health_tool.health(scenario, args[1:])
    return _diag(scenario, args[1:])


def _row(left: str, right: str) -> str:
    return f"| {left:<6} | {right:<68} |\n"


def _discovery(scenario: NodeScenario, args: Sequence[str]) -> ToolOutput:
    if list(args) not in (["-l"], ["--list"]):
        return ToolOutput(b"", b"Error: only 'dcgmi discovery -l' is simulated\n", 255)
    facts = node_facts(scenario)
    border = "+--------+----------------------------------------------------------------------+\n"
    count = len(facts.gpus)
    out = [f"{count} GPU{'s' if count != 1 else ''} found.\n", border, _row("GPU ID", "Device Information"), border]
    for gpu in facts.gpus:
        out += [_row(str(gpu.index), f"Name: {gpu.product_name}"), _row("", f"PCI Bus ID: {gpu.bus_id}"),
                _row("", f"Device UUID: {gpu.uuid}"), border]
    switches = len(facts.nvswitches)
    out.append(f"{switches} NvSwitch{'es' if switches != 1 else ''} found.\n")
    out += ["+-----------+\n", "| Switch ID |\n", "+-----------+\n"]
    out += [f"| {sid:<9} |\n" for sid in range(8, 8 + switches)]
    out.append("+-----------+\n")
    return ToolOutput("".join(out).encode())


def _level(args: Sequence[str]) -> int | None:
    args = list(args)
    for i, arg in enumerate(args):
        if arg in ("-r", "--run") and i + 1 < len(args):
            return int(args[i + 1]) if args[i + 1] in ("1", "2", "3", "4") else None
    return None


def diag_results(scenario: NodeScenario, level: int) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """(category, test name, results) as DCGM 3.x reports them for ``dcgmi diag -r level``."""
    facts = node_facts(scenario)
    indexes = [g.index for g in facts.gpus]
    all_ids = ",".join(str(i) for i in indexes)
    fail = failing_tests(scenario)
    fail_gpu = min(FAIL_GPU, max(indexes)) if indexes else 0
    no_cuda = scenario.has("fabricmanager_down") and scenario.hardware.gpu.nvswitch
    out: list[tuple[str, str, list[dict[str, Any]]]] = []
    for name in DEPLOYMENT:
        results: list[dict[str, Any]] = [{"gpu_ids": all_ids, "status": "Pass"}]
        if name == "Page Retirement/Row Remap" and "software" in fail:
            others = ",".join(str(i) for i in indexes if i != fail_gpu)
            results = [{"gpu_ids": others, "status": "Pass"},
                       {"gpu_id": str(fail_gpu), "status": "Fail",
                        "warnings": [{"error_category": 4, "error_id": 95, "error_severity": 2,
                                      "warning": FAIL_MESSAGES["software"].format(gpu=fail_gpu)}]}]
        out.append(("Deployment", name, results))
    for first, category, name, key, cuda in TESTS:
        if level < first:
            continue
        results = []
        for index in indexes:
            if key == "eud":
                results.append({"gpu_id": str(index), "status": "Skip"})
            elif no_cuda and key == "pcie":
                results.append({"gpu_id": str(index), "status": "Skip"})
            elif no_cuda and cuda:
                results.append({"gpu_id": str(index), "status": "Fail", "warnings": [
                    {"error_category": 1, "error_id": 15, "error_severity": 2,
                     "warning": CUINIT_MESSAGE.format(gpu=index)}]})
            elif key in fail and index == fail_gpu:
                results.append({"gpu_id": str(index), "status": "Fail", "warnings": [
                    {"error_category": 2, "error_id": 40, "error_severity": 2,
                     "warning": FAIL_MESSAGES[key].format(gpu=index)}]})
            elif key == "diagnostic":
                # DCGM's Diagnostic (GEMM) plugin reports each GPU's figure as an info message, as DCGM 4 prints it
                # (tests/fixtures/real/fragments/dcgmi-diag-json-dcgm4-r3-8gpu-diagnostic-test-object-*.json).
                gflops = diag_gflops(scenario) * perf.factor(scenario.name, scenario.faults, index, max(indexes))
                results.append({"gpu_id": str(index), "status": "Pass", "info": [
                    f"GPU {index} calculated at approximately {gflops:.2f} gigaflops during this test"]})
            else:
                results.append({"gpu_id": str(index), "status": "Pass"})
        out.append((category, name, results))
    return out


def diag_gflops(scenario: NodeScenario) -> float:
    """A healthy GPU's Diagnostic figure: the DCGM 4 capture's 859.08 gigaflops (an 80 GB GPU), scaled by the
    hardware profile's dense BF16 datasheet figure against H100 SXM's 989.4 TFLOPS. A simulated figure: DCGM
    publishes none per SKU."""
    bf16 = (scenario.hardware.extra.get("datasheet") or {}).get("bf16_tflops")
    return HEALTHY_GFLOPS * (float(bf16) / H100_BF16_TFLOPS if bf16 else 1.0)


def _json(scenario: NodeScenario, tests: list[tuple[str, str, list[dict[str, Any]]]]) -> str:
    categories: list[dict[str, Any]] = []
    for category, name, results in tests:
        if not categories or categories[-1]["category"] != category:
            categories.append({"category": category, "tests": []})
        categories[-1]["tests"].append({"name": name, "results": results})
    facts = node_facts(scenario)
    document = {"DCGM GPU Diagnostic": {"test_categories": categories, "version": DCGM_VERSION},
                "Driver Version Detected": facts.driver_version,
                "GPU Device IDs": [g.pci_device_id for g in facts.gpus]}
    # dcgmi writes tabs and ' : ' between key and value.
    return json.dumps(document, indent="\t", separators=(",", " : ")) + "\n"


def _wrap(text: str, width: int = 45) -> list[str]:
    return [text[i:i + width] for i in range(0, len(text), width)] or [""]


def _text(scenario: NodeScenario, tests: list[tuple[str, str, list[dict[str, Any]]]]) -> str:
    facts = node_facts(scenario)
    border = "+---------------------------+------------------------------------------------+\n"

    def row(left: str, right: str) -> str:
        return f"| {left:<25} | {right:<46} |\n"

    out = ["Successfully ran diagnostic for group.\n", border, row("Diagnostic", "Result"),
           "+===========================+================================================+\n",
           "|-----  Metadata  ----------+------------------------------------------------|\n",
           row("DCGM Version", DCGM_VERSION), row("Driver Version Detected", facts.driver_version),
           row("GPU Device IDs Detected", ",".join(g.pci_device_id for g in facts.gpus))]
    category = None
    for cat, name, results in tests:
        if cat != category:
            category = cat
            dashes = "-" * max(2, 18 - len(cat))
            edge = "|" if cat == "Deployment" else "+"
            out.append(f"{edge}-----  {cat}  {dashes}+------------------------------------------------{edge}\n")
        statuses = [r["status"] for r in results]
        worst = next((s for s in ("Fail", "Warn") if s in statuses), None)
        if worst is not None and cat != "Deployment":
            gpus = ",".join(str(r.get("gpu_id", r.get("gpu_ids"))) for r in results if r["status"] == worst)
            cell = f"{worst} - GPU: {gpus}"
        elif worst is not None:
            cell = worst
        else:
            cell = statuses[0] + ("" if cat == "Deployment" else " - All")
        out.append(row(TEXT_NAMES.get(name, name), cell[:46]))
        for res in results:
            for warning in res.get("warnings", []):
                chunks = _wrap(warning["warning"])
                out.append(row("Warning", chunks[0]))
                out += [row("", chunk) for chunk in chunks[1:]]
    out.append(border)
    return "".join(out)


def _run_names(args: Sequence[str]) -> list[str]:
    args = list(args)
    for i, arg in enumerate(args):
        if arg in ("-r", "--run") and i + 1 < len(args):
            return [name.strip().lower() for name in args[i + 1].split(",")]
    return []


def _diag(scenario: NodeScenario, args: Sequence[str]) -> ToolOutput:
    level = _level(args)
    names = _run_names(args)
    if level is None and names == ["diagnostic"]:
        # One canonical test name runs that plugin alone (the DCGM reference, "dcgmi diag": "A canonical test name
        # selects one test"); its -p diagnostic.test_duration only changes how long it runs.
        tests = [t for t in diag_results(scenario, 3) if t[1] == "Diagnostic"]
    elif level is None:
        return ToolOutput(b"", b"Error: Invalid value for the -r/--run option: use 1, 2, 3, 4 or a test name.\n", 255)
    else:
        tests = diag_results(scenario, level)
    failed = any(r["status"] == "Fail" for _, _, results in tests for r in results)
    text = _json(scenario, tests) if "-j" in args or "--json" in args else _text(scenario, tests)
    return ToolOutput(text.encode(), rc=DIAG_FAILED_RC if failed else 0)
