"""Executable fake tools for fake SSH nodes.

``install_fake_tools(bin_dir)`` writes ``#!/bin/sh`` wrappers (``nvidia-smi``, ``lspci``, ...) that run
``python -m nvdeploy.sim.fake_tool "$0" "$@"``; :func:`main` then reads the node's scenario JSON from the file
named by ``NVD_SCENARIO_FILE`` (profiles resolved with ``ProfileCatalog()``, plus the folders listed in
``NVD_PROFILE_DIRS``, ``os.pathsep``-separated), runs :func:`nvdeploy.sim.tools.run_tool` and exits with its
status. A ``hang`` scenario sleeps forever (a plain sleep: SIGTERM/SIGKILL end it).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import stat
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from nvdeploy.config.profiles import GpuExpectation, NvlinkDomain, Profile, ProfileCatalog
from nvdeploy.sim.scenario import NodeScenario
from nvdeploy.sim.tools import run_tool

SCENARIO_ENV = "NVD_SCENARIO_FILE"
PROFILE_DIRS_ENV = "NVD_PROFILE_DIRS"
FAKE_TOOLS = ("nvidia-smi", "lspci", "dmesg", "journalctl", "dcgmi", "ibstat", "systemctl", "mpirun",
              "all_reduce_perf", "python3", "lsmod", "ofed_info", "nv-fabricmanager",
              # stateful nodes (nvdeploy/sim/systools.py)
              "sudo", "apt-get", "dpkg-query", "dpkg", "dnf", "rpm", "curl", "modprobe", "mokutil", "cpupower",
              "reboot", "uname", "cat",
              # install (nvdeploy/sim/pkgtools.py, apt_tools.py, dnf_tools.py)
              "nvidia-ctk", "dracut", "update-initramfs", "grep",
              # the GPU stack around the driver (nvdeploy/sim/stack_tools.py)
              "find", "nvidia-cuda-mps-control", "docker", "ib_write_bw",
              # IMEX on NVLink domain trays (nvdeploy/sim/imex_tool.py)
              "nvidia-imex-ctl",
              # nvbandwidth.copies (nvdeploy/sim/nvbandwidth_tool.py)
              "nvbandwidth",
              # whether the node is a VM (a MIG mode change then needs a reboot: nvdeploy/sim/mig_tool.py)
              "systemd-detect-virt",
              # the uptime collector's awk (nvdeploy/sim/nvl72.py); any other awk is the real one
              "awk")
# Tools simulated only for some first arguments (a shell ``case`` pattern); every other call runs the real program,
# which the batch script itself needs (``cat`` of its own temp files). name -> (pattern, real program).
PARTIAL_TOOLS = {"cat": ("/etc/os-release|/proc/sys/kernel/random/boot_id|*nvdeploy*|/etc/modprobe.d/*"
                         "|/etc/cdi/*"
                         "|/etc/docker/*|/etc/containerd/*|/etc/nvidia-imex/*", "/bin/cat"),
                 "grep": ("-rsH", "/bin/grep"),
                 "awk": ("'{print $1}'", "/usr/bin/awk"),
                 # only the cuda_toolkits collector's listing; the test machine's own /usr/local must not leak in
                 "find": ("/usr/local|/usr/bin/dockerd|/proc/driver/nvidia/version|/dev/nvidia-caps-imex-channels/*"
                          "|/sys/class/dmi/id/*",
                          "/usr/bin/find")}
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder holding the nvdeploy package


def _catalog() -> ProfileCatalog:
    catalog = ProfileCatalog()
    extra = [Path(p) for p in os.environ.get(PROFILE_DIRS_ENV, "").split(os.pathsep) if p]
    if extra:
        catalog = ProfileCatalog(extra + catalog.folders)
    return catalog


class CachedProfiles:
    """``ProfileCatalog.get`` for a fake tool, from a JSON copy of the profile beside the node's scenario file.

    Every simulated command is a Python process of its own, and reading the profile's YAML (PyYAML's import and
    the parse) was about a fifth of each. The copy is used only while its YAML file is the one the catalog would
    read, unchanged (path, size, mtime); anything else reads the YAML again. JSON, not pickle: nothing in that
    folder can make a fake tool run code."""

    def __init__(self, catalog: ProfileCatalog, folder: Path) -> None:
        self.catalog = catalog
        self.folder = folder

    def get(self, name: str) -> Profile:
        if os.sep in name:  # never a path outside the folders (the catalog says what such a name is)
            return self.catalog.get(name)
        source = next((f / f"{name}.yaml" for f in self.catalog.folders if (f / f"{name}.yaml").is_file()), None)
        if source is None:
            return self.catalog.get(name)
        stat_ = source.stat()
        key = [str(source), stat_.st_size, stat_.st_mtime_ns]
        copy = self.folder / f".nvd-profile-{name}.json"
        try:
            data = json.loads(copy.read_text(encoding="utf-8"))
            if data["key"] == key:
                return _profile_from(data["profile"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        profile = self.catalog.get(name)
        try:
            temporary = copy.with_name(f"{copy.name}.{os.getpid()}")
            temporary.write_text(json.dumps({"key": key, "profile": dataclasses.asdict(profile)}), encoding="utf-8")
            os.replace(temporary, copy)
        except (OSError, TypeError, ValueError):  # a read-only folder, a value JSON cannot hold: read YAML each time
            pass
        return profile


def _profile_from(data: dict) -> Profile:
    domain = data.get("nvlink_domain")
    return Profile(**{**data, "gpu": GpuExpectation(**data["gpu"]),
                      "nvlink_domain": NvlinkDomain(**domain) if domain else None})


def _is_module_path(arg0: str) -> bool:
    base = os.path.basename(arg0)
    return base in ("fake_tool.py", "__main__.py", "-m", "-c") or not base


def main(argv: Sequence[str] | None = None) -> int:
    """Run one fake tool. ``argv`` is ``[tool, args...]``; by default taken from ``sys.argv`` (its ``argv[1]`` is
    the tool when started as ``python -m nvdeploy.sim.fake_tool TOOL ARGS``, its ``argv[0]`` when the module is
    run under the tool's own name)."""
    if argv is None:
        argv = sys.argv[1:] if _is_module_path(sys.argv[0]) else sys.argv
    argv = list(argv)
    if not argv:
        sys.stderr.write("fake_tool: no tool name given\n")
        return 2
    path = os.environ.get(SCENARIO_ENV)
    if not path:
        sys.stderr.write(f"fake_tool: {SCENARIO_ENV} is not set\n")
        return 2
    try:
        profiles = CachedProfiles(_catalog(), Path(path).parent)
        scenario = NodeScenario.from_json(Path(path).read_text(encoding="utf-8"), profiles)  # type: ignore[arg-type]
    except (OSError, ValueError, KeyError) as exc:
        sys.stderr.write(f"fake_tool: cannot load scenario {path}: {exc}\n")
        return 2
    out = run_tool(scenario, [os.path.basename(argv[0])] + argv[1:])
    if out.delay_s > 0:
        time.sleep(out.delay_s)
    if out.hang:
        while True:
            time.sleep(3600)
    began = time.monotonic()
    sys.stdout.buffer.write(out.stdout)
    sys.stdout.buffer.flush()
    sys.stderr.buffer.write(out.stderr)
    sys.stderr.buffer.flush()
    if out.repeat is not None:  # until killed, as the real loop: SIGTERM's default action ends this process
        while True:
            time.sleep(max(0.05, out.repeat_s))
            sys.stdout.buffer.write(out.repeat(time.monotonic() - began))
            sys.stdout.buffer.flush()
    return out.rc


def _installed() -> bool:
    return _PACKAGE_ROOT.name in ("site-packages", "dist-packages")


def wrapper_script(python: str = sys.executable, pythonpath: Path | None = None) -> str:
    """The ``#!/bin/sh`` wrapper text every fake tool gets (``pythonpath``: where to import nvdeploy from)."""
    lines = ["#!/bin/sh", "# nvdeploy simulated tool (nvdeploy.sim.fake_tool.install_fake_tools)"]
    root = pythonpath if pythonpath is not None else (None if _installed() else _PACKAGE_ROOT)
    if root is not None:
        lines += [f"PYTHONPATH={shlex.quote(str(root))}${{PYTHONPATH:+:$PYTHONPATH}}", "export PYTHONPATH"]
    lines.append(f'exec {shlex.quote(python)} -m nvdeploy.sim.fake_tool "$0" "$@"')
    return "\n".join(lines) + "\n"


def install_fake_tools(bin_dir: Path, python: str = sys.executable, pythonpath: Path | None = None) -> list[Path]:
    """Write executable fake-tool wrappers into ``bin_dir`` (created if needed); return their paths."""
    bin_dir = Path(bin_dir)
    bin_dir.mkdir(parents=True, exist_ok=True)
    text = wrapper_script(python, pythonpath)
    written = []
    partial = {name: f'case "$1" in\n  {pattern}) ;;\n  *) exec {shlex.quote(real)} "$@" ;;\nesac\n'
               for name, (pattern, real) in PARTIAL_TOOLS.items()}
    for name in FAKE_TOOLS:
        target = bin_dir / name
        target.write_text(text.replace("\n", "\n" + partial[name], 1) if name in partial else text, encoding="utf-8")
        target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH | stat.S_IRUSR)
        written.append(target)
    return written


if __name__ == "__main__":
    sys.exit(main())
