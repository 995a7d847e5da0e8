"""The report of a dry-run in a real browser: a plan, with no READY or NOT READY anywhere on the page."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from test_report_browser import ROOT, browser  # noqa: F401 - the module's Chromium fixture

from nvdeploy.cli.app import cli

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def plan_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("plan")
    result = CliRunner().invoke(cli, ["install", "--dry-run", "-i", str(ROOT / "inventories" / "demo.yaml"),
                                      "--out", str(out), "-q"])
    # gpu013's driver change needs a reboot the dry-run was not allowed: the plan says the run would stop there (3)
    assert result.exit_code == 3 and "gpu013" in result.output, result.output
    return next((out / "demo").iterdir()) / "report.html"


def test_a_dry_run_report_says_plan_and_never_ready(browser, plan_report):  # noqa: F811
    page = browser.open(plan_report)
    seen = page.eval("""(() => ({verdict: document.getElementById('verdict').innerText.trim(),
        why: document.getElementById('why').innerText, title: document.title, text: document.body.innerText,
        rows: document.querySelectorAll('table.phase-steps tr').length}))()""")
    assert seen["verdict"] == "PLAN"
    assert seen["why"].startswith("A plan, not a readiness verdict: nothing was changed on the 16 node(s)")
    assert "1 node(s) could not be planned" in seen["why"]
    for word in ("READY", "NOT READY", "NOT_READY", "INCOMPLETE"):
        assert word not in seen["text"] and word not in seen["title"], word
    # 16 nodes, folded: far fewer rows than one per node and step (81 steps would change)
    assert 1 < seen["rows"] < 40, seen["rows"]
