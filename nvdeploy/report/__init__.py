"""Report writers: one name -> writer map, all rendered from the same RunResult.

Every writer is ``write(run, handle, diff=None, run_dir=None)``: it streams its file into ``handle`` node by node,
so a 10,000-node run never holds a whole report (or results.json's dict of every node) in memory; the
``render_*`` functions return the same bytes for tests and tools. When a run is compared with a baseline the
comparison is kept beside the reports as ``baseline.json``, so ``nvdeploy report RUN_DIR`` re-renders it too.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import IO, Any, Callable, Optional

from nvdeploy.files import atomic_file, write_atomic
from nvdeploy.report.compare import RunDiff
from nvdeploy.report.html import write_html
from nvdeploy.report.junit import write_junit
from nvdeploy.results import RunResult

BASELINE_FILE = "baseline.json"
_NODES_KEY = '\n  "nodes": []'  # where json.dumps(indent=2) puts the empty top-level node list of the header

Writer = Callable[..., None]


def write_json(run: RunResult, out: IO[bytes], **_: Any) -> None:
    """results.json, byte for byte what ``json.dumps(run.to_dict(), indent=2)`` gives, one node at a time."""
    head = json.dumps(run.to_dict(nodes=False), indent=2, default=str)
    before, found, after = head.partition(_NODES_KEY)
    if not found or not run.nodes:
        out.write((head + "\n").encode("utf-8"))
        return
    out.write((before + '\n  "nodes": [').encode("utf-8"))
    for index, node in enumerate(run.nodes):
        # Nested two levels deep: every line of the node's own indent=2 text moves 4 spaces right (a JSON string
        # never holds a raw newline, so every newline is a line break of the layout).
        text = json.dumps(node.to_dict(), indent=2, default=str).replace("\n", "\n    ")
        out.write(((",\n    " if index else "\n    ") + text).encode("utf-8"))
    out.write(("\n  ]" + after + "\n").encode("utf-8"))


def render_json(run: RunResult, **_: Any) -> bytes:
    buffer = io.BytesIO()
    write_json(run, buffer)
    return buffer.getvalue()


def _junit(run: RunResult, out: IO[bytes], **_: Any) -> None:
    write_junit(run, out)


def _html(run: RunResult, out: IO[bytes], diff: Optional[RunDiff] = None, run_dir: Optional[Path] = None,
          **_: Any) -> None:
    write_html(run, out, diff=diff, run_dir=run_dir)


WRITERS: dict[str, tuple[str, Writer]] = {
    "json": ("results.json", write_json),
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
    for name, (filename, write) in WRITERS.items():
        path = run_dir / filename
        with atomic_file(path) as handle:
            write(run, handle, diff=diff, run_dir=run_dir)
        paths[name] = path
    return paths
