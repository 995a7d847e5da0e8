"""Firmware on the node against the profile's minimums (``firmware.minimum``), and the ordering and wording of
firmware versions that the cluster stage (checks/firmware_consistency.py) shares."""

from __future__ import annotations

import inspect
import re
from typing import Any, Mapping

from nvdeploy.checks.gating import section
from nvdeploy.checks.registry import CLUSTER_CHECKS, NodeContext, register
from nvdeploy.results import ErrorReason, Finding, Remediation, Verdict

CHECK = "firmware.minimum"
CONSISTENCY_CHECK = "firmware.consistency"
COLLECTORS = ("nvidia_smi_xml", "ibstat", "dmi_firmware")
LABELS = {"gpu.vbios": "VBIOS", "gpu.inforom_image": "InfoROM image", "gpu.inforom_oem": "InfoROM OEM object",
          "gpu.inforom_ecc": "InfoROM ECC object", "gpu.inforom_pwr": "InfoROM power object",
          "gpu.gsp": "GSP firmware", "nic.firmware": "ConnectX firmware", "system.bios_version": "system BIOS",
          "system.bios_date": "system BIOS date", "system.board_name": "board",
          "system.bmc_firmware": "BMC firmware"}
# What to flash, by component, for the remediation text.
UPGRADE = {"gpu": "flash the GPU firmware with the server vendor's GPU firmware bundle (nvfwupd or the HGX "
                  "firmware package), then reset the GPUs",
           "nic": "burn the ConnectX firmware (mlxfwmanager --online -u, or mstflint with the vendor's image), then "
                  "reset the adapter (mlxfwreset) or reboot",
           "system": "update the system BIOS from the server vendor's package (BMC or its update tool), then reboot"}
_DATE_RE = re.compile(r"(\d{1,2})/(\d{1,2})/(\d{4})$")


# The cluster stage's part (nvdeploy/checks/firmware_consistency.py), in the catalog with the node checks.
CLUSTER_CHECKS[CONSISTENCY_CHECK] = inspect.cleandoc("""
    Compares the firmware firmware.minimum read on each node (GPU VBIOS, InfoROM image/OEM/ECC/power objects, GSP
    firmware; ConnectX firmware per CA type; system BIOS version and date, board name) across the nodes of each
    profile. It runs nothing on the nodes. Per component, every part of that kind on the profile's nodes (each
    GPU, each CA, each node) is one vote; the most common version is the majority. PASS: one version per
    component. WARN (REINSTALL) on each node with a part that differs, naming the part, its version and the
    majority's (``gpu007: GPU 3 VBIOS 96.00.61.00.01, majority 96.00.74.00.1C``), and a cluster finding per
    component with the odd nodes folded (``gpu[003,007]``); FAIL instead of WARN for the components the profile's
    ``firmware.must_match`` lists. On a tie there is no majority: every part is named. Fewer than two nodes of a
    profile give no finding.""")


def label(component: str) -> str:
    """'nic.firmware[MT4129]' -> 'ConnectX firmware (MT4129)'."""
    base, _, model = component.partition("[")
    text = LABELS.get(base, base)
    return f"{text} ({model.rstrip(']')})" if model else text


def _tokens(component: str, version: str) -> list[str]:
    date = _DATE_RE.match(version.strip()) if component.startswith("system.bios_date") else None
    if date:  # DMI dates are MM/DD/YYYY: compared as year, month, day
        return [date.group(3), date.group(1).zfill(2), date.group(2).zfill(2)]
    return re.findall(r"[0-9A-Za-z]+", version)


def _rank(a: str, b: str) -> tuple[Any, Any]:
    if a.isdigit() and b.isdigit():
        return int(a), int(b)
    try:  # VBIOS words are hex (96.00.74.00.1C): two hex words compare as numbers
        return int(a, 16), int(b, 16)
    except ValueError:
        return a.lower(), b.lower()


def compare_versions(component: str, a: str, b: str) -> int:
    """-1, 0 or 1 as ``a`` is older than, equal to or newer than ``b``, word by word (decimal, else hex, else text);
    a version that extends the other is the newer."""
    left, right = _tokens(component, a), _tokens(component, b)
    for x, y in zip(left, right):
        rx, ry = _rank(x, y)
        if rx != ry:
            return -1 if rx < ry else 1
    return (len(left) > len(right)) - (len(left) < len(right))


def _minimums(ctx: NodeContext) -> Mapping[str, Mapping[str, str]]:
    return section(ctx, "firmware").get("minimum") or {}


def _applies(rule: str, component: str) -> bool:
    """A rule for ``nic.firmware`` holds every NIC; ``nic.firmware[MT4129]`` only that CA type."""
    return rule == component or ("[" not in rule and component.split("[", 1)[0] == rule)


@register(CHECK, collectors=COLLECTORS, optional=("ibstat", "dmi_firmware"))
def firmware_minimum(ctx: NodeContext) -> list[Finding]:
    """Reads each GPU's VBIOS, InfoROM (image, OEM, ECC, power objects) and GSP firmware from ``nvidia-smi -q -x``,
    each ConnectX CA's firmware from ``ibstat`` ("Firmware version"), the system BIOS version and date and the board
    name from /sys/class/dmi/id and the BMC's firmware revision from the kernel IPMI driver's sysfs file
    (/sys/class/ipmi/ipmi0/device/bmc/firmware_revision; one ``find``, no root), and records them (results.json
    ``firmware``: the report's firmware table, ``diff`` and ``history``; firmware.consistency compares them across
    the profile's nodes).

    Against the profile's ``firmware.minimum`` (``{component: {version, source}}``; components ``gpu.vbios``,
    ``gpu.inforom_image``, ``gpu.gsp``, ``nic.firmware`` or ``nic.firmware[<CA type>]``, ``system.bios_version``,
    ``system.bios_date``, ``system.bmc_firmware``...; versions compared word by word, decimal, else hex as VBIOS
    prints them, dates as dates): PASS when every part is at or above its minimum; FAIL (REINSTALL) naming each part
    below it, its version, the minimum and its source, and what to flash. ERROR when a component with a minimum
    could not be read at all. SKIP, with what was read, when the profile states no minimum."""
    firmware = ctx.facts.get("firmware")
    items = tuple(firmware.items) if firmware is not None else ()
    rules = _minimums(ctx)
    if not rules:
        if not items:
            return [ctx.finding(CHECK, Verdict.SKIP, "no firmware version could be read and the profile states no "
                                                     "firmware minimum", collector="nvidia_smi_xml")]
        return [ctx.finding(CHECK, Verdict.SKIP, f"the profile states no firmware minimum; read: {_inventory(items)}",
                            observed=firmware.by_component(), collector="nvidia_smi_xml")]
    findings: list[Finding] = []
    for rule, body in rules.items():
        wanted, source = str(body["version"]), str(body["source"])
        matching = [i for i in items if _applies(rule, i.component)]
        if not matching:
            findings.append(ctx.finding(
                CHECK, Verdict.ERROR, f"{label(rule)} not read on this node; the profile requires >= {wanted}",
                expected=f">= {wanted}", reason=ErrorReason.INCOMPLETE, collector=_collector(rule)))
            continue
        old = [i for i in matching if compare_versions(i.component, i.version, wanted) < 0]
        if not old:
            continue
        units = ", ".join(f"{i.unit} {i.version}" if i.unit else i.version for i in old)
        findings.append(ctx.finding(
            CHECK, Verdict.FAIL, f"{label(old[0].component)} below the minimum {wanted} ({source}): {units}; "
                                 f"{UPGRADE[old[0].component.split('.', 1)[0]]}",
            observed=units, expected=f">= {wanted}", gpu=old[0].gpu if len(old) == 1 else None,
            remediation=Remediation.REINSTALL, collector=_collector(rule)))
    if findings:
        return findings
    return [ctx.finding(CHECK, Verdict.PASS, f"firmware at or above the profile's minimums ({', '.join(rules)}): "
                                             f"{_inventory(items)}", observed=firmware.by_component(),
                        collector="nvidia_smi_xml")]


def _collector(component: str) -> str:
    return {"gpu": "nvidia_smi_xml", "nic": "ibstat", "system": "dmi_firmware"}[component.split(".", 1)[0]]


def _inventory(items: Any) -> str:
    """'VBIOS 96.00.74.00.1C, ConnectX firmware (MT4129) 28.41.1000, ...': each component's values on the node."""
    values: dict[str, list[str]] = {}
    for item in items:
        seen = values.setdefault(item.component, [])
        if item.version not in seen:
            seen.append(item.version)
    return ", ".join(f"{label(c)} {' / '.join(v)}" for c, v in values.items())
