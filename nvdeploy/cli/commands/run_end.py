"""What ``nvdeploy validate`` prints when a run ends: the node lines, the hosts to act on, how to resume.

stdout, in this order: the summary lines (not with ``-q``), with ``-v`` every finding that did not pass or was
waived (``SKIP  gpu017 memory.remapped_rows GPU3: WAIVED FAIL until ... (owner ...: reason; file:line): ...``), the
baseline comparison, the folded FAIL/ERROR hosts (a line to paste into ``pdsh -w``, ``clush -w`` or ``scontrol``),
the resume command of an interrupted run, the verdict and the report's path. Colour only on a terminal without
``NO_COLOR``. Everything that came from a node goes through ``safe`` (control characters shown, never sent).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Optional

import click

from nvdeploy.config.hostrange import fold_slurm
from nvdeploy.files import OutputError, write_atomic
from nvdeploy.report.text import colour_wanted, failed_hosts, paint, summary_lines
from nvdeploy.report.view import NEEDS_ACTION, not_run_names, noted, resume_command

FAILED_HOSTS_LABEL = "FAIL/ERROR hosts:"
RESUME_LABEL = "resume with:"


def pasteable(hosts: list[str]) -> str:
    """The hosts folded into the one form that nvdeploy's ``--limit``, ``scontrol show hostnames``, ``pdsh -w``
    and ``clush -w`` all read: ClusterShell's folding, but for names with a suffix after their last digits
    (``hgx01.mgmt``), listed one by one, since Slurm's hostlist parser refuses ``hgx[01-02].mgmt``."""
    return fold_slurm(hosts)


def write_failed_hosts(path: Path, hosts: list[str]) -> None:
    """The folded FAIL/ERROR hosts as one line (empty when there are none), for ``pdsh -w "$(cat FILE)"``."""
    write_atomic(path, ((pasteable(hosts) + "\n") if hosts else "").encode("utf-8"))


def verbose_lines(outcome: Any) -> list[str]:
    """Every finding that did not pass or was waived, node by node: what the summary lines fold together."""
    lines = []
    for _index, node in noted(outcome.run):
        for finding in node.findings:
            if finding.verdict in NEEDS_ACTION or finding.waiver is not None:
                reason = f" [{finding.reason.value}]" if finding.reason is not None else ""
                gpu = f" GPU{finding.gpu}" if finding.gpu is not None else ""
                lines.append(f"{finding.verdict.value:5} {node.name} {finding.check}{gpu}{reason}: "
                             f"{' '.join(finding.display_summary.split())}")
    return lines


def print_run_end(outcome: Any, diff_text: str, quiet: bool, verbose: bool, failed_hosts_file: Optional[Path],
                  safe: Callable[[str], str]) -> None:
    """Print the end of a validate run on stdout (see the module's docstring); write ``--failed-hosts``."""
    run = outcome.run
    hosts = failed_hosts(run)
    if failed_hosts_file is not None:
        try:
            write_failed_hosts(failed_hosts_file, hosts)
        except OutputError as exc:
            click.echo(f"nvdeploy: error: {exc}", err=True)
            raise click.exceptions.Exit(2) from None
    colour = colour_wanted(sys.stdout)

    def say(line: str) -> None:
        line = safe(line)
        click.echo(paint(line) if colour else line, color=colour)

    if not quiet:
        for line in summary_lines(run, run_dir=outcome.run_dir):
            say(line)
        if verbose:
            for line in verbose_lines(outcome):
                say(line)
        for line in diff_text.splitlines():
            say(line)
        if hosts:
            say(f"{FAILED_HOSTS_LABEL} {pasteable(hosts)}")
    if run.interrupted and not_run_names(run):
        say(f"{RESUME_LABEL} {resume_command(run, outcome.run_dir)}")
    say(f"{run.verdict.value}: {run.summary()}")
    say(f"report: {outcome.reports['html']}")
