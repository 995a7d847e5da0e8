"""The CUDA toolkits installed under /usr/local, from the ``cuda_toolkits`` collector's output (pure).

The collector is one ``find`` (nvdeploy/collect/stack.py) that prints, for each toolkit folder, a marker line
``== /usr/local/cuda-12.4/version.json`` followed by the file (``version.txt`` for toolkits before 11.1), and a
marker for each forward-compatibility driver library ``== /usr/local/cuda-12.4/compat/libcuda.so.550.54.15``
(the ``cuda-compat-12-4`` package), and ``== /usr/local/cuda-12.4/`` for each toolkit folder itself. Real
``version.json`` (CUDA 11.1 and later)::

    {
       "cuda" : {
          "name" : "CUDA SDK",
          "version" : "12.4.1"
       },
       "cuda_cudart" : { ... }

Package installs print ``major.minor.update``; runfile installs print a date as the third part
(``12.6.20241114``), Jetson a build number (``12.2.140``). ``version.txt`` reads ``CUDA Version 10.2.89``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Optional

MARKER = "== "
_VERSION_TXT = re.compile(r"CUDA Version\s+(\d+\.\d+(?:\.\d+)?)")
_VERSION_JSON_CUDA = re.compile(r'"cuda"\s*:\s*\{[^{}]*?"version"\s*:\s*"([0-9.]+)"', re.S)
_COMPAT_LIB = re.compile(r"/compat/libcuda\.so\.(\d+\.\d+(?:\.\d+)?)$")
# An update number is small; a date (20241114) or a build number (140) is not an update.
MAX_UPDATE = 99


@dataclass(frozen=True)
class Toolkit:
    """One toolkit folder: its path, the version its version file gives (None: unreadable) and the driver version
    of its forward-compatibility libcuda, when the cuda-compat package is installed in it."""

    path: str
    version: Optional[str]
    compat_driver: Optional[str] = None
    problem: Optional[str] = None

    @property
    def major_minor(self) -> Optional[tuple[int, int]]:
        if not self.version:
            return None
        parts = self.version.split(".")
        return (int(parts[0]), int(parts[1])) if len(parts) >= 2 else None

    @property
    def update(self) -> Optional[int]:
        """The update number (0 = GA); None when the third part is a date or build number, or missing."""
        if not self.version:
            return None
        parts = self.version.split(".")
        if len(parts) < 3:
            return None
        number = int(parts[2])
        return number if number <= MAX_UPDATE else None


@dataclass(frozen=True)
class CudaInstall:
    toolkits: tuple[Toolkit, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)


def _folder(path: str) -> str:
    """'/usr/local/cuda-12.4/compat/libcuda.so.1' -> '/usr/local/cuda-12.4'."""
    parts = path.split("/")
    return "/".join(parts[:4]) if len(parts) >= 4 else path


def _version_of(name: str, body: str) -> tuple[Optional[str], Optional[str]]:
    """(version, problem) of one version file's text."""
    if name.endswith("version.txt"):
        match = _VERSION_TXT.search(body)
        return (match.group(1), None) if match else (None, "version.txt without 'CUDA Version'")
    try:
        data = json.loads(body)
    except ValueError:
        # A cut or hand-edited file: the "cuda" entry may still be readable.
        match = _VERSION_JSON_CUDA.search(body)
        return (match.group(1), "version.json is not valid JSON") if match else (None, "version.json unreadable")
    cuda = data.get("cuda") if isinstance(data, dict) else None
    version = cuda.get("version") if isinstance(cuda, dict) else None
    if isinstance(version, str) and re.fullmatch(r"\d+\.\d+(\.\d+)?", version):
        return version, None
    return None, "version.json has no \"cuda\" version"


def parse_cuda_install(text: str) -> CudaInstall:
    """Toolkits (sorted by path) from the marker-separated ``find`` output; never raises."""
    bodies: dict[str, list[str]] = {}
    compat: dict[str, str] = {}
    order: list[str] = []
    folders: list[str] = []
    current: Optional[str] = None
    warnings: list[str] = []
    for line in text.splitlines():
        if line.startswith(MARKER) and line[len(MARKER):].startswith("/"):
            path = line[len(MARKER):].strip()
            if path.endswith("/"):
                folders.append(path.rstrip("/"))
                current = None
                continue
            match = _COMPAT_LIB.search(path)
            if "/compat/" in path:
                current = None
                if match:
                    # libcuda.so.1 is a link (no match); the full driver version names the real library.
                    folder = _folder(path)
                    if folder not in compat or _tuple(match.group(1)) > _tuple(compat[folder]):
                        compat[folder] = match.group(1)
                continue
            if path.count("/") != 4:
                current = None  # a version file deeper in the tree (a component's own), not the toolkit's
                continue
            current = path
            bodies.setdefault(path, [])
            order.append(path)
            continue
        if current is not None:
            bodies[current].append(line)
    toolkits: dict[str, Toolkit] = {}
    for path in order:
        folder = _folder(path)
        version, problem = _version_of(path, "\n".join(bodies[path]))
        known = toolkits.get(folder)
        if known is not None and known.version:
            continue  # version.json wins over version.txt when a folder has both
        toolkits[folder] = Toolkit(folder, version, compat.get(folder), problem)
        if problem:
            warnings.append(f"{path}: {problem}")
    for folder in folders:
        if folder not in toolkits:
            # No version file (a pip/conda layout, or only cuda-compat): the folder name is all there is.
            version = _version_from_folder(folder)
            toolkits[folder] = Toolkit(folder, version, compat.get(folder),
                                       "no version.json" + ("; version from the folder name" if version else ""))
    for folder, driver in compat.items():
        if folder not in toolkits:
            toolkits[folder] = Toolkit(folder, _version_from_folder(folder), driver)
    return CudaInstall(tuple(sorted(toolkits.values(), key=lambda t: t.path)), tuple(warnings))


def _tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


def _version_from_folder(folder: str) -> Optional[str]:
    match = re.search(r"cuda-(\d+\.\d+)$", folder)
    return match.group(1) if match else None
