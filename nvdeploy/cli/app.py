"""The command line: a thin click group over library functions.

Exit codes of gate commands: 0 READY, 1 NOT_READY, 2 usage or config error, 3 INCOMPLETE, 130 interrupted
(143 on SIGTERM). Bad input is one clear message naming file, line and key; never a traceback.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

import click

from nvdeploy import __version__
from nvdeploy.cli.commands.slurm import slurm_options
from nvdeploy.cli.commands.state import state_dir, state_dir_option
from nvdeploy.cli.common import SUDO_PASSWORD_ENV, _fail, _install_sigterm, _load, _terminal_safe
from nvdeploy.config.yamlfile import ConfigError
from nvdeploy.files import OutputError
from nvdeploy.results import ExitCode
from nvdeploy.runner.engine import EngineOptions


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nvdeploy")
def cli() -> None:
    """nvdeploy: install, validate and tune NVIDIA GPU clusters; write readiness reports."""


def _inventory_of_run(run_dir: Path) -> str:
    from nvdeploy.runner.record import read_journal

    journal = run_dir / "results.jsonl"
    if not journal.is_file():
        raise _fail(f"{journal} not found: nothing to resume")
    header, _, _ = read_journal(journal)
    if header is None or not header.get("inventory"):
        raise _fail(f"{journal} does not name its inventory; pass -i")
    return str(header["inventory"])


def _after_run(outcome: Any, baseline: Optional[Path], prometheus_file: Optional[Path],
               history_base: Optional[Path]) -> str:
    """Baseline comparison, Prometheus file and run history: each after the run's own reports are safe on disk.

    A broken baseline or Prometheus path is exit 2 (asked for and not delivered); a history database that cannot
    be written only warns: the gate's verdict must not depend on bookkeeping.
    """
    diff_text = ""
    if baseline is not None:
        from nvdeploy.report import write_reports
        from nvdeploy.report.compare import compare_runs, render_diff_text
        from nvdeploy.runner.folders import RunLoadError, load_run

        try:
            diff = compare_runs(load_run(baseline), outcome.run)
            write_reports(outcome.run, outcome.run_dir, diff=diff)
        except (RunLoadError, OutputError) as exc:
            raise _fail(f"baseline {baseline}: {exc}") from None
        diff_text = render_diff_text(diff)
    if prometheus_file is not None:
        from nvdeploy.report.prometheus import write_prometheus

        try:
            write_prometheus(outcome.run, prometheus_file)
        except OutputError as exc:
            raise _fail(str(exc)) from None
    if history_base is not None:
        from nvdeploy.runner.history_db import HistoryError, default_db_path, record_run

        try:
            record_run(default_db_path(history_base), outcome.run, outcome.run_dir)
        except HistoryError as exc:
            click.echo(f"nvdeploy: warning: run not recorded in the history: {exc}", err=True)
    return diff_text


@cli.command()
@click.option("-i", "--inventory", default=None,
              help="Inventory YAML file (or a built-in name such as 'demo'). With --resume: the run's own.")
@click.option("--resume", "resume_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Finish an interrupted run: check only its nodes without a result, then write its full report.")
@click.option("--limit", default=None, help="Only these hosts: names, globs, ranges gpu[001-004], groups, !exclude.")
@click.option("--forks", default=64, show_default=True, type=click.IntRange(1, 1024), help="Nodes checked at once.")
@click.option("--deadline", type=click.FloatRange(min=1), default=None,
              help="Global deadline in seconds: no node starts after it; running commands stop at it.")
@state_dir_option()
@click.option("--fail-on-warn", is_flag=True, help="Treat WARN as NOT_READY.")
@click.option("--waivers", "waivers_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="YAML of accepted findings (check, nodes, gpus, until, owner, reason): shown WAIVED, not counted "
              "in the exit status until their date.")
@click.option("--level", type=click.Choice(["quick", "standard", "full"]), default="quick", show_default=True,
              help="How deep to check: quick (seconds per node), standard (+ DCGM r2, single-node NCCL), "
              "full (+ DCGM r3, multi-node NCCL, IB). playbooks/validate.yaml lists the checks of each.")
@click.option("--check", "check_ids", default=None, metavar="ID[,ID]",
              help="Only these checks (ids or globs such as 'dcgm.*', comma-separated; see 'nvdeploy checks list'), "
              "instead of the level's: e.g. --check dcgm.diag_r1 or --check dcgm.diag_r4.")
@click.option("--playbook", "playbook_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A validate playbook of your own (its levels: lists), instead of playbooks/validate.yaml.")
@click.option("--dry-run", "dry_run", is_flag=True, help="Print what would run where (checks, commands, heavy "
              "tests, Slurm actions, the time budget) and start nothing on any node; write nothing.")
@click.option("--burn-in", "burn_in", default=None, metavar="DURATION",
              help="Also repeat the heavy tests (DCGM diag, nccl-tests) under sustained load for DURATION (90s, "
              "30m, 4h) while temperature, clocks, throttle reasons, power and ECC are sampled (burnin.stability, "
              "burnin.load).")
@click.option("--burn-in-interval", "burn_in_interval", type=click.FloatRange(min=0.1), default=None,
              metavar="SECONDS", help="The burn-in sampler's interval (default: host var burnin_interval, else 5).")
@click.option("--connect-timeout", type=click.FloatRange(min=0.5), default=10.0, show_default=True,
              help="Seconds to connect and authenticate.")
@click.option("--accept-new-host-keys", is_flag=True,
              help="Learn unknown SSH host keys (added to known_hosts). A CHANGED key is always refused.")
@click.option("--ask-sudo-pass", is_flag=True, help=f"Prompt for the sudo password (or set ${SUDO_PASSWORD_ENV}).")
@click.option("--baseline", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="A previous run folder: the report and terminal show what regressed, drifted or was fixed.")
@click.option("--prometheus", "prometheus_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write per-node verdicts and key metrics for node_exporter's textfile collector (*.prom).")
@click.option("--nccl-pattern", type=click.Choice(["bisect", "all", "pairwise"]), default="bisect",
              show_default=True, help="Multi-node nccl-tests (level full): all nodes at once, splitting a low set "
              "until the bad node is named (bisect); all at once only; or disjoint pairs in parallel rounds.")
@click.option("--no-history", is_flag=True, help="Do not record the run in the state folder's history.sqlite.")
@click.option("--allow-busy", is_flag=True, help="Run the heavy tests (standard/full) even on nodes where GPU compute "
              "processes run; without it those tests are ERROR busy there, naming the processes.")
@click.option("--eval-processes", type=click.IntRange(0, 64), default=None, metavar="N",
              help="Worker processes that parse and evaluate the nodes' outputs; 0: in the node threads. Default: "
              "one per core (at most 8) from 200 nodes up, none below.")
@click.option("-q", "--quiet", is_flag=True, help="Print only the verdict and the report path.")
@click.option("-v", "--verbose", is_flag=True, help="Also print every finding that did not pass, node by node.")
@click.option("--failed-hosts", "failed_hosts_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              metavar="FILE", help="Write the FAIL/ERROR nodes there as one folded host list (empty if none), for "
              "pdsh -w, clush -w or scontrol.")
@click.option("--progress", "progress_s", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Print a plain progress line to stderr every SECONDS (logs, pipes); 0: none. Default: one live "
              "status line on a terminal, nothing in a pipe or with -q.")
@slurm_options
def validate(inventory: Optional[str], resume_dir: Optional[Path], limit: Optional[str], forks: int,
             deadline: Optional[float], out_base: Optional[Path], fail_on_warn: bool, level: str,
             connect_timeout: float, accept_new_host_keys: bool, ask_sudo_pass: bool, baseline: Optional[Path],
             prometheus_file: Optional[Path], nccl_pattern: str, no_history: bool, quiet: bool,
             progress_s: Optional[float] = None, allow_busy: bool = False, slurm: Any = None,
             eval_processes: Optional[int] = None, verbose: bool = False,
             failed_hosts_file: Optional[Path] = None, waivers_file: Optional[Path] = None,
             burn_in: Optional[str] = None, burn_in_interval: Optional[float] = None,
             check_ids: Optional[str] = None, playbook_file: Optional[Path] = None, dry_run: bool = False) -> None:
    """Validate every node of INVENTORY and write results.json, report.html and junit.xml.

    Exit 0 READY, 1 NOT_READY, 2 bad input, 3 INCOMPLETE (some node could not be checked), 130 interrupted.
    """
    from nvdeploy.checks import CHECKS
    from nvdeploy.checks.registry import CLUSTER_CHECKS
    from nvdeploy.config.levels import load_levels
    from nvdeploy.phases.validate import resume_validate
    from nvdeploy.runner.progress import progress_for

    burn_in_s = _burn_in(burn_in, burn_in_interval, resume_dir)
    if resume_dir is not None and inventory is None:
        inventory = _inventory_of_run(resume_dir)
    if inventory is None:
        raise _fail("missing option -i/--inventory")
    inv, catalog = _load(inventory, limit)
    # A resumed run stays in its own folder, and its history is the one beside it (<state>/<cluster>/<run-id>).
    base = resume_dir.parent.parent if resume_dir is not None else state_dir(out_base).path
    known = (*CHECKS, *CLUSTER_CHECKS)
    try:
        checks = load_levels(playbook_file, known_checks=known)[level]
    except ConfigError as exc:
        raise _fail(exc.render()) from None
    except OSError as exc:
        raise _fail(f"--playbook {playbook_file}: {exc.strerror}") from None
    if check_ids is not None:
        checks = _chosen_checks(check_ids, known)
    if burn_in_s is not None:
        from nvdeploy.checks.burnin import CHECK_IDS as BURNIN_CHECKS

        checks = (*checks, *(c for c in BURNIN_CHECKS if c not in checks))
    # Taken out of the environment: no child process (ssh helpers, local batches) inherits the password.
    password = os.environ.pop(SUDO_PASSWORD_ENV, None) or None
    if ask_sudo_pass:
        password = click.prompt("sudo password", hide_input=True, err=True)
    options = EngineOptions(forks=forks, deadline_s=deadline, connect_timeout_s=connect_timeout,
                            accept_new_host_keys=accept_new_host_keys, sudo_password=password, checks=checks,
                            multinode_pattern=nccl_pattern, allow_busy=allow_busy, eval_processes=eval_processes,
                            progress=progress_for(sys.stderr, quiet, progress_s), burn_in_s=burn_in_s,
                            burn_in_interval_s=burn_in_interval, only_checks=check_ids is not None)
    if waivers_file is not None and resume_dir is not None:
        # The header of the run being resumed holds its waivers: the nodes already judged were judged with those.
        raise _fail("--waivers is given when a run starts; a resumed run keeps the waivers it started with")
    if waivers_file is not None:
        options = dataclasses.replace(options, waivers=tuple(_waivers(waivers_file)))
    if baseline is not None:
        options = dataclasses.replace(options, fleet_baseline=str(baseline))
    if dry_run:
        _print_validate_plan(inv, catalog, options, level, slurm, resume_dir)
        return
    _install_sigterm()
    plan = None
    if resume_dir is not None:
        from nvdeploy.phases.validate import plan_resume

        try:
            plan = plan_resume(resume_dir, inv)
        except (FileNotFoundError, ValueError) as exc:
            raise _fail(str(exc)) from None
    if quiet:
        pass  # nothing before the verdict
    elif plan is not None:
        click.echo(f"nvdeploy {__version__}: resuming run {plan.header.get('run_id', '?')} of {inv.cluster}: "
                   f"{len(plan.todo)} of {len(plan.hosts)} node(s) left to check, {len(plan.kept)} kept "
                   f"(level {plan.level}, forks {forks})", err=True)
    else:
        what = f"checks {', '.join(checks)}" if check_ids is not None else f"level {level}"
        click.echo(f"nvdeploy {__version__}: validating {len(inv.hosts)} node(s) of {inv.cluster} "
                   f"({what}, forks {forks})", err=True)
    try:
        if resume_dir is not None:
            outcome = resume_validate(resume_dir, inv, catalog, options, plan=plan)
        else:
            from nvdeploy.cli.commands.slurm import validate_with_slurm

            outcome = validate_with_slurm(inv, catalog, options, base, fail_on_warn, level, slurm,
                                          lambda text: click.echo(_terminal_safe(text), err=True))
    except (OutputError, FileNotFoundError, ValueError) as exc:
        raise _fail(str(exc)) from None
    diff_text = _after_run(outcome, baseline, prometheus_file, None if no_history else base)
    from nvdeploy.cli.commands.run_end import print_run_end

    print_run_end(outcome, diff_text, quiet, verbose, failed_hosts_file, _terminal_safe)
    raise click.exceptions.Exit(outcome.exit_code)


def _chosen_checks(words: str, known: Sequence[str]) -> tuple[str, ...]:
    """--check's ids and globs, in the catalog's order; one that names no check exits 2."""
    import fnmatch

    chosen: list[str] = []
    for word in (w.strip() for w in words.split(",")):
        if not word:
            continue
        matched = [c for c in known if fnmatch.fnmatchcase(c, word)]
        if not matched:
            raise _fail(f"--check: {word!r} names no check (see 'nvdeploy checks list')")
        chosen += [c for c in matched if c not in chosen]
    if not chosen:
        raise _fail("--check: no check named")
    return tuple(chosen)


def _print_validate_plan(inv: Any, catalog: Any, options: Any, level: str, slurm: Any,
                         resume_dir: Optional[Path]) -> None:
    from nvdeploy.phases.validate_plan import SchedulerPlan, plan_lines

    if resume_dir is not None:
        raise _fail("--dry-run plans a new run; --resume finishes one")
    scheduler = SchedulerPlan(drain_failed=slurm.drain_failed, drain_on_error=slurm.drain_on_error,
                              resume_passed=slurm.resume_passed, maintenance_s=slurm.maintenance_s,
                              via_slurm=slurm.via == "slurm")
    for line in plan_lines(inv, catalog, options, level, scheduler):
        click.echo(_terminal_safe(line))


def _burn_in(value: Optional[str], interval: Optional[float], resume_dir: Optional[Path]) -> Optional[float]:
    """--burn-in's seconds (None without it); a bad duration, an interval without a burn-in, or a burn-in with
    --resume (not supported yet: the run's header does not record one) exit 2."""
    if value is None:
        if interval is not None:
            raise _fail("--burn-in-interval needs --burn-in DURATION")
        return None
    if resume_dir is not None:
        raise _fail("--burn-in cannot be given with --resume (a resumed run is not a burn-in)")
    from nvdeploy.collect.burnin_commands import parse_duration

    try:
        return parse_duration(value)
    except ValueError as exc:
        raise _fail(f"--burn-in: {exc}") from None


def _waivers(path: Path) -> list[Any]:
    """The waivers of ``path`` (a malformed one: exit 2 naming file and line); an expired one is an error line on
    stderr naming its file and line, and waives nothing (its findings count again)."""
    import nvdeploy.checks.cluster  # noqa: F401 - registers the cluster stage's own ids (consistency, fleet.drift)
    from nvdeploy.checks import CHECKS
    from nvdeploy.checks.gpu_findings import GPU_CHECKS
    from nvdeploy.checks.registry import CLUSTER_CHECKS
    from nvdeploy.config.waivers import expired, load_waivers, today_utc

    try:
        waivers = load_waivers(path, set(CHECKS) | set(CLUSTER_CHECKS), GPU_CHECKS)
    except ConfigError as exc:
        raise _fail(exc.render()) from None
    for line in expired(waivers, today_utc()):
        click.echo(f"nvdeploy: error: {_terminal_safe(line)}", err=True)
    return waivers


@cli.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
def report(run_dir: Path) -> None:
    """Re-render every report of RUN_DIR from results.json (or results.jsonl after a crash)."""
    from nvdeploy.phases.validate import rebuild_reports

    try:
        outcome = rebuild_reports(run_dir)
    except (FileNotFoundError, OutputError, ValueError, KeyError) as exc:
        raise _fail(str(exc)) from None
    click.echo(f"{outcome.run.verdict.value}: {outcome.run.summary()}")
    click.echo(f"report: {outcome.reports['html']}")
    raise click.exceptions.Exit(outcome.exit_code)


@cli.group("inventory")
def inventory_group() -> None:
    """Check and list inventories."""


@inventory_group.command("check")
@click.option("-i", "--inventory", required=True)
def inventory_check(inventory: str) -> None:
    """Validate an inventory strictly (keys, types, ranges, profiles); exit 2 on the first problem."""
    inv, _ = _load(inventory, None)
    click.echo(f"{inv.path}: OK, {len(inv.hosts)} host(s) in cluster {inv.cluster}")


@inventory_group.command("list")
@click.option("-i", "--inventory", required=True)
@click.option("--limit", default=None)
def inventory_list(inventory: str, limit: Optional[str]) -> None:
    """List the hosts (after --limit) with their connection, address and profile."""
    inv, _ = _load(inventory, limit)
    for host in inv.hosts:
        faults = f" faults={','.join(host.faults)}" if host.faults else ""
        click.echo(f"{host.name}\t{host.connection}\t{host.address}\t{host.profile}{faults}")


def _register_commands() -> None:
    from nvdeploy.cli.commands import register_all

    register_all(cli)


_register_commands()


def main() -> None:
    try:
        cli.main(prog_name="nvdeploy", standalone_mode=True)
    except KeyboardInterrupt:
        click.echo("nvdeploy: interrupted", err=True)
        sys.exit(ExitCode.INTERRUPTED)


if __name__ == "__main__":
    main()
