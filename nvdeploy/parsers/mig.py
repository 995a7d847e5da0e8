"""``nvidia-smi mig -lgip`` (GPU instance profiles), ``-lgi`` (GPU instances) and ``-lci`` (compute instances), pure.

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

    | Compute instances:                                                 |
    | GPU     GPU       Name             Profile   Instance   Placement  |
    |       Instance                       ID        ID       Start:Size |
    |         ID                                                         |
    |====================================================================|
    |   0      1       MIG 3g.20gb          2         0          0:3     |

``-lci`` rows carry the GPU instance ID before the name, and the compute instance profile ID (not the GPU
instance's); drivers before R470 print no Placement column. A profile takes two rows (the second: CE, JPEG,
OFA). Without MIG the tool prints one line instead ("No GPU
instances found: Not Found", "No MIG-enabled devices found."): that line is the ``message``. Rows without their
table's title are a pasted piece (``fragment``). Never raises.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Optional

_PROFILES_TITLE = re.compile(r"^\|\s*GPU instance profiles:\s*\|?\s*$")
_INSTANCES_TITLE = re.compile(r"^\|\s*GPU instances:\s*\|?\s*$")
_COMPUTE_TITLE = re.compile(r"^\|\s*Compute instances:\s*\|?\s*$")
_OTHER_TITLE = re.compile(r"^\|\s*Compute instance profiles:\s*\|?\s*$")
_PROFILE_ROW = re.compile(r"^\|\s{0,8}(\d{1,4})\s+(MIG\s+\S{1,40})\s+(\d{1,4})\s+(\d{1,4})/(\d{1,4})\s+"
                          r"([\d.]{1,12}|N/A)\s+(\S{1,8})\s+(\d{1,5})\s+(\d{1,4})\s+(\d{1,4})\s*\|\s*$")
_PROFILE_ROW2 = re.compile(r"^\|\s{20,}(\d{1,4})\s+(\d{1,4})\s+(\d{1,4})\s*\|\s*$")
_INSTANCE_ROW = re.compile(r"^\|\s{0,8}(\d{1,4})\s+(MIG\s+\S{1,40})\s+(\d{1,4})\s+(\d{1,4})\s+(\d{1,4}):(\d{1,4})"
                           r"\s*\|\s*$")
_COMPUTE_ROW = re.compile(r"^\|\s{0,8}(\d{1,4})\s+(\d{1,4})\s+(MIG\s+\S{1,40})\s+(\d{1,4})\s+(\d{1,4})"
                          r"(?:\s+(\d{1,4}):(\d{1,4}))?\s*\|\s*$")
# -cgi / -cci / -dci / -dgi report each instance made or destroyed on a line of its own.
_CHANGE = re.compile(r"^Successfully (?:created|destroyed) (?:GPU|compute) instance ID\s{0,3}\d{1,4}\b.{0,200}$")
# -lgipp: "GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1" ("Placement :" where there is one).
_PLACEMENTS = re.compile(r"^GPU\s{1,4}(\d{1,4})\s+Profile ID\s{1,4}(\d{1,4})\s+Placements?\s*:\s*"
                         r"\{([\d,]{1,80})\}:(\d{1,4})$")
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
class ComputeInstance:
    """One compute instance inside GPU instance ``gpu_instance_id``; placement None where the driver prints none."""

    gpu: int
    gpu_instance_id: int
    name: str  # "MIG 3g.20gb" for the GPU instance's full-size compute instance, "MIG 1c.3g.20gb" for a slice
    profile_id: int  # the compute instance profile's ID
    instance_id: int
    placement_start: Optional[int] = None
    placement_size: Optional[int] = None


@dataclass(frozen=True)
class MigFacts:
    profiles: tuple[MigProfile, ...] = ()
    instances: tuple[MigInstance, ...] = ()
    message: Optional[str] = None
    fragment: bool = False
    warnings: tuple[str, ...] = ()
    compute_instances: tuple[ComputeInstance, ...] = ()
    # (GPU, profile ID, possible starts, size) from -lgipp
    placements: tuple[tuple[int, int, tuple[int, ...], int], ...] = ()
    # The "Successfully created ..." / "Successfully destroyed ..." lines of -cgi, -cci, -dci, -dgi, in order.
    changes: tuple[str, ...] = ()
    # Which tables the text has a title of ("profiles", "instances", "compute"): an empty table is still a table.
    tables: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"profiles": [asdict(p) for p in self.profiles], "instances": [asdict(i) for i in self.instances],
                "compute_instances": [asdict(c) for c in self.compute_instances], "tables": list(self.tables),
                "placements": [list(p) for p in self.placements], "changes": list(self.changes),
                "message": self.message, "fragment": self.fragment, "warnings": list(self.warnings)}


def _float(text: str) -> Optional[float]:
    try:
        return float(text)
    except ValueError:
        return None


def parse_mig(text: str) -> MigFacts:
    """The profiles, GPU instances and compute instances the text lists (any of the tables), never raising."""
    if not isinstance(text, str):
        return MigFacts(warnings=("input is not text",))
    profiles: list[MigProfile] = []
    instances: list[MigInstance] = []
    computes: list[ComputeInstance] = []
    tables: list[str] = []
    placements: list[tuple[int, int, tuple[int, ...], int]] = []
    changes: list[str] = []
    message: Optional[str] = None
    titled = skipped = False
    table: Optional[str] = None  # the table the rows below belong to
    last: Optional[int] = None  # index in profiles of a profile whose second row may follow
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.strip()
        if _PROFILES_TITLE.match(line) or _INSTANCES_TITLE.match(line) or _COMPUTE_TITLE.match(line):
            table = ("profiles" if _PROFILES_TITLE.match(line) else "instances" if _INSTANCES_TITLE.match(line)
                     else "compute")
            titled = True
            if table not in tables:
                tables.append(table)
            continue
        if _OTHER_TITLE.match(line):
            table, skipped, titled = "other", True, True
            if "compute_profiles" not in tables:
                tables.append("compute_profiles")
            continue
        if table == "other":
            continue
        row = _PROFILE_ROW.match(line)
        if row and table in ("profiles", None):
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
        row = _COMPUTE_ROW.match(line)
        if row and table in ("compute", None):
            g = row.groups()
            computes.append(ComputeInstance(int(g[0]), int(g[1]), " ".join(g[2].split()), int(g[3]), int(g[4]),
                                            int(g[5]) if g[5] is not None else None,
                                            int(g[6]) if g[6] is not None else None))
            continue
        row = _INSTANCE_ROW.match(line)
        if row and table in ("instances", None):
            g = row.groups()
            instances.append(MigInstance(int(g[0]), " ".join(g[1].split()), int(g[2]), int(g[3]), int(g[4]),
                                         int(g[5])))
            continue
        placed = _PLACEMENTS.match(line)
        if placed:
            starts = tuple(int(v) for v in placed.group(3).split(",") if v)
            placements.append((int(placed.group(1)), int(placed.group(2)), starts, int(placed.group(4))))
            continue
        if _CHANGE.match(line):
            changes.append(" ".join(line.split()))
            continue
        if message is None and _MESSAGE.match(line):
            message = line[:300]
    warnings = []
    if skipped:
        warnings.append("the compute instance profile table (-lcip) is not read")
    if not (profiles or instances or computes or placements or changes or tables) and message is None:
        warnings.append("no nvidia-smi mig -lgip / -lgi / -lci table found")
    fragment = bool(profiles or instances or computes) and not titled
    if fragment:
        warnings.append("MIG table rows without the table's title: a piece of the output")
    return MigFacts(tuple(profiles), tuple(instances), message, fragment, tuple(warnings), tuple(computes),
                    tuple(placements), tuple(changes), tuple(tables))
