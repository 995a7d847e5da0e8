"""What nvidia-smi's own exit status and output say, before any fact is read from it.

The exit code decides, not a table that looks healthy (an infoROM-corrupted GPU prints a full table and rc 14).
Known codes map to specific verdicts; any other non-zero code is ERROR, never PASS.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from nvdeploy.results import CommandResult, ErrorReason, Remediation, Verdict


@dataclass(frozen=True)
class SmiStatus:
    """None verdict means nvidia-smi answered and its facts can be used."""

    verdict: Optional[Verdict]
    summary: str = ""
    reason: Optional[ErrorReason] = None
    remediation: Remediation = Remediation.NONE

    @property
    def usable(self) -> bool:
        return self.verdict is None


_KNOWN_RC: dict[int, tuple[str, Remediation]] = {
    6: ("nvidia-smi found no GPU ('No devices were found')", Remediation.ISOLATE),
    9: ("NVIDIA driver not loaded (nvidia-smi could not communicate with the driver)", Remediation.REINSTALL),
    12: ("NVML library not found: driver installation incomplete", Remediation.REINSTALL),
    14: ("infoROM corrupted (nvidia-smi exit 14)", Remediation.ISOLATE),
    15: ("a GPU has fallen off the bus or is inaccessible (nvidia-smi exit 15)", Remediation.ISOLATE),
    18: ("driver/library version mismatch: reboot required to load the installed driver", Remediation.REBOOT),
}


def _first_line(result: CommandResult) -> str:
    for text in (result.text, result.err_text):
        for line in text.splitlines():
            if line.strip():
                return line.strip()[:200]
    return ""


def smi_status(result: Optional[CommandResult]) -> SmiStatus:
    if result is None:
        return SmiStatus(Verdict.ERROR, "nvidia-smi was not run", ErrorReason.NOT_RUN)
    if result.error is ErrorReason.TIMEOUT or result.timed_out:
        return SmiStatus(Verdict.ERROR, f"nvidia-smi did not answer ({result.error_detail or 'timed out'}): a hung "
                         "GPU or driver (check for processes in D state and Xid 79/45 in the kernel log)",
                         ErrorReason.TIMEOUT, Remediation.REBOOT)
    if result.error is not None:
        return SmiStatus(Verdict.ERROR, f"nvidia-smi result unusable: {result.error_detail or result.error.value}",
                         result.error)
    text = result.text
    rc = result.rc
    if rc == 127:
        return SmiStatus(Verdict.ERROR, "nvidia-smi not found on the node (driver not installed?)",
                         ErrorReason.TOOL_MISSING, Remediation.REINSTALL)
    if rc in _KNOWN_RC:
        summary, remediation = _KNOWN_RC[rc]
        return SmiStatus(Verdict.FAIL, summary, None, remediation)
    if rc != 0:
        return SmiStatus(Verdict.ERROR, f"nvidia-smi exited {rc}: {_first_line(result) or 'no output'}",
                         ErrorReason.UNPARSEABLE)
    if "couldn't communicate with the NVIDIA driver" in text:
        return SmiStatus(Verdict.FAIL, _KNOWN_RC[9][0], None, Remediation.REINSTALL)
    if result.truncated:
        return SmiStatus(Verdict.ERROR, "nvidia-smi output exceeded the capture limit", ErrorReason.INCOMPLETE)
    if "</nvidia_smi_log>" not in text:
        return SmiStatus(Verdict.ERROR, "nvidia-smi -q -x output is cut off or not XML", ErrorReason.INCOMPLETE)
    return SmiStatus(None)
