"""Shared test fixtures. The real-SSH harness comes from nvdeploy.testing (the public test API)."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"

pytest_plugins = ["nvdeploy.testing.pytest_plugin"]


def sshd_available() -> bool:
    return shutil.which("sshd") is not None or os.path.exists("/usr/sbin/sshd")


@pytest.fixture(params=["python", "shell"])
def each_batch(request, monkeypatch) -> str:
    """Runs a test with the Python batch and again with the shell batch (a node without a system Python)."""
    if request.param == "shell":
        from nvdeploy.transport import batch

        monkeypatch.setattr(batch, "SYSTEM_PYTHONS", ("/nonexistent/python3",))
    return request.param


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


@pytest.fixture
def ctrl_c_reaches_main():
    """Ctrl-C as the tests simulate it (``_thread.interrupt_main``) raises KeyboardInterrupt in the main thread.

    A process started in the background by a shell without job control inherits SIGINT ignored, and then the
    simulated Ctrl-C does nothing: the run under test would wait for its hung nodes until the test's timeout.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="session", autouse=True)
def state_dir_outside_home(tmp_path_factory: pytest.TempPathFactory):
    """A command run from a folder without ./reports keeps its runs in $XDG_STATE_HOME/nvdeploy: in the tests that
    is a temporary folder, never the real home; an operator's NVDEPLOY_STATE_DIR does not reach the tests."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("xdg-state")))
        patch.delenv("NVDEPLOY_STATE_DIR", raising=False)
        yield
