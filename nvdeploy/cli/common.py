"""What the nvdeploy command and its subcommands (cli/commands/) share: the error exit, loading an inventory, the
summary lines and the stop handlers. Here rather than in app.py, which imports the subcommands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import click

from nvdeploy.config.builtin import data_dir
from nvdeploy.config.inventory import Inventory, load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.config.yamlfile import ConfigError
from nvdeploy.results import ExitCode, NodeResult

SUDO_PASSWORD_ENV = "NVDEPLOY_SUDO_PASSWORD"


def _fail(message: str, code: int = ExitCode.USAGE) -> click.exceptions.Exit:
    click.echo(f"nvdeploy: error: {message}", err=True)
    return click.exceptions.Exit(code)


def resolve_inventory_path(value: str) -> Path:
    """A path, or the name of a built-in inventory (``demo``) when no such file exists."""
    path = Path(value)
    if path.exists():
        return path
    try:
        builtin = data_dir("inventories") / (value if value.endswith(".yaml") else f"{value}.yaml")
    except FileNotFoundError:
        return path
    return builtin if builtin.is_file() else path


def _validate_fault(fault: str) -> Optional[str]:
    """The simulator's check of a sim_faults name, imported on the first such name: importing the simulator costs
    every command about 70 ms, and an inventory of real nodes names no fault."""
    from nvdeploy.sim.scenario import validate_fault

    return validate_fault(fault)


def _load(inventory: str, limit: Optional[str]) -> tuple[Inventory, ProfileCatalog]:
    # The loader checks sim_faults against the simulator's faults and reads slurm: groups from Slurm, so that a bad
    # name fails with its file and line before any run; both rooms import config/, so the CLI hands them in.
    from nvdeploy.slurm.source import resolve_group

    catalog = ProfileCatalog()
    try:
        inv = load_inventory(resolve_inventory_path(inventory), catalog, slurm_groups=resolve_group,
                             check_fault=_validate_fault)
        inv = inv.limit(limit)
    except ConfigError as exc:
        raise _fail(exc.render()) from None
    return inv, catalog


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c != 0x09}


def _terminal_safe(text: str) -> str:
    """Node output reaches summaries (an Xid line names a user's process): show control characters, never send
    them, so a process name such as ESC ] 0 ; ... BEL cannot drive the operator's terminal."""
    return text.translate(_CONTROL)


def _summary_lines(nodes: list[NodeResult]) -> list[str]:
    """One line per group of nodes with the same verdict and the same failing checks, folded into ranges."""
    from nvdeploy.report.text import node_summary_lines

    return [_terminal_safe(line) for line in node_summary_lines(nodes)]


def _install_sigterm() -> None:
    from nvdeploy.runner.signals import install_stop_handlers

    install_stop_handlers()
