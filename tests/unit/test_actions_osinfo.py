"""The OS facts every install step picks apt or dnf from, read from /etc/os-release and uname (pure), and the
context that detects them on first use without importing the OS actions."""

from __future__ import annotations

from nvdeploy.actions import osinfo
from nvdeploy.actions.base import detect_os
from nvdeploy.results import CommandResult

UBUNTU = 'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\nID=ubuntu\nID_LIKE=debian\n'
ROCKY = 'NAME="Rocky Linux"\nVERSION_ID="9.3"\nID="rocky"\nID_LIKE="rhel centos fedora"\nPRETTY_NAME="Rocky 9.3"\n'


def test_ubuntu_on_grace_is_apt_with_the_sbsa_folder():
    facts = osinfo.os_facts(UBUNTU, "5.15.0-105-generic\n", "aarch64\n")
    assert facts == {"os_id": "ubuntu", "os_version": "22.04", "os_name": "Ubuntu 22.04.4 LTS",
                     "kernel": "5.15.0-105-generic", "os_family": "apt", "arch": "sbsa", "distro_tag": "ubuntu2204"}


def test_rocky_is_dnf_with_rhels_folder():
    facts = osinfo.os_facts(ROCKY, "5.14.0-362.el9.x86_64", "x86_64")
    assert (facts["os_family"], facts["distro_tag"], facts["arch"]) == ("dnf", "rhel9", "x86_64")
    assert "os_problem" not in facts


def test_an_unsupported_os_has_no_family_and_says_why():
    facts = osinfo.os_facts('ID=arch\nPRETTY_NAME="Arch Linux"\n', "6.8.1-arch1-1", "x86_64")
    assert facts["os_family"] is None and facts["distro_tag"] == ""
    assert facts["os_problem"].startswith("unsupported OS 'Arch Linux' (ID=arch)")


def test_failed_uname_reads_give_no_kernel_and_the_default_folder():
    facts = osinfo.os_facts(UBUNTU, None, None)
    assert (facts["kernel"], facts["arch"]) == ("", "x86_64")


class _Reads:
    """An ActionContext stand-in with just what detect_os uses: read_many and facts."""

    def __init__(self, answers: dict[str, CommandResult]) -> None:
        self.answers = answers
        self.facts: dict = {}
        self.asked: list[str] = []

    def read_many(self, items):
        self.asked = [name for name, _ in items]
        return [self.answers[name] for name, _ in items]


def _ok(name: str, text: str) -> CommandResult:
    return CommandResult(name=name, command=name, rc=0, stdout=text.encode())


def test_detect_os_reads_the_three_sources_in_one_batch():
    ctx = _Reads({"os_release": _ok("os_release", ROCKY), "kernel": _ok("kernel", "5.14.0\n"),
                  "machine": _ok("machine", "x86_64\n")})
    detect_os(ctx)  # type: ignore[arg-type]
    assert ctx.asked == [name for name, _ in osinfo.OS_READS]
    assert ctx.facts["os_family"] == "dnf" and ctx.facts["kernel"] == "5.14.0"


def test_an_unreadable_os_release_is_a_problem_not_a_family():
    missing = CommandResult(name="os_release", command="cat /etc/os-release", rc=1,
                            stderr=b"cat: /etc/os-release: No such file or directory\n")
    ctx = _Reads({"os_release": missing, "kernel": _ok("kernel", "6.1"), "machine": _ok("machine", "x86_64")})
    detect_os(ctx)  # type: ignore[arg-type]
    assert ctx.facts["os_family"] is None
    assert ctx.facts["os_problem"].startswith("cannot read /etc/os-release: exit 1: cat: /etc/os-release")


def test_the_old_names_are_still_importable_from_the_system_actions():
    from nvdeploy.actions import system

    assert system.detect_os is detect_os and system.parse_os_release is osinfo.parse_os_release
    assert system.distro_tag("debian", "12") == "debian12" and system.SUPPORTED_OS == osinfo.SUPPORTED_OS


def test_the_loaded_driver_version_is_read_without_r610s_deprecation_note():
    from nvdeploy.actions.system import smi_driver
    from nvdeploy.results import CommandResult

    def loaded(text: str, rc: int = 0):
        return smi_driver(None, CommandResult("driver_version", "nvidia-smi", rc, text.encode()))  # type: ignore

    noted = "610.43.02 [Deprecated; will be removed in CUDA 14.0. Use KMD Version instead]\n"
    assert loaded(noted * 8) == ("ok", "610.43.02")
    assert loaded("550.90.07\n" * 8) == ("ok", "550.90.07")
    assert loaded("550.90.07\n550.54.15\n") == ("ok", "550.54.15,550.90.07")  # two versions: never one of them
    assert loaded("", 9) == ("not_loaded", None)
