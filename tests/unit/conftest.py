"""Fixtures shared by the unit tests of the node side."""

from __future__ import annotations

import pytest

from nvdeploy.transport import batch


@pytest.fixture(params=["python", "shell"])
def node(request, tmp_path, monkeypatch):
    """A local node: its own temp folder, lock folder path, and a witness file that proves a command ran. Each test
    runs with the Python batch and again with the shell batch (a node without a system Python)."""
    if request.param == "shell":
        monkeypatch.setattr(batch, "SYSTEM_PYTHONS", ("/nonexistent/python3",))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setenv("NVDEPLOY_LOCK_DIR", str(tmp_path / "lock"))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    return tmp_path
