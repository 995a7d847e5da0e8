"""Parse RDMA port status from ``ibstat``, ``ibstatus`` and ``ibv_devinfo`` (``-v`` or not).

States are normalised to ibstat's words: ``Active``, ``Down``, ``Initializing``, ``Armed``, ``ActiveDefer``;
physical states to ``LinkUp``, ``Disabled``, ``Polling``, ``Sleep``, ``PortConfigurationTraining``,
``LinkErrorRecovery``, ``PhyTest``. Rates are per-port Gb/s (``Rate: 400``, ``rate: 200 Gb/sec (4X HDR)``, or
``active_width`` x ``active_speed`` for ``ibv_devinfo -v``). Never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from nvdeploy.parsers.text import prepare as _prepare


@dataclass(frozen=True)
class IbPort:
    """One port. ``base_lid`` / ``sm_lid`` help spot a missing subnet manager (LID 65535 or 0, SM lid 0)."""

    port: int
    state: str | None = None
    physical_state: str | None = None
    rate_gbps: float | None = None
    link_layer: str | None = None
    base_lid: int | None = None
    sm_lid: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"port": self.port, "state": self.state, "physical_state": self.physical_state,
                "rate_gbps": self.rate_gbps, "link_layer": self.link_layer, "base_lid": self.base_lid,
                "sm_lid": self.sm_lid}


@dataclass(frozen=True)
class IbDevice:
    name: str
    ports: tuple[IbPort, ...] = ()
    ca_type: str | None = None
    firmware: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ports": [p.to_dict() for p in self.ports], "ca_type": self.ca_type,
                "firmware": self.firmware}


@dataclass(frozen=True)
class IbFacts:
    """``fragment``: port blocks came before any device line (a pasted piece); they are kept under the device
    ``UNNAMED_DEVICE``."""

    devices: tuple[IbDevice, ...] = ()
    warnings: tuple[str, ...] = ()
    fragment: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"devices": [d.to_dict() for d in self.devices], "warnings": list(self.warnings),
                "fragment": self.fragment}


UNNAMED_DEVICE = "(device not in the pasted text)"


_CA_RE = re.compile(r"^CA\s+'([^']+)'\s*$")
_IBSTATUS_RE = re.compile(r"^Infiniband device\s+'([^']+)'\s+port\s+(\d{1,9})\s+status\s*:?\s*$", re.IGNORECASE)
_HCA_RE = re.compile(r"^hca_id\s*:\s*(\S+)\s*$")
_PORT_RE = re.compile(r"^Port\s+(\d{1,9})\s*:\s*$|^port\s*:\s*(\d{1,9})\s*$")
_KV_RE = re.compile(r"^([A-Za-z][A-Za-z_ ]*?)\s*:\s*(.*?)\s*$")
_STATES = {"active": "Active", "down": "Down", "init": "Initializing", "initializing": "Initializing",
           "initialize": "Initializing", "armed": "Armed", "active_defer": "ActiveDefer", "activedefer": "ActiveDefer",
           "nop": "Nop"}
_PHYS_STATES = {"linkup": "LinkUp", "link_up": "LinkUp", "disabled": "Disabled", "polling": "Polling",
                "sleep": "Sleep", "portconfigurationtraining": "PortConfigurationTraining",
                "port_configuration_training": "PortConfigurationTraining", "linkerrorrecovery": "LinkErrorRecovery",
                "link_error_recovery": "LinkErrorRecovery", "phytest": "PhyTest", "phy_test": "PhyTest",
                "nostatechange": "NoStateChange"}
_WIDTHS = {"1x": 1, "2x": 2, "4x": 4, "8x": 8, "12x": 12}
_MAX_WARNINGS = 20




def _word(value: str, table: dict[str, str]) -> str | None:
    """``4: ACTIVE`` (ibstatus), ``PORT_ACTIVE (4)`` (ibv_devinfo), ``Active`` (ibstat) -> the table's word."""
    text = re.sub(r"^\d+\s*:\s*|\s*\(\d+\)\s*$", "", value.strip())
    key = re.sub(r"^PORT_", "", text, flags=re.IGNORECASE).lower()
    if not key:
        return None
    return table.get(key) or table.get(key.replace("_", "")) or text


def _number(value: str) -> float | None:
    match = re.match(r"^\s*(\d+(?:\.\d+)?)", value)
    return float(match.group(1)) if match else None


def _lid(value: str) -> int | None:
    value = value.strip()
    try:
        return int(value, 16) if value.lower().startswith("0x") else int(value)
    except ValueError:
        return None


class _Port:
    def __init__(self, number: int) -> None:
        self.number = number
        self.fields: dict[str, str] = {}

    def freeze(self) -> IbPort:
        f = self.fields
        rate = _number(f["rate"]) if "rate" in f else None
        if rate is None and "active_speed" in f:
            speed = _number(f["active_speed"])
            width = _WIDTHS.get(f.get("active_width", "").split(" ")[0].lower())
            rate = round(speed * width, 3) if speed is not None and width else None
        state = f.get("state")
        phys = f.get("physical state", f.get("phys state", f.get("phys_state")))
        layer = f.get("link layer", f.get("link_layer"))
        lid = f.get("base lid", f.get("port_lid"))
        sm_lid = f.get("sm lid", f.get("sm_lid"))
        return IbPort(self.number, _word(state, _STATES) if state else None,
                      _word(phys, _PHYS_STATES) if phys else None, rate, (layer or "").strip() or None,
                      _lid(lid) if lid else None, _lid(sm_lid) if sm_lid else None)


class _Device:
    def __init__(self, name: str) -> None:
        self.name = name
        self.ports: list[_Port] = []
        self.fields: dict[str, str] = {}

    def port(self, number: int) -> _Port:
        for port in self.ports:
            if port.number == number:
                return port
        self.ports.append(_Port(number))
        return self.ports[-1]

    def freeze(self) -> IbDevice:
        part = self.fields.get("vendor_part_id", "").strip()  # ibv_devinfo: 4099 is what ibstat calls MT4099
        ca_type = self.fields.get("ca type") or (f"MT{part}" if part.isdigit() else None)
        firmware = self.fields.get("firmware version") or self.fields.get("fw_ver")
        return IbDevice(self.name, tuple(p.freeze() for p in sorted(self.ports, key=lambda p: p.number)),
                        ca_type or None, firmware or None)


def parse_ibstat(text: str) -> IbFacts:
    """Read RDMA devices and their ports from ibstat / ibstatus / ibv_devinfo output. Never raises."""
    text, warnings = _prepare(text)
    if not text.strip():
        return IbFacts(warnings=(*warnings, "empty input"))
    devices: list[_Device] = []
    by_name: dict[str, _Device] = {}
    current: _Device | None = None
    port: _Port | None = None
    fragment = False

    def device(name: str) -> _Device:
        if name not in by_name:
            by_name[name] = _Device(name)
            devices.append(by_name[name])
        return by_name[name]

    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            continue
        ca = _CA_RE.match(line) or _HCA_RE.match(line)
        if ca:
            current, port = device(ca.group(1)), None
            continue
        status = _IBSTATUS_RE.match(line)
        if status:
            current = device(status.group(1))
            port = current.port(int(status.group(2)))
            continue
        if current is None and _PORT_RE.match(line):
            current, fragment = device(UNNAMED_DEVICE), True
            warnings.append("port lines before any device line (a pasted piece): kept under an unnamed device")
        if current is None:
            if len(warnings) < _MAX_WARNINGS:
                warnings.append(f"line before any device not understood: {line[:200]!r}")
            continue
        port_match = _PORT_RE.match(line)
        if port_match:
            port = current.port(int(port_match.group(1) or port_match.group(2)))
            continue
        kv = _KV_RE.match(line)
        if not kv:
            continue
        key, value = kv.group(1).strip().lower(), kv.group(2)
        if port is not None and key not in ("ca type", "number of ports", "firmware version", "hardware version",
                                             "node guid", "system image guid", "fw_ver", "board_id"):
            port.fields.setdefault(key, value)
        else:
            current.fields.setdefault(key, value)
    if not devices:
        warnings.append("no RDMA device (CA '...', hca_id:, Infiniband device '...') found")
    for dev in devices:
        if not dev.ports and len(warnings) < _MAX_WARNINGS:
            warnings.append(f"device {dev.name} lists no ports")
    return IbFacts(tuple(d.freeze() for d in devices), tuple(warnings), fragment)
