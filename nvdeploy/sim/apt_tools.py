"""The Debian/Ubuntu package tools of stateful simulated nodes: ``apt-get`` (update, install, remove, -o options, the
dpkg lock), ``dpkg-query -W`` and ``dpkg -i``, over the package universe of pkgrepo.py. Root only, with the real
tools' messages."""

from __future__ import annotations

import fnmatch
import re

from nvdeploy.sim import state as st
from nvdeploy.sim.pkgrepo import (
    APT_OPTIONS_WITH_VALUE,
    KEYRING_DEB,
    LOCK_HOLD_S,
    LOCK_RELEASED,
    LOCK_TEXT,
    available,
    install_package,
    is_driver,
    lock_held,
    lock_wait,
    remove_package,
    repo_urls,
    sources_error,
    split_options,
    unreachable_host,
    versions,
)
from nvdeploy.sim.scenario import NodeScenario
from nvdeploy.sim.systools import _not_found, _root, _text, _tool
from nvdeploy.sim.tools import ToolOutput

_APT_LOCK_ERROR = (f"E: {LOCK_TEXT}\nN: Be aware that removing the lock file is not a solution and may break your "
                   "system.\nE: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), is another "
                   "process using it?\n")


@_tool("apt-get")
def _apt_get(scenario: NodeScenario, args: list[str]) -> tuple[ToolOutput, bool]:
    state = st.current(scenario)
    if state.family != "apt":
        return _not_found("apt-get"), False
    options, words = split_options(args, APT_OPTIONS_WITH_VALUE)
    if not words:
        return _text(stderr="E: No command given\n", rc=100), False
    command, names = words[0], words[1:]
    if command not in ("update", "install", "upgrade", "purge", "remove"):
        return _text(stderr=f"E: Invalid operation {command} (not simulated)\n", rc=100), False
    broken = sources_error(state)
    if broken:
        return _text(stderr=broken, rc=100), False
    if not _root():
        return _text(stderr="E: Could not open lock file /var/lib/dpkg/lock-frontend - open (13: Permission denied)\n"
                     "E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), are you root?\n",
                     rc=100), False
    if command == "update":
        lines, errors = [], []
        for n, url in enumerate(repo_urls(state), 1):
            host = unreachable_host(scenario, url)
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
    if lock_held(scenario, state):
        if lock_wait(options) < LOCK_HOLD_S:
            return _text(stderr=_APT_LOCK_ERROR, rc=100), False
        waited = f"Waiting for cache lock: {LOCK_TEXT}... {LOCK_HOLD_S}s\n"
    if command in ("purge", "remove"):
        gone = [n for n in names if n in state.packages]
        if gone or waited:
            with st.mutate(scenario) as changed:
                if waited:
                    changed.files[LOCK_RELEASED] = "1"
                for name in gone:
                    remove_package(changed, name)
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
    if scenario.has("install_fail") and any(is_driver(n) for n, _ in todo):
        driver = next(n for n, _ in todo if is_driver(n))
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
                install_package(scenario, changed, name, version)
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
    if lock_held(scenario, state):
        return _text(stderr="dpkg: error: dpkg frontend lock was locked by another process with pid 1234\nNote: "
                     "removing the lock file is always wrong, and can end up damaging the locked area\n and the "
                     "entire system. See <https://wiki.debian.org/Teams/Dpkg/FAQ#db-lock>.\n", rc=2), False
    source = state.files.get(args[1], "")
    if not re.search(r"cuda-keyring_[\d.]+-\d+_all\.deb$", source):
        return _text(stderr=f"dpkg: error: cannot access archive '{args[1]}': No such file or directory\n", rc=2), False
    with st.mutate(scenario) as changed:
        install_package(scenario, changed, "cuda-keyring", "1.1-1")
    return _text("Selecting previously unselected package cuda-keyring.\nSetting up cuda-keyring (1.1-1) ...\n"), True

