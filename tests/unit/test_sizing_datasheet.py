"""Profiles' datasheet section (schema, optional for user profiles), the model table's loader, and the
report's measured-vs-datasheet table."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvdeploy.config.profiles import ProfileCatalog, load_profile_file
from nvdeploy.config.yamlfile import ConfigError
from nvdeploy.report.html import render_html
from nvdeploy.results import Finding, NodeResult, RunResult, Verdict
from nvdeploy.sizing.measured import comparison_rows, measured_figures
from nvdeploy.sizing.models import ModelShape, load_models
from nvdeploy.sizing.sku import sku_figures
from nvdeploy.sizing.solve import Job, estimate

CATALOG = ProfileCatalog()
USER_PROFILE = """name: my-gpu
version: "1"
gpu: {count: 4, model: "My GPU", memory_mib: 40960, pci_device_id: "1234", power_limit_w: 300}
"""


def test_every_builtin_profile_has_sourced_dense_figures() -> None:
    for name in CATALOG.names():
        sku = sku_figures(CATALOG.get(name))
        assert sku.sources, name
        assert sku.peak_tflops("bf16") and sku.power_w, name
        # dense figures: FP8 is twice BF16 where the SKU has it (a sparse figure would break this)
        fp8 = sku.peak_tflops("fp8")
        assert fp8 is None or fp8 == pytest.approx(2 * sku.peak_tflops("bf16"), rel=0.02), name
    assert sku_figures(CATALOG.get("b200-8x")).peak_tflops("fp4") == 9000
    assert sku_figures(CATALOG.get("h100-sxm-8x")).peak_tflops("fp4") is None


def test_user_profile_without_datasheet_is_valid_and_gives_no_time(tmp_path: Path) -> None:
    path = tmp_path / "my-gpu.yaml"
    path.write_text(USER_PROFILE)
    sku = sku_figures(load_profile_file(path))
    assert sku.tflops == {} and sku.power_w == 300 and sku.gpus_per_node == 4
    result = estimate(Job(model=ModelShape(name="", params=7e9), tokens=1e12), sku)
    # 7e9 x 16 = 112e9 bytes / (40960 MiB x 2^20 x 0.9 = 38.65e9) = 2.9 -> 3 GPUs; no peak -> no hours
    assert result.min_gpus == 3 and result.gpu_hours is None and result.energy_mwh is None


@pytest.mark.parametrize(("section", "key"), [
    ("datasheet: {bf16_tflops: 100, sources: [x], flux: 1}", "datasheet.flux"),
    ("datasheet: {bf16_tflops: -1, sources: [x]}", "datasheet.bf16_tflops"),
    ("datasheet: {bf16_tflops: 100}", "datasheet.sources"),
])
def test_bad_datasheet_names_the_key(tmp_path: Path, section: str, key: str) -> None:
    path = tmp_path / "my-gpu.yaml"
    path.write_text(USER_PROFILE + section + "\n")
    with pytest.raises(ConfigError) as info:
        load_profile_file(path)
    assert key in info.value.render() and "my-gpu.yaml" in info.value.render()


def test_bad_model_table_names_file_line_key(tmp_path: Path) -> None:
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  m:\n    params: 7e9\n")       # YAML 1.1: 7e9 without a sign is a string
    with pytest.raises(ConfigError) as info:
        load_models(path)
    assert "models.m.params" in info.value.render() and ":3" in info.value.render()


def _run(findings: bool) -> RunResult:
    profile = "h100-sxm-8x@2026.11.1"
    extra = (Finding("nccl.all_reduce", Verdict.FAIL, "low", "n1", observed=440.0, profile=profile),
             Finding("clocks.power_limit", Verdict.PASS, "ok", "n1", observed=600, profile=profile)) if findings else ()
    node = NodeResult("n1", (Finding("gpu.count", Verdict.PASS, "8 GPUs", "n1", profile=profile), *extra),
                      profile=profile)
    return RunResult("r1", "rack", "validate", (node,), profiles={"h100-sxm-8x": profile})


def test_measured_figures_and_report_table() -> None:
    run = _run(findings=True)
    figures = measured_figures(run)["h100-sxm-8x"]
    assert figures["busbw_gbps"].value == 440.0 and figures["power_w"].value == 600.0
    rows = comparison_rows(run, {"h100-sxm-8x": sku_figures(CATALOG.get("h100-sxm-8x"))})
    busbw = next(r for r in rows if r["unit"] == "GB/s")
    assert busbw["reference"] == 476.0 and busbw["pct"] == pytest.approx(92.4)    # 440 / 476
    html = render_html(run).decode()
    assert 'id="sizing"' in html and "440.0 GB/s" in html and "476.0 GB/s" in html and "600.0 W" in html


def test_report_without_measured_figures_has_no_sizing_section() -> None:
    html = render_html(_run(findings=False)).decode()
    assert 'id="sizing"' not in html and "Nodes x checks" in html
    unknown = RunResult("r2", "rack", "validate", (NodeResult("n1", (Finding(
        "nccl.all_reduce", Verdict.PASS, "ok", "n1", observed=100.0, profile="gone@1"),), profile="gone@1"),))
    assert "100.0 GB/s" in render_html(unknown).decode()   # a profile not in the catalog: no reference, no crash
