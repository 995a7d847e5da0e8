"""The burn-in chart of the HTML report: a simulated burn-in with throttle_after draws one SVG per burned-in node,
a line per GPU (SM clock and temperature), the throttled GPU drawn as bad and named; the page is rendered again
from the run folder alone (results.json), and the series stays within its point budget."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.levels import load_levels
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.parsers.burnin import Sample, SamplerRun
from nvdeploy.parsers.facts import BURNIN_POINTS, burnin_series
from nvdeploy.phases.validate import run_validate
from nvdeploy.report.html import render_html
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.runner.folders import load_run

CATALOG = ProfileCatalog()
BURN = (*load_levels()["quick"], "burnin.stability", "burnin.load")


class Lines(HTMLParser):
    """The burn-in figures of a page: node -> [(class, data-gpu)] of its polylines."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: dict[str, list[tuple[str, str]]] = {}
        self.current = ""

    def handle_starttag(self, tag, attrs):
        attr = dict(attrs)
        if tag == "figure" and "burnin" in (attr.get("class") or "").split():
            self.current = attr.get("data-node") or ""
            self.figures[self.current] = []
        elif tag == "polyline" and self.current:
            self.figures[self.current].append((attr.get("class") or "", attr.get("data-gpu") or ""))


def burn(tmp_path: Path):
    lines = ["all:", "  vars:", "    cluster: burn", "    connection: sim", "    profile: h100-sxm-8x",
             '    driver_version: "550.90.07"', "  hosts:", "    good: {}",
             '    hot: {sim_faults: ["throttle_after:2:6"]}']
    path = tmp_path / "cluster.yaml"
    path.write_text("\n".join(lines) + "\n")
    opts = EngineOptions(checks=BURN, burn_in_s=300.0, burn_in_interval_s=2.0)
    return run_validate(load_inventory(path, CATALOG), CATALOG, opts, tmp_path / "reports", level="quick")


def figures(html: str) -> dict[str, list[tuple[str, str]]]:
    parser = Lines()
    parser.feed(html)
    return parser.figures


def test_burn_in_chart_one_series_per_gpu_and_the_throttled_gpu_named(tmp_path):
    outcome = burn(tmp_path)
    facts = {n.name: n.facts for n in outcome.run.nodes}
    series = facts["hot"]["burnin_series"]
    assert sorted(series, key=int) == [str(g) for g in range(8)]
    # The throttled GPU's clock falls in the series (lowest clock of the last rows under its first ones).
    hot6 = [row[1] for row in series["6"]]
    assert min(hot6[-10:]) < min(hot6[:10])
    for html in ((outcome.run_dir / "report.html").read_text(), render_html(load_run(outcome.run_dir)).decode()):
        found = figures(html)
        assert set(found) == {"good", "hot"}
        for node, lines in found.items():
            clocks = [(cls, gpu) for cls, gpu in lines if cls.startswith("bseries")]
            temps = [(cls, gpu) for cls, gpu in lines if cls.startswith("btemp")]
            assert sorted(gpu for _, gpu in clocks) == sorted(str(g) for g in range(8))
            assert len(temps) == 8
            bad = {gpu for cls, gpu in clocks if "bad" in cls.split()}
            assert bad == ({"6"} if node == "hot" else set())
        assert re.search(r'id="burnin-\d+" data-node="hot">.*?Not stable:</b> <span class="mono">GPU6 FAIL</span>',
                         html, re.S)
        assert "<script src" not in html and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_series_downsampled_keeps_the_dip_and_escapes_nothing_unsafe():
    samples = [Sample(float(t), 0, temperature_c=50.0 + t / 1000, sm_clock_mhz=1980.0) for t in range(3600)]
    samples[1234] = Sample(1234.0, 0, temperature_c=90.0, sm_clock_mhz=900.0)  # a one-sample dip
    samples += [Sample(float(t), 1, sm_clock_mhz=None) for t in range(10)]
    series = burnin_series(SamplerRun(samples=tuple(samples)))
    assert len(series["0"]) <= BURNIN_POINTS
    assert min(row[1] for row in series["0"]) == 900.0 and max(row[2] for row in series["0"]) == 90.0
    assert {row[1] for row in series["1"]} == {None}
    assert json.loads(json.dumps(series)) == series
    assert burnin_series(None) == {}


def test_every_line_stays_inside_its_panel():
    from nvdeploy.report.burnin_chart import node_chart
    from nvdeploy.results import NodeResult

    # Temperatures 55-90 C: a tick range that nice_ticks alone would end at 80.
    rows = [[float(t), 1980.0 - (t > 120) * (t - 120) * 1.9, 55.0 + (t > 120) * 35.0] for t in range(0, 301, 2)]
    chart = node_chart(NodeResult("hot", (), facts={"burnin_series": {"0": rows, "1": [[0.0, 1980.0, 56.0]]}}))
    assert chart is not None and len(chart.lines) == 2
    for line in chart.lines:
        for points, panel in ((line.clock, chart.clock), (line.temp, chart.temp)):
            ys = [float(p.split(",")[1]) for p in points.split()]
            assert all(panel.top - 0.01 <= y <= panel.bottom + 0.01 for y in ys), (panel, min(ys), max(ys))
