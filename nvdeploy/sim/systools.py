"""Fake service, kernel-module, boot and OS tools of stateful simulated nodes (see state.py), and the hook.

Registered tools (``register_tool``): ``modprobe``, ``mokutil``, ``cpupower``, ``reboot``, ``uname`` and ``cat``
(``/etc/os-release``, the boot id and the files nvdeploy wrote; on fake SSH nodes every other ``cat`` runs the real
one). Packages are in apt_tools.py and dnf_tools.py (what they offer: pkgrepo.py), curl in pkgtools.py,
nvidia-smi's settings in smitools.py. A hook (``TOOL_HOOKS``) that sees every command first handles:

- ``sudo``: ``-n`` or ``-S`` (one password line from stdin), then the command as root. In-process it always
  works; on fake SSH nodes only with the ``sudo_nopasswd`` or ``sudo_password:<pw>`` fault (see state.py).
- ``sh -c SCRIPT nvdeploy-write CONTENT PATH`` and ``sh -c SCRIPT nvdeploy-untar SRC DEST MARKER``: the two helper
  scripts of the install actions (write a file; unpack a prebuilt nccl-tests tarball), as root only.
- ``systemctl`` (``is-active``, ``is-enabled``, ``enable [--now]``, ``disable``, ``start``, ``stop``, ``restart``,
  ``daemon-reload``, ``reboot``) from the node's units; ``is-active`` of a node whose state nothing touched is left
  to nvdeploy/sim/datacenter.py. ``lsmod`` likewise.
- ``nvidia-smi`` settings and state queries (smitools.py, in ``STATE_TOOLS``); not found (127) without the driver
  package, exit 18 (driver/library mismatch) while an older module is loaded.
- ``nv-fabricmanager``, ``dcgmi``, ``nv-hostengine``, ``nvidia-ctk``, ``all_reduce_perf``: not found (127) until
  their package is installed.

Every command these handle is appended to the node's call log (argv, whether it ran under sudo, whether it
changed the node, exit status): tests read it to prove dry-run and a second run changed nothing, and that only
the steps that need root used sudo.
"""

from __future__ import annotations

import datetime
import os
import re
import sys
import threading
import uuid
from collections.abc import Sequence
from typing import Callable, Optional

from nvdeploy.sim import state as st
from nvdeploy.sim.scenario import NodeScenario, node_facts, register_fault
from nvdeploy.sim.tools import BOOT_TIME, OUTPUT_FILTERS, TOOL_HOOKS, TOOLS, ToolOutput, _run_tool, register_tool

WRITE_HELPER = "nvdeploy-write"
UNTAR_HELPER = "nvdeploy-untar"
_CTX = threading.local()
_PROVIDED_BY = {"nvidia-smi": "driver", "nv-fabricmanager": "fabricmanager", "dcgmi": "dcgm", "nv-hostengine": "dcgm",
                "nvidia-ctk": "nvidia-container-toolkit", "all_reduce_perf": "nccl-tests"}
GOVERNORS = ("performance", "powersave", "schedutil", "ondemand")


def _root() -> bool:
    return bool(getattr(_CTX, "sudo", False))


def _text(stdout: str = "", stderr: str = "", rc: int = 0) -> ToolOutput:
    return ToolOutput(stdout.encode(), stderr.encode(), rc)


def _not_found(tool: str) -> ToolOutput:
    return _text(stderr=f"sh: 1: {tool}: not found\n", rc=127)


def _record(scenario: NodeScenario, argv: Sequence[str], mutated: bool, out: ToolOutput) -> ToolOutput:
    st.log_call(scenario, argv, _root(), mutated, out.rc)
    _CTX.logged = True
    return out


Handler = Callable[[NodeScenario, list[str]], "tuple[ToolOutput, bool]"]


def _tool(name: str) -> Callable[[Handler], Handler]:
    """Register ``name``; the handler returns (output, whether it changed the node); every call is logged."""

    def wrap(function: Handler) -> Handler:
        def run(scenario: NodeScenario, args: Sequence[str]) -> ToolOutput:
            out, mutated = function(scenario, list(args))
            return _record(scenario, [name, *args], mutated, out)

        register_tool(name)(run)
        return function

    return wrap


def _installed_kind(state: st.NodeState, kind: str) -> bool:
    if kind == "driver":
        return state.installed_driver is not None
    if kind == "fabricmanager":
        return any(re.fullmatch(r"nvidia-fabric-?manager(-\d+)?", p) for p in state.packages)
    if kind == "dcgm":
        return any(p.startswith("datacenter-gpu-manager") for p in state.packages)
    if kind == "nccl-tests":
        return any(path.endswith("/.nvdeploy-source") for path in state.files)
    return kind in state.packages




# ---------------------------------------------------------------------------------------------------------------
# Kernel, boot, OS


def _load_nvidia(scenario: NodeScenario, state: st.NodeState) -> Optional[str]:
    """Load the nvidia modules of the installed driver; an error text when they cannot be loaded."""
    if state.installed_driver is None:
        return f"modprobe: FATAL: Module nvidia not found in directory /lib/modules/{state.kernel}\n"
    if state.secure_boot:
        return "modprobe: ERROR: could not insert 'nvidia': Key was rejected by service\n"
    if "nouveau" in state.modules:  # nouveau holds the GPUs: the nvidia probe finds no device
        return "modprobe: ERROR: could not insert 'nvidia': No such device\n"
    if state.loaded_driver is None:
        state.loaded_driver = state.installed_driver
        state.loaded_open = state.installed_open
    for name in ("nvidia", "nvidia_uvm", "nvidia_modeset"):
        if name not in state.modules:
            state.modules.append(name)
    return None


@_tool("modprobe")
def _modprobe(scenario: NodeScenario, args: list[str]) -> tuple[ToolOutput, bool]:
    names = [a for a in args if not a.startswith("-")]
    if len(names) != 1 or any(a.startswith("-") for a in args):
        return _text(stderr="modprobe: only 'modprobe NAME' is simulated\n", rc=1), False
    name = names[0].replace("-", "_")
    state = st.current(scenario)
    if name in state.modules:
        return _text(), False
    if not _root():
        return _text(stderr=f"modprobe: ERROR: could not insert '{name}': Operation not permitted\n", rc=1), False
    if name in ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm"):
        with st.mutate(scenario) as changed:
            problem = _load_nvidia(scenario, changed)
        if problem:
            return _text(stderr=problem, rc=1), False
        return _text(), True
    if name == "ib_umad":  # in-tree InfiniBand userspace MAD access (the fabric manager's path to NVSwitches)
        with st.mutate(scenario) as changed:
            changed.modules.append(name)
        return _text(), True
    if name == "nvidia_peermem":
        if "nvidia" not in state.modules:
            return _text(stderr="modprobe: ERROR: could not insert 'nvidia_peermem': Unknown symbol in module, or "
                         "unknown parameter (see dmesg)\n", rc=1), False
        if not st.ib_present(scenario):
            return _text(stderr="modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument\n", rc=1), False
        with st.mutate(scenario) as changed:
            changed.modules.append(name)
        return _text(), True
    return _text(stderr=f"modprobe: FATAL: Module {name} not found in directory /lib/modules/{state.kernel}\n",
                 rc=1), False


def boot(scenario: NodeScenario, state: st.NodeState) -> None:
    """What a reboot does: the installed driver loads, enabled units start, runtime GPU settings reset."""
    state.boots += 1
    state.modules = []
    state.loaded_driver = None
    state.loaded_open = None
    if scenario.has("nouveau") and state.files.get("sim:initramfs") != "nouveau-blacklisted":
        state.modules.append("nouveau")  # loaded from the initramfs until a rebuilt one blacklists it
    if state.installed_driver is not None and not state.secure_boot and "nouveau" not in state.modules:
        _load_nvidia(scenario, state)
        persisted = any("nvidia_peermem" in text for path, text in state.files.items()
                        if path.startswith("/etc/modules-load.d/"))
        if persisted and st.ib_present(scenario):
            state.modules.append("nvidia_peermem")
    if any(re.search(r"^ib_umad$", text, re.M) for path, text in state.files.items()
           if path.startswith("/etc/modules-load.d/")):
        state.modules.append("ib_umad")
    for unit, flags in state.services.items():
        flags[1] = flags[0] and _can_start(scenario, state, unit) is None
    state.persistence_pm = False
    state.compute_mode = "Default"
    state.app_clocks = None
    state.power_limit_w = None
    state.governor = st.DEFAULT_GOVERNOR
    state.gpu_processes = 0
    from nvdeploy.sim.mig_tool import at_boot

    at_boot(state)


@_tool("reboot")
def _reboot(scenario: NodeScenario, args: list[str]) -> tuple[ToolOutput, bool]:
    if not _root():
        return _text(stderr="Failed to set wall message, ignoring: Interactive authentication required.\n"
                     "Failed to reboot system via logind: Interactive authentication required.\n", rc=1), False
    if scenario.has("reboot_stuck"):
        return _text(), True
    with st.mutate(scenario) as changed:
        boot(scenario, changed)
    return _text(), True


@_tool("mokutil")
def _mokutil(scenario: NodeScenario, args: list[str]) -> tuple[ToolOutput, bool]:
    if args != ["--sb-state"]:
        return _text(stderr="mokutil: only --sb-state is simulated\n", rc=1), False
    enabled = st.current(scenario).secure_boot
    return _text(f"SecureBoot {'enabled' if enabled else 'disabled'}\n"), False


@_tool("uname")
def _uname(scenario: NodeScenario, args: list[str]) -> tuple[ToolOutput, bool]:
    state = st.current(scenario)
    host = scenario.name.split(".")[0]
    machine = "aarch64" if scenario.has("arm64") else "x86_64"
    answers = {"-r": state.kernel, "-m": machine, "-s": "Linux", "-n": host,
               "-a": f"Linux {host} {state.kernel} #1 SMP {machine} GNU/Linux"}
    if not args:
        return _text("Linux\n"), False
    if len(args) == 1 and args[0] in answers:
        return _text(answers[args[0]] + "\n"), False
    return _text(stderr="uname: option not simulated\n", rc=1), False


_OS_NAMES = {"ubuntu": "Ubuntu", "debian": "Debian GNU/Linux", "rhel": "Red Hat Enterprise Linux",
             "rocky": "Rocky Linux", "almalinux": "AlmaLinux", "centos": "CentOS Stream", "ol": "Oracle Linux Server"}


def os_release(state: st.NodeState) -> str:
    name = _OS_NAMES.get(state.os_id, state.os_id.capitalize())
    like = {"ubuntu": "debian", "rocky": "rhel centos fedora", "almalinux": "rhel centos fedora",
            "rhel": "fedora", "centos": "rhel fedora", "ol": "fedora"}.get(state.os_id)
    lines = [f'NAME="{name}"', f'VERSION_ID="{state.os_version}"', f"ID={state.os_id}",
             f'PRETTY_NAME="{name} {state.os_version}"']
    if like:
        lines.append(f'ID_LIKE="{like}"' if " " in like else f"ID_LIKE={like}")
    return "\n".join(lines) + "\n"


def boot_id(scenario: NodeScenario, state: st.NodeState) -> str:
    return str(uuid.UUID(bytes=__import__("hashlib").sha256(f"{scenario.name}/boot/{state.boots}".encode())
                         .digest()[:16]))


@_tool("cat")
def _cat(scenario: NodeScenario, args: list[str]) -> tuple[ToolOutput, bool]:
    state = st.current(scenario)
    out, errors = [], []
    for path in args:
        if path == "/etc/os-release":
            out.append(os_release(state))
        elif path == "/proc/sys/kernel/random/boot_id":
            out.append(boot_id(scenario, state) + "\n")
        elif path in state.files and not path.startswith("dnf-module:"):
            out.append(state.files[path])
        else:
            errors.append(f"cat: {path}: No such file or directory\n")
    return _text("".join(out), "".join(errors), 1 if errors else 0), False


@_tool("cpupower")
def _cpupower(scenario: NodeScenario, args: list[str]) -> tuple[ToolOutput, bool]:
    state = st.current(scenario)
    if args[:1] == ["frequency-info"] and set(args[1:]) <= {"-p", "--policy"}:
        return _text("analyzing CPU 0:\n  current policy: frequency should be within 800 MHz and 3.80 GHz.\n"
                     f'                  The governor "{state.governor}" may decide which speed to use\n'
                     "                  within this range.\n"), False
    if len(args) == 3 and args[0] == "frequency-set" and args[1] in ("-g", "--governor"):
        governor = args[2]
        if not _root() or governor not in GOVERNORS:
            return _text(stderr="Error setting new values. Common errors:\n- Do you have proper administration rights? "
                         "(super-user?)\n- Is the governor you requested available and modprobed?\n", rc=1), False
        if state.governor == governor:
            return _text("".join(f"Setting cpu: {i}\n" for i in range(4))), False
        with st.mutate(scenario) as changed:
            changed.governor = governor
        return _text("".join(f"Setting cpu: {i}\n" for i in range(4))), True
    return _text(stderr="cpupower: only 'frequency-info -p' and 'frequency-set -g GOV' are simulated\n", rc=1), False


# ---------------------------------------------------------------------------------------------------------------
# Services


def _can_start(scenario: NodeScenario, state: st.NodeState, unit: str) -> Optional[str]:
    """None when ``unit`` can run now, else why not."""
    driver_ok = st.driver_status(scenario, state) == "ok"
    if unit == "nvidia-persistenced" and not driver_ok:
        return "the NVIDIA driver is not loaded"
    if unit == "nvidia-fabricmanager":
        if not scenario.hardware.gpu.nvswitch:
            return "no NVSwitch found"
        fm = next((st.upstream(v) for p, v in state.packages.items()
                   if re.fullmatch(r"nvidia-fabric-?manager(-\d+)?", p)), None)
        if not driver_ok or fm != state.loaded_driver:
            return "fabric manager and driver versions differ"
        if scenario.hardware.gpu.nvlsm and ("nvlsm" not in state.packages or "ib_umad" not in state.modules):
            # NVLink 5: nvidia-fabricmanager-start.sh starts NVLSM first, over ib_umad.
            return "NVLink 5 system: NVLSM or the ib_umad module missing (NV_WARN_NOTHING_TO_DO)"
    if unit == "nvidia-imex":
        # IMEX checks the loaded driver's version at start and aborts on another one (NVIDIA IMEX guide).
        imex = next((st.upstream(v) for p, v in state.packages.items() if re.fullmatch(r"nvidia-imex(-\d+)?", p)),
                    None)
        if not driver_ok or imex != state.loaded_driver:
            return "IMEX and driver versions differ"
    return None


def _systemctl(scenario: NodeScenario, args: list[str]) -> tuple[ToolOutput, bool]:
    options = [a for a in args if a.startswith("-")]
    words = [a for a in args if not a.startswith("-")]
    if not words:
        return _text(stderr="Too few arguments.\n", rc=1), False
    verb, units = words[0], [u.removesuffix(".service") for u in words[1:]]
    state = st.current(scenario)
    if verb == "daemon-reload":
        return (_text(), False) if _root() else (_text(stderr="Failed to reload daemon: Access denied\n", rc=1), False)
    if verb == "reboot":
        return _reboot(scenario, [])
    if not units:
        return _text(stderr="Too few arguments.\n", rc=1), False
    if verb == "is-active":
        lines = [_unit_active(scenario, state, u) for u in units]
        return _text("".join(line + "\n" for line in lines), rc=0 if all(x == "active" for x in lines) else 3), False
    if verb == "is-enabled":
        out, err, rc = [], [], 0
        for unit in units:
            flags = state.service(unit)
            if flags is None:
                err.append(f"Failed to get unit file state for {unit}.service: No such file or directory\n")
                rc = 1
            elif state.files.get(f"/etc/systemd/system/{unit}.service") == "/dev/null":
                out.append("masked\n")  # systemctl mask links the unit file to /dev/null
                rc = 1
            else:
                out.append("enabled\n" if flags[0] else "disabled\n")
                rc = rc or (0 if flags[0] else 1)
        return _text("".join(out), "".join(err), rc), False
    if verb not in ("enable", "disable", "start", "stop", "restart"):
        return _text(stderr=f"Unknown command verb {verb}.\n", rc=1), False
    missing = [u for u in units if state.service(u) is None]
    if missing:
        what = "enable" if verb in ("enable", "disable") else verb
        return _text(stderr=f"Failed to {what} unit: Unit file {missing[0]}.service does not exist.\n", rc=1 if
                     what == "enable" else 5), False
    if not _root():
        return _text(stderr=f"Failed to {verb} unit: Access denied\n", rc=1), False
    now = "--now" in options
    errors: list[str] = []
    mutated = False
    with st.mutate(scenario) as changed:
        for unit in units:
            flags = changed.services[unit]
            before = list(flags)
            if verb in ("enable", "disable"):
                flags[0] = verb == "enable"
            start = verb in ("start", "restart") or (verb == "enable" and now)
            stop = verb == "stop" or (verb == "disable" and now)
            if start:
                problem = _can_start(scenario, changed, unit)
                if problem:
                    flags[1] = False
                    errors.append(f"Job for {unit}.service failed because the control process exited with error "
                                  f"code.\nSee \"systemctl status {unit}.service\" and \"journalctl -xeu "
                                  f"{unit}.service\" for details.\n")
                else:
                    flags[1] = True
            if stop:
                flags[1] = False
            mutated = mutated or flags != before or verb == "restart"
    created = "".join(f"Created symlink /etc/systemd/system/multi-user.target.wants/{u}.service \u2192 "
                      f"/lib/systemd/system/{u}.service.\n" for u in units if verb == "enable")
    return _text("", created + "".join(errors), 1 if errors else 0), mutated


def _unit_active(scenario: NodeScenario, state: st.NodeState, unit: str) -> str:
    flags = state.service(unit)
    if flags is not None:
        return "active" if flags[1] else ("failed" if flags[0] else "inactive")
    if unit.startswith(("nvidia", "nv-", "dcgm")) or "systemctl" not in TOOLS:
        return "inactive"
    return TOOLS["systemctl"](scenario, ["is-active", unit]).stdout.decode().strip() or "inactive"


# ---------------------------------------------------------------------------------------------------------------
# lsmod


_NVIDIA_MODULES = {"nvidia_uvm": ("4956160", "4", ""), "nvidia_modeset": ("1638400", "1", ""),
                   "nvidia": ("8597504", "29", "nvidia_uvm,nvidia_peermem,nvidia_modeset"),
                   "nvidia_peermem": ("16384", "0", "")}


def _lsmod(scenario: NodeScenario, state: st.NodeState) -> ToolOutput:
    rows: list[tuple[str, str, str, str]] = []
    if "nouveau" in state.modules:
        rows.append(("nouveau", "2793472", "0", ""))
    if "nvidia_peermem" in state.modules:
        rows.append(("nvidia_peermem", "16384", "0", ""))
    umad = "ib_umad" in state.modules
    if umad:
        rows.append(("ib_umad", "45056", "0", ""))
    if st.ib_present(scenario) or umad:
        users = ("ib_umad," if umad else "") + "ib_uverbs,mlx5_ib"
        rows += [("mlx5_ib", "454656", "0", ""), ("ib_uverbs", "196608", "2", "mlx5_ib"),
                 ("ib_core", "487424", str(users.count(",") + 1), users), ("mlx5_core", "2191360", "1", "mlx5_ib")]
    for name in ("nvidia_uvm", "nvidia_modeset", "nvidia"):
        if name in state.modules:
            size, used, by = _NVIDIA_MODULES[name]
            if "nvidia_peermem" not in state.modules:
                by = by.replace("nvidia_peermem,", "")
            rows.append((name, size, used, by))
    lines = ["Module                  Size  Used by"]
    lines += [f"{name:<19} {size:>8}  {used}" + (f" {by}" if by else "") for name, size, used, by in rows]
    return _text("\n".join(lines) + "\n")


# ---------------------------------------------------------------------------------------------------------------
# The hook: sudo, the helper scripts, and tools other modules own


def _sudo_allows(scenario: NodeScenario, options: list[str]) -> Optional[str]:
    """None when sudo runs the command; else what sudo prints."""
    if not os.environ.get(st.NODE_ENV):
        return None  # in-process: sudo always works, as before stateful nodes existed
    if scenario.has("sudo_nopasswd"):
        return None
    password = next((m.group(1) for f in scenario.faults for m in [st.SUDO_PASSWORD_FAULT.fullmatch(f)] if m), None)
    if "-S" in options or "--stdin" in options:
        given = sys.stdin.buffer.readline().rstrip(b"\n").decode("utf-8", "replace")
        if password is not None and given == password:
            return None
        return "Sorry, try again.\nsudo: 1 incorrect password attempt\n"
    return "sudo: a password is required\n"


def _sudo(scenario: NodeScenario, argv: Sequence[str]) -> ToolOutput:
    args = list(argv[1:])
    options: list[str] = []
    while args and args[0].startswith("-"):
        option = args.pop(0)
        if option == "--":
            break
        options.append(option)
        if option in ("-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U") and args:
            args.pop(0)
    if len(args) >= 4 and args[:3] == ["sh", "-c", 'exec "$@" </dev/null']:
        args = args[4:]  # the transport's password wrapper: the command gets /dev/null as its stdin
    problem = _sudo_allows(scenario, options)
    if problem:
        out = _text(stderr=problem, rc=1)
        st.log_call(scenario, args, True, False, 1)
        return out
    previous = getattr(_CTX, "sudo", False)
    _CTX.sudo, _CTX.logged = True, False
    try:
        out = _run_tool(scenario, args)
        if not _CTX.logged:
            st.log_call(scenario, args, True, False, out.rc)
        return out
    finally:
        _CTX.sudo = previous


def _helper(scenario: NodeScenario, name: str, args: list[str]) -> tuple[ToolOutput, bool]:
    if not _root():
        target = args[1] if name == WRITE_HELPER and len(args) > 1 else (args[1] if args[1:] else "?")
        return _text(stderr=f"{name}: 1: cannot create {target}: Permission denied\n", rc=2), False
    if name == WRITE_HELPER and len(args) == 2:
        content, path = args
        state = st.current(scenario)
        if state.files.get(path) == content + "\n":
            return _text(), False
        with st.mutate(scenario) as changed:
            changed.files[path] = content + "\n"
            if path.startswith("/etc/apt/sources.list.d/"):
                changed.apt_updated = False
        return _text(), True
    if name == UNTAR_HELPER and len(args) == 3:
        source, dest, marker = args
        state = st.current(scenario)
        staged = re.fullmatch(r"/[^\0]*\.(tar\.gz|tgz)", source) is not None
        if source not in state.files and not staged:
            return _text(stderr=f"tar: {source}: Cannot open: No such file or directory\n", rc=2), False
        dest = dest.rstrip("/")
        with st.mutate(scenario) as changed:
            changed.files[f"{dest}/build/all_reduce_perf"] = "<binary>\n"
            changed.files[f"{dest}/.nvdeploy-source"] = marker + "\n"
        return _text(), True
    return _text(stderr=f"{name}: bad arguments\n", rc=2), False


# Stateful tools of the modules that build on this one (smitools.py: nvidia-smi's settings), answered inside this
# hook so that their calls are logged like this module's own: name -> (output, whether the node changed), or None
# when the tool runs as usual.
STATE_TOOLS: dict[str, Callable[[NodeScenario, Sequence[str]], Optional[tuple[ToolOutput, bool]]]] = {}


def _hook(scenario: NodeScenario, argv: Sequence[str]) -> Optional[ToolOutput]:
    if not argv:
        return None
    tool = os.path.basename(argv[0])
    if tool == "sudo":
        return _sudo(scenario, argv)
    args = list(argv[1:])
    handled: Optional[tuple[ToolOutput, bool]] = None
    if tool == "sh" and len(args) >= 3 and args[0] == "-c" and args[2] in (WRITE_HELPER, UNTAR_HELPER):
        handled = _helper(scenario, args[2], args[3:])
    elif tool == "systemctl":
        if st.involved(scenario) or [a for a in args if not a.startswith("-")][:1] != ["is-active"]:
            handled = _systemctl(scenario, args)
    elif tool == "lsmod":
        if st.involved(scenario):
            handled = (_lsmod(scenario, st.current(scenario)), False)
    elif tool in STATE_TOOLS:
        handled = STATE_TOOLS[tool](scenario, args)
    else:
        binary = tool
        if tool == "env":
            rest = [a for a in args if "=" not in a or a.startswith("-")]
            binary = os.path.basename(rest[0]) if rest else ""
        kind = _PROVIDED_BY.get(binary)
        if kind and st.involved(scenario) and not _installed_kind(st.current(scenario), kind):
            handled = (_not_found(binary), False)
    if handled is None:
        return None
    return _record(scenario, argv, handled[1], handled[0])


TOOL_HOOKS.append(_hook)


# NVSwitch SXid faults: lines appended to the kernel log (dmesg, journalctl -k) of an NVSwitch SKU; no effect on
# SKUs without NVSwitch. (switch index, SXid line after "nvidia-nvswitchN: ") per fault; the address is the
# switch's PCI address as lspci lists it.
SXID_FAULTS = {
    "sxid_fatal": (3, "SXid (PCI:{pci}): 20034, Fatal, Link 48 LTSSM Fault Up"),
    "sxid_nonfatal": (2, "SXid (PCI:{pci}): 12028, Non-fatal, Link 61 egress non-posted PRIV error (First)"),
}
register_fault("sxid_fatal", "NVSwitch 3 (the last one if fewer) logs a fatal SXid 20034 (LTSSM Fault Up) on link 48 "
               "in the kernel log; only on SKUs with NVSwitch")
register_fault("sxid_nonfatal", "NVSwitch 2 logs a non-fatal SXid 12028 (egress non-posted PRIV error) on link 61 "
               "in the kernel log; only on SKUs with NVSwitch")
_FIRST_SXID_UPTIME = 2345.678901


def sxid_messages(scenario: NodeScenario) -> list[tuple[float, str]]:
    """(uptime seconds, message) of the SXid lines the node's faults add to its kernel log."""
    switches = node_facts(scenario).nvswitches
    out = []
    for fault, (index, text) in SXID_FAULTS.items():
        if scenario.has(fault) and switches:
            i = min(index, len(switches) - 1)
            out.append((_FIRST_SXID_UPTIME + 7.5 * len(out),
                        f"nvidia-nvswitch{i}: " + text.format(pci=switches[i][0])))
    return out


def _sxid_log(scenario: NodeScenario, tool: str, args: Sequence[str], output: ToolOutput) -> ToolOutput:
    if tool not in ("dmesg", "journalctl") or output.rc != 0 or output.hang:
        return output
    messages = sxid_messages(scenario)
    if not messages:
        return output
    if tool == "dmesg":
        extra = "".join(f"[{t:12.6f}] {msg}\n" for t, msg in messages)
    else:
        host = node_facts(scenario).hostname
        extra = "".join(f"{BOOT_TIME + datetime.timedelta(seconds=t):%b %d %H:%M:%S} {host} kernel: {msg}\n"
                        for t, msg in messages)
    return ToolOutput(output.stdout + extra.encode(), output.stderr, output.rc, output.hang, output.delay_s)


OUTPUT_FILTERS.append(_sxid_log)
