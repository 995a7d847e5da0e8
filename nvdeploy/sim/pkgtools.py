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
import re
from collections.abc import Sequence
from typing import Optional

from nvdeploy.sim import state as st
from nvdeploy.sim.scenario import NodeScenario
from nvdeploy.sim.systools import _not_found, _root, _text, _tool
from nvdeploy.sim.tools import ToolOutput

_DISTRO_PACKAGES = ("curl", "build-essential", "dkms", "pciutils", "kernel-tools", "linux-tools-common", "tar", "gcc",
                    "make")
DCGM_VERSIONS = {"datacenter-gpu-manager": "1:3.3.9", "datacenter-gpu-manager-4-cuda12": "1:4.1.1-1"}

def _is_driver(name: str) -> bool:
    return bool(re.fullmatch(r"nvidia-driver(-\d+(-open)?)?", name))




# ---------------------------------------------------------------------------------------------------------------
# Packages


def _repo_dir(state: st.NodeState) -> str:
    return "/etc/apt/sources.list.d/" if state.family == "apt" else "/etc/yum.repos.d/"


def _repo_urls(state: st.NodeState) -> list[str]:
    urls = []
    for path, text in state.files.items():
        if path.startswith(_repo_dir(state)):
            urls += re.findall(r"(?:https?|file)://[^\s\]]+", text)
    return urls


def _unreachable(scenario: NodeScenario, url: str) -> Optional[str]:
    host = re.sub(r"^[a-z]+://", "", url).split("/", 1)[0]
    if scenario.has("offline") and host in (st.NVIDIA_HOST, "github.com"):
        return host
    return None


def _module_stream(state: st.NodeState) -> Optional[str]:
    return state.files.get("dnf-module:nvidia-driver")


def available(scenario: NodeScenario, state: st.NodeState, name: str) -> Optional[str]:
    """The version the node's package manager would install for ``name``, or None when it cannot find it."""
    if name == st.headers_package(state):
        return state.kernel.split("-")[0] + "-1"
    if name in _DISTRO_PACKAGES or name.startswith("linux-tools-"):
        return "1.0-1"
    if not _repo_urls(state) or (state.family == "apt" and not state.apt_updated):
        return None
    suffix = "-0ubuntu1" if state.family == "apt" else "-1.el9"
    if state.family == "apt":
        match = re.fullmatch(r"nvidia-driver-(\d+)(-open)?", name)
        if match and match.group(1) in st.DRIVERS:
            return st.DRIVERS[match.group(1)] + suffix
        match = re.fullmatch(r"nvidia-fabricmanager-(\d+)", name)
        if match and match.group(1) in st.DRIVERS:
            return st.DRIVERS[match.group(1)] + "-1"
    else:
        stream = _module_stream(state)
        if name in ("nvidia-driver", "nvidia-driver-cuda") and stream:
            return st.DRIVERS[stream.split("-")[0]] + suffix
        if name == "nvidia-fabric-manager" and stream:
            return st.DRIVERS[stream.split("-")[0]] + "-1"
    match = re.fullmatch(r"cuda-toolkit-(\d+)-(\d+)", name)
    if match:
        return f"{match.group(1)}.{match.group(2)}.1-1"
    if name in DCGM_VERSIONS:
        return DCGM_VERSIONS[name]
    return {"nvidia-container-toolkit": "1.17.4-1", "cuda-keyring": "1.1-1"}.get(name)


def _install(scenario: NodeScenario, state: st.NodeState, name: str, version: str) -> None:
    """Install one package and what it brings (services; a driver replaces any other driver branch)."""
    if re.fullmatch(r"nvidia-driver(-\d+(-open)?)?", name):
        for other in [p for p in state.packages if re.fullmatch(r"nvidia-driver(-\d+(-open)?)?", p)]:
            del state.packages[other]
        state.services.setdefault("nvidia-persistenced", [False, False])
    if re.fullmatch(r"nvidia-fabric-?manager(-\d+)?", name):
        for other in [p for p in state.packages if re.fullmatch(r"nvidia-fabric-?manager(-\d+)?", p)]:
            del state.packages[other]
        state.services.setdefault("nvidia-fabricmanager", [False, False])
    if name.startswith("datacenter-gpu-manager"):
        state.services.setdefault("nvidia-dcgm", [False, False])
    if name == "cuda-keyring":
        tag = st.distro_tag(state.os_id, state.os_version)
        state.files["/usr/share/keyrings/cuda-archive-keyring.gpg"] = "<key>\n"
        state.files[f"/etc/apt/sources.list.d/cuda-{tag}-x86_64.list"] = st.official_repo_text("apt", tag)
        state.apt_updated = False
    state.packages[name] = version


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


@_tool("apt-get")
def _apt_get(scenario: NodeScenario, args: list[str]) -> tuple[ToolOutput, bool]:
    state = st.current(scenario)
    if state.family != "apt":
        return _not_found("apt-get"), False
    _, words = _options(args, _APT_OPTIONS_WITH_VALUE)
    if not words:
        return _text(stderr="E: No command given\n", rc=100), False
    command, names = words[0], words[1:]
    if command not in ("update", "install"):
        return _text(stderr=f"E: Invalid operation {command} (not simulated)\n", rc=100), False
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
    wanted: list[tuple[str, str]] = []
    for spec in names:
        name, _, pin = spec.partition("=")
        version = available(scenario, state, name)
        if version is None or (pin and pin != version):
            return _text("Reading package lists...\nBuilding dependency tree...\n",
                         f"E: Unable to locate package {spec}\n" if version is None
                         else f"E: Version '{pin}' for '{name}' was not found\n", 100), False
        wanted.append((name, version))
    todo = [(n, v) for n, v in wanted if state.packages.get(n) != v]
    if scenario.has("install_fail") and any(_is_driver(n) for n, _ in todo):
        driver = next(n for n, _ in todo if _is_driver(n))
        branch = driver.split("-")[2] if driver.count("-") >= 2 else "550"
        return _text(f"Setting up nvidia-dkms-{branch} ...\n",
                     f"dpkg: error processing package nvidia-dkms-{branch} (--configure):\n installed "
                     f"nvidia-dkms-{branch} package post-installation script subprocess returned error exit status 10\n"
                     f"E: Sub-process /usr/bin/dpkg returned an error code (1)\n", 100), False
    lines = [f"{n} is already the newest version ({v})." for n, v in wanted if (n, v) not in todo]
    if todo:
        with st.mutate(scenario) as changed:
            for name, version in todo:
                _install(scenario, changed, name, version)
        lines += [f"Setting up {n} ({v}) ..." for n, v in todo]
    upgraded = f"0 upgraded, {len(todo)} newly installed, 0 to remove and 0 not upgraded."
    return _text("Reading package lists...\n" + "".join(line + "\n" for line in lines) + upgraded + "\n"), bool(todo)


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
    query = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-q", "--query"):
            query = True
        elif arg in ("--qf", "--queryformat") and i + 1 < len(args):
            i += 1
            fmt = args[i]
        elif not arg.startswith("-"):
            names.append(arg)
        i += 1
    if not query:
        return _text(stderr="rpm: only -q is simulated\n", rc=1), False
    out, missing = [], 0
    for name in names:
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
    version = available(scenario, state, spec)
    if version is not None:
        return spec, version
    match = re.fullmatch(r"(.+?)-(\d[\w.]*(?:-[\w.]+)?)", spec)
    if match:
        version = available(scenario, state, match.group(1))
        if version is not None and (version == match.group(2) or version.startswith(match.group(2))):
            return match.group(1), version
    return None


@_tool("dnf")
def _dnf(scenario: NodeScenario, args: list[str]) -> tuple[ToolOutput, bool]:
    state = st.current(scenario)
    if state.family != "dnf":
        return _not_found("dnf"), False
    _, words = _options(args, ("--setopt", "--repo", "--enablerepo", "--disablerepo"))
    if not words:
        return _text(stderr="Error: no command given\n", rc=1), False
    if not _root():
        return _text(stderr="Error: This command has to be run with superuser privileges (under the root user on most "
                     "systems).\n", rc=1), False
    for url in _repo_urls(state):
        host = _unreachable(scenario, url)
        if host:
            return _text(stderr="Errors during downloading metadata for repository 'nvdeploy-nvidia':\n  - Curl error "
                         f"(6): Couldn't resolve host name for {url}repodata/repomd.xml [Could not resolve host: "
                         f"{host}]\nError: Failed to download metadata for repo 'nvdeploy-nvidia': Cannot download "
                         "repomd.xml\n", rc=1), False
    command, names = words[0], words[1:]
    if command == "makecache":
        return _text("Metadata cache created.\n"), False
    if command == "module" and len(names) == 2 and names[0] in ("install", "enable"):
        match = re.fullmatch(r"nvidia-driver:(\d+)(-dkms|-open)?(/\w+)?", names[1])
        if not match or match.group(1) not in st.DRIVERS or not _repo_urls(state):
            return _text(stderr=f"Error: Problems in request:\nmissing groups or modules: {names[1]}\n", rc=1), False
        stream = match.group(1) + (match.group(2) or "")
        if names[0] == "enable":
            if _module_stream(state) == stream:
                return _text("Nothing to do.\n"), False
            with st.mutate(scenario) as changed:
                changed.files["dnf-module:nvidia-driver"] = stream
            return _text("Complete!\n"), True
        trial = st.NodeState.from_json(state.to_json())
        trial.files["dnf-module:nvidia-driver"] = stream
        version = available(scenario, trial, "nvidia-driver")
        if _module_stream(state) == stream and state.packages.get("nvidia-driver") == version:
            return _text("Nothing to do.\nComplete!\n"), False
        if scenario.has("install_fail"):
            return _text("Running scriptlet: kmod-nvidia-latest-dkms\n",
                         "Error! Bad return status for module build on kernel: " + state.kernel + " (x86_64)\n"
                         "error: %post(kmod-nvidia-latest-dkms) scriptlet failed, exit status 10\n"
                         "Error: Transaction failed\n", 1), False
        with st.mutate(scenario) as changed:
            changed.files["dnf-module:nvidia-driver"] = stream
            _install(scenario, changed, "nvidia-driver", version or "")
        return _text(f"Installing:\n nvidia-driver  {version}\nComplete!\n"), True
    if command != "install":
        return _text(stderr=f"Error: '{command}' is not simulated\n", rc=1), False
    wanted = []
    for spec in names:
        resolved = _dnf_resolve(scenario, state, spec)
        if resolved is None:
            return _text(stderr=f"Error: Unable to find a match: {spec}\n", rc=1), False
        wanted.append(resolved)
    todo = [(n, v) for n, v in wanted if state.packages.get(n) != v]
    if not todo:
        return _text("Dependencies resolved.\nNothing to do.\nComplete!\n"), False
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


