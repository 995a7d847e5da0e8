"""The data-parallel gradient all-reduce per step, from nccl-tests bus bandwidth, and what it costs the job.

nccl-tests reports busbw = algbw * 2(n-1)/n for all_reduce (nccl-tests doc/PERFORMANCE.md): the 2(n-1)/n factor
of a ring is already in busbw, which is why it is comparable across GPU counts. So the time to all-reduce B bytes
over n GPUs is B / algbw = B * 2(n-1)/n / busbw. Inside one node the profile's (or the run's) single-node busbw
applies (NVLink/NVSwitch); once the job spans nodes, the multi-node busbw (InfiniBand) is the bottleneck.

ZeRO-1/2 replace the all-reduce by a reduce-scatter plus an all-gather of the same volume; ZeRO-3/FSDP also
all-gather the weights in forward and backward: 1.5x the volume (ZeRO paper, section 7). The all-reduce is
assumed to overlap with the backward pass (DDP/FSDP bucketing): only the part longer than compute is exposed.
"""

from __future__ import annotations

from typing import Optional

SHARDING_VOLUME = {"none": 1.0, "zero1": 1.0, "zero2": 1.0, "zero3": 1.5, "fsdp": 1.5}


def busbw_for(gpus: int, gpus_per_node: int, intra_gbps: Optional[float],
              inter_gbps: Optional[float]) -> tuple[Optional[float], str]:
    """The bus bandwidth that bounds an all-reduce over ``gpus``, and which link that is."""
    if gpus <= gpus_per_node:
        return intra_gbps, "inside one node (NVLink/NVSwitch or PCIe)"
    return inter_gbps, "across nodes (InfiniBand/RoCE)"


def allreduce_s(nbytes: float, gpus: int, busbw_gbps: float) -> float:
    """Seconds to all-reduce ``nbytes`` over ``gpus`` at nccl-tests bus bandwidth ``busbw_gbps`` (GB/s)."""
    if gpus <= 1:
        return 0.0
    return nbytes * 2.0 * (gpus - 1) / gpus / (busbw_gbps * 1e9)


def scaling_efficiency(compute_s: float, comm_s: float) -> float:
    """Compute time over step time, with the all-reduce overlapped: 1.0 when it hides behind compute."""
    return compute_s / max(compute_s, comm_s) if compute_s > 0 else 1.0
