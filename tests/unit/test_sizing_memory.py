"""Memory arithmetic of nvdeploy size, pinned on hand-worked cases (each hand calculation in the comment)."""

from __future__ import annotations

import pytest

from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.sizing import memory
from nvdeploy.sizing.models import ModelShape, load_models
from nvdeploy.sizing.sku import sku_figures
from nvdeploy.sizing.solve import Job, estimate, min_gpus, usable_bytes
from nvdeploy.sizing.units import SizingError

CATALOG = ProfileCatalog()
MODELS = load_models()
P70 = ModelShape(name="", params=70e9)


def test_mixed_precision_adam_is_16_bytes_per_parameter_unsharded() -> None:
    # 70e9 x (2 weights + 2 gradients + 12 fp32 master/momentum/variance) = 140e9 + 140e9 + 840e9 = 1,120e9 bytes
    assert memory.model_states(70e9, "adam", "none", 8) == (140e9, 140e9, 840e9)
    assert memory.model_states(70e9, "adamw", "none", 1) == (140e9, 140e9, 840e9)
    # SGD with momentum: fp32 master + momentum = 8 bytes: 2 + 2 + 8 = 12 bytes/param
    assert sum(memory.model_states(1e9, "sgd", "none", 1)) == 12e9


def test_zero_stages_divide_the_right_terms_by_the_data_parallel_degree() -> None:
    # ZeRO-1, dp 8: optimizer 840e9 / 8 = 105e9; weights and gradients whole
    assert memory.model_states(70e9, "adam", "zero1", 8) == (140e9, 140e9, 105e9)
    # ZeRO-2, dp 8: gradients 140e9 / 8 = 17.5e9 as well
    assert memory.model_states(70e9, "adam", "zero2", 8) == (140e9, 17.5e9, 105e9)
    # ZeRO-3 and FSDP, dp 8: everything / 8: 1,120e9 / 8 = 140e9 in total
    for sharding in ("zero3", "fsdp"):
        assert memory.model_states(70e9, "adam", sharding, 8) == (17.5e9, 17.5e9, 105e9)


def test_activations_llama2_7b_with_and_without_checkpointing() -> None:
    # Llama-2 7B: L 32, h 4096, a 32; s 4096, b 1 (Korthikanti et al. eq. 1)
    # eager attention, one layer: 34*4096*1*4096 = 570,425,344 + 5*32*4096^2*1 = 2,684,354,560 -> 3,254,779,904
    # no checkpointing: x 32 layers = 104,152,956,928 bytes
    # full checkpointing: 2*4096*1*4096*32 = 1,073,741,824 + one layer recomputed 3,254,779,904 = 4,328,521,728
    model = MODELS["llama-2-7b"]
    assert memory.layer_activations(4096, 1, 4096, 32, "eager") == 3_254_779_904
    assert memory.activations(model, 4096, 1, checkpointing=False, attention="eager") == 104_152_956_928
    assert memory.activations(model, 4096, 1, checkpointing=True, attention="eager") == 4_328_521_728
    # memory-efficient attention (the default) never stores the scores: 570,425,344 per layer, x 32 = 18,253,611,008;
    # checkpointing: 1,073,741,824 + 570,425,344 = 1,644,167,168
    assert memory.layer_activations(4096, 1, 4096, 32) == 570_425_344
    assert memory.activations(model, 4096, 1, checkpointing=False) == 18_253_611_008
    assert memory.activations(model, 4096, 1, checkpointing=True) == 1_644_167_168
    assert memory.activations(P70, 4096, 1, checkpointing=False) is None  # no shape: not guessed


def test_kv_cache_llama3_70b_context_8192_batch_32() -> None:
    # 2 (K,V) x 80 layers x 8 KV heads x 128 head_dim x 8192 context x 32 batch x 2 bytes = 85,899,345,920 bytes
    model = MODELS["llama-3-70b"]
    assert model.head_dim == 128
    assert memory.kv_cache_bytes(model, 8192, 32, "bf16") == 85_899_345_920
    assert memory.kv_cache_bytes(model, 8192, 32, "fp8") == 85_899_345_920 / 2


@pytest.mark.parametrize(("profile", "expected"), [("h100-sxm-8x", 3), ("h200-8x", 2), ("b200-8x", 2)])
def test_inference_min_gpus_llama3_70b(profile: str, expected: int) -> None:
    # weights 70.55e9 x 2 = 141.1e9 + KV 85.9e9 = 227.0e9 bytes, split over the GPUs (tensor parallel).
    # usable = memory_mib x 2^20 x 0.9: H100 81559 MiB -> 76.97e9: 227.0/76.97 = 2.95 -> 3 GPUs;
    # H200 143771 MiB -> 135.7e9 -> 2 (113.5e9 each); B200 183359 MiB -> 173.0e9: 227 > 173 -> 2.
    sku = sku_figures(CATALOG.get(profile))
    job = Job(model=MODELS["llama-3-70b"], inference=True, context=8192, batch=32)
    assert min_gpus(job, sku) == expected
    result = estimate(job, sku)
    assert result.gpus == expected and result.fits is True
    assert result.memory_gb_per_gpu == pytest.approx((141.1e9 + 85_899_345_920) / expected / 1e9)
    assert result.train_flops is None and result.gpu_hours is None


def test_training_min_gpus_params_only_zero3() -> None:
    # 70e9 x 16 bytes = 1,120e9 bytes / g <= 76.97e9 usable (H100: 81559 MiB x 2^20 x 0.9) -> g >= 14.55 -> 15
    sku = sku_figures(CATALOG.get("h100-sxm-8x"))
    assert usable_bytes(sku) == pytest.approx(81559 * 2**20 * 0.9)
    job = Job(model=P70, tokens=2e12, sharding="zero3")
    assert min_gpus(job, sku) == 15
    assert estimate(job, sku).gpus == 16        # whole nodes: 2 of 8 GPUs


def test_unsharded_70b_never_fits_and_says_why() -> None:
    # sharding none: 1,120e9 bytes stay on every GPU whatever the count: no count fits
    sku = sku_figures(CATALOG.get("b200-8x"))
    result = estimate(Job(model=P70, tokens=2e12, sharding="none"), sku)
    assert result.min_gpus is None and result.gpus is None and result.fits is False and result.days is None
    assert result.gpu_hours is not None  # compute does not depend on memory
    assert any("does not fit at any GPU count" in note for note in result.notes)


def test_given_gpu_count_that_is_too_small_does_not_fit() -> None:
    sku = sku_figures(CATALOG.get("h100-sxm-8x"))
    result = estimate(Job(model=P70, tokens=2e12, sharding="zero3", gpus=8), sku)
    # 1,120e9 / 8 = 140 GB per GPU > 76.97 usable
    assert result.fits is False and result.min_gpus == 15
    assert result.memory_gb_per_gpu == pytest.approx(140.0)


def test_unknown_optimizer_is_a_sizing_error() -> None:
    with pytest.raises(SizingError, match="--optimizer"):
        memory.model_states(1e9, "lion", "none", 1)
