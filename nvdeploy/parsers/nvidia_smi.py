"""Parse nvidia-smi output: ``-q -x`` (XML), ``-q`` (text), the default table, and ``--query-gpu`` CSV.

All parsers are pure and never raise: odd input gives whatever could be read plus ``warnings``. Every per-GPU
field is ``None`` when the input does not say (an excerpt, ``N/A``, ``[Not Supported]``, a field the schema
version lacks). A value the tool could not read (``Unknown Error``, ``GPU is lost``, ``GPU requires reset``,
``Insufficient Permissions``) is ``None`` too, never zero, and is named in :attr:`GpuFacts.errors` with NVML's
error name; ``GPU is lost`` also sets :attr:`GpuFacts.lost`. XML and text are first flattened into
``{path: value}`` with snake_case path parts, so that one extraction table serves every schema version (DTD
v11/v12/v13, the old 418 layout, ``-q`` text).
"""

from __future__ import annotations

import csv
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from itertools import islice
from typing import Any
from xml.parsers import expat

from defusedxml.ElementTree import fromstring as defused_fromstring

from nvdeploy.parsers.text import prepare as _prepare

_Tree = dict[tuple[str, ...], str]


@dataclass(frozen=True)
class GpuFacts:
    """What nvidia-smi said about one GPU. ``index`` is the nvidia-smi index (None when the input is partial)."""

    index: int | None = None
    name: str | None = None
    uuid: str | None = None
    serial: str | None = None
    pci_bus_id: str | None = None
    persistence_mode: bool | None = None
    ecc_mode: bool | None = None
    ecc_uncorrectable_volatile: int | None = None
    ecc_uncorrectable_aggregate: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    remapped_rows_uncorrectable: int | None = None
    retired_pages_pending: bool | None = None
    retired_pages_double_bit: int | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    memory_total_mib: int | None = None
    temperature_c: float | None = None
    power_limit_w: float | None = None
    default_power_limit_w: float | None = None
    mig_mode: bool | None = None
    clocks_event_reasons_active: tuple[str, ...] = ()
    # NVLink fabric registration and health (Hopper and later on NVSwitch systems, DTD v13; N/A elsewhere). The
    # health flags are True/False as the driver reports them, None when it says N/A or Not Supported.
    fabric_state: str | None = None
    fabric_status: str | None = None
    fabric_clique_id: int | None = None
    fabric_cluster_uuid: str | None = None
    fabric_health_summary: str | None = None
    fabric_bandwidth: str | None = None
    fabric_route_recovery_in_progress: bool | None = None
    fabric_route_unhealthy: bool | None = None
    fabric_access_timeout_recovery: bool | None = None
    fabric_incorrect_configuration: str | None = None
    fabric_partition_assigned: bool | None = None
    # What the driver asks for before the GPU is usable again ("None", "Reset", "Reboot", "Drain P2P"...).
    gpu_recovery_action: str | None = None
    # Where the GPU sits in a rack-scale system (Grace-Blackwell platformInfo): chassis, slot, tray, module.
    chassis_serial: str | None = None
    slot_number: int | None = None
    tray_index: int | None = None
    module_id: int | None = None
    c2c_mode: bool | None = None
    # The GPU answered "GPU is lost" (NVML_ERROR_GPU_IS_LOST): it is gone until the node is rebooted.
    lost: bool = False
    # (field, NVML error name) for each field the tool tried and failed to read: UNKNOWN, GPU_IS_LOST,
    # RESET_REQUIRED, NO_PERMISSION... "Not supported" is not an error: the field is just None.
    errors: tuple[tuple[str, str], ...] = ()
    # Of a fragment (see SmiFacts.fragment) only: the fields above whose lines or tags the input printed, N/A
    # included. Elsewhere empty: a field a whole output leaves out is one the GPU does not report.
    shown: tuple[str, ...] = ()

    def error(self, name: str) -> str | None:
        """NVML's error name for field ``name`` when reading it failed; None when it was read or unsupported."""
        return next((err for field_name, err in self.errors if field_name == name), None)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["clocks_event_reasons_active"] = list(self.clocks_event_reasons_active)
        out["errors"] = {name: err for name, err in self.errors}
        if self.shown:
            out["shown"] = list(self.shown)
        else:
            del out["shown"]
        return out


@dataclass(frozen=True)
class SmiFacts:
    driver_version: str | None = None
    cuda_version: str | None = None
    gpu_count_reported: int | None = None
    gpus: tuple[GpuFacts, ...] = ()
    warnings: tuple[str, ...] = ()
    format: str = "text"
    # A piece of an output, not all of it: XML without its root; -q text without ``Attached GPUs``, with fewer
    # GPU sections than that, or with '[...]' elisions; table rows without the title. What a piece does not show
    # says nothing about the node.
    fragment: bool = False

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(gpus=[g.to_dict() for g in self.gpus], warnings=list(self.warnings))
        return out


# ---------------------------------------------------------------------------------------------- value helpers

_NA_VALUES = {
    "", "n/a", "na", "not supported", "unknown", "unknown error", "not available", "insufficient permissions",
    "requested functionality has been deprecated", "gpu is lost", "gpu requires reset", "timeout",
}
# Values nvidia-smi prints when NVML returned an error for the field (nvmlErrorString), by NVML error name.
_ERROR_VALUES = {"unknown error": "UNKNOWN", "gpu is lost": "GPU_IS_LOST", "gpu requires reset": "RESET_REQUIRED",
                 "insufficient permissions": "NO_PERMISSION", "timeout": "TIMEOUT"}
_TRUE = {"enabled", "enable", "yes", "on", "active", "true"}
_FALSE = {"disabled", "disable", "no", "off", "not active", "inactive", "false"}
_INT_RE = re.compile(r"[-+]?\d+(?![\d.])")
_FLOAT_RE = re.compile(r"[-+]?\d+(?:\.\d+)?")
_BUS_ID_RE = re.compile(r"\b([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\b")
_FATAL_RE = re.compile(
    r"NVIDIA-SMI has failed|couldn't communicate with the NVIDIA driver|No devices were found|"
    r"Failed to initialize NVML|NVML: Driver Not Loaded|Driver/library version mismatch|command not found",
    re.IGNORECASE,
)
_ALERT_RE = re.compile(
    r"Unable to determine the device handle|GPU requires reset|GPU is lost|infoROM is corrupted|^WARNING:",
    re.IGNORECASE,
)
_REASON_ALIASES = {"idle": "gpu_idle", "display_clock_setting": "display_clocks_setting"}


# R610+ prints "Driver Version : 610.43.02 [Deprecated; will be removed in CUDA 14.0. Use KMD Version instead]"
# (and the same note after the CUDA version); ``nvidia-smi --version`` prints "DRIVER version : Deprecated, see
# KMD version" with no version at all.
_VERSION_NOTE_RE = re.compile(r"\s*\[\s*deprecated\b[^\]]*\]\s*$", re.IGNORECASE)
_VERSION_RE = re.compile(r"\d+(?:\.\d+)*")


def _version(*values: str | None) -> str | None:
    """The first of ``values`` that holds a version, its deprecation note removed: callers pass the new field
    (KMD Version, CUDA UMD Version) before the deprecated one."""
    for value in values:
        v = _clean(_VERSION_NOTE_RE.sub("", value)) if value is not None else None
        if v is not None and _VERSION_RE.match(v):
            return v
    return None


def _clean(value: str | None) -> str | None:
    if value is None:
        return None
    v = value.strip()
    if len(v) >= 2 and v[0] == "[" and v[-1] == "]":
        v = v[1:-1].strip()
    return None if v.lower() in _NA_VALUES else v


def _error(value: str | None) -> str | None:
    """NVML's error name when ``value`` is nvidia-smi's text for a failed read (``[Unknown Error]``...)."""
    if value is None:
        return None
    v = value.strip()
    if len(v) >= 2 and v[0] == "[" and v[-1] == "]":
        v = v[1:-1].strip()
    return _ERROR_VALUES.get(v.lower().rstrip("."))


def _int(value: str | None) -> int | None:
    v = _clean(value)
    if v is not None and re.match(r"0[xX][0-9a-fA-F]+$", v.split()[0]):
        return int(v.split()[0], 16)
    m = _INT_RE.match(v) if v is not None else None
    return int(m.group(0)) if m else None


def _sum(parts: list[int | None]) -> int | None:
    known = [p for p in parts if p is not None]
    return sum(known) if known else None


def _float(value: str | None) -> float | None:
    v = _clean(value)
    m = _FLOAT_RE.match(v) if v is not None else None
    return float(m.group(0)) if m else None


def _bool(value: str | None) -> bool | None:
    low = (_clean(value) or "").lower()
    return True if low in _TRUE else False if low in _FALSE else None


def _norm(label: str) -> str:
    """'SRAM Uncorrectable SEC-DED' -> 'sram_uncorrectable_secded'; XML tags pass through lowercased."""
    return re.sub(r"[^a-z0-9]+", "_", label.lower().replace("-", "")).strip("_")




def _start(text: Any, fmt: str) -> tuple[str, list[str], SmiFacts | None]:
    """Clean the input; the third item is the final answer for empty input or nvidia-smi error output (driver not
    loaded, no devices, NVML mismatch): no GPUs and a warning quoting the first line."""
    text, warnings = _prepare(text)
    # The first five non-blank lines are all that is read: a list of every stripped line cost as much as a
    # quarter of the XML parse.
    lines = list(islice(filter(None, map(str.strip, text.splitlines())), 5))
    if not lines:
        return text, warnings, SmiFacts(warnings=(*warnings, "empty input"), format=fmt)
    if any(_FATAL_RE.search(line) for line in lines[:5]):
        msg = f"nvidia-smi reported an error: {lines[0][:300]!r}"
        return text, warnings, SmiFacts(warnings=(*warnings, msg), format=fmt)
    return text, warnings, None


def _alerts(text: str) -> list[str]:
    found = [ln.strip() for ln in text.splitlines() if _ALERT_RE.search(ln.strip())]
    return [f"nvidia-smi printed: {ln[:300]!r}" for ln in found[:10]]


# ------------------------------------------------------------------------------------- tree -> GpuFacts

def _get(tree: _Tree, *paths: tuple[str, ...]) -> str | None:
    for path in paths:
        value = _clean(tree.get(path))
        if value is not None:
            return value
    return None


def _ecc_uncorrectable(tree: _Tree, kind: str) -> int | None:
    """Sum uncorrectable ECC counts under ecc_errors/<kind> for every schema: double_bit (<=R470), sram+dram (v11+),
    sram parity+sec-ded (v13 / 535+ text). Returns None when no count is given, or when one of the counts could
    not be read (a sum of the readable parts would pass an unknown as zero)."""
    sub = {path[2:]: value for path, value in tree.items() if path[:2] == ("ecc_errors", kind)}
    if not sub or _ecc_error(tree, kind):
        return None
    double = [k for k in sub if k[:1] == ("double_bit",)]
    if double:
        total = _int(sub.get(("double_bit", "total")))
        if total is not None:
            return total
        parts = [_int(sub[k]) for k in double]
    else:
        sram = _int(sub.get(("sram_uncorrectable",)))
        if sram is None:  # v13 / 535+ text split SRAM into parity and SEC-DED
            sram = _sum([_int(v) for k, v in sub.items() if k and k[0].startswith("sram_uncorrectable_")])
        dram = _int(sub.get(("dram_uncorrectable",)))
        if dram is None and ("dram_uncorrectable",) in sub:
            # Printed but N/A (no DRAM ECC on this card): the SRAM zeros alone would read as "no error".
            return None
        parts = [sram, dram]
    return _sum(parts)


def _ecc_error(tree: _Tree, kind: str) -> str | None:
    """The NVML error of an uncorrectable count under ecc_errors/<kind> that could not be read, if any."""
    for path, value in tree.items():
        if path[:2] == ("ecc_errors", kind) and "uncorrectable" in "_".join(path[2:]) or \
                path[:3] == ("ecc_errors", kind, "double_bit"):
            err = _error(value)
            if err:
                return err
    return None


def _path_error(tree: _Tree, *paths: tuple[str, ...]) -> str | None:
    """The NVML error of the first present path when none of them holds a value."""
    for path in paths:
        err = _error(tree.get(path))
        if err:
            return err
    return None


def _any_bool(tree: _Tree, *paths: tuple[str, ...]) -> bool | None:
    values = [_bool(tree.get(p)) for p in paths]
    if any(v is True for v in values):
        return True
    return False if any(v is False for v in values) else None


def _reasons(tree: _Tree) -> tuple[str, ...]:
    out: list[str] = []
    for path, value in tree.items():
        if len(path) >= 2 and path[0] in ("clocks_throttle_reasons", "clocks_event_reasons"):
            name = re.sub(r"^clocks_(?:throttle|event)_reason_", "", path[-1])
            name = _REASON_ALIASES.get(name, name)
            if value.strip().lower() == "active" and name not in out:
                out.append(name)
    return tuple(out)


# GpuFacts field -> (converter, candidate paths). XML tags and -q text labels normalise to these paths; the first
# candidate holding a real value wins (XML v11+ first, then text, then the old <=418 schema).
_TREE_FIELDS: tuple[tuple[str, Callable[[str | None], Any], tuple[str, ...]], ...] = (
    ("name", _clean, ("product_name",)),
    ("uuid", _clean, ("uuid", "gpu_uuid")),
    ("serial", _clean, ("serial", "serial_number")),
    ("pci_bus_id", _clean, ("pci/pci_bus_id", "pci/bus_id")),
    ("persistence_mode", _bool, ("persistence_mode",)),
    ("ecc_mode", _bool, ("ecc_mode/current_ecc", "ecc_mode/current")),
    ("remapped_rows_pending", _bool, ("remapped_rows/remapped_row_pending", "remapped_rows/pending")),
    ("remapped_rows_failure", _bool,
     ("remapped_rows/remapped_row_failure", "remapped_rows/remapping_failure_occurred")),
    ("remapped_rows_uncorrectable", _int, ("remapped_rows/remapped_row_unc", "remapped_rows/uncorrectable_error")),
    ("retired_pages_double_bit", _int,
     ("retired_pages/double_bit_retirement/retired_count", "retired_pages/double_bit_ecc")),
    ("pcie_gen_current", _int,
     ("pci/pci_gpu_link_info/pcie_gen/current_link_gen", "pci/gpu_link_info/pcie_generation/current")),
    ("pcie_gen_max", _int, ("pci/pci_gpu_link_info/pcie_gen/max_link_gen", "pci/gpu_link_info/pcie_generation/max")),
    ("pcie_width_current", _int,
     ("pci/pci_gpu_link_info/link_widths/current_link_width", "pci/gpu_link_info/link_width/current")),
    ("pcie_width_max", _int,
     ("pci/pci_gpu_link_info/link_widths/max_link_width", "pci/gpu_link_info/link_width/max")),
    ("memory_total_mib", _int, ("fb_memory_usage/total",)),
    ("temperature_c", _float, ("temperature/gpu_temp", "temperature/gpu_current_temp")),
    # R610+ moved the limits one level down, under "GPU Ceiling Power Limit" (<gpu_ceiling_power_limit>).
    ("power_limit_w", _float, ("gpu_power_readings/current_power_limit",
                               "gpu_power_readings/gpu_ceiling_power_limit/current_power_limit",
                               "power_readings/current_power_limit", "power_readings/power_limit",
                               "power_readings/enforced_power_limit")),
    ("default_power_limit_w", _float, ("gpu_power_readings/default_power_limit",
                                       "gpu_power_readings/gpu_ceiling_power_limit/default_power_limit",
                                       "power_readings/default_power_limit")),
    ("mig_mode", _bool, ("mig_mode/current_mig", "mig_mode/current")),
    # XML tags (lowercased) and -q labels ("CliqueId", "ClusterUUID", "Platform Info") normalise alike.
    ("fabric_state", _clean, ("fabric/state",)),
    ("fabric_status", _clean, ("fabric/status",)),
    ("fabric_clique_id", _int, ("fabric/cliqueid",)),
    ("fabric_cluster_uuid", _clean, ("fabric/clusteruuid",)),
    ("fabric_health_summary", _clean, ("fabric/health/summary",)),
    ("fabric_bandwidth", _clean, ("fabric/health/bandwidth",)),
    ("fabric_route_recovery_in_progress", _bool, ("fabric/health/route_recovery_in_progress",)),
    ("fabric_route_unhealthy", _bool, ("fabric/health/route_unhealthy",)),
    ("fabric_access_timeout_recovery", _bool, ("fabric/health/access_timeout_recovery",)),
    ("fabric_incorrect_configuration", _clean, ("fabric/health/incorrect_configuration",)),
    ("fabric_partition_assigned", _bool, ("fabric/health/partition_assigned",)),
    ("gpu_recovery_action", _clean, ("gpu_recovery_action",)),
    ("chassis_serial", _clean, ("platforminfo/chassis_serial_number", "platform_info/chassis_serial_number")),
    ("slot_number", _int, ("platforminfo/slot_number", "platform_info/slot_number")),
    ("tray_index", _int, ("platforminfo/tray_index", "platform_info/tray_index")),
    ("module_id", _int, ("platforminfo/module_id", "platform_info/module_id")),
    ("c2c_mode", _bool, ("c2c_mode",)),
)
_RETIRED_PENDING = tuple(("retired_pages", k) for k in (
    "pending_retirement", "pending_blacklist", "pending_page_blacklist", "pending_page_retirement", "pending"))


def _extract(tree: _Tree, table: tuple[tuple[str, Callable[[str | None], Any], tuple[str, ...]], ...]) -> dict:
    return {name: conv(_get(tree, *(tuple(p.split("/")) for p in paths))) for name, conv, paths in table}


def _extract_errors(tree: _Tree, table: tuple[tuple[str, Callable[[str | None], Any], tuple[str, ...]], ...],
                    values: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, NVML error) for each field left None because nvidia-smi printed an error instead of a value."""
    out = []
    for name, _conv, paths in table:
        if values.get(name) is None:
            err = _path_error(tree, *(tuple(p.split("/")) for p in paths))
            if err:
                out.append((name, err))
    return out


def _with_errors(values: dict[str, Any], errors: list[tuple[str, str]]) -> dict[str, Any]:
    values["errors"] = tuple(sorted(set(errors)))
    values["lost"] = any(err == "GPU_IS_LOST" for _, err in errors)
    return values


_REASON_SECTIONS = (("clocks_throttle_reasons",), ("clocks_event_reasons",))


def _shown(tree: _Tree) -> tuple[str, ...]:
    """The GpuFacts fields whose paths ``tree`` holds, whatever their value (a fragment's GPUs only)."""
    paths = set(tree)
    out = [name for name, _conv, cands in _TREE_FIELDS if any(tuple(c.split("/")) in paths for c in cands)]
    tops = {path[:2] for path in paths}
    out.extend(f"ecc_uncorrectable_{kind}" for kind in ("volatile", "aggregate") if ("ecc_errors", kind) in tops)
    if any(path in paths for path in _RETIRED_PENDING):
        out.append("retired_pages_pending")
    if any(path[:1] in _REASON_SECTIONS for path in paths):
        out.append("clocks_event_reasons_active")
    return tuple(out)


def _gpu_from_tree(tree: _Tree, index: int | None, bus_id: str | None, shown: bool = False) -> GpuFacts:
    values = _extract(tree, _TREE_FIELDS)
    values["pci_bus_id"] = values["pci_bus_id"] or _clean(bus_id)
    values.update(
        ecc_uncorrectable_volatile=_ecc_uncorrectable(tree, "volatile"),
        ecc_uncorrectable_aggregate=_ecc_uncorrectable(tree, "aggregate"),
        retired_pages_pending=_any_bool(tree, *_RETIRED_PENDING),
        clocks_event_reasons_active=_reasons(tree),
    )
    errors = _extract_errors(tree, _TREE_FIELDS, values)
    for kind in ("volatile", "aggregate"):
        err = _ecc_error(tree, kind)
        if err:
            errors.append((f"ecc_uncorrectable_{kind}", err))
    if values["retired_pages_pending"] is None and (err := _path_error(tree, *_RETIRED_PENDING)):
        errors.append(("retired_pages_pending", err))
    reason_errors = [_error(v) for p, v in tree.items() if p[:1] in _REASON_SECTIONS]
    if any(reason_errors):
        errors.append(("clocks_event_reasons_active", next(e for e in reason_errors if e)))
    if shown:
        values["shown"] = _shown(tree)
    return GpuFacts(index=index, **_with_errors(values, errors))


def _assemble(fmt: str, driver: str | None, cuda: str | None, count: int | None,
              sections: Sequence[tuple[_Tree, str | None]], warnings: list[str], details: bool = True,
              fragment: bool = False) -> SmiFacts:
    complete = count is not None and count == len(sections)
    fragment = fragment and bool(sections)
    if count is not None and count != len(sections):
        warnings.append(f"nvidia-smi reports {count} attached GPU(s) but {len(sections)} GPU section(s) are present;"
                        " GPU index left unset")
    if details:
        gpus = tuple(_gpu_from_tree(tree, i if complete else None, bus, fragment)
                     for i, (tree, bus) in enumerate(sections))
    else:  # only how many there are (see xml_understood): empty facts, never returned to a caller
        gpus = tuple(GpuFacts(index=i if complete else None) for i in range(len(sections)))
    if not gpus and driver is None and count is None:
        warnings.append("no nvidia-smi data found in input")
    return SmiFacts(driver, cuda, count, gpus, tuple(warnings), fmt, fragment)


# ------------------------------------------------------------------------------------------------------ XML

_DOCTYPE_RE = re.compile(r"<!DOCTYPE[^\[>]*(?:\[.*?\])?\s*>", re.DOTALL | re.IGNORECASE)
_TOP_TAGS = ("driver_version", "cuda_version", "attached_gpus", "kmd_version", "cuda_umd_version")


_ENTITY_DECL_RE = re.compile(r"<!ENTITY", re.IGNORECASE)


def _fromstring(text: str) -> ET.Element:
    """The C parser when the document declares no entity (nvidia-smi's own output: a DOCTYPE naming its external
    DTD, which ElementTree never fetches, and no internal subset), so there is nothing to expand; defusedxml's
    pure-Python parser for anything else. The C parser is ~3x faster, and at fleet scale this parse is most of the
    controller's CPU."""
    if _ENTITY_DECL_RE.search(text) is None:
        return ET.fromstring(text)  # noqa: S314 - no entity declaration (checked above)
    return defused_fromstring(text)


def _flatten_xml(element: ET.Element) -> _Tree:
    # Pre-order over the leaves, first value of a path kept; iterative (a hostile document can nest deeply) with
    # one iterator per open element instead of a list per node: this runs for every GPU of every node.
    tree: _Tree = {}
    keep = tree.setdefault
    stack: list[tuple[Iterator[ET.Element], tuple[str, ...]]] = [(iter(element), ())]
    while stack:
        kids, path = stack[-1]
        for kid in kids:
            kid_path = (*path, str(kid.tag).lower())
            if len(kid):
                stack.append((iter(kid), kid_path))
                break
            keep(kid_path, (kid.text or "").strip())
        else:
            stack.pop()
    return tree


def _salvage_xml_header(body: str) -> dict[str, str]:
    """Top-level scalars that were complete before a parse error (truncated output)."""
    found: dict[str, str] = {}
    parser = ET.XMLPullParser(events=("end",))
    try:
        parser.feed(body)  # feed() keeps a syntax error and raises it from read_events() once it is reached
    except ValueError:  # a lone surrogate (text pasted, not decoded from a node's bytes) cannot reach expat
        return found
    events = parser.read_events()
    while True:
        try:
            _event, el = next(events)
        except Exception:  # noqa: BLE001 - StopIteration or the parse error: either way, done
            return found
        if el.tag in _TOP_TAGS and el.tag not in found:
            found[el.tag] = el.text or ""


def parse_xml(text: str) -> SmiFacts:
    """Parse ``nvidia-smi -q -x``. Entities are never resolved: a DOCTYPE with declarations is removed first."""
    return _parse_xml(text, details=True)


def parse_xml_pasted(text: str) -> SmiFacts:
    """:func:`parse_xml` for a pasted capture (``nvdeploy parse``): a document cut off before its end, which
    parse_xml refuses (a node's truncated output is ERROR), is read up to the cut as a fragment."""
    facts = parse_xml(text)
    if facts.gpus or not any(w.startswith("unparseable or truncated XML") for w in facts.warnings):
        return facts
    body, warnings = _prepare(text)
    body = body.strip().lstrip("\ufeff")
    if _XML_ROOT_RE.search(body) is None or "</nvidia_smi_log>" in body:
        return facts  # malformed, not cut short: nothing is guessed
    return _parse_xml_fragment(body, warnings, True, cut=True) or facts


def xml_understood(text: str) -> bool:
    """Whether :func:`parse_xml` would read this document (GPUs, or no warning), without reading each GPU's
    fields: what a node whose GPU facts come from the NVML probe needs of its XML (a third of a simulated
    1,000-node run's controller CPU went to per-GPU fields that were then thrown away)."""
    if _reads_with_gpus(text):
        return True
    facts = _parse_xml(text, details=False)
    return bool(facts.gpus) or not facts.warnings


_GPU_OPEN_RE = re.compile(r"<gpu[\s>/]")
# An entity reference other than XML's own five or a character reference: ElementTree refuses it (its parser
# reports undefined entities) where bare expat, with the DTD unread, lets it pass.
_OTHER_ENTITY_RE = re.compile(r"&(?!(?:amp|lt|gt|quot|apos|#[0-9]+|#x[0-9a-fA-F]+);)")


def _reads_with_gpus(text: str) -> bool:
    """True when the document is one :func:`_parse_xml` reads and its root's first child section is a ``<gpu>``,
    found with expat and no per-element callback past that section's start tag (~3x cheaper than the tree build);
    False means only "not shown here", and the caller parses as usual.

    The same acceptance as ElementTree's: its C parser is this expat, and the cases where the two differ (an
    entity declaration, an undefined entity, a parse the DOCTYPE-less retry rescues) are left to the full parse.
    """
    text, _warnings, early = _start(text, "xml")
    if early is not None:
        return False
    body = text.strip().lstrip("\ufeff")
    if _ENTITY_DECL_RE.search(body) is not None or _OTHER_ENTITY_RE.search(body) is not None:
        return False
    first = _GPU_OPEN_RE.search(body)
    if first is None:
        return False
    tag_end = body.find(">", first.start())
    if tag_end < 0:
        return False
    depth = 0
    top_gpu = False

    def start(name: str, _attrs: Any) -> None:
        nonlocal depth, top_gpu
        depth += 1
        if depth == 2 and name == "gpu":
            top_gpu = True

    def end(_name: str) -> None:
        nonlocal depth
        depth -= 1

    parser = expat.ParserCreate()
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        # Only the elements before the first <gpu ...> tag get callbacks (a handful): it must open at depth 2,
        # not inside a comment, a CDATA section or a deeper element. The rest is checked for well-formedness only.
        parser.Parse(body[: tag_end + 1], False)
        parser.StartElementHandler = None
        parser.EndElementHandler = None
        if not top_gpu:
            return False
        parser.Parse(body[tag_end + 1:], True)
    except (expat.ExpatError, ValueError, RecursionError):
        return False
    return True


# ------------------------------------------------------------------------------------------- XML fragments

_XML_ROOT_RE = re.compile(r"<nvidia_smi_log\b")
_XML_ANY_TAG_RE = re.compile(r"<[^<>]*>")
_XML_TAG_RE = re.compile(r"<(/?)([A-Za-z_][\w.\-]*)((?:\s+[\w.\-:]+\s*=\s*(?:\"[^\"]*\"|'[^']*'))*)\s*(/?)>")
_XML_ATTR_RE = re.compile(r"([\w.\-:]+)\s*=\s*(?:\"([^\"]*)\"|'([^']*)')")
_XML_PIECE_DEPTH = 32
_XML_ENTITIES = {"&lt;": "<", "&gt;": ">", "&quot;": '"', "&apos;": "'", "&amp;": "&"}
# Where the GPU-level elements sit, to place a fragment that starts below <gpu> (e.g. at <volatile>).
_GPU_PATHS: tuple[tuple[str, ...], ...] = (
    *(tuple(c.split("/")) for _n, _c, cands in _TREE_FIELDS for c in cands),
    *(("ecc_errors", kind, leaf) for kind in ("volatile", "aggregate")
       for leaf in ("sram_uncorrectable", "dram_uncorrectable", "double_bit")),
    *_RETIRED_PENDING, ("clocks_event_reasons",), ("clocks_throttle_reasons",),
)


def _xml_anchor(tag: str) -> tuple[str, ...] | None:
    """The path above a GPU-level element ``tag``: () for a child of <gpu>, None when unknown or ambiguous
    (``dram_uncorrectable`` alone could be volatile or aggregate: it is not guessed)."""
    if any(path[0] == tag for path in _GPU_PATHS):
        return ()
    above = {path[:path.index(tag)] for path in _GPU_PATHS if tag in path[1:]}
    return above.pop() if len(above) == 1 else None


def _xml_pieces(body: str) -> ET.Element:
    """Elements of a piece of XML, under a synthetic root, built tag by tag (no entity is ever expanded): a
    closing tag whose opener lies before the piece wraps what came before it; elements still open at the end are
    closed; a tag cut at either end is dropped."""
    root = ET.Element("fragment")
    stack = [root]
    pos = 0
    for match in _XML_ANY_TAG_RE.finditer(body):
        text = body[pos:match.start()]
        pos = match.end()
        if len(stack) > 1 and text.strip():
            for entity, char in _XML_ENTITIES.items():
                text = text.replace(entity, char)
            stack[-1].text = (stack[-1].text or "") + text
        tag = _XML_TAG_RE.fullmatch(match.group(0))
        if tag is None:  # a comment, a declaration, a cut tag
            continue
        closing, name, attrs, empty = tag.groups()
        if not closing and len(stack) > _XML_PIECE_DEPTH:
            continue  # nvidia-smi nests a few levels; a path this deep costs its length for every leaf below it
        if not closing:
            attrib = {m.group(1): m.group(2) if m.group(2) is not None else m.group(3)
                      for m in _XML_ATTR_RE.finditer(attrs)}
            element = ET.SubElement(stack[-1], name, attrib)
            if not empty:
                stack.append(element)
        elif any(e.tag == name for e in stack[1:]):
            while stack.pop().tag != name:
                pass
        elif len(stack) == 1 and len(root):
            wrapper = ET.Element(name)
            for kid in list(root):
                root.remove(kid)
                wrapper.append(kid)
            root.append(wrapper)
    return root


def _parse_xml_fragment(body: str, warnings: list[str], details: bool, cut: bool = False) -> SmiFacts | None:
    """A piece of ``nvidia-smi -q -x`` without its <nvidia_smi_log> root: its <gpu> elements, and GPU-level
    elements before them (the piece began inside a <gpu>) as one GPU without index or bus id. ``cut``: a document
    that starts with its root and ends early, read up to the cut. None when it holds no GPU data."""
    root = _xml_pieces(body)
    if cut:
        root = next((e for e in root if e.tag == "nvidia_smi_log"), root)
    loose = ET.Element("gpu")
    sections: list[tuple[_Tree, str | None]] = []
    unplaced: list[str] = []
    for element in root:
        if element.tag == "gpu":
            sections.append((_flatten_xml(element) if details else {}, element.get("id")))
            continue
        if element.tag in _TOP_TAGS or element.tag == "timestamp":
            continue
        anchor = _xml_anchor(str(element.tag).lower())
        if anchor is None:
            unplaced.append(str(element.tag))
            continue
        parent = loose
        for name in anchor:
            found = parent.find(name)
            parent = found if found is not None else ET.SubElement(parent, name)
        parent.append(element)
    if len(loose):
        sections.insert(0, (_flatten_xml(loose) if details else {}, None))
    if not sections:
        return None
    warnings.append("input is a fragment of nvidia-smi -q -x output (cut off before its end): only the GPUs and "
                    "fields before the cut are read" if cut else "input is a fragment of nvidia-smi -q -x output (no "
                    "<nvidia_smi_log> root): only the GPUs and fields it shows are read")
    if unplaced:
        warnings.append(f"elements not placed in a GPU (their parent is not in the fragment): "
                        f"{', '.join(sorted(set(unplaced))[:10])}")
    driver = _version(root.findtext("kmd_version"), root.findtext("driver_version"))
    cuda = _version(root.findtext("cuda_umd_version"), root.findtext("cuda_version"))
    return _assemble("xml", driver, cuda, _int(root.findtext("attached_gpus")), sections, warnings, details,
                     fragment=True)


def _parse_xml(text: str, details: bool) -> SmiFacts:
    text, warnings, early = _start(text, "xml")
    if early is not None:
        return early
    body = text.strip().lstrip("\ufeff")
    if _XML_ROOT_RE.search(body) is None:
        piece = _parse_xml_fragment(body, list(warnings), details)
        if piece is not None:
            return piece
    if "<!ENTITY" in body.upper():
        body = _DOCTYPE_RE.sub("", body, count=1)
        warnings.append("DOCTYPE with entity declarations removed before parsing")
    root: ET.Element | None = None
    error = ""
    for candidate in (body, _DOCTYPE_RE.sub("", body, count=1)):
        try:
            root = _fromstring(candidate)
            break
        except Exception as exc:  # noqa: BLE001 - ParseError, ValueError, RecursionError: all mean unreadable
            error = f"{type(exc).__name__}: {exc}"
    if root is None:
        head = _salvage_xml_header(body)
        warnings.append(f"unparseable or truncated XML ({error}); no GPU data read")
        return SmiFacts(_version(head.get("kmd_version"), head.get("driver_version")),
                        _version(head.get("cuda_umd_version"), head.get("cuda_version")),
                        _int(head.get("attached_gpus")), (), tuple(warnings), "xml")
    if root.tag != "nvidia_smi_log":
        warnings.append(f"unexpected XML root element <{root.tag}> (expected <nvidia_smi_log>)")
    gpus = root.findall("gpu")
    sections = [(_flatten_xml(g) if details else {}, g.get("id")) for g in gpus]
    driver = _version(root.findtext("kmd_version"), root.findtext("driver_version"))
    cuda = _version(root.findtext("cuda_umd_version"), root.findtext("cuda_version"))
    return _assemble("xml", driver, cuda, _int(root.findtext("attached_gpus")), sections, warnings, details)


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
    # -q text is pasted, never collected: without 'Attached GPUs', with fewer GPU sections than it says (a
    # piece, or a `-i` selection) or with elisions, what it leaves out says nothing about the node.
    return _assemble("text", _version(top.get("kmd_version"), top.get("driver_version")),
                     _version(top.get("cuda_umd_version"), top.get("cuda_version")), count, sections, warnings,
                     fragment=elided or count is None or count != len(sections))


_TABLE_GPU_RE = re.compile(r"^(\d+)\s+(.+?)\s+(On|Off)$")
# A GPU's first or second row of the default table, recognisable without the table's title or column header.
# Bounded repeats: a hostile long line must not make the search quadratic.
TABLE_ROW_RE = re.compile(
    r"^\|\s{1,8}\d{1,4}\s+\S[^|\n]{0,80}?\s(?:On|Off)\s{1,8}\|\s{1,8}[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}"
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
    for line in lines:
        if driver is None and (m := _TABLE_DRIVER_RE.search(line)):
            driver = _version(m.group(1))
        if cuda is None and (m := _TABLE_CUDA_RE.search(line)):
            cuda = _version(m.group(1))
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
            current = {"row": 1, "index": int(gpu_row.group(1)), "name": gpu_row.group(2),
                       "persistence_mode": gpu_row.group(3) == "On"}
            rows.append(current)
            bus = _BUS_ID_RE.search(cells[1]) if len(cells) > 1 else None
            current["pci_bus_id"] = bus.group(1) if bus else None
            if len(cells) > 2 and (cells[2].isdigit() or not titled):
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
    if titled:
        gpus = tuple(GpuFacts(**{k: v for k, v in r.items() if k != "row"}) for r in rows)
    else:  # what each row printed is what the fragment shows (N/A included)
        gpus = tuple(GpuFacts(**{k: v for k, v in r.items() if k != "row"},
                              shown=tuple(k for k in _TABLE_KEYS if k in r)) for r in rows)
    if not gpus:
        warnings.append("nvidia-smi table without GPU rows")
    elif not titled:
        warnings.append("nvidia-smi table rows without the table's title: a fragment; GPU count unknown")
    count = len(gpus) if gpus and titled else None
    return SmiFacts(driver, cuda, count, gpus, tuple(warnings), "text", bool(gpus) and not titled)


# ---------------------------------------------------------------------------------------------- --version

_VERSION_LINE_RE = re.compile(r"^\s*([A-Za-z][A-Za-z -]*?)\s*:\s*(.*?)\s*$")


def parse_version(text: str) -> SmiFacts:
    """Parse ``nvidia-smi --version``: driver and CUDA version, no GPUs.

    Up to R590 it prints ``DRIVER version : 580.95.05`` and ``CUDA Version : 13.0``; R610+ prints
    ``DRIVER version : Deprecated, see KMD version`` and the driver as ``KMD version``, the CUDA version as
    ``CUDA UMD Version``: the KMD and UMD lines win, and a deprecated line without a version number is skipped.
    """
    text, warnings, early = _start(text, "version")
    if early is not None:
        return early
    fields: dict[str, str] = {}
    for line in text.splitlines():
        m = _VERSION_LINE_RE.match(line)
        if m:
            fields.setdefault(_norm(m.group(1)), m.group(2))
    driver = _version(fields.get("kmd_version"), fields.get("driver_version"))
    cuda = _version(fields.get("cuda_umd_version"), fields.get("cuda_version"))
    if driver is None:
        warnings.append("nvidia-smi --version output without a driver version")
    return SmiFacts(driver, cuda, None, (), tuple(warnings), "version")


# ------------------------------------------------------------------------------------------------------ CSV

_CSV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*(?:\s*\[[^\]]*\])?$")
_CSV_KNOWN = {"index", "name", "uuid", "serial", "count", "timestamp", "pstate", "driver_version",
              "persistence_mode", "gpu_name", "gpu_uuid", "gpu_bus_id", "gpu_serial", "compute_mode"}
_CSV_ALIASES = {"gpu_name": "name", "gpu_uuid": "uuid", "gpu_serial": "serial", "gpu_bus_id": "pci.bus_id"}
# NVML clocks event reason bits, used only when per-reason columns are absent.
_REASON_BITS = ((0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"),
                (0x8, "hw_slowdown"), (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"),
                (0x40, "hw_thermal_slowdown"), (0x80, "hw_power_brake_slowdown"), (0x100, "display_clocks_setting"))


def _csv_column(name: str) -> str:
    base = re.sub(r"\s*\[[^\]]*\]\s*$", "", name.strip()).lower()
    return _CSV_ALIASES.get(base, base)


def _is_csv_header(cells: list[str]) -> bool:
    names = [c.strip() for c in cells if c.strip()]
    return bool(names) and all(_CSV_NAME_RE.match(c) for c in names) and any(
        "." in _csv_column(c) or _csv_column(c) in _CSV_KNOWN or _csv_column(c) in _CSV_ALIASES.values()
        for c in names)


def _csv_ecc(row: dict[str, str], kind: str) -> int | None:
    """The uncorrected count: the tool's own total, else SRAM plus DRAM. None when the total or the DRAM count is
    asked for but reads [N/A] (a card without ECC prints 0 only for the SRAM parity/SEC-DED counts)."""
    pre = f"ecc.errors.uncorrected.{kind}"
    total = _int(row.get(f"{pre}.total"))
    if total is not None:
        return total
    if f"{pre}.total" in row:
        return None
    sram = _int(row.get(f"{pre}.sram"))
    if sram is None:
        sram = _sum([_int(row.get(f"{pre}.sram.{k}")) for k in ("parity", "secded")])
    dram = _int(row.get(f"{pre}.dram"))
    if dram is None:
        dram = _int(row.get(f"{pre}.device_memory"))
    if dram is None and (f"{pre}.dram" in row or f"{pre}.device_memory" in row):
        return None
    return _sum([sram, dram])


def _csv_reasons(row: dict[str, str]) -> tuple[str, ...]:
    out: list[str] = []
    named = False
    for col, value in row.items():
        m = re.match(r"^clocks_(?:throttle|event)_reasons\.(\w+)$", col)
        if m and m.group(1) not in ("supported", "active"):
            named = True
            if value.strip().lower() == "active" and m.group(1) not in out:
                out.append(m.group(1))
    if not named:
        mask = _int(row.get("clocks_event_reasons.active") or row.get("clocks_throttle_reasons.active"))
        out = [name for bit, name in _REASON_BITS if mask is not None and mask & bit]
    return tuple(out)


_CSV_FIELDS: tuple[tuple[str, Callable[[str | None], Any], tuple[str, ...]], ...] = (
    ("index", _int, ("index",)), ("name", _clean, ("name",)), ("uuid", _clean, ("uuid",)),
    ("serial", _clean, ("serial",)), ("pci_bus_id", _clean, ("pci.bus_id",)),
    ("persistence_mode", _bool, ("persistence_mode",)), ("ecc_mode", _bool, ("ecc.mode.current",)),
    ("remapped_rows_pending", _bool, ("remapped_rows.pending",)),
    ("remapped_rows_failure", _bool, ("remapped_rows.failure",)),
    ("remapped_rows_uncorrectable", _int, ("remapped_rows.uncorrectable",)),
    ("retired_pages_pending", _bool, ("retired_pages.pending",)),
    ("retired_pages_double_bit", _int, ("retired_pages.double_bit.count",)),
    ("pcie_gen_current", _int, ("pcie.link.gen.current", "pcie.link.gen.gpucurrent")),
    ("pcie_gen_max", _int, ("pcie.link.gen.max",)),
    ("pcie_width_current", _int, ("pcie.link.width.current",)), ("pcie_width_max", _int, ("pcie.link.width.max",)),
    ("memory_total_mib", _int, ("memory.total",)), ("temperature_c", _float, ("temperature.gpu",)),
    ("power_limit_w", _float, ("power.limit", "enforced.power.limit")),
    ("default_power_limit_w", _float, ("power.default_limit",)), ("mig_mode", _bool, ("mig.mode.current",)),
)


def _gpu_from_csv(row: dict[str, str]) -> GpuFacts:
    tree = {(k,): v for k, v in row.items()}
    values = _extract(tree, _CSV_FIELDS)
    errors = _extract_errors(tree, _CSV_FIELDS, values)
    for kind in ("volatile", "aggregate"):
        err = next((e for k, v in row.items() if k.startswith(f"ecc.errors.uncorrected.{kind}") and (e := _error(v))),
                   None)
        values[f"ecc_uncorrectable_{kind}"] = None if err else _csv_ecc(row, kind)
        if err:
            errors.append((f"ecc_uncorrectable_{kind}", err))
    values["clocks_event_reasons_active"] = _csv_reasons(row)
    return GpuFacts(**_with_errors(values, errors))


def parse_csv(text: str) -> SmiFacts:
    """Parse ``--query-gpu=... --format=csv[,nounits]`` (header required) and ``--query-retired-pages`` CSV."""
    text, warnings, early = _start(text, "csv")
    if early is not None:
        return early
    warnings.extend(_alerts(text))
    try:
        records = [r for r in csv.reader(text.split("\n"), skipinitialspace=True) if any(c.strip() for c in r)]
    except csv.Error as exc:
        return SmiFacts(warnings=(*warnings, f"unreadable CSV: {exc}"), format="csv")
    records = [r for r in records if not r[0].strip().upper().startswith("WARNING")]
    if not records or not _is_csv_header(records[0]):
        warnings.append(f"CSV without a header line (--format=csv,noheader?): column meaning unknown, "
                        f"{len(records)} row(s) ignored")
        return SmiFacts(warnings=tuple(warnings), format="csv", fragment=bool(records))
    columns = [_csv_column(c) for c in records[0]]
    rows: list[dict[str, str]] = []
    for n, record in enumerate(records[1:], start=2):
        if len(record) != len(columns):
            warnings.append(f"CSV row {n} has {len(record)} field(s), header has {len(columns)}")
        rows.append({c: v.strip() for c, v in zip(columns, record)})
    driver = next((v for v in (_clean(r.get("driver_version")) for r in rows) if v), None)
    count = next((v for v in (_int(r.get("count")) for r in rows) if v is not None), None)
    if "retired_pages.address" in columns or "retired_pages.cause" in columns:
        return _retired_pages_csv(rows, driver, count, warnings)
    gpus = tuple(_gpu_from_csv(r) for r in rows)
    if not gpus:
        warnings.append("CSV header without data rows")
    return SmiFacts(driver, None, count, gpus, tuple(warnings), "csv")


def _retired_pages_csv(rows: list[dict[str, str]], driver: str | None, count: int | None,
                       warnings: list[str]) -> SmiFacts:
    """``--query-retired-pages``: one row per retired page (or per cause with [N/A] address); grouped by GPU."""
    groups: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        groups.setdefault(row.get("pci.bus_id") or row.get("uuid") or "?", []).append(row)
    gpus: list[GpuFacts] = []
    for members in groups.values():
        double = [m for m in members if "double" in m.get("retired_pages.cause", "").lower()]
        real = [m for m in double if _clean(m.get("retired_pages.address")) is not None]
        supported = any(_clean(m.get("retired_pages.address")) is not None for m in members)
        first = members[0]
        gpus.append(GpuFacts(name=_clean(first.get("name")), uuid=_clean(first.get("uuid")),
                             serial=_clean(first.get("serial")), pci_bus_id=_clean(first.get("pci.bus_id")),
                             retired_pages_double_bit=len(real) if supported else None))
    return SmiFacts(driver, None, count, tuple(gpus), tuple(warnings), "csv")
