"""The check catalog: each check is a small function from a node's facts to findings, declared with ``@register``.

Checks are pure (facts + profile in, findings out). ``nvdeploy checks list`` and ``nvdeploy checks show ID``
print this catalog, with each check's docstring. The catalog is built here from the explicit list of check modules
below: importing a check module registers nothing, and a module missing from the list has no check in the catalog
(a unit test keeps the list complete).
"""

from __future__ import annotations

from nvdeploy.checks import (
    burnin,
    clocks,
    container,
    cuda,
    dcgm,
    driver,
    driver_flavour,
    fabric,
    firmware,
    fleet,
    gpu,
    gpu_operator,
    ib,
    imex,
    kmsg,
    memory,
    mps,
    nccl,
    nvbandwidth,
    nvlink,
    nvlink_fabric,
    pcie,
    power,
    rdma,
    storage,
    system,
    versions,
)
from nvdeploy.checks.registry import Check, NodeContext, build_catalog, register

CHECK_MODULES = (
    # The node's GPUs, driver and kernel log.
    driver, driver_flavour, gpu, kmsg, memory, system,
    # The datacenter catalog: NVLink, PCIe, fabric manager, InfiniBand, clocks/thermals/MIG, versions, DCGM, nccl-tests.
    clocks, dcgm, fabric, ib, nccl, nvlink, pcie, versions,
    # Firmware (VBIOS, InfoROM, GSP, ConnectX, BIOS) against the profile's minimums; across nodes in the cluster stage.
    firmware,
    # Copy bandwidth host<->device and between peers (nvbandwidth), against the profile's floors.
    nvbandwidth,
    # Rack-scale NVLink on the node: fabric registration of each GPU (NVL72 trays), the driver's recovery action.
    nvlink_fabric,
    # The GPU stack around the driver: containers, CUDA toolkit/driver compatibility, MPS; power; RDMA.
    container, cuda, mps, power, rdma,
    # Rack-scale NVLink: the IMEX daemon of each tray (its domain in the cluster stage, nvdeploy/phases/imex.py).
    imex,
    # The Kubernetes GPU Operator (cluster stage on the controller, nvdeploy/phases/k8s.py).
    gpu_operator,
    # Read and write throughput of the paths the host vars name (fio, else dd with direct I/O).
    storage,
    # Burn-in (validate --burn-in DURATION): stability of every GPU under sustained load, the repeated tests.
    burnin,
    # Cluster stage: each measured figure against the node's peers (fleet.performance).
    fleet,
)
CHECKS = build_catalog(CHECK_MODULES)

__all__ = ["CHECKS", "CHECK_MODULES", "Check", "NodeContext", "register"]
