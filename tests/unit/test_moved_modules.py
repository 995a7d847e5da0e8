"""The modules that moved into the stage folders keep their old import paths, as the same module objects."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from nvdeploy._moved import MOVED, new_name

PACKAGE = Path(importlib.import_module("nvdeploy").__file__).resolve().parent


def test_every_old_name_gives_the_new_module_itself_with_a_warning() -> None:
    for old, new in MOVED.items():
        target = importlib.import_module(f"nvdeploy.{new}")
        sys.modules.pop(f"nvdeploy.{old}", None)
        with pytest.warns(DeprecationWarning, match=f"nvdeploy.{old} moved to nvdeploy.{new}"):
            module = importlib.import_module(f"nvdeploy.{old}")
        assert module is target, old


def test_a_moved_folder_moves_its_modules_and_from_imports_work() -> None:
    from nvdeploy.cli.commands import node_check
    from nvdeploy.runner import engine

    for old in ("nvdeploy.commands", "nvdeploy.commands.node_check", "nvdeploy.engine"):
        sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning):
        from nvdeploy.commands import node_check as old_node_check  # type: ignore[import-not-found]
    with pytest.warns(DeprecationWarning):
        from nvdeploy.engine import make_transport  # type: ignore[import-not-found]  # noqa: F401
    assert old_node_check is node_check
    assert new_name("nvdeploy.probe.nvml_probe") == "nvdeploy.collect.probe.nvml_probe"
    assert new_name("nvdeploy.checks.gpu") is None and new_name("nvdeploy.collected") is None
    assert make_transport is engine.make_transport


def test_the_packages_that_replaced_flat_modules_answer_their_old_names() -> None:
    from nvdeploy.cli import app
    from nvdeploy.collect import catalog

    with pytest.warns(DeprecationWarning, match="nvdeploy.collect.COLLECTORS moved to nvdeploy.collect.catalog"):
        from nvdeploy.collect import COLLECTORS
    with pytest.warns(DeprecationWarning):
        from nvdeploy.cli import cli
    assert COLLECTORS is catalog.COLLECTORS and cli is app.cli
    with pytest.raises(ImportError):
        from nvdeploy.collect import no_such_name  # noqa: F401


def test_no_old_flat_name_is_left_in_the_package_and_no_old_file_remains() -> None:
    for old in MOVED:
        assert not (PACKAGE / f"{old}.py").exists(), old
    pattern = r"nvdeploy\.(" + "|".join(sorted(MOVED)) + r")\b"
    found = subprocess.run(["grep", "-rEn", "--include=*.py", pattern, str(PACKAGE)], capture_output=True, text=True)
    hits = [line for line in found.stdout.splitlines() if "/_moved.py:" not in line]
    assert hits == []


def test_the_entry_point_of_installed_scripts_still_resolves() -> None:
    from nvdeploy.cli import main

    assert callable(main)
