"""What operating system a node runs, read from the text of ``/etc/os-release`` and ``uname``: pure functions.

Every install step picks apt or dnf from these facts (``ActionContext.os_family`` detects them on first use), so this
module sits below ``base.py`` and imports nothing of ``nvdeploy.actions``: the context, the OS actions and the
package actions all read it, and none of them has to import another to learn the OS.
"""

from __future__ import annotations

from typing import Any, Optional

SUPPORTED_OS = ("ubuntu", "debian", "rhel", "rocky", "almalinux")
APT_FAMILY = ("ubuntu", "debian")
DNF_FAMILY = ("rhel", "rocky", "almalinux", "centos", "ol")
# uname -m -> the folder of NVIDIA's CUDA repository (Grace/ARM64 servers use sbsa).
ARCH_FOLDERS = {"x86_64": "x86_64", "aarch64": "sbsa", "arm64": "sbsa"}
# (name, argv) of the reads the facts come from, in the order os_facts takes their output.
OS_READS = (("os_release", ("cat", "/etc/os-release")), ("kernel", ("uname", "-r")), ("machine", ("uname", "-m")))


def parse_os_release(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip().strip('"').strip("'")
    return out


def distro_tag(os_id: str, version: str) -> str:
    """The folder of NVIDIA's CUDA repository for this OS: ubuntu2204, debian12, rhel9 (Rocky/Alma use RHEL's)."""
    major = version.split(".")[0]
    if os_id == "ubuntu":
        return "ubuntu" + version.replace(".", "")
    if os_id == "debian":
        return f"debian{major}"
    return f"rhel{major}"


def os_facts(os_release: str, kernel: Optional[str], machine: Optional[str]) -> dict[str, Any]:
    """The facts (os_id, os_version, os_name, kernel, os_family, arch, distro_tag, and os_problem when the family is
    unsupported) from the text of /etc/os-release and of ``uname -r`` / ``uname -m`` (None: that read failed)."""
    info = parse_os_release(os_release)
    os_id = info.get("ID", "").lower()
    version = info.get("VERSION_ID", "")
    like = info.get("ID_LIKE", "").lower().split()
    family: Optional[str] = None
    if os_id in APT_FAMILY or (os_id not in DNF_FAMILY and "debian" in like and os_id in SUPPORTED_OS):
        family = "apt"
    elif os_id in DNF_FAMILY:
        family = "dnf"
    facts: dict[str, Any] = dict(
        os_id=os_id, os_version=version, os_name=info.get("PRETTY_NAME", os_id),
        kernel=kernel.strip() if kernel is not None else "", os_family=family,
        arch=ARCH_FOLDERS.get(machine.strip(), machine.strip()) if machine is not None else "x86_64",
        distro_tag=distro_tag(os_id, version) if family else "")
    if family is None:
        facts["os_problem"] = (f"unsupported OS {info.get('PRETTY_NAME', os_id)!r} (ID={os_id}): nvdeploy "
                               "installs on Ubuntu/Debian (apt) and RHEL/Rocky/AlmaLinux (dnf)")
    return facts
