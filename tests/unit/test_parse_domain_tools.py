"""``nvdeploy parse`` on the NVLink domain tools' outputs, each a format of its own: ``dcgmi mndiag --json`` (read
as a ``dcgmi diag`` piece before, its host_id dropped, so GPU 1 of two trays merged), ``nvloom_cli`` and
``nvidia-imex-ctl``. The mndiag and nvloom samples are built only from the tools' own print statements (marked
FROM-SOURCE, tests/fixtures/real/PROVENANCE.tsv); the imex ones are public captures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nvdeploy.cli.app import cli
from nvdeploy.parsers.detect import detect_format

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
MNDIAG = REAL / "dcgmi-mndiag" / "mndiag-json-2hosts-host1-gpu1-fail-4.6.0-FROM-SOURCE.json"
NVLOOM = REAL / "nvloom" / "bisect-and-gpu-to-rack-16ranks-4trays-tray01-gpu0-slow-FROM-SOURCE.txt"
IMEX = REAL / "imex"


def parse(*args: str) -> dict:
    result = CliRunner().invoke(cli, ["parse", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.parametrize("path, fmt", [
    (MNDIAG, "dcgmi-mndiag"), (NVLOOM, "nvloom"),
    (IMEX / "imex-ctl-N-j-degraded-partial-580.30.json", "nvidia-imex-ctl"),
    (IMEX / "imex-ctl-N-text-18-trays-up-570.172.txt", "nvidia-imex-ctl"),
])
def test_auto_detects_each_domain_tool_as_its_own_format(path, fmt):
    assert detect_format(path.read_text()) == fmt


def test_a_pasted_piece_of_mndiag_results_is_mndiag_not_dcgmi_diag():
    piece = '{"host_id" : 1, "entity_group" : "GPU", "entity_id" : 1, "status" : "Fail"}'
    assert detect_format(piece) == "dcgmi-mndiag"
    assert detect_format('{"entity_group" : "GPU", "entity_id" : 1, "status" : "Fail"}') == "dcgmi-diag"


def test_mndiag_keeps_each_hosts_gpu_apart_and_names_the_failed_one():
    out = parse("auto", str(MNDIAG), "--verdicts", "--profile", "gb200-nvl72")
    assert out["input_format"] == "dcgmi-mndiag" and out["hosts"] == [[0, "tray01"], [1, "tray02"]]
    results = out["tests"][0]["results"]
    assert [(r["hostname"], r["entity_id"], r["status"]) for r in results if r["entity_id"] == 1] == [
        ("tray01", 1, "Pass"), ("tray02", 1, "Fail")]
    failed = [(f["node"], f["gpu"]) for f in out["verdicts"]["findings"] if f["verdict"] == "FAIL"]
    assert ("tray02", 1) in failed and ("tray01", 1) not in failed and out["verdicts"]["verdict"] == "FAIL"


def test_nvloom_names_the_slow_gpu_never_its_bisect_partner():
    out = parse("auto", str(NVLOOM), "--verdicts", "--profile", "gb200-nvl72")
    assert out["input_format"] == "nvloom" and len(out["processes"]) == 16
    assert [c["row"] for c in out["testcases"][0]["cells"]][:2] == ["0->8", "1->9"]
    findings = out["verdicts"]["findings"]
    failed = [(f["node"], f["gpu"]) for f in findings if f["verdict"] == "FAIL" and f["gpu"] is not None]
    assert failed == [("tray01", 0)]  # tray03 GPU 0 (its partner, row 8->0) is cleared by gpu_to_rack
    assert not any(f["node"] == "tray03" and f["verdict"] != "PASS" for f in findings)


def test_nvloom_bisect_alone_names_no_tray_of_a_weak_pair(tmp_path):
    text = NVLOOM.read_text()
    bisect_only = tmp_path / "bisect.txt"
    bisect_only.write_text(text[:text.index("Running gpu_to_rack")])
    findings = parse("nvloom", str(bisect_only), "--verdicts", "--profile", "gb200-nvl72")["verdicts"]["findings"]
    assert not any(f["verdict"] == "FAIL" and f["gpu"] is not None for f in findings)
    assert sorted((f["node"], f["gpu"]) for f in findings if f["verdict"] == "ERROR") == [("tray01", 0),
                                                                                          ("tray03", 0)]


def test_imex_ctl_views_and_the_query_are_judged_as_imex_judges_them():
    text = parse("auto", str(IMEX / "imex-ctl-N-text-18-trays-up-570.172.txt"), "--verdicts", "--profile",
                 "gb200-nvl72")
    assert text["form"] == "-N" and text["view"]["status"] == "UP" and len(text["view"]["nodes"]) == 18
    assert [f["verdict"] for f in text["verdicts"]["findings"]] == ["PASS"]
    degraded = parse("nvidia-imex-ctl", str(IMEX / "imex-ctl-N-j-degraded-partial-580.30.json"), "--verdicts",
                     "--profile", "gb200-nvl72")
    assert degraded["form"] == "-N -j" and degraded["verdicts"]["verdict"] == "FAIL"
    ready = parse("nvidia-imex-ctl", str(IMEX / "imex-ctl-q-ready.txt"), "--verdicts", "--profile", "gb200-nvl72")
    assert ready["state"] == "READY" and [f["verdict"] for f in ready["verdicts"]["findings"]] == ["SKIP"]
