"""The command line: ``nvdeploy`` and its subcommands, the outermost room.

``app`` holds the click group and the validate/install/optimize/report commands; ``commands/`` one module per other
subcommand (each registers itself on the group). The CLI may import every other stage; nothing below imports it.
"""

from __future__ import annotations


def main() -> None:
    """The ``nvdeploy`` entry point (``nvdeploy.cli:main``, kept for installed scripts): the app's main."""
    from nvdeploy.cli.app import main as app_main

    app_main()


def __getattr__(name: str) -> object:
    """Names of the old flat ``nvdeploy/cli.py`` (now ``cli/app.py``) keep working, with a warning."""
    import importlib
    import warnings

    module = importlib.import_module("nvdeploy.cli.app")
    try:
        value = getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module 'nvdeploy.cli' has no attribute {name!r}") from None
    warnings.warn(f"nvdeploy.cli.{name} moved to nvdeploy.cli.app.{name}", DeprecationWarning, stacklevel=2)
    return value
