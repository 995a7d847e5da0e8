"""A simulated NVIDIA nvbandwidth (v0.10 layout): ``nvbandwidth [-j] -t <testcase>...`` for the copy-engine testcases
``host_to_device_memcpy_ce``, ``device_to_host_memcpy_ce`` and ``device_to_device_memcpy_read_ce``.

Text as nvbandwidth prints it (output.cpp; the real captures in tests/fixtures/real/nvbandwidth): the version and
driver header, ``Running <name>.``, the description, the matrix (``%10`` columns, two decimals, ``N/A`` on the
diagonal), ``SUM <name> <total>`` and ``COEFFICIENT_OF_VARIATION``. ``-j``: json_output.cpp's document
(``{"nvbandwidth": {..., "testcases": [{"name", "status", "bandwidth_description", "bandwidth_matrix", "sum"}]}}``,
cells as strings). A testcase it does not know is ``Not Found``; peer reads on one GPU are ``Waived``.

Figures: a healthy node reaches its hardware profile's ``nvbandwidth`` floors / 0.8 (the floors are about 80% of
measured figures); a profile without floors gets PCIe figures (Gen5 55.6 / 57.2 GB/s as on the B300 capture, Gen4
26.0) and NVLink peer reads at 85% of links x speed (PCIe-speed peers without NVLink).

Faults:

- ``c2c_slow``: on a Grace tray (a profile with ``nvlink_domain``), host<->device copies at PCIe Gen5 speed, as when
  the NVLink-C2C path is down and traffic falls back (or C2C is disabled).
- ``driver_missing``: nvbandwidth cannot initialise CUDA (exit 1, nothing measured).
- ``fleet_spread``, ``slower:<PCT>`` (nvdeploy/sim/perf.py): every figure varies by node, or is PCT% of a healthy
  node's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from nvdeploy.sim import perf
from nvdeploy.sim.scenario import NodeScenario, node_facts, register_fault
from nvdeploy.sim.tools import ToolOutput, register_tool

VERSION = "v0.10.0"
HEALTHY_OVER_FLOOR = 1 / 0.8
PCIE_GEN5 = (55.6, 57.2)  # host->device, device->host (GB/s), as measured on HGX B300
PCIE_GEN4 = (26.0, 26.0)
DESCRIPTIONS = {
    "host_to_device_memcpy_ce": "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
    "device_to_host_memcpy_ce": "memcpy CE CPU(row) <- GPU(column) bandwidth (GB/s)",
    "device_to_device_memcpy_read_ce": "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)",
}

register_fault("c2c_slow", "Grace tray: nvbandwidth host<->device copies at PCIe Gen5 speed (NVLink-C2C not used)")


def _figures(scenario: NodeScenario) -> tuple[float, float, float]:
    hw = scenario.hardware
    floors = hw.extra.get("nvbandwidth") or {}
    gen = int((hw.extra.get("pcie") or {}).get("gen", 4))
    pcie = PCIE_GEN5 if gen >= 5 else PCIE_GEN4
    nvlink = hw.extra.get("nvlink") or {}
    peer = float(nvlink["links"]) * float(nvlink["speed_gbps"]) * 0.85 if nvlink else pcie[0] * 0.9
    h2d = float(floors["host_to_device_gbps"]) * HEALTHY_OVER_FLOOR if "host_to_device_gbps" in floors else pcie[0]
    d2h = float(floors["device_to_host_gbps"]) * HEALTHY_OVER_FLOOR if "device_to_host_gbps" in floors else pcie[1]
    if "device_to_device_gbps" in floors:
        peer = float(floors["device_to_device_gbps"]) * HEALTHY_OVER_FLOOR
    if scenario.has("c2c_slow") and getattr(hw, "nvlink_domain", None) is not None:
        h2d, d2h = PCIE_GEN5
    # fleet_spread, slower:<PCT> (nvdeploy/sim/perf.py): a slow node copies slower too, so fleet.performance can
    # name it against its peers while it still clears the floors.
    speed = perf.factor(scenario.name, scenario.faults)
    return h2d * speed, d2h * speed, peer * speed


def _matrix(name: str, gpus: int, figures: tuple[float, float, float]) -> list[list[float | None]]:
    h2d, d2h, peer = figures
    if name == "host_to_device_memcpy_ce":
        return [[round(h2d - 0.01 * (i % 3), 2) for i in range(gpus)]]
    if name == "device_to_host_memcpy_ce":
        return [[round(d2h - 0.01 * (i % 3), 2) for i in range(gpus)]]
    return [[None if r == c else round(peer + 0.07 * ((r + c) % 3), 2) for c in range(gpus)] for r in range(gpus)]


def _testcases(args: Sequence[str]) -> list[str] | None:
    names: list[str] = []
    taking = False
    for arg in args:
        if arg in ("-t", "--testcase"):
            taking = True
        elif arg.startswith("-"):
            taking = False
            if arg not in ("-j", "--json"):
                return None
        elif taking:
            names.append(arg)
        else:
            return None
    return names or list(DESCRIPTIONS)


def _text_matrix(matrix: list[list[float | None]]) -> str:
    lines = ["  " + "".join(f"{c:>10}" for c in range(len(matrix[0])))]
    for r, row in enumerate(matrix):
        lines.append(f"{r:>2}" + "".join(f"{'N/A' if v is None else f'{v:.2f}':>10}" for v in row))
    return "\n".join(lines)


@register_tool("nvbandwidth")
def _nvbandwidth(scenario: NodeScenario, args: Sequence[str]) -> ToolOutput:
    names = _testcases(args)
    if names is None:
        return ToolOutput(b"", b"nvbandwidth: unrecognised option (simulated: -j, -t <testcase>...)\n", 1)
    as_json = "-j" in args or "--json" in args
    facts = node_facts(scenario)
    if scenario.has("driver_missing") or not facts.driver_loaded:
        message = "cuInit failed: CUDA_ERROR_NO_DEVICE"
        if as_json:
            return ToolOutput(json.dumps({"nvbandwidth": {"version": VERSION, "error": message}}, indent=3).encode()
                              + b"\n", rc=1)
        return ToolOutput(f"nvbandwidth Version: {VERSION}\n\n{message}\n".encode(), rc=1)
    gpus = len(facts.gpus)
    figures = _figures(scenario)
    driver = facts.driver_version
    cases = []
    text = [f"nvbandwidth Version: {VERSION}", f"Built from Git version: {VERSION}", "",
            f"Driver Version: {driver}", "", facts.hostname]
    text += [f"Device {i}: {scenario.hardware.gpu.model}" for i in range(gpus)] + [""]
    for name in names:
        if name not in DESCRIPTIONS:
            cases.append({"name": name, "status": "Not Found"})
            text.append(f"ERROR: Testcase {name} not found!")
            continue
        if name == "device_to_device_memcpy_read_ce" and gpus < 2:
            cases.append({"name": name, "status": "Waived"})
            text.append("Waived: ")
            continue
        matrix = _matrix(name, gpus, figures)
        total = round(sum(v for row in matrix for v in row if v is not None), 2)
        cases.append({"name": name, "status": "Passed", "bandwidth_description": DESCRIPTIONS[name],
                      "bandwidth_matrix": [["N/A" if v is None else f"{v:.6g}" for v in row] for row in matrix],
                      "sum": total})
        text += [f"Running {name}.", DESCRIPTIONS[name], _text_matrix(matrix), "", f"SUM {name} {total:.2f}",
                 f"COEFFICIENT_OF_VARIATION {name} 0.00", ""]
    if as_json:
        document = {"nvbandwidth": {"version": VERSION, "git_version": VERSION, "Driver Version": driver,
                                    "GPU Device list": [f"{i}: {scenario.hardware.gpu.model}: ({facts.hostname})"
                                                        for i in range(gpus)], "testcases": cases}}
        return ToolOutput(json.dumps(document, indent=3).encode() + b"\n")
    return ToolOutput(("\n".join(text) + "\n").encode())
