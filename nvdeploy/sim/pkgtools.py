"""Fake package tools of stateful simulated nodes: ``apt-get`` (update, install), ``dpkg-query -W``, ``dpkg -i``,
``dnf`` (install, module install/enable, makecache), ``rpm -q`` and ``curl -o``, over the node's state (state.py).

The simulated NVIDIA repository offers, once configured (a list/repo file nvdeploy wrote) and, on apt, refreshed
(``apt-get update``): ``nvidia-driver-<branch>`` (``-open``) / dnf module ``nvidia-driver:<branch>-dkms``, the fabric
manager of the same version, ``cuda-toolkit-X-Y``, ``datacenter-gpu-manager`` (3 and 4), ``nvidia-container-toolkit``.
The distribution offers the running kernel's headers and common tools. A driver replaces any other branch; the fault
``install_fail`` makes the driver's install fail as a DKMS build error does; ``offline`` makes
developer.download.nvidia.com unreachable (a mirror still works). Root only, with the real tools' messages.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Sequence
from typing import Optional

from nvdeploy.sim import state as st
from nvdeploy.sim.dcgm_tool import HOSTENGINE_ERROR, HOSTENGINE_RC
from nvdeploy.sim.scenario import NodeScenario, node_facts, register_fault
from nvdeploy.sim.systools import _not_found, _record, _root, _text, _tool
from nvdeploy.sim.tools import TOOL_HOOKS, ToolOutput

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
        _install(scenario, state, "cuda-keyring", "1.1-1")
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


def _is_driver(name: str) -> bool:
    return bool(re.fullmatch(r"nvidia-driver(-\d+(-open)?)?", name))


# ---------------------------------------------------------------------------------------------------------------
# Repositories


def _repo_dir(state: st.NodeState) -> str:
    return "/etc/apt/sources.list.d/" if state.family == "apt" else "/etc/yum.repos.d/"


def _repo_urls(state: st.NodeState) -> list[str]:
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


def _sources_error(state: st.NodeState) -> Optional[str]:
    """apt's refusal to read its sources: one URL+suite with two different Signed-By values."""
    seen: dict[tuple[str, str], str] = {}
    for _, url, suite, signed in apt_sources(state):
        key = (url.rstrip("/") + "/", suite)
        if key in seen and seen[key] != signed:
            return (f"E: Conflicting values set for option Signed-By regarding source {url} {suite}: {seen[key]} != "
                    f"{signed}\nE: The list of sources could not be read.\n")
        seen.setdefault(key, signed)
    return None


def _unreachable(scenario: NodeScenario, url: str) -> Optional[str]:
    host = re.sub(r"^[a-z]+://", "", url).split("/", 1)[0]
    if scenario.has("offline") and host in (st.NVIDIA_HOST, "github.com"):
        return host
    return None


def _module_stream(state: st.NodeState) -> Optional[str]:
    return state.files.get("dnf-module:nvidia-driver")


def _nvidia_repo(scenario: NodeScenario, state: st.NodeState) -> bool:
    """A configured repository of this node's architecture (an x86_64 folder offers nothing to an arm64 node)."""
    folder = f"/{arch_folder(scenario)}"
    return any(folder in url for url in _repo_urls(state))


def has_modules(state: st.NodeState) -> bool:
    """RHEL 8/9 have dnf module streams; RHEL 10 dropped modularity (every branch is in the one repository)."""
    major = state.os_version.split(".")[0]
    return not (major.isdigit() and int(major) >= 10)


def _dnf_branches(scenario: NodeScenario, state: st.NodeState, name: str) -> list[str]:
    """The driver branches whose packages dnf can see: the enabled module stream's (a ``-open`` stream offers
    kmod-nvidia-open-dkms, a ``-dkms`` one kmod-nvidia-latest-dkms), or every branch where there are no modules."""
    if not has_modules(state):
        return sorted(st.DRIVERS)
    stream = _module_stream(state)
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
    if not _nvidia_repo(scenario, state) or (state.family == "apt" and not state.apt_updated):
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
    if match:  # IMEX ships with the driver, one package per branch at the driver's versions (both families)
        return [v + "-1" for v in driver_versions(scenario, match.group(1))]
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


def _locked(state: st.NodeState, name: str) -> Optional[str]:
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
        lock = _locked(state, name)
        if lock is not None:
            return lock if lock in found else None
    return found[-1]


def _install(scenario: NodeScenario, state: st.NodeState, name: str, version: str) -> None:
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
    if re.fullmatch(r"nvidia-imex-\d+", name):
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


def _remove(state: st.NodeState, name: str) -> None:
    state.packages.pop(name, None)
    if name.startswith("datacenter-gpu-manager") and not any(p.startswith("datacenter-gpu-manager")
                                                                for p in state.packages):
        state.services.pop("nvidia-dcgm", None)


_APT_OPTIONS_WITH_VALUE = ("-o", "-t", "--option", "--target-release")


def _options(args: list[str], with_value: Sequence[str] = ()) -> tuple[list[str], list[str]]:
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


def _lock_wait(options: list[str]) -> float:
    """``-o DPkg::Lock::Timeout=N``: how long apt waits for the dpkg lock (0: not at all)."""
    for option in options:
        key, _, value = option.partition("=")
        if key.lower() == "dpkg::lock::timeout":
            try:
                return float(value)
            except ValueError:
                return 0.0
    return 0.0


def _lock_held(scenario: NodeScenario, state: st.NodeState) -> bool:
    return scenario.has("dpkg_locked") and LOCK_RELEASED not in state.files


_APT_LOCK_ERROR = (f"E: {LOCK_TEXT}\nN: Be aware that removing the lock file is not a solution and may break your "
                   "system.\nE: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), is another "
                   "process using it?\n")


@_tool("apt-get")
def _apt_get(scenario: NodeScenario, args: list[str]) -> tuple[ToolOutput, bool]:
    state = st.current(scenario)
    if state.family != "apt":
        return _not_found("apt-get"), False
    options, words = _options(args, _APT_OPTIONS_WITH_VALUE)
    if not words:
        return _text(stderr="E: No command given\n", rc=100), False
    command, names = words[0], words[1:]
    if command not in ("update", "install", "upgrade", "purge", "remove"):
        return _text(stderr=f"E: Invalid operation {command} (not simulated)\n", rc=100), False
    broken = _sources_error(state)
    if broken:
        return _text(stderr=broken, rc=100), False
    if not _root():
        return _text(stderr="E: Could not open lock file /var/lib/dpkg/lock-frontend - open (13: Permission denied)\n"
                     "E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), are you root?\n",
                     rc=100), False
    if command == "update":
        lines, errors = [], []
        for n, url in enumerate(_repo_urls(state), 1):
            host = _unreachable(scenario, url)
            if host:
                lines.append(f"Ign:{n} {url}  InRelease")
                errors.append(f"W: Failed to fetch {url}InRelease  Temporary failure resolving '{host}'")
            else:
                lines.append(f"Get:{n} {url}  InRelease [1581 B]")
        if errors:
            return _text("\n".join(lines) + "\nReading package lists...\n", "\n".join(errors) + "\nE: Some index "
                         "files failed to download. They have been ignored, or old ones used instead.\n", 100), False
        with st.mutate(scenario) as changed:
            changed.apt_updated = True
        return _text("\n".join(lines) + "\nReading package lists...\n"), True
    waited = ""
    if _lock_held(scenario, state):
        if _lock_wait(options) < LOCK_HOLD_S:
            return _text(stderr=_APT_LOCK_ERROR, rc=100), False
        waited = f"Waiting for cache lock: {LOCK_TEXT}... {LOCK_HOLD_S}s\n"
    if command in ("purge", "remove"):
        gone = [n for n in names if n in state.packages]
        if gone or waited:
            with st.mutate(scenario) as changed:
                if waited:
                    changed.files[LOCK_RELEASED] = "1"
                for name in gone:
                    _remove(changed, name)
        lines = "".join(f"Removing {n} ...\n" for n in gone)
        return _text(waited + "Reading package lists...\n" + lines +
                     f"0 upgraded, 0 newly installed, {len(gone)} to remove and 0 not upgraded.\n"), bool(gone)
    wanted: list[tuple[str, str]] = []
    if command == "upgrade":
        # What an unattended upgrade does: every installed package to its candidate when that is newer.
        for name, have in sorted(state.packages.items()):
            found = versions(scenario, state, name)
            best = available(scenario, state, name)
            if best and best != have and found.index(best) > (found.index(have) if have in found else -1):
                wanted.append((name, best))
    for spec in names:
        if spec.startswith("/") and spec.endswith(".deb"):
            if not KEYRING_DEB.search(state.files.get(spec, "")):
                return _text(stderr=f"E: Unsupported file {spec} given on commandline\n", rc=100), False
            wanted.append(("cuda-keyring", "1.1-1"))
            continue
        name, _, pin = spec.partition("=")
        found = versions(scenario, state, name)
        version = pin if pin else available(scenario, state, name)
        if pin.endswith("*"):  # apt's own rule: a version ending in * matches as a prefix, the newest wins
            version = next((v for v in reversed(found) if v.startswith(pin[:-1])), pin)
        if not found or version not in found:
            return _text("Reading package lists...\nBuilding dependency tree...\n",
                         f"E: Unable to locate package {spec}\n" if not found
                         else f"E: Version '{pin}' for '{name}' was not found\n", 100), False
        wanted.append((name, version))
    todo = [(n, v) for n, v in wanted if state.packages.get(n) != v]
    older = next((n for n, v in todo if n in state.packages and state.packages[n] in versions(scenario, state, n)
                  and versions(scenario, state, n).index(v) < versions(scenario, state, n).index(state.packages[n])),
                 None)
    if older and "--allow-downgrades" not in options:
        return _text(f"The following packages will be DOWNGRADED:\n  {older}\n",
                     "E: Packages were downgraded and -y was used without --allow-downgrades.\n", 100), False
    clash = next((n for n, _ in todo if n.startswith("datacenter-gpu-manager-4") and "datacenter-gpu-manager"
                  in state.packages), None)
    if clash:
        return _text(f"Unpacking {clash} ...\n", f"dpkg: error processing archive {clash} (--unpack):\n trying to "
                     "overwrite '/usr/bin/dcgmi', which is also in package datacenter-gpu-manager 1:3.3.9\n"
                     "E: Sub-process /usr/bin/dpkg returned an error code (1)\n", 100), False
    if scenario.has("install_fail") and any(_is_driver(n) for n, _ in todo):
        driver = next(n for n, _ in todo if _is_driver(n))
        branch = driver.split("-")[2] if driver.count("-") >= 2 else "550"
        return _text(f"Setting up nvidia-dkms-{branch} ...\n",
                     f"dpkg: error processing package nvidia-dkms-{branch} (--configure):\n installed "
                     f"nvidia-dkms-{branch} package post-installation script subprocess returned error exit status 10\n"
                     f"E: Sub-process /usr/bin/dpkg returned an error code (1)\n", 100), False
    lines = [f"{n} is already the newest version ({v})." for n, v in wanted if (n, v) not in todo]
    if todo or waited:
        with st.mutate(scenario) as changed:
            if waited:
                changed.files[LOCK_RELEASED] = "1"
            for name, version in todo:
                _install(scenario, changed, name, version)
        lines += [f"Setting up {n} ({v}) ..." for n, v in todo]
    upgraded = f"0 upgraded, {len(todo)} newly installed, 0 to remove and 0 not upgraded."
    return _text(waited + "Reading package lists...\n" + "".join(line + "\n" for line in lines) + upgraded + "\n"), \
        bool(todo)


def _dpkg_format(fmt: str, name: str, version: str) -> str:
    fmt = fmt.replace("\\n", "\n").replace("\\t", "\t")
    return (fmt.replace("${binary:Package}", name).replace("${Package}", name).replace("${Version}", version)
            .replace("${Status}", "install ok installed").replace("${db:Status-Abbrev}", "ii "))


@_tool("dpkg-query")
def _dpkg_query(scenario: NodeScenario, args: list[str]) -> tuple[ToolOutput, bool]:
    state = st.current(scenario)
    if state.family != "apt":
        return _not_found("dpkg-query"), False
    fmt = "${binary:Package}\t${Version}\n"
    patterns: list[str] = []
    show = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-W", "--show"):
            show = True
        elif arg.startswith("-f=") or arg.startswith("--showformat="):
            fmt = arg.split("=", 1)[1]
        elif arg in ("-f", "--showformat") and i + 1 < len(args):
            i += 1
            fmt = args[i]
        elif not arg.startswith("-"):
            patterns.append(arg)
        i += 1
    if not show:
        return _text(stderr="dpkg-query: only -W is simulated\n", rc=2), False
    out, err = [], []
    for pattern in patterns or ["*"]:
        found = sorted(n for n in state.packages if fnmatch.fnmatchcase(n, pattern))
        if not found:
            err.append(f"dpkg-query: no packages found matching {pattern}")
        out += [_dpkg_format(fmt, n, state.packages[n]) for n in found]
    return _text("".join(out), "".join(e + "\n" for e in err), 1 if err else 0), False


@_tool("dpkg")
def _dpkg(scenario: NodeScenario, args: list[str]) -> tuple[ToolOutput, bool]:
    state = st.current(scenario)
    if state.family != "apt":
        return _not_found("dpkg"), False
    if len(args) != 2 or args[0] not in ("-i", "--install"):
        return _text(stderr="dpkg: only -i FILE is simulated\n", rc=2), False
    if not _root():
        return _text(stderr="dpkg: error: requested operation requires superuser privilege\n", rc=2), False
    if _lock_held(scenario, state):
        return _text(stderr="dpkg: error: dpkg frontend lock was locked by another process with pid 1234\nNote: "
                     "removing the lock file is always wrong, and can end up damaging the locked area\n and the "
                     "entire system. See <https://wiki.debian.org/Teams/Dpkg/FAQ#db-lock>.\n", rc=2), False
    source = state.files.get(args[1], "")
    if not re.search(r"cuda-keyring_[\d.]+-\d+_all\.deb$", source):
        return _text(stderr=f"dpkg: error: cannot access archive '{args[1]}': No such file or directory\n", rc=2), False
    with st.mutate(scenario) as changed:
        _install(scenario, changed, "cuda-keyring", "1.1-1")
    return _text("Selecting previously unselected package cuda-keyring.\nSetting up cuda-keyring (1.1-1) ...\n"), True


def _rpm_split(version: str) -> tuple[str, str]:
    version = version.split(":", 1)[-1]
    upstream, _, release = version.partition("-")
    return upstream, release or "1"


@_tool("rpm")
def _rpm(scenario: NodeScenario, args: list[str]) -> tuple[ToolOutput, bool]:
    state = st.current(scenario)
    if state.family != "dnf":
        return _not_found("rpm"), False
    fmt = "%{NAME}-%{VERSION}-%{RELEASE}.x86_64\n"
    names: list[str] = []
    query = every = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-q", "--query"):
            query = True
        elif arg in ("-qa", "-aq"):
            query = every = True
        elif arg in ("--qf", "--queryformat") and i + 1 < len(args):
            i += 1
            fmt = args[i]
        elif not arg.startswith("-"):
            names.append(arg)
        i += 1
    if not query:
        return _text(stderr="rpm: only -q is simulated\n", rc=1), False
    out, missing = [], 0
    for name in sorted(state.packages) if every else names:
        if name in state.packages:
            version, release = _rpm_split(state.packages[name])
            text = fmt.replace("\\n", "\n").replace("\\t", "\t")
            out.append(text.replace("%{NAME}", name).replace("%{VERSION}", version)
                       .replace("%{RELEASE}", release))
        else:
            out.append(f"package {name} is not installed\n")
            missing += 1
    return _text("".join(out), rc=min(missing, 255)), False


def _dnf_resolve(scenario: NodeScenario, state: st.NodeState, spec: str) -> Optional[tuple[str, str]]:
    """(name, version) for ``name``, ``name-VERSION`` (``nvidia-fabric-manager-550.90.07``: that version, any
    release) or ``name-GLOB`` (``nvidia-driver-550.*``: the newest match); a versionlock hides other versions."""
    version = available(scenario, state, spec)
    if version is not None:
        return spec, version
    match = re.fullmatch(r"(.+?)-(\d[\w.*]*(?:-[\w.*]+)?)", spec)
    if match:
        lock = _locked(state, match.group(1))
        want = match.group(2)
        for found in reversed(versions(scenario, state, match.group(1))):
            hit = fnmatch.fnmatchcase(found, want) if "*" in want else (found == want or found.startswith(want + "-"))
            if hit and lock in (None, found):
                return match.group(1), found
    return None


def official_dnf_repo(scenario: NodeScenario, state: st.NodeState) -> tuple[str, str]:
    """(path, text) of NVIDIA's cuda-<distro>.repo as ``dnf config-manager --add-repo`` writes it."""
    tag = st.distro_tag(state.os_id, state.os_version)
    folder = arch_folder(scenario)
    url = f"https://{st.NVIDIA_HOST}/compute/cuda/repos/{tag}/{folder}"
    return (f"/etc/yum.repos.d/cuda-{tag}.repo",
            f"[cuda-{tag}-{folder}]\nname=cuda-{tag}-{folder}\nbaseurl={url}\nenabled=1\ngpgcheck=1\n"
            f"gpgkey={url}/D42D0685.pub\n")


_STREAM_SWITCH = ("Error: It is not possible to switch enabled streams of a module unless explicitly enabled via "
                  "configuration option module_stream_switch.\nIt is recommended to rather remove all installed "
                  "content from the module, and reset the module using 'dnf module reset <module_name>' command. "
                  "After you reset the module, you can install the other stream.\n")


def _dnf_module(scenario: NodeScenario, state: st.NodeState, verb: str, names: list[str]
                ) -> tuple[ToolOutput, bool]:
    enabled = _module_stream(state)
    if verb == "list":
        if not enabled:
            return _text(stderr="Error: No matching Modules to list\n", rc=1), False
        return _text("Name           Stream         Profiles                  Summary\n"
                     f"nvidia-driver  {enabled} [e]  default [d], fm, ks, src  Nvidia driver for {enabled} branch\n\n"
                     "Hint: [d]efault, [e]nabled, [x]disabled, [i]nstalled\n"), False
    if verb == "reset":
        if names != ["nvidia-driver"]:
            return _text(stderr=f"Error: Problems in request:\nmissing groups or modules: {' '.join(names)}\n",
                         rc=1), False
        if not enabled:
            return _text("Dependencies resolved.\nNothing to do.\nComplete!\n"), False
        with st.mutate(scenario) as changed:
            changed.files.pop("dnf-module:nvidia-driver", None)
        return _text("Resetting modules:\n nvidia-driver\nComplete!\n"), True
    if verb not in ("install", "enable") or len(names) != 1:
        return _text(stderr=f"Error: 'module {verb}' is not simulated\n", rc=1), False
    match = re.fullmatch(r"nvidia-driver:(\d+)(-dkms|-open)?(/\w+)?", names[0])
    if not match or match.group(1) not in st.DRIVERS or not _nvidia_repo(scenario, state):
        return _text(stderr=f"Error: Problems in request:\nmissing groups or modules: {names[0]}\n", rc=1), False
    stream = match.group(1) + (match.group(2) or "")
    if enabled and enabled != stream:
        return _text(f"The operation would result in switching of module 'nvidia-driver' stream '{enabled}' to "
                     f"stream '{stream}'\n", _STREAM_SWITCH, 1), False
    if verb == "enable":
        if enabled == stream:
            return _text("Nothing to do.\n"), False
        with st.mutate(scenario) as changed:
            changed.files["dnf-module:nvidia-driver"] = stream
        return _text("Complete!\n"), True
    trial = st.NodeState.from_json(state.to_json())
    trial.files["dnf-module:nvidia-driver"] = stream
    version = available(scenario, trial, "nvidia-driver")
    if version is None:
        return _text(stderr="All matches were filtered out by exclude filtering for argument: nvidia-driver\n"
                     "Error: Unable to find a match: nvidia-driver\n", rc=1), False
    if enabled == stream and state.packages.get("nvidia-driver") == version:
        return _text("Nothing to do.\nComplete!\n"), False
    if scenario.has("install_fail"):
        return _text("Running scriptlet: kmod-nvidia-latest-dkms\n",
                     "Error! Bad return status for module build on kernel: " + state.kernel + " (x86_64)\n"
                     "error: %post(kmod-nvidia-latest-dkms) scriptlet failed, exit status 10\n"
                     "Error: Transaction failed\n", 1), False
    with st.mutate(scenario) as changed:
        changed.files["dnf-module:nvidia-driver"] = stream
        _install(scenario, changed, "nvidia-driver", version)
    return _text(f"Installing:\n nvidia-driver  {version}\nComplete!\n"), True


def _dnf_versionlock(scenario: NodeScenario, state: st.NodeState, names: list[str]) -> tuple[ToolOutput, bool]:
    if "python3-dnf-plugin-versionlock" not in state.packages:
        return _text(stderr="No such command: versionlock. Please use /usr/bin/dnf --help\nIt could be a DNF plugin "
                     "command, try: \"dnf install 'dnf-command(versionlock)'\"\n", rc=1), False
    verb, names = (names[0], names[1:]) if names else ("list", [])
    lines = [line for line in state.files.get(VERSIONLOCK, "").splitlines() if line.strip()]
    if verb == "list":
        return _text("".join(line + "\n" for line in lines)), False
    if verb not in ("add", "delete"):
        return _text(stderr=f"Error: versionlock {verb} is not simulated\n", rc=1), False
    keep = [line for line in lines if not any(re.fullmatch(re.escape(n) + r"-(?:\d+:)?\d.*", line) for n in names)]
    if verb == "delete":
        gone = [line for line in lines if line not in keep]
        if not gone:
            return _text(stderr=f"Error: No package found for: {' '.join(names)}\n", rc=1), False
        with st.mutate(scenario) as changed:
            changed.files[VERSIONLOCK] = "".join(line + "\n" for line in keep)
        return _text("".join(f"Deleting versionlock for: {line}\n" for line in gone)), True
    added = []
    for name in names:
        if name not in state.packages:
            return _text(stderr=f"Error: No package found for: {name}\n", rc=1), False
        upstream, release = _rpm_split(state.packages[name])
        added.append(f"{name}-0:{upstream}-{release}.*")
    if sorted(keep + added) == sorted(lines):
        return _text("".join(f"Package already locked in equivalent form: {a}\n" for a in added)), False
    with st.mutate(scenario) as changed:
        changed.files[VERSIONLOCK] = "".join(line + "\n" for line in keep + added)
    return _text("".join(f"Adding versionlock on: {a}\n" for a in added)), True


@_tool("dnf")
def _dnf(scenario: NodeScenario, args: list[str]) -> tuple[ToolOutput, bool]:
    state = st.current(scenario)
    if state.family != "dnf":
        return _not_found("dnf"), False
    options, words = _options(args, ("--setopt", "--repo", "--enablerepo", "--disablerepo", "--add-repo"))
    if not words:
        return _text(stderr="Error: no command given\n", rc=1), False
    command, names = words[0], words[1:]
    read_only = (command == "module" and names[:1] == ["list"]) or (command == "versionlock" and names[:1] in
                                                                   ([], ["list"]))
    if not _root() and not read_only:
        return _text(stderr="Error: This command has to be run with superuser privileges (under the root user on most "
                     "systems).\n", rc=1), False
    if command == "config-manager":
        url = next((options[i + 1] for i, o in enumerate(options) if o == "--add-repo"), None)
        if url is None:
            return _text(stderr="Error: config-manager: only --add-repo URL is simulated\n", rc=1), False
        host = _unreachable(scenario, url)
        if host:
            return _text(stderr=f"Curl error (6): Couldn't resolve host name for {url} [Could not resolve host: "
                         f"{host}]\nError: Configuration of repo failed\n", rc=1), False
        path, text = official_dnf_repo(scenario, state)
        if not url.endswith(path.rsplit("/", 1)[1]):
            return _text(stderr=f"Error: Configuration of repo failed: {url} is not a repo file\n", rc=1), False
        if state.files.get(path) == text:
            return _text(f"Adding repo from: {url}\n"), False
        with st.mutate(scenario) as changed:
            changed.files[path] = text
        return _text(f"Adding repo from: {url}\n"), True
    if command == "versionlock":
        return _dnf_versionlock(scenario, state, names)
    for url in _repo_urls(state):
        host = _unreachable(scenario, url)
        if host:
            return _text(stderr="Errors during downloading metadata for repository 'nvdeploy-nvidia':\n  - Curl error "
                         f"(6): Couldn't resolve host name for {url}repodata/repomd.xml [Could not resolve host: "
                         f"{host}]\nError: Failed to download metadata for repo 'nvdeploy-nvidia': Cannot download "
                         "repomd.xml\n", rc=1), False
    if command == "makecache":
        return _text("Metadata cache created.\n"), False
    if command == "module" and not has_modules(state):
        return _text(stderr="No such command: module. Please use /usr/bin/dnf --help\n", rc=1), False
    if command == "module" and names:
        return _dnf_module(scenario, state, names[0], names[1:])
    if command == "remove":
        gone = [n for n in names if n in state.packages]
        if not gone:
            return _text("No match for argument: " + " ".join(names) + "\nNo packages marked for removal.\n"
                         "Dependencies resolved.\nNothing to do.\nComplete!\n"), False
        with st.mutate(scenario) as changed:
            for name in gone:
                _remove(changed, name)
        return _text("Removing:\n" + "".join(f" {n}\n" for n in gone) + "Complete!\n"), True
    if command != "install":
        return _text(stderr=f"Error: '{command}' is not simulated\n", rc=1), False
    wanted = []
    for spec in names:
        resolved = _dnf_resolve(scenario, state, spec)
        if resolved is None:
            return _text(stderr=f"Error: Unable to find a match: {spec}\n", rc=1), False
        wanted.append(resolved)
    todo = [(n, v) for n, v in wanted if state.packages.get(n) != v]
    if any(n.startswith("datacenter-gpu-manager-4") for n, _ in todo) and "datacenter-gpu-manager" in state.packages:
        return _text(stderr="Error: Transaction test error:\n  file /usr/bin/dcgmi from install of "
                     f"{todo[0][0]} conflicts with file from package datacenter-gpu-manager-3.3.9-1.x86_64\n",
                     rc=1), False
    if not todo:
        return _text("Dependencies resolved.\nNothing to do.\nComplete!\n"), False
    if scenario.has("install_fail") and any(_is_driver(n) for n, _ in todo):
        return _text("Running scriptlet: kmod-nvidia-latest-dkms\n",
                     "Error! Bad return status for module build on kernel: " + state.kernel + " (x86_64)\n"
                     "error: %post(kmod-nvidia-latest-dkms) scriptlet failed, exit status 10\n"
                     "Error: Transaction failed\n", 1), False
    with st.mutate(scenario) as changed:
        for name, version in todo:
            _install(scenario, changed, name, version)
    return _text("Installing:\n" + "".join(f" {n}  {v}\n" for n, v in todo) + "Complete!\n"), True


@_tool("curl")
def _curl(scenario: NodeScenario, args: list[str]) -> tuple[ToolOutput, bool]:
    options, words = _options(args, ("-o", "--output", "--retry", "--connect-timeout", "--max-time", "-m"))
    output = next((options[i + 1] for i, o in enumerate(options) if o in ("-o", "--output")), None)
    if len(words) != 1:
        return _text(stderr="curl: exactly one URL is simulated\n", rc=2), False
    url = words[0]
    host = _unreachable(scenario, url)
    if host:
        return _text(stderr=f"curl: (6) Could not resolve host: {host}\n", rc=6), False
    if output is None:
        return _text(f"<content of {url}>\n"), False
    if not _root() and not output.startswith("/tmp/"):
        return _text(stderr=f"curl: (23) Failure writing output to destination, passed 1 returned 0 ({output})\n",
                     rc=23), False
    with st.mutate(scenario) as changed:
        changed.files[output] = url
    return _text(), True




# ---------------------------------------------------------------------------------------------------------------
# The container toolkit's CLI, the initramfs tools, a recursive grep of the package sources, nv-hostengine


DOCKER_CONFIG = "/etc/docker/daemon.json"
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
CONTAINERD_NVIDIA = ('\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n  privileged_without_host_'
                     'devices = false\n  runtime_engine = ""\n  runtime_root = ""\n  runtime_type = '
                     '"io.containerd.runc.v2"\n\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.'
                     'options]\n  BinaryName = "/usr/bin/nvidia-container-runtime"\n')
REMOVE_HELPER = "nvdeploy-remove"


def _value(args: list[str], option: str) -> Optional[str]:
    for i, arg in enumerate(args):
        if arg.startswith(option + "="):
            return arg.split("=", 1)[1]
        if arg == option and i + 1 < len(args):
            return args[i + 1]
    return None


def cdi_spec(scenario: NodeScenario, driver: str) -> str:
    """A CDI spec as ``nvidia-ctk cdi generate`` writes it (trimmed: devices, the driver's libcuda mount)."""
    lib = "/usr/lib/aarch64-linux-gnu" if scenario.has("arm64") else "/usr/lib/x86_64-linux-gnu"
    lines = ["---", "cdiVersion: 0.5.0", "containerEdits:", "  mounts:",
             f"  - containerPath: {lib}/libcuda.so.{driver}", f"    hostPath: {lib}/libcuda.so.{driver}",
             "    options: [ro, nosuid, nodev, bind]", "devices:"]
    for gpu in node_facts(scenario).gpus:
        for name in (str(gpu.index), gpu.uuid):
            lines += ["- containerEdits:", "    deviceNodes:", f"    - path: /dev/nvidia{gpu.index}",
                      f"  name: {json.dumps(name)}"]
    lines += ["- containerEdits:", "    deviceNodes:"]
    lines += [f"    - path: /dev/nvidia{gpu.index}" for gpu in node_facts(scenario).gpus]
    lines += ["  name: all", "kind: nvidia.com/gpu"]
    return "\n".join(lines) + "\n"


CONTAINERD_DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
CONTAINERD_IMPORT = 'imports = ["/etc/containerd/conf.d/*.toml"]'


def _ctk_version(state: st.NodeState) -> tuple[int, ...]:
    installed = state.packages.get("nvidia-container-toolkit", "1.17.4-1")
    return tuple(int(x) for x in re.findall(r"\d+", st.upstream(installed))[:3])


def _containerd_configured(state: st.NodeState) -> tuple[str, str, dict[str, str]]:
    """(message path, old config.toml, files to write) of ``nvidia-ctk runtime configure --runtime=containerd``:
    up to 1.17 the runtime goes into config.toml; from 1.18 into the drop-in conf.d/99-nvidia.toml, and
    config.toml gets an ``imports`` line for conf.d (kept with any imports it had)."""
    old = state.files.get(CONTAINERD_CONFIG, "")
    if _ctk_version(state) < (1, 18):
        text = old if "runtimes.nvidia]" in old else (old or "version = 2\n") + CONTAINERD_NVIDIA
        return CONTAINERD_CONFIG, old, {CONTAINERD_CONFIG: text}
    match = re.search(r"^imports\s*=\s*\[([^\]]*)\]", old, re.M)
    if match and "/etc/containerd/conf.d/*.toml" in match.group(1):
        config = old
    elif match:
        items = [i.strip() for i in match.group(1).split(",") if i.strip()] + ['"/etc/containerd/conf.d/*.toml"']
        config = old[:match.start()] + f"imports = [{', '.join(items)}]" + old[match.end():]
    else:
        config = CONTAINERD_IMPORT + "\n" + (old or "version = 2\n")
    return CONTAINERD_DROP_IN, old, {CONTAINERD_CONFIG: config, CONTAINERD_DROP_IN: "version = 2\n" + CONTAINERD_NVIDIA}


@_tool("nvidia-ctk")
def _nvidia_ctk(scenario: NodeScenario, args: list[str]) -> tuple[ToolOutput, bool]:
    state = st.current(scenario)
    if args in (["--version"], ["-v"]):
        version = ".".join(str(x) for x in _ctk_version(state))
        return _text(f"NVIDIA Container Toolkit CLI version {version}\n"), False
    if args[:2] == ["runtime", "configure"]:
        runtime = _value(args[2:], "--runtime") or "docker"
        path = {"docker": DOCKER_CONFIG, "containerd": CONTAINERD_CONFIG}.get(runtime)
        if path is None:
            return _text(stderr=f"ERRO[0000] unrecognized runtime '{runtime}'\n", rc=1), False
        if not _root():
            return _text(stderr=f"ERRO[0000] unable to flush config: unable to open {path} for writing: open {path}: "
                         "permission denied\n", rc=1), False
        old = state.files.get(path, "")
        if runtime == "docker":
            try:
                config = json.loads(old) if old.strip() else {}
            except ValueError:
                return _text(stderr=f"ERRO[0000] unable to load config: invalid JSON in {path}\n", rc=1), False
            config.setdefault("runtimes", {})["nvidia"] = {"args": [], "path": "nvidia-container-runtime"}
            writes = {path: json.dumps(config, indent=4) + "\n"}
        else:
            path, old, writes = _containerd_configured(state)
        changes = {k: v for k, v in writes.items() if state.files.get(k) != v}
        if changes:
            with st.mutate(scenario) as changed:
                changed.files.update(changes)
        return _text(stderr=f"INFO[0000] Wrote updated config to {path}\nINFO[0000] It is recommended that {runtime} "
                     "daemon be restarted.\n"), bool(changes)
    if args[:2] == ["cdi", "generate"]:
        if st.driver_status(scenario, state) != "ok" or state.loaded_driver is None:
            return _text(stderr="ERRO[0000] failed to generate CDI spec: failed to create device CDI specs: failed to "
                         "initialize NVML: ERROR_LIBRARY_NOT_FOUND\n", rc=1), False
        spec = cdi_spec(scenario, state.loaded_driver)
        output = _value(args[2:], "--output")
        log = 'INFO[0000] Auto-detected mode as "nvml"\nINFO[0000] Generated CDI spec with version 0.5.0\n'
        if output is None:
            return _text(spec, log), False
        if not _root():
            return _text(stderr=f"ERRO[0000] failed to save CDI spec: open {output}: permission denied\n", rc=1), False
        if state.files.get(output) == spec:
            return _text(stderr=log), False
        with st.mutate(scenario) as changed:
            changed.files[output] = spec
        return _text(stderr=log), True
    if args[:2] == ["cdi", "list"]:
        names = [f"nvidia.com/gpu={json.loads(m) if m.startswith(chr(34)) else m}"
                 for path, text in sorted(state.files.items()) if re.match(r"/(etc|var/run)/cdi/.+\.ya?ml$", path)
                 for m in re.findall(r"^  name: (.+)$", text, re.M)]
        return _text("".join(n + "\n" for n in names), f"INFO[0000] Found {len(names)} CDI devices\n"), False
    return _text(stderr=f"nvidia-ctk: {' '.join(args[:2])} is not simulated\n", rc=1), False


def _initramfs(scenario: NodeScenario, tool: str) -> tuple[ToolOutput, bool]:
    if not _root():
        return _text(stderr=f"{tool}: cannot write the initramfs: Permission denied\n", rc=1), False
    state = st.current(scenario)
    blacklisted = any(path.startswith("/etc/modprobe.d/") and re.search(r"^blacklist nouveau$", text, re.M)
                      for path, text in state.files.items())
    with st.mutate(scenario) as changed:
        changed.files[INITRAMFS] = "nouveau-blacklisted" if blacklisted else "plain"
    text = f"update-initramfs: Generating /boot/initrd.img-{state.kernel}\n" if tool == "update-initramfs" else ""
    return _text(text), True


@_tool("update-initramfs")
def _update_initramfs(scenario: NodeScenario, args: list[str]) -> tuple[ToolOutput, bool]:
    if args != ["-u"] or st.current(scenario).family != "apt":
        return _text(stderr="update-initramfs: only -u is simulated (apt nodes)\n", rc=1), False
    return _initramfs(scenario, "update-initramfs")


@_tool("dracut")
def _dracut(scenario: NodeScenario, args: list[str]) -> tuple[ToolOutput, bool]:
    if args not in (["-f"], ["--force"]) or st.current(scenario).family != "dnf":
        return _text(stderr="dracut: only -f is simulated (dnf nodes)\n", rc=1), False
    return _initramfs(scenario, "dracut")


@_tool("grep")
def _grep(scenario: NodeScenario, args: list[str]) -> tuple[ToolOutput, bool]:
    """``grep -rsH PATTERN PATH...`` over the node's files (the package-source probe)."""
    if len(args) < 3 or args[0] != "-rsH":
        return _text(stderr="grep: only -rsH PATTERN PATH... is simulated\n", rc=2), False
    pattern, roots = re.compile(args[1]), [a.rstrip("/") for a in args[2:]]
    state = st.current(scenario)
    out = []
    for path in sorted(state.files):
        if any(path == root or path.startswith(root + "/") for root in roots):
            out += [f"{path}:{line}\n" for line in state.files[path].splitlines() if pattern.search(line)]
    return _text("".join(out), rc=0 if out else 1), False


def _hook(scenario: NodeScenario, argv: Sequence[str]) -> Optional[ToolOutput]:
    """The remove helper (as root), and dcgmi needing a running nv-hostengine on nodes whose state is tracked."""
    if not argv:
        return None
    tool, args = argv[0].rsplit("/", 1)[-1], list(argv[1:])
    if tool == "sh" and len(args) == 4 and args[0] == "-c" and args[2] == REMOVE_HELPER:
        path = args[3]
        if not _root():
            return _record(scenario, argv, False, _text(stderr=f"rm: cannot remove '{path}': Permission denied\n",
                                                        rc=1))
        if path not in st.current(scenario).files:
            return _record(scenario, argv, False, _text())
        with st.mutate(scenario) as changed:
            del changed.files[path]
            if path.startswith("/etc/apt/sources.list.d/"):
                changed.apt_updated = False
        return _record(scenario, argv, True, _text())
    if tool == "dcgmi" and args[:1] in (["discovery"], ["diag"]) and st.involved(scenario):
        unit = st.current(scenario).service("nvidia-dcgm")
        if unit is not None and not unit[1]:
            return _record(scenario, argv, False, _text(HOSTENGINE_ERROR, rc=HOSTENGINE_RC))
    return None


TOOL_HOOKS.append(_hook)
