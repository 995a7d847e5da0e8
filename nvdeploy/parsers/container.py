"""The container runtime's NVIDIA set-up, from the ``container_files`` and ``cdi_list`` collectors (pure).

``container_files`` is one ``find`` (nvdeploy/collect/stack_commands.py) that prints ``== PATH`` for the dockerd and
containerd binaries it finds, and ``== PATH`` followed by the file for docker's ``daemon.json``, containerd's
``config.toml`` and each CDI spec under /etc/cdi and /var/run/cdi. Paths that do not exist are only named on
stderr (``find: '/etc/docker/daemon.json': No such file or directory``, exit 1).

``nvidia-ctk cdi list`` prints (real, NVIDIA Container Toolkit 1.17, 8x H100)::

    INFO[0000] Found 17 CDI devices          <- a log line, on stderr
    nvidia.com/gpu=0
    ...
    nvidia.com/gpu=GPU-20f8adb6-f7e2-5466-6cf5-d07abfe364a9
    nvidia.com/gpu=all

Some versions print a count after the name (``nvidia.com/gpu=0 2``); MIG devices are ``nvidia.com/mig=...``.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, Optional

MARKER = "== "
_CDI_DEVICE = re.compile(r"^(nvidia\.com/(?:gpu|mig))=(\S+)")
_FOUND = re.compile(r"Found (\d+) CDI devices")
_LIBCUDA = re.compile(r"libcuda\.so\.(\d+\.\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class ContainerFiles:
    """What the listing found: the runtimes' binaries, and the text of each config or CDI spec by path."""

    binaries: tuple[str, ...] = ()
    files: dict[str, str] = field(default_factory=dict)

    @property
    def docker(self) -> bool:
        return any(b.endswith("/dockerd") for b in self.binaries)

    @property
    def containerd(self) -> bool:
        return any(b.endswith("/containerd") for b in self.binaries)

    def cdi_specs(self) -> dict[str, str]:
        return {p: t for p, t in self.files.items() if p.startswith(("/etc/cdi/", "/var/run/cdi/"))}


def parse_container_files(text: str) -> ContainerFiles:
    binaries: list[str] = []
    bodies: dict[str, list[str]] = {}
    current: Optional[str] = None
    for line in text.splitlines():
        if line.startswith(MARKER) and line[len(MARKER):].startswith("/"):
            path = line[len(MARKER):].strip()
            if path.rsplit("/", 1)[-1] in ("dockerd", "containerd"):
                binaries.append(path)
                current = None
            else:
                current = path
                bodies[path] = []
            continue
        if current is not None:
            bodies[current].append(line)
    return ContainerFiles(tuple(binaries), {p: "\n".join(lines).strip("\n") + "\n" for p, lines in bodies.items()})


@dataclass(frozen=True)
class CdiList:
    gpu_names: tuple[str, ...] = ()
    mig_names: tuple[str, ...] = ()
    found: Optional[int] = None

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        """The whole-GPU devices by index (``nvidia.com/gpu=3``); UUID names and ``all`` are aliases."""
        return tuple(sorted(int(n) for n in self.gpu_names if n.isdigit()))


def parse_cdi_list(stdout: str, stderr: str = "") -> CdiList:
    gpus: list[str] = []
    migs: list[str] = []
    found = None
    for line in (stdout + "\n" + stderr).splitlines():
        line = line.strip()
        match = _FOUND.search(line)
        if match:
            found = int(match.group(1))
            continue
        match = _CDI_DEVICE.match(line)
        if match:
            (gpus if match.group(1).endswith("gpu") else migs).append(match.group(2))
    return CdiList(tuple(gpus), tuple(migs), found)


def docker_nvidia(text: str) -> tuple[Optional[bool], str]:
    """(whether daemon.json sets up NVIDIA GPUs, how); None when the file is not JSON."""
    try:
        config: Any = json.loads(text) if text.strip() else {}
    except ValueError:
        return None, "daemon.json is not valid JSON (docker refuses to start)"
    if not isinstance(config, dict):
        return None, "daemon.json is not a JSON object"
    runtimes = config.get("runtimes")
    if isinstance(runtimes, dict) and "nvidia" in runtimes:
        default = config.get("default-runtime")
        return True, "runtimes.nvidia" + (f", default-runtime {default}" if default else "")
    features = config.get("features")
    if isinstance(features, dict) and features.get("cdi") is True:
        return True, "features.cdi (CDI devices)"
    return False, "no nvidia runtime and CDI not enabled"


def containerd_nvidia(text: str) -> tuple[bool, str]:
    """Whether containerd's config.toml has the nvidia runtime (or CDI enabled for the CRI plugin)."""
    if re.search(r"^\s*\[plugins\.[^\]]*runtimes\.nvidia\]", text, re.M):
        return True, "runtimes.nvidia"
    if re.search(r"^\s*enable_cdi\s*=\s*true", text, re.M):
        return True, "enable_cdi = true"
    return False, "no nvidia runtime and CDI not enabled"


CONTAINERD_CONFIG = "/etc/containerd/config.toml"
# Where the toolkit writes containerd's drop-in: conf.d since 1.18.1 (containerd's own folder); 1.18.0 wrote config.d.
CONTAINERD_DROP_IN_DIRS = ("/etc/containerd/conf.d", "/etc/containerd/config.d")
_IMPORTS = re.compile(r"^\s*imports\s*=\s*\[([^\]]*)\]", re.M)


def containerd_imports(text: str, config: str = CONTAINERD_CONFIG) -> list[str]:
    """The ``imports = [...]`` globs of a containerd config, absolute (a relative one is relative to the config's
    folder, as containerd resolves it)."""
    folder = posixpath.dirname(config)
    out = []
    for block in _IMPORTS.findall(text):
        for item in re.findall(r'"([^"]+)"|\'([^\']+)\'', block):
            path = item[0] or item[1]
            out.append(path if path.startswith("/") else posixpath.normpath(posixpath.join(folder, path)))
    return out


def _glob_match(path: str, pattern: str) -> bool:
    """A path against an imports glob, one folder level per ``*`` as Go's filepath.Glob (containerd) reads it."""
    return posixpath.dirname(path) == posixpath.dirname(pattern) and fnmatch.fnmatchcase(
        posixpath.basename(path), posixpath.basename(pattern))


def containerd_setup(files: dict[str, str], config: str = CONTAINERD_CONFIG) -> tuple[bool, str]:
    """Whether containerd, as it reads its config, has the NVIDIA runtime (or CDI): ``config.toml`` itself, or a
    drop-in it imports (NVIDIA container toolkit 1.18+: ``/etc/containerd/conf.d/99-nvidia.toml`` plus an
    ``imports`` line in config.toml). ``files``: path -> text of config.toml and the drop-ins read. A drop-in that
    config.toml does not import is not read by containerd: named, but not counted."""
    text = files.get(config)
    if text is None:
        return False, f"no {config}"
    ok, how = containerd_nvidia(text)
    if ok:
        return True, how
    patterns = containerd_imports(text, config)
    imported = sorted(path for path in files if path != config and any(_glob_match(path, p) for p in patterns))
    for path in imported:
        ok, how = containerd_nvidia(files[path])
        if ok:
            return True, f"{how} in {path}, imported by {posixpath.basename(config)}"
    stray = sorted(path for path in files if path not in imported and path != config
                   and path.endswith(".toml") and containerd_nvidia(files[path])[0])
    if stray:
        return False, (f"{stray[0]} sets up the nvidia runtime but {config} does not import it "
                       f"(imports: {', '.join(patterns) or 'none'})")
    return False, "no nvidia runtime and CDI not enabled" + (f" (imports read: {', '.join(imported)})"
                                                            if imported else "")


def spec_driver(text: str) -> Optional[str]:
    """The driver version a CDI spec was generated for (its libcuda.so.<version> mount)."""
    match = _LIBCUDA.search(text)
    return match.group(1) if match else None


_SMI_L = re.compile(r"^GPU (\d+): .*\(UUID: (GPU-[0-9a-fA-F-]+)\)\s*$")


def docker_run_gpus(text: str) -> dict[str, int]:
    """UUID -> index of the GPUs ``nvidia-smi -L`` listed inside the container (MIG lines are ignored)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        match = _SMI_L.match(line.strip())
        if match:
            out[match.group(2)] = int(match.group(1))
    return out


@dataclass(frozen=True)
class ContainerSetup:
    """The container runtimes as the node's files set them up (the parse stage's fact for container.runtime):
    which runtimes are installed, the driver each CDI spec was generated for, and whether docker's daemon.json and
    containerd's config (with the drop-ins it imports) give containers the NVIDIA GPUs, each with how."""

    docker: bool
    containerd: bool
    cdi_spec_drivers: tuple[tuple[str, Optional[str]], ...]
    # None when /etc/docker/daemon.json is absent; (ok, how), ok None when the file is not a JSON object.
    docker_runtime: Optional[tuple[Optional[bool], str]]
    containerd_runtime: tuple[bool, str]


def parse_container_setup(text: str) -> ContainerSetup:
    """The container listing's find output (``== PATH`` markers, see nvdeploy/collect/stack_commands.py) read into
    :class:`ContainerSetup`."""
    files = parse_container_files(text)
    daemon = files.files.get("/etc/docker/daemon.json")
    return ContainerSetup(
        docker=files.docker, containerd=files.containerd,
        cdi_spec_drivers=tuple((path, spec_driver(body)) for path, body in sorted(files.cdi_specs().items())),
        docker_runtime=docker_nvidia(daemon) if daemon is not None else None,
        containerd_runtime=containerd_setup(files.files))
