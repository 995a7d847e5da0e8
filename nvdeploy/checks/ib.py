"""InfiniBand checks: the compute fabric's HCAs Active at the expected rate, and GPUDirect RDMA (nvidia_peermem)."""

from __future__ import annotations

from typing import Any, Optional

import nvdeploy.collect_catalog  # noqa: F401  registers the collectors named below
from nvdeploy.checks.gating import first_line, raw_gate, section
from nvdeploy.checks.registry import NodeContext, register
from nvdeploy.results import ErrorReason, Finding, Remediation, Verdict

IBSTAT = "ibstat"
LSMOD = "lsmod"
RATE_TOLERANCE = 0.01


def ib_expectation(ctx: NodeContext) -> tuple[Optional[int], Optional[float]]:
    """(HCAs, rate in Gb/s): the host vars ``ib_hcas``/``ib_rate_gbps`` win over the profile's ``ib`` section."""
    ib = section(ctx, "ib")
    hcas = ctx.host_vars.get("ib_hcas", ib.get("hcas"))
    rate = ctx.host_vars.get("ib_rate_gbps", ib.get("rate_gbps"))
    return (int(hcas) if hcas is not None else None), (float(rate) if rate is not None else None)


def is_ib_port(device: Any, port: Any) -> bool:
    """An InfiniBand port of the compute fabric: link layer InfiniBand (or not printed, as on old ibstat), and not
    a bond (``mlx5_bond_0`` is RoCE/Ethernet for storage or management)."""
    if "bond" in device.name.lower():
        return False
    layer = (port.link_layer or "InfiniBand").strip().lower()
    return layer == "infiniband"


@register("ib.ports", collectors=(IBSTAT,))
def ib_ports(ctx: NodeContext) -> list[Finding]:
    """Runs ``ibstat``: the expected InfiniBand HCAs are Active at the expected rate.

    PASS: at least the expected number of InfiniBand HCAs (profile ``ib.hcas``, host var ``ib_hcas``) have a port
    ``Active`` at the expected rate (profile ``ib.rate_gbps``, host var ``ib_rate_gbps``; ibstat's ``Rate``).
    Ports whose link layer is Ethernet (RoCE) and bonds (``mlx5_bond_0``) are not IB ports and are ignored.
    FAIL (INVESTIGATE: cable, transceiver, switch port, subnet manager) naming each port that is down,
    initializing (no subnet manager) or slower. WARN when the expected count is met but another IB port is down.
    ERROR when ibstat is missing or failed. SKIP when no InfiniBand is expected.
    """
    hcas, rate = ib_expectation(ctx)
    if not hcas:
        return [ctx.finding("ib.ports", Verdict.SKIP, "no InfiniBand HCA expected (profile ib / host var ib_hcas)")]
    gated = raw_gate(ctx, "ib.ports", IBSTAT, "ibstat", "install infiniband-diags (and the OFED/DOCA driver stack)")
    if gated:
        return gated
    facts = ctx.facts.get("ib")
    result = ctx.results[IBSTAT]
    if result.rc != 0 or facts is None:
        return [ctx.finding("ib.ports", Verdict.ERROR,
                            f"ibstat exited {result.rc}: {first_line(ctx, IBSTAT) or 'no output'}",
                            reason=ErrorReason.UNPARSEABLE, collector=IBSTAT)]
    good: list[str] = []
    bad: list[str] = []
    for device in facts.devices:
        device_ok = False
        for port in device.ports:
            if not is_ib_port(device, port):
                continue
            name = f"{device.name} port {port.port}"
            if port.state != "Active":
                bad.append(f"{name}: {port.state or 'unknown'}" + (f" ({port.physical_state})"
                                                                    if port.physical_state else ""))
            elif rate is not None and (port.rate_gbps is None or port.rate_gbps < rate * (1 - RATE_TOLERANCE)):
                bad.append(f"{name}: Active at {port.rate_gbps if port.rate_gbps is not None else '?'} Gb/s")
            else:
                device_ok = True
        if device_ok:
            good.append(device.name)
    at = f" at {rate:g} Gb/s" if rate is not None else ""
    expected = f"{hcas} HCAs Active{at}"
    if len(good) >= hcas:
        if bad:
            return [ctx.finding("ib.ports", Verdict.WARN,
                                f"{len(good)} IB HCAs Active{at}; also down: {'; '.join(bad)}", observed=len(good),
                                expected=expected, remediation=Remediation.MONITOR, collector=IBSTAT)]
        return [ctx.finding("ib.ports", Verdict.PASS, f"{len(good)} IB HCAs Active{at} ({', '.join(good)})",
                            observed=len(good), expected=expected, collector=IBSTAT)]
    detail = "; ".join(bad) if bad else "no further InfiniBand port listed"
    return [ctx.finding("ib.ports", Verdict.FAIL, f"{len(good)} of {hcas} InfiniBand HCAs Active{at}: {detail}",
                        observed=len(good), expected=expected, remediation=Remediation.INVESTIGATE,
                        collector=IBSTAT)]


@register("ib.peermem", collectors=(LSMOD,))
def ib_peermem(ctx: NodeContext) -> list[Finding]:
    """Runs ``lsmod``: nvidia_peermem (GPUDirect RDMA) is loaded on nodes with InfiniBand.

    PASS: the ``nvidia_peermem`` kernel module is loaded, so NCCL can move data between GPU memory and the HCAs
    directly (GPUDirect RDMA). FAIL (TUNE: ``modprobe nvidia_peermem`` and list it in
    ``/etc/modules-load.d/``) when it is not: inter-node traffic would be staged through host memory at a
    fraction of the bandwidth (unless NCCL uses DMA-BUF, which needs the open kernel modules). ERROR when lsmod
    is missing or failed. SKIP when the node expects no InfiniBand HCA.
    """
    hcas, _ = ib_expectation(ctx)
    if not hcas:
        return [ctx.finding("ib.peermem", Verdict.SKIP, "no InfiniBand expected: GPUDirect RDMA not needed")]
    gated = raw_gate(ctx, "ib.peermem", LSMOD, "lsmod", "install kmod")
    if gated:
        return gated
    modules = ctx.facts.get("lsmod")
    if modules is None or not modules.modules:
        return [ctx.finding("ib.peermem", Verdict.ERROR,
                            f"lsmod exited {ctx.results[LSMOD].rc} and listed no module",
                            reason=ErrorReason.UNPARSEABLE, collector=LSMOD)]
    if modules.loaded("nvidia_peermem"):
        return [ctx.finding("ib.peermem", Verdict.PASS, "nvidia_peermem loaded (GPUDirect RDMA)", observed="loaded",
                            expected="loaded", collector=LSMOD)]
    return [ctx.finding("ib.peermem", Verdict.FAIL,
                        "nvidia_peermem not loaded: no GPUDirect RDMA (modprobe nvidia_peermem; add it to "
                        "/etc/modules-load.d/)", observed="not loaded", expected="loaded",
                        remediation=Remediation.TUNE, collector=LSMOD)]
