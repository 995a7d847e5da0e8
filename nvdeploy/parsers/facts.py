"""Turn a node's raw command results into typed facts for the checks (pure)."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from typing import Any, Mapping, Optional

from nvdeploy.parsers.burnin import SamplerRun, parse_load, parse_sampler
from nvdeploy.parsers.catalog import catalog_facts, catalog_summary
from nvdeploy.parsers.dcgm import DcgmDiagFacts, diagnostic_gflops
from nvdeploy.parsers.kmsg import parse_kmsg
from nvdeploy.parsers.lspci import parse_lspci
from nvdeploy.parsers.nvidia_smi import parse_xml, xml_understood
from nvdeploy.parsers.nvml_json import parse_probe_json
from nvdeploy.parsers.smi_status import SmiStatus, smi_status
from nvdeploy.parsers.storage import StorageRun, parse_storage
from nvdeploy.results import CommandResult, ErrorReason, Verdict


def node_facts(results: Mapping[str, CommandResult]) -> dict[str, Any]:
    """Parse every collector that completed; the nvidia-smi status says whether its facts may be used."""
    facts: dict[str, Any] = {}
    smi_result = results.get("nvidia_smi_xml")
    status = smi_status(smi_result)
    smi = None
    probe = results.get("nvml_probe")
    probed = parse_probe_json(probe.text) if probe is not None and probe.ok else None
    if status.usable and smi_result is not None:
        # With the probe's GPUs at hand, only whether the XML reads matters (a garbled one is still ERROR):
        # the per-GPU fields would be thrown away.
        if probed is None or not probed.gpus or not xml_understood(smi_result.text):
            smi = parse_xml(smi_result.text)
        if smi is not None and not smi.gpus and smi.warnings:
            status = SmiStatus(Verdict.ERROR, f"nvidia-smi XML not understood: {smi.warnings[0]}",
                               ErrorReason.UNPARSEABLE)
    elif smi_result is not None and _lost_but_listed(smi_result):
        # Exit 15 with a complete table: a GPU is lost but the others answered. Their facts are judged and the
        # lost GPU is named (FAIL, ISOLATE) by each check, instead of one node-wide "fell off the bus".
        smi = parse_xml(smi_result.text)
        status = SmiStatus(None)
    facts["smi_source"] = "nvidia_smi_xml"
    facts["probe_warnings"] = ()
    if probed is not None:
        if probed.gpus:
            # NVML's facts, straight from the library; nvidia-smi's exit status above still decides.
            smi = probed if status.usable else smi
            facts["smi_source"] = "nvml_probe" if status.usable else "nvidia_smi_xml"
        facts["probe_warnings"] = probed.warnings
    elif probe is not None:
        facts["probe_warnings"] = (f"probe not used: {probe.error_detail or f'exit {probe.rc}'}",)
    facts["smi_status"] = status
    facts["smi"] = smi
    lspci = results.get("lspci")
    facts["lspci"] = parse_lspci(lspci.text) if lspci is not None and lspci.ok else None
    kmsg = results.get("kmsg")
    # A log cut to its newest bytes starts mid-line: the parser drops that partial first line.
    facts["kmsg"] = parse_kmsg(kmsg.text, partial_first_line=kmsg.truncated) if kmsg is not None and kmsg.ok \
        else None
    facts.update(catalog_facts(results))
    facts["storage"] = _storage(results.get("storage_throughput"))
    # The burn-in (validate --burn-in): whatever its exit status; a result that never ran to an answer has none.
    for name, parse in (("burnin_sampler", parse_sampler), ("burnin_load", parse_load)):
        result = results.get(name)
        facts[name] = parse(result.text) if result is not None and result.rc is not None else None
    after = results.get("burnin_kmsg")
    facts["burnin_kmsg"] = parse_kmsg(after.text, partial_first_line=after.truncated) \
        if after is not None and after.ok else None
    return facts


def _storage(result: Optional[CommandResult]) -> Optional[StorageRun]:
    """The storage script's paths (collect/storage_commands.py), whatever its exit status (each path's own is in its
    section); None when it did not run to an answer or stood in ``true`` (no storage_paths)."""
    if result is None or result.error is not None or result.rc in (None, 127) or result.command == "true":
        return None
    return parse_storage(result.text)


def _lost_but_listed(result: CommandResult) -> bool:
    """nvidia-smi exited 15 (a GPU is lost) yet printed complete XML in which a GPU reads ``GPU is lost``."""
    if result.rc != 15 or result.truncated or result.timed_out or result.error is not None:
        return False
    if "</nvidia_smi_log>" not in result.text:
        return False
    return any(gpu.lost for gpu in parse_xml(result.text).gpus)


def summary_facts(facts: Mapping[str, Any]) -> dict[str, Any]:
    """The few facts kept in results.json for reports, diffs and cluster checks."""
    out: dict[str, Any] = {}
    smi = facts.get("smi")
    if smi is not None:
        out["driver_version"] = smi.driver_version
        out["cuda_version"] = smi.cuda_version
        out["gpu_count"] = len(smi.gpus)
        names = sorted({g.name for g in smi.gpus if g.name})
        out["gpu_model"] = ", ".join(names)
        out["gpu_facts_source"] = facts.get("smi_source")
    kmsg = facts.get("kmsg")
    if kmsg is not None:
        out["xid_counts"] = dict(kmsg.xid_counts)
        if kmsg.sxid_events:  # only where there are any: results of nodes without NVSwitch events stay as they were
            sxids: dict[str, int] = {}
            for event in kmsg.sxid_events:
                sxids[str(event.sxid)] = sxids.get(str(event.sxid), 0) + 1
            out["sxid_counts"] = sxids
    lost = [g.index for g in (smi.gpus if smi is not None else ()) if g.lost]
    if lost:
        out["gpus_lost"] = lost
    lspci = facts.get("lspci")
    if lspci is not None:
        out["pci_gpu_count"] = len(lspci.gpus)
    out.update(catalog_summary(facts))
    gflops = diag_gflops(facts.get("dcgm_diag") or {}, facts.get("dcgm_gemm"))
    if gflops:
        out["dcgm_diag_gflops"] = gflops
    gflops = burnin_gflops(facts.get("burnin_load"))
    if gflops:
        out["burnin_gflops"] = gflops
    out.update(storage_figures(facts.get("storage")))
    out.update(nvbandwidth_figures(facts.get("nvbandwidth")))
    series = burnin_series(facts.get("burnin_sampler"))
    if series:
        out["burnin_series"] = series
    clocks = burnin_load_medians(facts.get("burnin_sampler"))
    if clocks:
        out["burnin_sm_clock_mhz"] = clocks
    temperatures = burnin_load_medians(facts.get("burnin_sampler"), "temperature_c")
    if temperatures:
        out["burnin_temperature_c"] = temperatures
    return out


def burnin_load_medians(run: Optional[SamplerRun], field: str = "sm_clock_mhz") -> dict[str, float]:
    """{GPU index (str): median of ``field`` (the SM clock in MHz, or ``temperature_c``) over the burn-in's samples
    under load}: fleet.performance compares them across nodes, since under the same load a GPU held back by its
    cooling or power delivery clocks below its peers, and runs hotter, even when no throttle reason says so. Under
    load: the value and the reasons were read, and the GPU-idle bit is clear (samples whose reasons are unreadable
    are not counted)."""
    out: dict[str, float] = {}
    for gpu in (run.gpus() if run is not None else ()):
        loaded = [getattr(s, field) for s in run.series(gpu)  # type: ignore[union-attr]
                  if getattr(s, field) is not None and s.idle is False]
        if loaded:
            out[str(gpu)] = round(statistics.median(loaded), 1)
    return out


BURNIN_POINTS = 200  # points per GPU kept of a burn-in's samples (an hour at 1 s is 3,600 of them)


def burnin_series(run: Optional[SamplerRun], points: int = BURNIN_POINTS) -> dict[str, list[list[Any]]]:
    """{GPU index (str): [[t s, SM clock MHz, temperature C], ...]}: the burn-in's curve per GPU, at most ``points``
    rows, for the report's chart (reports read the record only). A longer series is cut into ``points`` runs of
    consecutive samples; each row is its run's first time, lowest clock and highest temperature, so a short
    throttle dip is not averaged away. A value no sample of the run could read is None."""
    out: dict[str, list[list[Any]]] = {}
    for gpu in (run.gpus() if run is not None else ()):
        samples = run.series(gpu)  # type: ignore[union-attr]
        size = max(1, -(-len(samples) // max(points, 1)))
        rows: list[list[Any]] = []
        for start in range(0, len(samples), size):
            chunk = samples[start:start + size]
            clocks = [s.sm_clock_mhz for s in chunk if s.sm_clock_mhz is not None]
            temps = [s.temperature_c for s in chunk if s.temperature_c is not None]
            rows.append([round(chunk[0].t, 1), min(clocks) if clocks else None, max(temps) if temps else None])
        if rows:
            out[str(gpu)] = rows
    return out


# nvbandwidth's host<->device copy-engine testcases -> the summary fact of their per-GPU figure.
NVBANDWIDTH_FIGURES = {"host_to_device_memcpy_ce": "nvbandwidth_h2d_gbps",
                       "device_to_host_memcpy_ce": "nvbandwidth_d2h_gbps"}


def nvbandwidth_figures(run: Any) -> dict[str, dict[str, float]]:
    """``nvbandwidth_h2d_gbps`` / ``nvbandwidth_d2h_gbps``: {GPU index (str): GB/s} of the host<->device copies
    that passed (fleet.performance compares each GPU with its peers); a testcase that did not pass is left out.

    nvbandwidth prints each of these testcases as one row of GPU columns (the real v0.10 captures in
    tests/fixtures/real/nvbandwidth); a matrix of one column of GPU rows is read the same way."""
    out: dict[str, dict[str, float]] = {}
    for name, fact in NVBANDWIDTH_FIGURES.items():
        case = run.testcase(name) if run is not None else None
        if case is None or case.status != "Passed" or not case.matrix:
            continue
        if len(case.matrix) == 1:
            cells = dict(enumerate(case.matrix[0]))
        else:
            cells = {i: row[0] if row else None for i, row in enumerate(case.matrix)}
        values = {str(gpu): round(value, 3) for gpu, value in cells.items() if value is not None}
        if values:
            out[fact] = values
    return out


def storage_figures(run: Optional[StorageRun]) -> dict[str, dict[str, float]]:
    """``storage_read_gbps`` / ``storage_write_gbps``: {path: GB/s} of the paths measured to the end
    (fleet.performance compares each path across nodes); a direction no path measured is left out."""
    out: dict[str, dict[str, float]] = {}
    for path in (run.paths if run is not None else ()):
        if path.status != "ok":
            continue
        for step in path.steps:
            if step.gbps is not None:
                out.setdefault(f"storage_{step.direction}_gbps", {})[path.path] = round(step.gbps, 3)
    return out


def diag_gflops(diag: Mapping[int, Any], gemm: Any = None) -> dict[str, float]:
    """{GPU index (str): gigaflops} of DCGM's Diagnostic (GEMM) plugin (fleet.performance compares them across nodes):
    from the highest diag level whose Diagnostic test printed them, else the plugin run alone (``dcgm_gemm``, the
    standard level's); {} when none did (r1/r2 have no Diagnostic test; DCGM 3 text output has no info)."""
    for level in sorted(diag, reverse=True):
        out = diagnostic_gflops(diag[level]) if isinstance(diag[level], DcgmDiagFacts) else {}
        if out:
            return out
    return diagnostic_gflops(gemm) if isinstance(gemm, DcgmDiagFacts) else {}


def burnin_gflops(load: Any) -> dict[str, float]:
    """{GPU index (str): the median of its Diagnostic (GEMM) gigaflops over the burn-in's iterations}: one
    iteration's figure is that of one temperature, the median the GPU's steady one under sustained load
    (fleet.performance's ``burnin_gflops``, beside the heavy stage's ``dcgm_gflops``)."""
    per_gpu: dict[str, list[float]] = {}
    for step in (getattr(load, "steps", None) or ()):
        for gpu, value in step.gflops.items():
            if math.isfinite(value):
                per_gpu.setdefault(gpu, []).append(value)
    return {gpu: round(statistics.median(values), 2) for gpu, values in per_gpu.items()}


__all__ = ["node_facts", "summary_facts", "replace"]
