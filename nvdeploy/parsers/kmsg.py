"""Parse kernel log text (dmesg, ``dmesg -T``, journalctl -k, syslog, /dev/kmsg) for GPU and PCIe faults.

Lines are searched, not anchored, so any timestamp or syslog prefix (``[  888.3]``, ``[Sun Feb 23 16:24:18 2025]``,
``Oct 30 09:49:36 host kernel:``, ``kern  :err   :``) is accepted. Continuation lines (journalctl's indented
wrap, GSP RPC history tables, call traces) never start an event. NVSwitch ``SXid`` lines are SXid events and are
never counted as Xid; the ``Severity`` and ``Data`` lines that follow an SXid's main line belong to that one event.
``RmInitAdapter failed!`` lines name a GPU the driver could not initialise. A log cut to its newest bytes
(``partial_first_line=True``) starts mid-line: that first line is dropped, never half-read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from nvdeploy.parsers.text import prepare as _prepare


@dataclass(frozen=True)
class XidEvent:
    """One ``NVRM: Xid (PCI:dddd:bb:dd): N, ...`` line. ``pci`` as printed without ``PCI:``; ``text`` is the
    message after the Xid number with ``pid=`` and ``name=`` removed; ``pid`` is None when absent or '<unknown>'."""

    xid: int
    pci: str | None
    pid: int | None
    text: str
    line: str

    def to_dict(self) -> dict[str, Any]:
        return {"xid": self.xid, "pci": self.pci, "pid": self.pid, "text": self.text, "line": self.line}


@dataclass(frozen=True)
class SxidEvent:
    """One NVSwitch ``SXid`` line: ``nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 48 LTSSM Fault Up``.

    ``device`` is the switch's PCI address, else its ``nvidia-nvswitchN`` name; ``switch`` the ``nvidia-nvswitchN``
    name when printed; ``fatal`` what the driver flagged (``Fatal`` True, ``Non-fatal`` False, neither None);
    ``link`` the NVLink port number when the message names one; ``text`` the message after the SXid number.
    """

    sxid: int
    device: str | None
    text: str
    line: str
    switch: str | None = None
    fatal: bool | None = None
    link: int | None = None
    # The ``Severity ...`` and ``Data {...}`` lines the driver prints after the main line of the same event.
    details: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"sxid": self.sxid, "device": self.device, "switch": self.switch, "fatal": self.fatal,
                "link": self.link, "text": self.text, "line": self.line, "details": list(self.details)}


@dataclass(frozen=True)
class InitFailure:
    """One ``NVRM: GPU 0000:41:00.0: RmInitAdapter failed! (0x62:0x40:2404)`` line: the driver could not
    initialise that GPU, so nvidia-smi and NVML do not list it. ``code`` is the parenthesised status as printed."""

    pci: str
    code: str
    line: str

    def to_dict(self) -> dict[str, Any]:
        return {"pci": self.pci, "code": self.code, "line": self.line}


@dataclass(frozen=True)
class AerEvent:
    """One PCIe AER error line. ``device`` is the erroring device (the source after ``received:`` when given,
    else the reporting device); ``severity`` is ``corrected``, ``uncorrected_nonfatal``, ``uncorrected_fatal``,
    ``uncorrected`` (kind not stated) or None."""

    device: str | None
    severity: str | None
    line: str

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "severity": self.severity, "line": self.line}


@dataclass(frozen=True)
class KmsgFacts:
    xid_events: tuple[XidEvent, ...] = ()
    xid_counts: dict[str, int] = field(default_factory=dict)
    sxid_events: tuple[SxidEvent, ...] = ()
    aer_events: tuple[AerEvent, ...] = ()
    warnings: tuple[str, ...] = ()
    # The partial first line of a log cut to its newest bytes, dropped unread (empty when none was dropped).
    dropped_first_line: str = ""
    init_failures: tuple[InitFailure, ...] = ()
    # The log does not start at boot (no ``Linux version`` line, no ``[    0.000000]`` timestamp, no journal
    # boot marker), or its head was cut: a piece, which cannot show that an event did not happen since boot.
    fragment: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "xid_events": [e.to_dict() for e in self.xid_events],
            "xid_counts": dict(self.xid_counts),
            "sxid_events": [e.to_dict() for e in self.sxid_events],
            "aer_events": [e.to_dict() for e in self.aer_events],
            "warnings": list(self.warnings),
            "dropped_first_line": self.dropped_first_line,
            "init_failures": [e.to_dict() for e in self.init_failures],
            "fragment": self.fragment,
        }


# What only the start of a boot's kernel log prints (dmesg, journalctl -k -b, syslog): the kernel banner, the
# first timestamp, a journal boot separator.
_BOOT_RE = re.compile(r"\bLinux version \d|^[^\n\[]{0,80}\[\s{0,12}0\.000000\]"
                      r"|^-- (?:Boot [0-9a-f]{8,}|Logs begin at)\b", re.MULTILINE)
_BOOT_HEAD = 8192
_XID_RE = re.compile(r"\bXid\s*\(\s*(?:PCI:)?(?P<pci>[^)]*?)\s*\)\s*:\s*(?P<xid>\d+)\b[,:]?\s*(?P<rest>.*)$")
_SXID_RE = re.compile(
    r"(?:(?P<dev>nvidia-nvswitch\d*)\s*:\s*)?\bSXid\s*\(\s*(?:PCI:)?(?P<pci>[^)]*?)\s*\)\s*:\s*(?P<sxid>\d+)\b"
    r"[,:]?\s*(?P<rest>.*)$"
)
# The severity word NVSwitch drivers print after the SXid number ("Fatal", "Non-fatal", "Nonfatal").
_SXID_SEVERITY_RE = re.compile(r"^(?P<word>Non-?\s*fatal|Fatal)\b\s*[,:]?\s*", re.IGNORECASE)
_SXID_LINK_RE = re.compile(r"\bLink\s*(?:#\s*)?(\d+)\b", re.IGNORECASE)
# What follows the SXid number on the lines that continue an event: "Severity 0 Engine instance 60 ...",
# "Data {0x0000003c, ...}".
_SXID_DETAIL_RE = re.compile(r"^(?:Severity\b|Data\s*\{)", re.IGNORECASE)
_INIT_FAILURE_RE = re.compile(
    r"\bNVRM:\s*GPU\s+(?:PCI:)?(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s*:\s*"
    r"RmInitAdapter failed!?\s*(?:\((?P<code>[^)]*)\))?", re.IGNORECASE)
_PID_RE = re.compile(r"^pid\s*=\s*(?:'?<unknown>'?|'?(?P<pid>\d+)'?|[^,]*)\s*(?:,\s*|$)")
_NAME_RE = re.compile(r"^name\s*=\s*[^,]*(?:,\s*|$)")
_PCI_DEV = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
# Kernels before ~6.2 print "Corrected"/"Uncorrected (Fatal)", later ones "Correctable"/"Uncorrectable (Fatal)".
_AER_SEVERITY = (
    (re.compile(r"\bUncorrect(?:ed|able)\s*\(\s*Non-?Fatal\s*\)", re.IGNORECASE), "uncorrected_nonfatal"),
    (re.compile(r"\bUncorrect(?:ed|able)\s*\(\s*Fatal\s*\)", re.IGNORECASE), "uncorrected_fatal"),
    (re.compile(r"\bCorrect(?:ed|able)\b", re.IGNORECASE), "corrected"),
    (re.compile(r"\bUncorrect(?:ed|able)\b", re.IGNORECASE), "uncorrected"),
)
_AER_SOURCE_RE = re.compile(r"error (?:message )?received(?:\s+from)?:?\s*(?:id=)?(" + _PCI_DEV + r")", re.IGNORECASE)
_AER_REPORTER_RE = re.compile(r"(?:^|\s)(" + _PCI_DEV + r"):\s*(?:AER:|PCIe Bus Error)", re.IGNORECASE)
_LOG_TROUBLE_RE = re.compile(
    r"read kernel buffer failed|Operation not permitted|No journal files were found|Permission denied", re.IGNORECASE
)
_MAX_WARNINGS = 20




def _xid_event(match: re.Match[str], line: str) -> XidEvent:
    rest = match.group("rest").strip()
    pid: int | None = None
    pid_match = _PID_RE.match(rest)
    if pid_match:
        pid = int(pid_match.group("pid")) if pid_match.group("pid") else None
        rest = rest[pid_match.end():]
    name_match = _NAME_RE.match(rest)
    if name_match:
        rest = rest[name_match.end():]
    return XidEvent(int(match.group("xid")), match.group("pci") or None, pid, rest.strip(), line)


def _sxid_event(match: re.Match[str], line: str) -> SxidEvent:
    rest = match.group("rest").strip()
    fatal: bool | None = None
    severity = _SXID_SEVERITY_RE.match(rest)
    if severity:
        fatal = not severity.group("word").lower().startswith("non")
    link = _SXID_LINK_RE.search(rest)
    device = match.group("pci") or match.group("dev")
    return SxidEvent(int(match.group("sxid")), device or None, rest, line, switch=match.group("dev") or None,
                     fatal=fatal, link=int(link.group(1)) if link else None)


def _aer_event(line: str) -> AerEvent | None:
    if "AER" not in line and "PCIe Bus Error" not in line:
        return None
    severity = next((name for pattern, name in _AER_SEVERITY if pattern.search(line)), None)
    if severity is None:  # "AER: enabled with IRQ", per-bit detail lines ("[ 0] RxErr"), status/mask dumps
        return None
    source = _AER_SOURCE_RE.search(line) or _AER_REPORTER_RE.search(line)
    return AerEvent(source.group(1).lower() if source else None, severity, line)


def parse_kmsg(text: str, partial_first_line: bool = False) -> KmsgFacts:
    """Read Xid, SXid and PCIe AER events from kernel log text. Never raises.

    ``partial_first_line``: the text is the tail of a longer log, so its first line is a fragment (dropped).
    """
    text, warnings = _prepare(text)
    dropped = ""
    if partial_first_line:
        dropped, _, text = text.partition("\n")
    if not text.strip():
        return KmsgFacts(warnings=(*warnings, "empty input"), dropped_first_line=dropped)
    xids: list[XidEvent] = []
    sxids: list[SxidEvent] = []
    aers: list[AerEvent] = []
    inits: list[InitFailure] = []
    unparsed = 0
    for raw in text.split("\n"):
        line = raw.rstrip()
        if not line.strip():
            continue
        sxid = _SXID_RE.search(line)
        if sxid:
            event = _sxid_event(sxid, line)
            last = sxids[-1] if sxids else None
            if last is not None and _SXID_DETAIL_RE.match(event.text) and (last.sxid, last.device) == \
                    (event.sxid, event.device):
                sxids[-1] = replace(last, details=(*last.details, event.text))
            else:
                sxids.append(event)
            continue
        init = _INIT_FAILURE_RE.search(line)
        if init:
            inits.append(InitFailure(init.group("pci").lower(), (init.group("code") or "").strip(), line))
            continue
        xid = _XID_RE.search(line)
        if xid:
            xids.append(_xid_event(xid, line))
            continue
        if re.search(r"\bXid\b", line) and "NVRM" in line:
            unparsed += 1
            if unparsed <= _MAX_WARNINGS:
                warnings.append(f"Xid-like line not understood: {line.strip()[:300]!r}")
            continue
        aer = _aer_event(line)
        if aer is not None:
            aers.append(aer)
            continue
        if _LOG_TROUBLE_RE.search(line) and len(warnings) < _MAX_WARNINGS:
            warnings.append(f"kernel log may be incomplete: {line.strip()[:300]!r}")
    counts: dict[str, int] = {}
    for event in sorted(xids, key=lambda e: e.xid):
        counts[str(event.xid)] = counts.get(str(event.xid), 0) + 1
    # Only the head is searched: a log from boot starts with its banner (the whole text would cost a third of a
    # fleet node's kernel-log parse).
    fragment = bool(dropped) or partial_first_line or _BOOT_RE.search(text, 0, _BOOT_HEAD) is None
    return KmsgFacts(tuple(xids), counts, tuple(sxids), tuple(aers), tuple(warnings), dropped, tuple(inits),
                     fragment)
