"""``nvdeploy size`` end to end: the JSON contract, --run with measured figures, and bad input -> exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nvdeploy.cli.app import cli
from nvdeploy.results import Finding, NodeResult, RunResult, Verdict

PROFILE = "h100-sxm-8x@2026.11.1"
FIELDS = ["profile", "gpus", "fits", "min_gpus", "memory_gb_per_gpu", "train_flops", "gpu_hours", "days",
          "cost_usd", "energy_mwh", "allreduce_s_per_step", "notes"]


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, ["size", *args])


def size_json(*args: str) -> dict[str, Any]:
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_json_contract_one_estimate_per_profile_with_exact_field_names() -> None:
    data = size_json("--params", "70B", "--tokens", "2T")
    assert set(data) == {"inputs", "estimates"}
    names = [e["profile"] for e in data["estimates"]]
    assert names == ["a100-sxm-8x", "b200-8x", "b300-8x", "gb200-nvl72", "gb300-nvl72", "h100-pcie-8x",
                     "h100-sxm-8x", "h200-8x", "l40s-8x"]
    for estimate in data["estimates"]:
        assert list(estimate)[: len(FIELDS)] == FIELDS
        # no --gpus/--days: the fewest GPUs that fit, rounded up to whole nodes of the profile (8 GPUs each, an
        # NVL72 tray 4)
        per_node = 4 if estimate["profile"].endswith("-nvl72") else 8
        assert estimate["gpus"] == -(-estimate["min_gpus"] // per_node) * per_node
        assert estimate["nodes"] == estimate["gpus"] // per_node
        assert estimate["cost_usd"] is None                      # no --price
        assert isinstance(estimate["notes"], list)
    h100 = next(e for e in data["estimates"] if e["profile"] == "h100-sxm-8x")
    # hand-worked in test_sizing_memory / test_sizing_time_cost: 15 GPUs, 8.4e23 FLOPs, 589,582.9 GPU-hours
    assert h100["min_gpus"] == 15 and h100["gpus"] == 16 and h100["nodes"] == 2 and h100["fits"] is True
    assert h100["train_flops"] == pytest.approx(8.4e23)
    assert h100["gpu_hours"] == pytest.approx(589_582.9, rel=1e-5)
    assert h100["energy_mwh"] == pytest.approx(589_582.9 * 700 / 1e6, rel=1e-3)
    assert data["inputs"]["params"] == 70e9 and data["inputs"]["tokens"] == 2e12 and data["inputs"]["mfu"] == 0.4


def test_price_gpus_and_profile_selection() -> None:
    data = size_json("--model", "llama-2-70b", "--tokens", "2T", "--activation-checkpointing", "--profile",
                     "h100-sxm-8x", "--profile", "b200-8x", "--gpus", "1024", "--price", "h100-sxm-8x=2.5",
                     "--on-prem", "400000,4,0.10")
    assert [e["profile"] for e in data["estimates"]] == ["h100-sxm-8x", "b200-8x"]
    h100, b200 = data["estimates"]
    assert h100["gpus"] == 1024 and h100["fits"] is True
    assert h100["cost_usd"] == pytest.approx(h100["gpu_hours"] * 2.5, rel=1e-5)
    assert b200["cost_usd"] is None
    assert h100["breakeven_utilization"] == pytest.approx(0.5872, rel=1e-3)
    assert b200["days"] < h100["days"]               # 2250 vs 989.4 dense BF16 TFLOPS


def test_inference_table_output() -> None:
    result = invoke("--model", "llama-3-70b", "--inference", "--context", "8192", "--batch", "32",
                    "--profile", "h100-sxm-8x", "--profile", "h200-8x")
    assert result.exit_code == 0, result.output
    assert "inference at bf16, context 8192, batch 32" in result.output
    lines = {line.split()[0]: line.split() for line in result.output.splitlines() if line.startswith(("h100", "h200"))}
    assert lines["h100-sxm-8x"][1] == "3" and lines["h200-8x"][1] == "2"       # GPUs (test_sizing_memory)
    assert "KV cache 85.9 GB" in result.output


def _run_dir(tmp_path: Path) -> Path:
    def node(name: str, busbw: float, power: float) -> NodeResult:
        return NodeResult(name, (
            Finding("nccl.all_reduce", Verdict.PASS, "ok", name, observed=busbw, unit="GB/s", profile=PROFILE),
            Finding("nccl.multinode", Verdict.PASS, "ok", name, observed=300.0, unit="GB/s", profile=PROFILE),
            Finding("clocks.power_limit", Verdict.PASS, "ok", name, observed=power, unit="W", profile=PROFILE),
        ), profile=PROFILE)
    run = RunResult("20261201T000000Z-size", "rack", "validate",
                    (node("gpu001", 400.0, 650), node("gpu002", 410.0, 650), node("gpu003", 10.0, 650)),
                    profiles={"h100-sxm-8x": PROFILE})
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps(run.to_dict()))
    return folder


def test_run_replaces_datasheet_figures_with_measured_medians(tmp_path: Path) -> None:
    folder = _run_dir(tmp_path)
    data = size_json("--params", "70B", "--tokens", "2T", "--gpus", "64", "--run", str(folder))
    assert data["inputs"]["run"] == {"run_id": "20261201T000000Z-size", "dir": str(folder)}
    assert [e["profile"] for e in data["estimates"]] == ["h100-sxm-8x"]    # the run's profile by default
    estimate = data["estimates"][0]
    # multi-node busbw 300 measured (profile: 370): zero3 210e9 bytes x 2 x 63/64 / 300e9 = 1.3781 s
    assert estimate["allreduce_s_per_step"] == pytest.approx(1.3781, rel=1e-3)
    # power 650 W measured (datasheet 700): 589,582.9 GPU-hours x 650 W = 383.2 MWh
    assert estimate["energy_mwh"] == pytest.approx(589_582.9 * 650 / 1e6, rel=1e-3)
    notes = " ".join(estimate["notes"])
    assert "20261201T000000Z-size" in notes and "median of 3 nodes" in notes
    # inside one node the median of 400, 410 and an outlier 10 is 400 GB/s: 140e9 x 1.5 x 2 x 7/8 / 400e9 = 0.91875
    one_node = size_json("--params", "70B", "--tokens", "2T", "--gpus", "8", "--sharding", "zero3", "--run",
                         str(folder))["estimates"][0]
    assert one_node["allreduce_s_per_step"] == pytest.approx(0.91875, rel=1e-4)
    text = invoke("--params", "70B", "--tokens", "2T", "--run", str(folder))
    assert text.exit_code == 0 and "measured figures from run 20261201T000000Z-size" in text.output


@pytest.mark.parametrize(("args", "message"), [
    (["--model", "llama-9-1t", "--tokens", "2T"], "unknown model 'llama-9-1t'"),
    (["--params", "70B", "--tokens", "2T", "--profile", "v100-8x"], "unknown profile 'v100-8x'"),
    (["--params", "70B", "--tokens", "-2T"], "--tokens: '-2T' is negative"),
    (["--params", "70Q", "--tokens", "2T"], "--params: '70Q' is not a number"),
    (["--params", "70B", "--tokens", "2T", "--gpus", "8", "--days", "30"], "not both"),
    (["--params", "70B", "--tokens", "2T", "--gpus", "-8"], "--gpus"),
    (["--params", "70B", "--tokens", "2T", "--gpus", "1.5"], "whole number"),
    (["--params", "70B", "--tokens", "2T", "--mfu", "1.5"], "--mfu"),
    (["--params", "70B", "--tokens", "2T", "--price", "h100-sxm-8x=cheap"], "--price"),
    (["--params", "70B", "--tokens", "2T", "--price", "tpu=1"], "unknown profile 'tpu'"),
    (["--params", "70B", "--tokens", "2T", "--on-prem", "1,2"], "--on-prem"),
    (["--params", "70B"], "--tokens"),
    (["--tokens", "2T"], "--model NAME or --params"),
    (["--params", "70B", "--inference", "--tokens", "2T"], "for training"),
    (["--params", "70B", "--tokens", "2T", "--run", "/nonexistent/run"], "--run"),
])
def test_bad_input_is_one_message_and_exit_2(args: list[str], message: str) -> None:
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)   # no Python error escaped
