"""Shared test fixtures. The real-SSH harness comes from nvdeploy.testing (the public test API)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"

pytest_plugins = ["nvdeploy.testing.pytest_plugin"]


def sshd_available() -> bool:
    return shutil.which("sshd") is not None or os.path.exists("/usr/sbin/sshd")


@pytest.fixture
def requires_sshd() -> None:
    """Skip without sshd on a developer's machine; in CI (NVDEPLOY_REQUIRE_SSHD=1) a missing sshd fails."""
    if not sshd_available():
        if os.environ.get("NVDEPLOY_REQUIRE_SSHD"):
            pytest.fail("sshd is required in CI but missing (.ci/run installs openssh-server)")
        pytest.skip("OpenSSH's sshd is not installed")


@pytest.fixture
def write_inventory(tmp_path: Path):
    def write(text: str, name: str = "inv.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write
