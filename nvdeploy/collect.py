"""Collectors: the commands that gather raw evidence from a node. Many checks share one collector.

Checks name the collectors they read; the engine runs only the collectors the selected checks need. All light
collectors of a node go to the node in ONE round trip (see transport/batch.py), each with its own timeout,
their outputs kept apart; heavy ones (stress tests that take minutes) run afterwards, one round trip each.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping, Optional

from nvdeploy.transport.base import DEFAULT_MAX_BYTES, CommandSpec


@dataclass(frozen=True)
class Collector:
    name: str
    argv: tuple[str, ...]
    timeout_s: float
    needs_root: bool = False
    heavy: bool = False
    description: str = ""
    max_bytes: int = DEFAULT_MAX_BYTES
    # Over max_bytes keep the newest (last) bytes, not the first: for logs (CommandSpec.keep_tail).
    keep_tail: bool = False
    # The host var that overrides the timeout of this collector (heavy ones have their own).
    timeout_var: str = "command_timeout"
    # Builds the argv at plan time from the host vars and the node's Profile (None when unknown); when None,
    # ``argv`` is used as is. For commands whose arguments depend on the node (a tool's folder, the GPU count).
    build: Optional[Callable[[Mapping[str, Any], Any], tuple[str, ...]]] = None

    def spec(self, sudo: bool, timeout_s: Optional[float] = None) -> CommandSpec:
        return CommandSpec(self.name, self.argv, timeout_s or self.timeout_s, sudo=sudo and self.needs_root,
                           max_bytes=self.max_bytes, keep_tail=self.keep_tail)


COLLECTORS: dict[str, Collector] = {}


def register_collector(collector: Collector) -> Collector:
    if collector.name in COLLECTORS:
        raise ValueError(f"duplicate collector {collector.name!r}")
    COLLECTORS[collector.name] = collector
    return collector


NVIDIA_SMI_XML = register_collector(Collector(
    "nvidia_smi_xml", ("nvidia-smi", "-q", "-x"), 60.0,
    description="every GPU fact the driver reports (persistence, ECC, rows, PCIe, clocks)"))
LSPCI = register_collector(Collector(
    "lspci", ("lspci", "-D", "-n", "-d", "10de:"), 20.0,
    description="NVIDIA devices on the PCIe bus, whether or not the driver sees them"))
KMSG = register_collector(Collector(
    "kmsg", ("dmesg",), 20.0, needs_root=True, keep_tail=True,
    description="the kernel log since boot: Xid, SXid and PCIe AER events"))
SUDO_CHECK = register_collector(Collector(
    "sudo", ("true",), 20.0, needs_root=True, description="sudo works without a prompt"))


def _probe_argv() -> tuple[str, ...]:
    from nvdeploy.probe.ship import probe_argv

    return probe_argv()


NVML_PROBE = register_collector(Collector(
    "nvml_probe", _probe_argv(), 60.0,
    description="the node probe: GPU facts from NVML through the node's python3 (nvidia-smi is the fallback)"))
# Collectors that run whenever another one does: the probe rides along with nvidia-smi in the same round trip
# and supplies the GPU facts when it works; nvidia-smi's exit status still decides the driver's state.
COMPANIONS: dict[str, tuple[str, ...]] = {"nvidia_smi_xml": ("nvml_probe",)}


def specs_for(names: Iterable[str], host_vars: Mapping[str, Any], heavy: bool,
              profile: Any = None) -> list[CommandSpec]:
    """Specs for the named collectors of one kind (light or heavy), honouring the host's sudo and timeouts
    (``profile``: the node's Profile, for collectors that build their argv from it)."""
    sudo = bool(host_vars.get("sudo", False))
    out = []
    expanded = [n for name in names for n in (name, *COMPANIONS.get(name, ()))]
    for name in dict.fromkeys(expanded):
        collector = COLLECTORS[name]
        if collector.heavy != heavy:
            continue
        override = host_vars.get(collector.timeout_var)
        spec = collector.spec(sudo, float(override) if override else None)
        if collector.build is not None:
            spec = replace(spec, argv=collector.build(host_vars, profile))
        out.append(spec)
    return out


def light_specs(host_vars: Mapping[str, Any], names: Optional[Iterable[str]] = None,
                profile: Any = None) -> list[CommandSpec]:
    """The light collectors for one host (all registered light ones when ``names`` is None)."""
    chosen = list(names) if names is not None else [n for n, c in COLLECTORS.items() if not c.heavy and n != "sudo"]
    if host_vars.get("sudo") and "sudo" not in chosen:
        chosen.append("sudo")
    return specs_for(chosen, host_vars, heavy=False, profile=profile)
