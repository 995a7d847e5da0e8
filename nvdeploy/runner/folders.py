"""Run folders on disk: find them under a reports folder and read a :class:`RunResult` back from one.

A run folder is ``<out>/<cluster>/<run-id>/`` holding ``results.json`` (final) and ``results.jsonl`` (streamed).
After a crash only the journal exists; :func:`load_run` rebuilds the run from it, marking every node that never
reported as ERROR ``interrupted``, exactly as ``nvdeploy report`` does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator, Union

from nvdeploy.results import RunResult

RESULTS_JSON = "results.json"
RESULTS_JSONL = "results.jsonl"


class RunLoadError(ValueError):
    """A folder holds no readable run. The message names the folder and what is wrong."""


def is_run_dir(path: Path) -> bool:
    return (path / RESULTS_JSON).is_file() or (path / RESULTS_JSONL).is_file()


def load_run(run_dir: Union[str, Path]) -> RunResult:
    """The run recorded in ``run_dir``: from ``results.json``, or rebuilt from ``results.jsonl`` after a crash.

    Raises:
        RunLoadError: neither file exists, or the one found cannot be read as a run.
    """
    folder = Path(run_dir)
    final = folder / RESULTS_JSON
    journal = folder / RESULTS_JSONL
    if final.is_file():
        try:
            return RunResult.from_dict(json.loads(final.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            if not journal.is_file():
                raise RunLoadError(f"{final}: not a readable nvdeploy run ({exc})") from None
    if journal.is_file():
        return _from_journal(journal)
    raise RunLoadError(f"{folder}: no {RESULTS_JSON} or {RESULTS_JSONL} (not an nvdeploy run folder)")


def _from_journal(journal: Path) -> RunResult:
    from nvdeploy.config.inventory import Host
    from nvdeploy.phases.validate import finish_run
    from nvdeploy.results import ErrorReason
    from nvdeploy.runner.engine import error_node
    from nvdeploy.runner.record import read_journal

    try:
        header, nodes, _warnings = read_journal(journal)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RunLoadError(f"{journal}: unreadable journal ({exc})") from None
    if header is None:
        raise RunLoadError(f"{journal}: no run header (not an nvdeploy journal)")
    hosts = [str(h) for h in header.get("hosts", [])]
    done = {n.name for n in nodes}
    missing = [h for h in hosts if h not in done]
    nodes += [error_node(Host(name, {}), "system.reachable", "no result recorded: the run ended before this node "
                         "finished", ErrorReason.INTERRUPTED) for name in missing]
    return finish_run(header, nodes, hosts, bool(missing), 0.0, bool(header.get("fail_on_warn")))


def find_run_dirs(out_base: Union[str, Path]) -> Iterator[Path]:
    """Run folders under a reports folder: ``<out>/<cluster>/<run-id>/`` (and ``out`` itself if it is one).

    Only those two levels are looked at, never the evidence trees below them: cheap on big fleets.
    """
    base = Path(out_base)
    if is_run_dir(base):
        yield base
        return
    if not base.is_dir():
        return
    for cluster_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        if is_run_dir(cluster_dir):
            yield cluster_dir
            continue
        for run_dir in sorted(p for p in cluster_dir.iterdir() if p.is_dir()):
            if is_run_dir(run_dir):
                yield run_dir
