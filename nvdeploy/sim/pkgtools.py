"""Fake install tools of stateful simulated nodes: the package tools (``apt-get``, ``dpkg-query``, ``dpkg`` in
apt_tools.py; ``dnf``, ``rpm`` in dnf_tools.py; what the repositories offer in pkgrepo.py),
``curl -o``, the container toolkit's CLI (``nvidia-ctk`` runtime configure, cdi generate/list), the initramfs tools,
a recursive grep of the package sources, and the remove helper and nv-hostengine rule as a tool hook.

The simulated NVIDIA repository offers, once configured (a list/repo file nvdeploy wrote) and, on apt, refreshed
(``apt-get update``): ``nvidia-driver-<branch>`` (``-open``) / dnf module ``nvidia-driver:<branch>-dkms``, the fabric
manager of the same version, ``cuda-toolkit-X-Y``, ``datacenter-gpu-manager`` (3 and 4), ``nvidia-container-toolkit``.
The distribution offers the running kernel's headers and common tools. A driver replaces any other branch; the fault
``install_fail`` makes the driver's install fail as a DKMS build error does; ``offline`` makes
developer.download.nvidia.com unreachable (a mirror still works). Root only, with the real tools' messages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Optional

from nvdeploy.sim import state as st
from nvdeploy.sim.dcgm_tool import HOSTENGINE_ERROR, HOSTENGINE_RC
from nvdeploy.sim.pkgrepo import INITRAMFS, split_options, unreachable_host
from nvdeploy.sim.scenario import NodeScenario, node_facts
from nvdeploy.sim.systools import _record, _root, _text, _tool
from nvdeploy.sim.tools import TOOL_HOOKS, ToolOutput


@_tool("curl")
def _curl(scenario: NodeScenario, args: list[str]) -> tuple[ToolOutput, bool]:
    options, words = split_options(args, ("-o", "--output", "--retry", "--connect-timeout", "--max-time", "-m"))
    output = next((options[i + 1] for i, o in enumerate(options) if o in ("-o", "--output")), None)
    if len(words) != 1:
        return _text(stderr="curl: exactly one URL is simulated\n", rc=2), False
    url = words[0]
    host = unreachable_host(scenario, url)
    if host:
        return _text(stderr=f"curl: (6) Could not resolve host: {host}\n", rc=6), False
    if output is None:
        return _text(f"<content of {url}>\n"), False
    if not _root() and not output.startswith("/tmp/"):
        return _text(stderr=f"curl: (23) Failure writing output to destination, passed 1 returned 0 ({output})\n",
                     rc=23), False
    with st.mutate(scenario) as changed:
        changed.files[output] = url
    return _text(), True




# ---------------------------------------------------------------------------------------------------------------
# The container toolkit's CLI, the initramfs tools, a recursive grep of the package sources, nv-hostengine


DOCKER_CONFIG = "/etc/docker/daemon.json"
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
CONTAINERD_NVIDIA = ('\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n  privileged_without_host_'
                     'devices = false\n  runtime_engine = ""\n  runtime_root = ""\n  runtime_type = '
                     '"io.containerd.runc.v2"\n\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.'
                     'options]\n  BinaryName = "/usr/bin/nvidia-container-runtime"\n')
REMOVE_HELPER = "nvdeploy-remove"


def _value(args: list[str], option: str) -> Optional[str]:
    for i, arg in enumerate(args):
        if arg.startswith(option + "="):
            return arg.split("=", 1)[1]
        if arg == option and i + 1 < len(args):
            return args[i + 1]
    return None


def cdi_spec(scenario: NodeScenario, driver: str) -> str:
    """A CDI spec as ``nvidia-ctk cdi generate`` writes it (trimmed: devices, the driver's libcuda mount)."""
    lib = "/usr/lib/aarch64-linux-gnu" if scenario.has("arm64") else "/usr/lib/x86_64-linux-gnu"
    lines = ["---", "cdiVersion: 0.5.0", "containerEdits:", "  mounts:",
             f"  - containerPath: {lib}/libcuda.so.{driver}", f"    hostPath: {lib}/libcuda.so.{driver}",
             "    options: [ro, nosuid, nodev, bind]", "devices:"]
    for gpu in node_facts(scenario).gpus:
        for name in (str(gpu.index), gpu.uuid):
            lines += ["- containerEdits:", "    deviceNodes:", f"    - path: /dev/nvidia{gpu.index}",
                      f"  name: {json.dumps(name)}"]
    lines += ["- containerEdits:", "    deviceNodes:"]
    lines += [f"    - path: /dev/nvidia{gpu.index}" for gpu in node_facts(scenario).gpus]
    lines += ["  name: all", "kind: nvidia.com/gpu"]
    return "\n".join(lines) + "\n"


CONTAINERD_DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
CONTAINERD_IMPORT = 'imports = ["/etc/containerd/conf.d/*.toml"]'


def _ctk_version(state: st.NodeState) -> tuple[int, ...]:
    installed = state.packages.get("nvidia-container-toolkit", "1.17.4-1")
    return tuple(int(x) for x in re.findall(r"\d+", st.upstream(installed))[:3])


def _containerd_configured(state: st.NodeState) -> tuple[str, str, dict[str, str]]:
    """(message path, old config.toml, files to write) of ``nvidia-ctk runtime configure --runtime=containerd``:
    up to 1.17 the runtime goes into config.toml; from 1.18 into the drop-in conf.d/99-nvidia.toml, and
    config.toml gets an ``imports`` line for conf.d (kept with any imports it had)."""
    old = state.files.get(CONTAINERD_CONFIG, "")
    if _ctk_version(state) < (1, 18):
        text = old if "runtimes.nvidia]" in old else (old or "version = 2\n") + CONTAINERD_NVIDIA
        return CONTAINERD_CONFIG, old, {CONTAINERD_CONFIG: text}
    match = re.search(r"^imports\s*=\s*\[([^\]]*)\]", old, re.M)
    if match and "/etc/containerd/conf.d/*.toml" in match.group(1):
        config = old
    elif match:
        items = [i.strip() for i in match.group(1).split(",") if i.strip()] + ['"/etc/containerd/conf.d/*.toml"']
        config = old[:match.start()] + f"imports = [{', '.join(items)}]" + old[match.end():]
    else:
        config = CONTAINERD_IMPORT + "\n" + (old or "version = 2\n")
    return CONTAINERD_DROP_IN, old, {CONTAINERD_CONFIG: config, CONTAINERD_DROP_IN: "version = 2\n" + CONTAINERD_NVIDIA}


@_tool("nvidia-ctk")
def _nvidia_ctk(scenario: NodeScenario, args: list[str]) -> tuple[ToolOutput, bool]:
    state = st.current(scenario)
    if args in (["--version"], ["-v"]):
        version = ".".join(str(x) for x in _ctk_version(state))
        return _text(f"NVIDIA Container Toolkit CLI version {version}\n"), False
    if args[:2] == ["runtime", "configure"]:
        runtime = _value(args[2:], "--runtime") or "docker"
        path = {"docker": DOCKER_CONFIG, "containerd": CONTAINERD_CONFIG}.get(runtime)
        if path is None:
            return _text(stderr=f"ERRO[0000] unrecognized runtime '{runtime}'\n", rc=1), False
        if not _root():
            return _text(stderr=f"ERRO[0000] unable to flush config: unable to open {path} for writing: open {path}: "
                         "permission denied\n", rc=1), False
        old = state.files.get(path, "")
        if runtime == "docker":
            try:
                config = json.loads(old) if old.strip() else {}
            except ValueError:
                return _text(stderr=f"ERRO[0000] unable to load config: invalid JSON in {path}\n", rc=1), False
            config.setdefault("runtimes", {})["nvidia"] = {"args": [], "path": "nvidia-container-runtime"}
            writes = {path: json.dumps(config, indent=4) + "\n"}
        else:
            path, old, writes = _containerd_configured(state)
        changes = {k: v for k, v in writes.items() if state.files.get(k) != v}
        if changes:
            with st.mutate(scenario) as changed:
                changed.files.update(changes)
        return _text(stderr=f"INFO[0000] Wrote updated config to {path}\nINFO[0000] It is recommended that {runtime} "
                     "daemon be restarted.\n"), bool(changes)
    if args[:2] == ["cdi", "generate"]:
        if st.driver_status(scenario, state) != "ok" or state.loaded_driver is None:
            return _text(stderr="ERRO[0000] failed to generate CDI spec: failed to create device CDI specs: failed to "
                         "initialize NVML: ERROR_LIBRARY_NOT_FOUND\n", rc=1), False
        spec = cdi_spec(scenario, state.loaded_driver)
        output = _value(args[2:], "--output")
        log = 'INFO[0000] Auto-detected mode as "nvml"\nINFO[0000] Generated CDI spec with version 0.5.0\n'
        if output is None:
            return _text(spec, log), False
        if not _root():
            return _text(stderr=f"ERRO[0000] failed to save CDI spec: open {output}: permission denied\n", rc=1), False
        if state.files.get(output) == spec:
            return _text(stderr=log), False
        with st.mutate(scenario) as changed:
            changed.files[output] = spec
        return _text(stderr=log), True
    if args[:2] == ["cdi", "list"]:
        names = [f"nvidia.com/gpu={json.loads(m) if m.startswith(chr(34)) else m}"
                 for path, text in sorted(state.files.items()) if re.match(r"/(etc|var/run)/cdi/.+\.ya?ml$", path)
                 for m in re.findall(r"^  name: (.+)$", text, re.M)]
        return _text("".join(n + "\n" for n in names), f"INFO[0000] Found {len(names)} CDI devices\n"), False
    return _text(stderr=f"nvidia-ctk: {' '.join(args[:2])} is not simulated\n", rc=1), False


def _initramfs(scenario: NodeScenario, tool: str) -> tuple[ToolOutput, bool]:
    if not _root():
        return _text(stderr=f"{tool}: cannot write the initramfs: Permission denied\n", rc=1), False
    state = st.current(scenario)
    blacklisted = any(path.startswith("/etc/modprobe.d/") and re.search(r"^blacklist nouveau$", text, re.M)
                      for path, text in state.files.items())
    with st.mutate(scenario) as changed:
        changed.files[INITRAMFS] = "nouveau-blacklisted" if blacklisted else "plain"
    text = f"update-initramfs: Generating /boot/initrd.img-{state.kernel}\n" if tool == "update-initramfs" else ""
    return _text(text), True


@_tool("update-initramfs")
def _update_initramfs(scenario: NodeScenario, args: list[str]) -> tuple[ToolOutput, bool]:
    if args != ["-u"] or st.current(scenario).family != "apt":
        return _text(stderr="update-initramfs: only -u is simulated (apt nodes)\n", rc=1), False
    return _initramfs(scenario, "update-initramfs")


@_tool("dracut")
def _dracut(scenario: NodeScenario, args: list[str]) -> tuple[ToolOutput, bool]:
    if args not in (["-f"], ["--force"]) or st.current(scenario).family != "dnf":
        return _text(stderr="dracut: only -f is simulated (dnf nodes)\n", rc=1), False
    return _initramfs(scenario, "dracut")


@_tool("grep")
def _grep(scenario: NodeScenario, args: list[str]) -> tuple[ToolOutput, bool]:
    """``grep -rsH PATTERN PATH...`` over the node's files (the package-source probe)."""
    if len(args) < 3 or args[0] != "-rsH":
        return _text(stderr="grep: only -rsH PATTERN PATH... is simulated\n", rc=2), False
    pattern, roots = re.compile(args[1]), [a.rstrip("/") for a in args[2:]]
    state = st.current(scenario)
    out = []
    for path in sorted(state.files):
        if any(path == root or path.startswith(root + "/") for root in roots):
            out += [f"{path}:{line}\n" for line in state.files[path].splitlines() if pattern.search(line)]
    return _text("".join(out), rc=0 if out else 1), False


def _hook(scenario: NodeScenario, argv: Sequence[str]) -> Optional[ToolOutput]:
    """The remove helper (as root), and dcgmi needing a running nv-hostengine on nodes whose state is tracked."""
    if not argv:
        return None
    tool, args = argv[0].rsplit("/", 1)[-1], list(argv[1:])
    if tool == "sh" and len(args) == 4 and args[0] == "-c" and args[2] == REMOVE_HELPER:
        path = args[3]
        if not _root():
            return _record(scenario, argv, False, _text(stderr=f"rm: cannot remove '{path}': Permission denied\n",
                                                        rc=1))
        if path not in st.current(scenario).files:
            return _record(scenario, argv, False, _text())
        with st.mutate(scenario) as changed:
            del changed.files[path]
            if path.startswith("/etc/apt/sources.list.d/"):
                changed.apt_updated = False
        return _record(scenario, argv, True, _text())
    if tool == "dcgmi" and args[:1] in (["discovery"], ["diag"]) and st.involved(scenario):
        unit = st.current(scenario).service("nvidia-dcgm")
        if unit is not None and not unit[1]:
            return _record(scenario, argv, False, _text(HOSTENGINE_ERROR, rc=HOSTENGINE_RC))
    return None


TOOL_HOOKS.append(_hook)
