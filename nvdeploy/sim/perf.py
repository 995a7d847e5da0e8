"""How fast a simulated node measures, relative to a healthy node of its hardware: the fleet's spread and the
faults that make one node or one GPU slower than its peers while it stays above every profile floor.

Every measured figure the simulator prints is a healthy figure times :func:`factor`: nccl-tests busbw (single node,
and a multi-node group, which goes as fast as its slowest member), the DCGM diag Diagnostic (GEMM) gigaflops, the
nvbandwidth copy bandwidths, the storage throughput, the GPUDirect RDMA bandwidth of a pair (its slower member's)
and a GPU's SM clock under the burn-in's load.

Faults (``sim_faults``):

- ``fleet_spread``: the node's healthy figures vary by up to +-1% around the healthy figure, deterministically from
  the node name (and the GPU index for per-GPU figures), as a real fleet's do, so that fleet.performance meets a MAD
  other than 0. Without it every healthy node prints the same figures (tests compare them exactly).
- ``slower:<PCT>``: every measured figure of the node at PCT% (1-100) of a healthy node's. nccl busbw of a healthy
  8x H100 node is 101% of the datasheet figure, so ``slower:95`` still passes its 95% floor; lower ones fail it too.
- ``slower_gpu:<GPU>:<PCT>``: the GPU's own compute figure (DCGM Diagnostic gigaflops) at PCT% of a healthy GPU's;
  its node's nccl busbw is unchanged (a GPU slow at GEMM, as from a clock or power cap, still moves data at full
  speed). A GPU index beyond the node's GPUs means its last GPU.
- ``rail_slow:<NIC>:<PCT>``: the GPUDirect RDMA bandwidth of every run on that NIC (``ib_write_bw -d <NIC>``, either
  side of the pair) at PCT% of a healthy rail's, as ``slower:<PCT>`` for the node's figures; the node's other rails
  and every other figure unchanged (a degraded cable or transceiver on one port).
- ``rail_down:<NIC>``: that NIC's port is Down in ``ibstat`` (Polling, rate 40, LID 0, as ``ib_port_down``), and
  ``ib_write_bw -d <NIC>`` fails as perftest does on a port that is not Active (nvdeploy/sim/stack_tools.py); a
  client whose server's rail is down cannot connect.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from nvdeploy.sim.scenario import register_fault

SPREAD_PCT = 1.0
_PCT = r"(?:100|[1-9][0-9]?)(?:\.[0-9]+)?"
SLOWER = re.compile(rf"slower:({_PCT})")
SLOWER_GPU = re.compile(rf"slower_gpu:([0-9]{{1,3}}):({_PCT})")

RAIL_SLOW = re.compile(rf"rail_slow:([A-Za-z][A-Za-z0-9_]*):({_PCT})")
RAIL_DOWN = re.compile(r"rail_down:([A-Za-z][A-Za-z0-9_]*)")

register_fault("fleet_spread", "healthy measured figures vary by up to +-1%, deterministically by node name (and GPU)")
register_fault("slower", "slower:<PCT>: every measured figure of the node (nccl busbw, DCGM gigaflops, nvbandwidth, "
               "storage, GPUDirect, burn-in clock) at PCT% of a healthy node's", pattern=SLOWER.pattern)
register_fault("slower_gpu", "slower_gpu:<GPU>:<PCT>: that GPU's DCGM Diagnostic gigaflops at PCT% of a healthy "
               "GPU's", pattern=SLOWER_GPU.pattern)


register_fault("rail_slow", "rail_slow:<NIC>:<PCT>: GPUDirect RDMA (ib_write_bw -d <NIC>) on that NIC's rail at "
               "PCT% of a healthy rail's", pattern=RAIL_SLOW.pattern)
register_fault("rail_down", "rail_down:<NIC>: that NIC's port Down in ibstat; ib_write_bw -d <NIC> fails (port state "
               "Down), its partner cannot connect", pattern=RAIL_DOWN.pattern)


def rail_factor(faults: Iterable[str], nic: str) -> float:
    """The product of the ``rail_slow:<NIC>:<PCT>`` faults on ``nic`` (1.0 without one)."""
    out = 1.0
    for fault in faults:
        match = RAIL_SLOW.fullmatch(fault)
        if match and match.group(1) == nic:
            out *= float(match.group(2)) / 100
    return out


def rails_down(faults: Iterable[str]) -> set[str]:
    """The NICs of the node's ``rail_down:<NIC>`` faults."""
    return {m.group(1) for m in (RAIL_DOWN.fullmatch(f) for f in faults) if m}


def spread(name: str, gpu: int | None = None) -> float:
    """A factor in [0.99, 1.01], fixed for the node (and GPU)."""
    digest = hashlib.sha256(f"{name}/perf/{'node' if gpu is None else gpu}".encode()).digest()
    unit = int.from_bytes(digest[:8], "big") / float(1 << 64)  # [0, 1)
    return 1.0 + SPREAD_PCT / 100 * (2 * unit - 1)


def slower_factor(faults: Iterable[str]) -> float:
    """The product of the node's ``slower:<PCT>`` faults (1.0 without one)."""
    out = 1.0
    for fault in faults:
        match = SLOWER.fullmatch(fault)
        if match:
            out *= float(match.group(1)) / 100
    return out


def factor(name: str, faults: Iterable[str], gpu: int | None = None, last_gpu: int | None = None) -> float:
    """The node's measured figures relative to a healthy node's: ``gpu`` None for a node-wide figure, else the GPU's
    own (``last_gpu``: the node's highest GPU index, where an out-of-range ``slower_gpu`` lands)."""
    faults = tuple(faults)
    out = (spread(name, gpu) if "fleet_spread" in faults else 1.0) * slower_factor(faults)
    if gpu is not None:
        for fault in faults:
            match = SLOWER_GPU.fullmatch(fault)
            if match is None:
                continue
            target = int(match.group(1))
            if last_gpu is not None:
                target = min(target, last_gpu)
            if target == gpu:
                out *= float(match.group(2)) / 100
    return out
