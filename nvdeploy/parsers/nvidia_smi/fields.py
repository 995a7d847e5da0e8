"""Reading nvidia-smi values, whatever the format: N/A and error values, numbers, booleans, versions, the ECC,
row-remapping and throttle-reason fields, and the extraction table that turns a flattened ``{path: value}`` tree
(XML or ``-q`` text) into :class:`GpuFacts`."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from itertools import islice
from typing import Any

from nvdeploy.parsers.nvidia_smi.model import GpuFacts, SmiFacts, _Tree
from nvdeploy.parsers.text import prepare as _prepare

# What nvidia-smi prints for a value it does not have (lower case); the firmware reader uses it too.
NA_VALUES = {
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


def version_of(*values: str | None) -> str | None:
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
    return None if v.lower() in NA_VALUES else v


def _pci_id(value: str | None) -> str | None:
    """A PCI device ID as ``0x233010DE`` whichever way the source writes it (XML: ``233010DE``, -q: ``0x233010DE``)."""
    v = _clean(value)
    if v is None:
        return None
    digits = v[2:] if v.lower().startswith("0x") else v
    return "0x" + digits.upper() if re.fullmatch(r"[0-9A-Fa-f]{8}", digits) else None


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
    ("pci_device_id", _pci_id, ("pci/pci_device_id", "pci/device_id")),
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
              fragment: bool = False, shown: bool = False) -> SmiFacts:
    """``shown``: record what each GPU's section printed (a fragment's always are)."""
    complete = count is not None and count == len(sections)
    fragment = fragment and bool(sections)
    if count is not None and count != len(sections):
        warnings.append(f"nvidia-smi reports {count} attached GPU(s) but {len(sections)} GPU section(s) are present;"
                        " GPU index left unset")
    if details:
        gpus = tuple(_gpu_from_tree(tree, i if complete else None, bus, fragment or shown)
                     for i, (tree, bus) in enumerate(sections))
    else:  # only how many there are (see xml_understood): empty facts, never returned to a caller
        gpus = tuple(GpuFacts(index=i if complete else None) for i in range(len(sections)))
    if not gpus and driver is None and count is None:
        warnings.append("no nvidia-smi data found in input")
    return SmiFacts(driver, cuda, count, gpus, tuple(warnings), fmt, fragment)
