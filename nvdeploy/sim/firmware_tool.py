"""Firmware on a simulated node: the DMI files the dmi_firmware collector reads, and the firmware faults.

A healthy node reports the same system BIOS and board as every other node of its profile (a Supermicro HGX H100
board as an example, values illustrative), its GPUs the profile's ``sim.vbios_version``, its ConnectX CAs the
firmware ``ibstat`` prints (nvdeploy/sim/datacenter.py). Faults:

- ``vbios_mismatch:<GPU>``: that GPU reports VBIOS ``96.00.61.00.01`` (``nvidia-smi -q -x``, the default table).
- ``cx_fw_old``: every compute CA of the node reports an older ConnectX firmware (28.39.1002 on MT4129,
  20.39.1002 on MT4123) in ``ibstat``.
- ``bios_mismatch``: the node's system BIOS is an older release (version and date) than its peers'.
- ``bmc_fw_old``: the node's BMC reports an older firmware revision than its peers' (the IPMI driver's sysfs
  ``firmware_revision``, printed "%u.%x" by the kernel).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Optional

from nvdeploy.collect.firmware_commands import DMI_FIND_ARGV
from nvdeploy.sim.scenario import FACT_FILTERS, NodeFacts, NodeScenario, register_fault
from nvdeploy.sim.tools import OUTPUT_FILTERS, TOOL_HOOKS, ToolOutput, _strip_sudo

OLD_VBIOS = "96.00.61.00.01"
# CA type -> (the firmware ibstat prints on a healthy node, an older one of the same line).
OLD_CX_FIRMWARE = {"28.41.1000": "28.39.1002", "20.41.1000": "20.39.1002"}
BIOS = {"bios_version": "2.1", "bios_date": "03/20/2024", "board_name": "X13DEG-OAD", "firmware_revision": "1.4"}
OLD_BIOS = {"bios_version": "1.6a", "bios_date": "08/11/2023"}
OLD_BMC = {"firmware_revision": "1.2"}
VBIOS_FAULT = re.compile(r"vbios_mismatch:(\d{1,3})")

register_fault("vbios_mismatch:<GPU>", f"that GPU's VBIOS is {OLD_VBIOS} (the others: the profile's "
               "sim.vbios_version)", r"vbios_mismatch:\d{1,3}")
register_fault("cx_fw_old", "every compute ConnectX CA runs older firmware (ibstat 'Firmware version')")
register_fault("bios_mismatch", f"the system BIOS is {OLD_BIOS['bios_version']} of {OLD_BIOS['bios_date']} "
               f"(peers: {BIOS['bios_version']} of {BIOS['bios_date']})")
register_fault("bmc_fw_old", f"the BMC's firmware revision is {OLD_BMC['firmware_revision']} (peers: "
               f"{BIOS['firmware_revision']})")


def _odd_vbios(scenario: NodeScenario, facts: NodeFacts) -> NodeFacts:
    wanted = {int(m.group(1)) for f in scenario.faults if (m := VBIOS_FAULT.fullmatch(f))}
    if not wanted or not facts.gpus:
        return facts
    last = len(facts.gpus) - 1  # a GPU index beyond the node's GPUs means its last GPU (as every GPU fault)
    chosen = {min(i, last) for i in wanted}
    return replace(facts, gpus=tuple(replace(g, vbios_version=OLD_VBIOS) if g.index in chosen else g
                                     for g in facts.gpus))


def dmi_output(scenario: NodeScenario) -> str:
    values = {**BIOS, **(OLD_BIOS if scenario.has("bios_mismatch") else {}),
              **(OLD_BMC if scenario.has("bmc_fw_old") else {})}
    return "".join(f"\n== {path}\n{values[path.rsplit('/', 1)[-1]]}\n" for path in DMI_FIND_ARGV[1:5])


def _dmi_hook(scenario: NodeScenario, argv: Sequence[str]) -> Optional[ToolOutput]:
    if tuple(_strip_sudo(argv)) == DMI_FIND_ARGV:
        return ToolOutput(dmi_output(scenario).encode())
    return None


def _old_cx(scenario: NodeScenario, tool: str, args: Sequence[str], output: ToolOutput) -> ToolOutput:
    if tool != "ibstat" or not scenario.has("cx_fw_old") or output.rc != 0:
        return output
    text = output.stdout.decode()
    for new, old in OLD_CX_FIRMWARE.items():
        text = text.replace(f"Firmware version: {new}\n", f"Firmware version: {old}\n")
    return replace(output, stdout=text.encode())


FACT_FILTERS.append(_odd_vbios)
TOOL_HOOKS.append(_dmi_hook)
OUTPUT_FILTERS.append(_old_cx)
