"""Parse ``nvidia-smi topo -m`` / ``topo -mp`` connection matrices.

Columns may be separated by tabs (what nvidia-smi prints) or spaces (documentation copies); the header row may be
wrapped in ANSI underline escapes and may or may not carry ``NUMA Affinity`` / ``GPU NUMA ID`` columns. Matrix
cells are kept exactly as printed (``X`` on the diagonal, ``NV18``, ``PIX``, ``SYS``...). Parsing stops at the
``Legend:`` block; a ``NIC Legend:`` block maps ``NIC0`` to the RDMA device name. Never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import takewhile
from typing import Any, Iterable, Mapping, Optional, Sequence

from nvdeploy.parsers.text import prepare as _prepare


@dataclass(frozen=True)
class TopoFacts:
    """``gpus``: GPU labels in header order (``GPU0``...). ``nics``: the other device columns (``NIC0`` or, on old
    drivers, ``mlx5_0``). ``matrix[row][column]``: the printed cell, for every row (GPUs and NICs) and column,
    the diagonal included (``X``). ``nic_names``: ``{"NIC0": "mlx5_0"}`` from the NIC Legend. ``affinity[row]``:
    ``{"CPU Affinity": "0-23", "NUMA Affinity": "0", "GPU NUMA ID": "N/A"}`` as far as printed. ``fragment``: GPU
    rows without the header line (a pasted piece): the columns are named from the rows' diagonal ``X`` as far
    as it reaches (the GPU columns come first, in order), the cells beyond it are not read."""

    gpus: tuple[str, ...] = ()
    matrix: dict[str, dict[str, str]] = field(default_factory=dict)
    nics: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    nic_names: dict[str, str] = field(default_factory=dict)
    affinity: dict[str, dict[str, str]] = field(default_factory=dict)
    fragment: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpus": list(self.gpus),
            "matrix": {row: dict(cells) for row, cells in self.matrix.items()},
            "nics": list(self.nics),
            "warnings": list(self.warnings),
            "nic_names": dict(self.nic_names),
            "affinity": {row: dict(cells) for row, cells in self.affinity.items()},
            "fragment": self.fragment,
        }


_GPU_RE = re.compile(r"^GPU\d+$")
# A device column: GPUn, NICn, or (drivers before ~470) the RDMA device itself (mlx5_0, bnxt_re0, irdma1...).
_DEVICE_RE = re.compile(r"^(?:GPU\d+|NIC\d+|[A-Za-z][A-Za-z0-9_]*\d+)$")
# -m/-mp link types, plus the -p2p r/w/n/a/p status codes.
_CONNECTION_RE = re.compile(r"^(?:X|SYS|NODE|PHB|PXB|PIX|SOC|PSB|NV\d+|C2C|OK|CNS|GNS|TNS|NS|U)$")
_AFFINITY_WORDS = ("CPU", "NUMA", "GPU")
_AFFINITY_NAME_RE = re.compile(r"CPU\s+Affinity|NUMA\s+Affinity|GPU\s+NUMA\s+ID|\S+")
_LEGEND_RE = re.compile(r"^\s*(?:NIC\s+)?Legend\s*:?\s*$", re.IGNORECASE)
_NIC_LEGEND_RE = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
_MAX_WARNINGS = 20




def _is_header(tokens: list[str]) -> bool:
    if not tokens or not _GPU_RE.match(tokens[0]):
        return False
    if len(tokens) == 1 or tokens[1] in _AFFINITY_WORDS:
        return True
    return bool(_DEVICE_RE.match(tokens[1])) and not _CONNECTION_RE.match(tokens[1])


def _split_header(tokens: list[str]) -> tuple[list[str], list[str]]:
    columns: list[str] = []
    rest: list[str] = []
    for i, token in enumerate(tokens):
        if token in _AFFINITY_WORDS:
            rest = _AFFINITY_NAME_RE.findall(" ".join(tokens[i:]))
            break
        columns.append(token)
    return columns, [re.sub(r"\s+", " ", name) for name in rest]


def parse_topo(text: str) -> TopoFacts:
    """Read the GPU/NIC connection matrix of ``nvidia-smi topo -m`` or ``-mp``. Never raises."""
    text, warnings = _prepare(text)
    if not text.strip():
        return TopoFacts(warnings=(*warnings, "empty input"))
    columns: list[str] = []
    affinity_names: list[str] = []
    matrix: dict[str, dict[str, str]] = {}
    affinity: dict[str, dict[str, str]] = {}
    nic_names: dict[str, str] = {}
    rows: list[str] = []
    headerless: list[list[str]] = []
    state = "before"  # before -> matrix -> legend
    for raw in text.split("\n"):
        tokens = raw.split()
        if not tokens:
            continue
        if state == "before" and _GPU_RE.match(tokens[0]) and len(tokens) > 1 and _CONNECTION_RE.match(tokens[1]):
            headerless.append(tokens)  # a matrix row before any header: a pasted piece
            continue
        if _LEGEND_RE.match(raw):
            state = "legend"
            continue
        if state == "legend":
            nic = _NIC_LEGEND_RE.match(raw)
            if nic:
                nic_names[nic.group(1)] = nic.group(2)
            continue
        if _is_header(tokens):
            if state == "matrix":
                if len(warnings) < _MAX_WARNINGS:
                    warnings.append("a second matrix header was found; only the first matrix is read")
                state = "legend"
                continue
            columns, affinity_names = _split_header(tokens)
            state = "matrix"
            continue
        if state != "matrix":
            continue
        label = tokens[0]
        known = label in columns or _DEVICE_RE.match(label)
        if not known or (len(tokens) > 1 and not _CONNECTION_RE.match(tokens[1])):
            if len(warnings) < _MAX_WARNINGS:
                warnings.append(f"line in the matrix not understood: {raw.strip()[:200]!r}")
            continue
        cells = tokens[1:1 + len(columns)]
        if len(cells) < len(columns) and len(warnings) < _MAX_WARNINGS:
            warnings.append(f"row {label} has {len(cells)} of {len(columns)} cells (truncated?)")
        if label in matrix and len(warnings) < _MAX_WARNINGS:
            warnings.append(f"row {label} appears twice; the last one is kept")
        matrix[label] = dict(zip(columns, cells))
        extra = tokens[1 + len(columns):]
        if extra:
            affinity[label] = dict(zip(affinity_names, extra))
        if label not in rows:
            rows.append(label)
    if not columns and headerless:
        return _headerless(headerless, warnings)
    if not columns:
        warnings.append("no topology matrix header (a line starting with GPU0) found")
    devices = columns + [r for r in rows if r not in columns]
    gpus = tuple(d for d in devices if _GPU_RE.match(d))
    nics = tuple(d for d in devices if not _GPU_RE.match(d))
    # A NIC column without its row: the matrix was cut off (a report that kept only its first lines).
    missing = [d for d in (*gpus, *nics) if d not in matrix]
    if missing and len(warnings) < _MAX_WARNINGS:
        warnings.append(f"no matrix row for {', '.join(missing)}")
    return TopoFacts(gpus, matrix, nics, tuple(warnings), nic_names, affinity)


def _headerless(lines: list[list[str]], warnings: list[str]) -> TopoFacts:
    """GPU rows without the header: row GPUk's ``X`` sits in column k, so the columns up to the last diagonal
    shown are GPU0..GPUn; a row whose X is elsewhere, or missing, is not read."""
    reach = 0
    usable = []
    for tokens in lines:
        cells = list(takewhile(_CONNECTION_RE.match, tokens[1:]))  # then the affinity columns
        index = int(tokens[0][3:])
        if index < len(cells) and cells[index] == "X" and cells.count("X") == 1:
            usable.append((tokens[0], cells))
            reach = max(reach, index + 1)
        elif len(warnings) < _MAX_WARNINGS:
            warnings.append(f"row {tokens[0]} without the header: its diagonal X is not where its number says")
    columns = [f"GPU{k}" for k in range(reach)]
    matrix = {label: dict(zip(columns, cells[:reach])) for label, cells in usable}
    warnings.append("matrix rows without the header line (a pasted piece): columns named from the diagonal")
    return TopoFacts(tuple(columns), matrix, (), tuple(warnings), fragment=True)


# --- GPUDirect rails: each GPU with its nearest compute NIC ----------------------------------------------------------

# nvidia-smi's PCIe distances, nearest first (its Legend: PIX at most one bridge, PXB several bridges without the host
# bridge, PHB through the host bridge, NODE between host bridges of one NUMA node, SYS across the SMP interconnect).
RANK = ("PIX", "PXB", "PHB", "NODE", "SYS")
# NCCL enables GPUDirect RDMA only up to this distance by default: ncclTopoCheckGdr (src/graph/paths.cc) starts from
# ``int netGdrLevel = PATH_PXB`` unless NCCL_NET_GDR_LEVEL says otherwise, and logs "GPU Direct RDMA Disabled for GPU
# ... (distance > ...)" beyond it. A GPU whose nearest NIC is farther stages its network traffic through host memory.
GDR_LEVEL = "PXB"
# Two rails whose devices are this near share a PCIe switch: measured together they would share its uplink.
_SHARED_SWITCH = ("PIX", "PXB")


@dataclass(frozen=True)
class Rail:
    """GPU ``gpu`` (its index) and its nearest compute NIC: ``nic`` the RDMA device (``mlx5_0``), ``column`` its
    matrix column (``NIC0``), ``link`` the cell between them (``PIX``), ``shared_with`` other GPUs whose rail is the
    same NIC."""

    gpu: int
    nic: str
    column: str
    link: str
    shared_with: tuple[int, ...] = ()

    @property
    def direct(self) -> bool:
        """Whether NCCL's default GPUDirect RDMA level (:data:`GDR_LEVEL`) reaches the NIC."""
        return self.link in RANK and RANK.index(self.link) <= RANK.index(GDR_LEVEL)


@dataclass(frozen=True)
class RailMap:
    """The rails of one node. ``compute``: the NICs that count (``compute_from`` says how they were told apart:
    ``ibstat`` (an InfiniBand port, not a bond) or ``names`` (every NIC but bonds, without ibstat)). ``unpaired``:
    compute NICs no GPU's rail uses. ``near``: pairs of GPU indices whose rails share a PCIe switch (their NICs or
    GPUs, or one's GPU and the other's NIC, are PIX/PXB to each other, or the NIC is the same): measured apart.
    ``waves``: the rails (GPU indices) measured side by side, wave after wave. ``states``: the compute NICs' first
    port as ibstat printed it, ``{"mlx5_0": [1, "Active"]}``."""

    rails: tuple[Rail, ...] = ()
    compute: tuple[str, ...] = ()
    compute_from: str = "names"
    unpaired: tuple[str, ...] = ()
    near: tuple[tuple[int, int], ...] = ()
    waves: tuple[tuple[int, ...], ...] = ()
    states: dict[str, tuple[int, str]] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "rails": [{"gpu": r.gpu, "nic": r.nic, "column": r.column, "link": r.link,
                       "shared_with": list(r.shared_with)} for r in self.rails],
            "compute": list(self.compute), "compute_from": self.compute_from, "unpaired": list(self.unpaired),
            "near": [list(p) for p in self.near], "waves": [list(w) for w in self.waves],
            "states": {k: list(v) for k, v in self.states.items()}, "warnings": list(self.warnings),
        }


def _rank(cell: str) -> int:
    return RANK.index(cell) if cell in RANK else len(RANK)


def waves_of(gpus: Sequence[int], near: Iterable[tuple[int, int]]) -> list[list[int]]:
    """Greedy colouring in GPU order: each rail goes in the first wave that holds none it is near to."""
    apart = {(a, b) for a, b in near} | {(b, a) for a, b in near}
    waves: list[list[int]] = []
    for gpu in gpus:
        for wave in waves:
            if not any((gpu, other) in apart for other in wave):
                wave.append(gpu)
                break
        else:
            waves.append([gpu])
    return waves


def rail_map(topo: Optional[TopoFacts], compute: Optional[Sequence[str]] = None,
             states: Optional[Mapping[str, tuple[int, str]]] = None) -> Optional[RailMap]:
    """Pair each GPU with its nearest compute NIC (PIX < PXB < PHB < NODE < SYS); None without a matrix.

    ``compute``: the RDMA device names of the compute NICs (from ibstat); None: every NIC column but bonds. Among
    NICs at the same distance a GPU takes the first one no other GPU has taken yet (DGX A100: GPU0 and GPU1 are both
    PXB to NIC0 and NIC1, and get one each), else the one the fewest GPUs share. Never raises."""
    if topo is None or not topo.gpus or topo.fragment:
        return None
    name = {col: topo.nic_names.get(col, col) for col in topo.nics}
    if compute is None:
        columns = [c for c in topo.nics if "bond" not in name[c].lower()]
        source = "names"
    else:
        wanted = set(compute)
        columns = [c for c in topo.nics if name[c] in wanted]
        source = "ibstat"
    warnings: list[str] = []
    if compute is not None:
        missing = sorted(set(compute) - {name[c] for c in columns})
        if missing:
            warnings.append(f"compute NIC(s) not in the topology matrix: {', '.join(missing)}")
    users: dict[str, list[int]] = {c: [] for c in columns}
    chosen: list[tuple[int, str, str]] = []
    for label in topo.gpus:
        row = topo.matrix.get(label, {})
        cells = [(c, row.get(c, "")) for c in columns]
        known = [(c, cell) for c, cell in cells if cell in RANK]
        if not known:
            if columns:
                warnings.append(f"{label}: no PCIe distance to any compute NIC in its row")
            continue
        best = min(_rank(cell) for _, cell in known)
        ties = [c for c, cell in known if _rank(cell) == best]
        column = next((c for c in ties if not users[c]), min(ties, key=lambda c: (len(users[c]), ties.index(c))))
        gpu = int(label[3:])
        users[column].append(gpu)
        chosen.append((gpu, column, RANK[best]))
    rails = tuple(Rail(g, name[c], c, link, tuple(u for u in users[c] if u != g)) for g, c, link in chosen)
    near: list[tuple[int, int]] = []
    for i, a in enumerate(rails):
        for b in rails[i + 1:]:
            cells = (topo.matrix.get(a.column, {}).get(b.column), topo.matrix.get(f"GPU{a.gpu}", {}).get(f"GPU{b.gpu}"),
                     topo.matrix.get(f"GPU{a.gpu}", {}).get(b.column), topo.matrix.get(f"GPU{b.gpu}", {}).get(a.column))
            if a.column == b.column or any(cell in _SHARED_SWITCH for cell in cells):
                near.append((a.gpu, b.gpu))
    used = {r.column for r in rails}
    compute_names = tuple(name[c] for c in columns)
    known_states = {n: tuple(states[n]) for n in compute_names if states and n in states}
    return RailMap(rails, compute_names, source, tuple(name[c] for c in columns if c not in used), tuple(near),
                   tuple(tuple(w) for w in waves_of([r.gpu for r in rails], near)),
                   {k: (int(v[0]), str(v[1])) for k, v in known_states.items()}, tuple(warnings))
