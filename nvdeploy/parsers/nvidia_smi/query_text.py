"""``nvidia-smi -q`` text (also ``-d SECTION`` output and hand-cut excerpts) and the default table, with or
without its title (R610+ heads it ``KMD Version``)."""

from __future__ import annotations

import re
from typing import Any

from nvdeploy.parsers.nvidia_smi.fields import (
    _BUS_ID_RE,
    _alerts,
    _assemble,
    _bool,
    _gpu_from_tree,
    _int,
    _norm,
    _start,
    version_of,
)
from nvdeploy.parsers.nvidia_smi.model import GpuFacts, SmiFacts, _Tree

# ----------------------------------------------------------------------------------------------- text (-q)

# A -q section title: words only (never an alert such as "Unable to determine the device handle for GPU...").
_SECTION_TITLE_RE = re.compile(r"^[A-Z][A-Za-z0-9]*(?: [A-Za-z0-9/()-]+){0,5}$")
_GPU_HEADER_RE = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
# The lookbehind lets only the start of a run of blanks begin the separator: without it, a long run of blanks
# not followed by ':' is scanned once per blank (a 20,000-character line took 3.6 s).
_KV_RE = re.compile(r"^(\S.*?)(?<!\s)\s+:(?:\s(.*)|)$")
# R610+ heads the table "NVIDIA-SMI 610.43.02   KMD Version: 610.43.02   CUDA UMD Version: 13.3".
_TABLE_HEADER_RE = re.compile(r"NVIDIA-SMI\s+\S+\s+(?:Driver|KMD) Version:", re.IGNORECASE)
_TABLE_DRIVER_RE = re.compile(r"\b(?:KMD|Driver) Version:\s*(\S+)", re.IGNORECASE)
_TABLE_CUDA_RE = re.compile(r"\bCUDA (?:UMD )?Version:\s*(\S+)", re.IGNORECASE)


def parse_text(text: str) -> SmiFacts:
    """Parse ``nvidia-smi -q`` (also ``-d SECTION`` output and hand-cut excerpts) or the default table."""
    text, warnings, early = _start(text, "text")
    if early is not None:
        return early
    warnings.extend(_alerts(text))
    lines = [ln.expandtabs(8).rstrip() for ln in text.split("\n")]
    if _TABLE_HEADER_RE.search(text) or TABLE_ROW_RE.search(text) or (
            any(ln.startswith("+-") for ln in lines) and any(ln.startswith("|=") for ln in lines)):
        return _parse_table(lines, warnings, titled=_TABLE_HEADER_RE.search(text) is not None)
    top: dict[str, str] = {}
    sections: list[tuple[_Tree, str | None]] = []
    current: _Tree | None = None
    stack: list[tuple[int, str]] = []
    elided = False
    for line in lines:
        content = line.strip()
        if not content or content.startswith("====="):
            continue
        if content in ("[...]", "...", "[..]"):
            elided = True
            continue
        indent = len(line) - len(line.lstrip())
        header = _GPU_HEADER_RE.match(line)
        if header:
            current, stack = {}, []
            sections.append((current, header.group(1)))
            continue
        kv = _KV_RE.match(content)
        if indent == 0:
            if kv:
                top.setdefault(_norm(kv.group(1)), (kv.group(2) or "").strip())
            elif not any(bus is not None for _tree, bus in sections) and _SECTION_TITLE_RE.match(content):
                # A section title at the margin before any GPU header: a pasted piece whose first line lost its
                # indentation ("ECC Errors" above indented "Volatile"); what follows is read under it.
                if current is None:
                    current = {}
                    sections.append((current, None))
                stack = [(-1, _norm(content))]
            continue
        if current is None:
            current = {}
            sections.append((current, None))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = tuple(name for _, name in stack)
        if kv:
            current.setdefault((*path, _norm(kv.group(1))), (kv.group(2) or "").strip())
        else:
            stack.append((indent, _norm(content)))
    if elided:
        warnings.append("input is an excerpt ('[...]' elisions); absent fields are None")
    if sections and sections[0][1] is None:  # indented lines before any "GPU <bus id>" header
        unnamed = _gpu_from_tree(sections[0][0], None, None)
        known = [v for k, v in unnamed.to_dict().items() if k not in ("lost", "errors")]
        if unnamed.errors or any(v not in (None, []) for v in known):
            warnings.append("GPU fields without a 'GPU <bus id>' header (excerpt?); attributed to one unnamed GPU")
        else:
            sections.pop(0)
    count = _int(top.get("attached_gpus"))
    # Every GPU section of a whole -q ends with its "Processes" (R590+ prints "Capabilities" after it): a section
    # without one was cut before its end (the first 40 lines of a paste), or is a `-q -d` selection.
    cut = sum(1 for tree, _bus in sections if not any(path[0] == "processes" for path in tree))
    if cut:
        warnings.append(f"{cut} GPU section(s) with no 'Processes' section: cut before their end (or a -q -d "
                        "selection); the sections not printed are not in the text")
    # -q text is pasted, never collected: without 'Attached GPUs', with fewer GPU sections than it says (a
    # piece, or a `-i` selection), with a section cut short or with elisions, what it leaves out says nothing
    # about the node.
    return _assemble("text", version_of(top.get("kmd_version"), top.get("driver_version")),
                     version_of(top.get("cuda_umd_version"), top.get("cuda_version")), count, sections, warnings,
                     fragment=elided or count is None or count != len(sections) or bool(cut), shown=True)


# The first cell ends with Persistence-M (On/Off) on Linux, with Driver-Model (WDDM, TCC, MCDM) on Windows, which
# has no persistence mode.
_TABLE_GPU_RE = re.compile(r"^(\d+)\s+(.+?)\s+(On|Off|WDDM|TCC|MCDM)$")
# A GPU's first or second row of the default table, recognisable without the table's title or column header.
# Bounded repeats: a hostile long line must not make the search quadratic.
TABLE_ROW_RE = re.compile(
    r"^\|\s{1,8}\d{1,4}\s+\S[^|\n]{0,80}?\s(?:On|Off|WDDM|TCC|MCDM)\s{1,8}\|\s{1,8}[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}"
    r"\.[0-9A-Fa-f]\s{1,8}(?:On|Off)\s{1,8}\|"
    r"|^\|\s{0,8}(?:\d{1,3}%|N/A|ERR!)\s{1,8}-?\d{1,3}C\s{1,8}\S{1,6}\s[^|\n]{0,40}?\d{1,5}W\s{0,8}/\s{0,8}\d{1,5}W"
    r"\s{0,8}\|\s{0,12}\d{1,7}MiB\s{0,8}/\s{0,8}\d{1,7}MiB\s{0,8}\|", re.MULTILINE)
_TABLE_KEYS = ("name", "persistence_mode", "pci_bus_id", "ecc_uncorrectable_volatile", "temperature_c",
               "power_limit_w", "memory_total_mib", "mig_mode")


def _parse_table(lines: list[str], warnings: list[str], titled: bool = True) -> SmiFacts:
    """The default ``nvidia-smi`` box table (79- and 89-column layouts); MIG and process tables are skipped.
    Rows without the ``NVIDIA-SMI ... Version:`` title (``titled`` False) are a pasted piece: the node may have
    more GPUs than it shows, so no count is taken from it."""
    driver = cuda = None
    rows: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    in_gpu_table = True
    windows = False
    for line in lines:
        if driver is None and (m := _TABLE_DRIVER_RE.search(line)):
            driver = version_of(m.group(1))
        if cuda is None and (m := _TABLE_CUDA_RE.search(line)):
            cuda = version_of(m.group(1))
        if re.search(r"\b(MIG devices|Processes)\s*:", line):
            in_gpu_table, current = False, None
        stripped = line.strip()
        if not in_gpu_table or not stripped.startswith("|"):
            current = None if stripped.startswith("+") else current
            continue
        cells = [c.strip() for c in stripped.strip("|").split("|")]
        if all(set(c) <= set("-=+ ") for c in cells):
            current = None
            continue
        gpu_row = _TABLE_GPU_RE.match(cells[0])
        if gpu_row:
            current = {"row": 1, "index": int(gpu_row.group(1)), "name": gpu_row.group(2)}
            if gpu_row.group(3) in ("On", "Off"):
                current["persistence_mode"] = gpu_row.group(3) == "On"
            elif not windows:
                windows = True
                warnings.append(f"Windows table (Driver-Model {gpu_row.group(3)}): no persistence mode on Windows")
            rows.append(current)
            bus = _BUS_ID_RE.search(cells[1]) if len(cells) > 1 else None
            current["pci_bus_id"] = bus.group(1) if bus else None
            if len(cells) > 2 and (cells[2].isdigit() or cells[2] == "N/A" or not titled):
                current["ecc_uncorrectable_volatile"] = _int(cells[2])
            if current["name"].endswith("..."):
                warnings.append(f"GPU {current['index']} name truncated by the table layout: {current['name']!r}")
            continue
        if current is None:
            continue
        current["row"] += 1
        if current["row"] == 2:
            if m := re.search(r"(-?\d+)C\b", cells[0]):
                current["temperature_c"] = float(m.group(1))
            if m := re.search(r"/\s*(\d+(?:\.\d+)?)W", cells[0]):
                current["power_limit_w"] = float(m.group(1))
            if len(cells) > 1 and (m := re.search(r"/\s*(\d+)MiB", cells[1])):
                current["memory_total_mib"] = int(m.group(1))
        elif current["row"] == 3 and len(cells) > 2:
            current["mig_mode"] = _bool(cells[2])
    # What each row printed (N/A included) is all the table shows: the rest of a GPU is not in it.
    gpus = tuple(GpuFacts(**{k: v for k, v in r.items() if k != "row"},
                          shown=tuple(k for k in _TABLE_KEYS if k in r)) for r in rows)
    if not gpus:
        warnings.append("nvidia-smi table without GPU rows")
    elif not titled:
        warnings.append("nvidia-smi table rows without the table's title: a fragment; GPU count unknown")
    count = len(gpus) if gpus and titled else None
    return SmiFacts(driver, cuda, count, gpus, tuple(warnings), "text", bool(gpus) and not titled)


