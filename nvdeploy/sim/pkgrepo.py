"""The simulated package universe of stateful nodes: what NVIDIA's repository and the distribution offer (versions per
branch, module streams, newer point releases), apt pins and dnf version locks, what installing or removing a package
changes in the node's state (state.py), and the shared option parsing and dpkg-lock rule of the package tools.

The tools that read it are apt_tools.py (apt-get, dpkg-query, dpkg) and dnf_tools.py (dnf, rpm); pkgtools.py holds
curl, the container toolkit's CLI, the initramfs tools and the simulated faults' baseline hooks.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from typing import Optional

from nvdeploy.actions.imex import SINGLE_PACKAGE_FROM as IMEX_SINGLE_FROM
from nvdeploy.sim import state as st
from nvdeploy.sim.scenario import NodeScenario, register_fault

_DISTRO_PACKAGES = ("curl", "build-essential", "dkms", "pciutils", "kernel-tools", "linux-tools-common", "tar", "gcc",
                    "make", "python3-dnf-plugin-versionlock", "dnf-plugins-core")
DCGM4 = "1:4.4.1-1"
DCGM_VERSIONS = {"datacenter-gpu-manager": "1:3.3.9", "datacenter-gpu-manager-4-core": DCGM4,
                 "datacenter-gpu-manager-4-cuda11": DCGM4, "datacenter-gpu-manager-4-cuda12": DCGM4,
                 "datacenter-gpu-manager-4-cuda13": DCGM4}
# The other packages of the simulated NVIDIA repository, oldest first (nvlsm: its own version scheme, not the
# driver's; the versions here are the simulator's).
_REPO_OTHERS = {"nvidia-container-toolkit": ("1.17.4-1", "1.18.1-1"), "cuda-keyring": ("1.1-1",),
                "nvlsm": ("2025.06.4-1",)}
# repo_ahead: the newer point release of each branch the repository also offers (released after the baseline's).
AHEAD = {"535": "535.247.01", "550": "550.163.01", "560": "560.35.05", "565": "565.57.02", "570": "570.172.08",
         "575": "575.64.05", "580": "580.95.05"}
KEYRING = "/usr/share/keyrings/cuda-archive-keyring.gpg"
KEYRING_DEB = re.compile(r"cuda-keyring_[\d.]+-\d+_all\.deb$")
VERSIONLOCK = "/etc/dnf/plugins/versionlock.list"
LOCK_HOLD_S = 60  # dpkg_locked: how long unattended-upgr holds the dpkg lock after boot
LOCK_RELEASED = "sim:dpkg-lock-released"
INITRAMFS = "sim:initramfs"
LOCK_TEXT = "Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 1234 (unattended-upgr)"

_HOOK_FAULTS = {
    "cuda_keyring": "apt: NVIDIA's cuda-keyring package already installed (its list file and keyring)",
    "dpkg_locked": f"unattended-upgr holds the dpkg lock for {LOCK_HOLD_S} s after boot",
    "repo_ahead": "NVIDIA's repository also offers a newer point release of every driver branch (e.g. 550.163.01)",
    "no_fabricmanager": "the driver is installed and loaded but the fabric manager package is missing",
    "arm64": "an aarch64 (Grace) node: uname -m says aarch64, NVIDIA's repository folder is sbsa",
    "nouveau": "nouveau is bound to the GPUs (until blacklisted in the initramfs and rebooted)",
    "docker": "docker (with containerd) installed and running",
    "containerd": "containerd installed and running (no docker)",
}
for _name, _doc in _HOOK_FAULTS.items():
    register_fault(_name, _doc)
st.HOOK_FAULTS.update(_HOOK_FAULTS)


def arch_folder(scenario: NodeScenario) -> str:
    return "sbsa" if scenario.has("arm64") else "x86_64"


def _shape_baseline(scenario: NodeScenario, state: st.NodeState) -> None:
    """The baseline faults of this module (see _HOOK_FAULTS)."""
    if scenario.has("arm64"):
        for path, text in list(state.files.items()):
            state.files[path] = text.replace("/x86_64/", "/sbsa/")
    if scenario.has("cuda_keyring") and state.family == "apt":
        install_package(scenario, state, "cuda-keyring", "1.1-1")
        state.apt_updated = True
    if (state.family == "dnf" and state.installed_driver and "dnf-module:nvidia-driver" not in state.files
            and has_modules(state)):
        flavour = "open" if state.installed_open else "dkms"
        state.files["dnf-module:nvidia-driver"] = state.installed_driver.split(".")[0] + "-" + flavour
    if scenario.has("no_fabricmanager"):
        for name in [p for p in state.packages if re.fullmatch(r"nvidia-fabric-?manager(-\d+)?", p)]:
            del state.packages[name]
        state.services.pop("nvidia-fabricmanager", None)
    if scenario.has("nouveau"):
        state.modules = ["nouveau"] + [m for m in state.modules if not m.startswith("nvidia")]
        state.loaded_driver = None
    for runtime in ("docker", "containerd"):
        if scenario.has(runtime):
            state.packages.update({"containerd.io": "1.7.27-1"} if runtime == "docker" else {"containerd": "1.7.24-0"})
            state.services["containerd"] = [True, True]
            if runtime == "docker":
                state.packages["docker-ce"] = "5:28.1.1-1"
                state.services["docker"] = [True, True]


st.BASELINE_HOOKS.append(_shape_baseline)


def is_driver(name: str) -> bool:
    return bool(re.fullmatch(r"nvidia-driver(-\d+(-open)?)?", name))


# ---------------------------------------------------------------------------------------------------------------
# Repositories


def _repo_dir(state: st.NodeState) -> str:
    return "/etc/apt/sources.list.d/" if state.family == "apt" else "/etc/yum.repos.d/"


def repo_urls(state: st.NodeState) -> list[str]:
    urls = []
    for path, text in state.files.items():
        if path.startswith(_repo_dir(state)) or path == "/etc/apt/sources.list":
            urls += re.findall(r"(?:https?|file)://[^\s\]]+", text)
    return urls


def apt_sources(state: st.NodeState) -> list[tuple[str, str, str, str]]:
    """(file, URL, suite, Signed-By or '') of every apt source, in the order apt reads them (.list and deb822
    .sources)."""
    paths = (["/etc/apt/sources.list"] if "/etc/apt/sources.list" in state.files else []) + sorted(
        p for p in state.files if p.startswith("/etc/apt/sources.list.d/") and p.endswith((".list", ".sources")))
    out = []
    for path in paths:
        text = state.files[path]
        if path.endswith(".sources"):
            for stanza in re.split(r"\n\s*\n", text):
                fields = {k.strip().lower(): v.strip() for k, _, v in
                          (line.partition(":") for line in stanza.splitlines() if ":" in line and
                           not line.startswith("#"))}
                for url in fields.get("uris", "").split():
                    for suite in fields.get("suites", "").split() or [""]:
                        out.append((path, url, suite, fields.get("signed-by", "")))
            continue
        for line in text.splitlines():
            match = re.match(r"\s*deb\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)", line)
            if match:
                signed = re.search(r"signed-by=(\S+)", match.group(1) or "")
                out.append((path, match.group(2), match.group(3), signed.group(1) if signed else ""))
    return out


def sources_error(state: st.NodeState) -> Optional[str]:
    """apt's refusal to read its sources: one URL+suite with two different Signed-By values."""
    seen: dict[tuple[str, str], str] = {}
    for _, url, suite, signed in apt_sources(state):
        key = (url.rstrip("/") + "/", suite)
        if key in seen and seen[key] != signed:
            return (f"E: Conflicting values set for option Signed-By regarding source {url} {suite}: {seen[key]} != "
                    f"{signed}\nE: The list of sources could not be read.\n")
        seen.setdefault(key, signed)
    return None


def unreachable_host(scenario: NodeScenario, url: str) -> Optional[str]:
    host = re.sub(r"^[a-z]+://", "", url).split("/", 1)[0]
    if scenario.has("offline") and host in (st.NVIDIA_HOST, "github.com"):
        return host
    return None


def module_stream(state: st.NodeState) -> Optional[str]:
    return state.files.get("dnf-module:nvidia-driver")


def nvidia_repo(scenario: NodeScenario, state: st.NodeState) -> bool:
    """A configured repository of this node's architecture (an x86_64 folder offers nothing to an arm64 node)."""
    folder = f"/{arch_folder(scenario)}"
    return any(folder in url for url in repo_urls(state))


def has_modules(state: st.NodeState) -> bool:
    """RHEL 8/9 have dnf module streams; RHEL 10 dropped modularity (every branch is in the one repository)."""
    major = state.os_version.split(".")[0]
    return not (major.isdigit() and int(major) >= 10)


def _dnf_branches(scenario: NodeScenario, state: st.NodeState, name: str) -> list[str]:
    """The driver branches whose packages dnf can see: the enabled module stream's (a ``-open`` stream offers
    kmod-nvidia-open-dkms, a ``-dkms`` one kmod-nvidia-latest-dkms), or every branch where there are no modules."""
    if not has_modules(state):
        return sorted(st.DRIVERS)
    stream = module_stream(state)
    if not stream:
        return []
    branch, _, flavour = stream.partition("-")
    if name == "kmod-nvidia-open-dkms" and flavour != "open" or name == "kmod-nvidia-latest-dkms" and flavour == "open":
        return []
    return [branch]


def driver_versions(scenario: NodeScenario, branch: str) -> list[str]:
    """Upstream versions of a branch the repository offers, oldest first."""
    if branch not in st.DRIVERS:
        return []
    return [st.DRIVERS[branch]] + ([AHEAD[branch]] if scenario.has("repo_ahead") and branch in AHEAD else [])


def versions(scenario: NodeScenario, state: st.NodeState, name: str) -> list[str]:
    """Every version of ``name`` the node's package manager can see, oldest first."""
    if name == st.headers_package(state):
        return [state.kernel.split("-")[0] + "-1"]
    if name in _DISTRO_PACKAGES or name.startswith("linux-tools-"):
        return ["1.0-1"]
    if not nvidia_repo(scenario, state) or (state.family == "apt" and not state.apt_updated):
        return []
    if state.family == "apt":
        match = re.fullmatch(r"nvidia-driver-(\d+)(-open)?", name)
        if match:
            return [v + "-0ubuntu1" for v in driver_versions(scenario, match.group(1))]
        match = re.fullmatch(r"nvidia-fabricmanager-(\d+)", name)
        if match:
            return [v + "-1" for v in driver_versions(scenario, match.group(1))]
    else:
        branches = _dnf_branches(scenario, state, name)
        if name in ("nvidia-driver", "nvidia-driver-cuda", "kmod-nvidia-latest-dkms", "kmod-nvidia-open-dkms"):
            return [v + "-1.el9" for b in branches for v in driver_versions(scenario, b)]
        if name == "nvidia-fabric-manager":
            return [v + "-1" for b in branches for v in driver_versions(scenario, b)]
    match = re.fullmatch(r"nvidia-imex-(\d+)", name)
    if match:  # IMEX ships with the driver: before R580 one package per branch at the driver's versions
        # From R580 the branch name is only a name nvidia-imex provides: nothing to install at a version.
        branch = match.group(1)
        return [] if int(branch) >= IMEX_SINGLE_FROM else [v + "-1" for v in driver_versions(scenario, branch)]
    if name == "nvidia-imex":  # ... and from R580 one package, nvidia-imex, at every R580+ driver version
        return [v + "-1" for b in sorted(st.DRIVERS) if int(b) >= IMEX_SINGLE_FROM
                for v in driver_versions(scenario, b)]
    match = re.fullmatch(r"cuda-toolkit-(\d+)-(\d+)", name)
    if match:
        return [f"{match.group(1)}.{match.group(2)}.1-1"]
    if name in DCGM_VERSIONS:
        return [DCGM_VERSIONS[name]]
    return list(_REPO_OTHERS.get(name, ()))


def _apt_pin(state: st.NodeState, name: str) -> Optional[str]:
    """The version glob an /etc/apt/preferences.d pin (priority >= 1000) holds ``name`` at, if any."""
    for path, text in sorted(state.files.items()):
        if not path.startswith("/etc/apt/preferences.d/"):
            continue
        for stanza in re.split(r"\n\s*\n", text):
            fields = {k.strip().lower(): v.strip() for k, _, v in
                      (line.partition(":") for line in stanza.splitlines() if ":" in line and not line.startswith("#"))}
            pin, priority = fields.get("pin", ""), fields.get("pin-priority", "0")
            if (pin.startswith("version ") and priority.lstrip("-").isdigit() and int(priority) >= 1000
                    and any(fnmatch.fnmatchcase(name, pattern) for pattern in fields.get("package", "").split())):
                return pin.split(None, 1)[1]
    return None


def version_locked(state: st.NodeState, name: str) -> Optional[str]:
    """dnf versionlock: the version ``name`` is locked at, if any."""
    for line in state.files.get(VERSIONLOCK, "").splitlines():
        match = re.fullmatch(r"(.+)-(?:\d+:)?(\d[^-]*-[^-]+?)\.\*", line.strip())
        if match and match.group(1) == name:
            return match.group(2)
    return None


def available(scenario: NodeScenario, state: st.NodeState, name: str) -> Optional[str]:
    """The version the node's package manager would install for ``name`` (newest, or what a pin holds), or None."""
    found = versions(scenario, state, name)
    if not found:
        return None
    if state.family == "apt":
        pin = _apt_pin(state, name)
        held = [v for v in found if pin and fnmatch.fnmatchcase(v, pin)]
        if held:
            return held[-1]
    else:
        lock = version_locked(state, name)
        if lock is not None:
            return lock if lock in found else None
    return found[-1]


def install_package(scenario: NodeScenario, state: st.NodeState, name: str, version: str) -> None:
    """Install one package and what it brings (services; a driver replaces any other driver branch)."""
    if re.fullmatch(r"nvidia-driver(-\d+(-open)?)?", name):
        for other in [p for p in state.packages if re.fullmatch(r"nvidia-driver(-\d+(-open)?)?", p)]:
            del state.packages[other]
        state.services.setdefault("nvidia-persistenced", [False, False])
    if re.fullmatch(r"kmod-nvidia-(open|latest)-dkms", name):
        for other in [p for p in state.packages if re.fullmatch(r"kmod-nvidia-(open|latest)-dkms", p)]:
            del state.packages[other]
    if re.fullmatch(r"nvidia-fabric-?manager(-\d+)?", name):
        for other in [p for p in state.packages if re.fullmatch(r"nvidia-fabric-?manager(-\d+)?", p)]:
            del state.packages[other]
        state.services.setdefault("nvidia-fabricmanager", [False, False])
    if name.startswith("datacenter-gpu-manager"):
        state.services.setdefault("nvidia-dcgm", [False, False])
    if re.fullmatch(r"nvidia-imex(-\d+)?", name):
        state.services.setdefault("nvidia-imex", [False, False])
    if name == "cuda-keyring":
        # What NVIDIA's cuda-keyring package ships: the key and a list file that uses it.
        tag = st.distro_tag(state.os_id, state.os_version)
        folder = arch_folder(scenario)
        url = f"https://{st.NVIDIA_HOST}/compute/cuda/repos/{tag}/{folder}/"
        state.files[KEYRING] = "<key>\n"
        state.files[f"/etc/apt/sources.list.d/cuda-{tag}-{folder}.list"] = f"deb [signed-by={KEYRING}] {url} /\n"
        state.apt_updated = False
    state.packages[name] = version


def remove_package(state: st.NodeState, name: str) -> None:
    state.packages.pop(name, None)
    if name.startswith("datacenter-gpu-manager") and not any(p.startswith("datacenter-gpu-manager")
                                                                for p in state.packages):
        state.services.pop("nvidia-dcgm", None)


APT_OPTIONS_WITH_VALUE = ("-o", "-t", "--option", "--target-release")


def split_options(args: list[str], with_value: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """(options, positional words)."""
    options, words = [], []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in with_value and i + 1 < len(args):
            options += [arg, args[i + 1]]
            i += 2
            continue
        (options if arg.startswith("-") else words).append(arg)
        i += 1
    return options, words


def lock_wait(options: list[str]) -> float:
    """``-o DPkg::Lock::Timeout=N``: how long apt waits for the dpkg lock (0: not at all)."""
    for option in options:
        key, _, value = option.partition("=")
        if key.lower() == "dpkg::lock::timeout":
            try:
                return float(value)
            except ValueError:
                return 0.0
    return 0.0


def lock_held(scenario: NodeScenario, state: st.NodeState) -> bool:
    return scenario.has("dpkg_locked") and LOCK_RELEASED not in state.files

