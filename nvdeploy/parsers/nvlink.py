"""Parse ``nvidia-smi nvlink -s`` (``--status``) output.

::

    GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)
         Link 0: 26.562 GB/s
         Link 3: <inactive>

GPUs without NVLink print only the GPU line, or a message under it ("Device does not have or support Nvlink",
"NVML: Unable to retrieve NVLink information as all links are inActive"); GPUs in MIG mode print "Nvlink queries
are not supported for Devices in MIG mode". Never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from nvdeploy.parsers.text import prepare as _prepare


@dataclass(frozen=True)
class NvlinkLink:
    """One ``Link N:`` line. ``speed_gbps`` is the printed per-link rate in GB/s (``26.562``); None when inactive
    or unreadable."""

    link: int
    active: bool
    speed_gbps: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"link": self.link, "active": self.active, "speed_gbps": self.speed_gbps}


@dataclass(frozen=True)
class NvlinkGpu:
    """One ``GPU N: name (UUID: ...)`` block. ``index`` is -1 for link lines that came before any GPU line.
    ``message`` is the status line printed instead of links (no NVLink, MIG mode, all links inactive). ``unknown``
    holds (link, value) for each link whose value reads neither as a speed nor as inactive (``Unknown Error``)."""

    index: int
    name: str | None = None
    uuid: str | None = None
    links: tuple[NvlinkLink, ...] = ()
    message: str | None = None
    unknown: tuple[tuple[int, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "uuid": self.uuid,
                "links": [link.to_dict() for link in self.links], "message": self.message,
                "unknown": [list(pair) for pair in self.unknown]}


@dataclass(frozen=True)
class NvlinkFacts:
    """``supported``: True when any link line was printed; False when GPUs were listed but none printed a link
    (no NVLink hardware, MIG mode, or NVML saying all links are inactive, see each GPU's ``message``); None
    when the output says nothing either way (empty, or an nvidia-smi error)."""

    supported: bool | None = None
    gpus: tuple[NvlinkGpu, ...] = ()
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"supported": self.supported, "gpus": [gpu.to_dict() for gpu in self.gpus],
                "warnings": list(self.warnings)}


_GPU_RE = re.compile(r"^\s*GPU\s+(\d{1,9})\s*:\s*(.*?)\s*(?:\(\s*UUID\s*:\s*([^)\s]*)\s*\)?)?\s*$")
_LINK_RE = re.compile(r"^\s*Link\s+(\d{1,9})\s*:\s*(.*?)\s*$", re.IGNORECASE)
_SPEED_RE = re.compile(r"^([-+]?\d+(?:\.\d+)?)\s*([GMT]?)B/s\b", re.IGNORECASE)
_UNITS = {"": 1e-9, "m": 1e-3, "g": 1.0, "t": 1e3}
_NO_NVLINK_RE = re.compile(
    r"does not have or support nvlink|not supported|all links are inactive|unable to retrieve nvlink", re.IGNORECASE
)
_ERROR_RE = re.compile(
    r"failed to initialize nvml|driver/library version mismatch|no devices were found|couldn't communicate with the "
    r"nvidia driver|unknown error|not found|command not found|permission denied",
    re.IGNORECASE,
)
_MAX_WARNINGS = 20




def _link(number: str, value: str) -> tuple[NvlinkLink, bool]:
    """The link, and whether its value was understood."""
    if "inactive" in value.lower():
        return NvlinkLink(int(number), False, None), True
    speed = _SPEED_RE.match(value)
    if speed:
        gbps = float(speed.group(1)) * _UNITS[speed.group(2).lower()]
        return NvlinkLink(int(number), True, round(gbps, 6)), True
    return NvlinkLink(int(number), False, None), False


class _Block:
    def __init__(self, index: int, name: str | None, uuid: str | None) -> None:
        self.index, self.name, self.uuid = index, name, uuid
        self.links: list[NvlinkLink] = []
        self.messages: list[str] = []
        self.unknown: list[tuple[int, str]] = []

    def freeze(self) -> NvlinkGpu:
        return NvlinkGpu(self.index, self.name, self.uuid, tuple(self.links), "; ".join(self.messages) or None,
                         tuple(self.unknown))


def parse_nvlink(text: str) -> NvlinkFacts:
    """Read per-GPU NVLink link states and speeds from ``nvidia-smi nvlink -s``. Never raises."""
    text, warnings = _prepare(text)
    if not text.strip():
        return NvlinkFacts(None, (), (*warnings, "empty input"))
    blocks: list[_Block] = []
    errors: list[str] = []
    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            continue
        gpu = _GPU_RE.match(line)
        if gpu:
            blocks.append(_Block(int(gpu.group(1)), gpu.group(2) or None, gpu.group(3) or None))
            continue
        link = _LINK_RE.match(line)
        if link:
            if not blocks:
                warnings.append("link lines before any 'GPU N:' line (kept under GPU index -1)")
                blocks.append(_Block(-1, None, None))
            parsed, understood = _link(link.group(1), link.group(2))
            blocks[-1].links.append(parsed)
            if not understood:
                blocks[-1].unknown.append((parsed.link, link.group(2)[:60]))
                if len(warnings) < _MAX_WARNINGS:
                    warnings.append(f"link value not understood: {line[:200]!r}")
            continue
        if blocks and (_NO_NVLINK_RE.search(line) or not blocks[-1].links):
            blocks[-1].messages.append(line[:300])
            continue
        if _ERROR_RE.search(line) or _NO_NVLINK_RE.search(line):
            errors.append(line[:300])
        elif len(warnings) < _MAX_WARNINGS:
            warnings.append(f"line not understood: {line[:200]!r}")
    gpus = tuple(block.freeze() for block in blocks)
    for message in errors:
        warnings.append(f"nvidia-smi reported: {message!r}")
    if any(gpu.links for gpu in gpus):
        supported: bool | None = True
    elif gpus:
        supported = False
    elif errors and all(_NO_NVLINK_RE.search(m) for m in errors):
        supported = False
    else:
        supported = None
        if not errors:
            warnings.append("no 'GPU N:' or 'Link N:' lines found")
    return NvlinkFacts(supported, gpus, tuple(warnings))
