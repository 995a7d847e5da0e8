"""More CLI commands, one module each. Each module defines click commands and registers them with
``register(cli)``; add one import line below per module (the CLI calls :func:`register_all`).
"""

from __future__ import annotations

import click


def register_all(cli: click.Group) -> None:
    """Attach every command module's commands to the main group."""
    from importlib import import_module

    for name in MODULES:
        import_module(f"nvdeploy.cli.commands.{name}").register(cli)


# One entry per module in this package, e.g. "parse" for nvdeploy/cli/commands/parse.py.
MODULES: list[str] = ["probe", "diff", "history", "parse", "deploy", "size", "node_check", "slurm", "checks"]
