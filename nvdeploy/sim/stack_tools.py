"""Simulated GPU-stack tools: the CUDA toolkit listing (``find /usr/local ...``) and the MPS control
client (``nvidia-cuda-mps-control``), with their faults.

- ``find``: answers only the ``cuda_toolkits`` collector's command line (nvdeploy/collect/stack.py) with the
  bytes GNU find prints for it: a marker line per match, each ``version.json`` in NVIDIA's layout. On fake SSH
  nodes it is a partial tool (only ``find /usr/local ...``; every other find runs the real one). The node's
  toolkits: with stateful nodes (nvdeploy/sim/state.py) one per ``cuda-toolkit-X-Y`` package at its version;
  otherwise one ``/usr/local/cuda-X.Y`` whose version is the driver's CUDA version, GA (``X.Y.0``), so a healthy
  node's toolkit always suits its driver.
- ``nvidia-cuda-mps-control``: with a running daemon (``mps_running``) it answers ``get_server_list`` with nothing
  (no server started yet) and exit 0, as the real one; otherwise it prints ``Cannot find MPS control daemon
  process`` and exits 1. The ``sh -c SCRIPT nvdeploy-mps PIPE LOG`` helper of the collector is answered by a
  hook in-process; over SSH the real bash runs it and this tool answers.

Faults: ``cuda_toolkit:<X.Y.Z>`` (one more toolkit, /usr/local/cuda-X.Y), ``cuda_compat:<X.Y>`` (the cuda-compat
package in /usr/local/cuda-X.Y/compat, its libcuda of the latest X.Y release, ``COMPAT_LIBCUDA``),
``cuda_none`` (no toolkit), ``mps_running`` (the control daemon runs), ``mps_missing`` (the control tool is not
installed: exit 127); ``open_modules`` (the open flavour of nvidia.ko in /proc/driver/nvidia/version, read by
the ``kernel_driver`` find with /proc/sys/kernel/osrelease); ``container_ready``, ``cdi_stale``, ``cdi_short``,
``ctk_missing``, ``image_missing`` (the
container runtime, below). ``docker`` answers only ``docker run --rm --pull=never --gpus all IMAGE nvidia-smi -L``:
exit 127 without a docker package, the real "could not select device driver" error (exit 125) without the NVIDIA
container toolkit, "No such image" with ``image_missing``, else the node's ``nvidia-smi -L``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Optional

from nvdeploy.collect.stack_commands import (
    CONTAINER_FIND_ARGV,
    CUDA_FIND_ARGV,
    IMEX_FILES_ARGV,
    KERNEL_DRIVER_FIND_ARGV,
    MPS_HELPER,
    MPS_SCRIPT,
    MPS_SHELL,
)
from nvdeploy.sim import perf
from nvdeploy.sim.scenario import NodeScenario, gpu_uuid, node_facts, register_fault
from nvdeploy.sim.tools import TOOL_HOOKS, ToolOutput, register_tool

register_fault("cuda_toolkit", "one more CUDA toolkit, /usr/local/cuda-X.Y with version.json X.Y.Z",
               pattern=r"cuda_toolkit:\d+\.\d+\.\d+")
register_fault("cuda_compat", "the cuda-compat forward-compatibility package in /usr/local/cuda-X.Y/compat",
               pattern=r"cuda_compat:\d+\.\d+")
register_fault("cuda_none", "no CUDA toolkit under /usr/local")
register_fault("mps_running", "the CUDA MPS control daemon runs (get_server_list answers)")
register_fault("mps_missing", "nvidia-cuda-mps-control is not installed (exit 127)")

NO_DAEMON = "Cannot find MPS control daemon process\n"


def toolkits(scenario: NodeScenario) -> list[tuple[str, str]]:
    """(folder, version) of the node's toolkits."""
    found: dict[str, str] = {}
    if not scenario.has("cuda_none"):
        from nvdeploy.sim import state as st

        if st.involved(scenario):
            for name, version in st.current(scenario).packages.items():
                if name.startswith("cuda-toolkit-") and name.count("-") == 3:
                    major, minor = name.split("-")[2:4]
                    found[f"/usr/local/cuda-{major}.{minor}"] = version.split("-")[0].split(":")[-1]
        else:
            cuda = node_facts(scenario).cuda_version
            if cuda:
                found[f"/usr/local/cuda-{cuda}"] = f"{cuda}.0"
    for fault in scenario.faults:
        if fault.startswith("cuda_toolkit:"):
            version = fault.split(":", 1)[1]
            found[f"/usr/local/cuda-{version.rsplit('.', 1)[0]}"] = version
    return sorted(found.items())


# The libcuda each forward-compatibility package ships (its release's driver): cuda-compat-13-0 of CUDA 13.0
# Update 2, cuda-compat-12-9 of 12.9 Update 1 (checks/cuda_compat.yaml). Kept here: fake tools on SSH nodes run
# from a bare copy of the package, without the checks folder.
COMPAT_LIBCUDA = {"13.1": "590.44.01", "13.0": "580.95.05", "12.9": "575.57.08", "12.8": "570.124.06",
                  "12.6": "560.35.05", "12.4": "550.54.15"}


def compat_driver(major_minor: str) -> str:
    return COMPAT_LIBCUDA.get(major_minor, "580.95.05")


def version_json(version: str) -> str:
    """version.json as CUDA 12.x packages install it (3-space indent, one entry per component; shortened)."""
    base = version.rsplit(".", 1)[0]
    entries = [("cuda", "CUDA SDK", version), ("cuda_cudart", "CUDA Runtime (cudart)", f"{base}.127"),
               ("cuda_nvcc", "CUDA NVCC", f"{base}.131")]
    body = ",\n".join(f'   "{key}" : {{\n      "name" : "{name}",\n      "version" : "{value}"\n   }}'
                      for key, name, value in entries)
    return "{\n" + body + "\n}\n"


def find_output(scenario: NodeScenario) -> str:
    """What the collector's find prints: each folder (pre-order, as find walks), its version.json, its compat."""
    folders: dict[str, list[str]] = {folder: [f"\n== {folder}/version.json\n{version_json(version)}"]
                                     for folder, version in toolkits(scenario)}
    for fault in scenario.faults:
        if fault.startswith("cuda_compat:"):
            major_minor = fault.split(":", 1)[1]
            compat = f"/usr/local/cuda-{major_minor}/compat"
            folders.setdefault(f"/usr/local/cuda-{major_minor}", []).extend(
                [f"\n== {compat}/libcuda.so.1\n", f"\n== {compat}/libcuda.so.{compat_driver(major_minor)}\n"])
    return "".join(f"\n== {folder}/\n" + "".join(entries) for folder, entries in sorted(folders.items()))


# --- the container runtime (container_files collector) ----------------------------------------------------------

STALE_CDI_DRIVER = "535.161.08"
_CONTAINER_FAULTS = {
    "container_ready": "docker installed, /etc/docker/daemon.json with the nvidia runtime, a CDI spec for the driver",
    "cdi_stale": "like container_ready, but the CDI spec was generated for driver 535.161.08 (before an update)",
    "cdi_short": "like container_ready, but the CDI spec lacks the last GPU (generated while it was missing)",
    "ctk_missing": "like container_ready, but the NVIDIA container toolkit is not installed (no nvidia-ctk, no hook)",
}
for _name, _doc in _CONTAINER_FAULTS.items():
    register_fault(_name, _doc)


def cdi_spec(scenario: NodeScenario, driver: str, count: int) -> str:
    """A CDI spec in nvidia-ctk's layout (trimmed to the driver's libcuda mount and the GPU devices 0..count-1).
    Built from the scenario alone: it is part of the node's baseline state, which node_facts itself reads."""
    gpus = [(index, gpu_uuid(scenario.name, index)) for index in range(count)]
    lines = ["---", "cdiVersion: 0.5.0", "containerEdits:", "  mounts:",
             f"  - containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.{driver}",
             f"    hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.{driver}", "    options: [ro, nosuid, nodev, bind]",
             "devices:"]
    for index, uuid in gpus:
        for name in (str(index), uuid):
            lines += ["- containerEdits:", "    deviceNodes:", f"    - path: /dev/nvidia{index}", f'  name: "{name}"']
    lines += ["- containerEdits:", "    deviceNodes:"] + [f"    - path: /dev/nvidia{i}" for i, _ in gpus]
    lines += ["  name: all", "kind: nvidia.com/gpu"]
    return "\n".join(lines) + "\n"


def _container_baseline(scenario: NodeScenario, state: object) -> None:
    if not any(scenario.has(f) for f in _CONTAINER_FAULTS):
        return
    from nvdeploy.sim import state as st

    state.packages.update({"docker-ce": "5:28.1.1-1", "containerd.io": "1.7.27-1"})  # type: ignore[attr-defined]
    state.services.update({"docker": [True, True], "containerd": [True, True]})  # type: ignore[attr-defined]
    state.files["/etc/docker/daemon.json"] = (  # type: ignore[attr-defined]
        '{\n    "runtimes": {\n        "nvidia": {\n            "args": [],\n            "path": '
        '"nvidia-container-runtime"\n        }\n    }\n}\n')
    driver = STALE_CDI_DRIVER if scenario.has("cdi_stale") else st.driver_versions(scenario)[0]
    count = scenario.hardware.gpu.count - (1 if scenario.has("cdi_short") else 0)
    state.files["/etc/cdi/nvidia.yaml"] = cdi_spec(scenario, driver, count)  # type: ignore[attr-defined]
    if scenario.has("ctk_missing"):
        state.packages.pop("nvidia-container-toolkit", None)  # type: ignore[attr-defined]


def _register_state_hooks() -> None:
    from nvdeploy.sim import state as st

    st.BASELINE_HOOKS.append(_container_baseline)
    st.HOOK_FAULTS.update(_CONTAINER_FAULTS)


_register_state_hooks()
_CONTAINER_STARTS = ("/usr/bin/dockerd", "/usr/bin/containerd", "/etc/docker/daemon.json",
                     "/etc/containerd/config.toml", "/etc/containerd/conf.d", "/etc/containerd/config.d", "/etc/cdi",
                     "/var/run/cdi")
_CONTAINER_DIRS = {"/etc/containerd/conf.d": (".toml",), "/etc/containerd/config.d": (".toml",),
                   "/etc/cdi": (".yaml", ".json"), "/var/run/cdi": (".yaml", ".json")}


def container_find_output(scenario: NodeScenario) -> tuple[str, str]:
    """(stdout, stderr) of the container_files find: binaries from the node's packages, files from its state."""
    from nvdeploy.sim import state as st

    state = st.current(scenario)
    present = {"/usr/bin/dockerd": "" if {"docker-ce", "docker.io"} & set(state.packages) else None,
               "/usr/bin/containerd": "" if {"containerd", "containerd.io"} & set(state.packages) else None}
    out, err = [], []
    for start in _CONTAINER_STARTS:
        if start in present:
            if present[start] is None:
                err.append(f"find: '{start}': No such file or directory\n")
            else:
                out.append(f"\n== {start}\n")
            continue
        if start in _CONTAINER_DIRS:
            specs = sorted(p for p in state.files if p.startswith(start + "/") and p.endswith(_CONTAINER_DIRS[start])
                           and "/" not in p[len(start) + 1:])
            if not specs and not any(p.startswith(start + "/") for p in state.files):
                err.append(f"find: '{start}': No such file or directory\n")
            out += [f"\n== {p}\n{state.files[p]}" for p in specs]
            continue
        if start in state.files:
            out.append(f"\n== {start}\n{state.files[start]}")
        else:
            err.append(f"find: '{start}': No such file or directory\n")
    return "".join(out), "".join(err)


register_fault("image_missing", "the container_image is not on the node (docker run --pull=never finds none)")
DRIVER_ERROR = 'docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].\n'


@register_tool("docker")
def _docker(scenario: NodeScenario, args: Sequence[str]) -> ToolOutput:
    """``docker run --rm --pull=never --gpus all IMAGE nvidia-smi -L`` (the container.gpu_run command line)."""
    from nvdeploy.sim import state as st
    from nvdeploy.sim.smi_xml import render_list

    state = st.current(scenario)
    if not {"docker-ce", "docker.io"} & set(state.packages):
        return ToolOutput(b"", b"sh: 1: docker: not found\n", 127)
    if len(args) != 8 or list(args[:5]) != ["run", "--rm", "--pull=never", "--gpus", "all"] \
            or list(args[6:]) != ["nvidia-smi", "-L"]:
        return ToolOutput(b"", b"docker: only the container.gpu_run command line is simulated\n", 125)
    image = args[5]
    if scenario.has("image_missing"):
        return ToolOutput(b"", f"Unable to find image '{image}' locally\ndocker: Error response from daemon: No "
                          f"such image: {image}.\n".encode(), 125)
    if "nvidia-container-toolkit" not in state.packages:
        return ToolOutput(b"", DRIVER_ERROR.encode(), 125)
    return ToolOutput(render_list(node_facts(scenario)).encode())


# --- perftest (rdma.gpudirect) ------------------------------------------------------------------------------------

register_fault("gpudirect_slow", "ib_write_bw --use_cuda reaches 45% of the IB rate when this node takes part (the "
               "data staged through host memory: no nvidia_peermem / dma-buf)")
register_fault("perftest_missing", "ib_write_bw is not installed (exit 127)")
GPUDIRECT_FRACTION = 0.97
SLOW_FRACTION = 0.45
_RULE = "-" * 87


def _peer_faults(scenario: NodeScenario, address: str) -> tuple[str, ...]:
    for peer, faults in scenario.peers:
        if peer == address:
            return faults
    return ()


def perftest_text(scenario: NodeScenario, hca: str, gpu: int, bw: float) -> str:
    """``ib_write_bw --use_cuda -F --report_gbits -D 5`` as perftest 4.5 prints it (the client's side)."""
    facts = node_facts(scenario)
    name = facts.gpus[gpu].product_name if gpu < len(facts.gpus) else "unknown"
    bus = facts.gpus[gpu].bus if gpu < len(facts.gpus) else 0
    iterations = int(bw * 1e9 / 8 / 65536 * 5)
    lines = [_RULE, "initializing CUDA", "Listing all CUDA devices in system:",
             f"CUDA device {gpu}: PCIe address is {bus:02X}:00", "", f"Picking device No. {gpu}",
             f"[pid = 4101, dev = {gpu}] device name = [{name}]", "creating CUDA Ctx", "making it the current CUDA Ctx",
             "cuMemAlloc() of a 131072 bytes GPU buffer",
             "allocated GPU buffer address at 00007f3dfa600000 pointer=0x7f3dfa600000", _RULE,
             "                    RDMA_Write BW Test",
             f" Dual-port       : OFF          Device         : {hca}",
             " Number of qps   : 1            Transport type : IB",
             " Connection type : RC           Using SRQ      : OFF",
             " TX depth        : 128", " CQ Moderation   : 100", " Mtu             : 4096[B]",
             " Link type       : IB", " Max inline data : 0[B]", " rdma_cm QPs     : OFF",
             " Data ex. method : Ethernet", _RULE,
             " local address: LID 0x12 QPN 0x00c6 PSN 0x2986aa RKey 0x1fff00 VAddr 0x007f3dfa610000",
             " remote address: LID 0x0f QPN 0x00c7 PSN 0xa0ef83 RKey 0x1ffe00 VAddr 0x007f9a21e10000", _RULE,
             " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]",
             f" 65536      {iterations:<16d} 0.00               {bw:<18.2f} {bw * 1e9 / 8 / 65536 / 1e6:.6f}",
             _RULE, "deallocating RX GPU buffer 00007f3dfa600000", "destroying current CUDA Ctx"]
    return "\n".join(lines) + "\n"


# A port that is not Active: perftest's set_link_layer() then check_link() and main() (perftest_resources.c,
# ib_write_bw.c), exit 1 before any connection; the same three lines appear in public logs of a Down port.
PORT_DOWN_STDERR = " Port number 1 state is Down\n Couldn't set the link layer\n Couldn't get context for the device\n"
# The client when no server listens (its rail's server exited at once): ethernet_client_connect() and
# establish_connection() in perftest_communication.c, then main(); the second message has no newline of its own,
# as in public captures ("... socket connection Unable to init the socket connection").
REFUSED_STDERR = ("Couldn't connect to {server}:{port}\nUnable to open file descriptor for socket connection "
                  "Unable to init the socket connection\n")
DEFAULT_PORT = 18515


def _arg(args: Sequence[str], flag: str, default: str) -> str:
    return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else default


@register_tool("ib_write_bw")
def _ib_write_bw(scenario: NodeScenario, args: Sequence[str]) -> ToolOutput:
    """Server (no address) or client (the server's address last); both sides print the table."""
    if scenario.has("perftest_missing"):
        return ToolOutput(b"", b"sh: 1: ib_write_bw: not found\n", 127)
    args = list(args)
    hca = _arg(args, "-d", "mlx5_0")
    port = _arg(args, "-p", str(DEFAULT_PORT))
    gpu = next((int(a.split("=", 1)[1]) for a in args if a.startswith("--use_cuda=")), 0)
    server = args[-1] if args and not args[-1].startswith("-") and args[-2:-1] not in (["-D"], ["-p"]) else None
    peer = _peer_faults(scenario, server) if server is not None else ()
    if hca in perf.rails_down(scenario.faults):
        return ToolOutput(b"", PORT_DOWN_STDERR.encode(), 1)
    if server is not None and hca in perf.rails_down(peer):
        # The server's port on this rail is down: it exited before listening, so nothing answers on its port.
        return ToolOutput(b"", REFUSED_STDERR.format(server=server, port=port).encode(), 1)
    ib = scenario.hardware.extra.get("ib") or {}
    rate = float(ib.get("rate_gbps", 100))
    slow = scenario.has("gpudirect_slow") or (server is not None and "gpudirect_slow" in peer)
    # A pair goes at its slower member's pace (sim/perf.py: this node's factor and rail, the peer's slower:<PCT> and
    # the same rail's rail_slow: a rail-optimised fabric joins NIC k of every node).
    pace = min(perf.factor(scenario.name, scenario.faults) * perf.rail_factor(scenario.faults, hca),
               perf.slower_factor(peer) * perf.rail_factor(peer, hca) if server is not None else 1.0)
    bw = round(rate * (SLOW_FRACTION if slow else GPUDIRECT_FRACTION) * pace, 2)
    return ToolOutput(perftest_text(scenario, hca, gpu, bw).encode())


# --- the loaded nvidia module and the kernel (kernel_driver collector: GPUDirect RDMA through DMA-BUF) -------------

register_fault("open_modules", "the loaded nvidia.ko is the open GPU kernel module flavour (NVRM 'Open Kernel "
               "Module'): with kernel >= 5.12 GPUDirect RDMA can use DMA-BUF instead of nvidia_peermem")
# /proc/driver/nvidia/version as the two flavours print it (real lines: 570.195.03 open, 535.216.03 proprietary).
_NVRM_OPEN = ("NVRM version: NVIDIA UNIX Open Kernel Module for {arch}  {version}  Release Build  "
              "(dvs-builder@U22-I3-H04-03-1)  Sat Sep 20 00:47:16 UTC 2025\n")
_NVRM_PROPRIETARY = "NVRM version: NVIDIA UNIX {arch} Kernel Module  {version}  Thu Apr  3 01:14:19 UTC 2025\n"
_NVRM_PROPRIETARY_ARM = ("NVRM version: NVIDIA UNIX Kernel Module for aarch64  {version}  Release Build  "
                         "(dvs-builder@U16-I3-B03-4-3)  Thu Apr  3 01:14:19 UTC 2025\n")
_GCC = "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04) \n"


def kernel_driver_output(scenario: NodeScenario) -> tuple[str, str, int]:
    """(stdout, stderr, rc) of the kernel_driver find: the version file only while the nvidia module is loaded."""
    from nvdeploy.sim import state as st

    state = st.current(scenario)
    arch = "aarch64" if scenario.has("arm64") else "x86_64"
    out, err = [], []
    if "nvidia" in state.modules and state.loaded_driver:
        if scenario.has("open_modules") or state.loaded_open:
            line = _NVRM_OPEN.format(arch=arch, version=state.loaded_driver)
        elif arch == "aarch64":
            line = _NVRM_PROPRIETARY_ARM.format(version=state.loaded_driver)
        else:
            line = _NVRM_PROPRIETARY.format(arch=arch, version=state.loaded_driver)
        out.append(f"\n== /proc/driver/nvidia/version\n{line}{_GCC}")
    else:
        err.append("find: '/proc/driver/nvidia/version': No such file or directory\n")
    out.append(f"\n== /proc/sys/kernel/osrelease\n{state.kernel}\n")
    return "".join(out), "".join(err), 1 if err else 0


@register_tool("find")
def _find(scenario: NodeScenario, args: Sequence[str]) -> ToolOutput:
    if tuple(args) == CUDA_FIND_ARGV[1:]:
        return ToolOutput(find_output(scenario).encode())
    if tuple(args) == CONTAINER_FIND_ARGV[1:]:
        out, err = container_find_output(scenario)
        return ToolOutput(out.encode(), err.encode(), 1 if err else 0)
    if tuple(args) == KERNEL_DRIVER_FIND_ARGV[1:]:
        out, err, rc = kernel_driver_output(scenario)
        return ToolOutput(out.encode(), err.encode(), rc)
    if tuple(args) == IMEX_FILES_ARGV[1:]:
        from nvdeploy.sim.imex_tool import files_output

        out, err, rc = files_output(scenario)
        return ToolOutput(out.encode(), err.encode(), rc)
    return ToolOutput(b"", b"find: only the cuda_toolkits, container_files, kernel_driver and imex_files command "
                      b"lines are simulated\n", 2)


@register_tool("nvidia-cuda-mps-control")
def _mps_control(scenario: NodeScenario, args: Sequence[str]) -> ToolOutput:
    if scenario.has("mps_missing"):
        return ToolOutput(b"", b"sh: 1: nvidia-cuda-mps-control: not found\n", 127)
    if args:
        return ToolOutput(b"", b"nvidia-cuda-mps-control: only the client mode (no -d) is simulated\n", 2)
    if not scenario.has("mps_running"):
        return ToolOutput(NO_DAEMON.encode(), rc=1)
    return ToolOutput(b"")


def _hook(scenario: NodeScenario, argv: Sequence[str]) -> Optional[ToolOutput]:
    args = list(argv)
    if len(args) >= 4 and os.path.basename(args[0]) == MPS_SHELL and args[1:4] == ["-c", MPS_SCRIPT, MPS_HELPER]:
        return _mps_control(scenario, [])
    return None


TOOL_HOOKS.append(_hook)
