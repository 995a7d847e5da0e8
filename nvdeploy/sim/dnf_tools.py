"""The RHEL-family package tools of stateful simulated nodes: ``dnf`` (install, module enable/install/reset with
their stream rules, versionlock, makecache) and ``rpm -q``, over the package universe of pkgrepo.py. Root only, with
the real tools' messages."""

from __future__ import annotations

import fnmatch
import re
from typing import Optional

from nvdeploy.sim import state as st
from nvdeploy.sim.pkgrepo import (
    VERSIONLOCK,
    arch_folder,
    available,
    has_modules,
    install_package,
    is_driver,
    module_stream,
    nvidia_repo,
    remove_package,
    repo_urls,
    split_options,
    unreachable_host,
    version_locked,
    versions,
)
from nvdeploy.sim.scenario import NodeScenario
from nvdeploy.sim.systools import _not_found, _root, _text, _tool
from nvdeploy.sim.tools import ToolOutput


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
        lock = version_locked(state, match.group(1))
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
    enabled = module_stream(state)
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
    if not match or match.group(1) not in st.DRIVERS or not nvidia_repo(scenario, state):
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
        install_package(scenario, changed, "nvidia-driver", version)
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
    options, words = split_options(args, ("--setopt", "--repo", "--enablerepo", "--disablerepo", "--add-repo"))
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
        host = unreachable_host(scenario, url)
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
    for url in repo_urls(state):
        host = unreachable_host(scenario, url)
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
                remove_package(changed, name)
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
    if scenario.has("install_fail") and any(is_driver(n) for n, _ in todo):
        return _text("Running scriptlet: kmod-nvidia-latest-dkms\n",
                     "Error! Bad return status for module build on kernel: " + state.kernel + " (x86_64)\n"
                     "error: %post(kmod-nvidia-latest-dkms) scriptlet failed, exit status 10\n"
                     "Error: Transaction failed\n", 1), False
    with st.mutate(scenario) as changed:
        for name, version in todo:
            install_package(scenario, changed, name, version)
    return _text("Installing:\n" + "".join(f" {n}  {v}\n" for n, v in todo) + "Complete!\n"), True


