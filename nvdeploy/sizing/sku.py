"""What one GPU of a profile's SKU offers the calculator: dense Tensor-Core peaks, memory, links, power.

Figures come from the profile's ``datasheet`` section (dense TFLOPS: NVIDIA's starred figures are 2:4-sparse and
are halved in the profiles) and its ``nccl`` section (the bus-bandwidth floors nvdeploy validates against). A
profile without a datasheet section (a user's own SKU) still gives memory and GPU count; compute-time figures
are then null, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from nvdeploy.config.profiles import Profile

PRECISIONS = ("bf16", "fp16", "fp8", "fp4")
MIB = 1 << 20


@dataclass(frozen=True)
class SkuFigures:
    profile: str
    stamp: str
    gpus_per_node: int
    memory_bytes: int                       # per GPU, as nvidia-smi reports it (the profile's memory_mib)
    tflops: Mapping[str, float] = field(default_factory=dict)   # dense, per precision present on the SKU
    hbm_tbps: Optional[float] = None
    nvlink_gbps: Optional[float] = None
    power_w: Optional[float] = None         # datasheet TDP (or the power limit a run read from the nodes)
    busbw_gbps: Optional[float] = None      # all_reduce busbw inside one node (nccl-tests)
    multinode_busbw_gbps: Optional[float] = None   # all_reduce busbw across nodes
    sources: tuple[str, ...] = ()
    measured: tuple[str, ...] = ()          # which figures a validation run replaced, said in words

    def peak_tflops(self, precision: str) -> Optional[float]:
        return self.tflops.get(precision)


def _num(section: Mapping[str, Any], key: str) -> Optional[float]:
    value = section.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def sku_figures(profile: Profile) -> SkuFigures:
    sheet = profile.extra.get("datasheet") or {}
    nccl = profile.extra.get("nccl") or {}
    tflops = {p: v for p in PRECISIONS if (v := _num(sheet, f"{p}_tflops")) is not None}
    power = _num(sheet, "tdp_w")
    if power is None and profile.gpu.power_limit_w is not None:
        power = float(profile.gpu.power_limit_w)
    return SkuFigures(
        profile=profile.name, stamp=profile.stamp, gpus_per_node=profile.gpu.count,
        memory_bytes=profile.gpu.memory_mib * MIB, tflops=tflops, hbm_tbps=_num(sheet, "hbm_tbps"),
        nvlink_gbps=_num(sheet, "nvlink_gbps"), power_w=power, busbw_gbps=_num(nccl, "all_reduce_busbw_gbps"),
        multinode_busbw_gbps=_num(nccl, "multinode_busbw_gbps"),
        sources=tuple(str(s) for s in sheet.get("sources", ())))
