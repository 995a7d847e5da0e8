"""``nvidia-smi --version`` and ``--query-gpu`` CSV (with or without the header, units or not)."""

from __future__ import annotations

import csv
import re
from collections.abc import Callable
from typing import Any

from nvdeploy.parsers.nvidia_smi.fields import (
    _alerts,
    _bool,
    _clean,
    _error,
    _extract,
    _extract_errors,
    _float,
    _int,
    _norm,
    _start,
    _sum,
    _with_errors,
    version_of,
)
from nvdeploy.parsers.nvidia_smi.model import GpuFacts, SmiFacts

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
    driver = version_of(fields.get("kmd_version"), fields.get("driver_version"))
    cuda = version_of(fields.get("cuda_umd_version"), fields.get("cuda_version"))
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
    return GpuFacts(**_with_errors(values, errors), shown=_csv_shown(row))


def _csv_shown(row: dict[str, str]) -> tuple[str, ...]:
    """The GpuFacts fields the queried columns hold: a field not queried is not in the CSV, not unreported."""
    out = [name for name, _conv, columns in _CSV_FIELDS if any(c in row for c in columns)]
    out += [f"ecc_uncorrectable_{kind}" for kind in ("volatile", "aggregate")
            if any(c.startswith(f"ecc.errors.uncorrected.{kind}") for c in row)]
    if any(re.match(r"^clocks_(?:throttle|event)_reasons\.", c) for c in row):
        out.append("clocks_event_reasons_active")
    return tuple(out)


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
                             retired_pages_double_bit=len(real) if supported else None,
                             shown=("name", "uuid", "serial", "pci_bus_id", "retired_pages_double_bit")))
    return SmiFacts(driver, None, count, tuple(gpus), tuple(warnings), "csv")
