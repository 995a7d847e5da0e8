"""``nvidia-smi mig -lgip`` (GPU instance profiles) and ``nvidia-smi mig -lgi`` (GPU instances), pure.

Real layout (tests/fixtures/real/nvidia-smi-mig, PROVENANCE.tsv)::

    | GPU instance profiles:                                                      |
    | GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |
    |                              Free/Total   GiB              CE    JPEG  OFA  |
    |=============================================================================|
    |   0  MIG 1g.5gb        19     7/7        4.75       No     14     0     0   |
    |                                                             1     0     0   |
    +-----------------------------------------------------------------------------+

    | GPU instances:                                     |
    | GPU   Name          Profile  Instance   Placement  |
    |                       ID       ID       Start:Size |
    |====================================================|
    |   0  MIG 3g.20gb       9        1          4:4     |

A profile takes two rows (the second: CE, JPEG, OFA). Without MIG the tool prints one line instead ("No GPU
instances found: Not Found", "No MIG-enabled devices found."): that line is the ``message``. Rows without their
table's title are a pasted piece (``fragment``). Never raises.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Optional

_PROFILES_TITLE = re.compile(r"^\|\s*GPU instance profiles:\s*\|?\s*$")
_INSTANCES_TITLE = re.compile(r"^\|\s*GPU instances:\s*\|?\s*$")
_OTHER_TITLE = re.compile(r"^\|\s*Compute instance(?: profile)?s:\s*\|?\s*$")
_PROFILE_ROW = re.compile(r"^\|\s{0,8}(\d{1,4})\s+(MIG\s+\S{1,40})\s+(\d{1,4})\s+(\d{1,4})/(\d{1,4})\s+"
                          r"([\d.]{1,12}|N/A)\s+(\S{1,8})\s+(\d{1,5})\s+(\d{1,4})\s+(\d{1,4})\s*\|\s*$")
_PROFILE_ROW2 = re.compile(r"^\|\s{20,}(\d{1,4})\s+(\d{1,4})\s+(\d{1,4})\s*\|\s*$")
_INSTANCE_ROW = re.compile(r"^\|\s{0,8}(\d{1,4})\s+(MIG\s+\S{1,40})\s+(\d{1,4})\s+(\d{1,4})\s+(\d{1,4}):(\d{1,4})"
                           r"\s*\|\s*$")
_MESSAGE = re.compile(r"^(?:No (?:GPU|compute) instances? (?:profiles? )?found|No MIG-enabled devices found|"
                      r"Unable to|Failed to|Insufficient Permissions|.*\bMIG mode\b.*\b(?:disabled|not supported)\b)",
                      re.IGNORECASE)


@dataclass(frozen=True)
class MigProfile:
    """One GPU instance profile of one GPU: how many of it are free and in all, and what each gets."""

    gpu: int
    name: str  # "MIG 1g.5gb", "MIG 1g.5gb+me"
    profile_id: int
    free: int
    total: int
    memory_gib: Optional[float]
    p2p: Optional[str]
    sm: int
    dec: int
    enc: int
    ce: Optional[int] = None  # from the profile's second row; None when the piece lacks it
    jpeg: Optional[int] = None
    ofa: Optional[int] = None


@dataclass(frozen=True)
class MigInstance:
    """One GPU instance: its profile, its ID and where it sits on the GPU (memory slices start:size)."""

    gpu: int
    name: str
    profile_id: int
    instance_id: int
    placement_start: int
    placement_size: int


@dataclass(frozen=True)
class MigFacts:
    profiles: tuple[MigProfile, ...] = ()
    instances: tuple[MigInstance, ...] = ()
    message: Optional[str] = None
    fragment: bool = False
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"profiles": [asdict(p) for p in self.profiles], "instances": [asdict(i) for i in self.instances],
                "message": self.message, "fragment": self.fragment, "warnings": list(self.warnings)}


def _float(text: str) -> Optional[float]:
    try:
        return float(text)
    except ValueError:
        return None


def parse_mig(text: str) -> MigFacts:
    """The profiles and instances the text lists (either table, or both), never raising."""
    if not isinstance(text, str):
        return MigFacts(warnings=("input is not text",))
    profiles: list[MigProfile] = []
    instances: list[MigInstance] = []
    message: Optional[str] = None
    titled = skipped = False
    table: Optional[str] = None  # the table the rows below belong to
    last: Optional[int] = None  # index in profiles of a profile whose second row may follow
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.strip()
        if _PROFILES_TITLE.match(line) or _INSTANCES_TITLE.match(line):
            table, titled = ("profiles" if _PROFILES_TITLE.match(line) else "instances"), True
            continue
        if _OTHER_TITLE.match(line):
            table, skipped = "other", True
            continue
        if table == "other":
            continue
        row = _PROFILE_ROW.match(line)
        if row and table != "instances":
            g = row.groups()
            profiles.append(MigProfile(int(g[0]), " ".join(g[1].split()), int(g[2]), int(g[3]), int(g[4]),
                                       _float(g[5]), None if g[6] == "N/A" else g[6], int(g[7]), int(g[8]),
                                       int(g[9])))
            last = len(profiles) - 1
            continue
        second = _PROFILE_ROW2.match(line) if last is not None else None
        if second:
            ce, jpeg, ofa = (int(v) for v in second.groups())
            old = profiles[last]  # type: ignore[index]
            profiles[last] = MigProfile(**{**asdict(old), "ce": ce, "jpeg": jpeg, "ofa": ofa})  # type: ignore[index]
            last = None
            continue
        last = None
        row = _INSTANCE_ROW.match(line)
        if row and table != "profiles":
            g = row.groups()
            instances.append(MigInstance(int(g[0]), " ".join(g[1].split()), int(g[2]), int(g[3]), int(g[4]),
                                         int(g[5])))
            continue
        if message is None and _MESSAGE.match(line):
            message = line[:300]
    warnings = []
    if skipped:
        warnings.append("compute instance tables (-lcip / -lci) are not read")
    if not profiles and not instances and message is None:
        warnings.append("no nvidia-smi mig -lgip / -lgi table found")
    fragment = bool(profiles or instances) and not titled
    if fragment:
        warnings.append("MIG table rows without the table's title: a piece of the output")
    return MigFacts(tuple(profiles), tuple(instances), message, fragment, tuple(warnings))
