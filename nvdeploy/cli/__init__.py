"""The command line: ``nvdeploy`` and its subcommands, the outermost room.

``app`` holds the click group and the validate/install/optimize/report commands; ``commands/`` one module per other
subcommand (each registers itself on the group). The CLI may import every other stage; nothing below imports it.
"""

from __future__ import annotations

from nvdeploy._moved import forward_names


def main() -> None:
    """The ``nvdeploy`` entry point (``nvdeploy.cli:main``, kept for installed scripts): the app's main."""
    from nvdeploy.cli.app import main as app_main

    app_main()


# Names of the old flat nvdeploy/cli.py (now cli/app.py) keep working, with a DeprecationWarning.
__getattr__ = forward_names("nvdeploy.cli", "nvdeploy.cli.app")
