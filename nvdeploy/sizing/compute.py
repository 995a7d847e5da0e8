"""Training FLOPs and time at a SKU's dense Tensor-Core peak times the model FLOPs utilisation (MFU).

FLOPs per token = 6*N (2 forward + 4 backward per parameter; Kaplan et al. 2020, "Scaling Laws for Neural Language
Models", section 2.1) + 12*L*h*s for the attention-score and attention-over-values matmuls, which the parameter
count misses (Chowdhery et al. 2022, "PaLM", Appendix B, the MFU definition; no causal-mask discount).

MFU: the fraction of the peak a real training run turns into model FLOPs. Default 0.40: Meta reports 38-43% BF16
MFU for Llama 3 405B on 8k-16k H100s (Llama 3 Herd paper, Table 4), PaLM 46% on TPU v4, Megatron-LM 40-52% on
A100s (Narayanan et al. 2021); 0.40 is the round figure a well-tuned large run reaches. The published runs in
checks/models.yaml land within 0.5x-2x of this (tests/unit/test_sizing_published.py).
"""

from __future__ import annotations

from typing import Optional

from nvdeploy.sizing.models import ModelShape

SECONDS_PER_HOUR = 3600.0
DEFAULT_MFU = 0.40


def flops_per_token(model: ModelShape, seq: int) -> float:
    attention = 12.0 * model.layers * model.hidden * seq if model.layers and model.hidden else 0.0
    return 6.0 * model.params + attention


def train_flops(model: ModelShape, tokens: float, seq: int) -> float:
    return flops_per_token(model, seq) * tokens


def gpu_hours(flops: float, peak_tflops: Optional[float], mfu: float) -> Optional[float]:
    """GPU-hours of pure compute; None when the SKU has no peak for the precision."""
    if peak_tflops is None:
        return None
    return flops / (peak_tflops * 1e12 * mfu) / SECONDS_PER_HOUR


def step_compute_s(model: ModelShape, seq: int, micro_batch: int, peak_tflops: float, mfu: float) -> float:
    """Seconds one GPU computes per optimizer step (one micro-batch of ``seq`` tokens, no accumulation)."""
    return flops_per_token(model, seq) * seq * micro_batch / (peak_tflops * 1e12 * mfu)
