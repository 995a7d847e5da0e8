"""The node-side batch script's fixed part, nvdeploy/transport/batch.sh: package data, linted by shellcheck, and
assembled by batch.py into a script that a POSIX sh (dash here, as on Debian/Ubuntu nodes) runs as before."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from nvdeploy.transport import batch
from nvdeploy.transport.base import CommandSpec
from nvdeploy.transport.local import LocalTransport

SCRIPT = Path(batch.__file__).with_name("batch.sh")
SETTINGS = ("d", "nvd_grace_ticks", "nvd_period", "nvd_endm", "nvd_run", "nvd_lock_bases", "nvd_root_lock")


def _shellcheck() -> str:
    found = shutil.which("shellcheck")
    if found is None:
        if os.environ.get("NVDEPLOY_REQUIRE_SHELLCHECK"):
            pytest.fail("shellcheck is required in CI but missing (.ci/run installs it)")
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    return found


def test_the_script_has_its_three_parts_in_order_and_documents_every_setting() -> None:
    text = SCRIPT.read_text(encoding="utf-8")
    assert [m.group(1) for m in re.finditer(r"^# @part (\w+)$", text, re.M)] == ["isolate", "session", "prelude",
                                                                                "lock", "watcher"]
    header = text.split("# @part ", 1)[0]
    for name in SETTINGS:
        assert re.search(rf"^#\s+{name}\s", header, re.M), name


def test_shellcheck_finds_nothing_in_batch_sh() -> None:
    proc = subprocess.run([_shellcheck(), "-s", "sh", str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("options", [{}, {"heartbeat_lost_s": 60.0}, {"lock": False}, {"sudo_password": True}],
                         ids=["plain", "heartbeat", "unlocked", "sudo-password"])
def test_every_assembled_script_sets_what_batch_sh_reads_and_parses_as_sh(options: dict) -> None:
    specs = [CommandSpec("one", ("printf", "a b"), 5.0), CommandSpec("two", ("dmesg",), 5.0, sudo=True,
                                                                      keep_tail=True)]
    script = batch.build_script(specs, run_id="run 1; rm -rf /", **options)
    assert "{" + "grace_ticks}" not in script and "{" + "period}" not in script and "{" + "end}" not in script
    settings = next(line for line in script.splitlines() if line.startswith("nvd_grace_ticks="))
    assert "nvd_run='run 1; rm -rf /'" in settings  # quoted: a run id never reaches the shell as code
    assert f"nvd_period={30 if options.get('heartbeat_lost_s') else 0}" in settings
    # The shell batch: what follows the Python batch's start (whose words carry the lock setting too).
    runner = '"$nvd_x" -I -S -c ' + script.split('\n  "$nvd_x" -I -S -c ', 1)[1].split("\n  nvd_x=$?", 1)[0]
    shell = script.split("\ndone\n", 1)[1]
    assert ("@part" not in script) and (("flock" in shell) == options.get("lock", True))
    words = shlex.split(runner)
    assert words[:5] == ["$nvd_x", "-I", "-S", "-c", batch.RUNNER_CODE] and words[-1] == "$@"
    assert words[5:14] == ["$nvd_ours", "$PPID", "30", settings.split("nvd_period=")[1].split()[0],
                           "run 1; rm -rf /", "1" if options.get("lock", True) else "", "/run/lock /var/lock",
                           "/run/nvdeploy", "1" if options.get("sudo_password") else ""]
    dash = shutil.which("dash") or shutil.which("sh")
    assert dash is not None
    checked = subprocess.run([dash, "-n"], input=script, capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr


def test_the_assembled_script_runs_its_commands_and_frames_their_outputs(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("NVDEPLOY_LOCK_DIR", str(tmp_path / "lock"))
    specs = [CommandSpec("say", ("printf", "%s", "hello world"), 10.0),
             CommandSpec("fail", ("sh", "-c", "echo oops >&2; exit 3"), 10.0),
             CommandSpec("slow", ("sleep", "30"), 1.0)]
    transport = LocalTransport()
    try:
        results = transport.run_batch(specs)
    finally:
        transport.close()
    by_name = {r.name: r for r in results}
    assert (by_name["say"].rc, by_name["say"].stdout) == (0, b"hello world")
    assert (by_name["fail"].rc, by_name["fail"].stderr) == (3, b"oops\n")
    assert by_name["slow"].timed_out and by_name["slow"].rc is None
    assert [p.name for p in (tmp_path / "lock").iterdir()] == []  # holder info removed at the end


def test_the_python_batch_parses_as_the_oldest_system_python_it_runs_on() -> None:
    """RHEL 8's platform-python is 3.6: the Python batch the script carries must parse as 3.6 (no walrus, no
    positional-only parameters, no subscripted builtins outside strings), and on an older one reach its version
    check (no f-string). Python 3.13 parses as far back as 3.7 only."""
    import ast
    import sys

    oldest = (3, 6) if sys.version_info < (3, 13) else (3, 7)
    tree = ast.parse(batch.RUNNER_CODE, feature_version=oldest)
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert imported == {"os", "select", "_signal", "_stat", "sys", "time", "fcntl", "pwd"}
    assert "__future__" not in batch.RUNNER_CODE and not any(isinstance(n, ast.JoinedStr) for n in ast.walk(tree))
    assert "main" in names and not any(isinstance(node, ast.ImportFrom) for node in ast.walk(tree))


def test_the_python_batch_prints_the_lines_the_controller_reads() -> None:
    from nvdeploy.transport import batch_runner
    from nvdeploy.transport.node_paths import UNSAFE_MARKER

    assert (batch_runner.END_MARKER, batch_runner.BUSY_MARKER, batch_runner.STARTED_MARKER,
            batch_runner.RAN_MARKER) == (batch.END_MARKER, batch.BUSY_MARKER, batch.STARTED_MARKER, batch.RAN_MARKER)
    assert batch_runner.UNSAFE_MARKER == UNSAFE_MARKER.encode()


def test_the_largest_light_batch_fits_in_one_argument_with_the_python_batch() -> None:
    """The script is one argument of the node's login shell, which Linux holds to 128 KiB: every light collector
    (the NVML probe is ~75 KB of them) with a sudo password, for the profile with the most, fits with the Python
    batch; its commands are in it once."""
    from nvdeploy.collect.catalog import light_specs
    from nvdeploy.config.profiles import ProfileCatalog

    catalog = ProfileCatalog()
    for name in catalog.names():
        specs = light_specs({"sudo": True}, None, catalog.get(name))
        script = batch.build_script(specs, sudo_password=True, run_id="r", heartbeat_lost_s=60)
        assert " -I -S -c " in script, name
        assert len(script.encode()) <= batch.MAX_SCRIPT_BYTES < 128 * 1024
        probe = next(spec for spec in specs if spec.name == "nvml_probe")
        assert script.count(probe.argv[5][:200]) == 1  # its payload


def test_a_batch_too_large_for_the_python_batch_is_sent_with_the_shell_batch_alone(monkeypatch) -> None:
    specs = [CommandSpec("big", ("printf", "%s", "x" * 2000), 5.0), CommandSpec("two", ("true",), 5.0)]
    assert " -I -S -c " in batch.build_script(specs)
    monkeypatch.setattr(batch, "MAX_SCRIPT_BYTES", len(batch.build_script(specs)) - 1)
    script = batch.build_script(specs)
    assert " -I -S -c " not in script and script == batch.build_script(specs, python_runner=False)
    assert script.count("x" * 2000) == 1 and "nvd_cap 0 " in script
