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
    describe_failure,
    literal,
    register,
)
from nvdeploy.actions.sources import (
    APT_SOURCES_PROBE,
    DNF_SOURCES_PROBE,
    apt_sources,
    conflicts,
    dnf_sources,
    split_files,
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
APT_LIST = "/etc/apt/sources.list.d/nvdeploy-nvidia.list"  # a mirror's list (and what older nvdeploy wrote)
APT_KEYRING = "/usr/share/keyrings/nvdeploy-cuda-archive-keyring.gpg"
DNF_REPO = "/etc/yum.repos.d/nvdeploy-nvidia.repo"
KEYRING_DEB = "cuda-keyring_1.1-1_all.deb"
KEYRING_CACHE = "/var/cache/nvdeploy-" + KEYRING_DEB
# Right after boot unattended-upgrades often holds the dpkg lock: wait for it (apt >= 1.9.11) instead of failing.
LOCK_TIMEOUT_S = 600
APT_GET = ("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-y", "-q", "-o",
           f"DPkg::Lock::Timeout={LOCK_TIMEOUT_S}")
APT_INSTALL = (*APT_GET, "-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold", "install",
               "--no-install-recommends")
APT_UPDATE = Cmd("update", (*APT_GET, "update"), timeout_s=600 + LOCK_TIMEOUT_S)
# Unpacks a prebuilt nccl-tests tarball ($1) into $2 and records where it came from ($3).
UNTAR_SCRIPT = ('set -e; mkdir -p "$2"; tar -xzf "$1" -C "$2" --strip-components=1; '
                'test -x "$2/build/all_reduce_perf"; printf "%s\\n" "$3" > "$2/.nvdeploy-source"')
UNTAR_HELPER = "nvdeploy-untar"
REMOVE_SCRIPT = 'rm -f -- "$1"'
REMOVE_HELPER = "nvdeploy-remove"
NCCL_CACHE = "/var/cache/nvdeploy-nccl-tests.tar.gz"


def repo_url(ctx: ActionContext, mirror: str) -> str:
    """The repository folder for this node: ``<mirror or NVIDIA>/<ubuntu2204|rhel9|...>/<x86_64|sbsa>/``."""
    ctx.os_family()
    base = (mirror or OFFICIAL_REPOS).rstrip("/")
    return f"{base}/{ctx.facts['distro_tag']}/{ctx.facts.get('arch') or 'x86_64'}/"


def install_cmd(ctx: ActionContext, packages: list[str], timeout_s: float, recommends: bool = False) -> Cmd:
    """An install; ``recommends``: with the recommended / weak dependencies (as NVIDIA's DCGM 4 steps say)."""
    if ctx.os_family() == "apt":
        argv = (*APT_INSTALL[:-1], "--install-recommends") if recommends else APT_INSTALL
        return Cmd("install", (*argv, *packages), timeout_s=timeout_s + LOCK_TIMEOUT_S)
    weak = ("--setopt=install_weak_deps=True",) if recommends else ()
    return Cmd("install", ("dnf", "-y", *weak, "install", *packages), timeout_s=timeout_s)


def remove_cmd(ctx: ActionContext, packages: list[str]) -> Cmd:
    if ctx.os_family() == "apt":
        return Cmd("remove", (*APT_GET, "purge", *packages), timeout_s=600 + LOCK_TIMEOUT_S)
    return Cmd("remove", ("dnf", "-y", "remove", *packages), timeout_s=600)


def remove_file_cmd(name: str, path: str) -> Cmd:
    return Cmd(name, ("sh", "-c", REMOVE_SCRIPT, REMOVE_HELPER, path))


def run_install(ctx: ActionContext, cmd: Cmd) -> None:
    """Run an install; on apt, a package not found yet gets one ``apt-get update`` and a second try."""
    try:
        ctx.run_cmd(cmd)
    except StepFailed as exc:
        text = (exc.result.err_text if exc.result is not None else "")
        if ctx.os_family() != "apt" or "Unable to locate package" not in text:
            raise
        ctx.run_cmd(APT_UPDATE)
        ctx.run_cmd(cmd)


@register
class NvidiaRepo(Action):
    """NVIDIA's CUDA repository, or a local mirror of it (``mirror``: the URL that holds ``<distro>/<arch>/``, as
    https://developer.download.nvidia.com/compute/cuda/repos does; arch ``x86_64``, or ``sbsa`` on aarch64/Grace).

    Any source already pointing at that folder is reused, whatever its file (the ``cuda-keyring`` package's list, a
    deb822 ``.sources``, a ``.repo``): a second entry with another ``Signed-By`` would make apt refuse every command.
    A duplicate older nvdeploy wrote (``nvdeploy-nvidia.list``) next to another entry is removed; other conflicting
    files FAIL the step, named. Otherwise the repository is installed the documented way: apt, NVIDIA's
    ``cuda-keyring`` package (``apt-get install`` of the .deb waits for the dpkg lock), then ``apt-get update``; dnf,
    ``dnf config-manager --add-repo .../cuda-<distro>.repo``. A mirror gets nvdeploy-nvidia.list (key fetched from
    the mirror) or nvdeploy-nvidia.repo."""

    name = "repo.nvidia"
    params = (Param("mirror", default="", pattern=f"|{URL}", doc="local mirror URL; empty: NVIDIA's repository"),)

    def _mirror_file(self, ctx: ActionContext, p: Mapping[str, Any]) -> str:
        url = repo_url(ctx, p["mirror"])
        if ctx.os_family() == "apt":
            return f"deb [signed-by={APT_KEYRING}] {url} /"
        return "\n".join(["[nvdeploy-nvidia]", "name=NVIDIA CUDA repository (nvdeploy)", f"baseurl={url}",
                          "enabled=1", "gpgcheck=1", f"gpgkey={url}D42D0685.pub"])

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        family = ctx.os_family()
        url = repo_url(ctx, p["mirror"])
        found = ctx.read(*(APT_SOURCES_PROBE if family == "apt" else DNF_SOURCES_PROBE))
        if found.rc == 127:
            return Probe(failure=f"cannot list the package sources: {found.err_text.strip() or 'grep not found'}")
        files = split_files(found.text)
        sources = apt_sources(files) if family == "apt" else dnf_sources(files)
        item = f"repository {url}"
        matching = [s for s in sources if s.points_at(url)]
        clash = conflicts(sources, url) if family == "apt" else []
        facts: dict[str, Any] = {"url": url}
        if clash:
            ours = [s for s in clash if s.path == APT_LIST]
            others = [s for s in clash if s.path != APT_LIST]
            if not ours or len({s.signed_by for s in others}) > 1:
                keys = "; ".join(f"{s.path}: {s.signed_by or '(no Signed-By)'}" for s in clash)
                return Probe(failure=f"apt cannot read its sources: {url} is listed with different Signed-By keys "
                             f"({keys}); remove the duplicate entries, keep one")
            facts["remove"] = APT_LIST
            current = f"duplicated in {APT_LIST} (another Signed-By than {others[0].path}: apt refuses to run)"
        elif matching:
            current = f"in {matching[0].path}"
        else:
            current = "absent"
        note = f"NVIDIA's repository {url} already configured {current}: reused" if matching else ""
        return Probe(current={item: current}, desired={item: "in /*"}, facts=facts, note=note)

    def plan(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> list[Cmd]:
        url = probe.facts["url"]
        apt = ctx.os_family() == "apt"
        if probe.facts.get("remove"):
            return [remove_file_cmd("remove_duplicate", probe.facts["remove"]), APT_UPDATE]
        if p["mirror"]:
            cmds = []
            if apt:
                cmds.append(Cmd("fetch_key", ("curl", "-fsSL", "--retry", "3", "-o", APT_KEYRING,
                                              url + "cuda-archive-keyring.gpg"), timeout_s=300))
            cmds.append(write_file_cmd("write_repo", APT_LIST if apt else DNF_REPO, self._mirror_file(ctx, p)))
            return cmds + ([APT_UPDATE] if apt else [])
        if apt:
            return [Cmd("fetch_keyring", ("curl", "-fsSL", "--retry", "3", "-o", KEYRING_CACHE, url + KEYRING_DEB),
                        timeout_s=300),
                    Cmd("install_keyring", (*APT_INSTALL, KEYRING_CACHE), timeout_s=600 + LOCK_TIMEOUT_S), APT_UPDATE]
        repo_file = f"cuda-{ctx.facts['distro_tag']}.repo"
        return [Cmd("plugins", ("dnf", "-y", "install", "dnf-plugins-core"), timeout_s=600),
                Cmd("add_repo", ("dnf", "config-manager", "--add-repo", url + repo_file), timeout_s=300)]


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


NOUVEAU_CONF = "/etc/modprobe.d/blacklist-nouveau.conf"
NOUVEAU_TEXT = "blacklist nouveau\noptions nouveau modeset=0"
MODULE_LIST = ("module_list", ("dnf", "module", "list", "--enabled", "nvidia-driver"))
VERSIONLOCK_LIST = ("versionlock_list", ("dnf", "versionlock", "list"))


def fabricmanager_spec(family: str, name: str, driver_version: str) -> str:
    """The fabric manager pinned to exactly the installed driver's version: a newer one refuses to start."""
    upstream = _upstream(driver_version)
    return f"{name}={upstream}-1" if family == "apt" else f"{name}-{upstream}"


@register
class DriverInstall(Action):
    """The driver branch (and, on NVSwitch SKUs, the fabric manager pinned to exactly the installed driver's
    version: ``nvidia-fabricmanager-550=550.90.07-1`` / ``nvidia-fabric-manager-550.90.07``), then the module
    loaded. Refuses like driver.preflight before changing anything. dnf: another branch's module stream is reset
    first (``dnf module reset nvidia-driver``; dnf refuses to switch enabled streams) and its versionlock removed.
    When ``modprobe nvidia`` fails because nouveau holds the GPUs, nouveau is blacklisted
    (/etc/modprobe.d/blacklist-nouveau.conf) and the initramfs rebuilt (update-initramfs -u / dracut -f). Either
    that or an older driver's module still loaded needs a reboot: the node.reboot step does it with
    --allow-reboot, and without it ends ERROR reboot_required."""

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
            desired[f"package {names['fabricmanager']}"] = f"{same}-*" if same != branch + "." else f"{same}*"
        state, loaded = smi_driver(ctx, smi)
        installed = _upstream(driver) if driver else None
        if state == "ok":
            current["loaded driver"] = loaded or "unknown"
        elif installed and (state == "mismatch" or ctx.facts.get("reboot_required")):
            # Installed, but only a reboot loads it (an older module is loaded, or nouveau holds the GPUs): the
            # node.reboot step does it, or says it may not.
            ctx.facts.setdefault("reboot_required", f"driver {installed} installed while an older module is loaded")
            current["loaded driver"] = f"{installed} (pending reboot)"
        else:
            current["loaded driver"] = {"missing": "none", "not_loaded": "not loaded"}.get(state, state)
        desired["loaded driver"] = f"{branch}.*"
        probe = Probe(current=current, desired=desired, facts={"names": names, "driver": driver})
        if any(k.startswith("package ") for k in probe.differing()):
            problems = preflight_problems(ctx)
            if problems:
                probe.failure = "preflight refused the driver install: " + "; ".join(problems)
        return probe

    def _dnf_switch(self, ctx: ActionContext, names: dict[str, str]) -> list[Cmd]:
        """dnf refuses to switch an enabled module stream: reset it, and drop the old branch's versionlock."""
        cmds = []
        listed, locks = ctx.read_many([MODULE_LIST, VERSIONLOCK_LIST])
        stream = names["stream"].split(":", 1)[1]
        enabled = re.search(r"^nvidia-driver\s+(\S+)", listed.text, re.M) if listed.rc == 0 else None
        if enabled and enabled.group(1) != stream:
            cmds.append(Cmd("module_reset", ("dnf", "-y", "module", "reset", "nvidia-driver"), timeout_s=600))
        locked = [n for k, n in names.items() if k != "stream" and locks.rc == 0 and
                  re.search(rf"^{re.escape(n)}-(\d+:)?\d", locks.text, re.M)]
        if locked:
            cmds.append(Cmd("unlock", ("dnf", "-y", "versionlock", "delete", *locked), timeout_s=300))
        return cmds

    def plan(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> list[Cmd]:
        names = probe.facts["names"]
        differing = probe.differing()
        cmds = []
        timeout = float(p["timeout_s"])
        if f"package {names['driver']}" in differing:
            if ctx.os_family() == "dnf":
                cmds += self._dnf_switch(ctx, names)
                cmds.append(Cmd("module", ("dnf", "-y", "module", "install", names["stream"]), timeout_s=timeout))
            else:
                cmds.append(install_cmd(ctx, [names["driver"]], timeout))
        if "fabricmanager" in names and f"package {names['fabricmanager']}" in differing:
            # Without a driver yet, the version is known once it is installed (apply pins it then).
            version = probe.facts["driver"] or "DRIVER_VERSION"
            cmds.append(install_cmd(ctx, [fabricmanager_spec(ctx.os_family(), names["fabricmanager"], version)],
                                    timeout))
        if "loaded driver" in differing and not ctx.facts.get("reboot_required"):
            cmds.append(Cmd("load_module", ("modprobe", "nvidia"), allow_fail=True, timeout_s=120))
        return cmds

    def apply(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> None:
        names = probe.facts["names"]
        for cmd in self.plan(ctx, p, probe):
            if cmd.name == "install" and "fabricmanager" in names and any(
                    a.startswith(names["fabricmanager"]) for a in cmd.argv[-1:]):
                # Pinned to the driver as installed now (the line above may just have installed it).
                driver = installed_versions(ctx, [names["driver"]])[names["driver"]]
                if driver:
                    pinned = fabricmanager_spec(ctx.os_family(), names["fabricmanager"], driver)
                    cmd = Cmd(cmd.name, (*cmd.argv[:-1], pinned), timeout_s=cmd.timeout_s)
                run_install(ctx, cmd)
            elif cmd.name == "install":
                run_install(ctx, cmd)
            elif cmd.name == "load_module":
                if ctx.run_cmd(cmd).rc != 0:
                    self._nouveau(ctx)
            else:
                ctx.run_cmd(cmd)

    def _nouveau(self, ctx: ActionContext) -> None:
        """modprobe nvidia failed: when nouveau holds the GPUs, blacklist it and rebuild the initramfs (NVIDIA's
        documented pre-install step); the new driver then loads at the next boot."""
        lsmod = ctx.read("lsmod", ("lsmod",))
        if not any(line.split()[:1] == ["nouveau"] for line in lsmod.text.splitlines()):
            return
        conf = ctx.read("nouveau_conf", ("cat", NOUVEAU_CONF))
        if not conf.ok or conf.text.strip() != NOUVEAU_TEXT:
            ctx.run_cmd(write_file_cmd("blacklist_nouveau", NOUVEAU_CONF, NOUVEAU_TEXT))
        rebuild = ("update-initramfs", "-u") if ctx.os_family() == "apt" else ("dracut", "-f")
        ctx.run_cmd(Cmd("initramfs", rebuild, timeout_s=900))
        ctx.facts["reboot_required"] = (f"nouveau holds the GPUs: blacklisted in {NOUVEAU_CONF} and the initramfs "
                                        "rebuilt; the NVIDIA driver loads after a reboot")

    def verify(self, ctx: ActionContext, p: Mapping[str, Any], before: Probe) -> Probe:
        after = self.probe(ctx, p)
        after.failure = None  # the preflight guards changes, not the check after them
        if ctx.facts.get("reboot_required"):
            after.note = f"reboot required: {ctx.facts['reboot_required']} (the node.reboot step)"
        return after


APT_HOLD = "/etc/apt/preferences.d/nvdeploy-nvidia-driver"


@register
class DriverHold(Action):
    """Holds the installed driver (and fabric manager) at its version, so that an unattended upgrade cannot move
    it under a loaded module: apt, a pin in /etc/apt/preferences.d/nvdeploy-nvidia-driver (priority 1001 on
    ``<version>-*`` for the branch's packages); dnf, ``dnf versionlock`` (python3-dnf-plugin-versionlock) on
    nvidia-driver and nvidia-fabric-manager. A branch change rewrites the pin / is unlocked by driver.install."""

    name = "driver.hold"
    params = (Param("branch", required=True, pattern=BRANCH, doc="driver branch, e.g. 550"),
              Param("fabricmanager", "choice", default="auto", choices=("auto", "true", "false")),
              Param("open", "bool", default=False))

    def _names(self, ctx: ActionContext, p: Mapping[str, Any]) -> dict[str, str]:
        fm = ctx.profile.gpu.nvswitch if p["fabricmanager"] == "auto" else p["fabricmanager"] == "true"
        return driver_packages(ctx, p["branch"], p["open"], fm)

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        names = self._names(ctx, p)
        packages = [n for k, n in names.items() if k != "stream"]
        versions = installed_versions(ctx, packages)
        driver = versions[names["driver"]]
        if not driver:
            return Probe(skip=f"{names['driver']} is not installed: nothing to hold")
        upstream = _upstream(driver)
        if ctx.os_family() == "apt":
            branch = p["branch"]
            text = "\n".join([f"# nvdeploy: hold the NVIDIA driver {branch} at {upstream} (no unattended upgrade)",
                              f"Package: {' '.join(packages)} libnvidia-*-{branch} nvidia-*-{branch}",
                              f"Pin: version {upstream}-*", "Pin-Priority: 1001"])
            found = ctx.read("hold", ("cat", APT_HOLD))
            return Probe(current={APT_HOLD: found.text.strip() if found.ok else "absent"},
                         desired={APT_HOLD: literal(text)}, facts={"text": text})
        locks = ctx.read(*VERSIONLOCK_LIST)
        current, desired = {}, {}
        for name in packages:
            if not versions[name]:
                continue
            pattern = rf"^{re.escape(name)}-(?:\d+:)?(\d\S*?)\.\*$"
            match = re.search(pattern, locks.text, re.M) if locks.rc == 0 else None
            current[f"versionlock {name}"] = match.group(1) if match else "absent"
            desired[f"versionlock {name}"] = literal(versions[name] or "")
        return Probe(current=current, desired=desired, facts={"plugin": locks.rc == 0})

    def plan(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> list[Cmd]:
        if ctx.os_family() == "apt":
            return [write_file_cmd("write_pin", APT_HOLD, probe.facts["text"])]
        cmds = [] if probe.facts["plugin"] else [install_cmd(ctx, ["python3-dnf-plugin-versionlock"], 600)]
        stale = [k.split(" ", 1)[1] for k in probe.differing() if probe.current[k] != "absent"]
        if stale:
            cmds.append(Cmd("unlock", ("dnf", "-y", "versionlock", "delete", *stale), timeout_s=300))
        cmds.append(Cmd("lock", ("dnf", "-y", "versionlock", "add",
                                 *[k.split(" ", 1)[1] for k in probe.differing()]), timeout_s=300))
        return cmds


_CUDA_VERSION = re.compile(r"<cuda_version>\s*(\d+)\.")
DCGM_LEGACY = "datacenter-gpu-manager"


@register
class DcgmInstall(Action):
    """DCGM as the profile needs it, started and answering. ``major: 4`` (default): ``datacenter-gpu-manager-4-core``
    plus ``datacenter-gpu-manager-4-cuda<N>``, N the CUDA major of the loaded driver (``nvidia-smi -q -x``), with
    their recommended packages, the legacy 3.x ``datacenter-gpu-manager`` removed first (its files clash);
    ``major: 3``: the legacy package.
    Then ``nvidia-dcgm`` (nv-hostengine) enabled and running, verified by ``dcgmi discovery -l`` listing every GPU
    of the profile."""

    name = "dcgm.install"
    params = (Param("major", "choice", default="4", choices=("3", "4"), doc="DCGM major version"),
              Param("cuda_major", default="auto", pattern=r"auto|\d{2}", doc="auto: the loaded driver's CUDA major"),
              Param("timeout_s", "number", default=1800.0))

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        family = ctx.os_family()
        if p["major"] == "3":
            names, legacy = [DCGM_LEGACY], None
        else:
            cuda = p["cuda_major"]
            if cuda == "auto":
                smi = ctx.read("smi_xml", ("nvidia-smi", "-q", "-x"))
                match = _CUDA_VERSION.search(smi.text) if smi.rc == 0 else None
                if not match:
                    return Probe(failure="cannot tell the driver's CUDA version (nvidia-smi -q -x: "
                                 f"{describe_failure(smi)}): DCGM 4 needs datacenter-gpu-manager-4-cuda<major>")
                cuda = match.group(1)
            names, legacy = ["datacenter-gpu-manager-4-core", f"datacenter-gpu-manager-4-cuda{cuda}"], DCGM_LEGACY
        query, enabled, active, discovery = ctx.read_many([
            package_query(family, names + ([legacy] if legacy else [])),
            ("is_enabled", ("systemctl", "is-enabled", "nvidia-dcgm")),
            ("is_active", ("systemctl", "is-active", "nvidia-dcgm")),
            ("discovery", ("dcgmi", "discovery", "-l"))])
        versions = parse_packages(family, names + ([legacy] if legacy else []), query)
        current = {f"package {n}": versions[n] or "absent" for n in names}
        desired = {f"package {n}": "[0-9]*" for n in names}
        if legacy:
            current[f"legacy {legacy} (DCGM 3)"] = versions[legacy] or "absent"
            desired[f"legacy {legacy} (DCGM 3)"] = "absent"
        current["nvidia-dcgm"] = f"{enabled.text.strip() or 'not installed'}, {active.text.strip() or 'unknown'}"
        desired["nvidia-dcgm"] = "enabled, active"
        found = re.search(r"^(\d+) GPUs? found", discovery.text, re.M) if discovery.rc == 0 else None
        current["dcgmi discovery -l"] = f"{found.group(1)} GPUs" if found else "no answer"
        desired["dcgmi discovery -l"] = f"{ctx.profile.gpu.count} GPUs"
        return Probe(current=current, desired=desired, facts={"names": names, "legacy": legacy})

    def plan(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> list[Cmd]:
        differing = probe.differing()
        cmds = []
        legacy = probe.facts["legacy"]
        if legacy and f"legacy {legacy} (DCGM 3)" in differing:
            cmds.append(remove_cmd(ctx, [legacy]))
        missing = [n for n in probe.facts["names"] if f"package {n}" in differing]
        if missing:
            # NVIDIA's steps install DCGM 4 with its recommended packages (-4-proprietary: the diag plugins).
            cmds.append(install_cmd(ctx, missing, float(p["timeout_s"]), recommends=p["major"] == "4"))
        cmds.append(Cmd("enable", ("systemctl", "enable", "--now", "nvidia-dcgm")))
        return cmds

    def apply(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> None:
        for cmd in self.plan(ctx, p, probe):
            if cmd.name == "install":
                run_install(ctx, cmd)
            else:
                ctx.run_cmd(cmd)


DOCKER_CONFIG = "/etc/docker/daemon.json"
CONTAINERD_CONFIG = "/etc/containerd/config.toml"


@register
class ContainerToolkitConfigure(Action):
    """The NVIDIA container toolkit wired in, not just installed: ``nvidia-ctk runtime configure --runtime=R`` for
    the container runtime present (``auto``: docker when it runs, else containerd, else none), then R restarted;
    and a CDI spec of the loaded driver (``nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml``), regenerated
    when the driver changed. Each part is probed first: a configured node changes nothing."""

    name = "container_toolkit.configure"
    params = (Param("runtime", "choice", default="auto", choices=("auto", "docker", "containerd", "none")),
              Param("cdi", "bool", default=True, doc="generate the CDI spec"),
              Param("cdi_path", default="/etc/cdi/nvidia.yaml", pattern=r"/[A-Za-z0-9._/-]+\.ya?ml"))

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        docker, containerd, daemon, toml, spec, smi = ctx.read_many([
            ("docker_active", ("systemctl", "is-active", "docker")),
            ("containerd_active", ("systemctl", "is-active", "containerd")),
            ("docker_config", ("cat", DOCKER_CONFIG)), ("containerd_config", ("cat", CONTAINERD_CONFIG)),
            ("cdi_spec", ("cat", p["cdi_path"])), SMI_DRIVER])
        runtime = p["runtime"]
        if runtime == "auto":
            runtime = ("docker" if docker.text.strip() == "active" else
                       "containerd" if containerd.text.strip() == "active" else "none")
        current, desired = {}, {}
        if runtime == "docker":
            done = daemon.ok and '"nvidia"' in daemon.text and "nvidia-container-runtime" in daemon.text
            current["docker runtime nvidia"] = "configured" if done else "not configured"
            desired["docker runtime nvidia"] = "configured"
        elif runtime == "containerd":
            done = toml.ok and "runtimes.nvidia]" in toml.text
            current["containerd runtime nvidia"] = "configured" if done else "not configured"
            desired["containerd runtime nvidia"] = "configured"
        if p["cdi"]:
            state, loaded = smi_driver(ctx, smi)
            if state != "ok" or not loaded:
                return Probe(failure=f"the driver is not loaded ({state}): no CDI spec can be generated")
            key = f"CDI spec {p['cdi_path']}"
            if not spec.ok:
                current[key] = "absent"
            else:
                current[key] = f"driver {loaded}" if f".so.{loaded}" in spec.text else "of another driver"
            desired[key] = literal(f"driver {loaded}")
        if not desired:
            return Probe(skip="no container runtime runs and CDI is off: nothing to configure")
        return Probe(current=current, desired=desired, facts={"runtime": runtime})

    def plan(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> list[Cmd]:
        runtime = probe.facts["runtime"]
        cmds = []
        if f"{runtime} runtime nvidia" in probe.differing():
            cmds += [Cmd("configure", ("nvidia-ctk", "runtime", "configure", f"--runtime={runtime}"), timeout_s=120),
                     Cmd("restart", ("systemctl", "restart", runtime), timeout_s=300)]
        if f"CDI spec {p['cdi_path']}" in probe.differing():
            cmds.append(Cmd("cdi", ("nvidia-ctk", "cdi", "generate", f"--output={p['cdi_path']}"), timeout_s=300))
        return cmds


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
