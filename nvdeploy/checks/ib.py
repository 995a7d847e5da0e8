"""InfiniBand checks: the compute fabric's HCAs Active at the expected rate, and GPUDirect RDMA (nvidia_peermem or
DMA-BUF)."""

from __future__ import annotations

from typing import Any, Optional

from nvdeploy.checks.gating import first_line, raw_gate, section
from nvdeploy.checks.registry import NodeContext, register
from nvdeploy.results import ErrorReason, Finding, Remediation, Verdict

IBSTAT = "ibstat"
LSMOD = "lsmod"
KERNEL_DRIVER = "kernel_driver"  # nvdeploy/collect/stack.py
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


# GPUDirect RDMA through DMA-BUF instead of nvidia_peermem (NVIDIA GPU Operator docs, "GPUDirect RDMA and GPUDirect
# Storage", common prerequisites table): an open kernel module driver, CUDA 11.7 or later (driver R515, the first
# with the open modules), a Turing or newer GPU (the open modules load on nothing older), Linux 5.12 or later.
DMABUF_MIN_KERNEL = (5, 12)
DMABUF_MIN_DRIVER = 515


def dmabuf_blocker(facts: Any) -> Optional[str]:
    """Why DMA-BUF cannot carry GPUDirect RDMA on this node; None when every prerequisite nvdeploy can see holds."""
    if facts is None or facts.nvrm_line is None:
        return "the nvidia module is not loaded (/proc/driver/nvidia/version missing)"
    if not facts.open_module:
        return f"the proprietary nvidia kernel module {facts.driver_version or ''} is loaded; DMA-BUF needs the " \
               "open GPU kernel modules".replace("  ", " ")
    major = facts.driver_version.split(".")[0] if facts.driver_version else ""
    if not major.isdigit() or int(major) < DMABUF_MIN_DRIVER:
        return f"driver {facts.driver_version or '?'} is older than R{DMABUF_MIN_DRIVER} (CUDA 11.7)"
    kernel = facts.kernel_version
    if kernel is None:
        return "the kernel release could not be read (/proc/sys/kernel/osrelease)"
    if kernel < DMABUF_MIN_KERNEL:
        return f"kernel {facts.kernel_release} is older than {DMABUF_MIN_KERNEL[0]}.{DMABUF_MIN_KERNEL[1]}"
    return None


@register("ib.peermem", collectors=(LSMOD, KERNEL_DRIVER))
def ib_peermem(ctx: NodeContext) -> list[Finding]:
    """Runs ``lsmod`` and reads ``/proc/driver/nvidia/version`` and ``/proc/sys/kernel/osrelease``: GPUDirect RDMA
    has a kernel path on nodes with InfiniBand, through either of the two paths NVIDIA documents.

    - **nvidia_peermem** (the legacy path, any driver, needs MLNX_OFED/DOCA-OFED): the module is in ``lsmod``.
    - **DMA-BUF** (NVIDIA's recommendation for new deployments; no extra module): the loaded nvidia module is the
      open flavour (its ``NVRM version:`` line says ``Open Kernel Module``), driver R515 or later (CUDA 11.7), and
      the kernel is 5.12 or later (source: NVIDIA GPU Operator docs, "GPUDirect RDMA and GPUDirect Storage",
      common prerequisites). The GPU being Turing or newer follows from the open module being loaded. What
      nvdeploy cannot see from these files (the HCA driver's dma-buf support, NCCL's choice) is measured at
      ``full`` by ``rdma.gpudirect``.

    PASS naming the path found (peermem first when both are there). FAIL (TUNE: ``modprobe nvidia_peermem`` and
    list it in ``/etc/modules-load.d/``, or move to the open kernel modules on kernel >= 5.12) when neither is,
    naming why DMA-BUF is not usable: inter-node traffic would be staged through host memory at a fraction of
    the bandwidth. ERROR when lsmod is missing or failed, or when peermem is absent and the two files could not
    be read (hung or failed ``find``). SKIP when the node expects no InfiniBand HCA.
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
    files = ctx.results.get(KERNEL_DRIVER)
    facts = ctx.facts.get("kernel_driver")  # None when the files were not read (nvdeploy/parsers/catalog.py)
    dmabuf_why = dmabuf_blocker(facts) if facts is not None else "not read"
    if modules.loaded("nvidia_peermem"):
        also = "; DMA-BUF usable too" if dmabuf_why is None else ""
        return [ctx.finding("ib.peermem", Verdict.PASS, f"nvidia_peermem loaded (GPUDirect RDMA){also}",
                            observed="nvidia_peermem", expected="nvidia_peermem or dma-buf", collector=LSMOD)]
    if facts is None:
        reason = files.error if files is not None and files.error is not None else ErrorReason.NOT_RUN
        detail = (files.error_detail or reason.value) if files is not None else "not collected"
        return [ctx.finding("ib.peermem", Verdict.ERROR,
                            f"nvidia_peermem not loaded and the DMA-BUF prerequisites could not be read ({detail})",
                            reason=reason, collector=KERNEL_DRIVER)]
    if dmabuf_why is None:
        return [ctx.finding("ib.peermem", Verdict.PASS,
                            f"GPUDirect RDMA through DMA-BUF: open kernel module {facts.driver_version} on kernel "
                            f"{facts.kernel_release} (nvidia_peermem not needed)", observed="dma-buf",
                            expected="nvidia_peermem or dma-buf", collector=KERNEL_DRIVER)]
    return [ctx.finding("ib.peermem", Verdict.FAIL,
                        f"no GPUDirect RDMA: nvidia_peermem not loaded and DMA-BUF not usable ({dmabuf_why}); "
                        "modprobe nvidia_peermem and add it to /etc/modules-load.d/, or use the open kernel modules "
                        "on kernel >= 5.12", observed="not loaded", expected="nvidia_peermem or dma-buf",
                        remediation=Remediation.TUNE, collector=LSMOD)]
