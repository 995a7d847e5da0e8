"""The HTML report of a large fleet: nodes that need no action fold into host ranges; every node stays findable."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

from nvdeploy.report.html import FOLD_NODES_OVER, render_html
from nvdeploy.results import Finding, NodeResult, Remediation, RunResult, Verdict


class Rows(HTMLParser):
    """Ids of the rows of #nodes-table and the JSON data block."""

    def __init__(self) -> None:
        super().__init__()
        self.table = False
        self.rows: list[str] = []
        self.in_data = False
        self.data = ""

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.table = attrs.get("id") == "nodes-table"
        elif tag == "tr" and self.table and attrs.get("id"):
            self.rows.append(attrs["id"])
        elif tag == "script" and attrs.get("id") == "nvd-data":
            self.in_data = True

    def handle_endtag(self, tag):
        if tag == "table":
            self.table = False
        elif tag == "script":
            self.in_data = False

    def handle_data(self, data):
        if self.in_data:
            self.data += data


def fleet(count: int, failing_every: int = 100, old_driver: tuple[int, ...] = ()) -> RunResult:
    nodes = []
    for i in range(1, count + 1):
        name = f"gpu{i:05d}"
        findings = [Finding("gpu.count", Verdict.PASS, "8 GPUs", node=name)]
        if i % failing_every == 0:
            findings.append(Finding("memory.ecc_errors", Verdict.FAIL, "2 uncorrectable ECC errors", node=name,
                                    remediation=Remediation.RESET_GPU))
        driver = "535.161.08" if i in old_driver else "550.90.07"
        nodes.append(NodeResult(name, tuple(findings), profile="h100-sxm-8x@1", duration_s=0.5 + i % 7 / 10,
                                facts={"driver_version": driver, "gpu_count": 8, "gpu_model": "H100"}))
    return RunResult("big", "fleet", "validate", tuple(nodes))


def test_large_fleet_folds_passing_nodes_into_host_range_rows():
    run = fleet(3000, old_driver=(7, 8))
    parsed = Rows()
    parsed.feed(render_html(run).decode())
    failing = [r for r in parsed.rows if r.startswith("a")]
    folded = [r for r in parsed.rows if r.startswith("g")]
    assert len(failing) == 30  # every node that needs action keeps its own row
    assert folded == ["g0", "g1"]  # the passing nodes: one row per identical driver/CUDA/GPUs/profile
    data = json.loads(parsed.data)
    assert sorted(i for group in data["groups"] for i in group) == [
        i for i in range(3000) if (i + 1) % 100]  # the search still sees every passing node
    assert data["groups"][1] == [6, 7]
    assert len(data["nodes"]) == 3000


def test_folded_row_names_its_host_range_and_time_span():
    html = render_html(fleet(FOLD_NODES_OVER + 1, failing_every=10_000)).decode()
    assert re.search(r'<tr id="g0" class="ok folded"><td class="mono">gpu\[00001-01001\]', html)
    assert "1001 nodes" in html and "0.50&ndash;1.10" in html


def test_small_fleet_keeps_one_row_per_node():
    parsed = Rows()
    parsed.feed(render_html(fleet(FOLD_NODES_OVER)).decode())
    assert len(parsed.rows) == FOLD_NODES_OVER and not any(r.startswith("g") for r in parsed.rows)
    assert json.loads(parsed.data)["groups"] == []
