"""One estimate per SKU: does the job fit, on how few GPUs, how long at which cost and energy; GPUs <-> days.

Parallelism model: data parallelism over every GPU with the chosen ZeRO/FSDP sharding (training), tensor
parallelism over the GPUs for inference. Tensor/pipeline parallelism in training is not modelled: with
``--sharding none`` a model whose states exceed one GPU never fits here, although a TP/PP layout could run it.

GPU counts the calculator chooses (the fewest that fit, or that finish within ``--days``) are rounded up to whole
nodes of the profile for training: nodes are what a cluster schedules and what is paid for, and a data-parallel
job uses every GPU of them. Inference keeps a count within one node (a tensor-parallel group may share a node)
and rounds larger ones up to whole nodes. A count given with ``--gpus`` is kept as given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

from nvdeploy.sizing import comms, compute, cost, memory
from nvdeploy.sizing.models import ModelShape
from nvdeploy.sizing.sku import SkuFigures

# Kept free on every GPU: CUDA context (~0.5-1 GB), NCCL buffers, allocator fragmentation. 10% is the usual
# planning margin (PyTorch's caching allocator rarely packs better than ~90%).
RESERVE_FRACTION = 0.10
MAX_GPUS = 1 << 24
DEFAULT_SEQ = 4096   # when neither --seq-len nor the model table gives one
HOURS_PER_DAY = 24.0


@dataclass(frozen=True)
class Job:
    model: ModelShape
    precision: str = "bf16"
    tokens: Optional[float] = None          # training
    inference: bool = False
    context: int = 8192                      # inference
    batch: int = 1                           # inference
    optimizer: str = "adamw"
    sharding: str = "zero3"
    checkpointing: bool = False
    attention: str = "flash"                 # memory-efficient attention; "eager" stores the s^2 scores
    seq_len: Optional[int] = None
    micro_batch: int = 1
    gpus: Optional[int] = None
    days: Optional[float] = None
    mfu: float = compute.DEFAULT_MFU
    price: Optional[float] = None            # USD per GPU-hour for this SKU
    on_prem: Optional[cost.OnPrem] = None

    @property
    def seq(self) -> int:
        return self.seq_len or self.model.seq_len or DEFAULT_SEQ


@dataclass(frozen=True)
class Estimate:
    profile: str
    gpus: Optional[int]
    fits: Optional[bool]
    min_gpus: Optional[int]
    memory_gb_per_gpu: Optional[float]
    train_flops: Optional[float]
    gpu_hours: Optional[float]
    days: Optional[float]
    cost_usd: Optional[float]
    energy_mwh: Optional[float]
    allreduce_s_per_step: Optional[float]
    notes: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        def num(v: Any, digits: int = 4) -> Any:
            return float(f"{v:.{digits}g}") if isinstance(v, float) else v
        data = {"profile": self.profile, "gpus": self.gpus, "fits": self.fits, "min_gpus": self.min_gpus,
                "memory_gb_per_gpu": None if self.memory_gb_per_gpu is None else round(self.memory_gb_per_gpu, 2),
                "train_flops": num(self.train_flops), "gpu_hours": num(self.gpu_hours, 6), "days": num(self.days),
                "cost_usd": num(self.cost_usd, 6), "energy_mwh": num(self.energy_mwh),
                "allreduce_s_per_step": num(self.allreduce_s_per_step), "notes": list(self.notes)}
        data.update({k: num(v) for k, v in self.extra.items()})
        return data


def usable_bytes(sku: SkuFigures) -> float:
    return sku.memory_bytes * (1.0 - RESERVE_FRACTION)


def memory_at(job: Job, gpus: int) -> memory.MemoryPerGpu:
    if job.inference:
        return memory.inference_memory(job.model, job.precision, gpus, job.context, job.batch)
    return memory.training_memory(job.model, job.optimizer, job.sharding, gpus, job.seq, job.micro_batch,
                                  job.checkpointing, job.attention)


def whole_nodes(job: Job, sku: SkuFigures, gpus: int) -> int:
    """``gpus`` rounded up to whole nodes of the SKU (see the module's docstring for when)."""
    per_node = max(1, sku.gpus_per_node)
    if job.inference and gpus <= per_node:
        return gpus
    return -(-gpus // per_node) * per_node


def min_gpus(job: Job, sku: SkuFigures) -> Optional[int]:
    """The smallest GPU count whose per-GPU memory fits; None when no count does (memory per GPU never falls
    below what one GPU offers: unsharded states or activations alone too big)."""
    limit = usable_bytes(sku)
    if memory_at(job, MAX_GPUS).total > limit:
        return None
    low, high = 1, MAX_GPUS          # memory per GPU never grows with the GPU count: bisect
    while low < high:
        mid = (low + high) // 2
        if memory_at(job, mid).total <= limit:
            high = mid
        else:
            low = mid + 1
    return low


def _comm(job: Job, sku: SkuFigures, gpus: int, notes: list[str]) -> tuple[Optional[float], float]:
    """(all-reduce seconds per step, scaling efficiency) at ``gpus``."""
    busbw, where = comms.busbw_for(gpus, sku.gpus_per_node, sku.busbw_gbps, sku.multinode_busbw_gbps)
    if gpus <= 1:
        return 0.0, 1.0
    if busbw is None:
        notes.append(f"no nccl all_reduce bus bandwidth {where} in the profile: all-reduce time and scaling "
                     "efficiency unknown (assumed to hide behind compute)")
        return None, 1.0
    nbytes = job.model.params * memory.GRADIENT_BYTES * comms.SHARDING_VOLUME[job.sharding]
    seconds = comms.allreduce_s(nbytes, gpus, busbw)
    peak = sku.peak_tflops(job.precision)
    if peak is None:
        return seconds, 1.0
    step = compute.step_compute_s(job.model, job.seq, job.micro_batch, peak, job.mfu)
    efficiency = comms.scaling_efficiency(step, seconds)
    hidden = "hides behind" if seconds <= step else "is longer than"
    notes.append(f"all-reduce of {nbytes / 1e9:.1f} GB of gradients {where} at busbw {busbw:g} GB/s: {seconds:.3g} "
                 f"s per step, {hidden} {step:.3g} s of compute per micro-batch of {job.micro_batch}x{job.seq} "
                 f"tokens (scaling efficiency {efficiency:.0%}; with gradient accumulation the compute per step "
                 "grows and the all-reduce hides better)")
    return seconds, efficiency


def _solve_gpus_for_days(job: Job, sku: SkuFigures, compute_hours: float, floor: int) -> int:
    """Fewest GPUs (at least ``floor``) that finish within ``job.days``, the efficiency depending on the count."""
    assert job.days is not None
    gpus = max(floor, math.ceil(compute_hours / (job.days * HOURS_PER_DAY)))
    for _ in range(64):
        _, efficiency = _comm(job, sku, gpus, [])
        needed = max(floor, math.ceil(compute_hours / (job.days * HOURS_PER_DAY * efficiency)))
        if needed <= gpus:
            return gpus
        gpus = needed
    return gpus


def estimate(job: Job, sku: SkuFigures) -> Estimate:
    notes: list[str] = list(sku.measured)
    smallest = min_gpus(job, sku)
    if job.gpus is not None:
        gpus: Optional[int] = job.gpus
    elif job.days is not None or smallest is None:
        gpus = None   # --days: solved below (training only); never fits: no count to report
    else:
        gpus = whole_nodes(job, sku, smallest)
    peak = sku.peak_tflops(job.precision)
    extra: dict[str, Any] = {"usable_gb_per_gpu": usable_bytes(sku) / memory.GB,
                             "peak_tflops": peak, "gpus_per_node": sku.gpus_per_node}
    flops = hours = days = allreduce = None
    efficiency = 1.0
    if job.inference:
        _inference_notes(job, sku, notes)
    else:
        assert job.tokens is not None
        flops = compute.train_flops(job.model, job.tokens, job.seq)
        compute_hours = compute.gpu_hours(flops, peak, job.mfu)
        if compute_hours is None:
            notes.append(f"{sku.profile} has no dense {job.precision} Tensor-Core peak in its datasheet section: "
                         "no time, cost or energy")
        elif job.days is not None and job.gpus is None:
            gpus = whole_nodes(job, sku, _solve_gpus_for_days(job, sku, compute_hours, smallest or 1))
            if smallest is None:
                notes.append("no GPU count fits this job in memory; GPU count solved for --days alone")
        if gpus is not None:
            allreduce, efficiency = _comm(job, sku, gpus, notes)
        if compute_hours is not None:
            hours = compute_hours / efficiency
            days = hours / gpus / HOURS_PER_DAY if gpus else None
        if not job.model.has_shape:
            notes.append("model shape unknown (--params only): activations and attention FLOPs not counted; "
                         "use --model for them")
        extra["scaling_efficiency"] = efficiency
    mem = memory_at(job, gpus) if gpus else None
    # No GPU count fits: that is a "no", not an unknown.
    fits = (False if smallest is None else None) if mem is None else mem.total <= usable_bytes(sku)
    if mem is not None:
        extra["headroom_gb"] = (usable_bytes(sku) - mem.total) / memory.GB
        extra["memory_breakdown"] = mem.to_dict()
        extra["nodes"] = math.ceil(gpus / sku.gpus_per_node) if gpus else None
        if job.gpus is None and smallest is not None and gpus != smallest and job.days is None:
            notes.append(f"{smallest} GPUs would fit; {gpus} = {extra['nodes']} whole node(s) of "
                         f"{sku.gpus_per_node} GPUs, which time, cost and energy are computed for")
    if smallest is None:
        notes.append(_never_fits(job, sku))
    elif fits is False:
        notes.append(f"{gpus} GPUs do not fit: {mem.total / memory.GB:.1f} GB per GPU needed, "  # type: ignore[union-attr]
                     f"{usable_bytes(sku) / memory.GB:.1f} GB usable; at least {smallest} GPUs")
    if not job.inference and mem is not None and mem.activations and not job.checkpointing \
            and job.model.heads and job.model.layers:
        notes.append(_activation_note(job, mem.activations))
    cost_usd = cost.cost_usd(hours, job.price)
    energy = cost.energy_mwh(hours, sku.power_w)
    if job.price is None and hours is not None:
        notes.append(f"no --price {sku.profile}=USD_PER_GPU_HOUR: cost not computed")
    if job.inference and mem is not None and gpus and sku.hbm_tbps:
        # Decode is memory-bound: each step reads this GPU's weights and KV cache once from HBM (every sequence
        # at full context: the slow end). batch / step time is an upper bound on tokens/s (kernels reach ~70-80%).
        step = mem.total / (sku.hbm_tbps * 1e12)
        extra["decode_tokens_per_s"] = job.batch / step
        if job.price is not None:
            extra["usd_per_million_tokens"] = job.price * gpus / 3600.0 / extra["decode_tokens_per_s"] * 1e6
        notes.append(f"decode at most {extra['decode_tokens_per_s']:,.0f} tokens/s for the batch of {job.batch} "
                     f"({mem.total / memory.GB:.1f} GB read per step per GPU at {sku.hbm_tbps:g} TB/s HBM)")
    if job.on_prem is not None and sku.power_w is not None:
        extra["onprem_usd_per_gpu_hour"] = job.on_prem.usd_per_gpu_hour(sku.gpus_per_node, sku.power_w)
        extra["onprem_cost_usd"] = None if hours is None else hours * extra["onprem_usd_per_gpu_hour"]
        if job.price is not None:
            breakeven = job.on_prem.breakeven_utilisation(sku.gpus_per_node, sku.power_w, job.price)
            extra["breakeven_utilization"] = breakeven
            notes.append("owning beats the cloud price above " + (f"{breakeven:.0%} utilisation" if breakeven
                         is not None and breakeven <= 1 else "100% utilisation: never") + " (on-prem "
                         f"{extra['onprem_usd_per_gpu_hour']:.2f} USD per GPU-hour at 100%)")
    return Estimate(sku.profile, gpus, fits, smallest, None if mem is None else mem.total / memory.GB, flops, hours,
                    days, cost_usd, energy, allreduce, tuple(notes), extra)


def _activation_note(job: Job, kept: float) -> str:
    assert job.model.heads and job.model.layers
    scores = memory.attention_scores(job.seq, job.micro_batch, job.model.heads) * job.model.layers
    if job.attention == "eager":
        return (f"activations {kept / memory.GB:.1f} GB per GPU without checkpointing, {scores / memory.GB:.1f} GB "
                "of it attention scores (5*a*s^2*b: --attention eager; memory-efficient attention such as "
                "FlashAttention, the default, never stores them); --activation-checkpointing keeps 2*s*b*h per layer")
    return (f"activations {kept / memory.GB:.1f} GB per GPU without checkpointing, with memory-efficient attention "
            f"(FlashAttention; --attention eager would store {scores / memory.GB:.1f} GB more of attention "
            "scores); --activation-checkpointing keeps 2*s*b*h per layer")


def _never_fits(job: Job, sku: SkuFigures) -> str:
    usable = usable_bytes(sku) / memory.GB
    if job.inference:
        return f"does not fit at any GPU count ({usable:.1f} GB usable per GPU)"
    floor = memory_at(job, MAX_GPUS)
    # Suggest only the levers this job has not pulled yet.
    levers = [] if job.sharding in ("zero3", "fsdp") else ["--sharding zero3/fsdp"]
    if not job.checkpointing:
        levers.append("--activation-checkpointing")
    levers.append("a smaller --micro-batch/--seq-len")
    return (f"does not fit at any GPU count with --sharding {job.sharding}: {floor.total / memory.GB:.1f} GB per GPU "
            f"stay unsharded (activations {((floor.activations or 0) / memory.GB):.1f} GB) against {usable:.1f} GB "
            f"usable; try {', '.join(levers[:-1]) + ' or ' if len(levers) > 1 else ''}{levers[-1]} "
            "(tensor/pipeline parallelism is not modelled)")


def _inference_notes(job: Job, sku: SkuFigures, notes: list[str]) -> None:
    if job.model.has_shape:
        assert job.model.layers and job.model.kv_heads and job.model.head_dim
        kv = memory.kv_cache_bytes(job.model, job.context, job.batch, job.precision) or 0.0
        notes.append(f"KV cache {kv / memory.GB:.1f} GB in total = 2 x {job.model.layers} layers x "
                     f"{job.model.kv_heads} KV heads x {job.model.head_dim} x {job.context} context x {job.batch} "
                     f"batch x {memory.KV_BYTES[job.precision]:g} bytes")
    else:
        notes.append("model shape unknown (--params only): KV cache not counted; use --model")
    if sku.peak_tflops(job.precision) is None:
        notes.append(f"{sku.profile} has no {job.precision} Tensor-Core path in its datasheet section")
