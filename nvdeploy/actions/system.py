"""Node-level actions: OS detection, the driver preflight, systemd units, kernel modules, reboot, CPU governor."""

from __future__ import annotations

import re
import time
from typing import Any, Mapping, Optional

from nvdeploy.actions.base import (
    Action,
    ActionContext,
    Cmd,
    Param,
    Probe,
    StepFailed,
    describe_failure,
    detect_os,
    register,
)

# The OS facts are read in osinfo, below base (which detects the OS on first use); importable from here too.
from nvdeploy.actions.osinfo import APT_FAMILY, ARCH_FOLDERS, DNF_FAMILY, SUPPORTED_OS, distro_tag, parse_os_release  # noqa: F401
from nvdeploy.parsers.nvidia_smi import version_of
from nvdeploy.results import CommandResult, ErrorReason
from nvdeploy.transport.base import TransportError

# Writes $1 to the file $2 (the values are arguments of the script, never part of its text).
WRITE_SCRIPT = 'umask 022 && printf "%s\\n" "$1" > "$2"'
WRITE_HELPER = "nvdeploy-write"
UNIT = r"[A-Za-z0-9][A-Za-z0-9@._-]*"
MODULE = r"[a-z0-9_]+"


def write_file_cmd(name: str, path: str, content: str) -> Cmd:
    """A root command that writes ``content`` (one argv word) to ``path``."""
    return Cmd(name, ("sh", "-c", WRITE_SCRIPT, WRITE_HELPER, content, path))


@register
class DetectOs(Action):
    """Reads /etc/os-release and ``uname -r``: Ubuntu/Debian use apt, RHEL/Rocky/AlmaLinux dnf; anything else
    FAILs the node before anything is changed."""

    name = "os.detect"
    mutates = False
    params = (Param("supported", "list", default=list(SUPPORTED_OS), pattern=r"[a-z]+",
                    doc="OS ids accepted (of ubuntu, debian, rhel, rocky, almalinux)"),)

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        detect_os(ctx)
        if ctx.facts.get("os_family") is None:
            return Probe(failure=ctx.facts.get("os_problem", "unsupported OS"))
        if ctx.facts["os_id"] not in p["supported"]:
            return Probe(failure=f"OS {ctx.facts['os_name']!r} is not in this playbook's supported list "
                         f"({', '.join(p['supported'])})")
        return Probe(note=f"{ctx.facts['os_name']} ({ctx.facts['os_family']}), kernel {ctx.facts['kernel']}")


def package_query(family: str, names: list[str]) -> tuple[str, tuple[str, ...]]:
    """(name, argv) of the command that lists the installed versions of ``names``."""
    if family == "apt":
        return "dpkg_query", ("dpkg-query", "-W", "-f=${Package}\\t${Version}\\t${db:Status-Abbrev}\\n", *names)
    return "rpm_query", ("rpm", "-q", "--qf", "%{NAME}\\t%{VERSION}-%{RELEASE}\\n", *names)


def parse_packages(family: str, names: list[str], result: CommandResult) -> dict[str, Optional[str]]:
    if result.rc == 127:
        raise StepFailed(f"package query failed: {describe_failure(result)}", result)
    found: dict[str, Optional[str]] = {n: None for n in names}
    for line in result.text.splitlines():
        parts = line.split("\t")
        if family == "apt" and len(parts) >= 3 and parts[0] in found and parts[2].startswith("ii"):
            found[parts[0]] = parts[1]
        elif family == "dnf" and len(parts) == 2 and parts[0] in found:
            found[parts[0]] = parts[1]
    return found


def installed_versions(ctx: ActionContext, names: list[str]) -> dict[str, Optional[str]]:
    """Installed version of each package (None when not installed), from dpkg-query or rpm."""
    if not names:
        return {}
    family = ctx.os_family()
    return parse_packages(family, names, ctx.read(*package_query(family, names)))


SMI_DRIVER = ("driver_version", ("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"))


def smi_driver(ctx: ActionContext, result: Optional[CommandResult] = None) -> tuple[str, Optional[str]]:
    """(state, version) of the loaded driver from nvidia-smi: ok, missing (127), not_loaded (9), mismatch (18)."""
    result = result if result is not None else ctx.read(*SMI_DRIVER)
    if result.rc == 0:
        # The version alone, as the parsers read it: R610+ may follow it with "[Deprecated; ... KMD Version ...]".
        versions = sorted({version_of(line) or line.strip() for line in result.text.splitlines() if line.strip()})
        return ("ok", versions[0]) if len(versions) == 1 else ("ok", ",".join(versions))
    if result.rc == 127:
        return "missing", None
    if result.rc == 18:
        return "mismatch", None
    if result.rc == 9:
        return "not_loaded", None
    return f"nvidia-smi exit {result.rc}", None


def preflight_problems(ctx: ActionContext, check_processes: bool = True, check_headers: bool = True,
                       check_secure_boot: bool = True) -> list[str]:
    """Why a driver install must not run on this node now (empty: it may)."""
    problems = []
    family = ctx.os_family()
    kernel = ctx.facts.get("kernel", "")
    package = f"linux-headers-{kernel}" if family == "apt" else f"kernel-devel-{kernel}"
    apps, headers, sb = ctx.read_many([
        ("gpu_processes", ("nvidia-smi", "--query-compute-apps=pid,process_name", "--format=csv,noheader")),
        package_query(family, [package]), ("secure_boot", ("mokutil", "--sb-state"))])
    if check_processes and apps.rc == 0:
        rows = [line.strip() for line in apps.text.splitlines() if line.strip()]
        if rows:
            problems.append(f"{len(rows)} GPU process(es) running ({'; '.join(rows[:3])}): drain the node first")
    if check_headers and not parse_packages(family, [package], headers).get(package):
        problems.append(f"kernel headers for {kernel} are not installed ({package}): the driver's DKMS build "
                        "would fail")
    if check_secure_boot:
        if sb.rc == 0 and "SecureBoot enabled" in sb.text:
            problems.append("Secure Boot is enabled: the DKMS-built NVIDIA modules are unsigned and would not load "
                            "(enroll a MOK signing key or disable Secure Boot)")
    return problems


def dnf_modules(ctx: ActionContext) -> bool:
    """Whether this dnf node has module streams: RHEL 8/9 (and their rebuilds) do, RHEL 10 dropped modularity."""
    major = str(ctx.facts.get("os_version", "")).split(".")[0]
    return not (major.isdigit() and int(major) >= 10)


def driver_packages(ctx: ActionContext, branch: str, open_modules: bool, fabricmanager: bool) -> dict[str, str]:
    """{'driver': package, 'kmod': package (dnf), 'fabricmanager': package?, 'stream': dnf module stream?} for this
    node's OS. The flavour is in the apt package name (``-open``); dnf has one ``nvidia-driver`` and a kernel-module
    package per flavour (``kmod-nvidia-open-dkms`` / ``kmod-nvidia-latest-dkms``), chosen by the module stream
    (``<branch>-open`` / ``<branch>-dkms``) where dnf has modules."""
    if ctx.os_family() == "apt":
        names = {"driver": f"nvidia-driver-{branch}{'-open' if open_modules else ''}"}
        if fabricmanager:
            names["fabricmanager"] = f"nvidia-fabricmanager-{branch}"
        return names
    names = {"driver": "nvidia-driver", "kmod": f"kmod-nvidia-{'open' if open_modules else 'latest'}-dkms"}
    if dnf_modules(ctx):
        names["stream"] = f"nvidia-driver:{branch}-{'open' if open_modules else 'dkms'}"
    if fabricmanager:
        names["fabricmanager"] = "nvidia-fabric-manager"
    return names


@register
class DriverPreflight(Action):
    """Before a driver install or change: refuses (FAIL, nothing changed) when GPU processes are running, the
    running kernel's headers are missing, or Secure Boot is on. Passes at once when the branch is installed."""

    name = "driver.preflight"
    mutates = False
    params = (Param("branch", required=True, pattern=r"\d{3}", doc="driver branch to be installed, e.g. 550"),
              Param("open", "bool", default=False, doc="the open kernel modules flavour"),
              Param("check_processes", "bool", default=True), Param("check_headers", "bool", default=True),
              Param("check_secure_boot", "bool", default=True))

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        names = driver_packages(ctx, p["branch"], p["open"], False)
        family = ctx.os_family()
        packages, smi = ctx.read_many([package_query(family, [names["driver"]]), SMI_DRIVER])
        installed = parse_packages(family, [names["driver"]], packages)[names["driver"]]
        state, loaded = smi_driver(ctx, smi)
        if installed and installed.startswith(p["branch"] + ".") and state == "ok":
            return Probe(note=f"driver {loaded} of branch {p['branch']} installed and loaded: no install needed")
        problems = preflight_problems(ctx, p["check_processes"], p["check_headers"], p["check_secure_boot"])
        if problems:
            return Probe(failure="preflight refused the driver install: " + "; ".join(problems))
        return Probe(note="no GPU process, kernel headers present, Secure Boot off")


@register
class ServiceRunning(Action):
    """A systemd unit enabled at boot and running now (``systemctl enable --now``)."""

    name = "service.running"
    params = (Param("unit", required=True, pattern=UNIT, doc="the systemd unit, e.g. nvidia-dcgm"),
              Param("enabled", "bool", default=True, doc="false: stopped and disabled"))

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        unit = p["unit"]
        enabled, active = ctx.read_many([("is_enabled", ("systemctl", "is-enabled", unit)),
                                         ("is_active", ("systemctl", "is-active", unit))])
        missing = "No such file" in enabled.err_text or "not-found" in enabled.text
        # A unit not installed yet is reported as such; enabling it then fails with systemctl's own message.
        current = {f"{unit} enabled": "not installed" if missing else enabled.text.strip() or "unknown",
                   f"{unit} state": active.text.strip() or "unknown"}
        want = p["enabled"]
        return Probe(current=current, desired={f"{unit} enabled": "enabled" if want else "disabled",
                                               f"{unit} state": "active" if want else "inactive"})

    def plan(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> list[Cmd]:
        unit = p["unit"]
        if not p["enabled"]:
            return [Cmd("disable", ("systemctl", "disable", "--now", unit))]
        if f"{unit} enabled" in probe.differing():
            return [Cmd("enable", ("systemctl", "enable", "--now", unit))]
        return [Cmd("start", ("systemctl", "start", unit))]


@register
class KernelModule(Action):
    """A kernel module loaded now (``modprobe``) and, with ``persist``, at every boot
    (``/etc/modules-load.d/nvdeploy-<name>.conf``)."""

    name = "kernel.module"
    params = (Param("module", required=True, pattern=MODULE, doc="e.g. nvidia_peermem"),
              Param("persist", "bool", default=True, doc="also load it at boot"))

    def _conf(self, p: Mapping[str, Any]) -> str:
        return f"/etc/modules-load.d/nvdeploy-{p['module']}.conf"

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        module = p["module"]
        lsmod, conf = ctx.read_many([("lsmod", ("lsmod",)), ("conf", ("cat", self._conf(p)))])
        loaded = any(line.split()[:1] == [module] for line in lsmod.text.splitlines())
        current = {f"module {module}": "loaded" if loaded else "not loaded"}
        desired = {f"module {module}": "loaded"}
        if p["persist"]:
            current[self._conf(p)] = conf.text.strip() if conf.ok else "absent"
            desired[self._conf(p)] = module
        return Probe(current=current, desired=desired)

    def plan(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> list[Cmd]:
        cmds = []
        if f"module {p['module']}" in probe.differing():
            cmds.append(Cmd("load_module", ("modprobe", p["module"])))
        if p["persist"] and self._conf(p) in probe.differing():
            cmds.append(write_file_cmd("write_conf", self._conf(p), p["module"]))
        return cmds


BOOT_ID = "/proc/sys/kernel/random/boot_id"


@register
class Reboot(Action):
    """Reboots the node when an earlier step needs it (a new driver while an older module is loaded), then waits
    for it to come back with a new boot id (SSH reconnect), up to ``timeout_s``. Refused without
    ``--allow-reboot`` (or the host var ``allow_reboot: true``)."""

    name = "node.reboot"
    params = (Param("only_if_required", "bool", default=True, doc="reboot only when a step asked for it"),
              Param("timeout_s", "number", default=900.0, doc="how long to wait for the node to come back"),
              Param("wait_s", "number", default=10.0, doc="pause before the first reconnect attempt"),
              Param("poll_s", "number", default=5.0, doc="pause between reconnect attempts"))

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        why = ctx.facts.get("reboot_required")
        if not why and p["only_if_required"]:
            return Probe(note="no reboot required")
        why = why or "requested by the playbook"
        if not ctx.allow_reboot:
            # Not a fault of the node: the install is done up to the reboot nvdeploy may not do (ERROR, not FAIL).
            return Probe(failure=f"reboot required ({why}) but not allowed: rerun with --allow-reboot "
                         "(or set allow_reboot: true for the host)", reason=ErrorReason.REBOOT_REQUIRED)
        return Probe(current={"reboot": f"pending: {why}"}, desired={"reboot": "done*"})

    def plan(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> list[Cmd]:
        return [Cmd("reboot", ("reboot",), timeout_s=60)]

    def planned(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> None:
        ctx.facts.pop("reboot_required", None)
        planned = ctx.facts.get("planned_driver")
        if planned:
            ctx.facts["planned_loaded"] = planned["text"]  # what the node boots with

    def apply(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> None:
        old = ctx.read("boot_id", ("cat", BOOT_ID)).text.strip()
        result = ctx.execute("reboot", ("reboot",), sudo=True, mutates=True, timeout_s=60)
        going_down = result.error in (ErrorReason.CONNECTION_LOST, ErrorReason.TIMEOUT, ErrorReason.INCOMPLETE)
        if result.rc != 0 and not going_down:
            raise StepFailed(f"reboot failed: {describe_failure(result)}", result)
        ctx.facts["reboot_started"] = time.monotonic()
        self._wait(ctx, p, old)

    def _wait(self, ctx: ActionContext, p: Mapping[str, Any], old: str) -> None:
        deadline = time.monotonic() + float(p["timeout_s"])
        ctx.transport.close()
        if ctx.sleep(float(p["wait_s"])):
            raise StepFailed("interrupted while waiting for the node to reboot", reason=ErrorReason.INTERRUPTED)
        last = "no answer yet"
        while True:
            try:
                ctx.reconnect()
                now = ctx.read("boot_id", ("cat", BOOT_ID)).text.strip()
                if now and now != old:
                    ctx.facts["boot_id"] = now
                    return
                last = "still the old boot id (not rebooted yet)"
                ctx.transport.close()
            except (TransportError, StepFailed) as exc:
                last = getattr(exc, "detail", None) or getattr(exc, "message", str(exc))
            if time.monotonic() >= deadline:
                raise StepFailed(f"the node did not come back with a new boot id within {p['timeout_s']:g} s "
                                 f"({last})", reason=ErrorReason.TIMEOUT)
            if ctx.sleep(min(float(p["poll_s"]), max(0.0, deadline - time.monotonic()))):
                raise StepFailed("interrupted while waiting for the node to reboot", reason=ErrorReason.INTERRUPTED)

    def verify(self, ctx: ActionContext, p: Mapping[str, Any], before: Probe) -> Probe:
        ctx.facts.pop("reboot_required", None)
        waited = time.monotonic() - ctx.facts.get("reboot_started", time.monotonic())
        return Probe(current={"reboot": f"done (back after {waited:.0f} s)"}, desired={"reboot": "done*"})


_GOVERNOR = re.compile(r'The governor "([^"]+)"')


@register
class CpuGovernor(Action):
    """The CPU frequency governor of every core (``cpupower frequency-set -g``); ``performance`` keeps the cores
    that feed the GPUs at full clock. Not persistent across reboots (re-run optimize, or use tuned)."""

    name = "cpu.governor"
    params = (Param("governor", "choice", default="performance",
                    choices=("performance", "powersave", "schedutil", "ondemand")),)

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        info = ctx.read("policy", ("cpupower", "frequency-info", "-p"))
        if info.rc == 127:
            return Probe(failure="cpupower not found: install linux-tools-$(uname -r) (apt) or kernel-tools (dnf)")
        match = _GOVERNOR.search(info.text)
        if not match:
            return Probe(skip="no CPU frequency scaling driver on this node (cpupower reports no policy)")
        return Probe(current={"cpu governor": match.group(1)}, desired={"cpu governor": p["governor"]})

    def plan(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> list[Cmd]:
        return [Cmd("set", ("cpupower", "frequency-set", "-g", p["governor"]))]
