"""``nvdeploy history``: the runs recorded beside the reports, and a node's or a check's record over time.

``nvdeploy history`` lists runs; ``--node gpu007`` shows that node run by run; ``--check memory.ecc_errors``
shows which nodes failed that check in each run; ``--node gpu007 --figure nccl_busbw`` shows a measured figure's
trend on that node; ``--since 2025-12-01`` limits to recent runs.
``nvdeploy history rebuild`` recreates the database from the run folders (the folders are the source of truth).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import click

from nvdeploy.cli.commands.state import state_dir, state_dir_option, where
from nvdeploy.config.hostrange import fold
from nvdeploy.runner.history_db import (
    DB_NAME,
    HistoryError,
    check_record,
    default_db_path,
    figure_ids,
    figure_record,
    list_runs,
    node_record,
    rebuild_history,
)
from nvdeploy.runner.statedir import ENV_VAR


def _fail(message: str) -> click.exceptions.Exit:
    click.echo(f"nvdeploy: error: {message}", err=True)
    return click.exceptions.Exit(2)


def _short(text: str, width: int = 140) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "\u2026"


def _when(value: str) -> str:
    return value.replace("T", " ")[:16] if value else "?"


def _print_runs(rows: list[dict[str, Any]]) -> None:
    if not rows:
        click.echo("no runs recorded")
        return
    # The phase and the user: install, optimize and run are recorded too, so who changed a node is in the list.
    click.echo(f"{'started (UTC)':16}  {'run id':26}  {'cluster':12}  {'phase':8}  {'level':8}  {'verdict':10}  "
               f"{'nodes':>5}  {'FAIL':>4}  {'ERROR':>5}  {'WARN':>4}  {'user':10}  folder")
    for r in rows:
        click.echo(f"{_when(r['started_at']):16}  {r['run_id']:26}  {r['cluster'][:12]:12}  {r['phase'][:8]:8}  "
                   f"{r['level']:8}  {r['verdict']:10}  {r['nodes']:>5}  {r['fail']:>4}  {r['error']:>5}  "
                   f"{r['warn']:>4}  {(r['user'] or '?')[:10]:10}  {r['run_dir']}")


def _print_node(node: str, check: Optional[str], rows: list[dict[str, Any]]) -> None:
    if not rows:
        click.echo(f"{node}: not in any recorded run" + (f" (check {check})" if check else ""))
        return
    click.echo(f"{node} in {len(rows)} run{'s' if len(rows) != 1 else ''}"
               + (f", check {check}" if check else ", findings that did not pass") + ":")
    previous: Optional[dict[str, str]] = None
    for r in rows:
        versions = json.loads(r["versions"] or "{}")
        stack = ", ".join(f"{k} {v}" for k, v in sorted(versions.items()) if k in ("driver", "cuda"))
        click.echo(f"{_when(r['started_at']):16}  {r['run_id']:26}  {r['verdict']:5}  {stack}")
        # A firmware flash or a stack upgrade between two windows is often what a new finding follows from.
        for line in version_changes(previous, versions):
            click.echo(f"    changed {_short(line)}")
        previous = versions
        for f in r["findings"]:
            gpu = f" GPU{f['gpu']}" if f["gpu"] is not None else ""
            observed = f" (observed {f['observed']}{' ' + f['unit'] if f['unit'] else ''})" \
                if check and f["observed"] is not None else ""
            click.echo(f"    {f['verdict']:5} {f['check_id']}{gpu}: {_short(f['summary'])}{observed}")


def version_changes(before: Optional[dict[str, str]], after: dict[str, str]) -> list[str]:
    """'component: old -> new' for every version that differs from the node's previous run (none for its first)."""
    if before is None:
        return []
    return [f"{key}: {before.get(key, 'absent')} -> {after.get(key, 'absent')}"
            for key in sorted(set(before) | set(after)) if before.get(key) != after.get(key)]


def _print_figure(node: str, figure: str, rows: list[dict[str, Any]]) -> None:
    if not rows:
        click.echo(f"{node}: not in any recorded run")
        return
    about = figure_ids()[figure]
    measured = [r for r in rows if r["values"]]
    click.echo(f"{node} {figure} ({about.what}) in {len(measured)} of {len(rows)} run{'s' if len(rows) != 1 else ''}"
               + (" (per GPU: the slowest GPU, then every GPU)" if about.per_gpu else "")
               + (" (per path: the slowest path, then every path)" if getattr(about, "per_path", False) else "")
               + ":")
    first: Optional[float] = None
    for r in rows:
        head = f"{_when(r['started_at']):16}  {r['run_id']:26}  {r['level']:8}"
        if not r["values"]:
            click.echo(f"{head}  not measured (or recorded before the history kept figures: "
                       "nvdeploy history rebuild)")
            continue
        values = r["values"]
        key, value = min(values.items(), key=lambda kv: (kv[1], str(kv[0])))
        first = value if first is None else first
        change = f"  {(value - first) / first * 100:+.1f}% vs first" if first and r is not measured[0] else ""
        where = "" if key is None else f" (GPU{key})" if about.per_gpu else f" ({key})"
        gpus = ("  GPUs " + " ".join(f"{v:g}" for _, v in sorted(values.items()))) if about.per_gpu else \
            ("  paths " + " ".join(f"{k} {v:g}" for k, v in sorted(values.items()))) if len(values) > 1 else ""
        click.echo(f"{head}  {value:g} {r['unit']}{where}{change}{gpus}")


def _print_check(check: str, rows: list[dict[str, Any]]) -> None:
    if not rows:
        click.echo(f"{check}: no recorded run has this check")
        return
    click.echo(f"{check} in {len(rows)} run{'s' if len(rows) != 1 else ''}:")
    for r in rows:
        parts = []
        for verdict in ("FAIL", "ERROR", "WARN", "PASS", "SKIP"):
            names = r.get("nodes", {}).get(verdict, [])
            if not names:
                continue
            parts.append(f"{verdict} {len(names)}" if verdict in ("PASS", "SKIP") else f"{verdict} {fold(names)}")
        click.echo(f"{_when(r['started_at']):16}  {r['run_id']:26}  {r['cluster'][:12]:12}  {'; '.join(parts)}")


@click.group("history", invoke_without_command=True)
@click.option("--node", default=None, help="Show this node's record over time.")
@click.option("--check", "check_id", default=None, help="Show this check over time (with --node: on that node).")
@click.option("--figure", default=None,
              help="With --node: this measured figure over time (nccl_busbw, dcgm_gflops: fleet.performance's).")
@click.option("--cluster", default=None, help="Only runs of this cluster.")
@click.option("--since", default=None, help="Only runs started on or after this date (YYYY-MM-DD).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the last N runs (run list).")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help=f"The history database (default: the state folder's {DB_NAME}).")
@state_dir_option("state")
@click.pass_context
def history_group(ctx: click.Context, node: Optional[str], check_id: Optional[str], figure: Optional[str],
                  cluster: Optional[str], since: Optional[str], limit: Optional[int], db: Optional[Path],
                  state: Optional[Path]) -> None:
    """Runs recorded in the history, or a node's / a check's / a figure's record over time."""
    if ctx.invoked_subcommand is not None:
        return
    if figure is not None:
        if not node or check_id:
            raise _fail("--figure shows one node's figure: give it with --node NODE (and without --check)")
        if figure not in figure_ids():
            raise _fail(f"unknown figure {figure!r}: one of {', '.join(figure_ids())}")
    chosen = None if db else state_dir(state)
    path = db or default_db_path(chosen.path if chosen else Path())
    try:
        if node and figure:
            _print_figure(node, figure, figure_record(path, node, figure, cluster, since))
        elif node:
            _print_node(node, check_id, node_record(path, node, check_id, cluster, since))
        elif check_id:
            _print_check(check_id, check_record(path, check_id, cluster, since))
        else:
            _print_runs(list_runs(path, cluster, since, limit))
    except HistoryError as exc:
        # Which rule chose the folder: a history "missing" from another folder is usually another state folder.
        hint = f"; {where(chosen)}: pass --state-dir DIR or set ${ENV_VAR} to read another" if chosen else ""
        raise _fail(f"{exc}{hint}") from None


@history_group.command("rebuild")
@state_dir_option()
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help=f"The database to rebuild (default: DIR/{DB_NAME}).")
@click.option("--prune", is_flag=True, help="Also drop runs whose folder no longer exists.")
@click.pass_context
def history_rebuild(ctx: click.Context, out_base: Optional[Path], db: Optional[Path], prune: bool) -> None:
    """Recreate the history database from the run folders under the state folder (deleting the database loses
    no run)."""
    # ``nvdeploy history --state-dir DIR rebuild`` names the folder as well as ``history rebuild --state-dir DIR``.
    parent = ctx.parent.params.get("state") if ctx.parent is not None else None
    chosen = state_dir(out_base or parent)
    out_base = chosen.path
    if not out_base.is_dir():
        raise _fail(f"{where(chosen)} does not exist: no run folder to record")
    path = db or default_db_path(out_base)
    try:
        outcome = rebuild_history(path, out_base, prune=prune)
    except (HistoryError, OSError) as exc:
        raise _fail(str(exc)) from None
    if outcome.moved_aside:
        click.echo(f"unreadable database moved aside to {outcome.moved_aside}")
    for problem in outcome.skipped:
        click.echo(f"skipped: {problem}", err=True)
    click.echo(f"{path}: {len(outcome.recorded)} run(s) recorded from {out_base}"
               + (f"; {len(outcome.kept_without_folder)} kept whose folder is gone" if outcome.kept_without_folder
                  else "") + (f"; {len(outcome.pruned)} pruned" if outcome.pruned else ""))


def register(cli: click.Group) -> None:
    cli.add_command(history_group)
