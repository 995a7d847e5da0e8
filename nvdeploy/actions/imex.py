"""IMEX on the trays of a multi-node NVLink domain (GB200/GB300 NVL72): the IMEX package at the driver's own
version (``imex_package``: ``nvidia-imex`` from R580, ``nvidia-imex-<branch>`` before), and the domain's node list
``/etc/nvidia-imex/nodes_config.cfg`` written from the inventory (NVIDIA IMEX guide, "Getting Started with IMEX":
one address per line, the same file on every tray of the domain; the daemon reads it only when it starts). The
service itself is the service.running action.
"""

from __future__ import annotations

from typing import Any, Mapping

from nvdeploy.actions.base import (
    BRANCH,
    Action,
    ActionContext,
    Cmd,
    Param,
    Probe,
    literal,
    register,
)
from nvdeploy.actions.packages import VERSION, install_cmd, run_install, version_problem, versioned
from nvdeploy.actions.system import installed_versions, write_file_cmd

NODES_CONFIG = "/etc/nvidia-imex/nodes_config.cfg"  # nvdeploy/collect/stack_commands.py IMEX_NODES_CONFIG
# From R580 NVIDIA's CUDA repositories ship IMEX as one package, ``nvidia-imex``, versioned by the driver release; the
# branch name (``nvidia-imex-580``) is at most a name it provides, which apt will not install at a version and dpkg
# does not report as installed. NVIDIA's own driver containers install ``nvidia-imex`` from R580 and
# ``nvidia-imex-<branch>`` for R550-R570, on apt and dnf alike (NVIDIA/gpu-driver-container commit 06a208c,
# ubuntu22.04/precompiled/nvidia-driver imex_install, rhel9/precompiled/Dockerfile).
SINGLE_PACKAGE_FROM = 580


def imex_package(branch: str) -> str:
    """The IMEX package's real name for a driver branch (both package families)."""
    return "nvidia-imex" if branch.isdigit() and int(branch) >= SINGLE_PACKAGE_FROM else f"nvidia-imex-{branch}"
# An IP address (v4 or v6) or a host name: the values are written into a file the daemon parses line by line.
ADDRESS = r"[A-Za-z0-9][A-Za-z0-9.:-]{0,252}"


@register
class ImexInstall(Action):
    """The IMEX package installed at exactly the driver's version (the daemon refuses to start beside a driver of
    another version), probed and installed by its real name (``imex_package``): ``version`` (the inventory's
    ``driver_version``) when given, else the version of the installed ``nvidia-driver`` package of the branch; apt
    ``nvidia-imex=580.95.05-*`` (R570: ``nvidia-imex-570=570.124.06-*``), dnf ``nvidia-imex-580.95.05`` (R570:
    ``nvidia-imex-570-570.124.06``). Without either (no driver yet): the newest of the branch."""

    name = "imex.install"
    params = (Param("branch", required=True, pattern=BRANCH, doc="driver branch, e.g. 580"),
              Param("version", default="", pattern=VERSION, doc="exact driver version; empty: the installed one"),
              Param("timeout_s", "number", default=1800.0))

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        branch, exact = p["branch"], p["version"]
        problem = version_problem(branch, exact)
        if problem:
            return Probe(failure=problem)
        package = imex_package(branch)
        found = installed_versions(ctx, [package, *_driver_names(ctx, branch)])
        drivers = [v.split(":", 1)[-1].split("-", 1)[0] for n, v in found.items() if n != package and v]
        version = exact or (drivers[0] if drivers and drivers[0].startswith(branch + ".") else "")
        current = found[package]
        return Probe(current={f"package {package}": (current.split(":", 1)[-1] if current else "absent")},
                     desired={f"package {package}": f"{literal(version)}-*" if version else f"{branch}.*"},
                     facts={"package": package, "version": version})

    def plan(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> list[Cmd]:
        package, version = probe.facts["package"], probe.facts["version"]
        # Unpinned, the plain R580+ package carries every branch: hold it to the branch.
        branch = str(p["branch"])
        spec = versioned(ctx.os_family(), package, version) if version else (
            package if package.endswith(f"-{branch}") else versioned(ctx.os_family(), package, f"{branch}.*"))
        return [install_cmd(ctx, [spec], float(p["timeout_s"]), downgrade=bool(version))]

    def apply(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> None:
        for cmd in self.plan(ctx, p, probe):
            run_install(ctx, cmd)


def _driver_names(ctx: ActionContext, branch: str) -> list[str]:
    """The driver package names that may carry the branch's installed version."""
    if ctx.os_family() == "apt":
        return [f"nvidia-driver-{branch}-open", f"nvidia-driver-{branch}"]
    return ["nvidia-driver"]


@register
class ImexNodesConfig(Action):
    """``/etc/nvidia-imex/nodes_config.cfg`` holding ``addresses``, one per line, in the order given (the inventory's
    order of the domain's trays, so every tray gets the same file). A running nvidia-imex is restarted after the
    file changed: the daemon reads its node list only at start."""

    name = "imex.nodes_config"
    params = (Param("addresses", required=True, pattern=f"{ADDRESS}(,{ADDRESS})*",
                    doc="the IMEX domain's tray addresses, comma-separated (host var imex_address, else the "
                    "inventory address)"),)

    def _content(self, p: Mapping[str, Any]) -> str:
        return "\n".join(p["addresses"].split(","))  # the write helper ends the file with a newline

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        current, active = ctx.read_many([("nodes_config", ("cat", NODES_CONFIG)),
                                         ("imex_active", ("systemctl", "is-active", "nvidia-imex"))])
        return Probe(current={NODES_CONFIG: current.text.strip() if current.ok else "absent"},
                     desired={NODES_CONFIG: literal(self._content(p))},
                     facts={"running": active.text.strip() == "active"})

    def plan(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> list[Cmd]:
        cmds = [write_file_cmd("write_nodes_config", NODES_CONFIG, self._content(p))]
        if probe.facts.get("running"):
            cmds.append(Cmd("restart_imex", ("systemctl", "restart", "nvidia-imex"), timeout_s=120))
        return cmds
