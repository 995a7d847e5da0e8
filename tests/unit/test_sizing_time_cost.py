"""FLOPs, time, all-reduce, cost, energy and on-prem arithmetic of nvdeploy size, on hand-worked cases."""

from __future__ import annotations

import pytest

from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.sizing import comms, compute, cost
from nvdeploy.sizing.models import ModelShape, load_models
from nvdeploy.sizing.sku import sku_figures
from nvdeploy.sizing.solve import Job, estimate
from nvdeploy.sizing.units import SizingError, parse_quantity

CATALOG = ProfileCatalog()
MODELS = load_models()
P70 = ModelShape(name="", params=70e9)
H100 = sku_figures(CATALOG.get("h100-sxm-8x"))


@pytest.mark.parametrize(("text", "value"), [("70B", 70e9), ("2T", 2e12), ("8k", 8e3), ("8192", 8192.0),
                                             ("1.5e9", 1.5e9), ("405b", 405e9), ("15.6T", 15.6e12)])
def test_quantities(text: str, value: float) -> None:
    assert parse_quantity(text, "--x") == pytest.approx(value)


@pytest.mark.parametrize("text", ["-2T", "2X", "", "T", "0", "1e999"])
def test_bad_quantities(text: str) -> None:
    with pytest.raises(SizingError, match="--x"):
        parse_quantity(text, "--x")


def test_training_flops_6pt_plus_attention() -> None:
    # params only: 6 x 70e9 x 2e12 = 8.4e23
    assert compute.train_flops(P70, 2e12, 4096) == pytest.approx(8.4e23)
    # Llama-2 70B shape: 6 x 68.98e9 x 2e12 = 8.2776e23, + 12 x 80 x 8192 x 4096 x 2e12 = 6.4425e22 -> 8.9218e23
    assert compute.train_flops(MODELS["llama-2-70b"], 2e12, 4096) == pytest.approx(8.2776e23 + 6.44245e22, rel=1e-5)
    # GPT-3: 6 x 175e9 x 300e9 = 3.15e23 (the paper's Table D.1: 3.14e23)
    assert 6 * MODELS["gpt-3-175b"].params * 300e9 == pytest.approx(3.15e23)


def test_gpu_hours_at_dense_peak_times_mfu() -> None:
    # 8.4e23 / (989.4e12 dense BF16 x 0.40 x 3600 s) = 589,582.9 H100 GPU-hours
    assert H100.peak_tflops("bf16") == 989.4
    assert compute.gpu_hours(8.4e23, 989.4, 0.40) == pytest.approx(589_582.9, rel=1e-6)
    assert compute.gpu_hours(8.4e23, None, 0.40) is None
    # FP8 on H100: dense 1978.9 -> half the hours
    assert compute.gpu_hours(8.4e23, H100.peak_tflops("fp8"), 0.40) == pytest.approx(589_582.9 * 989.4 / 1978.9)


def test_allreduce_time_from_busbw() -> None:
    # nccl-tests busbw already holds the ring factor: t = bytes x 2(n-1)/n / busbw
    # 140e9 bytes over 16 GPUs at 370 GB/s: 140 x 2 x 15/16 / 370 = 262.5 / 370 = 0.70946 s
    assert comms.allreduce_s(140e9, 16, 370) == pytest.approx(0.709459, rel=1e-5)
    # inside one node, 8 GPUs at 476 GB/s: 140 x 2 x 7/8 / 476 = 245 / 476 = 0.51471 s
    assert comms.allreduce_s(140e9, 8, 476) == pytest.approx(0.514706, rel=1e-5)
    assert comms.allreduce_s(140e9, 1, 476) == 0.0
    assert comms.busbw_for(8, 8, 476, 370) == (476, "inside one node (NVLink/NVSwitch or PCIe)")
    assert comms.busbw_for(9, 8, 476, 370)[0] == 370
    # exposed communication: 3 s compute, 4 s all-reduce -> 75% efficient; hidden -> 100%
    assert comms.scaling_efficiency(3.0, 4.0) == 0.75
    assert comms.scaling_efficiency(3.0, 1.0) == 1.0


def test_days_solve_for_gpus() -> None:
    # 70B params, 2T tokens on H100: 589,582.9 GPU-hours / (30 days x 24 h) = 818.9 -> 819 GPUs -> 103 whole
    # nodes of 8 = 824 GPUs. all-reduce at 824 GPUs (zero3: 1.5 x 140e9 = 210e9 bytes) across nodes at 370 GB/s:
    # 210e9 x 2 x 823/824 / 370e9 = 1.1338 s < compute per step 6 x 70e9 x 4096 / (989.4e12 x 0.4) = 4.3469 s
    result = estimate(Job(model=P70, tokens=2e12, days=30.0), H100)
    assert result.gpus == 824 and result.extra["nodes"] == 103
    assert result.allreduce_s_per_step == pytest.approx(1.1338, rel=1e-3)
    assert result.days == pytest.approx(589_582.9 / 824 / 24, rel=1e-6)
    assert result.days <= 30


def test_gpus_solve_for_days_and_exposed_allreduce_lengthens_the_job() -> None:
    # 64 GPUs: 589,582.9 / 64 / 24 = 383.84 days when the all-reduce hides
    hidden = estimate(Job(model=P70, tokens=2e12, gpus=64), H100)
    assert hidden.days == pytest.approx(589_582.9 / 64 / 24, rel=1e-6)
    assert hidden.extra["scaling_efficiency"] == 1.0
    # a 1 GB/s fabric: all-reduce 210e9 x 2 x 63/64 / 1e9 = 413.4 s vs 4.3469 s compute -> efficiency 1.05%
    from dataclasses import replace

    slow = estimate(Job(model=P70, tokens=2e12, gpus=64), replace(H100, multinode_busbw_gbps=1.0))
    assert slow.allreduce_s_per_step == pytest.approx(413.44, rel=1e-3)
    assert slow.extra["scaling_efficiency"] == pytest.approx(4.3469 / 413.44, rel=1e-3)
    assert slow.gpu_hours == pytest.approx(589_582.9 / (4.3469 / 413.44), rel=1e-3)


def test_cost_and_energy() -> None:
    # 1,000 GPU-hours x 2.50 USD = 2,500 USD; 1,000 GPU-hours x 700 W = 700 kWh = 0.7 MWh
    assert cost.cost_usd(1000.0, 2.5) == 2500.0
    assert cost.energy_mwh(1000.0, 700.0) == pytest.approx(0.7)
    assert cost.cost_usd(1000.0, None) is None and cost.energy_mwh(None, 700.0) is None
    result = estimate(Job(model=P70, tokens=2e12, gpus=64, price=2.5), H100)
    assert result.cost_usd == pytest.approx(589_582.9 * 2.5, rel=1e-6)
    assert result.energy_mwh == pytest.approx(589_582.9 * 700 / 1e6, rel=1e-6)   # 412.7 MWh


def test_on_prem_break_even() -> None:
    # 400,000 USD per 8-GPU node over 4 years: 400000 / (4 x 8760 x 8) = 1.42694 USD per GPU-hour of capital,
    # + 0.7 kW x 0.10 USD = 0.07 -> 1.49694 at 100% use; break-even vs 2.50 cloud: 1.42694 / (2.50 - 0.07) = 0.5872
    onprem = cost.OnPrem.parse("400000,4,0.10")
    assert onprem.usd_per_gpu_hour(8, 700) == pytest.approx(1.49694, rel=1e-5)
    assert onprem.breakeven_utilisation(8, 700, 2.5) == pytest.approx(0.58722, rel=1e-4)
    assert onprem.breakeven_utilisation(8, 700, 0.05) is None   # cloud cheaper than the electricity alone
    for bad in ("1,2", "a,b,c", "-1,4,0.1", "1,0,0.1"):
        with pytest.raises(SizingError, match="--on-prem"):
            cost.OnPrem.parse(bad)


def test_a100_has_no_fp8_time() -> None:
    a100 = sku_figures(CATALOG.get("a100-sxm-8x"))
    result = estimate(Job(model=P70, tokens=2e12, precision="fp8"), a100)
    assert result.gpu_hours is None and result.days is None and result.cost_usd is None
    assert any("no dense fp8" in note for note in result.notes)


def test_inference_decode_rate_is_hbm_bound() -> None:
    # Llama-3 70B at fp8 on one H200: weights 70.55e9 x 1 byte + KV 2x80x8x128x8192x32 x 1 byte = 42.95e9
    # -> 113.50e9 bytes read per decode step at 4.8e12 B/s = 0.023646 s -> 32 / 0.023646 = 1,353.3 tokens/s;
    # at 3.50 USD per GPU-hour: 3.5 / 3600 / 1353.3 x 1e6 = 0.7184 USD per million tokens
    h200 = sku_figures(CATALOG.get("h200-8x"))
    job = Job(model=MODELS["llama-3-70b"], inference=True, precision="fp8", context=8192, batch=32, price=3.5)
    result = estimate(job, h200)
    assert result.gpus == 1
    assert result.extra["decode_tokens_per_s"] == pytest.approx(1353.3, rel=1e-3)
    assert result.extra["usd_per_million_tokens"] == pytest.approx(0.7184, rel=1e-3)
