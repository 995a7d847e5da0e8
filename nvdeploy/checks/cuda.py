"""CUDA toolkit / driver compatibility, from NVIDIA's table of minimum drivers per toolkit (checks/cuda_compat.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping, Optional, Sequence

from nvdeploy.checks.common import SMI, smi_gate, version_tuple
from nvdeploy.checks.gating import raw_gate
from nvdeploy.checks.registry import NodeContext, register
from nvdeploy.collect.stack import CUDA_TOOLKITS
from nvdeploy.config.builtin import data_dir
from nvdeploy.config.yamlfile import load_yaml_file
from nvdeploy.parsers.cuda_install import CudaInstall, Toolkit
from nvdeploy.results import ErrorReason, Finding, Remediation, Verdict

# Forward compatibility is for data center GPUs (and select NGC-ready RTX boards); never on consumer cards.
CONSUMER_MARKERS = ("GeForce", "TITAN")
_RANK = {Verdict.PASS: 0, Verdict.WARN: 1, Verdict.FAIL: 2}


@dataclass(frozen=True)
class CompatTable:
    version: str
    toolkits: Mapping[tuple[int, ...], str]
    minor_ranges: Mapping[int, tuple[str, Optional[str]]]

    def minimum(self, toolkit: Toolkit) -> tuple[Optional[str], str]:
        """(minimum driver, how it was chosen) for ``toolkit``; None when its release is not in the table."""
        mm = toolkit.major_minor
        if mm is None:
            return None, "version unknown"
        update = toolkit.update
        if update is not None and (*mm, update) in self.toolkits:
            return self.toolkits[(*mm, update)], f"CUDA {mm[0]}.{mm[1]} " + (f"Update {update}" if update else "GA")
        rows = [(key, driver) for key, driver in self.toolkits.items() if key[:2] == mm]
        if not rows:
            return None, f"CUDA {mm[0]}.{mm[1]} is not in the table (version {self.version})"
        driver = max((d for _, d in rows), key=version_tuple)
        return driver, f"CUDA {mm[0]}.{mm[1]}, update not known from {toolkit.version!r}: its strictest row"


@lru_cache(maxsize=1)
def compat_table() -> CompatTable:
    data = load_yaml_file(data_dir("checks") / "cuda_compat.yaml")
    toolkits = {version_tuple(str(k)): str(v) for k, v in data["toolkits"].items()}
    ranges = {int(k): (str(v[0]), str(v[1]) if v[1] is not None else None)
              for k, v in data["minor_version"].items()}
    return CompatTable(str(data["version"]), toolkits, ranges)


def judge(toolkit: Toolkit, driver: str, datacenter: bool, table: CompatTable) -> tuple[Verdict, str]:
    """One toolkit against the node's driver: (verdict, a sentence naming the rule that decided)."""
    note = f"; {toolkit.problem}" if toolkit.problem else ""
    name = f"{toolkit.path} ({toolkit.version or 'version unknown'}{note})"
    if toolkit.major_minor is None:
        return Verdict.WARN, f"{name}: no readable version ({toolkit.problem or 'no version file'})"
    minimum, how = table.minimum(toolkit)
    have = version_tuple(driver)
    if minimum is not None and have >= version_tuple(minimum):
        return Verdict.PASS, f"{name}: driver {driver} >= {minimum} ({how})"
    major = toolkit.major_minor[0]
    low, beyond = table.minor_ranges.get(major, (None, None))
    in_range = low is not None and have >= version_tuple(low) and (beyond is None or have[0] < int(beyond))
    # A driver of a later major's range still runs this toolkit (backward compatibility).
    newer_major = any(have >= version_tuple(lo) for m, (lo, _) in table.minor_ranges.items() if m > major)
    if minimum is None and (in_range or newer_major):
        return Verdict.WARN, (f"{name}: not in NVIDIA's table (version {table.version}); driver {driver} is in the "
                              f"CUDA {major}.x range, full support not confirmed")
    if newer_major:
        return Verdict.PASS, f"{name}: driver {driver} is of a later CUDA major (backward compatible)"
    compat = toolkit.compat_driver
    if compat and minimum is not None and version_tuple(compat) >= version_tuple(minimum):
        if datacenter:
            return Verdict.PASS, (f"{name}: forward compatibility through cuda-compat (libcuda {compat} in "
                                  f"{toolkit.path}/compat; applications load it with "
                                  f"LD_LIBRARY_PATH={toolkit.path}/compat)")
        return Verdict.FAIL, (f"{name}: needs driver >= {minimum}; the cuda-compat package (libcuda {compat}) "
                              "is not supported on GeForce/TITAN GPUs")
    if in_range:
        return Verdict.WARN, (f"{name}: driver {driver} < {minimum} ({how}): runs only through minor version "
                              f"compatibility (CUDA {major}.x >= {low}), limited features: no JIT of newer PTX, "
                              "APIs that need the newer driver fail")
    need = minimum or low or "a newer driver"
    return Verdict.FAIL, (f"{name}: needs driver >= {need} ({how}); driver {driver} cannot run it"
                          + (f" (a cuda-compat package with libcuda {compat} is too old)" if compat else ""))


def is_datacenter(names: Sequence[str]) -> bool:
    return not any(marker.lower() in name.lower() for name in names for marker in CONSUMER_MARKERS)


def _expected_toolkit(host_vars: Mapping[str, Any]) -> Optional[str]:
    value = host_vars.get("cuda_toolkit")
    return str(value) if value not in (None, "") else None


@register("cuda.compat", collectors=(CUDA_TOOLKITS, SMI))
def cuda_compat(ctx: NodeContext) -> list[Finding]:
    """Runs ``find /usr/local -maxdepth 3`` for ``/usr/local/cuda*/version.json`` (and ``version.txt``) and the
    forward-compatibility libraries ``/usr/local/cuda*/compat/libcuda.so.*``; the driver comes from nvidia-smi.

    Each installed toolkit is judged against NVIDIA's table of minimum drivers (checks/cuda_compat.yaml: CUDA
    Toolkit release notes, "CUDA Toolkit and Corresponding Driver Versions", with its source and date; e.g. CUDA
    12.4 GA needs >= 550.54.14, 12.4 Update 1 >= 550.54.15). PASS: the driver meets every toolkit's minimum, or a
    toolkit runs through a forward-compatibility package (``cuda-compat-X-Y``, libcuda in
    ``/usr/local/cuda-X.Y/compat`` at least the minimum) on a data center GPU, or the driver is of a later CUDA
    major. WARN: the driver is below the toolkit's minimum but inside its major's minor-version range (12.x on
    >= 525.60.13 and < 580: runs with a limited feature set), or the toolkit is newer than the table. FAIL
    (REINSTALL: install a driver >= the minimum, or cuda-compat on data center GPUs): the toolkit cannot run on
    this driver; also when the host var ``cuda_toolkit`` (e.g. ``"12.4"``) names a toolkit that is not
    installed. ERROR: find missing, hung or failed, or nvidia-smi unusable. SKIP: no toolkit under /usr/local
    and none expected (the driver alone is judged by driver.version).
    """
    gated = raw_gate(ctx, "cuda.compat", CUDA_TOOLKITS, "find", "install findutils")
    if gated:
        return gated
    result = ctx.results[CUDA_TOOLKITS]
    install: Optional[CudaInstall] = ctx.facts.get("cuda_install")  # parsed in nvdeploy/parsers/catalog.py
    if install is None:
        return [ctx.finding("cuda.compat", Verdict.ERROR, "the find over /usr/local was not parsed",
                            reason=ErrorReason.UNPARSEABLE, collector=CUDA_TOOLKITS)]
    expected = _expected_toolkit(ctx.host_vars)
    if result.rc not in (0, 1) or (result.rc == 1 and not install.toolkits
                                   and "No such file" not in result.err_text):
        detail = (result.err_text.strip().splitlines() or [f"exit {result.rc}"])[0][:200]
        return [ctx.finding("cuda.compat", Verdict.ERROR, f"find over /usr/local failed: {detail}",
                            reason=ErrorReason.UNPARSEABLE, collector=CUDA_TOOLKITS)]
    missing = expected is not None and not any(
        t.version and (t.version == expected or t.version.startswith(expected + ".")) for t in install.toolkits)
    if not install.toolkits:
        if expected:
            return [ctx.finding("cuda.compat", Verdict.FAIL,
                                f"no CUDA toolkit under /usr/local; the inventory expects CUDA {expected} "
                                "(host var cuda_toolkit)", observed="none", expected=expected,
                                remediation=Remediation.REINSTALL, collector=CUDA_TOOLKITS)]
        return [ctx.finding("cuda.compat", Verdict.SKIP, "no CUDA toolkit under /usr/local (driver only)",
                            observed="none", collector=CUDA_TOOLKITS)]
    gated = smi_gate(ctx, "cuda.compat")
    if gated:
        return gated
    smi = ctx.facts["smi"]
    driver = smi.driver_version
    if not driver:
        return [ctx.finding("cuda.compat", Verdict.ERROR, "nvidia-smi did not report a driver version",
                            reason=ErrorReason.UNPARSEABLE, collector=SMI)]
    table = compat_table()
    datacenter = is_datacenter([g.name for g in smi.gpus if getattr(g, "name", None)])
    judged = [(t, *judge(t, driver, datacenter, table)) for t in install.toolkits]
    worst = max((v for _, v, _ in judged), key=lambda v: _RANK[v])
    # What needs attention first; toolkits that are fine after it.
    parts = [text for _, _, text in sorted(judged, key=lambda j: -_RANK[j[1]])]
    if missing:
        worst = Verdict.FAIL
        parts.insert(0, f"CUDA {expected} expected (host var cuda_toolkit) but not installed")
    if result.rc == 1:
        parts.append("find reported unreadable folders: " + (result.err_text.strip().splitlines() or [""])[0][:120])
        worst = max(worst, Verdict.WARN, key=lambda v: _RANK[v])
    observed = {t.path: t.version for t in install.toolkits}
    table_note = f"table {table.version}"
    summary = "; ".join(parts)
    if worst is Verdict.PASS:
        summary = f"driver {driver} runs every installed CUDA toolkit: {summary}"
    remediation = {Verdict.PASS: Remediation.NONE, Verdict.WARN: Remediation.MONITOR,
                   Verdict.FAIL: Remediation.REINSTALL}[worst]
    return [ctx.finding("cuda.compat", worst, f"{summary} ({table_note})", observed=observed,
                        expected=f"driver {driver} >= each toolkit's minimum", remediation=remediation,
                        collector=CUDA_TOOLKITS)]
