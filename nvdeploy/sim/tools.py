"""Run a fake tool on a simulated node: the same bytes, exit status and failure modes as the real tool.

Supported: ``nvidia-smi`` (``-q -x``, ``-L``, ``--version``, the default table,
``--query-gpu=... --format=csv[,noheader][,nounits]``), ``lspci``
(always the ``-D -n`` layout), ``dmesg`` (raw ``[ uptime]`` timestamps), ``journalctl`` (``-k`` short format) and
``true``/``false``, each with any arguments and behind an optional ``sudo [-n] [--]``, plus the tools and
``nvidia-smi`` subcommands other modules register (``TOOLS``, ``SMI_SUBCOMMANDS``; see nvdeploy/sim/extensions.py).
Any other tool is "not found" (rc 127).
"""

from __future__ import annotations

import datetime
import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Optional

from nvdeploy.sim.scenario import NodeFacts, NodeScenario, SimGpu, node_facts
from nvdeploy.sim.smi_xml import SIM_TIME, render_list, render_query_csv, render_table, render_version, render_xml

DRIVER_MISSING_MESSAGE = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                          "Make sure that the latest NVIDIA driver is installed and running.\n")
INVALID_ARGS_MESSAGE = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
BOOT_TIME = SIM_TIME - datetime.timedelta(hours=3)
FIRST_XID_UPTIME = 1234.567890
_UNKNOWN = "pid='<unknown>', name=<unknown>"

# Xid -> (raised by a process?, message text as drivers 535-570 print it).
XID_MESSAGES: dict[int, tuple[bool, str]] = {
    13: (True, "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address"),
    31: (True, "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_8 faulted @ 0x73ac_1c000000. "
               "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE"),
    43: (True, "Ch 00000010"),
    45: (True, "Ch 00000010"),
    48: (False, "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at "
                "partition 6, subpartition 0."),
    63: (False, "Row Remapper: New row marked for remapping, reset gpu to activate."),
    64: (False, "Row Remapper Error: (0x00000002eebc4100) - All reserved rows for bank are remapped"),
    74: (False, "NVLink: fatal error detected on link 14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)"),
    79: (False, "GPU has fallen off the bus."),
    94: (True, "Contained: SM (0x1). RST: No, D-RST: No"),
    95: (False, "Uncontained: FBHUB. RST: Yes, D-RST: No"),
    109: (True, "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005"),
    119: (True, "Timeout after 6s of waiting for RPC response from GPU1 GSP! Expected function 76 "
                "(GSP_RM_CONTROL) (0x20800a4c 0x4)."),
}
_GENERIC_XID = (True, "Ch 00000008")


@dataclass(frozen=True)
class ToolOutput:
    """What one tool run produced; ``hang`` means it never returns, ``delay_s`` how long it takes to answer.
    ``virtual_s``: how long it runs in simulated time (a burn-in's hours): a timeout shorter than that ends it, as
    on a real node, but nobody waits for it."""

    stdout: bytes
    stderr: bytes = b""
    rc: int = 0
    hang: bool = False
    delay_s: float = 0.0
    virtual_s: float = 0.0
    # A tool that loops until it is killed (``nvidia-smi -lms``): after ``stdout``, a fake node's tool prints
    # ``repeat(seconds since it started)`` every ``repeat_s`` in real time. In-process it never returns: a hang.
    repeat_s: float = 0.0
    repeat: Optional[Callable[[float], bytes]] = None


def _strip_sudo(argv: Sequence[str]) -> list[str]:
    args = list(argv)
    if args and os.path.basename(args[0]) == "sudo":
        args.pop(0)
        while args and args[0].startswith("-"):
            option = args.pop(0)
            if option == "--":
                break
            if option in ("-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U") and args:
                args.pop(0)
    return args


ToolFunction = Callable[[NodeScenario, Sequence[str]], ToolOutput]
# Extra tools (dcgmi, ibstat, mpirun, ...) registered by other modules of nvdeploy/sim; the name is argv[0]'s basename.
TOOLS: dict[str, ToolFunction] = {}
# nvidia-smi subcommands (``nvlink``, ``topo``, ...) registered by other modules; called with the args after the
# subcommand word.
SMI_SUBCOMMANDS: dict[str, ToolFunction] = {}
# Called with the full argv (sudo included) before any tool; the first non-None answer wins. Stateful nodes
# (nvdeploy/sim/state.py) answer here for tools whose output depends on what install/optimize changed.
TOOL_HOOKS: list[Callable[[NodeScenario, Sequence[str]], ToolOutput | None]] = []
# Wrappers applied to every tool's output (chaos faults such as floods or garbage bytes), in registration order.
OUTPUT_FILTERS: list[Callable[[NodeScenario, str, Sequence[str], ToolOutput], ToolOutput]] = []


def register_tool(name: str) -> Callable[[ToolFunction], ToolFunction]:
    def wrap(function: ToolFunction) -> ToolFunction:
        if name in TOOLS:
            raise ValueError(f"duplicate simulated tool {name!r}")
        TOOLS[name] = function
        return function

    return wrap


def _launched(argv: Sequence[str]) -> Sequence[str]:
    """The probe's ``/bin/sh -c LAUNCH ...`` as the program it execs: the simulated node has its system Python
    (``python3``; fault ``no_python``: none), whichever of the launcher's paths is named first."""
    from nvdeploy.collect.probe.ship import launched_python

    if not argv or argv[0] != "/bin/sh" or launched_python(argv) is None:
        return argv
    return ["python3", "-I", "-S", "-c", *argv[4:6]]


def run_tool(scenario: NodeScenario, argv: Sequence[str]) -> ToolOutput:
    """What running ``argv`` on the simulated node prints and returns."""
    argv = _launched(argv)
    output = _run_tool(scenario, argv)
    args = _strip_sudo(argv)
    tool = os.path.basename(args[0]) if args else ""
    for apply in OUTPUT_FILTERS:
        output = apply(scenario, tool, args[1:], output)
    return output


def _run_tool(scenario: NodeScenario, argv: Sequence[str]) -> ToolOutput:
    args = _strip_sudo(argv)
    if scenario.has("hang"):
        return ToolOutput(b"", hang=True)
    for hook in TOOL_HOOKS:
        answered = hook(scenario, argv)
        if answered is not None:
            return answered
    if not args:
        return ToolOutput(b"", b"sh: 1: : not found\n", 127)
    tool, rest = os.path.basename(args[0]), args[1:]
    if tool == "nvidia-smi" and rest and rest[0] in SMI_SUBCOMMANDS:
        return SMI_SUBCOMMANDS[rest[0]](scenario, rest[1:])
    if tool == "nvidia-smi":
        return _nvidia_smi(node_facts(scenario), rest)
    if tool == "lspci":
        return ToolOutput(lspci_text(node_facts(scenario)).encode())
    if tool == "dmesg":
        return ToolOutput(kernel_log(scenario).encode())
    if tool == "journalctl":
        return ToolOutput(journal_text(scenario).encode())
    if tool in ("true", "false"):
        return ToolOutput(b"", rc=0 if tool == "true" else 1)
    if tool in TOOLS:
        return TOOLS[tool](scenario, rest)
    return ToolOutput(b"", f"sh: 1: {tool}: not found\n".encode(), 127)


def _invalid() -> ToolOutput:
    return ToolOutput(INVALID_ARGS_MESSAGE.encode(), rc=2)


def _nvidia_smi(facts: NodeFacts, args: Sequence[str]) -> ToolOutput:
    flags: set[str] = set()
    query: str | None = None
    fmt: str | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--query-gpu="):
            query = arg.split("=", 1)[1]
        elif arg.startswith("--format="):
            fmt = arg.split("=", 1)[1]
        elif arg in ("--query-gpu", "--format") and i + 1 < len(args):
            i += 1
            if arg == "--query-gpu":
                query = args[i]
            else:
                fmt = args[i]
        elif arg in ("-q", "--query"):
            flags.add("q")
        elif arg in ("-x", "--xml-format"):
            flags.add("x")
        elif arg in ("-L", "--list-gpus"):
            flags.add("L")
        elif arg in ("--version",):
            flags.add("version")
        else:
            return _invalid()
        i += 1
    if query is not None:
        options = [o.strip() for o in (fmt or "").split(",")]
        if flags or not options or options[0] != "csv" or not set(options[1:]) <= {"noheader", "nounits"}:
            return _invalid()
    elif fmt is not None or flags not in (set(), {"q", "x"}, {"L"}, {"version"}):
        return _invalid()
    if not facts.driver_loaded:
        return ToolOutput(DRIVER_MISSING_MESSAGE.encode(), rc=9)
    if query is not None:
        fields = [f for f in query.split(",") if f.strip()]
        try:
            text = render_query_csv(facts, fields, header="noheader" not in options, units="nounits" not in options)
        except KeyError as exc:
            return ToolOutput(f'Field "{exc.args[0]}" is not a valid field to query.\n\n'.encode(), rc=2)
        return ToolOutput(text.encode())
    if flags == {"q", "x"}:
        return ToolOutput(render_xml(facts).encode())
    if flags == {"L"}:
        return ToolOutput(render_list(facts).encode())
    if flags == {"version"}:
        return ToolOutput(render_version(facts).encode())
    return ToolOutput(render_table(facts).encode())


def lspci_text(facts: NodeFacts) -> str:
    """``lspci -D -n -d 10de:``: every GPU on the bus (nvidia-smi may see fewer) and the NVSwitches."""
    lines = [(g.lspci_address, f"{g.lspci_address} 0302: 10de:{g.pci_device_id} (rev a1)") for g in facts.pci_gpus]
    lines += [(addr, f"{addr} 0680: 10de:{dev} (rev a1)") for addr, dev in facts.nvswitches]
    return "".join(line + "\n" for _, line in sorted(lines))


def _pid(scenario: NodeScenario, n: int) -> int:
    return 100000 + int(hashlib.sha256(f"{scenario.name}/pid/{n}".encode()).hexdigest()[:8], 16) % 3900000


def xid_line(scenario: NodeScenario, gpu: SimGpu, xid: int, n: int = 0) -> str:
    """The ``NVRM: Xid`` message (without timestamp) for ``xid`` on ``gpu``."""
    by_process, text = XID_MESSAGES.get(xid, _GENERIC_XID)
    who = f"pid={_pid(scenario, n)}, name={'nvidia-smi' if xid == 119 else 'python3'}" if by_process else _UNKNOWN
    return f"NVRM: Xid (PCI:{gpu.kernel_address}): {xid}, {who}, {text}"


def kernel_messages(scenario: NodeScenario) -> list[tuple[float, str]]:
    """(uptime seconds, message) of the kernel ring buffer."""
    facts = node_facts(scenario)
    driver = facts.driver_version
    messages = [
        (0.0, "Linux version 5.15.0-105-generic (buildd@lcy02-amd64-054) (gcc (Ubuntu 11.4.0-1ubuntu1~22.04) "
              "11.4.0, GNU ld (GNU Binutils for Ubuntu) 2.38) #115-Ubuntu SMP Mon Apr 15 09:52:04 UTC 2024 "
              "(Ubuntu 5.15.0-105.115-generic 5.15.149)"),
        (0.0, "Command line: BOOT_IMAGE=/boot/vmlinuz-5.15.0-105-generic root=/dev/mapper/vg0-root ro "
              "iommu=pt pci=realloc=off"),
        (0.0, "DMI: Supermicro SYS-821GE-TNHR/X13DEG-OAD, BIOS 2.1 11/30/2023"),
    ]
    if facts.driver_loaded:
        messages += [
            (18.103482, "nvidia: loading out-of-tree module taints kernel."),
            (18.103501, "nvidia: module license 'NVIDIA' taints kernel."),
            (18.201734, "nvidia-nvlink: Nvlink Core is being initialized, major device number 507"),
            (18.204519, f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {driver}  Fri May 31 09:35:42 UTC 2024"),
            (18.512264, "nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  "
                        f"{driver}  Fri May 31 09:30:47 UTC 2024"),
        ]
    announced: set[int] = set()
    for n, (index, xid) in enumerate(facts.xid_events):
        gpu = facts.pci_gpus[index]
        when = FIRST_XID_UPTIME + 61.25 * n
        if index not in announced:
            announced.add(index)
            messages.append((when, f"NVRM: GPU at PCI:{gpu.kernel_address}: {gpu.uuid}"))
            messages.append((when, f"NVRM: GPU Board Serial Number: {gpu.serial}"))
        messages.append((when, xid_line(scenario, gpu, xid, n)))
        if xid == 79:
            messages.append((when, f"NVRM: GPU {gpu.lspci_address}: GPU has fallen off the bus."))
    return messages


def _uptime(seconds: float) -> str:
    micros = int(round(seconds * 1_000_000))
    return f"[{micros // 1_000_000:5d}.{micros % 1_000_000:06d}]"


def kernel_log(scenario: NodeScenario) -> str:
    """``dmesg`` output: ``[ 1234.567890] NVRM: Xid (PCI:0000:2a:00): 79, ...``."""
    return "".join(f"{_uptime(t)} {msg}\n" for t, msg in kernel_messages(scenario))


def journal_text(scenario: NodeScenario) -> str:
    """``journalctl -k`` (short format): ``Jul 14 08:33:27 node01 kernel: NVRM: Xid ...``."""
    host = node_facts(scenario).hostname
    lines = []
    for t, msg in kernel_messages(scenario):
        when = BOOT_TIME + datetime.timedelta(seconds=t)
        lines.append(f"{when:%b %d %H:%M:%S} {host} kernel: {msg}\n")
    return "".join(lines)
