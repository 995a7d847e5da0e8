"""The built-in checks, profiles, playbooks and inventories work from an installed package, not only a checkout.

The package is installed the README's way (``python3 -m venv`` then ``pip install .``) into a clean virtualenv that
sees none of the site-packages of the interpreter running the tests: so this passes the same from a plain
interpreter, from inside a virtualenv (the venv is made from the base interpreter, as ``venv`` always does) and in
CI. ``test_run_sh_on_a_fresh_copy_runs_the_wheel_test_in_its_own_venv`` runs the README's test command on a fresh
copy of the checkout: it makes that copy's ``.venv`` and runs the first test inside it, pytest and all.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NESTED = "NVDEPLOY_TEST_NESTED_RUN"  # set for the run that tests/run.sh makes below: it must not recurse
# What a fresh clone would not have: venvs, build outputs, caches, run reports.
_NOT_IN_A_CLONE = shutil.ignore_patterns(".git", ".venv", "venv", "build", "dist", "*.egg-info", "__pycache__",
                                         ".pytest_cache", ".ruff_cache", ".hypothesis", "reports")


def _copy_checkout(dest: Path) -> Path:
    shutil.copytree(ROOT, dest, ignore=_NOT_IN_A_CLONE, symlinks=True)
    return dest


def _outside_env() -> dict[str, str]:
    """The environment of a shell that has not activated the virtualenv this test may run in."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "__PYVENV_LAUNCHER__")}
    if sys.prefix != sys.base_prefix:
        active = os.path.join(sys.prefix, "bin")
        env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p.rstrip("/") != active)
    return env


def _run(argv: list[str], timeout: int, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout, **kwargs)


def test_setup_cfg_ships_every_package_of_the_checkout():
    """A package left out of setup.cfg's explicit list works in a checkout and breaks every installed copy."""
    import configparser

    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    listed = set(config["options"]["packages"].split())
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "nvdeploy").rglob("__init__.py")
             if "__pycache__" not in p.parts and "_data" not in p.parts}
    assert found and found <= listed, sorted(found - listed)


@pytest.mark.timeout(900)
def test_installed_package_runs_the_demo_from_another_directory(tmp_path):
    if os.environ.get(NESTED):  # the run below: pytest itself must be running inside the copy's new .venv
        assert sys.prefix != sys.base_prefix and Path(sys.prefix) == ROOT / ".venv", (sys.prefix, sys.base_prefix)
    source = _copy_checkout(tmp_path / "src")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    install = _run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "."], 600,
                   cwd=source, env=_outside_env())
    assert install.returncode == 0, install.stdout + install.stderr[-3000:]
    shutil.rmtree(source)  # a real install, not a link back to the sources
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = ("import importlib.util, sys, nvdeploy.config.builtin as b; "
             "print(sys.prefix); print(b.data_dir('checks')); print(importlib.util.find_spec('pytest') is None)")
    where = _run([str(python), "-c", probe], 60, cwd=elsewhere, env=_outside_env())
    assert where.returncode == 0, where.stderr
    prefix, checks_dir, no_pytest = where.stdout.split("\n")[:3]
    assert Path(prefix) == env_dir and str(env_dir) in checks_dir
    assert no_pytest == "True"  # nothing leaks in from the interpreter running this test
    nvdeploy = env_dir / "bin" / "nvdeploy"
    proc = _run([str(nvdeploy), "validate", "-i", "demo", "--out", str(elsewhere / "out")], 300, cwd=elsewhere,
                env=_outside_env())
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run_dir = next((elsewhere / "out" / "demo").iterdir())
    data = json.loads((run_dir / "results.json").read_text())
    assert data["profiles"] == {"h100-sxm-8x": "h100-sxm-8x@2026.11.1"}
    assert (run_dir / "report.html").stat().st_size > 1000
    listing = _run([str(nvdeploy), "checks", "list"], 60, cwd=elsewhere, env=_outside_env())
    assert "kmsg.xid" in listing.stdout


@pytest.mark.timeout(1200)
def test_run_sh_on_a_fresh_copy_runs_the_wheel_test_in_its_own_venv(tmp_path):
    if os.environ.get(NESTED):
        pytest.skip("this is the nested run this test makes")
    source = _copy_checkout(tmp_path / "clone")
    env = _outside_env()
    env[NESTED] = "1"
    proc = _run(["bash", "tests/run.sh", "tests/e2e/test_wheel_install.py", "-q", "-n", "0", "-p", "no:cacheprovider",
                 "-k", "installed_package"], 1100, cwd=source, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "1 passed" in proc.stdout, out[-2000:]  # the nested run asserts it ran inside the .venv
    made = _run([str(source / ".venv" / "bin" / "python"), "-I", "-c",
                 "import sys, nvdeploy; print(sys.prefix != sys.base_prefix, nvdeploy.__file__)"], 60, cwd=tmp_path)
    assert made.stdout.split() == ["True", str(source / "nvdeploy" / "__init__.py")]  # editable, from the copy
