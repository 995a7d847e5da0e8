"""The Slurm options of ``nvdeploy validate`` (drain/resume, maintenance window, ``--via slurm``) and the run
around the validation (nvdeploy/slurm/window.py). ``node-check`` is in node_check.py."""

from __future__ import annotations

import functools
import re
import signal
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional

import click

from nvdeploy.slurm.drain import Policy

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``2h``, ``1d`` -> seconds."""
    match = _DURATION.match(text or "")
    if not match or float(match.group(1)) <= 0:
        raise click.BadParameter(f"{text!r} is not a duration (e.g. 90s, 30m, 2h)")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


class Duration(click.ParamType):
    name = "DURATION"

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        try:
            return parse_duration(str(value))
        except click.BadParameter as exc:
            self.fail(str(exc), param, ctx)


@dataclass(frozen=True)
class SlurmCli:
    drain_failed: bool = False
    drain_on_error: bool = False
    resume_passed: bool = False
    dry_run: bool = False
    maintenance_s: Optional[float] = None
    wait_drain_s: float = 0.0
    via: str = "ssh"
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    exclusive: bool = True
    mpi: str = "pmix"
    slurm_timeout_s: float = 30.0


_OPTIONS = [
    click.option("--drain-failed", is_flag=True, help="Slurm: drain the nodes that FAIL, with a reason naming the "
                 "failed checks (sinfo -R)."),
    click.option("--drain-on-error", is_flag=True, help="With --drain-failed: drain ERROR nodes too (not those "
                 "only busy or interrupted)."),
    click.option("--resume-passed", is_flag=True, help="Slurm: resume the nodes that PASS, only if nvdeploy drained "
                 "them (a reason set by someone else is never overridden)."),
    click.option("--slurm-dry-run", "slurm_dry_run", is_flag=True, help="Slurm: validate, and print the scontrol "
                 "commands (drain, resume, reservation) instead of running them (--dry-run: plan only, run nothing)."),
    click.option("--maintenance", "maintenance_s", type=Duration(), default=None, help="Slurm: hold the nodes in a "
                 "maintenance reservation (flags=maint, named after the run) for DURATION (2h, 90m) during the "
                 "run; deleted at the end, even on Ctrl-C."),
    click.option("--wait-drain", "wait_drain_s", type=Duration(), default=None, help="With --maintenance: wait up "
                 "to DURATION for running jobs to end; nodes still busy get ERROR busy for heavy checks."),
    click.option("--via", type=click.Choice(["ssh", "slurm"]), default="ssh", show_default=True,
                 help="How to reach the nodes: the hosts' connection (ssh), or one srun job step over all of them "
                 "(slurm; the same node batch, parsed and judged the same)."),
    click.option("--partition", default=None, help="--via slurm: srun --partition."),
    click.option("--account", default=None, help="--via slurm: srun --account."),
    click.option("--qos", default=None, help="--via slurm: srun --qos."),
    click.option("--no-exclusive", is_flag=True, help="--via slurm: do not ask srun for whole nodes."),
    click.option("--srun-mpi", "srun_mpi", default="pmix", show_default=True,
                 help="--via slurm: the MPI plugin of multi-node nccl-tests (srun --mpi=...)."),
    click.option("--slurm-timeout", "slurm_timeout_s", type=click.FloatRange(min=1), default=30.0,
                 show_default=True, help="Seconds for each Slurm client command (sinfo, scontrol, squeue)."),
]


def slurm_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Adds the Slurm options to a click command and hands them to it as one ``slurm`` argument."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        wait = kwargs.pop("wait_drain_s")
        opts = SlurmCli(drain_failed=kwargs.pop("drain_failed"), drain_on_error=kwargs.pop("drain_on_error"),
                        resume_passed=kwargs.pop("resume_passed"), dry_run=kwargs.pop("slurm_dry_run"),
                        maintenance_s=kwargs.pop("maintenance_s"), wait_drain_s=wait or 0.0,
                        via=kwargs.pop("via"), partition=kwargs.pop("partition"), account=kwargs.pop("account"),
                        qos=kwargs.pop("qos"), exclusive=not kwargs.pop("no_exclusive"),
                        mpi=kwargs.pop("srun_mpi"), slurm_timeout_s=kwargs.pop("slurm_timeout_s"))
        if opts.drain_on_error and not opts.drain_failed:
            raise click.UsageError("--drain-on-error needs --drain-failed")
        if wait is not None and opts.maintenance_s is None:
            raise click.UsageError("--wait-drain needs --maintenance")
        active = opts.drain_failed or opts.resume_passed or opts.maintenance_s is not None or opts.via == "slurm"
        if active and kwargs.get("resume_dir") is not None:
            raise click.UsageError("--resume finishes a run over its own transport: the Slurm options do not apply")
        return func(*args, slurm=opts, **kwargs)

    for option in reversed(_OPTIONS):
        wrapper = option(wrapper)
    return wrapper


def validate_with_slurm(inv: Any, catalog: Any, options: Any, out_base: Path, fail_on_warn: bool, level: str,
                        slurm: SlurmCli, echo: Callable[[str], None]) -> Any:
    """run_validate inside the Slurm steps; returns a ValidateOutcome whose exit code counts them."""
    from nvdeploy.phases.validate import ValidateOutcome, new_run_id, run_validate
    from nvdeploy.report import write_reports
    from nvdeploy.runner.record import safe_name
    from nvdeploy.slurm.client import SlurmClient, SlurmError
    from nvdeploy.slurm.journal import FILE as JOURNAL_FILE
    from nvdeploy.slurm.journal import SchedulerJournal
    from nvdeploy.slurm.window import SlurmRunOptions, SlurmWindow, exit_code, slurm_nodes_of

    run_options = SlurmRunOptions(
        policy=Policy(slurm.drain_failed, slurm.drain_on_error, slurm.resume_passed, level=level),
        dry_run=slurm.dry_run,
        maintenance_s=slurm.maintenance_s, wait_drain_s=slurm.wait_drain_s,
        allow_busy=bool(getattr(options, "allow_busy", False)), via=slurm.via, timeout_s=slurm.slurm_timeout_s)
    if not run_options.needs_slurm and not slurm_nodes_of(inv):
        return run_validate(inv, catalog, options, out_base, fail_on_warn=fail_on_warn, level=level)
    if slurm.maintenance_s is not None:
        _refuse_short_reservation(inv, catalog, options, level, slurm)
    client = SlurmClient(timeout_s=slurm.slurm_timeout_s, dry_run=slurm.dry_run)
    run_id = new_run_id()
    run_dir = out_base / safe_name(inv.cluster) / run_id
    changes = not slurm.dry_run and (run_options.policy.active or slurm.maintenance_s is not None)
    if changes:
        _recover_dead_runs(run_dir.parent, client, echo)
    journal = SchedulerJournal(run_dir / JOURNAL_FILE, run_id) if changes else None
    window = SlurmWindow(inv, run_options, client, echo, journal=journal)
    hangup = _hangup_as_sigterm()
    try:
        try:
            inv = window.open(run_id, level)
        except SlurmError as exc:
            # Nothing was touched yet: a usage/config-level failure (exit 2) with Slurm's own words.
            click.echo(f"nvdeploy: error: Slurm: {exc.message} ({' '.join(exc.command)})", err=True)
            raise click.exceptions.Exit(2) from None
        if window.reservation is not None and window.reservation.created:
            options = replace(options, deadline_s=_reservation_deadline(window.reservation, options.deadline_s))
        pool = None
        if slurm.via == "slurm":
            from nvdeploy.slurm.srun import POOL_VAR, SrunOptions, SrunPool

            created = window.reservation is not None and window.reservation.created
            pool = SrunPool(inv.hosts, SrunOptions(
                reservation=window.reservation.name if created else None,  # type: ignore[union-attr]
                partition=slurm.partition, account=slurm.account, qos=slurm.qos, exclusive=slurm.exclusive,
                mpi=slurm.mpi, job_name=f"nvdeploy-{run_id}"), client)
            # The hosts' connection is ignored: every batch goes through the pool's srun steps.
            inv = replace(inv, hosts=tuple(replace(h, vars={**h.vars, POOL_VAR: pool.key, "connection": "slurm"})
                                           for h in inv.hosts))
            options = replace(options, forks=max(options.forks, len(inv.hosts)))
        outcome = run_validate(inv, catalog, options, out_base, fail_on_warn=fail_on_warn, level=level,
                               run_id=run_id)
        interrupted = outcome.exit_code in (130, 143)
        if pool is not None:
            window.notes.extend(f"srun step {s['job_name']}: {s['nodes']} node(s), {s['seconds']} s, rc {s['rc']}"
                                for s in pool.steps)
            pool.release()
        run, failed = window.finish(outcome.run, catalog, interrupted)
        reports = write_reports(run, outcome.run_dir)
        for line in client.printed:
            echo(f"dry-run: {line}")
        return ValidateOutcome(run, outcome.run_dir, reports, exit_code(outcome.exit_code, failed))
    finally:
        try:
            if journal is not None and not journal.finished:
                _restore(journal, client, run_dir, echo)
            window.close()
        finally:
            if hangup is not None:
                signal.signal(signal.SIGHUP, hangup)


def _refuse_short_reservation(inv: Any, catalog: Any, options: Any, level: str, slurm: SlurmCli) -> None:
    """A maintenance window shorter than the run's worst case would end mid-run (other jobs start beside a
    DCGM diag): refused, with the figure, before anything changes (exit 2)."""
    from nvdeploy.slurm.budget import minutes, worst_case

    need = worst_case(inv.hosts, catalog, options.checks, options.forks, options.connect_timeout_s,
                      options.deadline_s, options.multinode_pattern, slurm.via == "slurm",
                      options.burn_in_s, options.burn_in_interval_s)
    need_s = need.seconds + slurm.wait_drain_s
    assert slurm.maintenance_s is not None
    if slurm.maintenance_s >= need_s:
        return
    waits = f" + --wait-drain {slurm.wait_drain_s:g} s" if slurm.wait_drain_s else ""
    click.echo(f"nvdeploy: error: --maintenance {minutes(slurm.maintenance_s)} is shorter than this run can take: "
               f"up to {minutes(need_s)} at level {level} ({need.detail}{waits}, the scheduler steps at the end "
               f"included). Give --maintenance {minutes(need_s)} or more, or bound the run with --deadline SECONDS",
               err=True)
    raise click.exceptions.Exit(2)


def _reservation_deadline(reservation: Any, deadline_s: Optional[float]) -> float:
    """The run's --deadline inside the reservation: no node, heavy test or cluster round starts after its end
    (less the time the scheduler steps need at the end)."""
    import time

    from nvdeploy.slurm.budget import CLOSE_S

    left = reservation.duration_s - (time.monotonic() - reservation.created_at) - CLOSE_S
    return max(1.0, min(deadline_s, left) if deadline_s else left)


def _hangup_as_sigterm() -> Any:
    """SIGHUP (the operator's SSH session dropped) stops the run as SIGTERM does, so the scheduler is put back;
    returns the handler to restore (None: left alone, e.g. under nohup, where it is ignored)."""
    from nvdeploy.runner.signals import hangup_as_sigterm

    return hangup_as_sigterm()


def _restore(journal: Any, client: Any, run_dir: Path, echo: Callable[[str], None]) -> None:
    """The run ended before its scheduler steps did: put them back from the journal. SIGTERM and SIGHUP wait
    until it is done (each Slurm command is bounded); Ctrl-C still stops it, and the journal keeps what is left."""
    from nvdeploy.slurm.journal import recover

    held = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        failed = recover(journal, client, _quiet(echo))
    finally:
        for signum, previous in held.items():
            signal.signal(signum, previous)
    if failed:
        _quiet(echo)(f"slurm: NOT restored: {'; '.join(failed[:5])}; run `nvdeploy slurm recover {run_dir}` once "
                     "Slurm answers")


def _quiet(echo: Callable[[str], None]) -> Callable[[str], None]:
    """echo that never raises: after SIGHUP the terminal is gone, and a write error must not stop a restore."""
    def say(text: str) -> None:
        try:
            echo(text)
        except Exception:  # noqa: BLE001 - EIO/EPIPE on a closed terminal
            pass

    return say


def _recover_dead_runs(cluster_dir: Path, client: Any, echo: Callable[[str], None]) -> None:
    """Before this run changes anything: what an earlier run of this output folder left half done when it was
    killed (SIGKILL, a crash, power) is put back first."""
    from nvdeploy.slurm.journal import SchedulerJournal, recover, unfinished_runs

    for folder in unfinished_runs(cluster_dir):
        echo(f"slurm: run {folder.name} ended without putting the scheduler back; recovering it first")
        failed = recover(SchedulerJournal.load(folder), client, echo)
        if failed:
            echo(f"slurm: NOT recovered: {'; '.join(failed[:5])}; run `nvdeploy slurm recover {folder}`")


@click.group("slurm")
def slurm_group() -> None:
    """Slurm steps outside a validation run."""


@slurm_group.command("recover")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Recover even if the run's process still seems to run.")
@click.option("--slurm-timeout", "slurm_timeout_s", type=click.FloatRange(min=1), default=30.0, show_default=True)
def recover_command(run_dir: Path, force: bool, slurm_timeout_s: float) -> None:
    """Put back what RUN_DIR's run left half done in Slurm (killed, crashed): its reservation deleted, nodes it
    resumed for validation drained again unless it judged them fit, the drains it decided done.
    Exit 0 done (or nothing to do), 2 not a run folder, 3 some step failed (run it again)."""
    from nvdeploy.slurm.client import SlurmClient
    from nvdeploy.slurm.journal import JournalError, SchedulerJournal, recover

    try:
        journal = SchedulerJournal.load(run_dir)
    except JournalError as exc:
        click.echo(f"nvdeploy: error: {exc}", err=True)
        raise click.exceptions.Exit(2) from None
    if journal.finished:
        click.echo(f"slurm recover: {run_dir.name}: nothing to do (the run finished its scheduler steps)")
        raise click.exceptions.Exit(0)
    if journal.alive() and not force:
        click.echo(f"nvdeploy: error: the run's process {journal.pid} still runs: it puts Slurm back itself when "
                   "it ends (--force to recover anyway)", err=True)
        raise click.exceptions.Exit(2)
    failed = recover(journal, SlurmClient(timeout_s=slurm_timeout_s), click.echo)
    if failed:
        click.echo(f"slurm recover: NOT done: {'; '.join(failed)}", err=True)
        raise click.exceptions.Exit(3)
    click.echo(f"slurm recover: {run_dir.name}: done" + ("" if journal.recovered else " (nothing was left to do)"))


def register(cli: click.Group) -> None:
    cli.add_command(slurm_group)
