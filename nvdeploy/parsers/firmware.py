"""Firmware a node reports without root, as one inventory of (component, unit, version): each GPU's VBIOS, InfoROM
objects and GSP firmware (``nvidia-smi -q -x`` or ``-q`` text), each ConnectX CA's firmware (``ibstat``'s
"Firmware version", ``ibv_devinfo``'s ``fw_ver``), and the system BIOS and board (``/sys/class/dmi/id``); pure.

The GPU part is read straight from the document's text, not through :mod:`nvdeploy.parsers.nvidia_smi`: on a node
whose GPU facts come from the NVML probe the XML is never parsed field by field (it is most of a fleet run's
controller CPU), and a scan for six tags costs a fraction of that.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from nvdeploy.parsers.ibstat import IbFacts
from nvdeploy.parsers.nvidia_smi.fields import NA_VALUES
from nvdeploy.parsers.text import prepare

# Component ids, in the order reports list them; a NIC's is suffixed with its CA type ("nic.firmware[MT4129]"),
# since a fleet's ConnectX-7 and BlueField-3 run different firmware lines and only like may be compared.
GPU_COMPONENTS = ("gpu.vbios", "gpu.inforom_image", "gpu.inforom_oem", "gpu.inforom_ecc", "gpu.inforom_pwr",
                  "gpu.gsp")
NIC_COMPONENT = "nic.firmware"
SYSTEM_COMPONENTS = ("system.bios_version", "system.bios_date", "system.board_name", "system.bmc_firmware")
# The sysfs files the dmi_firmware collector prints (nvdeploy/collect/firmware_commands.py): /sys/class/dmi/id's,
# and the IPMI driver's BMC ``firmware_revision`` ("%u.%x": major, then the minor byte in hex).
DMI_FILES = {"bios_version": "system.bios_version", "bios_date": "system.bios_date",
             "board_name": "system.board_name", "firmware_revision": "system.bmc_firmware"}

# XML tag / -q label (normalised) -> component.
_XML_TAGS = {"vbios_version": "gpu.vbios", "img_version": "gpu.inforom_image", "oem_object": "gpu.inforom_oem",
             "ecc_object": "gpu.inforom_ecc", "pwr_object": "gpu.inforom_pwr",
             "gsp_firmware_version": "gpu.gsp"}
_TEXT_LABELS = {"vbios version": "gpu.vbios", "image version": "gpu.inforom_image", "oem object": "gpu.inforom_oem",
                "ecc object": "gpu.inforom_ecc", "power management object": "gpu.inforom_pwr",
                "gsp firmware version": "gpu.gsp"}
_XML_GPU_RE = re.compile(r"<gpu\s+id=\"([^\"]*)\"\s*>")
_XML_TAG_RE = re.compile(r"<(" + "|".join(_XML_TAGS) + r")>([^<]*)</\1>")
_TEXT_GPU_RE = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$", re.MULTILINE)
_TEXT_LINE_RE = re.compile(r"^\s*([A-Za-z][A-Za-z ]*?)\s*:\s*(.*?)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class FirmwareItem:
    """One version: ``unit`` names the part within the node ("GPU 3", "mlx5_0"; "" for the node itself)."""

    component: str
    unit: str
    version: str
    gpu: Optional[int] = None

    @property
    def base(self) -> str:
        """The component without its model suffix (``nic.firmware[MT4129]`` -> ``nic.firmware``)."""
        return self.component.split("[", 1)[0]


@dataclass(frozen=True)
class FirmwareFacts:
    items: tuple[FirmwareItem, ...] = ()
    warnings: tuple[str, ...] = ()

    def by_component(self) -> dict[str, dict[str, str]]:
        """{component: {unit: version}}: what results.json keeps for the cluster stage, diff and history."""
        out: dict[str, dict[str, str]] = {}
        for item in self.items:
            out.setdefault(item.component, {})[item.unit] = item.version
        return out


def _value(raw: str) -> Optional[str]:
    value = raw.strip()
    if len(value) >= 2 and value[0] == "[" and value[-1] == "]":
        value = value[1:-1].strip()
    return None if value.lower() in NA_VALUES else value


def _gpu_items(index: int, found: Mapping[str, str]) -> list[FirmwareItem]:
    return [FirmwareItem(c, f"GPU {index}", found[c], index) for c in GPU_COMPONENTS if c in found]


def gpu_firmware_xml(text: Any) -> tuple[FirmwareItem, ...]:
    """Each ``<gpu>`` of ``nvidia-smi -q -x``, in document order (nvidia-smi's index order); the first value of a
    tag in a GPU's section is kept, N/A left out."""
    body, _warnings = prepare(text)
    starts = list(_XML_GPU_RE.finditer(body))
    items: list[FirmwareItem] = []
    for index, match in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(body)
        found: dict[str, str] = {}
        for tag in _XML_TAG_RE.finditer(body, match.end(), end):
            value = _value(tag.group(2))
            if value is not None:
                found.setdefault(_XML_TAGS[tag.group(1)], value)
        items.extend(_gpu_items(index, found))
    return tuple(items)


def gpu_firmware_text(text: Any) -> tuple[FirmwareItem, ...]:
    """Each ``GPU 00000000:xx:00.0`` section of ``nvidia-smi -q``, in order; labels as nvidia-smi prints them."""
    body, _warnings = prepare(text)
    starts = list(_TEXT_GPU_RE.finditer(body))
    items: list[FirmwareItem] = []
    for index, match in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(body)
        found: dict[str, str] = {}
        for line in _TEXT_LINE_RE.finditer(body, match.end(), end):
            component = _TEXT_LABELS.get(line.group(1).lower())
            value = _value(line.group(2)) if component else None
            if component and value is not None:
                found.setdefault(component, value)
        items.extend(_gpu_items(index, found))
    return tuple(items)


def gpu_firmware(text: Any) -> tuple[FirmwareItem, ...]:
    """:func:`gpu_firmware_xml` or :func:`gpu_firmware_text`, whichever the input is."""
    body, _warnings = prepare(text)
    return gpu_firmware_xml(body) if "<nvidia_smi_log" in body or "<gpu id=" in body else gpu_firmware_text(body)


def nic_firmware(ib: Optional[IbFacts]) -> tuple[FirmwareItem, ...]:
    """Each CA's firmware from parsed ``ibstat`` / ``ibv_devinfo`` (the CA type, when printed, in the component)."""
    if ib is None:
        return ()
    return tuple(FirmwareItem(f"{NIC_COMPONENT}[{d.ca_type}]" if d.ca_type else NIC_COMPONENT, d.name, d.firmware)
                 for d in ib.devices if d.firmware)


def parse_dmi(text: Any) -> FirmwareFacts:
    """The dmi_firmware collector's ``find <files> -printf '\\n== %p\\n' -exec cat {} ;``: each file's one line after
    its marker; a file the kernel does not provide has no marker (find names it on stderr)."""
    body, warnings = prepare(text)
    items: list[FirmwareItem] = []
    current: Optional[str] = None
    for line in body.split("\n"):
        if line.startswith("== /"):
            name = line[3:].strip().rsplit("/", 1)[-1]
            current = DMI_FILES.get(name)
            continue
        if current is not None:
            value = _value(line)
            if value is not None and value.lower() not in ("default string", "to be filled by o.e.m."):
                items.append(FirmwareItem(current, "", value))
            current = None
    return FirmwareFacts(tuple(items), tuple(warnings))


def node_firmware(smi_text: Optional[str], ib: Optional[IbFacts], dmi: Optional[FirmwareFacts]) -> FirmwareFacts:
    """The node's inventory: GPUs, then NICs, then the system (None: that source did not answer)."""
    items = [*(gpu_firmware(smi_text) if smi_text else ()), *nic_firmware(ib), *(dmi.items if dmi else ())]
    return FirmwareFacts(tuple(items), dmi.warnings if dmi else ())
