"""The node-side folders nvdeploy writes in are checked before use (nvdeploy/transport/node_paths.py): the run
lock's folder (and where it goes by default), the temp folder's parent, the holder files, the MPS pipe folder, and
the stack ``find``s never reading through a link. Real folders, real ``sh``/``bash``, the local transport; the
same rows over real sshd as an unprivileged user are in tests/e2e/test_lifecycle_ssh.py; what a local user can plant
(modules, links, FIFOs, lock folders) is in test_node_isolation.py.

Run as root (folders are chowned to another uid); without root the other-owner rows are skipped.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from _catalog_helpers import context, result, run_check

from nvdeploy.collect.stack import MPS_CONTROL, build_mps
from nvdeploy.collect.stack_commands import CONTAINER_FIND_ARGV, CUDA_FIND_ARGV, MPS_UNSAFE_RC
from nvdeploy.results import CommandResult, ErrorReason, Verdict
from nvdeploy.transport import batch
from nvdeploy.transport.base import CommandSpec
from nvdeploy.transport.local import LocalTransport
from nvdeploy.transport.node_paths import SAFE_DIR_SH

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="chowning a folder to another user needs root")


def other_uid() -> int:
    """A uid that is neither root nor us: ``nobody``'s where it exists."""
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        return 65534


def _shells() -> list[str]:
    return [s for s in ("sh", "dash", "bash") if shutil.which(s)]


def _safe(shell: str, path: Path | str) -> tuple[bool, str]:
    script = SAFE_DIR_SH + '\nif nvd_safe "$1"; then echo OK; else printf "%s\\n" "$nvd_unsafe"; fi\n'
    out = subprocess.run([shell, "-c", script, "t", str(path)], capture_output=True, text=True, timeout=30,
                         env={**os.environ, "LC_ALL": "C"}).stdout.strip()
    return out == "OK", out


@pytest.fixture
def base(tmp_path):
    folder = tmp_path / "n"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    return folder


@pytest.mark.parametrize("shell", _shells())
def test_safe_folder_check_accepts_own_and_root_sticky_and_refuses_links_and_writable(shell, base):
    own = base / "own"
    own.mkdir(mode=0o700)
    sticky = base / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    writable = base / "writable"
    writable.mkdir()
    writable.chmod(0o777)
    group = base / "group"
    group.mkdir()
    group.chmod(0o770)
    (base / "link").symlink_to(own)
    assert _safe(shell, own) == (True, "OK")
    assert _safe(shell, "/tmp")[0] is True  # sticky and root-owned
    assert _safe(shell, sticky)[0] is (ROOT or sticky.stat().st_uid == 0)
    ok, why = _safe(shell, writable)
    assert not ok and f"{writable} is writable by other users" in why and "mode drwxrwxrwx" in why, why
    ok, why = _safe(shell, group)
    assert not ok and "writable by other users" in why and "drwxrwx---" in why, why
    ok, why = _safe(shell, base / "link")
    assert not ok and f"{base}/link is a symbolic link" in why, why
    ok, why = _safe(shell, base / "link" / "deeper")  # a link anywhere on the path
    assert not ok and "is a symbolic link" in why and f"on the path of {base}/link/deeper" in why, why
    assert _safe(shell, "relative/path") == (False, "relative/path is not an absolute path")
    assert _safe(shell, f"{own}/../own")[0] is False
    ok, why = _safe(shell, base / "missing")
    assert not ok and "cannot be checked" in why


@needs_root
@pytest.mark.parametrize("shell", _shells())
def test_safe_folder_check_refuses_another_users_folder_naming_owner_and_mode(shell, base):
    theirs = base / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, other_uid(), -1)
    ok, why = _safe(shell, theirs)
    assert not ok, why
    assert f"{theirs} is owned by another user" in why and f"uid {other_uid()}" in why and "drwxr-xr-x" in why, why
    # a folder below one that another user owns: they could rename it away and put their own in its place
    (theirs / "below").mkdir(mode=0o700)
    ok, why = _safe(shell, theirs / "below")
    assert not ok and f"{theirs} is owned by another user" in why, why


SYSTEM_PYTHONS = batch.SYSTEM_PYTHONS


def _witnessed(folder: Path) -> list[CommandSpec]:
    return [CommandSpec("w", ("touch", str(folder / "ran")), 10), CommandSpec("e", ("echo", "hi"), 10)]


@needs_root
def test_lock_folder_of_another_user_is_refused_error_lock_and_nothing_runs(node):
    lock = node / "lock"
    lock.mkdir(mode=0o1777)
    lock.chmod(0o1777)
    os.chown(lock, other_uid(), -1)
    results = LocalTransport().run_batch(_witnessed(node))
    assert [r.error for r in results] == [ErrorReason.LOCK, ErrorReason.LOCK]
    detail = results[0].error_detail
    assert f"run lock folder: {lock} is owned by another user" in detail, detail
    assert f"uid {other_uid()}" in detail and "mode drwxrwxrwt" in detail, detail
    # who made it, that nvdeploy did not, and how to clear it
    assert "not by nvdeploy" in detail and f"rm -rf -- {lock}" in detail, detail
    assert not (node / "ran").exists()  # nothing ran
    assert list(lock.iterdir()) == []  # no holder info written into their folder
    assert list((node / "tmp").iterdir()) == []


def test_lock_folder_that_is_a_link_is_refused_and_its_target_unchanged(node):
    target = node / "target"
    target.mkdir(mode=0o700)
    (node / "lock").symlink_to(target)
    results = LocalTransport().run_batch(_witnessed(node))
    assert {r.error for r in results} == {ErrorReason.LOCK}
    assert "is a symbolic link" in results[0].error_detail
    assert not (node / "ran").exists()
    assert list(target.iterdir()) == []


def test_lock_folder_writable_by_others_and_not_sticky_is_refused(node):
    lock = node / "lock"
    lock.mkdir()
    lock.chmod(0o777)
    results = LocalTransport().run_batch(_witnessed(node))
    assert {r.error for r in results} == {ErrorReason.LOCK}
    assert "writable by other users" in results[0].error_detail and "drwxrwxrwx" in results[0].error_detail
    assert not (node / "ran").exists()


def test_temp_folder_parent_writable_by_others_is_refused(node, monkeypatch):
    """The shell batch (a node without a system Python) keeps its FIFOs and frames in a temp folder: one under a
    folder others may write is refused. The Python batch keeps everything in memory and writes nothing there."""
    shared = node / "shared-tmp"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("TMPDIR", str(shared))
    monkeypatch.setattr(batch, "SYSTEM_PYTHONS", SYSTEM_PYTHONS)
    python_batch = LocalTransport().run_batch(_witnessed(node))
    assert {r.error for r in python_batch} == {None} and list(shared.iterdir()) == []
    (node / "ran").unlink()
    monkeypatch.setattr(batch, "SYSTEM_PYTHONS", ("/nonexistent/python3",))
    results = LocalTransport().run_batch(_witnessed(node))
    assert {r.error for r in results} == {ErrorReason.LOCK}
    assert results[0].error_detail.startswith("node folder not safe to use, nothing run: temp folder parent: ")
    assert not (node / "ran").exists() and list(shared.iterdir()) == []


def test_planted_holder_links_are_never_followed_nor_removed(node):
    """Links named like holder files, one with a pid that is gone (stale) and one with a live pid: the run writes
    its own holder info through neither, and the stale-holder clean-up removes only plain files of its user."""
    lock = node / "lock"
    lock.mkdir(mode=0o700)
    victim = node / "victim"
    victim.write_text("precious\n")
    (lock / "holder.999999999").symlink_to(victim)
    (lock / f"holder.{os.getpid()}").symlink_to(victim)
    (lock / "holder.999999998").write_text("user=ghost run=old since=then pid=999999998\n")  # a stale plain file
    results = LocalTransport().run_batch(_witnessed(node))
    assert [r.error for r in results] == [None, None], results
    assert (node / "ran").exists() and results[1].stdout == b"hi\n"
    assert victim.read_text() == "precious\n"
    assert sorted(p.name for p in lock.iterdir()) == sorted(["holder.999999999", f"holder.{os.getpid()}"])
    assert all((lock / n).is_symlink() for n in ("holder.999999999", f"holder.{os.getpid()}"))


def test_lock_folder_is_made_private_and_holds_a_fresh_holder_file_while_running(node):
    lock = node / "lock"
    transport = LocalTransport().bind("n1", "run-X")
    done: list = []
    worker = threading.Thread(target=lambda: done.extend(transport.run_batch([CommandSpec("s", ("sleep", "600"),
                                                                                          600)])))
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while not any(p.read_text().endswith("\n") for p in lock.glob("holder.*")) and time.monotonic() < deadline:
            time.sleep(0.05)  # the file is made first, then written
        (holder,) = lock.glob("holder.*")
        assert lock.stat().st_mode & 0o7777 == 0o700 and not lock.is_symlink()
        assert holder.is_file() and not holder.is_symlink() and holder.stat().st_uid == os.geteuid()
        text = holder.read_text()
        pid = holder.name.split(".")[1]
        assert f"run=run-X pid={pid} since=" in text, text
        refused = LocalTransport().bind("n1", "run-Y").run_batch([CommandSpec("a", ("true",), 5)])
        assert refused[0].error is ErrorReason.BUSY and "run run-X of user " in refused[0].error_detail
    finally:
        transport.close()
        worker.join(30)
    assert not worker.is_alive()


def _run_default(node: Path, monkeypatch, bases: tuple[str, ...], root_lock: str = "") -> list[CommandResult]:
    monkeypatch.delenv("NVDEPLOY_LOCK_DIR")
    monkeypatch.setattr(batch, "LOCK_BASES", bases)
    monkeypatch.setattr(batch, "ROOT_LOCK_DIR", root_lock or str(node / "missing-run" / "nvdeploy"))
    return LocalTransport().run_batch([CommandSpec("l", ("sh", "-c", "ls -d /proc/$PPID/fd/9 >/dev/null && "
                                                          "readlink /proc/$PPID/fd/9"), 10)])


@pytest.fixture
def system_lock(node):
    """A system lock folder as Debian's /run/lock (root's, 1777) and root's /run (0755) beside it."""
    system = node / "run-lock"
    system.mkdir()
    system.chmod(0o1777)
    run = node / "run"
    run.mkdir(mode=0o755)
    run.chmod(0o755)
    return system, run / "nvdeploy"


@needs_root
def test_default_lock_for_root_goes_where_only_root_can_make_it(node, monkeypatch, system_lock):
    system, root_lock = system_lock
    (result,) = _run_default(node, monkeypatch, (str(node / "missing"), str(system)), str(root_lock))
    assert result.error is None, result
    assert result.stdout.decode().strip() == str(root_lock)  # the folder the batch held open for flock
    assert root_lock.stat().st_mode & 0o7777 == 0o700  # root's own: nobody else can flock it
    assert not (system / "nvdeploy").exists()  # nothing made in the folder everyone may write


@needs_root
def test_default_lock_for_root_without_its_own_folder_goes_to_the_system_lock_folder(node, monkeypatch):
    """A node without /run (root's lock folder cannot be made): the system lock folder, as before."""
    system = node / "run-lock"
    system.mkdir()
    system.chmod(0o1777)
    (result,) = _run_default(node, monkeypatch, (str(node / "missing"), str(system)))
    assert result.error is None, result
    assert result.stdout.decode().strip() == str(system / "nvdeploy")
    assert (system / "nvdeploy").stat().st_mode & 0o7777 == 0o700


@needs_root
def test_default_lock_for_root_keeps_a_folder_an_admin_made_for_a_group(node, monkeypatch, system_lock):
    system, root_lock = system_lock
    shared = system / "nvdeploy"
    shared.mkdir()
    shared.chmod(0o1770)  # root:<group> 1770, as docs/operations.md offers: root and the group share one lock
    (result,) = _run_default(node, monkeypatch, (str(system),), str(root_lock))
    assert result.error is None, result
    assert result.stdout.decode().strip() == str(shared)
    assert not root_lock.exists()


@needs_root
@pytest.mark.parametrize("planted", ["folder", "link", "file"])
def test_a_lock_folder_another_user_made_does_not_stop_a_root_run(node, monkeypatch, system_lock, planted):
    """Anyone may make /run/lock/nvdeploy before root's first run after boot: root's run goes on, with its own lock
    where only root can make it, and leaves the planted thing as it was."""
    system, root_lock = system_lock
    mine = system / "nvdeploy"
    target = node / "elsewhere"
    target.mkdir(mode=0o777)
    if planted == "folder":
        mine.mkdir(mode=0o777)
        mine.chmod(0o777)
        os.chown(mine, other_uid(), -1)
    elif planted == "link":
        mine.symlink_to(target)
        os.lchown(mine, other_uid(), -1)
    else:
        mine.write_text("x\n")
        os.chown(mine, other_uid(), -1)
    (result,) = _run_default(node, monkeypatch, (str(system),), str(root_lock))
    assert result.error is None, result
    assert result.stdout.decode().strip() == str(root_lock)
    assert os.lstat(mine).st_uid == other_uid() and list(target.iterdir()) == []
    if planted == "folder":
        assert list(mine.iterdir()) == []  # no holder info written into their folder


@needs_root
def test_default_lock_without_a_system_folder_of_ours_goes_to_the_users_runtime_folder(node, monkeypatch):
    system = node / "run-lock"
    system.mkdir()
    system.chmod(0o1777)
    os.chown(system, other_uid(), -1)  # not ours to make a folder in: as for a user who is not root
    runtime = node / "runtime"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    (result,) = _run_default(node, monkeypatch, (str(system),))
    assert result.error is None, result
    assert result.stdout.decode().strip() == str(runtime / "nvdeploy")
    assert not (system / "nvdeploy").exists()


def _mps(pipe: Path, bin_dir: Path) -> subprocess.CompletedProcess:
    argv = build_mps({"mps_pipe_dir": str(pipe)}, None)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LC_ALL": "C"}
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env, stdin=subprocess.DEVNULL)


@pytest.fixture
def mps_tool(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "nvidia-cuda-mps-control"
    tool.write_text(f'#!/bin/sh\necho called >>"{tmp_path}/mps.calls"\ncat >/dev/null\nexit 0\n')
    tool.chmod(0o755)
    return bin_dir, tmp_path / "mps.calls"


def test_mps_pipe_folder_writable_by_others_is_refused_and_the_client_not_run(tmp_path, mps_tool):
    bin_dir, calls = mps_tool
    pipe = tmp_path / "nvidia-mps"
    pipe.mkdir()
    pipe.chmod(0o777)
    proc = _mps(pipe, bin_dir)
    assert proc.returncode == MPS_UNSAFE_RC and f"{pipe} is writable by other users" in proc.stderr, proc
    assert not calls.exists()
    res = result(MPS_CONTROL, proc.stdout, rc=proc.returncode, stderr=proc.stderr)
    (finding,) = run_check("gpu.mps", context({MPS_CONTROL: res}, host_vars={"mps": True, "mps_pipe_dir": str(pipe)}))
    assert (finding.verdict, finding.reason) == (Verdict.ERROR, ErrorReason.LOCK)
    assert f"{pipe} is writable by other users" in finding.summary


def test_mps_pipe_folder_safe_or_missing_runs_the_client(tmp_path, mps_tool):
    bin_dir, calls = mps_tool
    pipe = tmp_path / "nvidia-mps"
    assert _mps(pipe, bin_dir).returncode == 0  # missing: the client is asked (and finds no daemon)
    pipe.mkdir(mode=0o755)
    assert _mps(pipe, bin_dir).returncode == 0
    assert calls.read_text().split() == ["called", "called"]


def test_stack_finds_never_print_a_file_through_a_link(tmp_path):
    """A version.json, CDI spec or daemon.json that is a link to a secret is not printed into the evidence; the
    plain files still are."""
    secret = tmp_path / "secret"
    secret.write_text("TOPSECRET\n")
    local = tmp_path / "usr-local"
    (local / "cuda-12.4").mkdir(parents=True)
    (local / "cuda-12.4" / "version.json").write_text('{"cuda": {"version": "12.4.1"}}\n')
    (local / "cuda-13.0").mkdir()
    (local / "cuda-13.0" / "version.json").symlink_to(secret)
    cuda = [a.replace("/usr/local", str(local)) for a in CUDA_FIND_ARGV]
    out = subprocess.run(cuda, capture_output=True, text=True, timeout=30).stdout
    assert "12.4.1" in out and "TOPSECRET" not in out and f"== {local}/cuda-13.0/" in out, out
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    (cdi / "nvidia.yaml").write_text("cdiVersion: 0.5.0\n")
    (cdi / "evil.yaml").symlink_to(secret)
    container = [str(cdi) if a == "/etc/cdi" else a for a in CONTAINER_FIND_ARGV]
    out = subprocess.run(container, capture_output=True, text=True, timeout=30).stdout
    assert "cdiVersion: 0.5.0" in out and "TOPSECRET" not in out, out


def test_a_busy_run_reads_again_a_holder_file_still_being_written(node):
    """The holder makes its file and then writes its line: a run refused in between waits for the line rather than
    naming the holder "unknown"."""
    lock = node / "lock"
    lock.mkdir(mode=0o700)
    holder = lock / f"holder.{os.getpid()}.AbCdEf"
    holder.write_text("")
    folder = os.open(lock, os.O_RDONLY)  # the other run's lock: flock on the folder, as the batch script takes it
    try:
        fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        writer = threading.Timer(0.5, lambda: holder.write_text("user=ops run=run-X pid=1 since=t\n"))
        writer.start()
        try:
            refused = LocalTransport().bind("n1", "run-Y").run_batch([CommandSpec("a", ("true",), 5)])
        finally:
            writer.join()
    finally:
        os.close(folder)
    assert refused[0].error is ErrorReason.BUSY and "run run-X of user ops" in refused[0].error_detail, refused


def test_a_busy_run_names_an_empty_holder_file_unknown_after_a_short_wait(node):
    lock = node / "lock"
    lock.mkdir(mode=0o700)
    (lock / f"holder.{os.getpid()}.AbCdEf").write_text("")
    folder = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        refused = LocalTransport().bind("n1", "run-Y").run_batch([CommandSpec("a", ("true",), 5)])
    finally:
        os.close(folder)
    assert refused[0].error is ErrorReason.BUSY and "holder unknown" in refused[0].error_detail, refused
