"""Parse the small outputs that describe a node's GPU software stack: ``lsmod``, ``systemctl is-active``, and the
version lines of ``dcgmi --version``, ``ofed_info -s`` and ``nv-fabricmanager --version``.

Each parser is pure and never raises: odd input gives None (or an empty result) rather than a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", errors="replace")
    return _ANSI_RE.sub("", str(value).replace("\x00", "").replace("\r\n", "\n"))


@dataclass(frozen=True)
class LsmodFacts:
    """The loaded kernel modules (``lsmod``), by name, with their ``Used by`` count."""

    modules: dict[str, int]

    def loaded(self, name: str) -> bool:
        return name in self.modules

    def to_dict(self) -> dict[str, Any]:
        return {"modules": dict(self.modules)}


_LSMOD_RE = re.compile(r"^([A-Za-z0-9_]+)\s+(\d+)\s+(-?\d+)\b")


def parse_lsmod(text: Any) -> LsmodFacts:
    """``Module  Size  Used by`` then one line per module; the header and odd lines are skipped."""
    modules: dict[str, int] = {}
    for line in _text(text).split("\n"):
        match = _LSMOD_RE.match(line.strip())
        if match:
            modules[match.group(1)] = int(match.group(3))
    return LsmodFacts(modules)


_STATES = ("active", "inactive", "failed", "activating", "deactivating", "reloading", "unknown", "maintenance",
           "refreshing")


def parse_systemctl_state(text: Any) -> str | None:
    """The first line of ``systemctl is-active UNIT`` (``active``, ``inactive``, ``failed``, ...); None when the
    output is not one of systemd's unit states."""
    for line in _text(text).split("\n"):
        word = line.strip().lower()
        if word:
            return word if word in _STATES else None
    return None


_UNIT_FILE_STATES = ("enabled", "enabled-runtime", "linked", "linked-runtime", "alias", "masked", "masked-runtime",
                     "static", "indirect", "disabled", "generated", "transient", "bad")


def parse_unit_file_state(text: Any) -> str | None:
    """The first line of ``systemctl is-enabled UNIT`` (``enabled``, ``disabled``, ``masked``, ...); ``not-found``
    when systemd has no such unit; None when the output is none of these."""
    for line in _text(text).split("\n"):
        word = line.strip().lower()
        if word:
            if word in _UNIT_FILE_STATES:
                return word
            return "not-found" if "no such file or directory" in word or word == "not-found" else None
    return None


_DCGM_VERSION_RE = re.compile(r"^\s*(?:dcgmi\s+)?version\s*:\s*([0-9][0-9A-Za-z.+~-]*)", re.IGNORECASE | re.MULTILINE)


def parse_dcgmi_version(text: Any) -> str | None:
    """``dcgmi  version: 3.3.5`` (DCGM 3.x/4.x ``dcgmi --version``) -> ``3.3.5``."""
    match = _DCGM_VERSION_RE.search(_text(text))
    return match.group(1) if match else None


_OFED_RE = re.compile(r"(?:MLNX_OFED_LINUX|OFED-internal|OFED|DOCA[-_]OFED|rdma-core)[-_ ]+([0-9][0-9A-Za-z.+-]*?)"
                      r"(?::|\s|$)", re.MULTILINE)


def parse_ofed_version(text: Any) -> str | None:
    """``MLNX_OFED_LINUX-23.10-1.1.9.0:`` or ``OFED-internal-24.04-0.6.6:`` (``ofed_info -s``) -> ``23.10-1.1.9.0``."""
    match = _OFED_RE.search(_text(text))
    return match.group(1) if match else None


_FM_RE = re.compile(r"Fabric\s*Manager\s+version\s+is\s*:\s*([0-9][0-9.]*)", re.IGNORECASE)


def parse_fabricmanager_version(text: Any) -> str | None:
    """``Fabric Manager version is : 550.90.07`` (``nv-fabricmanager --version``) -> ``550.90.07``."""
    match = _FM_RE.search(_text(text))
    return match.group(1) if match else None


# The first line of /proc/driver/nvidia/version names the flavour of the loaded nvidia.ko:
#   open:        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.195.03  Release Build  (...)  <date>"
#   proprietary: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.216.03  Thu Apr  3 01:14:19 UTC 2025"
#                "NVRM version: NVIDIA UNIX Kernel Module for aarch64  535.161.08  Release Build  (...)"
_NVRM_RE = re.compile(r"^NVRM version:\s*NVIDIA UNIX\s+(Open\s+)?.*?Kernel Module\b.*?\s(\d{3,}\.\d+(?:\.\d+)?)\s",
                      re.MULTILINE)
_RELEASE_RE = re.compile(r"^(\d+)\.(\d+)")


@dataclass(frozen=True)
class KernelDriverFacts:
    """What the ``gpudirect_dmabuf`` collector printed: the loaded nvidia module's flavour and version
    (``/proc/driver/nvidia/version``) and the running kernel (``/proc/sys/kernel/osrelease``)."""

    nvrm_line: str | None        # None: /proc/driver/nvidia/version was not printed (the module is not loaded)
    open_module: bool | None     # True: the open GPU kernel modules (dual MIT/GPL); None when no NVRM line
    driver_version: str | None
    kernel_release: str | None   # e.g. 5.15.0-105-generic

    @property
    def kernel_version(self) -> tuple[int, int] | None:
        match = _RELEASE_RE.match(self.kernel_release or "")
        return (int(match.group(1)), int(match.group(2))) if match else None

    def to_dict(self) -> dict[str, Any]:
        return {"nvrm_line": self.nvrm_line, "open_module": self.open_module, "driver_version": self.driver_version,
                "kernel_release": self.kernel_release}


def parse_kernel_driver(text: Any) -> KernelDriverFacts:
    """The ``find ... -printf '\\n== %p\\n' -exec cat {} ;`` output over /proc/driver/nvidia/version and
    /proc/sys/kernel/osrelease: each file after its marker line. A file that is missing has no marker."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in _text(text).split("\n"):
        if line.startswith("== /"):
            current = sections.setdefault(line[3:].strip(), [])
        elif current is not None:
            current.append(line)
    version_text = "\n".join(sections.get("/proc/driver/nvidia/version", []))
    release = next((s.strip() for s in sections.get("/proc/sys/kernel/osrelease", []) if s.strip()), None)
    match = _NVRM_RE.search(version_text)
    nvrm = next((s.strip() for s in version_text.split("\n") if s.startswith("NVRM version:")), None)
    return KernelDriverFacts(nvrm, (bool(match.group(1)) if match else None) if nvrm else None,
                             match.group(2) if match else None, release)
