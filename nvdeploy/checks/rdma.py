"""GPUDirect RDMA between nodes (``rdma.gpudirect``, a cluster-stage check run by nvdeploy/phases/gpudirect.py):
how one perftest pair run is judged (pure)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from nvdeploy.checks.registry import CLUSTER_CHECKS
from nvdeploy.parsers.perftest import PerftestResult
from nvdeploy.results import CommandResult, ErrorReason, Remediation, Verdict

CHECK_ID = "rdma.gpudirect"
DEFAULT_FLOOR_PCT = 80.0

CLUSTER_CHECKS[CHECK_ID] = inspect.cleandoc("""Runs perftest between disjoint node pairs in parallel rounds (the same
    pairing as multi-node nccl-tests), over the nodes that passed their own checks and expect InfiniBand: the
    server ``ib_write_bw -d <HCA> --use_cuda=<GPU> -F --report_gbits -D 5`` on one node, then the client with the
    server's address on the other, both under timeouts (host var ``gpudirect_timeout``, default 60 s; the server
    gets 15 s more). HCA and GPU: host vars ``gpudirect_hca`` (default mlx5_0) and ``gpudirect_gpu`` (default 0);
    the server's address: ``gpudirect_address`` (default the inventory address). PASS: the client's average
    bandwidth at the largest size >= the profile's ``ib.rate_gbps`` x ``ib.gpudirect_floor_pct`` (80%), with the
    CUDA buffer in use. FAIL (INVESTIGATE: nvidia_peermem / dma-buf, the HCA's PCIe path to the GPU, cables)
    naming the pair when it is slower, or when perftest ran without the GPU buffer. ERROR when ib_write_bw is
    missing (install perftest built with CUDA), hung (killed at its timeout), cut off, or could not connect.
    SKIP when no InfiniBand is expected or fewer than two nodes are fit.""")


@dataclass(frozen=True)
class PairVerdict:
    verdict: Verdict
    summary: str
    observed: Optional[float] = None
    expected: Optional[str] = None
    reason: Optional[ErrorReason] = None
    remediation: Remediation = Remediation.NONE


def expectation(profile: Any, host_vars: Mapping[str, Any]) -> tuple[Optional[float], float]:
    """(the profile's per-port rate in Gb/s, the floor percentage)."""
    ib = profile.extra.get("ib") if profile is not None else None
    ib = ib if isinstance(ib, Mapping) else {}
    rate = host_vars.get("ib_rate_gbps", ib.get("rate_gbps"))
    pct = float(ib.get("gpudirect_floor_pct", DEFAULT_FLOOR_PCT))
    return (float(rate) if rate is not None else None), pct


def judge_pair(label: str, client: CommandResult, parsed: Optional[PerftestResult], server: CommandResult,
               rate: Optional[float], pct: float) -> PairVerdict:
    """One server/client run: ERROR when it did not run to the end, else PASS/FAIL against the floor."""
    for side, result in (("client", client), ("server", server)):
        if result.rc == 127:
            return PairVerdict(Verdict.ERROR, f"{label}: ib_write_bw not found on the {side} (install perftest built "
                               "with CUDA support)", reason=ErrorReason.TOOL_MISSING, remediation=Remediation.REINSTALL)
    if client.timed_out or client.error is ErrorReason.TIMEOUT:
        return PairVerdict(Verdict.ERROR, f"{label}: the client did not finish ({client.error_detail or 'timed out'};"
                           " killed on the node)", reason=ErrorReason.TIMEOUT, remediation=Remediation.INVESTIGATE)
    if client.error is not None:
        return PairVerdict(Verdict.ERROR, f"{label}: {client.error_detail or client.error.value}", reason=client.error)
    if parsed is None or not parsed.complete or parsed.bw_gbps is None:
        why = parsed.errors[0] if parsed is not None and parsed.errors else f"exit {client.rc}, no complete table"
        return PairVerdict(Verdict.ERROR, f"{label}: no bandwidth result ({why})", reason=ErrorReason.INCOMPLETE,
                           remediation=Remediation.INVESTIGATE)
    bw = parsed.bw_gbps
    if rate is None:
        return PairVerdict(Verdict.PASS, f"{label}: {bw:g} Gb/s (no rate in the profile to judge it)", observed=bw)
    floor = round(rate * pct / 100, 2)
    expected = f">= {floor:g}"
    if not parsed.cuda:
        return PairVerdict(Verdict.FAIL, f"{label}: {bw:g} Gb/s but without a GPU buffer (perftest built without "
                           "CUDA?): GPUDirect RDMA not exercised", observed=bw, expected=expected,
                           remediation=Remediation.REINSTALL)
    if bw < floor:
        return PairVerdict(Verdict.FAIL, f"{label}: GPUDirect RDMA {bw:g} Gb/s < {floor:g} ({pct:g}% of "
                           f"{rate:g}): check nvidia_peermem or dma-buf, the HCA's PCIe path to the GPU "
                           "(nvidia-smi topo -m), ports and cables", observed=bw, expected=expected,
                           remediation=Remediation.INVESTIGATE)
    return PairVerdict(Verdict.PASS, f"{label}: GPUDirect RDMA {bw:g} Gb/s (>= {floor:g}, {pct:g}% of {rate:g})",
                       observed=bw, expected=expected)
