"""The checks whose findings may name a GPU (``Finding.gpu``), node checks and the cluster stage's alike.

A waiver narrowed to ``gpus:`` (config/waivers.py) waives only findings that name one of its GPUs: on a check
whose findings never name one it would waive nothing, silently, so the CLI refuses it (exit 2, file and line).
A check that reads the GPU facts through ``split_gpus`` names the GPU of its lost or unreadable GPUs, so it is
here even where its own verdict is node-wide. A unit test runs the simulator's faults and fails on a finding that
names a GPU of a check not listed here.
"""

from __future__ import annotations

GPU_CHECKS = frozenset({
    # The GPU facts (nvidia-smi -q -x or the NVML probe), judged GPU by GPU.
    "driver.loaded", "gpu.count", "gpu.model", "gpu.memory", "gpu.persistence", "gpu.mig", "gpu.recovery_action",
    "memory.ecc_mode", "memory.ecc_errors", "memory.remapped_rows", "memory.retired_pages", "pcie.link",
    "clocks.throttle", "clocks.temperature", "clocks.power_limit", "power.node", "nvlink.fabric",
    # The kernel log: an Xid's PCI address mapped to the GPU nvidia-smi lists there (checks/kmsg.py).
    "kmsg.xid",
    # NVLink, DCGM, copy bandwidth and burn-in, by GPU.
    "nvlink.links", "nvlink.topology", "dcgm.health", "dcgm.diag_r1", "dcgm.diag_r2", "dcgm.diag_r3", "dcgm.diag_r4",
    "dcgm.gemm", "nvbandwidth.copies", "burnin.stability",
    # A GPU's GPUDirect rail: its nearest NIC (rdma.rails) and the rail's perftest runs (the cluster stage).
    "rdma.rails", "rdma.gpudirect",
    # The cluster stage: a GPU's figure against its peers, and a tray's GPU in nvloom.
    "fleet.performance", "fleet.drift", "nvloom.domain",
})
