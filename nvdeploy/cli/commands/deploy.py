"""``nvdeploy install``, ``nvdeploy optimize``, ``nvdeploy run`` and ``nvdeploy actions``: thin wrappers over
nvdeploy.phases.{install,optimize,run}.

Exit codes as for validate: 0 every node done (READY), 1 a step failed or a check FAILed (NOT_READY), 2 bad input
(inventory, playbook, template, option: before any connection), 3 INCOMPLETE (unreachable, sudo, not run),
130/143 interrupted.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping

import click

from nvdeploy.cli.commands.state import state_dir, state_dir_option
from nvdeploy.results import NodeResult


def _common(function: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("-i", "--inventory", required=True, help="Inventory YAML file (or a built-in name)."),
        click.option("--playbook", default=None, help="Playbook file (default: the built-in one of this phase)."),
        click.option("--limit", default=None, help="Only these hosts: names, globs, ranges, groups, !exclude."),
        click.option("--dry-run", is_flag=True,
                     help="Probe only: print per node every change and command that would run; change nothing."),
        click.option("--serial", default=None,
                     help="Rolling batches: N nodes or N% of them at a time (default: all at once)."),
        click.option("--max-fail-percent", type=click.FloatRange(0, 100), default=None,
                     help="Stop the rollout after a batch in which more than this % of nodes failed; the rest are "
                     "NOT_RUN."),
        click.option("--tags", default="", help="Only the steps with one of these tags (comma-separated)."),
        click.option("--skip-tags", default="", help="Skip the steps with any of these tags."),
        click.option("--allow-reboot", is_flag=True, help="Let install reboot nodes that need it to load a driver."),
        click.option("--forks", default=64, show_default=True, type=click.IntRange(1, 1024),
                     help="Nodes worked on at once within a batch."),
        click.option("--deadline", type=click.FloatRange(min=1), default=None,
                     help="Global deadline in seconds: no step starts after it."),
        state_dir_option(),
        click.option("--connect-timeout", type=click.FloatRange(min=0.5), default=10.0, show_default=True),
        click.option("--accept-new-host-keys", is_flag=True,
                     help="Learn unknown SSH host keys; a changed key is refused."),
        click.option("--ask-sudo-pass", is_flag=True, help="Prompt for the sudo password (or set "
                     "NVDEPLOY_SUDO_PASSWORD)."),
        click.option("-v", "--verbose", is_flag=True, help="Print every step of every node and the commands run."),
        click.option("-q", "--quiet", is_flag=True, help="Print only the verdict and the report path."),
        click.option("--no-history", is_flag=True, help="Do not record the run in the state folder's history.sqlite "
                     "(recorded: who changed what on which node, as for validate; a dry-run is never recorded)."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _words(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in text.split(",") if t.strip())


def _options(kw: dict[str, Any]) -> Any:
    from nvdeploy.cli.common import SUDO_PASSWORD_ENV, _fail
    from nvdeploy.config.yamlfile import ConfigError
    from nvdeploy.phases.rollout import PhaseOptions, parse_serial
    from nvdeploy.runner.engine import EngineOptions

    try:
        serial = parse_serial(kw["serial"])
    except ConfigError as exc:
        raise _fail(exc.render()) from None
    # Taken out of the environment: no child process (ssh helpers, local batches) inherits the password.
    password = os.environ.pop(SUDO_PASSWORD_ENV, None) or None
    if kw["ask_sudo_pass"]:
        password = click.prompt("sudo password", hide_input=True, err=True)
    engine = EngineOptions(forks=kw["forks"], deadline_s=kw["deadline"], connect_timeout_s=kw["connect_timeout"],
                           accept_new_host_keys=kw["accept_new_host_keys"], sudo_password=password)
    return PhaseOptions(engine=engine, serial=serial, max_fail_percent=kw["max_fail_percent"],
                        dry_run=kw["dry_run"], allow_reboot=kw["allow_reboot"], tags=_words(kw["tags"]),
                        skip_tags=_words(kw["skip_tags"]))


def _execute(phase: str, kw: dict[str, Any], call: Callable[..., Any]) -> None:
    from nvdeploy import __version__
    from nvdeploy.cli.common import _fail, _install_sigterm, _load
    from nvdeploy.config.yamlfile import ConfigError
    from nvdeploy.files import OutputError
    from nvdeploy.runner.engine import Interrupted

    inv, catalog = _load(kw["inventory"], kw["limit"])
    kw["out_base"] = state_dir(kw["out_base"]).path
    options = _options(kw)
    quiet = kw["quiet"]
    if not quiet:
        mode = " (dry-run: nothing will be changed)" if options.dry_run else ""
        batches = f", batches of {options.serial}" if options.serial else ""
        click.echo(f"nvdeploy {__version__}: {phase} on {len(inv.hosts)} node(s) of {inv.cluster}{mode}{batches}",
                   err=True)
    _install_sigterm()

    shown: list[Mapping[str, Any]] = []

    def announce(name: str) -> None:
        # stdout, as every detail line: one stream, so `2>&1 | tee` keeps each phase's lines under its heading
        if not quiet:
            click.echo(f"== {name}")

    def finished(entry: Mapping[str, Any], result: Any) -> None:
        shown.append(entry)
        if not quiet:
            for line in _phase_lines(entry, result, kw["verbose"]):
                click.echo(line)

    try:
        outcome = call(inv, catalog, options, announce, finished)
    except ConfigError as exc:
        raise _fail(exc.render()) from None
    except (OutputError, FileNotFoundError, ValueError) as exc:
        raise _fail(str(exc)) from None
    except Interrupted as exc:
        raise click.exceptions.Exit(exc.exit_code) from None
    if not quiet:
        results = {r.phase: r for r in outcome.phases}
        for entry in outcome.run.phases[len(shown):]:  # run printed each phase as it ended; install, optimize here
            for line in _phase_lines(entry, results.get(entry.get("phase")), kw["verbose"]):
                click.echo(line)
        bad = _bad_nodes(list(outcome.run.nodes))
        for line in bad:
            click.echo(line)
    if options.dry_run:
        from nvdeploy.phases.plan_text import dry_run_line

        click.echo(dry_run_line(outcome.phases))
    else:
        click.echo(f"{outcome.run.verdict.value}: {outcome.run.summary()}")
        if not kw["no_history"]:
            _record(outcome, kw["out_base"])
    click.echo(f"report: {outcome.reports['html']}")
    raise click.exceptions.Exit(outcome.exit_code)


def _record(outcome: Any, base: Any) -> None:
    """The run in the history (``nvdeploy history``): install, optimize and run leave the same trail as validate,
    the user, the run and every step's change per node."""
    from nvdeploy.runner.history_db import HistoryError, default_db_path, record_run

    try:
        record_run(default_db_path(base), outcome.run, outcome.run_dir)
    except HistoryError as exc:
        click.echo(f"nvdeploy: warning: run not recorded in the history: {exc}", err=True)


def _phase_lines(entry: Mapping[str, Any], result: Any, verbose: bool) -> list[str]:
    """A phase's lines: its steps per node (install, optimize), its summary, the before/after of tuning."""
    from nvdeploy.phases.plan_text import plan_lines

    lines = []
    if result is not None:
        lines.append(f"-- {result.phase}{' (dry-run)' if result.dry_run else ''}")
        lines += plan_lines(result, verbose=verbose)
    lines.append(f"{entry.get('summary', entry.get('phase'))}")
    comparison = entry.get("comparison")
    if comparison:
        lines.append(f"  before/after: {comparison['summary']}")
        # what moved; the unchanged figures are counted in the summary and listed in the report and results.json
        for row in [r for r in comparison["rows"] if r.get("changed", True)][:40]:
            gpu = f" GPU{row['gpu']}" if row["gpu"] is not None else ""
            lines.append(f"    {row['node']} {row['check']}{gpu}: {row['before']['verdict']} "
                         f"{row['before']['observed'] or ''} -> {row['after']['verdict']} "
                         f"{row['after']['observed'] or ''}")
    return lines


def _bad_nodes(nodes: list[NodeResult]) -> list[str]:
    from nvdeploy.cli.common import _summary_lines

    return [line for line in _summary_lines(nodes) if not line.startswith(("PASS", "SKIP"))]


@click.command("install")
@_common
def install_command(**kw: Any) -> None:
    """Install the NVIDIA stack (playbooks/install.yaml) on every node of INVENTORY, idempotently.

    Driver branch (+ fabric manager on NVSwitch SKUs), CUDA toolkit, DCGM, container toolkit, nccl-tests,
    nvidia-persistenced, nvidia_peermem where InfiniBand is present. A second run changes nothing.
    """
    from nvdeploy.phases.install import run_install
    from nvdeploy.phases.playbook import resolve_playbook

    _execute("install", kw, lambda inv, catalog, options, say, done: run_install(
        inv, catalog, options, kw["out_base"], resolve_playbook(kw["playbook"], "install")))


@click.command("optimize")
@_common
def optimize_command(**kw: Any) -> None:
    """Tune every node (playbooks/optimize.yaml) and validate before and after.

    Persistence, compute mode, power limit, application clocks, MIG mode, CPU governor: each change shown with
    its value before and after, then the measured figures of the two validations side by side.
    """
    from nvdeploy.phases.optimize import run_optimize
    from nvdeploy.phases.playbook import resolve_playbook

    _execute("optimize", kw, lambda inv, catalog, options, say, done: run_optimize(
        inv, catalog, options, kw["out_base"], resolve_playbook(kw["playbook"], "optimize")))


@click.command("run")
@_common
@click.option("--continue-on-fail", is_flag=True, help="Tune even when the validation after install is not READY.")
@click.option("--allow-busy", is_flag=True, help="Run the heavy tests even on nodes where GPU compute processes run.")
def run_command(continue_on_fail: bool, allow_busy: bool, **kw: Any) -> None:
    """Install, validate, optimize (playbooks/run.yaml): bare nodes to validated, tuned nodes, one report.

    Stops before optimize when the validation is not READY (unless --continue-on-fail).
    """
    from dataclasses import replace

    from nvdeploy.phases.playbook import resolve_playbook
    from nvdeploy.phases.run import run_all

    _execute("run", kw, lambda inv, catalog, options, say, done: run_all(
        inv, catalog, replace(options, engine=replace(options.engine, allow_busy=allow_busy)), kw["out_base"],
        resolve_playbook(kw["playbook"], "run"), continue_on_fail, announce=say, finished=done))


@click.group("actions")
def actions_group() -> None:
    """The actions playbook steps can use (install, optimize and run playbooks)."""


@actions_group.command("list")
def actions_list() -> None:
    """Every action: whether it changes the node or only reads it, and its first sentence."""
    from nvdeploy.actions import ACTIONS
    from nvdeploy.cli.commands.checks import first_sentence, plain

    for action in ACTIONS.values():
        first = plain(first_sentence(action.__doc__ or ""))
        click.echo(f"{action.name:20} {'changes' if action.mutates else 'reads  '}  {first}")


@actions_group.command("show")
@click.argument("name")
def actions_show(name: str) -> None:
    """What action NAME does, whether it changes the node, and its parameters with their defaults."""
    import inspect

    from nvdeploy.actions import ACTIONS
    from nvdeploy.cli.common import _fail

    if name not in ACTIONS:
        raise _fail(f"unknown action {name!r} (see 'nvdeploy actions list')")
    action = ACTIONS[name]
    click.echo(f"{action.name}  ({'changes the node' if action.mutates else 'read-only'})\n")
    click.echo(inspect.cleandoc(action.__doc__ or ""))
    click.echo("\nparameters:")
    for param in action.params:
        kind = param.kind if param.kind != "choice" else "|".join(param.choices)
        default = "required" if param.required else f"default {param.default!r}"
        click.echo(f"  {param.name:18} {kind:10} {default}{'  ' + param.doc if param.doc else ''}")


def register(cli: click.Group) -> None:
    for command in (install_command, optimize_command, run_command, actions_group):
        cli.add_command(command)


__all__ = ["register"]
