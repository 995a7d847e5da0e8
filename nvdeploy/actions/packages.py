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
from typing import Any, Mapping, Optional

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
    driver_packages,
    installed_versions,
    package_query,
    parse_packages,
    preflight_problems,
    smi_driver,
    write_file_cmd,
)
from nvdeploy.parsers.container import containerd_setup, docker_nvidia

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


def install_cmd(ctx: ActionContext, packages: list[str], timeout_s: float, recommends: bool = False,
                downgrade: bool = False) -> Cmd:
    """An install; ``recommends``: with the recommended / weak dependencies (as NVIDIA's DCGM 4 steps say);
    ``downgrade``: an exact version may be older than the one installed (apt refuses that under -y without
    ``--allow-downgrades``; dnf installs the version named)."""
    if ctx.os_family() == "apt":
        argv = (*APT_INSTALL[:-1], "--install-recommends") if recommends else APT_INSTALL
        if downgrade:
            argv = (*argv[:-1], "--allow-downgrades", argv[-1])
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


def package_names(names: dict[str, str]) -> list[str]:
    """The package names of a driver_packages() answer (the module stream is not a package)."""
    return [n for k, n in names.items() if k != "stream"]


def _upstream(version: str) -> str:
    return version.split(":", 1)[-1].split("-", 1)[0]


def versioned(family: str, name: str, version: str) -> str:
    """``name`` at exactly the upstream ``version``, in the package manager's own spelling: apt ``name=550.90.07-*``
    (apt matches a version ending in ``*`` as a prefix: any Debian revision of that release), dnf ``name-550.90.07``
    (name-version, the release the repository has). A version with a ``*`` (dnf: ``550.*``) stays a glob."""
    return f"{name}={version}-*" if family == "apt" else f"{name}-{version}"


NOUVEAU_CONF = "/etc/modprobe.d/blacklist-nouveau.conf"
NOUVEAU_TEXT = "blacklist nouveau\noptions nouveau modeset=0"
MODULE_LIST = ("module_list", ("dnf", "module", "list", "--enabled", "nvidia-driver"))
VERSIONLOCK_LIST = ("versionlock_list", ("dnf", "versionlock", "list"))


def fabricmanager_spec(family: str, name: str, driver_version: str) -> str:
    """The fabric manager pinned to exactly the installed driver's version: a newer one refuses to start."""
    return versioned(family, name, _upstream(driver_version))


VERSION = r"|\d{3}\.\d+(\.\d+)?"


def version_problem(branch: str, version: str) -> str:
    """Why an exact ``version`` cannot be installed as branch ``branch`` ('' when it can)."""
    if version and not version.startswith(branch + "."):
        return f"driver version {version} is not of branch {branch} (driver_branch and driver_version disagree)"
    return ""


@register
class DriverInstall(Action):
    """The driver (and, on NVSwitch SKUs, the fabric manager of exactly the same version), in the profile's kernel
    module flavour, then the module loaded. ``version`` (the inventory's ``driver_version``, else the profile's
    ``driver.version``): exactly that point release, with the fabric manager in the same transaction:
    apt ``nvidia-driver-550=550.90.07-* nvidia-fabricmanager-550=550.90.07-*`` (``--allow-downgrades``: a newer
    point release already installed is replaced), dnf ``nvidia-driver-550.90.07 kmod-nvidia-latest-dkms-550.90.07
    nvidia-fabric-manager-550.90.07`` after ``dnf module enable nvidia-driver:550-dkms`` (``-open``; RHEL 10 has no
    module streams: no ``dnf module`` there). Without it: the newest point release of the branch, and the fabric
    manager pinned to what was installed. Refuses like driver.preflight before changing anything. dnf: another
    branch's module stream is reset first (dnf refuses to switch enabled streams) and the old versionlock removed.
    When ``modprobe nvidia`` fails because nouveau holds the GPUs, nouveau is blacklisted
    (/etc/modprobe.d/blacklist-nouveau.conf) and the initramfs rebuilt (update-initramfs -u / dracut -f). Either
    that or an older driver's module still loaded needs a reboot: the node.reboot step does it with
    --allow-reboot, and without it ends ERROR reboot_required."""

    name = "driver.install"
    params = (Param("branch", required=True, pattern=BRANCH, doc="driver branch, e.g. 550"),
              Param("version", default="", pattern=VERSION,
                    doc="exact driver version, e.g. 550.90.07; empty: the newest of the branch"),
              Param("fabricmanager", "choice", default="auto", choices=("auto", "true", "false"),
                    doc="auto: when the profile's GPUs use NVSwitch"),
              Param("open", "bool", default=False, doc="the open kernel modules flavour"),
              Param("timeout_s", "number", default=1800.0, doc="limit of the package installation"))

    def _names(self, ctx: ActionContext, p: Mapping[str, Any]) -> dict[str, str]:
        wanted = p["fabricmanager"]
        fm = ctx.profile.gpu.nvswitch if wanted == "auto" else wanted == "true"
        return driver_packages(ctx, p["branch"], p["open"], fm)

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        branch, exact = p["branch"], p["version"]
        problem = version_problem(branch, exact)
        if problem:
            return Probe(failure=problem)
        names = self._names(ctx, p)
        packages = package_names(names)
        family = ctx.os_family()
        query, smi = ctx.read_many([package_query(family, packages), SMI_DRIVER])
        versions = {n: (v.split(":", 1)[-1] if v else v) for n, v in parse_packages(family, packages, query).items()}
        driver = versions[names["driver"]]
        current = {f"package {n}": versions[n] or "absent" for n in packages}
        release = f"{literal(exact)}-*" if exact else f"{branch}.*"
        desired = {f"package {names['driver']}": release}
        if "kmod" in names:
            desired[f"package {names['kmod']}"] = release
        if "fabricmanager" in names:
            if exact:
                same = exact
            else:
                same = _upstream(driver) if driver and driver.startswith(branch + ".") else ""
            desired[f"package {names['fabricmanager']}"] = f"{literal(same)}-*" if same else f"{branch}.*"
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
        pending = f"{exact} (pending reboot)"  # the version wanted is installed: the reboot step loads it
        desired["loaded driver"] = (literal(pending) if current["loaded driver"] == pending else literal(exact)) \
            if exact else f"{branch}.*"
        probe = Probe(current=current, desired=desired, facts={"names": names, "driver": driver})
        if any(k.startswith("package ") for k in probe.differing()):
            problems = preflight_problems(ctx)
            if problems:
                probe.failure = "preflight refused the driver install: " + "; ".join(problems)
        return probe

    def _dnf_switch(self, ctx: ActionContext, names: dict[str, str]) -> list[Cmd]:
        """dnf refuses to switch an enabled module stream: reset it, enable the wanted one; and drop the old
        versionlock (it would hide the version wanted)."""
        cmds = []
        if "stream" in names:
            listed = ctx.read(*MODULE_LIST)
            stream = names["stream"].split(":", 1)[1]
            enabled = re.search(r"^nvidia-driver\s+(\S+)", listed.text, re.M) if listed.rc == 0 else None
            if enabled and enabled.group(1) != stream:
                cmds.append(Cmd("module_reset", ("dnf", "-y", "module", "reset", "nvidia-driver"), timeout_s=600))
            if not enabled or enabled.group(1) != stream:
                cmds.append(Cmd("module_enable", ("dnf", "-y", "module", "enable", names["stream"]), timeout_s=600))
        locks = ctx.read(*VERSIONLOCK_LIST)
        locked = sorted({m.group(1) for m in re.finditer(r"^(\S*nvidia\S*?)-(?:\d+:)?\d\S*$", locks.text, re.M)}
                        ) if locks.rc == 0 else []
        if locked:
            cmds.append(Cmd("unlock", ("dnf", "-y", "versionlock", "delete", *locked), timeout_s=300))
        return cmds

    def plan(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> list[Cmd]:
        names = probe.facts["names"]
        differing = probe.differing()
        family = ctx.os_family()
        exact, branch = p["version"], p["branch"]
        cmds = []
        timeout = float(p["timeout_s"])
        specs = []
        driver_keys = [k for k in ("driver", "kmod") if k in names]
        if any(f"package {names[k]}" in differing for k in driver_keys):
            if family == "dnf":
                cmds += self._dnf_switch(ctx, names)
            for key in driver_keys:
                if exact:
                    specs.append(versioned(family, names[key], exact))
                elif family == "dnf" and "stream" not in names:
                    specs.append(versioned(family, names[key], f"{branch}.*"))  # no stream to hold the branch
                else:
                    specs.append(names[key])
        pinned_later: Optional[Cmd] = None
        if "fabricmanager" in names and f"package {names['fabricmanager']}" in differing:
            if exact:
                specs.append(versioned(family, names["fabricmanager"], exact))
            else:
                # The newest point release is known once it is installed: apply pins the fabric manager to it.
                version = probe.facts["driver"] or f"<version of {names['driver']} once installed>"
                pinned_later = install_cmd(ctx, [fabricmanager_spec(family, names["fabricmanager"], version)],
                                           timeout)
        if specs:
            cmds.append(install_cmd(ctx, specs, timeout, downgrade=bool(exact)))
        if pinned_later is not None:
            cmds.append(pinned_later)
        if "loaded driver" in differing and not ctx.facts.get("reboot_required"):
            cmds.append(Cmd("load_module", ("modprobe", "nvidia"), allow_fail=True, timeout_s=120))
        return cmds

    def planned(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> None:
        names = probe.facts["names"]
        if not any(k == f"package {names[n]}" for k in probe.differing() for n in ("driver", "kmod") if n in names):
            return
        target = p["version"] or f"{p['branch']}.x (the newest of the branch)"
        ctx.facts["planned_driver"] = {"branch": p["branch"], "version": p["version"], "text": target}
        loaded = probe.current.get("loaded driver", "")
        if loaded and loaded[0].isdigit() and "pending" not in loaded:
            # A module of another driver is loaded: the install leaves the new one for the next boot (the real run
            # sees nvidia-smi's driver/library mismatch after it, and the node.reboot step does the rest).
            ctx.facts.setdefault("reboot_required", f"driver {target} would be installed while {loaded} is loaded")
        else:
            ctx.facts["planned_loaded"] = target  # modprobe loads it: nothing else holds the GPUs

    def apply(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> None:
        names = probe.facts["names"]
        for cmd in self.plan(ctx, p, probe):
            if cmd.name == "install" and "fabricmanager" in names and not p["version"] and any(
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


RPM_ALL = ("rpm_all", ("rpm", "-qa", "--qf", "%{NAME}\\t%{VERSION}-%{RELEASE}\\n"))


@register
class DriverHold(Action):
    """Holds the driver (and fabric manager) at its version, so that an unattended upgrade cannot move it under a
    loaded module: apt, a pin in /etc/apt/preferences.d/nvdeploy-nvidia-driver (priority 1001 on ``<version>-*``
    for the branch's packages); dnf, ``dnf versionlock`` (python3-dnf-plugin-versionlock) on every installed
    package of the branch, as NVIDIA's ``dnf versionlock '*nvidia*<branch>*'`` does: each package with ``nvidia``
    in its name at the driver's version (driver, kernel module, libraries, fabric manager). The version held is
    ``version`` when given (the exact one driver.install installed), else the installed driver's. A branch change
    rewrites the pin / is unlocked by driver.install."""

    name = "driver.hold"
    params = (Param("branch", required=True, pattern=BRANCH, doc="driver branch, e.g. 550"),
              Param("version", default="", pattern=VERSION, doc="exact driver version to hold; empty: installed"),
              Param("fabricmanager", "choice", default="auto", choices=("auto", "true", "false")),
              Param("open", "bool", default=False))

    def _names(self, ctx: ActionContext, p: Mapping[str, Any]) -> dict[str, str]:
        fm = ctx.profile.gpu.nvswitch if p["fabricmanager"] == "auto" else p["fabricmanager"] == "true"
        return driver_packages(ctx, p["branch"], p["open"], fm)

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        names = self._names(ctx, p)
        packages = package_names(names)
        versions = installed_versions(ctx, packages)
        driver = versions[names["driver"]]
        planned = ctx.facts.get("planned_driver") if ctx.dry_run else None
        if not driver and planned and planned["branch"] == p["branch"]:
            # A dry-run whose driver.install step would install it: the hold it would then write.
            driver = f"{planned['version'] or planned['text']}-1"
        if not driver:
            return Probe(skip=f"{names['driver']} is not installed: nothing to hold")
        upstream = p["version"] or _upstream(driver)
        branch = p["branch"]
        if ctx.os_family() == "apt":
            text = "\n".join([f"# nvdeploy: hold the NVIDIA driver {branch} at {upstream} (no unattended upgrade)",
                              f"Package: {' '.join(packages)} libnvidia-*-{branch} nvidia-*-{branch} "
                              f"nvidia-*-{branch}-open",
                              f"Pin: version {upstream}-*", "Pin-Priority: 1001"])
            found = ctx.read("hold", ("cat", APT_HOLD))
            return Probe(current={APT_HOLD: found.text.strip() if found.ok else "absent"},
                         desired={APT_HOLD: literal(text)}, facts={"text": text})
        locks, every = ctx.read_many([VERSIONLOCK_LIST, RPM_ALL])
        branch_packages: dict[str, str] = {}
        for line in every.text.splitlines() if every.rc == 0 else []:
            parts = line.split("\t")
            if len(parts) == 2 and "nvidia" in parts[0] and _upstream(parts[1]) == upstream:
                branch_packages[parts[0]] = parts[1]
        for name in packages:  # rpm -qa unreadable: still the packages nvdeploy installed
            if versions[name] and _upstream(versions[name] or "") == upstream:
                branch_packages.setdefault(name, versions[name] or "")
        current, desired = {}, {}
        for name in sorted(branch_packages):
            pattern = rf"^{re.escape(name)}-(?:\d+:)?(\d\S*?)\.\*$"
            match = re.search(pattern, locks.text, re.M) if locks.rc == 0 else None
            current[f"versionlock {name}"] = match.group(1) if match else "absent"
            desired[f"versionlock {name}"] = literal(branch_packages[name])
        if not desired:
            return Probe(skip=f"no package of driver {upstream} is installed: nothing to hold")
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
# DCGM 3's packages that NVIDIA's DCGM 4 steps purge first: the legacy package and its diag config package.
DCGM_LEGACY_PACKAGES = (DCGM_LEGACY, "datacenter-gpu-manager-config")


@register
class DcgmInstall(Action):
    """DCGM as the profile needs it, started and answering. ``major: 4`` (default): ``datacenter-gpu-manager-4-core``
    plus ``datacenter-gpu-manager-4-cuda<N>``, N the CUDA major of the loaded driver (``nvidia-smi -q -x``), with
    their recommended packages, the legacy 3.x ``datacenter-gpu-manager`` and ``datacenter-gpu-manager-config``
    removed first (NVIDIA's DCGM 4 steps purge both; the first one's files clash);
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
            names, legacy = [DCGM_LEGACY], []
        else:
            cuda = p["cuda_major"]
            if cuda == "auto":
                smi = ctx.read("smi_xml", ("nvidia-smi", "-q", "-x"))
                match = _CUDA_VERSION.search(smi.text) if smi.rc == 0 else None
                if not match:
                    return Probe(failure="cannot tell the driver's CUDA version (nvidia-smi -q -x: "
                                 f"{describe_failure(smi)}): DCGM 4 needs datacenter-gpu-manager-4-cuda<major>")
                cuda = match.group(1)
            names, legacy = ["datacenter-gpu-manager-4-core", f"datacenter-gpu-manager-4-cuda{cuda}"], \
                list(DCGM_LEGACY_PACKAGES)
        query, enabled, active, discovery = ctx.read_many([
            package_query(family, names + legacy),
            ("is_enabled", ("systemctl", "is-enabled", "nvidia-dcgm")),
            ("is_active", ("systemctl", "is-active", "nvidia-dcgm")),
            ("discovery", ("dcgmi", "discovery", "-l"))])
        versions = parse_packages(family, names + legacy, query)
        current = {f"package {n}": versions[n] or "absent" for n in names}
        desired = {f"package {n}": "[0-9]*" for n in names}
        for old in legacy:
            current[f"legacy {old} (DCGM 3)"] = versions[old] or "absent"
            desired[f"legacy {old} (DCGM 3)"] = "absent"
        current["nvidia-dcgm"] = f"{enabled.text.strip() or 'not installed'}, {active.text.strip() or 'unknown'}"
        desired["nvidia-dcgm"] = "enabled, active"
        found = re.search(r"^(\d+) GPUs? found", discovery.text, re.M) if discovery.rc == 0 else None
        current["dcgmi discovery -l"] = f"{found.group(1)} GPUs" if found else "no answer"
        desired["dcgmi discovery -l"] = f"{ctx.profile.gpu.count} GPUs"
        return Probe(current=current, desired=desired, facts={"names": names, "legacy": legacy},
                     checked=("dcgmi discovery -l",))

    def plan(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> list[Cmd]:
        differing = probe.differing()
        cmds = []
        stale = [old for old in probe.facts["legacy"] if f"legacy {old} (DCGM 3)" in differing]
        if stale:
            cmds.append(remove_cmd(ctx, stale))
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
# containerd's config.toml and the drop-ins it may import (toolkit 1.18+), every line with its file.
CONTAINERD_FILES = ("containerd_files", ("grep", "-rsH", "^", "/etc/containerd"))


@register
class ContainerToolkitConfigure(Action):
    """The NVIDIA container toolkit wired in, not just installed: ``nvidia-ctk runtime configure --runtime=R`` for
    the container runtime present (``auto``: docker when it runs, else containerd, else none), then R restarted;
    and a CDI spec of the loaded driver (``nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml``), regenerated
    when the driver changed. Each part is probed first: a configured node changes nothing. containerd counts as
    configured as containerd reads it: the nvidia runtime in ``/etc/containerd/config.toml`` or in a drop-in it
    imports (toolkit 1.18+ writes ``/etc/containerd/conf.d/99-nvidia.toml`` and an ``imports`` line); docker, the
    ``nvidia`` runtime (or ``features.cdi``) in ``/etc/docker/daemon.json``."""

    name = "container_toolkit.configure"
    params = (Param("runtime", "choice", default="auto", choices=("auto", "docker", "containerd", "none")),
              Param("cdi", "bool", default=True, doc="generate the CDI spec"),
              Param("cdi_path", default="/etc/cdi/nvidia.yaml", pattern=r"/[A-Za-z0-9._/-]+\.ya?ml"))

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        docker, containerd, daemon, toml, spec, smi = ctx.read_many([
            ("docker_active", ("systemctl", "is-active", "docker")),
            ("containerd_active", ("systemctl", "is-active", "containerd")),
            ("docker_config", ("cat", DOCKER_CONFIG)), CONTAINERD_FILES,
            ("cdi_spec", ("cat", p["cdi_path"])), SMI_DRIVER])
        runtime = p["runtime"]
        if runtime == "auto":
            runtime = ("docker" if docker.text.strip() == "active" else
                       "containerd" if containerd.text.strip() == "active" else "none")
        current, desired = {}, {}
        if runtime == "docker":
            done = daemon.ok and bool(docker_nvidia(daemon.text)[0])
            current["docker runtime nvidia"] = "configured" if done else "not configured"
            desired["docker runtime nvidia"] = "configured"
        elif runtime == "containerd":
            files = {path: "\n".join(lines) + "\n" for path, lines in split_files(toml.text).items()}
            done, how = containerd_setup(files)
            current["containerd runtime nvidia"] = "configured" if done else f"not configured ({how})"
            desired["containerd runtime nvidia"] = "configured"
        if p["cdi"]:
            state, loaded = smi_driver(ctx, smi)
            if ctx.dry_run and ctx.facts.get("planned_loaded"):
                state, loaded = "ok", ctx.facts["planned_loaded"]  # the driver the steps above would load
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
