"""GPU memory per GPU: model states (weights, gradients, optimizer), activations, KV cache.

Model states of mixed-precision training (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training
Trillion Parameter Models", section 3.1): 2 bytes of 16-bit weights + 2 bytes of 16-bit gradients + K bytes of
optimizer state per parameter, K = 12 for Adam/AdamW (fp32 master weights, momentum, variance: 4 + 4 + 4), so 16
bytes per parameter. SGD with momentum keeps an fp32 master copy and the momentum: K = 8. FP8/FP4 training
(Transformer Engine) keeps the same 16-bit weights and fp32 states: only the matmul inputs are narrower, so the
states do not shrink. ZeRO stage 1 shards the optimizer states over the data-parallel degree, stage 2 the
gradients too, stage 3 (and FSDP full sharding) the weights too (ZeRO paper, Figure 1).

Activations (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", section
4.1, eq. 1, no tensor parallelism): 34*s*b*h + 5*a*s^2*b bytes per layer with 16-bit activations (s sequence
length, b micro-batch, h hidden size, a heads). With full activation checkpointing only each layer's input is
kept, 2*s*b*h bytes per layer, plus one layer's full activations while it is recomputed in the backward pass.
The 5*a*s^2*b term is the attention-score matrix (softmax output, dropout mask and output). Memory-efficient
attention (FlashAttention, PyTorch's scaled_dot_product_attention, cuDNN fused attention: every current training
stack) never stores it, only a per-row log-sum-exp (4*a*s*b bytes, negligible next to 34*s*b*h): that is the
default here (``attention="flash"``). ``attention="eager"`` counts the scores, as a plain softmax(QK^T)V does.

KV cache for inference: 2 (K and V) * layers * kv_heads * head_dim * context * batch * bytes per element.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from nvdeploy.sizing.models import ModelShape
from nvdeploy.sizing.units import SizingError

GB = 1e9
WEIGHT_BYTES = 2.0       # 16-bit weights kept for the forward/backward pass in mixed-precision training
GRADIENT_BYTES = 2.0     # 16-bit gradients; also what the data-parallel all-reduce moves
OPTIMIZER_BYTES = {"adam": 12.0, "adamw": 12.0, "sgd": 8.0}
SHARDINGS = ("none", "zero1", "zero2", "zero3", "fsdp")
ATTENTIONS = ("flash", "eager")
INFERENCE_WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5}
# KV caches are kept in 16 bits, or 8 bits when quantised; 4-bit KV caches are rare, so fp4 weights keep an fp8 cache.
KV_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 1.0}


@dataclass(frozen=True)
class MemoryPerGpu:
    """Bytes per GPU by term; ``activations``/``kv_cache`` are None when the model's shape is unknown."""

    weights: float
    gradients: float = 0.0
    optimizer: float = 0.0
    activations: Optional[float] = None
    kv_cache: Optional[float] = None

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + (self.activations or 0.0) + (self.kv_cache or 0.0)

    def to_dict(self) -> dict[str, Optional[float]]:
        def gb(v: Optional[float]) -> Optional[float]:
            return None if v is None else round(v / GB, 2)
        return {"weights_gb": gb(self.weights), "gradients_gb": gb(self.gradients),
                "optimizer_gb": gb(self.optimizer), "activations_gb": gb(self.activations),
                "kv_cache_gb": gb(self.kv_cache), "total_gb": gb(self.total)}


def model_states(params: float, optimizer: str, sharding: str, dp: int) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per GPU at data-parallel degree ``dp``."""
    if optimizer not in OPTIMIZER_BYTES:
        raise SizingError(f"--optimizer: unknown {optimizer!r} (one of {', '.join(OPTIMIZER_BYTES)})")
    if sharding not in SHARDINGS:
        raise SizingError(f"--sharding: unknown {sharding!r} (one of {', '.join(SHARDINGS)})")
    weights, grads, opt = params * WEIGHT_BYTES, params * GRADIENT_BYTES, params * OPTIMIZER_BYTES[optimizer]
    if sharding in ("zero1", "zero2", "zero3", "fsdp"):
        opt /= dp
    if sharding in ("zero2", "zero3", "fsdp"):
        grads /= dp
    if sharding in ("zero3", "fsdp"):
        weights /= dp
    return weights, grads, opt


def attention_scores(seq: int, micro_batch: int, heads: int) -> float:
    """Bytes of one layer's stored attention scores: the 5*a*s^2*b term, kept only by eager attention."""
    return 5.0 * heads * seq * seq * micro_batch


def layer_activations(seq: int, micro_batch: int, hidden: int, heads: int, attention: str = "flash") -> float:
    """Bytes one layer keeps for its backward pass without recomputation (Korthikanti et al. eq. 1)."""
    if attention not in ATTENTIONS:
        raise SizingError(f"--attention: unknown {attention!r} (one of {', '.join(ATTENTIONS)})")
    kept = 34.0 * seq * micro_batch * hidden
    return kept + attention_scores(seq, micro_batch, heads) if attention == "eager" else kept


def activations(model: ModelShape, seq: int, micro_batch: int, checkpointing: bool,
                attention: str = "flash") -> Optional[float]:
    if not model.has_shape:
        return None
    assert model.layers and model.hidden and model.heads
    one_layer = layer_activations(seq, micro_batch, model.hidden, model.heads, attention)
    if checkpointing:
        return 2.0 * seq * micro_batch * model.hidden * model.layers + one_layer
    return one_layer * model.layers


def training_memory(model: ModelShape, optimizer: str, sharding: str, dp: int, seq: int, micro_batch: int,
                    checkpointing: bool, attention: str = "flash") -> MemoryPerGpu:
    weights, grads, opt = model_states(model.params, optimizer, sharding, dp)
    return MemoryPerGpu(weights, grads, opt, activations(model, seq, micro_batch, checkpointing, attention))


def kv_cache_bytes(model: ModelShape, context: int, batch: int, precision: str) -> Optional[float]:
    if not model.has_shape:
        return None
    assert model.layers and model.kv_heads and model.head_dim
    return 2.0 * model.layers * model.kv_heads * model.head_dim * context * batch * KV_BYTES[precision]


def inference_memory(model: ModelShape, precision: str, gpus: int, context: int, batch: int) -> MemoryPerGpu:
    """Weights and KV cache split evenly over ``gpus`` (tensor parallelism shards both by head)."""
    kv = kv_cache_bytes(model, context, batch, precision)
    return MemoryPerGpu(model.params * INFERENCE_WEIGHT_BYTES[precision] / gpus,
                        kv_cache=None if kv is None else kv / gpus)
