"""IMEX on simulated NVLink domain trays (a profile with ``nvlink_domain``): the package, service and node list in
the node's baseline state, ``nvidia-imex-ctl -q`` and ``-N -j``, and the ``imex_files`` listing.

Formats follow the public captures in tests/fixtures/real/imex/ (PROVENANCE.tsv): ``-q`` prints the state word
(``READY``); ``-N -j`` the domain as ``{"nodes": {"<i>": {"status", "host", "connections": {"<j>": {"host",
"status", "changed"}}, "changed", "version", "hostName"}}, "timestamp", "status"}``, a node that does not answer
``UNAVAILABLE`` with every connection ``INVALID``, the domain ``UP``, ``DEGRADED`` or ``DOWN``. What the daemon
prints when it is down was not in a capture: here ``-q``/``-N`` exit 1 with a line on stderr.

The node list: the file install wrote (one address per line), else the baseline's placeholder, which stands for
"the rack's trays": the node itself and the peers it was given (the cluster stage gives the domain's trays).

Faults:

- ``imex_down``: the nvidia-imex service failed (``systemctl is-active`` prints ``failed``); ``nvidia-imex-ctl``
  cannot reach it; the other trays see this one UNAVAILABLE.
- ``imex_peer_missing``: this tray's own daemon runs (active, READY) but no other tray is connected to it: in every
  other tray's view it is UNAVAILABLE with its connections INVALID, and in its own view every other tray is.
- ``imex_no_channel``: /dev/nvidia-caps-imex-channels/channel0 is missing.
- ``imex_dra``: IMEX run by Kubernetes as the NVIDIA DRA driver's prerequisites ask: the host service disabled,
  inactive and masked (``systemctl is-enabled`` prints ``masked``: its unit file is a link to /dev/null), and the
  DRA driver's /var/lib/kubelet/plugins/compute-domain.nvidia.com folder exists.
- ``imex_dra_host_active``: the DRA driver's folder exists, but the host service is still enabled and active (the
  host daemon holds the IMEX session the ComputeDomain daemons need).
- ``imex_dra_unmasked``: the DRA driver's folder exists and the host service is disabled and inactive, not masked.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from nvdeploy.actions.imex import imex_package
from nvdeploy.collect.stack_commands import (
    IMEX_CHANNEL0,
    IMEX_DRA_PLUGIN_DIR,
    IMEX_NODES_CONFIG,
    IMEX_SERVICE,
)
from nvdeploy.sim.scenario import NodeScenario, driver_versions, register_fault
from nvdeploy.sim.tools import ToolOutput, register_tool

PLACEHOLDER = "# simulated NVL72 rack: the trays of this rack (nvdeploy install writes their addresses)\n"
SIM_TIMESTAMP = "12/2/2026 10:00:00.000"
DOWN_MESSAGE = "nvidia-imex-ctl: could not connect to the IMEX command service\n"

register_fault("imex_down", "nvidia-imex failed: nvidia-imex-ctl cannot reach it, other trays see it UNAVAILABLE")
register_fault("imex_peer_missing", "this tray's IMEX daemon runs but no other tray is connected to it")
register_fault("imex_no_channel", f"{IMEX_CHANNEL0} missing")
register_fault("imex_dra", "IMEX run by Kubernetes: host nvidia-imex disabled and masked, the DRA compute-domain "
               "plugin present")
register_fault("imex_dra_host_active", "the DRA compute-domain plugin present, yet the host nvidia-imex enabled and "
               "running (imex.daemon FAILs)")
register_fault("imex_dra_unmasked", "the DRA compute-domain plugin present, the host nvidia-imex disabled and off "
               "but not masked (imex.daemon WARNs)")
DRA_FAULTS = ("imex_dra", "imex_dra_host_active", "imex_dra_unmasked")
# ``systemctl mask`` links the unit file to /dev/null (the simulated systemctl reads it as masked).
MASK_LINK = f"/etc/systemd/system/{IMEX_SERVICE}.service"


def imex_tray(scenario: NodeScenario) -> bool:
    """Whether the simulated hardware is a tray of a multi-node NVLink domain (IMEX installed with the driver)."""
    return getattr(scenario.hardware, "nvlink_domain", None) is not None


def _baseline(scenario: NodeScenario, state: Any) -> None:
    if not imex_tray(scenario) or scenario.has("bare") or state.family is None:
        return
    branch = driver_versions(scenario)[0].split(".")[0]
    state.packages[imex_package(branch)] = driver_versions(scenario)[0] + "-1"
    if scenario.has("imex_dra") or scenario.has("imex_dra_unmasked"):
        state.services[IMEX_SERVICE] = [False, False]
        if scenario.has("imex_dra"):
            state.files[MASK_LINK] = "/dev/null"
        return
    state.services[IMEX_SERVICE] = [True, not scenario.has("imex_down")]
    state.files[IMEX_NODES_CONFIG] = PLACEHOLDER


def _register_state_hooks() -> None:
    from nvdeploy.sim import state as st

    st.BASELINE_HOOKS.append(_baseline)


_register_state_hooks()


def _state(scenario: NodeScenario) -> Any:
    from nvdeploy.sim import state as st

    return st.current(scenario)


def unit_state(scenario: NodeScenario) -> str:
    """``systemctl is-active nvidia-imex`` of a node nothing has changed yet (nvdeploy/sim/datacenter.py)."""
    flags = _state(scenario).service(IMEX_SERVICE)
    if flags is None:
        return "inactive"
    return "active" if flags[1] else ("failed" if flags[0] else "inactive")


def _running(scenario: NodeScenario) -> bool:
    flags = _state(scenario).service(IMEX_SERVICE)
    return flags is not None and bool(flags[1])


def node_list(scenario: NodeScenario) -> list[str]:
    """The domain's addresses in node-list order (index = line)."""
    text = _state(scenario).files.get(IMEX_NODES_CONFIG, "")
    listed = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    if listed:
        return listed
    return sorted({scenario.name, *(address for address, _ in scenario.peers)})


def domain_json(scenario: NodeScenario) -> str:
    """``nvidia-imex-ctl -N -j`` as this tray's daemon reports its domain."""
    faults = {address: set(f) for address, f in scenario.peers}
    faults[scenario.name] = set(scenario.faults)
    hosts = node_list(scenario)
    me = scenario.name
    isolated = "imex_peer_missing" in faults.get(me, set())

    def up(host: str) -> bool:
        if host == me:
            return True
        if isolated:
            return False
        return not ({"imex_down", "imex_peer_missing", "unreachable", "imex_dra", "imex_dra_unmasked"}
                    & faults.get(host, set()))

    version = ".".join(driver_versions(scenario)[0].split(".")[:2])
    nodes: dict[str, Any] = {}
    for i, host in enumerate(hosts):
        alive = up(host)
        connections = {str(j): {"host": other, "status": _link(alive, up(other)), "changed": True}
                       for j, other in enumerate(hosts)}
        nodes[str(i)] = {"status": "READY" if alive else "UNAVAILABLE", "host": host, "connections": connections,
                         "changed": True, "version": version if alive else "", "hostName": ""}
    ready = sum(1 for n in nodes.values() if n["status"] == "READY")
    status = "UP" if ready == len(nodes) else ("DOWN" if ready == 0 else "DEGRADED")
    return json.dumps({"nodes": nodes, "timestamp": SIM_TIMESTAMP, "status": status}, indent=1) + "\n"


def _link(alive: bool, other_up: bool) -> str:
    # A daemon that does not answer has no connection status (INVALID); one that answers reports each peer.
    if not alive:
        return "INVALID"
    return "CONNECTED" if other_up else "DISCONNECTED"


@register_tool("nvidia-imex-ctl")
def _imex_ctl(scenario: NodeScenario, args: Sequence[str]) -> ToolOutput:
    if IMEX_NODES_CONFIG not in _state(scenario).files and not any(
            p.startswith("nvidia-imex") for p in _state(scenario).packages):
        return ToolOutput(b"", b"sh: 1: nvidia-imex-ctl: not found\n", 127)
    if not _running(scenario):
        return ToolOutput(b"", DOWN_MESSAGE.encode(), 1)
    if IMEX_NODES_CONFIG not in _state(scenario).files:
        return ToolOutput(b"Failed to read node configuration file /etc/nvidia-imex/nodes_config.cfg\n", rc=255)
    if list(args) == ["-q"]:
        return ToolOutput(b"READY\n")
    if list(args) in (["-N", "-j"], ["-j", "-N"]):
        return ToolOutput(domain_json(scenario).encode())
    return ToolOutput(b"", b"nvidia-imex-ctl: only -q and -N -j are simulated\n", 2)


def files_output(scenario: NodeScenario) -> tuple[str, str, int]:
    """The ``imex_files`` find: (stdout, stderr, exit status)."""
    state = _state(scenario)
    out, err = [], []
    if imex_tray(scenario) and state.loaded_driver and not scenario.has("imex_no_channel"):
        out.append(f"\n== {IMEX_CHANNEL0} c\n")
    else:
        err.append(f"find: '{IMEX_CHANNEL0}': No such file or directory\n")
    text = state.files.get(IMEX_NODES_CONFIG)
    if text is not None:
        digest = hashlib.sha256(text.encode()).hexdigest()
        out.append(f"\n== {IMEX_NODES_CONFIG} f\n{digest}  {IMEX_NODES_CONFIG}\n")
    else:
        err.append(f"find: '{IMEX_NODES_CONFIG}': No such file or directory\n")
    if any(scenario.has(fault) for fault in DRA_FAULTS):
        out.append(f"\n== {IMEX_DRA_PLUGIN_DIR} d\n")
    else:
        err.append(f"find: '{IMEX_DRA_PLUGIN_DIR}': No such file or directory\n")
    return "".join(out), "".join(err), 1 if err else 0
