"""The run history: one SQLite file beside the reports (``<out>/history.sqlite``), no server.

Every run is recorded in it (:func:`record_run`), so an operator can ask how a node or a check fared over the
last quarters (``nvdeploy history --node gpu007``, ``--check memory.ecc_errors``, a measured figure's trend
with ``--node gpu007 --figure nccl_busbw``). The database is an index, never
the only copy: the run folders are the source of truth, and :func:`rebuild_history` recreates the database from
them, so deleting or losing it never loses a run.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Union

from nvdeploy.results import Finding, RunResult, Verdict, version_facts
from nvdeploy.runner.folders import RunLoadError, find_run_dirs, load_run

DB_NAME = "history.sqlite"
# 2: the ``figures`` table (each node's fleet figures per run). A database of version 1 gets the table on its next
# open (CREATE TABLE IF NOT EXISTS) and stays readable by both; its older runs have no figure rows until
# ``nvdeploy history rebuild`` re-records them from their folders.
SCHEMA_VERSION = 2
_BATCH_ROWS = 5000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, cluster TEXT NOT NULL, phase TEXT NOT NULL, level TEXT NOT NULL,
    verdict TEXT NOT NULL, summary TEXT NOT NULL, started_at TEXT NOT NULL, finished_at TEXT NOT NULL,
    duration_s REAL NOT NULL, nodes INTEGER NOT NULL, fail INTEGER NOT NULL, error INTEGER NOT NULL,
    warn INTEGER NOT NULL, pass INTEGER NOT NULL, skip INTEGER NOT NULL, interrupted INTEGER NOT NULL,
    profiles TEXT NOT NULL, nvdeploy_version TEXT NOT NULL, user TEXT NOT NULL, run_dir TEXT NOT NULL,
    recorded_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS nodes (
    run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE, node TEXT NOT NULL, verdict TEXT NOT NULL,
    profile TEXT NOT NULL, driver_version TEXT, cuda_version TEXT, versions TEXT NOT NULL,
    PRIMARY KEY (run_id, node));
CREATE TABLE IF NOT EXISTS findings (
    run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE, node TEXT NOT NULL, check_id TEXT NOT NULL,
    verdict TEXT NOT NULL, gpu INTEGER, summary TEXT NOT NULL, observed TEXT, expected TEXT, unit TEXT NOT NULL,
    remediation TEXT NOT NULL, reason TEXT, evidence TEXT);
CREATE INDEX IF NOT EXISTS findings_node ON findings (node, check_id);
CREATE INDEX IF NOT EXISTS findings_check ON findings (check_id, verdict);
CREATE INDEX IF NOT EXISTS runs_started ON runs (started_at);
CREATE TABLE IF NOT EXISTS figures (
    run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE, node TEXT NOT NULL, profile TEXT NOT NULL,
    figure TEXT NOT NULL, gpu INTEGER, path TEXT, value REAL NOT NULL, unit TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS figures_node ON figures (node, figure);
"""


class HistoryError(Exception):
    """The history database cannot be opened, read or written; the message names the file."""


def default_db_path(out_base: Union[str, Path]) -> Path:
    """Where the history of runs written under ``out_base`` lives: ``<out_base>/history.sqlite``."""
    return Path(out_base) / DB_NAME


@contextlib.contextmanager
def _connect(db_path: Path, create: bool = True) -> Iterator[sqlite3.Connection]:
    if not create and not db_path.is_file():
        raise HistoryError(f"{db_path}: no history database (run 'nvdeploy history rebuild' to create it "
                           "from the run folders)")
    try:
        if create:
            db_path.parent.mkdir(parents=True, exist_ok=True)
            if not db_path.exists():
                os.close(os.open(db_path, os.O_WRONLY | os.O_CREAT, 0o600))
        conn = sqlite3.connect(str(db_path), timeout=30.0)
    except (OSError, sqlite3.Error) as exc:
        raise HistoryError(f"{db_path}: cannot open the history database: {exc}") from None
    try:
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys = ON")
        conn.executescript(_SCHEMA)
        # Never lowered: an older nvdeploy writing its own number would say the figures table is not there.
        # (Read, then written: SQLite's upsert is newer than some distributions' SQLite.)
        kept = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if kept is None or not str(kept[0]).isdigit() or int(kept[0]) < SCHEMA_VERSION:
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
                         (str(SCHEMA_VERSION),))
        yield conn
        conn.commit()
    except sqlite3.DatabaseError as exc:
        conn.rollback()
        raise HistoryError(f"{db_path}: history database error: {exc}") from None
    finally:
        conn.close()


def _text(value: Any) -> Optional[str]:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _insert(conn: sqlite3.Connection, run: RunResult, run_dir: str) -> None:
    counts = run.counts()
    conn.execute("DELETE FROM runs WHERE run_id = ?", (run.run_id,))
    conn.execute(
        "INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (run.run_id, run.cluster, run.phase, run.level, run.verdict.value, run.summary(), run.started_at,
         run.finished_at, float(run.duration_s), len(run.nodes), counts["FAIL"], counts["ERROR"], counts["WARN"],
         counts["PASS"], counts["SKIP"], int(run.interrupted), json.dumps(dict(run.profiles), sort_keys=True),
         run.nvdeploy_version, run.user, run_dir, _now()))
    # One pass over the nodes (a spooled run reads each back from disk once), rows handed to sqlite as they are
    # made in batches: a 10,000-node run's ~300,000 finding rows are never one list in memory.
    finding_rows: list[tuple[Any, ...]] = []
    node_insert = "INSERT INTO nodes VALUES (?,?,?,?,?,?,?)"
    finding_insert = "INSERT INTO findings VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
    figure_rows: list[tuple[Any, ...]] = []
    for node in run.nodes:
        conn.execute(node_insert, (run.run_id, node.name, node.verdict.value, node.profile,
                                   _text(node.facts.get("driver_version")), _text(node.facts.get("cuda_version")),
                                   json.dumps(version_facts(node), sort_keys=True)))
        finding_rows.extend(_finding_rows(run.run_id, node.name, node.findings))
        figure_rows.extend(_figure_rows(run.run_id, node))
        if len(finding_rows) >= _BATCH_ROWS:
            conn.executemany(finding_insert, finding_rows)
            finding_rows.clear()
        if len(figure_rows) >= _BATCH_ROWS:
            conn.executemany("INSERT INTO figures VALUES (?,?,?,?,?,?,?,?)", figure_rows)
            figure_rows.clear()
    finding_rows.extend(_finding_rows(run.run_id, "", run.cluster_findings))
    conn.executemany(finding_insert, finding_rows)
    conn.executemany("INSERT INTO figures VALUES (?,?,?,?,?,?,?,?)", figure_rows)


def figure_ids() -> dict[str, Any]:
    """The figures the history keeps per node: fleet.performance's (checks/fleet.py FIGURES), by id."""
    from nvdeploy.checks.fleet import FIGURES

    return {f.id: f for f in FIGURES}


def _figure_rows(run_id: str, node: Any) -> Iterator[tuple[Any, ...]]:
    # The node's measured figures read from its facts exactly as fleet.performance reads them (per GPU where the
    # figure is per GPU), so the trend and the fleet rule see the same numbers.
    from nvdeploy.checks.fleet import samples_of
    from nvdeploy.checks.fleet_drift import measured_figures

    for figure in measured_figures([node]):
        for profile, samples in samples_of(figure, [node]).items():
            for sample in samples:
                yield (run_id, node.name, profile, figure.id, sample.gpu, getattr(figure, "key", None), sample.value,
                       figure.unit)


def _finding_rows(run_id: str, node_name: str, findings: Iterable[Finding]) -> Iterator[tuple[Any, ...]]:
    for f in findings:
        # The summary with a waiver's note in front, as results.json keeps it: the history says what was waived.
        yield (run_id, node_name, f.check, f.verdict.value, f.gpu, f.display_summary, _text(f.observed),
               _text(f.expected), f.unit, f.remediation.value, f.reason.value if f.reason else None, f.evidence)


def record_run(db_path: Union[str, Path], run: RunResult, run_dir: Union[str, Path]) -> None:
    """Record (or re-record) one run in the history database, creating the database when it does not exist.

    Idempotent: recording the same run id again replaces its rows. Call it after the run folder is complete.

    Raises:
        HistoryError: the database cannot be opened or written.
    """
    with _connect(Path(db_path)) as conn:
        _insert(conn, run, str(Path(run_dir).resolve()))


@dataclass(frozen=True)
class RebuildOutcome:
    recorded: tuple[str, ...]
    skipped: tuple[str, ...]
    kept_without_folder: tuple[str, ...]
    pruned: tuple[str, ...]
    moved_aside: Optional[str] = None


def rebuild_history(db_path: Union[str, Path], out_base: Union[str, Path], prune: bool = False) -> RebuildOutcome:
    """Re-record every run folder under ``out_base`` (``<out>/<cluster>/<run-id>/``) into ``db_path``.

    Runs already in the database whose folder is gone are kept (``prune=True`` drops them). A database that
    SQLite cannot read is moved aside (``history.sqlite.corrupt-<time>``) and a new one is built.
    """
    path = Path(db_path)
    moved: Optional[str] = None
    if path.is_file():
        try:
            with _connect(path) as conn:
                conn.execute("SELECT count(*) FROM runs").fetchone()
        except HistoryError:
            aside = path.with_name(f"{path.name}.corrupt-{dt.datetime.now().strftime('%Y%m%dT%H%M%S')}")
            os.replace(path, aside)
            moved = str(aside)
    recorded, skipped = [], []
    with _connect(path) as conn:
        for run_dir in find_run_dirs(out_base):
            try:
                run = load_run(run_dir)
            except RunLoadError as exc:
                skipped.append(str(exc))
                continue
            _insert(conn, run, str(run_dir.resolve()))
            recorded.append(run.run_id)
        kept, pruned = [], []
        for row in conn.execute("SELECT run_id, run_dir FROM runs ORDER BY started_at, rowid").fetchall():
            if row["run_id"] in recorded:
                continue
            if Path(row["run_dir"]).is_dir():
                continue
            if prune:
                conn.execute("DELETE FROM runs WHERE run_id = ?", (row["run_id"],))
                pruned.append(row["run_id"])
            else:
                kept.append(row["run_id"])
    return RebuildOutcome(tuple(recorded), tuple(skipped), tuple(kept), tuple(pruned), moved)


def list_runs(db_path: Union[str, Path], cluster: Optional[str] = None, since: Optional[str] = None,
              limit: Optional[int] = None) -> list[dict[str, Any]]:
    """Runs, oldest first (the newest ``limit`` of them when given)."""
    where, args = _filters(cluster=cluster, since=since)
    # Two runs started in the same second: in the order they were recorded (the run id's suffix is random).
    query = f"SELECT * FROM runs {where} ORDER BY started_at DESC, rowid DESC"  # noqa: S608 - fixed column names
    if limit:
        query += f" LIMIT {int(limit)}"
    with _connect(Path(db_path), create=False) as conn:
        rows = [dict(r) for r in conn.execute(query, args).fetchall()]
    return rows[::-1]


def _filters(prefix: str = "", **values: Optional[str]) -> tuple[str, list[str]]:
    clauses, args = [], []
    for column, value in values.items():
        if value is None:
            continue
        if column == "since":
            clauses.append(f"{prefix}started_at >= ?")
        else:
            clauses.append(f"{prefix}{column} = ?")
        args.append(value)
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", args


def node_record(db_path: Union[str, Path], node: str, check: Optional[str] = None, cluster: Optional[str] = None,
                since: Optional[str] = None) -> list[dict[str, Any]]:
    """One node over time: per run its verdict, versions and its findings (all of ``check``, else the
    non-passing ones)."""
    where, args = _filters("r.", cluster=cluster, since=since)
    where = (where + " AND" if where else "WHERE") + " n.node = ?"
    with _connect(Path(db_path), create=False) as conn:
        runs = [dict(r) for r in conn.execute(
            "SELECT r.run_id, r.cluster, r.started_at, r.level, r.verdict AS run_verdict, r.run_dir, "  # noqa: S608
            f"n.verdict, n.driver_version, n.cuda_version, n.versions FROM runs r JOIN nodes n USING (run_id) {where} "
            # Two runs started in the same second (the time's resolution) in the order they were recorded: a run id
            # ends in a random suffix, so ordering by it would shuffle them.
            "ORDER BY r.started_at, r.rowid", [*args, node]).fetchall()]
        for row in runs:
            if check:
                query = "SELECT * FROM findings WHERE run_id = ? AND node = ? AND check_id = ? ORDER BY gpu"
                params: list[Any] = [row["run_id"], node, check]
            else:
                query = ("SELECT * FROM findings WHERE run_id = ? AND node = ? AND verdict NOT IN ('PASS', 'SKIP') "
                         "ORDER BY check_id, gpu")
                params = [row["run_id"], node]
            row["findings"] = [dict(f) for f in conn.execute(query, params).fetchall()]
    return runs


def check_record(db_path: Union[str, Path], check: str, cluster: Optional[str] = None,
                 since: Optional[str] = None) -> list[dict[str, Any]]:
    """One check over time: per run the nodes by verdict (worst verdict of the check on each node)."""
    where, args = _filters("r.", cluster=cluster, since=since)
    where = (where + " AND" if where else "WHERE") + " f.check_id = ?"
    severity = {v.value: v.severity for v in Verdict}
    out: dict[str, dict[str, Any]] = {}
    with _connect(Path(db_path), create=False) as conn:
        rows = conn.execute(
            "SELECT r.run_id, r.cluster, r.started_at, r.level, f.node, f.verdict FROM runs r "  # noqa: S608
            # Same-second runs in the order they were recorded, as in node_record.
            f"JOIN findings f USING (run_id) {where} ORDER BY r.started_at, r.rowid, f.rowid",
            [*args, check]).fetchall()
    worst: dict[tuple[str, str], str] = {}
    for row in rows:
        entry = out.setdefault(row["run_id"], {"run_id": row["run_id"], "cluster": row["cluster"],
                                               "started_at": row["started_at"], "level": row["level"]})
        key = (row["run_id"], row["node"])
        if key not in worst or severity.get(row["verdict"], 0) > severity.get(worst[key], 0):
            worst[key] = row["verdict"]
        entry.setdefault("nodes", {})
    for (run_id, node), verdict in worst.items():
        out[run_id]["nodes"].setdefault(verdict, []).append(node or "(cluster)")
    return list(out.values())


def figure_record(db_path: Union[str, Path], node: str, figure: str, cluster: Optional[str] = None,
                  since: Optional[str] = None) -> list[dict[str, Any]]:
    """One node's figure over time: per run the node is in, oldest first, its values ({GPU or None: value}, empty
    when the run did not measure it or was recorded before the history kept figures; a per-path figure by path)."""
    where, args = _filters("r.", cluster=cluster, since=since)
    where = (where + " AND" if where else "WHERE") + " n.node = ?"
    with _connect(Path(db_path), create=False) as conn:
        runs = [dict(r) for r in conn.execute(
            # Two runs started in the same second (the time's resolution) in the order they were recorded.
            "SELECT r.run_id, r.cluster, r.started_at, r.level, n.profile FROM runs r "  # noqa: S608
            f"JOIN nodes n USING (run_id) {where} ORDER BY r.started_at, r.rowid", [*args, node]).fetchall()]
        for row in runs:
            values = conn.execute("SELECT gpu, path, value, unit FROM figures WHERE run_id = ? AND node = ? AND "
                                  "figure = ? ORDER BY gpu, path", (row["run_id"], node, figure)).fetchall()
            row["values"] = {(v["path"] if v["path"] is not None else v["gpu"]): v["value"] for v in values}
            row["unit"] = values[0]["unit"] if values else ""
    return runs
