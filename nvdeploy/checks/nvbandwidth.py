"""nvbandwidth.copies: NVIDIA nvbandwidth's copy-engine host<->device and peer read bandwidth against the profile's
floors. Pure: the parsed run (facts['nvbandwidth'], nvdeploy/parsers/nvbandwidth.py) and the profile in, findings
out. The run's object is read by its attributes; the check imports no parser."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from nvdeploy.checks.gating import raw_gate, section
from nvdeploy.checks.registry import NodeContext, register
from nvdeploy.results import ErrorReason, Finding, Remediation, Verdict

CHECK = "nvbandwidth.copies"
COLLECTOR = "nvbandwidth"
INSTALL = ("build it from github.com/NVIDIA/nvbandwidth (CUDA toolkit, cmake, libboost-program-options-dev: "
           "`cmake . && make`) and put it on the PATH or set the host var nvbandwidth_path")
# What a PCIe Gen5 x16 link can carry at most (32 GT/s x 16 lanes, 128b/130b): a host floor above it can only be met
# over NVLink-C2C (Grace), so a C2C link running at PCIe speed fails it.
PCIE_GEN5_X16_GBPS = 63.0
# testcase -> (profile key, what it measures, per GPU pair?)
TESTCASES: Mapping[str, tuple[str, str, bool]] = {
    "host_to_device_memcpy_ce": ("host_to_device_gbps", "host->device", False),
    "device_to_host_memcpy_ce": ("device_to_host_gbps", "device->host", False),
    "device_to_device_memcpy_read_ce": ("device_to_device_gbps", "peer read", True),
}


def _per_gpu(matrix: Any) -> dict[int, float]:
    """{GPU: GB/s} of a host<->device matrix: one row of GPU columns (or one column of GPU rows)."""
    if len(matrix) == 1:
        return {i: v for i, v in enumerate(matrix[0]) if v is not None}
    return {i: row[0] for i, row in enumerate(matrix) if row and row[0] is not None}


def _per_pair(matrix: Any) -> dict[tuple[int, int], float]:
    return {(r, c): v for r, row in enumerate(matrix) for c, v in enumerate(row) if v is not None and r != c}


def _judge(ctx: NodeContext, name: str, case: Any, floors: Mapping[str, Any]) -> Finding:
    key, what, pairs = TESTCASES[name]
    if case is None:
        return ctx.finding(CHECK, Verdict.ERROR, f"nvbandwidth {what}: {name} not in its output",
                           reason=ErrorReason.INCOMPLETE, collector=COLLECTOR)
    if case.status == "Waived":
        if pairs and ctx.profile.gpu.count < 2:
            return ctx.finding(CHECK, Verdict.SKIP, f"nvbandwidth {what}: waived (one GPU, no peer)",
                               collector=COLLECTOR)
        return ctx.finding(CHECK, Verdict.ERROR, f"nvbandwidth {what}: {name} waived: the system does not allow it "
                           "(peer access off? GPUs hidden by CUDA_VISIBLE_DEVICES?)", reason=ErrorReason.NOT_RUN,
                           remediation=Remediation.INVESTIGATE, collector=COLLECTOR)
    if case.status != "Passed" or not case.matrix:
        message = case.error or case.status or "no result"
        if "checking the pattern" in message:
            # nvbandwidth verifies every copy: a wrong pattern is data corrupted in flight, not a slow link.
            return ctx.finding(CHECK, Verdict.FAIL, f"nvbandwidth {what}: copied data failed verification: "
                               f"{message}", observed=message, expected="verified copies",
                               remediation=Remediation.ISOLATE, collector=COLLECTOR)
        return ctx.finding(CHECK, Verdict.ERROR, f"nvbandwidth {what}: {name} did not complete: {message}",
                           reason=ErrorReason.NOT_RUN, remediation=Remediation.INVESTIGATE, collector=COLLECTOR)
    values: Mapping[Any, float] = _per_pair(case.matrix) if pairs else _per_gpu(case.matrix)
    label = (lambda k: f"GPU{k[0]}<-GPU{k[1]}") if pairs else (lambda k: f"GPU{k}")
    expected_cells = ctx.profile.gpu.count * (ctx.profile.gpu.count - 1) if pairs else ctx.profile.gpu.count
    if not values:
        return ctx.finding(CHECK, Verdict.ERROR, f"nvbandwidth {what}: no bandwidth in its matrix",
                           reason=ErrorReason.UNPARSEABLE, collector=COLLECTOR)
    slowest = min(values, key=lambda k: values[k])
    low = values[slowest]
    floor = floors.get(key)
    shown = f"slowest {low:g} GB/s ({label(slowest)}) of {len(values)} {'pairs' if pairs else 'GPUs'}"
    if len(values) != expected_cells:
        return ctx.finding(CHECK, Verdict.ERROR, f"nvbandwidth {what}: measured {len(values)} "
                           f"{'GPU pairs' if pairs else 'GPUs'}, the profile has {expected_cells}: {shown}",
                           observed=len(values), expected=expected_cells, reason=ErrorReason.INCOMPLETE,
                           collector=COLLECTOR)
    if floor is None:
        return ctx.finding(CHECK, Verdict.SKIP, f"nvbandwidth {what}: {shown}; no {key} floor in the profile "
                           f"{ctx.profile.name} (not judged)", observed=low, unit="GB/s", collector=COLLECTOR)
    below = sorted((k for k in values if values[k] < float(floor)), key=lambda k: values[k])
    if below:
        named = ", ".join(f"{label(k)} {values[k]:g}" for k in below[:8]) + (" ..." if len(below) > 8 else "")
        if pairs:
            hint = "check NVLink (nvlink.links, nvlink.fabric), peer access and clocks"
        elif float(floor) > PCIE_GEN5_X16_GBPS:
            hint = ("above what PCIe Gen5 x16 carries, so this host path is NVLink-C2C: check C2C mode and link "
                    "state (nvidia-smi -q C2C, nvidia-smi c2c -s), the GPU's NUMA node and the Grace clocks")
            if low <= PCIE_GEN5_X16_GBPS:
                hint = "at or below PCIe speed, the host copies did not go over NVLink-C2C: " + hint.split(": ", 1)[1]
        else:
            hint = "check the GPU's PCIe link (pcie.link), its NUMA affinity and IOMMU settings"
        gpu = None if pairs else int(slowest)
        return ctx.finding(CHECK, Verdict.FAIL, f"nvbandwidth {what} below the floor {float(floor):g} GB/s: {named} "
                           f"GB/s: {hint}", observed=low, expected=f">= {float(floor):g}", unit="GB/s", gpu=gpu,
                           remediation=Remediation.INVESTIGATE, collector=COLLECTOR)
    return ctx.finding(CHECK, Verdict.PASS, f"nvbandwidth {what}: {shown} >= floor {float(floor):g} GB/s",
                       observed=low, expected=f">= {float(floor):g}", unit="GB/s", collector=COLLECTOR)


@register(CHECK, collectors=(COLLECTOR,))
def nvbandwidth_copies(ctx: NodeContext) -> list[Any]:
    """Runs NVIDIA nvbandwidth (github.com/NVIDIA/nvbandwidth, v0.5+ for ``-j``) on the node: ``nvbandwidth -j -t
    host_to_device_memcpy_ce device_to_host_memcpy_ce device_to_device_memcpy_read_ce`` (the host var
    ``nvbandwidth_path`` names the binary), hard timeout 600 s (host var ``nvbandwidth_timeout``). One finding per
    copy: host->device and device->host per GPU, peer reads per GPU pair (copy engines, nvbandwidth verifies every
    copy).

    PASS: every GPU (every pair) at or above the profile's ``nvbandwidth`` floor (``host_to_device_gbps``,
    ``device_to_host_gbps``, ``device_to_device_gbps``; sources in the profile). On Grace systems (GB200/GB300
    trays) the host floors are above what PCIe Gen5 x16 can carry, so a host copy that does not go over NVLink-C2C
    FAILs. FAIL naming the slow GPUs or pairs (INVESTIGATE: the C2C link and mode on Grace, the PCIe link and NUMA
    affinity elsewhere, NVLink for peer reads), or a copy that failed nvbandwidth's verification (ISOLATE). ERROR
    ``not_run`` when nvbandwidth is not on the node (build it from the NVIDIA/nvbandwidth repository: CUDA toolkit,
    cmake and libboost-program-options-dev, ``cmake . && make``), a copy waived or failed, or fewer GPUs measured
    than the profile has; timeout when it hung. SKIP: the profile states no floor (the figure is shown), or peer
    reads on a one-GPU node. Remediation: NVIDIA's nvbandwidth README and, for Grace, the GB200 NVL Multi-Node
    Tuning Guide and Grace performance tuning guide (C2C, NUMA).
    """
    result = ctx.results.get(COLLECTOR)
    if result is not None and result.error is None and result.rc == 127:
        return [ctx.finding(CHECK, Verdict.ERROR, f"nvbandwidth not found on the node: {INSTALL}",
                            reason=ErrorReason.NOT_RUN, remediation=Remediation.REINSTALL, collector=COLLECTOR)]
    gated = raw_gate(ctx, CHECK, COLLECTOR, "nvbandwidth", INSTALL)
    if gated:
        return gated
    run: Optional[Any] = ctx.facts.get("nvbandwidth")
    if run is None or not run.testcases:
        detail = (run.error if run is not None and run.error else "") or (result.err_text.strip()[:200]
                                                                           if result is not None else "")
        return [ctx.finding(CHECK, Verdict.ERROR, f"nvbandwidth printed no testcase (exit "
                            f"{result.rc if result is not None else '?'}): {detail or 'no output'} (v0.5 or later "
                            "is needed for -j)", reason=ErrorReason.UNPARSEABLE, collector=COLLECTOR)]
    floors = section(ctx, "nvbandwidth")
    return [_judge(ctx, name, run.testcase(name), floors) for name in TESTCASES]
