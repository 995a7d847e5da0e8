"""Report writers: one name -> writer map, all rendered from the same RunResult."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from nvdeploy.record import write_atomic
from nvdeploy.report.html import render_html
from nvdeploy.report.junit import render_junit
from nvdeploy.results import RunResult


def render_json(run: RunResult) -> bytes:
    return (json.dumps(run.to_dict(), indent=2, default=str) + "\n").encode("utf-8")


WRITERS: dict[str, tuple[str, Callable[[RunResult], bytes]]] = {
    "json": ("results.json", render_json),
    "junit": ("junit.xml", render_junit),
    "html": ("report.html", render_html),
}


def write_reports(run: RunResult, run_dir: Path) -> dict[str, Path]:
    """Write every report into ``run_dir``; each file appears complete or not at all."""
    paths = {}
    for name, (filename, render) in WRITERS.items():
        path = run_dir / filename
        write_atomic(path, render(run))
        paths[name] = path
    return paths
