"""GPUDirect RDMA between nodes (``rdma.gpudirect``, a cluster-stage check run by nvdeploy/phases/gpudirect.py):
how one perftest pair run is judged (pure)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional

from nvdeploy.checks.gating import raw_gate
from nvdeploy.checks.ib import ib_expectation
from nvdeploy.checks.registry import CLUSTER_CHECKS, NodeContext, register
from nvdeploy.parsers.perftest import PerftestResult
from nvdeploy.results import CommandResult, ErrorReason, Finding, Remediation, Verdict

CHECK_ID = "rdma.gpudirect"
RAILS_CHECK = "rdma.rails"
RAILS_FACT = "gpudirect_rails"  # the node's rail map in results.json facts, for the GPUDirect stage
TOPO = "nvidia_smi_topo"
IBSTAT = "ibstat"
DEFAULT_FLOOR_PCT = 80.0
# The farthest PCIe distance at which NCCL still uses GPUDirect RDMA by default (NCCL_NET_GDR_LEVEL unset): PXB, per
# ncclTopoCheckGdr in NCCL's src/graph/paths.cc (``int netGdrLevel = PATH_PXB``; beyond it "GPU Direct RDMA
# Disabled for GPU ... (distance > ...)"). The rail map (parsers/topo.py) ranks PIX < PXB < PHB < NODE < SYS.
DIRECT_LINKS = ("PIX", "PXB")

CLUSTER_CHECKS[CHECK_ID] = inspect.cleandoc("""Runs perftest between disjoint node pairs in parallel rounds (the same
    pairing as multi-node nccl-tests), over the nodes that passed their own checks (a FAIL of ib.ports or rdma.rails
    alone does not keep a node out: its other rails are still measured) and expect InfiniBand, on every GPUDirect rail:
    GPU k and its nearest compute NIC (the rail map of ``rdma.rails``, from ``nvidia-smi topo -m``) on one node against
    GPU k's rail on the other. Per rail the server ``ib_write_bw -d <NIC> --use_cuda=<GPU> -p <port> -F --report_gbits
    -D 5`` on one node, then the client with the server's address on the other, each rail on its own TCP port (18515,
    18516, ...: perftest's servers side by side need one each) and under its own timeouts (host var
    ``gpudirect_timeout``, default 60 s; the server gets 15 s more). Rails run side by side where they share no PCIe
    switch on either node; rails whose NICs or GPUs are PIX/PXB to each other (or share a NIC) run in later waves. No
    wave starts after the global ``--deadline``; every rail run's output is evidence. Host vars ``gpudirect_hca`` and/or
    ``gpudirect_gpu`` test just that rail of the node. Without a rail map (rdma.rails not run, or no matrix) the node's
    single default rail, GPU0 and mlx5_0, is tested and each finding and the cluster summary say so. The server's
    address: ``gpudirect_address`` (default the inventory address). PASS: the client's average bandwidth at the largest
    size >= the profile's per-port ``ib.rate_gbps`` (e.g. 400 Gb/s, NDR per ConnectX-7 port) x
    ``ib.gpudirect_floor_pct`` (80%), with the CUDA buffer in use. FAIL (INVESTIGATE: nvidia_peermem / dma-buf, the
    HCA's PCIe path to the GPU, ports and cables) naming the rail by node, GPU, NIC and port when it is slower, or when
    perftest ran without the GPU buffer; a slow rail is re-tested on that rail against a node that passed it, and only
    the node slow again is FAIL (without such a node both are ERROR, not localised). FAIL on the node whose port the
    light batch's ibstat showed not Active (that rail is not started: a perftest server facing a dead port would wait
    out its timeout) or perftest reports not Active ("Port number 1 state is Down"), without a re-test, and its partner
    is re-tested on that rail with another node. ERROR when ib_write_bw is missing (install perftest built with CUDA),
    hung (killed at its timeout), cut off, or could not connect. SKIP when no InfiniBand is expected or fewer than two
    nodes are fit. Each node's best figure (``rdma_gpudirect_gbps``) and each rail's (``rdma_gpudirect_rail_gbps``, by
    ``GPUk/NIC``) go to fleet.performance, which judges a rail against the same rail of the node's peers.""")


def _rail_text(rail: Mapping[str, Any]) -> str:
    return f"GPU{rail['gpu']}-{rail['nic']} ({rail['link']})"


@register(RAILS_CHECK, collectors=(TOPO, IBSTAT))
def rdma_rails(ctx: NodeContext) -> list[Finding]:
    """Reads ``nvidia-smi topo -m`` (and ``ibstat`` for which NICs are compute NICs): pairs each GPU with its
    nearest compute NIC, its GPUDirect rail, which the ``rdma.gpudirect`` stage then measures rail by rail.

    Compute NICs: ibstat's devices with an InfiniBand port that are not bonds (``mlx5_bond_0`` and Ethernet/RoCE
    ports are storage or management); without ibstat, every NIC column but bonds (the summary says so). Each GPU
    takes the compute NIC nearest to it, ranked PIX < PXB < PHB < NODE < SYS (the matrix's Legend); among equally
    near NICs the first no other GPU took (DGX A100: GPU0 and GPU1 both PXB to mlx5_0 and mlx5_1, one each), else
    the one the fewest GPUs share (two GPUs behind one NIC: noted, not a finding). Rails whose devices are PIX/PXB
    to each other share a PCIe switch and are measured in different waves. PASS: every GPU's rail is PIX or PXB,
    with the map (rails, waves, NICs on no rail) in the summary and ``observed``; the map is kept in the node's
    facts (``gpudirect_rails``) for the stage. FAIL (INVESTIGATE) for a GPU whose nearest compute NIC is PHB, NODE or
    SYS when the node should have a NIC per GPU (profile ``ib.hcas`` / host var ``ib_hcas`` >= its GPUs): NCCL uses
    GPUDirect RDMA only up to PXB by default (``NCCL_NET_GDR_LEVEL``; ``ncclTopoCheckGdr`` in NCCL's
    src/graph/paths.cc), so that GPU's traffic is staged through host memory, and on such a node that means its
    own NIC is missing, disabled or in the wrong slot; WARN instead where the node has fewer NICs than GPUs by
    design. ERROR when nvidia-smi topo -m did not run or printed no matrix, or shows no compute NIC. SKIP when no
    InfiniBand is expected.
    """
    hcas, _ = ib_expectation(ctx)
    if not hcas:
        return [ctx.finding(RAILS_CHECK, Verdict.SKIP, "no InfiniBand HCA expected (profile ib / host var ib_hcas): "
                            "no GPUDirect rails")]
    gated = raw_gate(ctx, RAILS_CHECK, TOPO, "nvidia-smi topo -m", "install the NVIDIA driver (nvidia-smi)")
    if gated:
        return gated
    rails = ctx.facts.get("rails")
    if rails is None:
        return [ctx.finding(RAILS_CHECK, Verdict.ERROR, "no GPU/NIC matrix in nvidia-smi topo -m: the rail map is "
                            "unknown (the GPUDirect stage tests only the default rail)", reason=ErrorReason.UNPARSEABLE,
                            collector=TOPO)]
    facts = rails.to_dict()
    if not facts["rails"]:
        why = "no compute NIC column" if not facts["compute"] else "no GPU row with a PCIe distance to one"
        return [ctx.finding(RAILS_CHECK, Verdict.ERROR, f"nvidia-smi topo -m shows {why} (compute NICs from "
                            f"{facts['compute_from']}: {', '.join(facts['compute']) or 'none'}): the rail map is "
                            "unknown (the GPUDirect stage tests only the default rail)", observed=facts,
                            reason=ErrorReason.INCOMPLETE, collector=TOPO)]
    gpus = len(facts["rails"])
    own_nic = hcas >= gpus
    findings: list[Finding] = []
    for rail in facts["rails"]:
        if rail["link"] in DIRECT_LINKS:
            continue
        verdict = Verdict.FAIL if own_nic else Verdict.WARN
        why = (f"the node should have a NIC per GPU ({hcas} expected for {gpus} GPUs): check that GPU{rail['gpu']}'s "
               "own NIC is present, enabled and in its slot (lspci, ibstat, ib.ports)" if own_nic else
               f"the node has fewer NICs ({hcas} expected) than GPUs ({gpus}) by design")
        findings.append(ctx.finding(
            RAILS_CHECK, verdict, f"GPU{rail['gpu']}: its nearest compute NIC {rail['nic']} is {rail['link']} away: "
            "NCCL uses GPUDirect RDMA only up to PXB by default (NCCL_NET_GDR_LEVEL), so this GPU's network "
            f"traffic is staged through host memory; {why}", gpu=int(rail["gpu"]), observed=rail["link"],
            expected="PIX or PXB", remediation=Remediation.INVESTIGATE, collector=TOPO))
    shared = [f"GPU{r['gpu']} shares {r['nic']} with GPU{', GPU'.join(str(g) for g in r['shared_with'])}"
              for r in facts["rails"] if r["shared_with"] and r["gpu"] < min(r["shared_with"])]
    notes = [f"compute NICs from {facts['compute_from']}"]
    if facts["unpaired"]:
        notes.append(f"on no GPU's rail: {', '.join(facts['unpaired'])}")
    notes += shared + facts["warnings"]
    summary = (f"{gpus} GPUDirect rails: {', '.join(_rail_text(r) for r in facts['rails'])}; measured in "
               f"{len(facts['waves'])} wave(s) {' '.join('[' + ','.join(map(str, w)) + ']' for w in facts['waves'])}"
               f" ({'; '.join(notes)})")
    if not findings:
        return [ctx.finding(RAILS_CHECK, Verdict.PASS, summary, observed=facts, collector=TOPO)]
    # The map goes with the first finding: the node's one rdma.rails verdict is its worst rail's.
    first = findings[0]
    return [replace(first, summary=f"{first.summary}. The map: {summary}"), *findings[1:]]


@dataclass(frozen=True)
class PairVerdict:
    verdict: Verdict
    summary: str
    observed: Optional[float] = None
    expected: Optional[str] = None
    reason: Optional[ErrorReason] = None
    remediation: Remediation = Remediation.NONE
    # "server" or "client" when the tool itself located the fault on one side (its port not Active): that side is
    # named without a re-test, its partner not at all.
    blame: Optional[str] = None


def expectation(profile: Any, host_vars: Mapping[str, Any]) -> tuple[Optional[float], float]:
    """(the profile's per-port rate in Gb/s, the floor percentage)."""
    ib = profile.extra.get("ib") if profile is not None else None
    ib = ib if isinstance(ib, Mapping) else {}
    rate = host_vars.get("ib_rate_gbps", ib.get("rate_gbps"))
    pct = float(ib.get("gpudirect_floor_pct", DEFAULT_FLOOR_PCT))
    return (float(rate) if rate is not None else None), pct


def judge_pair(label: str, client: CommandResult, parsed: Optional[PerftestResult], server: CommandResult,
               rate: Optional[float], pct: float, server_port: Optional[tuple[int, str]] = None,
               client_port: Optional[tuple[int, str]] = None, sides: tuple[str, str] = ("server", "client"),
               nic: Optional[tuple[str, str]] = None) -> PairVerdict:
    """One server/client run: ERROR when it did not run to the end, else PASS/FAIL against the floor.
    ``server_port``/``client_port``: perftest's " Port number N state is X" on that side (the port was not Active);
    ``sides``: the two nodes' names and ``nic`` their devices, for that message."""
    for side, result in (("client", client), ("server", server)):
        if result.rc == 127:
            return PairVerdict(Verdict.ERROR, f"{label}: ib_write_bw not found on the {side} (install perftest built "
                               "with CUDA support)", reason=ErrorReason.TOOL_MISSING, remediation=Remediation.REINSTALL)
    for index, (side, port) in enumerate((("client", client_port), ("server", server_port))):
        if port is not None:
            node = sides[1 - index]
            device = f"{nic[1 - index]} " if nic else ""
            return PairVerdict(Verdict.FAIL, f"{label}: {node}'s {device}port {port[0]} is {port[1]} (perftest: "
                               f"\"Port number {port[0]} state is {port[1]}\"): nothing was measured on this rail; "
                               "check its cable, transceiver and switch port (ibstat, ib.ports)",
                               remediation=Remediation.INVESTIGATE, blame=side)
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
