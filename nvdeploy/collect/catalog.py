"""Collectors: the commands that gather raw evidence from a node. Many checks share one collector.

Checks name the collectors they read; the engine runs only the collectors the selected checks need. All light
collectors of a node go to the node in ONE round trip (see transport/batch.py), each with its own timeout,
their outputs kept apart; heavy ones (stress tests that take minutes) run afterwards, one round trip each.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Any, Iterable, Mapping, Optional

from nvdeploy.collect import burnin_commands, firmware_commands, mig_commands, storage_commands
from nvdeploy.collect import datacenter as collect_catalog
from nvdeploy.collect import stack as collect_stack
from nvdeploy.collect.collector import Collector, build_collectors
from nvdeploy.transport.base import CommandSpec

NVIDIA_SMI_XML = Collector(
    "nvidia_smi_xml", ("nvidia-smi", "-q", "-x"), 60.0,
    description="every GPU fact the driver reports (persistence, ECC, rows, PCIe, clocks)")
LSPCI = Collector(
    "lspci", ("lspci", "-D", "-n", "-d", "10de:"), 20.0,
    description="NVIDIA devices on the PCIe bus, whether or not the driver sees them")
KMSG = Collector(
    "kmsg", ("dmesg",), 20.0, needs_root=True, keep_tail=True,
    description="the kernel log since boot: Xid, SXid and PCIe AER events")
SUDO_CHECK = Collector(
    "sudo", ("true",), 20.0, needs_root=True, description="sudo works without a prompt")


@lru_cache(maxsize=8)
def _probe_argv(python: Optional[str]) -> tuple[str, ...]:
    # ~70 KB of compressed source: built the first time a plan needs it, then shared by every node (not at import,
    # which every CLI command, test and fake node pays).
    from nvdeploy.collect.probe.ship import probe_argv

    return probe_argv(python) if python else probe_argv()


def _build_probe(host_vars: Mapping[str, Any], profile: Any) -> tuple[str, ...]:
    return _probe_argv(host_vars.get("probe_python") or None)


NVML_PROBE = Collector(
    "nvml_probe", ("/bin/sh", "-c", "LAUNCH", "nvd-probe", "BOOTSTRAP", "PAYLOAD", "/usr/bin/python3"), 60.0,
    build=_build_probe,
    description="the node probe: GPU facts from NVML through the node's system Python, started isolated from a "
                "fixed path (nvidia-smi is the fallback)")
# Collectors that run whenever another one does: the probe rides along with nvidia-smi in the same round trip
# and supplies the GPU facts when it works; nvidia-smi's exit status still decides the driver's state.
COMPANIONS: dict[str, tuple[str, ...]] = {"nvidia_smi_xml": ("nvml_probe",)}

# The catalog, from an explicit list of groups (the order is the order of a full light batch); no module registers
# anything by being imported. Tests may add to it (monkeypatch.setitem).
COLLECTORS: dict[str, Collector] = build_collectors(
    (NVIDIA_SMI_XML, LSPCI, KMSG, SUDO_CHECK, NVML_PROBE), collect_catalog.COLLECTORS, collect_stack.COLLECTORS,
    storage_commands.COLLECTORS, burnin_commands.COLLECTORS, firmware_commands.COLLECTORS, mig_commands.COLLECTORS)


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
        if not override and collector.timeout_for is not None:
            override = collector.timeout_for(host_vars)
        spec = collector.spec(sudo, float(override) if override else None)
        if collector.build is not None:
            argv = collector.build(host_vars, profile)
            if not argv:  # nothing to run on this host (storage without storage_paths): not planned at all
                continue
            spec = replace(spec, argv=argv)
        out.append(spec)
    return out


def light_specs(host_vars: Mapping[str, Any], names: Optional[Iterable[str]] = None,
                profile: Any = None) -> list[CommandSpec]:
    """The light collectors for one host (every light one of the catalog when ``names`` is None)."""
    chosen = list(names) if names is not None else [n for n, c in COLLECTORS.items() if not c.heavy and n != "sudo"]
    if host_vars.get("sudo") and "sudo" not in chosen:
        chosen.append("sudo")
    return specs_for(chosen, host_vars, heavy=False, profile=profile)
