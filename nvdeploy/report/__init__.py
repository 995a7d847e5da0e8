"""Report writers: one name -> writer map, all rendered from the same RunResult.

Every writer is ``render(run, diff=None, run_dir=None) -> bytes``. When a run is compared with a baseline the
comparison is kept beside the reports as ``baseline.json``, so ``nvdeploy report RUN_DIR`` re-renders it too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Optional

from nvdeploy.diff import RunDiff
from nvdeploy.record import write_atomic
from nvdeploy.report.html import render_html
from nvdeploy.report.junit import render_junit
from nvdeploy.results import RunResult

BASELINE_FILE = "baseline.json"

Renderer = Callable[..., bytes]


def render_json(run: RunResult, **_: Any) -> bytes:
    return (json.dumps(run.to_dict(), indent=2, default=str) + "\n").encode("utf-8")


def _junit(run: RunResult, **_: Any) -> bytes:
    return render_junit(run)


def _html(run: RunResult, diff: Optional[RunDiff] = None, run_dir: Optional[Path] = None, **_: Any) -> bytes:
    return render_html(run, diff=diff, run_dir=run_dir)


WRITERS: dict[str, tuple[str, Renderer]] = {
    "json": ("results.json", render_json),
    "junit": ("junit.xml", _junit),
    "html": ("report.html", _html),
}


def load_saved_diff(run_dir: Path) -> Optional[RunDiff]:
    """The baseline comparison saved with a run, or None (none saved, or unreadable: then the report has none)."""
    path = run_dir / BASELINE_FILE
    if not path.is_file():
        return None
    try:
        return RunDiff.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_reports(run: RunResult, run_dir: Path, diff: Optional[RunDiff] = None) -> dict[str, Path]:
    """Write every report into ``run_dir``; each file appears complete or not at all.

    Args:
        run: the run.
        run_dir: its folder (evidence excerpts are read from it).
        diff: the comparison with a baseline; saved as ``baseline.json``. When None, a ``baseline.json`` already
            in the folder is used, so re-rendering keeps the comparison.
    """
    paths = {}
    if diff is not None:
        path = run_dir / BASELINE_FILE
        write_atomic(path, (json.dumps(diff.to_dict(), indent=2, default=str) + "\n").encode("utf-8"))
        paths["baseline"] = path
    else:
        diff = load_saved_diff(run_dir)
    for name, (filename, render) in WRITERS.items():
        path = run_dir / filename
        write_atomic(path, render(run, diff=diff, run_dir=run_dir))
        paths[name] = path
    return paths
