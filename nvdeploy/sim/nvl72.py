"""Simulated NVL72 compute trays (a hardware profile with ``nvlink_domain``: GB200/GB300 NVL72).

Every GPU of a healthy tray registers with its rack's NVLink fabric as the real GB200 capture shows it (DTD v13
``<fabric>``: State ``Completed``, Status ``Success``, a cliqueId and a clusterUuid, health ``Healthy`` / ``Full``
with the three route flags ``False``), reports ``<gpu_recovery_action>None``, C2C mode Enabled and its
``<platformInfo>``. The trays of one rack share the clusterUuid and cliqueId: both derive from the inventory's
``rack`` var (else the inventory's cluster name: one rack), so a multi-rack inventory is one domain per rack.
The NVML probe reads the same facts (nvdeploy/sim/fake_nvml.py).

Faults:

- ``fabric_incomplete``: every GPU's registration is ``In Progress`` (no status, cliqueId or clusterUuid yet).
- ``fabric_zero_uuid``: every GPU reports ``Completed`` / ``Success`` with an all-zero clusterUuid.
- ``fabric_unhealthy``: GPU 2's health summary is ``Unhealthy`` with bandwidth ``Degraded``.
- ``recovery_reset``: GPU 1's recovery action is ``Reset`` (as NVIDIA's documentation names it; no capture).
- ``domain_split``: the tray registers with another cliqueId than the rest of its rack (a domain of its own).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace

from nvdeploy.sim.scenario import FACT_FILTERS, NodeFacts, NodeScenario, SimFabric, register_fault
from nvdeploy.sim.tools import ToolOutput, register_tool

UNHEALTHY_GPU = 2
RESET_GPU = 1
# The cliqueId of a whole rack (the GB300 capture's; the GB200 one reports 2), and of a split-off tray.
RACK_CLIQUE = 32766
SPLIT_CLIQUE = 32765
ZERO_UUID = "00000000-0000-0000-0000-000000000000"

register_fault("fabric_incomplete", "NVL72 tray: every GPU's NVLink fabric registration is In Progress")
register_fault("fabric_zero_uuid", "NVL72 tray: every GPU reports fabric Completed/Success with an all-zero "
               "clusterUuid")
register_fault("fabric_unhealthy", f"NVL72 tray: GPU {UNHEALTHY_GPU}'s fabric health Unhealthy, bandwidth Degraded")
register_fault("recovery_reset", f"NVL72 tray: GPU {RESET_GPU}'s recovery action is Reset")
register_fault("domain_split", "NVL72 tray: the tray registers with another cliqueId than the rest of its rack")


def rack_of(scenario: NodeScenario) -> str:
    """The rack whose NVLink domain the tray joins: the ``rack`` var, else the whole inventory is one rack."""
    return scenario.rack or scenario.cluster or "rack"


def cluster_uuid(scenario: NodeScenario) -> str:
    digest = hashlib.sha256(f"nvdeploy-sim-nvlink/{scenario.cluster}/{rack_of(scenario)}".encode()).hexdigest()
    return f"{digest[0:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _tray_index(name: str) -> int:
    digits = re.findall(r"\d+", name)
    return (int(digits[-1]) - 1) % 18 + 1 if digits else 1


def _fabric(scenario: NodeScenario, index: int) -> SimFabric:
    tray = _tray_index(scenario.name)
    chassis = str(1820000000000 + int(hashlib.sha256(rack_of(scenario).encode()).hexdigest()[:8], 16) % 10**6)
    base = SimFabric(clique_id=SPLIT_CLIQUE if scenario.has("domain_split") else RACK_CLIQUE,
                     cluster_uuid=cluster_uuid(scenario), chassis_serial=chassis, slot=tray + 9 if tray > 8 else tray,
                     tray=tray)
    if scenario.has("fabric_incomplete"):
        return replace(base, state="In Progress", status="N/A", clique_id=0, cluster_uuid="N/A", health="N/A",
                       bandwidth="N/A")
    if scenario.has("fabric_zero_uuid"):
        base = replace(base, cluster_uuid=ZERO_UUID)
    if scenario.has("fabric_unhealthy") and index == UNHEALTHY_GPU:
        base = replace(base, health="Unhealthy", bandwidth="Degraded")
    return base


def _trays(scenario: NodeScenario, facts: NodeFacts) -> NodeFacts:
    """The fabric, recovery action and platform info of a tray's GPUs; other SKUs unchanged."""
    if scenario.hardware.nvlink_domain is None or not facts.gpus or facts.gpus[0].fabric is not None:
        return facts
    reset = min(RESET_GPU, len(facts.gpus) - 1)
    gpus = tuple(replace(g, fabric=_fabric(scenario, g.index),
                         recovery_action="Reset" if scenario.has("recovery_reset") and g.index == reset
                         else "None") for g in facts.gpus)
    return replace(facts, gpus=gpus)


FACT_FILTERS.append(_trays)


@register_tool("awk")
def _awk(scenario: NodeScenario, args: list[str]) -> ToolOutput:
    """Only the uptime collector's ``awk '{print $1}' /proc/uptime``: up since the simulated boot, 3 h before the
    simulation's clock (nvdeploy/sim/tools.py BOOT_TIME)."""
    if args == ["{print $1}", "/proc/uptime"]:
        return ToolOutput(b"10800.00\n")
    return ToolOutput(b"", b"awk: the simulator runs only awk '{print $1}' /proc/uptime\n", 2)
