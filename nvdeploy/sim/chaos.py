"""Chaos faults for simulated nodes: hangs, floods, hostile bytes, slowness and nvidia-smi exit codes.

They work the same in-process (``connection: sim``) and on fake SSH nodes (``nvdeploy.testing.SshCluster``),
because both run :func:`nvdeploy.sim.tools.run_tool`, whose output passes through :data:`OUTPUT_FILTERS`; this
module adds one filter there. Give them like any other fault: ``sim_faults: [smi_hang]`` in an inventory, or
``NodeScenario(name, profile, ("flood",))`` for a fake SSH node. Faults combine; they are applied in the order
below, so ``smi_hang`` wins over everything and ``slow`` delays whatever the other faults produced.

- ``smi_rc:<N>`` (0-255): every ``nvidia-smi`` call exits N with what the real tool prints for that code (the
  nvidia-smi man page's RETURN VALUE list, and gputil#55 for 18):

  - 6: ``No devices were found``;
  - 9: ``NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. ...``;
  - 12: ``NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. ...`` (two lines);
  - 14: the complete, healthy-looking normal output followed by ``WARNING: infoROM is corrupted at gpu
    0000:18:00.0`` (the exit code decides, not the table);
  - 15: ``Unable to determine the device handle for GPU0000:2A:00.0: GPU is lost.  Reboot the system to recover
    this GPU`` (GPU 1, the GPU of the ``xid<N>`` faults);
  - 18: ``Failed to initialize NVML: Driver/library version mismatch`` then ``NVML library version: <branch>.<minor>``;
  - 2: the ``Invalid combination of input arguments`` message;
  - 0: the normal output (a no-op, for symmetric tests);
  - any other code: ``Unknown Error``.

  All on stdout, as nvidia-smi prints its errors. Expected verdict: FAIL for the known codes (6, 9, 12, 14, 15,
  18), ERROR for any other non-zero code, never PASS.
- ``smi_cut``: ``nvidia-smi`` prints the first half of its normal output and exits 0 (the output ends early: no
  closing ``</nvidia_smi_log>``). Expected: ERROR ``incomplete``.
- ``flood`` / ``flood:<MiB>`` (1-1024): ``nvidia-smi -q`` (the query every GPU check reads; other nvidia-smi
  calls are left alone, so a node makes exactly one flood) prints its normal output, then filler lines of ``x``
  up to 50 MiB (or MiB given) in total, and exits 0. Expected: evidence capped and marked truncated, the nvidia-smi
  checks ERROR ``incomplete`` (never PASS on the part that was read), the controller's memory bounded.
- ``garbage`` / ``garbage:<tool>``: hostile bytes in every tool's output, or only in that tool's
  (:data:`GARBAGE`: invalid UTF-8, a UTF-8 sequence cut short, NUL bytes, terminal escape sequences (clear
  screen, colours, an OSC window-title sequence), CR, backspace, BEL, a C1 control):

  - ``nvidia-smi``: a line of garbage printed before the normal output (as a broken driver or shell noise
    would), so the XML cannot be parsed: expected ERROR ``unparseable``, never a traceback;
  - ``dmesg`` / ``journalctl``: a garbage line after the first line, and an Xid 13 on GPU 0 raised by a process
    whose name is made of escape sequences and invalid bytes (:data:`GARBAGE_COMM`: process names are
    user-controlled and the kernel prints them verbatim). Expected: Xid 13 parsed (WARN), the hostile name
    shown but never sent raw to the operator's terminal, JUnit still well-formed XML;
  - every other tool: a garbage line appended to stdout;
  - every tool: a garbage line appended to stderr.
- ``slow`` / ``slow:<seconds>`` / ``slow:<tool>`` / ``slow:<tool>:<seconds>``: the tool (every tool when none is
  named) answers after a delay (default 5 s; up to 9999 s, decimals allowed), then prints its normal output.
  On a fake SSH node the fake tool really sleeps; in-process the simulated transport waits (interruptibly) as
  long as the slowest command of the batch, and a delay at or beyond a command's timeout is that command's
  timeout. Expected: results arrive when ready; other nodes are not slowed.
- ``smi_hang``: only ``nvidia-smi`` hangs (killable with SIGTERM/SIGKILL, as the batch's ``timeout -k`` does);
  every other tool, the kernel log included, still answers. Expected: ERROR ``timeout`` on the nvidia-smi checks
  at the command's timeout, the other collectors still report (e.g. an Xid 79 in the kernel log is still FAIL).
  Note that the NVML probe (``python3``) still answers: use ``driver_hang`` for a GPU that hangs the driver.
- ``driver_hang``: every tool that talks to the GPU driver hangs (:data:`DRIVER_TOOLS`: ``nvidia-smi``, the NVML
  probe's ``python3``, ``dcgmi``, ``nv-hostengine``, ``all_reduce_perf``, ``mpirun``), as with a GPU stuck after
  Xid 79/45; ``lspci``, ``dmesg``, ``journalctl`` and the rest still answer.
"""

from __future__ import annotations

import datetime
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Optional

from nvdeploy.sim.scenario import NodeScenario, node_facts, register_fault
from nvdeploy.sim.tools import (
    BOOT_TIME,
    DRIVER_MISSING_MESSAGE,
    INVALID_ARGS_MESSAGE,
    OUTPUT_FILTERS,
    ToolOutput,
)

SMI = "nvidia-smi"
DRIVER_TOOLS = frozenset({SMI, "python3", "dcgmi", "nv-hostengine", "all_reduce_perf", "mpirun"})
DEFAULT_FLOOD_MIB = 50
DEFAULT_SLOW_S = 5.0
XID_GARBAGE_UPTIME = 2000.25
# Invalid UTF-8 (a lone 0xff 0xfe, a bad continuation, a 3-byte sequence cut short), NULs, terminal escapes.
GARBAGE = (b"\xff\xfe bad-utf8:\xc3\x28 cut:\xe2\x82 nul:\x00\x00 clear:\x1b[2J\x1b[H colour:\x1b[31mRED\x1b[0m "
           b"title:\x1b]0;nvd-pwned\x07 cr:\r bs:\x08 bel:\x07 c1:\xc2\x9b31m end")
# A process name (the kernel keeps 15 bytes of it) made of an OSC title sequence, a clear screen and bad bytes.
GARBAGE_COMM = b"\x1b]0;pwn\x07\x1b[2J\xff\xfe"

RC_MESSAGES: dict[int, bytes] = {
    2: INVALID_ARGS_MESSAGE.encode(),
    6: b"No devices were found\n",
    9: DRIVER_MISSING_MESSAGE.encode(),
    12: (b"NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that the NVIDIA "
         b"Display Driver is properly installed and present in your system.\nPlease also try adding directory "
         b"that contains libnvidia-ml.so to your system PATH.\n"),
}
UNKNOWN_RC_MESSAGE = b"Unknown Error\n"

_FLOOD = re.compile(r"flood(?::([1-9][0-9]{0,2}|10[01][0-9]|102[0-4]))?")
_SLOW = re.compile(r"slow(?::([A-Za-z][A-Za-z0-9_.+-]*))?(?::([0-9]{1,4}(?:\.[0-9]{1,3})?))?")
_GARBAGE = re.compile(r"garbage(?::([A-Za-z][A-Za-z0-9_.+-]*))?")
_SMI_RC = re.compile(r"smi_rc:(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])")

register_fault("smi_hang", "only nvidia-smi hangs; every other tool still answers")
register_fault("driver_hang", "every tool that talks to the GPU driver hangs (nvidia-smi, NVML probe, dcgmi, ...)")
register_fault("smi_cut", "nvidia-smi prints the first half of its output and exits 0")
register_fault("garbage", "invalid UTF-8, NUL bytes and terminal escape codes in every tool's output "
               "(garbage:<tool> for one tool)", pattern=_GARBAGE.pattern)
register_fault("flood", "nvidia-smi prints 50 MiB (flood:<MiB> for another size)", pattern=_FLOOD.pattern)
register_fault("slow", "tools answer after a delay: slow, slow:<s>, slow:<tool>, slow:<tool>:<s>",
               pattern=_SLOW.pattern)
register_fault("smi_rc", "nvidia-smi exits <N> with the real message: smi_rc:<N>", pattern=_SMI_RC.pattern)


@dataclass(frozen=True)
class Chaos:
    """The chaos faults of one node, parsed once."""

    smi_hang: bool = False
    driver_hang: bool = False
    smi_cut: bool = False
    garbage: tuple[Optional[str], ...] = ()  # tools whose output gets garbage (None: every tool)
    flood_bytes: int = 0
    smi_rc: Optional[int] = None
    delays: tuple[tuple[Optional[str], float], ...] = ()  # (tool or None for every tool, seconds)

    @property
    def active(self) -> bool:
        return self != _NONE

    def garbles(self, tool: str) -> bool:
        return None in self.garbage or tool in self.garbage

    def delay_for(self, tool: str) -> float:
        return max((s for name, s in self.delays if name is None or name == tool), default=0.0)


_NONE = Chaos()


@functools.lru_cache(maxsize=256)
def parse_chaos(faults: tuple[str, ...]) -> Chaos:
    """The chaos faults among ``faults`` (other faults are ignored)."""
    smi_rc: Optional[int] = None
    flood = 0
    delays: list[tuple[Optional[str], float]] = []
    garbage: list[Optional[str]] = []
    for fault in faults:
        match = _SMI_RC.fullmatch(fault)
        if match:
            smi_rc = int(match.group(1))
            continue
        match = _FLOOD.fullmatch(fault)
        if match:
            flood = int(match.group(1) or DEFAULT_FLOOD_MIB) * 1024 * 1024
            continue
        match = _GARBAGE.fullmatch(fault)
        if match:
            garbage.append(match.group(1))
            continue
        match = _SLOW.fullmatch(fault)
        if match:
            delays.append((match.group(1), float(match.group(2) or DEFAULT_SLOW_S)))
    return Chaos(smi_hang="smi_hang" in faults, driver_hang="driver_hang" in faults, smi_cut="smi_cut" in faults,
                 garbage=tuple(garbage), flood_bytes=flood, smi_rc=smi_rc, delays=tuple(delays))


def filler(size: int) -> bytes:
    """``size`` bytes of 1 KiB lines of ``x``."""
    line = b"x" * 1023 + b"\n"
    whole, rest = divmod(max(0, size), len(line))
    return line * whole + b"x" * rest


def _smi_rc_output(scenario: NodeScenario, rc: int, normal: ToolOutput) -> ToolOutput:
    if rc == 0:
        return normal
    facts = node_facts(scenario)
    if rc == 14:
        first = facts.gpus[0].bus_id[4:] if facts.gpus else "0000:18:00.0"
        return ToolOutput(normal.stdout + f"WARNING: infoROM is corrupted at gpu {first}\n".encode(), normal.stderr, 14)
    if rc == 15:
        gpus = facts.pci_gpus
        lost = gpus[min(1, len(gpus) - 1)].bus_id if gpus else "00000000:2A:00.0"
        return ToolOutput(f"Unable to determine the device handle for GPU{lost[4:]}: GPU is lost.  Reboot the "
                          "system to recover this GPU\n".encode(), b"", 15)
    if rc == 18:
        branch = ".".join(facts.driver_version.split(".")[:2])
        return ToolOutput(b"Failed to initialize NVML: Driver/library version mismatch\n"
                          + f"NVML library version: {branch}\n".encode(), b"", 18)
    return ToolOutput(RC_MESSAGES.get(rc, UNKNOWN_RC_MESSAGE), b"", rc)


def _garbage_xid_line(scenario: NodeScenario, tool: str) -> bytes:
    facts = node_facts(scenario)
    bus = facts.pci_gpus[0].kernel_address if facts.pci_gpus else "0000:18:00"
    message = (f"NVRM: Xid (PCI:{bus}): 13, pid=4242, name=".encode() + GARBAGE_COMM
               + b", Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address")
    if tool == "journalctl":
        when = BOOT_TIME + datetime.timedelta(seconds=XID_GARBAGE_UPTIME)
        return f"{when:%b %d %H:%M:%S} {facts.hostname} kernel: ".encode() + message + b"\n"
    micros = int(round(XID_GARBAGE_UPTIME * 1_000_000))
    return f"[{micros // 1_000_000:5d}.{micros % 1_000_000:06d}] ".encode() + message + b"\n"


def _garbage(scenario: NodeScenario, tool: str, output: ToolOutput) -> ToolOutput:
    line = GARBAGE + b"\n"
    stdout = output.stdout
    if tool == SMI:
        stdout = line + stdout
    elif tool in ("dmesg", "journalctl"):
        first, sep, rest = stdout.partition(b"\n")
        stdout = first + sep + line + rest + _garbage_xid_line(scenario, tool)
    else:
        stdout = stdout + line
    return replace(output, stdout=stdout, stderr=output.stderr + line)


def apply_chaos(scenario: NodeScenario, tool: str, args: Sequence[str], output: ToolOutput) -> ToolOutput:
    """The :data:`OUTPUT_FILTERS` entry: rewrite ``output`` of ``tool`` as the node's chaos faults say."""
    chaos = parse_chaos(scenario.faults)
    if not chaos.active:
        return output
    if tool == SMI:
        if chaos.smi_rc is not None:
            output = _smi_rc_output(scenario, chaos.smi_rc, output)
        if chaos.smi_cut:
            output = replace(output, stdout=output.stdout[: len(output.stdout) // 2], rc=0)
        if chaos.flood_bytes and ("-q" in args or "--query" in args):
            output = replace(output, stdout=output.stdout + filler(chaos.flood_bytes - len(output.stdout)))
    if chaos.garbles(tool):
        output = _garbage(scenario, tool, output)
    delay = chaos.delay_for(tool)
    if delay:
        output = replace(output, delay_s=max(output.delay_s, delay))
    if (chaos.smi_hang and tool == SMI) or (chaos.driver_hang and tool in DRIVER_TOOLS):
        output = replace(output, hang=True)
    return output


OUTPUT_FILTERS.append(apply_chaos)
