"""The report's firmware table: component x version x hosts, from the nodes' firmware facts, the majority first and
a component with more than one version marked."""

from __future__ import annotations

import re

from nvdeploy.report.html import render_html
from nvdeploy.report.view import firmware_rows
from nvdeploy.results import Finding, NodeResult, RunResult, Verdict


def _node(name: str, vbios: str) -> NodeResult:
    firmware = {"gpu.vbios": {"GPU 0": vbios, "GPU 1": vbios}, "system.bios_version": {"": "2.1"}}
    return NodeResult(name, (Finding("gpu.count", Verdict.PASS, "8 GPUs", node=name),), facts={"firmware": firmware})


def _run() -> RunResult:
    return RunResult("r1", "lab", "validate", tuple(_node(f"gpu{i:02d}", "96.00.74.00.1C" if i != 3 else
                                                          "96.00.61.00.01") for i in range(1, 5)))


def test_firmware_rows_fold_hosts_per_version_majority_first():
    rows = firmware_rows(_run())
    assert [(r["component"], r["version"], r["hosts"], r["count"], r["mixed"]) for r in rows] == [
        ("gpu.vbios", "96.00.74.00.1C", "gpu[01-02,04]", 3, True),
        ("gpu.vbios", "96.00.61.00.01", "gpu03", 1, True),
        ("system.bios_version", "2.1", "gpu[01-04]", 4, False)]


def test_the_report_shows_the_firmware_table_and_nothing_without_firmware_facts():
    html = render_html(_run()).decode()
    table = html[html.index('id="firmware-table"'):]
    table = re.sub(r"<[^>]+>", " ", table[:table.index("</table>")])
    assert "gpu.vbios 96.00.61.00.01 gpu03 1" in " ".join(table.split())
    bare = RunResult("r2", "lab", "validate", (NodeResult("gpu01", (Finding("gpu.count", Verdict.PASS, "ok"),)),))
    assert 'id="firmware-table"' not in render_html(bare).decode()
