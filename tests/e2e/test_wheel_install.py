"""The built-in checks, profiles, playbooks and inventories work from an installed wheel, not only a checkout."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_installed_wheel_runs_the_demo_from_another_directory(tmp_path):
    env_dir = tmp_path / "venv"
    # System site-packages supply the dependencies already installed here; nvdeploy itself is installed into
    # the venv from a built wheel, which shadows any editable install of the checkout.
    venv.EnvBuilder(system_site_packages=True, with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    wheel_dir = tmp_path / "wheel"
    subprocess.run([str(python), "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(wheel_dir), str(ROOT)], check=True, stdin=subprocess.DEVNULL, timeout=300)
    wheel = next(wheel_dir.glob("nvdeploy-*.whl"))
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-build-isolation", str(wheel)], check=True,
                   stdin=subprocess.DEVNULL, timeout=300)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run([str(python), "-c", "import nvdeploy.builtin as b; print(b.data_dir('checks'))"],
                           cwd=elsewhere, capture_output=True, text=True, check=True, timeout=60)
    assert str(env_dir) in where.stdout, where.stdout
    nvdeploy = env_dir / "bin" / "nvdeploy"
    proc = subprocess.run([str(nvdeploy), "validate", "-i", "demo", "--out", str(elsewhere / "out")], cwd=elsewhere,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run_dir = next((elsewhere / "out" / "demo").iterdir())
    data = json.loads((run_dir / "results.json").read_text())
    assert data["profiles"] == {"h100-sxm-8x": "h100-sxm-8x@2026.11.1"}
    assert (run_dir / "report.html").stat().st_size > 1000
    listing = subprocess.run([str(nvdeploy), "checks", "list"], cwd=elsewhere, capture_output=True, text=True,
                             timeout=60)
    assert "kmsg.xid" in listing.stdout
    assert sys.executable  # the test ran under the project's interpreter
