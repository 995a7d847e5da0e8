"""The storage script run for real on this machine, into tmp_path: fio (or dd where fio is absent) measures both
directions and leaves no test file; a per-path timeout (a fio that never returns) is ERROR timeout and leaves no file
either: the script's EXIT trap removes it on the TERM of its timeout."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from nvdeploy.collect.storage_commands import FILE_PREFIX, build_storage
from nvdeploy.parsers.storage import parse_storage

ENV = {"LC_ALL": "C", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def run(host_vars, env=ENV):
    # Generous limit: a real process on a loaded machine (its own per-path timeouts are what the test is about).
    done = subprocess.run(build_storage(host_vars), capture_output=True, env=env, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    return parse_storage(done.stdout.decode())


def leftovers(path: Path):
    return [p.name for p in path.iterdir() if p.name.startswith(FILE_PREFIX)]


@pytest.mark.parametrize("tool", ["fio", "dd"])
def test_real_run_measures_both_directions_and_removes_its_file(tmp_path: Path, tool):
    env = dict(ENV)
    if tool == "fio" and shutil.which("fio") is None:
        pytest.skip("fio is not installed here (.ci/run installs it)")
    if tool == "dd":
        # A PATH without fio: the script falls back to dd with direct I/O.
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        for name in ("dd", "mktemp", "rm", "timeout", "sh"):
            found = shutil.which(name)
            assert found is not None
            (bin_dir / name).symlink_to(found)
        env["PATH"] = str(bin_dir)
    target = tmp_path / "data"
    target.mkdir()
    result = run({"storage_paths": {str(target): {}}, "storage_file_mib": 8, "storage_runtime_s": 5}, env)
    assert result.complete
    path = result.get(str(target))
    assert path is not None and path.status == "ok" and path.tool == tool
    assert path.step("write").gbps > 0 and path.step("read").gbps > 0
    assert leftovers(target) == []


def test_per_path_timeout_leaves_no_file(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "fio"
    fake.write_text("#!/bin/sh\nexec sleep 120\n")  # a fio stuck on a hung mount
    fake.chmod(0o755)
    target = tmp_path / "data"
    target.mkdir()
    env = dict(ENV, PATH=f"{bin_dir}:{ENV['PATH']}")
    result = run({"storage_paths": {str(target): {}, str(tmp_path / "absent"): {}}, "storage_timeout": 2}, env)
    assert [(p.path, p.status) for p in result.paths] == [(str(target), "timeout"), (str(tmp_path / "absent"),
                                                                                     "missing")]
    assert leftovers(target) == []


def test_hostile_path_is_a_name_not_code(tmp_path: Path):
    target = tmp_path / "d; touch pwned $(touch pwned2)"
    result = run({"storage_paths": {str(target): {}}, "storage_file_mib": 1, "storage_runtime_s": 1})
    assert result.paths[0].status == "missing"
    assert not (tmp_path / "pwned").exists() and not Path("pwned2").exists()


def test_a_test_file_a_killed_run_left_is_swept_and_another_runs_file_kept(tmp_path: Path):
    """A KILL before the trap (a tool stuck on a dead mount) leaves the file: the next run removes such files of
    its user once they are older than any run's limit, and leaves a file another run is writing now."""
    target = tmp_path / "data"
    target.mkdir()
    stale, live = target / f"{FILE_PREFIX}OLDKILLED", target / f"{FILE_PREFIX}RUNNING"
    stale.write_bytes(b"x" * 1024)
    live.write_bytes(b"y")
    hour_ago = stale.stat().st_mtime - 3600
    os.utime(stale, (hour_ago, hour_ago))
    result = run({"storage_paths": {str(target): {}}, "storage_file_mib": 8, "storage_runtime_s": 2})
    assert result.get(str(target)).status == "ok"
    assert leftovers(target) == [live.name]
