"""Collectors: the commands that gather raw evidence from a node. Many checks share one collector.

All light collectors of a node go to the node in ONE round trip (see transport/batch.py), each with its own
timeout, their outputs kept apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from nvdeploy.transport.base import DEFAULT_MAX_BYTES, CommandSpec


@dataclass(frozen=True)
class Collector:
    name: str
    argv: tuple[str, ...]
    timeout_s: float
    needs_root: bool = False
    description: str = ""
    max_bytes: int = DEFAULT_MAX_BYTES

    def spec(self, sudo: bool, timeout_s: Optional[float] = None) -> CommandSpec:
        return CommandSpec(self.name, self.argv, timeout_s or self.timeout_s, sudo=sudo and self.needs_root,
                           max_bytes=self.max_bytes)


NVIDIA_SMI_XML = Collector("nvidia_smi_xml", ("nvidia-smi", "-q", "-x"), 60.0,
                           description="every GPU fact the driver reports (persistence, ECC, rows, PCIe, clocks)")
LSPCI = Collector("lspci", ("lspci", "-D", "-n", "-d", "10de:"), 20.0,
                  description="NVIDIA devices on the PCIe bus, whether or not the driver sees them")
KMSG = Collector("kmsg", ("dmesg",), 20.0, needs_root=True,
                 description="the kernel log since boot: Xid, SXid and PCIe AER events")
SUDO_CHECK = Collector("sudo", ("true",), 20.0, needs_root=True, description="sudo works without a prompt")

LIGHT_COLLECTORS: tuple[Collector, ...] = (NVIDIA_SMI_XML, LSPCI, KMSG)


def light_specs(host_vars: Mapping[str, Any]) -> list[CommandSpec]:
    """The specs of the light collectors for one host, honouring its ``sudo`` and ``command_timeout`` vars."""
    sudo = bool(host_vars.get("sudo", False))
    timeout = host_vars.get("command_timeout")
    collectors = list(LIGHT_COLLECTORS) + ([SUDO_CHECK] if sudo else [])
    return [c.spec(sudo, float(timeout) if timeout else None) for c in collectors]
