"""What a local user of a GPU node can plant must never reach a root run of nvdeploy (issue: root code execution
from a writable folder, a lock holder read through a swapped link, a lock folder any user can pre-create).

Real processes on this machine through the local transport, both node batches (the ``node`` fixture of
conftest.py runs each test with the Python batch and again with the shell batch). The same planted modules
over real sshd are in tests/e2e/test_validate_ssh.py. Run as root in CI; rows that need another user skip without
root.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest
from test_node_paths import needs_root, other_uid

from nvdeploy.collect.catalog import COLLECTORS
from nvdeploy.collect.probe.ship import BOOTSTRAP, SYSTEM_PYTHONS, launched_python, probe_argv
from nvdeploy.results import ErrorReason, Finding, Verdict
from nvdeploy.slurm.drain import Policy, plan_action
from nvdeploy.slurm.nodes import SlurmNode
from nvdeploy.transport import batch
from nvdeploy.transport.base import CommandSpec
from nvdeploy.transport.local import LocalTransport

PLANTED_MODULES = ("base64", "json", "zlib", "types")


def _plant(folder: Path, marker: Path) -> None:
    """Modules a probe run from ``folder`` would import first, each leaving ``marker`` when it runs."""
    for name in PLANTED_MODULES:
        (folder / f"{name}.py").write_text(f"open({str(marker)!r}, 'a').write('{name} ran\\n')\n")
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    for tool in ("python3", "true", "nvidia-smi"):
        (bin_dir / tool).write_text(f"#!/bin/sh\necho '{tool} ran' >>{marker}\n")
        (bin_dir / tool).chmod(0o755)


def _probe_spec() -> CommandSpec:
    return CommandSpec("nvml_probe", probe_argv(), 60)


@pytest.fixture
def planted(tmp_path, monkeypatch):
    folder = tmp_path / "writable"
    folder.mkdir()
    folder.chmod(0o1777)  # as /tmp, or a checkout a group can write
    marker = tmp_path / "PWNED"
    _plant(folder, marker)
    return folder, marker


def test_the_probe_is_started_isolated_from_a_fixed_path_never_the_paths_python3():
    argv = probe_argv()
    assert argv[0] == "/bin/sh" and launched_python(argv) == SYSTEM_PYTHONS
    assert all(p.startswith("/") for p in SYSTEM_PYTHONS)
    assert '"$x" -I -S -c "$b" "$p"' in argv[2] and argv[4] == BOOTSTRAP
    assert COLLECTORS["nvml_probe"].build({"probe_python": "/opt/py/bin/python3.11"}, None)[6:] == \
        ("/opt/py/bin/python3.11",)


def test_a_probe_started_from_a_writable_folder_never_imports_what_was_planted_there(node, planted, monkeypatch):
    """``python3 -c`` puts the working folder first on sys.path: root started from /tmp ran a planted base64.py. The
    batch works from /, the probe runs isolated (-I -S), and a relative PATH entry (".", "bin") is dropped, so
    neither the planted modules nor a planted python3/true/nvidia-smi run; the results equal a run from /."""
    folder, marker = planted
    monkeypatch.setenv("PATH", f"bin:.::{os.environ['PATH']}")
    specs = [_probe_spec(), CommandSpec("t", ("true",), 10),
             CommandSpec("w", ("sh", "-c", 'pwd; printf "%s\\n" "$PATH"'), 10), CommandSpec("s", ("nvidia-smi",), 10)]
    monkeypatch.chdir(folder)
    planted_run = LocalTransport().run_batch(specs)
    assert not marker.exists(), marker.read_text()
    monkeypatch.chdir("/")
    clean_run = LocalTransport().run_batch(specs)
    assert [(r.rc, r.error) for r in planted_run] == [(r.rc, r.error) for r in clean_run]
    assert planted_run[0].stdout == clean_run[0].stdout and planted_run[0].stdout.startswith(b'{"format": "nvml"')
    where, path = planted_run[2].stdout.decode().split()
    assert where == "/" and all(entry.startswith("/") for entry in path.split(":")), path
    assert planted_run[3].rc == 127  # not the planted bin/nvidia-smi
    assert not marker.exists()


def test_a_probe_python_that_is_missing_is_exit_127_and_nvidia_smi_is_used(node):
    (result,) = LocalTransport().run_batch([CommandSpec("nvml_probe", probe_argv("/nonexistent/python3"), 30)])
    assert result.rc == 127 and b"no Python at /nonexistent/python3" in result.stderr, result


# ------------------------------------------------------------------------------------------- holder files


@pytest.fixture
def group_lock(node):
    """The run lock folder as an admin makes it for a group (root:<group> 1770), held by a live run."""
    lock = node / "lock"
    lock.mkdir()
    lock.chmod(0o1770)
    secret = node / "shadow"
    secret.write_text("root:$6$SECRETHASH:19000:0:99999:7:::\n")
    secret.chmod(0o600)
    held = os.open(lock, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    yield lock, secret
    os.close(held)


def _busy_detail() -> str:
    refused = LocalTransport().bind("n1", "run-Y").run_batch([CommandSpec("a", ("true",), 5)])
    assert refused[0].error is ErrorReason.BUSY, refused
    return refused[0].error_detail


@needs_root
def test_a_holder_hard_linked_to_a_secret_is_never_read(group_lock):
    """A hard link passes every check by name (a plain file, not a link): fstat's link count gives it away."""
    lock, secret = group_lock
    os.link(secret, lock / f"holder.{os.getpid()}.AbCdEf")
    detail = _busy_detail()
    assert "SECRETHASH" not in detail and "holder unreadable" in detail and "has other hard links" in detail, detail


def test_a_holder_that_is_a_link_to_a_secret_is_named_unreadable_never_followed(group_lock):
    lock, secret = group_lock
    (lock / f"holder.{os.getpid()}.AbCdEf").symlink_to(secret)
    detail = _busy_detail()
    assert "SECRETHASH" not in detail and "holder unreadable" in detail and "symbolic link" in detail, detail


def test_a_holder_that_is_a_fifo_never_blocks_the_busy_answer(group_lock):
    lock, _ = group_lock
    os.mkfifo(lock / f"holder.{os.getpid()}.AbCdEf")
    answered: list = []
    worker = threading.Thread(target=lambda: answered.append(_busy_detail()), daemon=True)
    worker.start()
    worker.join(30)
    assert answered, "the busy run blocked on the FIFO"
    assert "holder unreadable" in answered[0] and "not a plain file" in answered[0], answered


def test_the_python_batch_reads_a_holder_without_following_a_link_swapped_in_after_its_check(tmp_path, monkeypatch):
    """The race itself: the name is a plain file when it is listed and a link when it is opened."""
    from nvdeploy.transport import batch_runner

    secret = tmp_path / "secret"
    secret.write_text("SECRET\n")
    holder = tmp_path / "holder.1.x"
    holder.symlink_to(secret)
    assert batch_runner.holder_line(str(holder)) == (None, "is a symbolic link or cannot be opened")
    holder.unlink()
    holder.write_text("user=ops run=r pid=1 since=t\n")
    assert batch_runner.holder_line(str(holder)) == (b"user=ops run=r pid=1 since=t", None)
    holder.write_text("user=ops")  # no whole line yet
    assert batch_runner.holder_line(str(holder)) == (None, None)


# ------------------------------------------------------------------------------- lock folders of other users


def _nobody() -> tuple[int, int]:
    entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid


@needs_root
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) runs the batch as another user")
def test_a_user_who_is_not_root_is_refused_a_lock_folder_another_user_made_with_who_and_how_to_remove(
        node, monkeypatch):
    """The rule for users who are not root is unchanged (a folder another user made is refused, nothing runs), and
    the message says who made it and how to clear it."""
    uid, gid = _nobody()
    top = Path(tempfile.mkdtemp(prefix="nvd-iso-", dir="/tmp"))
    try:
        top.chmod(0o755)
        system = top / "run-lock"
        system.mkdir()
        system.chmod(0o1777)
        theirs = system / "nvdeploy"
        theirs.mkdir()
        os.chown(theirs, other_uid() + 1 if other_uid() + 1 != uid else other_uid() + 2, -1)
        scratch = top / "tmp"
        scratch.mkdir()
        os.chown(scratch, uid, gid)
        monkeypatch.setenv("TMPDIR", str(scratch))
        monkeypatch.delenv("NVDEPLOY_LOCK_DIR")
        monkeypatch.setattr(batch, "LOCK_BASES", (str(system),))
        monkeypatch.setattr(batch, "ROOT_LOCK_DIR", str(top / "run" / "nvdeploy"))
        transport = LocalTransport()
        transport.shell = ("setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "/bin/sh", "-c")
        witness = top / "ran"
        results = transport.run_batch([CommandSpec("w", ("sh", "-c", f"echo >{witness}"), 10)])
        assert results[0].error is ErrorReason.LOCK, results
        detail = results[0].error_detail
        assert f"{theirs} is owned by another user" in detail and "not by nvdeploy" in detail, detail
        assert f"rm -rf -- {theirs}" in detail, detail
        assert not witness.exists()
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_node_check_does_not_drain_a_node_for_a_lock_folder_another_user_made():
    finding = Finding("system.lock", Verdict.ERROR, "not checked: node folder not safe to use, nothing run: run lock "
                      "folder: /run/lock/nvdeploy is owned by another user (owner eve, uid 1001; mode drwxrwxrwx)",
                      node="gpu01", reason=ErrorReason.LOCK)
    slurm = SlurmNode("gpu01", "idle", (), "", "", "gpu:8", ("p",), (), 0)
    action = plan_action("gpu01", Verdict.ERROR, [finding], slurm, Policy(drain_failed=True, drain_on_error=True),
                         "nvdeploy node-check")
    assert action.action == "none" and "not judged (lock)" in action.message, action


def test_the_node_check_state_folder_follows_root_s_lock_rule(tmp_path, monkeypatch):
    from nvdeploy.cli.commands import node_check_state

    if os.geteuid() != 0:
        pytest.skip("root's rule")
    system = tmp_path / "run-lock"
    system.mkdir()
    system.chmod(0o1777)
    (system / "nvdeploy").mkdir()
    os.chown(system / "nvdeploy", other_uid(), -1)
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    monkeypatch.setattr(batch, "LOCK_BASES", (str(system),))
    monkeypatch.setattr(batch, "ROOT_LOCK_DIR", str(run / "nvdeploy"))
    folder, why = node_check_state.state_dir({})
    assert folder == run / "nvdeploy" and why == "", why


def test_the_batch_script_changes_to_root_and_drops_relative_path_entries():
    script = batch.build_script([CommandSpec("t", ("true",), 5)])
    assert script.index("cd / ||") < script.index("set -- ")
    env = {"PATH": "bin:.::/usr/bin:/bin:relative/x", "LC_ALL": "C"}
    out = subprocess.run(["/bin/sh", "-c", batch._PARTS["isolate"] + '\nprintf "%s %s" "$PWD" "$PATH"'],
                         capture_output=True, text=True, env=env, cwd=tempfile.gettempdir(), timeout=10).stdout
    assert out == "/ /usr/bin:/bin", out
