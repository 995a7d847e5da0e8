"""Package actions: NVIDIA's repository (or a local mirror), the driver branch (+ fabric manager), packages,
nccl-tests, and the check that the driver is loaded.

Package names (NVIDIA's CUDA repository):

- driver: apt ``nvidia-driver-<branch>`` (``-open``); dnf: module ``nvidia-driver:<branch>-dkms`` (``-open``),
  package ``nvidia-driver``;
- fabric manager: apt ``nvidia-fabricmanager-<branch>``; dnf ``nvidia-fabric-manager``;
- CUDA toolkit, DCGM, container toolkit, both: ``cuda-toolkit-12-4``, ``datacenter-gpu-manager``,
  ``nvidia-container-toolkit``.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from nvdeploy.actions.base import (
    BRANCH,
    SAFE_WORD,
    URL,
    Action,
    ActionContext,
    Cmd,
    Param,
    Probe,
    StepFailed,
    literal,
    register,
)
from nvdeploy.actions.system import (
    SMI_DRIVER,
    installed_versions,
    package_query,
    parse_packages,
    preflight_problems,
    smi_driver,
    write_file_cmd,
)

OFFICIAL_REPOS = "https://developer.download.nvidia.com/compute/cuda/repos"
APT_LIST = "/etc/apt/sources.list.d/nvdeploy-nvidia.list"
APT_KEYRING = "/usr/share/keyrings/nvdeploy-cuda-archive-keyring.gpg"
DNF_REPO = "/etc/yum.repos.d/nvdeploy-nvidia.repo"
APT_INSTALL = ("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-y", "-q", "-o", "Dpkg::Options::=--force-confdef",
               "-o", "Dpkg::Options::=--force-confold", "install", "--no-install-recommends")
# Unpacks a prebuilt nccl-tests tarball ($1) into $2 and records where it came from ($3).
UNTAR_SCRIPT = ('set -e; mkdir -p "$2"; tar -xzf "$1" -C "$2" --strip-components=1; '
                'test -x "$2/build/all_reduce_perf"; printf "%s\\n" "$3" > "$2/.nvdeploy-source"')
UNTAR_HELPER = "nvdeploy-untar"
NCCL_CACHE = "/var/cache/nvdeploy-nccl-tests.tar.gz"


def repo_url(ctx: ActionContext, mirror: str) -> str:
    """The repository folder for this node's OS: ``<mirror or NVIDIA>/<ubuntu2204|rhel9|...>/x86_64/``."""
    ctx.os_family()
    base = (mirror or OFFICIAL_REPOS).rstrip("/")
    return f"{base}/{ctx.facts['distro_tag']}/x86_64/"


def install_cmd(ctx: ActionContext, packages: list[str], timeout_s: float) -> Cmd:
    if ctx.os_family() == "apt":
        return Cmd("install", (*APT_INSTALL, *packages), timeout_s=timeout_s)
    return Cmd("install", ("dnf", "-y", "install", *packages), timeout_s=timeout_s)


def run_install(ctx: ActionContext, cmd: Cmd) -> None:
    """Run an install; on apt, a package not found yet gets one ``apt-get update`` and a second try."""
    try:
        ctx.run_cmd(cmd)
    except StepFailed as exc:
        text = (exc.result.err_text if exc.result is not None else "")
        if ctx.os_family() != "apt" or "Unable to locate package" not in text:
            raise
        ctx.run_cmd(Cmd("update", ("apt-get", "-q", "update"), timeout_s=600))
        ctx.run_cmd(cmd)


@register
class NvidiaRepo(Action):
    """NVIDIA's CUDA repository, or a local mirror of it (``mirror``: the URL that holds ``<distro>/x86_64/``, as
    https://developer.download.nvidia.com/compute/cuda/repos does). apt: the signing key is fetched to
    /usr/share/keyrings/ and the list written to /etc/apt/sources.list.d/nvdeploy-nvidia.list, then
    ``apt-get update``; dnf: /etc/yum.repos.d/nvdeploy-nvidia.repo."""

    name = "repo.nvidia"
    params = (Param("mirror", default="", pattern=f"|{URL}", doc="local mirror URL; empty: NVIDIA's repository"),)

    def _desired(self, ctx: ActionContext, p: Mapping[str, Any]) -> str:
        url = repo_url(ctx, p["mirror"])
        if ctx.os_family() == "apt":
            return f"deb [signed-by={APT_KEYRING}] {url} /"
        return "\n".join(["[nvdeploy-nvidia]", "name=NVIDIA CUDA repository (nvdeploy)", f"baseurl={url}",
                          "enabled=1", "gpgcheck=1", f"gpgkey={url}D42D0685.pub"])

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        family = ctx.os_family()
        path = APT_LIST if family == "apt" else DNF_REPO
        found, key = ctx.read_many([("repo_file", ("cat", path)), ("keyring", ("cat", APT_KEYRING))])
        current = {path: found.text.strip() if found.ok else "absent"}
        desired = {path: literal(self._desired(ctx, p))}
        if family == "apt":
            current[APT_KEYRING] = "present" if key.ok else "absent"
            desired[APT_KEYRING] = "present"
        return Probe(current=current, desired=desired)

    def plan(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> list[Cmd]:
        cmds = []
        if APT_KEYRING in probe.differing():
            key_url = repo_url(ctx, p["mirror"]) + "cuda-archive-keyring.gpg"
            cmds.append(Cmd("fetch_key", ("curl", "-fsSL", "--retry", "3", "-o", APT_KEYRING, key_url), timeout_s=300))
        path = APT_LIST if ctx.os_family() == "apt" else DNF_REPO
        if path in probe.differing():
            cmds.append(write_file_cmd("write_repo", path, self._desired(ctx, p)))
        if ctx.os_family() == "apt":
            cmds.append(Cmd("update", ("apt-get", "-q", "update"), timeout_s=600))
        return cmds


def driver_packages(ctx: ActionContext, branch: str, open_modules: bool, fabricmanager: bool) -> dict[str, str]:
    """{'driver': package, 'fabricmanager': package?, 'stream': dnf module stream?} for this node's OS."""
    flavour = "-open" if open_modules else ""
    if ctx.os_family() == "apt":
        names = {"driver": f"nvidia-driver-{branch}{flavour}"}
        if fabricmanager:
            names["fabricmanager"] = f"nvidia-fabricmanager-{branch}"
    else:
        names = {"driver": "nvidia-driver", "stream": f"nvidia-driver:{branch}{flavour or '-dkms'}"}
        if fabricmanager:
            names["fabricmanager"] = "nvidia-fabric-manager"
    return names


def _upstream(version: str) -> str:
    return version.split(":", 1)[-1].split("-", 1)[0]


@register
class DriverInstall(Action):
    """The driver branch (and, on NVSwitch SKUs, nvidia-fabricmanager of the same version), then the module
    loaded. Refuses like driver.preflight before changing anything. When an older driver's module is still loaded,
    the new one needs a reboot: with --allow-reboot a later node.reboot step does it; without, the step FAILs."""

    name = "driver.install"
    params = (Param("branch", required=True, pattern=BRANCH, doc="driver branch, e.g. 550"),
              Param("fabricmanager", "choice", default="auto", choices=("auto", "true", "false"),
                    doc="auto: when the profile's GPUs use NVSwitch"),
              Param("open", "bool", default=False, doc="the open kernel modules flavour"),
              Param("timeout_s", "number", default=1800.0, doc="limit of the package installation"))

    def _names(self, ctx: ActionContext, p: Mapping[str, Any]) -> dict[str, str]:
        wanted = p["fabricmanager"]
        fm = ctx.profile.gpu.nvswitch if wanted == "auto" else wanted == "true"
        return driver_packages(ctx, p["branch"], p["open"], fm)

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        names = self._names(ctx, p)
        packages = [names["driver"]] + ([names["fabricmanager"]] if "fabricmanager" in names else [])
        family = ctx.os_family()
        query, smi = ctx.read_many([package_query(family, packages), SMI_DRIVER])
        versions = parse_packages(family, packages, query)
        branch = p["branch"]
        driver = versions[names["driver"]]
        current = {f"package {n}": versions[n] or "absent" for n in packages}
        desired = {f"package {names['driver']}": f"{branch}.*"}
        if "fabricmanager" in names:
            same = _upstream(driver) if driver and driver.startswith(branch + ".") else branch + "."
            desired[f"package {names['fabricmanager']}"] = f"{same}*"
        state, loaded = smi_driver(ctx, smi)
        installed = _upstream(driver) if driver else None
        if state == "ok":
            current["loaded driver"] = loaded or "unknown"
        elif state == "mismatch" and installed:
            # The new driver is installed but an older module is loaded: only a reboot loads the new one.
            ctx.facts["reboot_required"] = f"driver {installed} installed while an older module is loaded"
            current["loaded driver"] = (f"{installed} (pending reboot)" if ctx.allow_reboot else
                                        f"an older module; {installed} needs a reboot (rerun with --allow-reboot)")
        else:
            current["loaded driver"] = {"missing": "none", "not_loaded": "not loaded"}.get(state, state)
        desired["loaded driver"] = f"{branch}.*"
        probe = Probe(current=current, desired=desired, facts={"names": names})
        if any(k.startswith("package ") for k in probe.differing()):
            problems = preflight_problems(ctx)
            if problems:
                probe.failure = "preflight refused the driver install: " + "; ".join(problems)
        return probe

    def plan(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> list[Cmd]:
        names = probe.facts["names"]
        differing = probe.differing()
        cmds = []
        packages = [n for k, n in names.items() if k != "stream" and f"package {n}" in differing]
        if packages:
            if ctx.os_family() == "dnf" and names["driver"] in packages:
                cmds.append(Cmd("module", ("dnf", "-y", "module", "install", names["stream"]),
                                timeout_s=float(p["timeout_s"])))
                packages.remove(names["driver"])
            if packages:
                cmds.append(install_cmd(ctx, packages, float(p["timeout_s"])))
        cmds.append(Cmd("load_module", ("modprobe", "nvidia"), allow_fail=True, timeout_s=120))
        return cmds

    def apply(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> None:
        for cmd in self.plan(ctx, p, probe):
            if cmd.name == "install":
                run_install(ctx, cmd)
            else:
                ctx.run_cmd(cmd)

    def verify(self, ctx: ActionContext, p: Mapping[str, Any], before: Probe) -> Probe:
        after = self.probe(ctx, p)
        after.failure = None  # the preflight guards changes, not the check after them
        if ctx.facts.get("reboot_required") and ctx.allow_reboot:
            after.note = "reboot required to load the new driver (the node.reboot step does it)"
        return after


@register
class PackagesInstall(Action):
    """Packages installed from the configured repositories (any version). ``apt``/``dnf`` replace ``packages``
    on that family when names differ."""

    name = "packages.install"
    params = (Param("packages", "list", required=True, pattern=SAFE_WORD, doc="package names"),
              Param("apt", "list", default=[], pattern=SAFE_WORD, doc="names on Ubuntu/Debian, if different"),
              Param("dnf", "list", default=[], pattern=SAFE_WORD, doc="names on RHEL/Rocky/Alma, if different"),
              Param("timeout_s", "number", default=1800.0))

    def _names(self, ctx: ActionContext, p: Mapping[str, Any]) -> list[str]:
        family = ctx.os_family()
        return list(p[family]) if p[family] else list(p["packages"])

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        names = self._names(ctx, p)
        versions = installed_versions(ctx, names)
        return Probe(current={f"package {n}": versions[n] or "absent" for n in names},
                     desired={f"package {n}": "[0-9]*" for n in names})

    def plan(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> list[Cmd]:
        missing = [n for n in self._names(ctx, p) if f"package {n}" in probe.differing()]
        return [install_cmd(ctx, missing, float(p["timeout_s"]))]

    def apply(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> None:
        for cmd in self.plan(ctx, p, probe):
            run_install(ctx, cmd)


@register
class NcclTestsInstall(Action):
    """A prebuilt nccl-tests tarball (one top folder holding ``build/all_reduce_perf``) unpacked into ``dest``:
    from a URL (a mirror) or a path on the node. ``dest/.nvdeploy-source`` records the source, so a second run with
    the same source changes nothing. Point the inventory's ``nccl_tests_dir`` at ``<dest>/build``."""

    name = "nccl_tests.install"
    params = (Param("source", required=True, pattern=f"{URL}|/[^\\s'\"\\\\]+",
                    doc="URL or absolute path of the .tar.gz"),
              Param("dest", default="/opt/nccl-tests", pattern=r"/[A-Za-z0-9._/-]+", doc="install folder"))

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        marker = ctx.read("marker", ("cat", f"{p['dest'].rstrip('/')}/.nvdeploy-source"))
        current = marker.text.strip() if marker.ok else "absent"
        return Probe(current={f"nccl-tests in {p['dest']}": f"from {current}" if marker.ok else "absent"},
                     desired={f"nccl-tests in {p['dest']}": f"from {literal(p['source'])}"})

    def plan(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> list[Cmd]:
        source = p["source"]
        cmds = []
        if re.match(r"[a-z]+://", source):
            cmds.append(Cmd("download", ("curl", "-fsSL", "--retry", "3", "-o", NCCL_CACHE, source), timeout_s=900))
            local = NCCL_CACHE
        else:
            local = source
        cmds.append(Cmd("unpack", ("sh", "-c", UNTAR_SCRIPT, UNTAR_HELPER, local, p["dest"].rstrip("/"), source),
                        timeout_s=600))
        return cmds


@register
class DriverVerify(Action):
    """nvidia-smi answers (exit 0) with a driver of the branch on every GPU: the driver is installed and loaded.
    FAIL with nvidia-smi's own reason otherwise (not found, 9 not loaded, 18 reboot needed)."""

    name = "driver.verify"
    mutates = False
    params = (Param("branch", required=True, pattern=BRANCH),)

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        state, version = smi_driver(ctx)
        reasons = {"missing": "nvidia-smi not found: the driver is not installed",
                   "not_loaded": "nvidia-smi exit 9: the NVIDIA driver is not loaded",
                   "mismatch": "nvidia-smi exit 18: driver/library mismatch, reboot required"}
        if state != "ok":
            return Probe(failure=reasons.get(state, state))
        if not (version or "").startswith(p["branch"] + "."):
            return Probe(failure=f"driver {version} is loaded, expected branch {p['branch']}")
        return Probe(note=f"driver {version} loaded")
