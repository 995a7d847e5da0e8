"""The ``--state-dir`` option every command that writes or reads runs and the history shares (the rule is
nvdeploy/runner/statedir.py's); not a command module of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

import click

from nvdeploy.runner.statedir import STATE_DIR_HELP, StateDir, StateDirError, resolve_state_dir


def state_dir_option(dest: str = "out_base") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--state-dir DIR`` (alias ``--out``, its name before the state folder had a rule), default None: the
    rule decides when the command runs, not when the CLI is imported (the current folder may differ)."""
    return click.option("--state-dir", "--out", dest, type=click.Path(file_okay=False, path_type=Path),
                        default=None, metavar="DIR", help=STATE_DIR_HELP)


def state_dir(option: Optional[Path]) -> StateDir:
    """The state folder for this command; exit 2 with the reason when none can be named."""
    try:
        return resolve_state_dir(option)
    except StateDirError as exc:
        click.echo(f"nvdeploy: error: {exc}", err=True)
        raise click.exceptions.Exit(2) from None


def where(chosen: StateDir) -> str:
    """``the state folder /x (from $NVDEPLOY_STATE_DIR)``: the folder and the rule that chose it, for messages."""
    return f"the state folder {chosen.path} (from {chosen.source})"
