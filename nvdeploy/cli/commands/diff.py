"""``nvdeploy diff RUN_A RUN_B``: what changed between two runs, as text on the terminal.

Exit 0 when nothing got worse, 1 when something did (a new FAIL/ERROR, a node that now fails, a measurement
worse than the tolerance), 3 when nothing got worse but checks of the baseline were not run again (a quick run
against a standard baseline: not known to be unchanged), 2 on bad input: usable as a gate after a maintenance
window.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import click

from nvdeploy.cli.commands.state import state_dir, state_dir_option
from nvdeploy.report.compare import compare_runs, render_diff_text
from nvdeploy.runner.folders import RunLoadError, load_run
from nvdeploy.runner.history_db import DB_NAME, HistoryError, list_runs


def resolve_run(value: str, db: Optional[Path], state: Optional[Path] = None) -> Path:
    """A run folder, or a run id looked up in the history database (``db``, else the state folder's)."""
    path = Path(value)
    if path.exists():
        return path
    candidates = [db] if db is not None else [state_dir(state).path / DB_NAME]
    for candidate in candidates:
        if candidate is None or not candidate.is_file():
            continue
        try:
            runs = list_runs(candidate)
        except HistoryError:
            continue
        for run in runs:
            if run["run_id"] == value:
                return Path(run["run_dir"])
    raise click.BadParameter(f"{value}: no such run folder (nor a run id in the history {candidates[0]})",
                             param_hint="RUN")


@click.command("diff")
@click.argument("run_a")
@click.argument("run_b")
@click.option("--tolerance", "tolerance_pct", type=click.FloatRange(min=0), default=5.0, show_default=True,
              help="Percent a measured value may get worse (bandwidth lower, latency higher) before it is reported.")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help=f"History database to resolve run ids in (default: the state folder's {DB_NAME}).")
@state_dir_option("state")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
def diff_command(run_a: str, run_b: str, tolerance_pct: float, db: Optional[Path], as_json: bool,
                 state: Optional[Path] = None) -> None:
    """Compare RUN_B against the baseline RUN_A (run folders, or run ids from the history).

    Shows new failures, fixed nodes, nodes added or gone, version drift (driver, CUDA, DCGM, NCCL, firmware)
    and measurements that regressed beyond --tolerance, and the checks of RUN_A that RUN_B did not run. Exit 0
    nothing got worse, 1 something did, 3 nothing got worse but checks were not re-checked, 2 bad input.
    """
    try:
        base = load_run(resolve_run(run_a, db, state))
        new = load_run(resolve_run(run_b, db, state))
    except RunLoadError as exc:
        click.echo(f"nvdeploy: error: {exc}", err=True)
        raise click.exceptions.Exit(2) from None
    result = compare_runs(base, new, tolerance_pct)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, default=str))
    else:
        click.echo(render_diff_text(result), nl=False)
    raise click.exceptions.Exit(1 if result.worse else 3 if result.not_rechecked else 0)


def register(cli: click.Group) -> None:
    cli.add_command(diff_command)
