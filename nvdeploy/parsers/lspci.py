"""Parse ``lspci`` output for NVIDIA devices: GPUs, NVSwitches and the rest (audio, USB-C, bridges).

Accepted forms: ``lspci -D -n -d 10de:`` (``0000:18:00.0 0302: 10de:2330 (rev a1)``), ``lspci -nn``
(``18:00.0 3D controller [0302]: NVIDIA Corporation GH100 [10de:2330] (rev a1)``) and plain ``lspci``/``lspci -D``
lines naming NVIDIA. Non-NVIDIA devices are ignored. ``bus_id`` is normalised to lowercase with a PCI domain
(``0000:`` added when lspci omitted it); ``class_code`` is four hex digits; ``device_id`` is the four-hex-digit
device part of ``10de:XXXX`` (or of ``Device XXXX`` in plain output).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from nvdeploy.parsers.text import prepare as _prepare

_NVIDIA_VENDOR = "10de"
_GPU_CLASSES = ("0300", "0302")
_NVSWITCH_CLASS = "0680"
_CLASS_NAMES = {
    "vga compatible controller": "0300",
    "3d controller": "0302",
    "display controller": "0380",
    "audio device": "0403",
    "multimedia audio controller": "0401",
    "pci bridge": "0604",
    "bridge": "0680",
    "usb controller": "0c03",
    "serial bus controller": "0c80",
}
_BUS = r"(?P<bus>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])"
_NUMERIC_RE = re.compile(
    _BUS + r"\s+(?:Class\s+)?(?P<cls>[0-9a-fA-F]{4}):\s+(?P<ven>[0-9a-fA-F]{4}):(?P<dev>[0-9a-fA-F]{4})\b"
)
_NAMED_RE = re.compile(_BUS + r"\s+(?P<clsname>[^:\[]+?)\s*(?:\[(?P<cls>[0-9a-fA-F]{4})\])?\s*:\s+(?P<desc>.*)$")
_ERROR_RE = re.compile(r"pcilib:|command not found|Cannot open|Permission denied|No such file", re.IGNORECASE)


@dataclass(frozen=True)
class LspciDevice:
    bus_id: str
    class_code: str | None
    device_id: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"bus_id": self.bus_id, "class_code": self.class_code, "device_id": self.device_id}


@dataclass(frozen=True)
class LspciFacts:
    gpus: tuple[LspciDevice, ...] = ()
    nvswitches: tuple[LspciDevice, ...] = ()
    other: tuple[LspciDevice, ...] = ()
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpus": [d.to_dict() for d in self.gpus],
            "nvswitches": [d.to_dict() for d in self.nvswitches],
            "other": [d.to_dict() for d in self.other],
            "warnings": list(self.warnings),
        }


def _bus_id(raw: str) -> str:
    raw = raw.lower()
    return raw if raw.count(":") == 2 else f"0000:{raw}"


def _parse_line(line: str) -> tuple[LspciDevice | None, bool]:
    """(device, recognised): device is None for a recognised non-NVIDIA line or an unreadable NVIDIA one."""
    numeric = _NUMERIC_RE.match(line)
    if numeric:
        if numeric.group("ven").lower() != _NVIDIA_VENDOR:
            return None, True
        return LspciDevice(_bus_id(numeric.group("bus")), numeric.group("cls").lower(),
                           numeric.group("dev").lower()), True
    named = _NAMED_RE.match(line)
    if not named:
        return None, False
    desc = named.group("desc")
    ids = re.search(r"\[([0-9a-fA-F]{4}):([0-9a-fA-F]{4})\]", desc)
    if ids:
        if ids.group(1).lower() != _NVIDIA_VENDOR:
            return None, True
        device_id: str | None = ids.group(2).lower()
    elif re.search(r"\bNVIDIA\b", desc, re.IGNORECASE):
        plain = re.search(r"\bDevice\s+([0-9a-fA-F]{4})\b", desc)
        device_id = plain.group(1).lower() if plain else None
    else:
        return None, True
    class_code = named.group("cls") or _CLASS_NAMES.get(named.group("clsname").strip().lower())
    return LspciDevice(_bus_id(named.group("bus")), class_code.lower() if class_code else None, device_id), True


def parse_lspci(text: str) -> LspciFacts:
    """Classify the NVIDIA functions lspci lists. Never raises."""
    text, warnings = _prepare(text)
    if not text.strip():
        return LspciFacts(warnings=(*warnings, "empty input: lspci listed no NVIDIA devices"))
    seen: set[str] = set()
    gpus: list[LspciDevice] = []
    switches: list[LspciDevice] = []
    other: list[LspciDevice] = []
    for raw in text.replace("\r", "\n").split("\n"):
        if not raw.strip() or raw[:1].isspace():  # blank, or an indented -v/-vv detail line
            continue
        line = raw.strip()
        device, recognised = _parse_line(line)
        if not recognised:
            if _ERROR_RE.search(line) or re.search(r"NVIDIA|10de", line, re.IGNORECASE):
                warnings.append(f"line not understood: {line[:300]!r}")
            continue
        if device is None or device.bus_id in seen:
            continue
        seen.add(device.bus_id)
        if device.class_code in _GPU_CLASSES:
            gpus.append(device)
        elif device.class_code == _NVSWITCH_CLASS:
            switches.append(device)
        else:
            other.append(device)
    if not (gpus or switches or other):
        warnings.append("no NVIDIA devices found in lspci output")
    return LspciFacts(tuple(gpus), tuple(switches), tuple(other), tuple(warnings))
