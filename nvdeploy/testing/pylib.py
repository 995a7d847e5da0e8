"""What the fake tools of the SSH test harness run with: an interpreter the test user can execute, and a copy of
the nvdeploy package (plus its pure-Python dependencies) where that user can read it, made once per session from a
template; the fake tool wrappers installed into each node's folder."""

from __future__ import annotations

import atexit
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from nvdeploy.testing.errors import HarnessError


def python_for(user: str) -> str:
    """An interpreter ``user`` can execute: ours if every folder on its path is world-searchable, else python3."""
    import pwd

    if pwd.getpwuid(os.geteuid()).pw_name == user:
        return sys.executable
    ok = True
    for path in {Path(sys.executable), Path(os.path.realpath(sys.executable))}:
        for parent in path.parents:
            try:
                if not parent.stat().st_mode & 0o001:
                    ok = False
            except OSError:
                ok = False
    if ok:
        return sys.executable
    return shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or sys.executable


_PYLIB_TEMPLATES: dict[str, Path] = {}  # tool interpreter -> a compiled copy of nvdeploy, made once per process


def _remove_templates() -> None:
    for template in _PYLIB_TEMPLATES.values():
        shutil.rmtree(template.parent, ignore_errors=True)
    _PYLIB_TEMPLATES.clear()


def _pylib_template(python: str) -> Path:
    """A world-readable copy of nvdeploy (with its built-in data), byte-compiled by ``python``; made once per
    process and interpreter.

    Compiled because the fake tools import nvdeploy from it as the unprivileged test user, who cannot write
    ``__pycache__`` there: without it every fake tool call compiled the simulator from source (about a third of
    its CPU). ``copytree`` keeps modification times, so the ``.pyc`` files stay valid in each cluster's copy.
    """
    if python in _PYLIB_TEMPLATES:
        return _PYLIB_TEMPLATES[python]
    import nvdeploy
    from nvdeploy.config.builtin import data_dir

    if not _PYLIB_TEMPLATES:
        atexit.register(_remove_templates)
    pylib = Path(tempfile.mkdtemp(prefix="nvd-pylib-")) / "pylib"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "_data")
    shutil.copytree(Path(nvdeploy.__file__).parent, pylib / "nvdeploy", ignore=ignore)
    shutil.copytree(data_dir("checks"), pylib / "nvdeploy" / "_data" / "checks", ignore=ignore)
    # The simulator's own dependencies (PyYAML for scenarios, ClusterShell for host ranges, defusedxml for the
    # parsers the simulated package tools share with the install actions), for a node python that lacks them:
    # pure-Python packages, copied from this interpreter's.
    for name in ("yaml", "ClusterShell", "defusedxml"):
        probe = subprocess.run([python, "-c", f"import {name}"], capture_output=True, timeout=30)
        if probe.returncode != 0:
            module = importlib.import_module(name)
            shutil.copytree(Path(module.__file__).parent, pylib / name, ignore=shutil.ignore_patterns("__pycache__"))
    # Not compiled is only slower: a failure here leaves the sources, which still import.
    subprocess.run([python, "-m", "compileall", "-q", str(pylib)], stdin=subprocess.DEVNULL,
                   capture_output=True, timeout=300, check=False)
    for folder, _dirs, files in os.walk(pylib):
        os.chmod(folder, 0o755)  # noqa: S103 - the unprivileged test user must read it
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)
    _PYLIB_TEMPLATES[python] = pylib
    return pylib


def copy_pylib(workdir: Path, python: str) -> Path:
    """A world-readable, byte-compiled copy of nvdeploy (with its built-in data) for the fake tools of the test
    user.

    The checkout or the project's interpreter may sit below a private folder (``/root`` is 0700): the fake
    tools run as the unprivileged test user, so they import nvdeploy (and PyYAML where that interpreter lacks
    it) from this copy. Each cluster gets its own copy of :func:`_pylib_template` (its workdir is removed whole).
    """
    pylib = workdir / "pylib"
    shutil.copytree(_pylib_template(python), pylib)
    pylib.chmod(0o755)
    return pylib


def fake_tool_installer() -> Any:
    try:
        from nvdeploy.sim import fake_tool
    except ModuleNotFoundError as exc:
        if exc.name in ("nvdeploy.sim", "nvdeploy.sim.fake_tool"):
            return None  # not written yet: bin folders stay empty
        raise
    return getattr(fake_tool, "install_fake_tools", None)


def check_traversable(path: Path) -> None:
    for parent in [path, *path.parents]:
        if not parent.stat().st_mode & 0o001:
            raise HarnessError(f"{parent} is not searchable by other users (mode {parent.stat().st_mode & 0o777:o});"
                               " the fake nodes' login user could not reach its files: chmod o+x it or pass no workdir")


