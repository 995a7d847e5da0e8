"""The batch's lifecycle without sshd: the run-wide sudo gate, the batch frames (busy, sudo not run), the
local transport (abort ends everything, node-side output cap with the true size, the node lock, one password
attempt, no password in children's environment), and the SSH reader (EOF before the exit status; a bounded exec
request) against a fake paramiko channel."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Callable

import pytest

from nvdeploy.results import ErrorReason
from nvdeploy.transport import batch
from nvdeploy.transport.base import CommandSpec
from nvdeploy.transport.local import LocalTransport
from nvdeploy.transport.ssh import SSHTransport
from nvdeploy.transport.sudo_gate import SudoGate

FAKE_SUDO = """#!/bin/sh
# Test sudo: records each call; the password "Corr3ct-Pw" is accepted, any other refused as sudo 1.9 does.
echo "$*" >>"$NVD_TEST_SUDO_CALLS"
if [ "$1" = "-S" ]; then
  IFS= read -r pw
  if [ "$pw" != Corr3ct-Pw ]; then
    echo "Sorry, try again." >&2; echo "sudo: no password was provided" >&2
    echo "sudo: 1 incorrect password attempt" >&2; exit 1
  fi
  shift 3
fi
[ "$1" = "-n" ] && shift
[ "$1" = "--" ] && shift
exec "$@"
"""


def _wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def node_env(tmp_path, monkeypatch):
    """A private temp dir, lock dir, fake sudo, and a marker in the environment of every batch process."""
    marker = f"NVD_TEST_MARK={tmp_path}"
    (tmp_path / "tmp").mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sudo").write_text(FAKE_SUDO)
    (bin_dir / "sudo").chmod(0o755)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setenv("NVDEPLOY_LOCK_DIR", str(tmp_path / "lock"))
    monkeypatch.setenv("NVD_TEST_SUDO_CALLS", str(tmp_path / "sudo.calls"))
    monkeypatch.setenv("NVD_TEST_MARK", str(tmp_path))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return tmp_path, marker.encode()


def _marked(marker: bytes) -> list[int]:
    """Live processes whose environment carries ``marker`` (the batch's and its tools')."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                environ = Path(f"/proc/{entry.name}/environ").read_bytes().split(b"\0")
                stat = Path(f"/proc/{entry.name}/stat").read_bytes()
            except OSError:
                continue
            if marker in environ and stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X"):
                found.append(int(entry.name))
    return found


def _sudo_calls(folder: Path) -> list[str]:
    path = folder / "sudo.calls"
    return path.read_text().splitlines() if path.exists() else []


# ------------------------------------------------------------------------------------------------- sudo gate


def test_gate_lets_one_node_probe_and_the_others_follow_its_answer():
    gate = SudoGate("pw")
    first = gate.claim("gpu001", 5)
    assert first.probing and first.password == "pw"
    answers: list = []
    waiter = threading.Thread(target=lambda: answers.append(gate.claim("gpu002", 30)))
    waiter.start()
    time.sleep(0.3)
    assert answers == []  # waits while gpu001 probes
    gate.report("gpu001", True)
    waiter.join(10)
    (second,) = answers
    assert second.password is None and second.reason is ErrorReason.SUDO
    assert second.detail == "password rejected on gpu001; not tried here"
    assert gate.password() is None and gate.rejected_on == "gpu001"
    assert "pw" not in repr(gate) and "pw" not in repr(first)


def test_gate_accepted_opens_for_all_and_a_probe_without_answer_passes_the_role_on():
    gate = SudoGate("pw")
    assert gate.claim("a", 1).probing
    gate.release("a")  # a's batch ended without an answer (unreachable, sudo hung)
    b = gate.claim("b", 1)
    assert b.probing and b.password == "pw"
    gate.report("b", False)
    c = gate.claim("c", 1)
    assert (c.password, c.probing, c.reason) == ("pw", False, None)
    assert SudoGate(None).claim("x", 1).password is None


def test_gate_waiter_is_interrupted_and_bounded():
    gate = SudoGate("pw")
    gate.claim("a", 1)
    assert gate.claim("b", 10, stopped=lambda: True).reason is ErrorReason.INTERRUPTED
    bounded = gate.claim("b", 0.2)
    assert bounded.password is None and "did not finish" in bounded.detail


# ---------------------------------------------------------------------------------------------------- frames


def test_busy_frame_makes_every_command_error_busy_naming_the_holder():
    specs = [CommandSpec("a", ("true",), 5), CommandSpec("b", ("true",), 5)]
    raw = b"__NVD_BUSY__ user=ops run=20261201T0640Z-abc since=2026-12-01T06:40:00Z pid=42\n__NVD_BATCH_END__\n"
    results = batch.parse_output(specs, raw, 0.1)
    assert [r.error for r in results] == [ErrorReason.BUSY, ErrorReason.BUSY]
    assert results[0].error_detail == ("another nvdeploy run holds the node lock: run 20261201T0640Z-abc of user ops "
                                       "since 2026-12-01T06:40:00Z (pid 42)")
    # A tool cannot fake it: only the very first line of the answer counts.
    fake = b"__NVD_CMD 0 rc=0 out=0/0 err=0/0__\n" + raw
    assert batch.parse_output(specs[:1], fake, 0.1)[0].error is not ErrorReason.BUSY


def test_sudo_not_run_frames_and_the_early_password_check():
    specs = [CommandSpec("kmsg", ("dmesg",), 5, sudo=True), CommandSpec("lspci", ("lspci",), 5)]
    err = b"Sorry, try again.\nsudo: 1 incorrect password attempt\n"
    fake_header = b"__NVD_CMD 1 rc=0 out=0/0 err=0/0__\n"
    raw = (b"__NVD_SUDO__ rc=1 err=%d\n" % (len(err) + len(fake_header)) + err + fake_header
           + b"__NVD_CMD 0 rc=s1 out=0/0 err=%d/%d__\n" % (len(err), len(err)) + err
           + b"__NVD_CMD 1 rc=0 out=3/3 err=0/0__\nabc__NVD_BATCH_END__\n")
    assert batch.sudo_outcome(raw) == (1, err + fake_header)
    assert batch.password_rejected(1, err) is True
    assert batch.password_rejected(1, b"ops is not in the sudoers file.  This incident will be reported.\n") is False
    assert batch.password_rejected(127, b"sh: 1: sudo: not found\n") is None  # no answer: the next node tries
    assert batch.password_rejected(124, b"") is None
    kmsg, lspci = batch.parse_output(specs, raw, 0.1)
    assert (kmsg.rc, kmsg.error) == (None, ErrorReason.SUDO)
    assert "sudo refused the password" in kmsg.error_detail and kmsg.stderr == err
    assert (lspci.rc, lspci.stdout, lspci.error) == (0, b"abc", None)


# ------------------------------------------------------------------------------------------- local transport


def test_local_output_is_capped_on_the_node_with_the_true_size(node_env, each_batch):
    folder, _ = node_env
    specs = [
        CommandSpec("head", ("sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' a; echo END"), 30, max_bytes=1000),
        CommandSpec("tail", ("sh", "-c", "seq 1 200000"), 30, max_bytes=100, keep_tail=True),
        CommandSpec("flood", ("sh", "-c", "head -c 20000000 /dev/zero; sleep 3"), 30, max_bytes=65536),
    ]
    sizes: list[int] = []
    stop = threading.Event()

    def watch() -> None:  # the node's temp folder, while the flood's tool is still running
        while not stop.is_set():
            sizes.append(sum(f.stat().st_size for f in (folder / "tmp").rglob("*") if f.is_file() and
                             not f.is_fifo()))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with LocalTransport() as transport:
            head, tail, flood = transport.run_batch(specs)
    finally:
        stop.set()
        watcher.join(10)
    assert (head.stdout, head.stdout_total, head.truncated) == (b"a" * 1000, 3000004, True)
    assert tail.stdout.endswith(b"199999\n200000\n") and len(tail.stdout) == 100
    assert (tail.stdout_total, tail.truncated) == (len("".join(f"{i}\n" for i in range(1, 200001))), True)
    assert (len(flood.stdout), flood.stdout_total, flood.truncated) == (65536, 20000000, True)
    assert max(sizes) < 2 * 1024 * 1024  # 20 MB flowed through, never more than the caps were written
    assert list((folder / "tmp").iterdir()) == []  # the batch removed its folder


def test_local_abort_ends_every_process_and_removes_the_temp_folder(node_env, each_batch):
    folder, marker = node_env
    specs = [CommandSpec("stubborn", ("sh", "-c", "trap '' TERM; sleep 1000 & sleep 1001"), 600),
             CommandSpec("child", ("sh", "-c", "python3 -c 'import os,time; os.setpgid(0,0); time.sleep(1000)' & "
                                               "sleep 1002"), 600)]
    transport = LocalTransport()
    transport.connect()
    results: list = []
    worker = threading.Thread(target=lambda: results.extend(transport.run_batch(specs)))
    worker.start()
    _wait_for(lambda: len(_marked(marker)) >= 6, 30, "the batch to start")
    transport.close()
    worker.join(30)
    assert [r.error for r in results] == [ErrorReason.INTERRUPTED, ErrorReason.INTERRUPTED]
    _wait_for(lambda: not _marked(marker), 15, "every batch process to end")
    _wait_for(lambda: list((folder / "tmp").iterdir()) == [], 15, "the temp folder to go")


def test_local_batch_that_hears_no_heartbeat_ends_itself(node_env, monkeypatch, each_batch):
    """A link that went silent without closing (no EOF ever comes): the batch ends itself after the silence."""
    folder, marker = node_env
    monkeypatch.setattr(batch, "HEARTBEAT_S", 10_000.0)  # this controller "goes silent"
    monkeypatch.setattr(batch, "HEARTBEAT_LOST_S", 3)
    (result,) = LocalTransport().run_batch([CommandSpec("s", ("sleep", "600"), 600)])
    assert result.rc is None and result.error is not None  # cut off on the node, never a success
    _wait_for(lambda: not _marked(marker), 30, "every batch process to end")
    assert list((folder / "tmp").iterdir()) == []


def test_local_heartbeat_keeps_a_long_command_alive(node_env, monkeypatch, each_batch):
    monkeypatch.setattr(batch, "HEARTBEAT_S", 0.2)
    monkeypatch.setattr(batch, "HEARTBEAT_LOST_S", 4)
    (result,) = LocalTransport().run_batch([CommandSpec("s", ("sh", "-c", "sleep 8; echo done"), 60)])
    assert (result.rc, result.stdout, result.error) == (0, b"done\n", None)


def test_local_second_run_is_refused_busy_and_names_the_holder(node_env, each_batch):
    folder, marker = node_env
    first = LocalTransport().bind("n1", "run-A")
    first.connect()
    done: list = []
    worker = threading.Thread(target=lambda: done.extend(first.run_batch([CommandSpec("s", ("sleep", "600"), 600)])))
    worker.start()
    _wait_for(lambda: any((folder / "lock").glob("holder.*")), 30, "the lock holder info")
    second = LocalTransport().bind("n1", "run-B")
    refused = second.run_batch([CommandSpec("a", ("true",), 5), CommandSpec("b", ("true",), 5)])
    assert [r.error for r in refused] == [ErrorReason.BUSY, ErrorReason.BUSY]
    assert "run run-A of user " in refused[0].error_detail
    first.close()
    worker.join(30)
    _wait_for(lambda: not _marked(marker), 15, "the first batch to end its processes (and so release the lock)")
    after = LocalTransport().bind("n1", "run-C").run_batch([CommandSpec("a", ("echo", "ok"), 5)])
    assert (after[0].rc, after[0].stdout) == (0, b"ok\n")  # the lock went with its holder


def test_local_wrong_password_is_tried_once_and_never_again(node_env, each_batch):
    folder, _ = node_env
    gate = SudoGate("wrong")
    specs = [CommandSpec("kmsg", ("echo", "k"), 5, sudo=True), CommandSpec("root2", ("echo", "r"), 5, sudo=True),
             CommandSpec("plain", ("echo", "p"), 5)]
    kmsg, root2, plain = LocalTransport().bind("gpu001", "r", gate).run_batch(specs)
    assert _sudo_calls(folder) == ["-S -p  -- true"]  # one check, alone; the sudo commands never ran
    for result in (kmsg, root2):
        assert result.error is ErrorReason.SUDO and "sudo refused the password" in result.error_detail
    assert (plain.rc, plain.stdout) == (0, b"p\n")
    later = LocalTransport().bind("gpu002", "r", gate).run_batch(specs)
    assert _sudo_calls(folder) == ["-S -p  -- true"]  # gpu002 was not sent it
    assert later[0].error_detail == "password rejected on gpu001; not tried here"
    assert (later[2].rc, later[2].stdout) == (0, b"p\n")


def test_local_right_password_runs_sudo_commands_and_children_never_see_it(node_env, monkeypatch, each_batch):
    folder, _ = node_env
    monkeypatch.setenv("NVDEPLOY_SUDO_PASSWORD", "Corr3ct-Pw")  # as if the CLI had not removed it
    specs = [CommandSpec("root", ("echo", "r"), 5, sudo=True), CommandSpec("env", ("env",), 5)]
    root, env = LocalTransport(sudo_password="Corr3ct-Pw").run_batch(specs)
    assert (root.rc, root.stdout) == (0, b"r\n")
    assert env.rc == 0 and b"Corr3ct-Pw" not in env.stdout and b"NVD_SUDO_PW" not in env.stdout
    assert _sudo_calls(folder)[0] == "-S -p  -- true"


# ----------------------------------------------------------------------------------------- the SSH reader


class _FakeChannel:
    """Enough of paramiko.Channel for SSHTransport._exec: the exit status comes first, the output after."""

    def __init__(self, chunks: list[bytes], answer_exec: bool = True) -> None:
        self._chunks = list(chunks)
        self._buffer = b""
        self._lock = threading.Lock()
        self.answer_exec = answer_exec
        self.event = threading.Event()
        self.event_ready = False
        self.remote_chanid = 1
        self.status_event = threading.Event()
        self.exit_status = 0
        self.status_event.set()  # OpenSSH under load: exit-status before the last data
        self.eof_received = False
        self.closed = False
        self.sent = b""
        self.transport = self

    # the transport side
    def _send_user_message(self, message) -> None:
        if self.answer_exec:
            self.event_ready = True
            self.event.set()
            threading.Thread(target=self._feed, daemon=True).start()

    def get_exception(self):
        return None

    def _feed(self) -> None:
        for chunk in self._chunks:
            time.sleep(0.05)
            with self._lock:
                self._buffer += chunk
        time.sleep(0.05)
        self.eof_received = True

    # the channel side
    def _event_pending(self) -> None:
        self.event.clear()

    def settimeout(self, _timeout) -> None:
        pass

    def sendall(self, data: bytes) -> None:
        self.sent += data

    def recv_ready(self) -> bool:
        with self._lock:
            return bool(self._buffer)

    def recv(self, size: int) -> bytes:
        with self._lock:
            data, self._buffer = self._buffer[:size], self._buffer[size:]
            return data

    def recv_stderr_ready(self) -> bool:
        return False

    def recv_stderr(self, size: int) -> bytes:
        return b""

    def close(self) -> None:
        self.closed = True


class _FakeTransport:
    def __init__(self, channel: _FakeChannel) -> None:
        self.channel = channel

    def is_active(self) -> bool:
        return True

    def open_session(self, timeout=None) -> _FakeChannel:
        return self.channel


class _FakeClient:
    def __init__(self, transport: _FakeTransport) -> None:
        self._transport = transport

    def get_transport(self) -> _FakeTransport:
        return self._transport


class _FakeConn:
    def __init__(self, channel: _FakeChannel) -> None:
        self.client = _FakeClient(_FakeTransport(channel))


def _ssh_with(channel: _FakeChannel) -> SSHTransport:
    transport = SSHTransport("127.0.0.1", connect_timeout_s=0.5)
    transport._conn = _FakeConn(channel)  # type: ignore[assignment]  # noqa: SLF001
    return transport


def test_ssh_reader_waits_for_eof_not_for_the_exit_status():
    chunks = [b"x" * 1000] * 20
    channel = _FakeChannel(chunks)
    raw, error, detail = _ssh_with(channel)._exec("cmd", b"", 30, 10**6)  # noqa: SLF001
    assert (len(raw), error, detail) == (20000, None, "")
    assert channel.closed


def test_ssh_exec_request_without_reply_is_bounded_and_stdin_stays_open():
    channel = _FakeChannel([b"data"], answer_exec=False)
    raw, error, detail = _ssh_with(channel)._exec("cmd", b"pw\n", 30, 10**6)  # noqa: SLF001
    assert error is ErrorReason.TIMEOUT and "did not answer the exec request" in detail
    answered = _FakeChannel([b"ok"])
    _ssh_with(answered)._exec("cmd", b"pw\n", 30, 10**6)  # noqa: SLF001
    assert answered.sent == b"pw\n"  # sent, and no shutdown_write: the fake has none, and would have failed


# -------------------------------------------------------------------------------------- the wrapper's cost


def test_wrapper_starts_one_job_per_command_one_python_per_batch_and_never_polls():
    """The Python batch is one process for the whole batch, started once, its commands in its words; the shell
    batch (a node without a system Python) starts each command as one background job (timeout execs in the forked
    shell) with its shell cappers in nvd_cap. Both wait for them instead of polling with sleep."""
    import ast
    import shlex

    specs = [CommandSpec(f"c{i}", ("echo", str(i)), 5) for i in range(5)]
    script = batch.build_script(specs, run_id="r", heartbeat_lost_s=60)
    assert script.count(" -I -S -c ") == 1
    assert shlex.split(script.split(" -I -S -c ", 1)[1].split("\n  nvd_x=$?", 1)[0])[-1] == "$@"
    # The commands are the script's positional parameters, once, for whichever batch runs them.
    positional = next(line for line in script.splitlines() if line.startswith("set -- "))
    words = shlex.split(positional)[2:]
    assert words == ["5"] + [w for i in range(5) for w in ("4194304", "-", "6", *_timeout_words(5), "echo", str(i))]
    shell = script.split("\ndone\n", 1)[1]
    commands = [line for line in shell.splitlines() if "& nvd_p" in line]
    assert len(commands) == len(specs)
    for i, line in enumerate(commands):  # each argv word is a positional parameter, quoted
        first = 2 + 9 * i + 3
        assert line.startswith(" ".join(f'"${{{k}}}"' for k in range(first, first + 6)) + " </dev/null >&5 2>&6")
    assert all(f'wait "$nvd_p{i}"' in shell for i in range(5))
    # Only a run refused by another's lock re-reads (briefly) a holder file being written; it runs no command.
    before_busy, busy = shell.split("nvd_info='' nvd_try=0", 1)
    rereads, after_busy = busy.split("__NVD_BUSY__", 1)
    ran = before_busy.split("nvd_end() {", 1)[0] + before_busy.split("\nnvd_h()", 1)[1] + after_busy
    assert "sleep 0.1" not in ran and "sleep 0.1" in rereads
    assert "$(cat" not in script and "| nvd_head" not in script
    # The Python batch sleeps only in the busy path's re-read and in the grace given to strays it signalled; its
    # loop blocks in poll() with no timeout but the heartbeat's.
    tree = ast.parse(batch.RUNNER_CODE)
    sleeps = {fn.name for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef)
              for node in ast.walk(fn) if isinstance(node, ast.Attribute) and node.attr == "sleep"}
    assert sleeps == {"busy", "end_session"}
    assert "self.pump(None)" in batch.RUNNER_CODE


def _timeout_words(seconds: int) -> list[str]:
    return ["timeout", "-k", str(batch.KILL_GRACE_S), str(seconds)]


def _session_commands(marker: bytes) -> list[str]:
    """The names (comm) of the live processes that carry ``marker``."""
    names = []
    for pid in _marked(marker):
        try:
            names.append(Path(f"/proc/{pid}/comm").read_text().strip())
        except OSError:
            continue
    return names


def test_a_running_batch_costs_one_process_per_command_beyond_its_tool(node_env, each_batch):
    """While four commands run, the node has, beyond the tools: one timeout(1) per command and, with a system
    Python, the Python batch itself; with the shell batch, two cappers per stream more."""
    folder, marker = node_env
    specs = [CommandSpec(f"t{i}", ("tail", "-f", "/dev/null"), 600) for i in range(4)]
    transport = LocalTransport()
    transport.connect()
    results: list = []
    worker = threading.Thread(target=lambda: results.extend(transport.run_batch(specs)))
    worker.start()
    try:
        python3, head = {"python": (1, 0), "shell": (0, 8)}[each_batch]  # shell: one head per stream
        _wait_for(lambda: sorted(n for n in _session_commands(marker) if n in ("tail", "timeout")) ==
                  ["tail"] * 4 + ["timeout"] * 4, 30, "the four commands to run")
        _wait_for(lambda: sum(n in ("python3", "head") for n in _session_commands(marker)) == python3 + head, 30,
                  "the cappers")
        names = _session_commands(marker)
        assert (names.count("python3"), names.count("head")) == (python3, head), names
        assert "wc" not in names and "dd" not in names
    finally:
        transport.close()
        worker.join(30)
    assert [r.error for r in results] == [ErrorReason.INTERRUPTED] * 4


def test_a_python_batch_that_fails_once_begun_is_an_error_for_every_command_and_leaves_nothing(node_env,
                                                                                            monkeypatch):
    """The Python batch dies after it started the commands: they are not run again by the shell batch, every command
    is ERROR (no frames, no end marker), and nothing it started is left."""
    folder, marker = node_env
    code = batch.RUNNER_CODE.replace("self.say(RAN_MARKER", "1 // 0 or self.say(RAN_MARKER", 1)
    assert code != batch.RUNNER_CODE
    monkeypatch.setattr(batch, "RUNNER_CODE", code)
    specs = [CommandSpec("a", ("sh", "-c", "echo x >>\"$NVD_TEST_MARK/ran\""), 5),
             CommandSpec("b", ("sh", "-c", "sleep 600 & echo started"), 5)]
    results = LocalTransport().run_batch(specs)
    for result in results:
        assert (result.rc, result.error) == (None, ErrorReason.INCOMPLETE), result
    assert (folder / "ran").read_text() == "x\n"  # run once, by the Python batch only
    _wait_for(lambda: not _marked(marker), 15, "every batch process to end")
    assert list((folder / "lock").glob("holder.*")) == []


def test_a_python_too_old_for_the_batch_leaves_it_to_the_shell(node_env, monkeypatch):
    monkeypatch.setattr(batch, "RUNNER_CODE", batch.RUNNER_CODE.replace("sys.version_info < (3, 6)",
                                                                        "sys.version_info < (99, 0)", 1))
    (result,) = LocalTransport().run_batch([CommandSpec("a", ("sh", "-c", "echo out; echo err >&2"), 5)])
    assert (result.rc, result.stdout, result.stderr, result.error) == (0, b"out\n", b"err\n", None)


def test_a_python_that_does_not_start_leaves_the_batch_to_the_shell(node_env, monkeypatch):
    monkeypatch.setattr(batch, "SYSTEM_PYTHONS", ("/bin/false",))
    (result,) = LocalTransport().run_batch([CommandSpec("a", ("sh", "-c", "echo out; echo err >&2"), 5)])
    assert (result.rc, result.stdout, result.stderr, result.error) == (0, b"out\n", b"err\n", None)


def test_local_normal_end_leaves_no_process_with_a_heartbeat_clock(node_env, each_batch):
    folder, marker = node_env
    specs = [CommandSpec("a", ("sh", "-c", "echo out; echo err >&2; exit 3"), 5),
             CommandSpec("b", ("sh", "-c", "sleep 600 & echo started"), 5)]
    a, b = LocalTransport().run_batch(specs)
    assert (a.rc, a.stdout, a.stderr, a.stdout_total, a.stderr_total) == (3, b"out\n", b"err\n", 4, 4)
    assert (b.rc, b.stdout) == (0, b"started\n")  # its stray sleep was ended, so the capper saw EOF
    _wait_for(lambda: not _marked(marker), 15, "every batch process to end")
    assert list((folder / "tmp").iterdir()) == []


def _read_to_end_marker(process) -> bytes:
    raw = b""
    while not raw.endswith(batch.END_MARKER + b"\n"):
        chunk = os.read(process.stdout.fileno(), 65536)
        if not chunk:
            raise AssertionError(f"EOF before the end marker: {raw[-300:]!r}")
        raw += chunk
    return raw


def test_the_lock_is_free_and_the_temp_folder_gone_when_the_end_marker_arrives(node_env, each_batch):
    """CI: a node's next batch, sent the moment the previous one's end marker arrived, found the lock still held
    ("holder unknown") by the previous batch's last processes (the clock's sleep, the EXIT trap's rm). The batch
    releases the lock, and removes its holder info and temp folder, before it prints the end marker."""
    import fcntl
    import subprocess

    folder, _ = node_env
    script = batch.build_script([CommandSpec("a", ("echo", "x"), 5)], run_id="r1", heartbeat_lost_s=4)
    lock_dir = folder / "lock"
    for _ in range(10):
        process = subprocess.Popen(["sh", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            _read_to_end_marker(process)
            fd = os.open(lock_dir, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises BlockingIOError while anything holds it
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
            assert list(lock_dir.glob("holder.*")) == []
            assert list((folder / "tmp").iterdir()) == []
        finally:
            process.stdin.close()
            process.wait(10)
            process.stdout.close()


@pytest.mark.parametrize("spawn", ["posix_spawn", "fork"])
def test_the_python_batch_starts_tools_with_default_signals_both_ways(node_env, monkeypatch, spawn):
    """Python ignores SIGPIPE, and the batch HUP and INT: its tools get them at their defaults, whether started with
    posix_spawn (Python 3.8+) or fork and exec (3.6 and 3.7). A ``yes`` that ignored SIGPIPE would complain of a
    broken pipe; a tool's SigIgn mask shows what it inherited as ignored."""
    if spawn == "fork":
        code = batch.RUNNER_CODE.replace("if hasattr(os, 'posix_spawnp'):", "if False:", 1)
        assert code != batch.RUNNER_CODE
        monkeypatch.setattr(batch, "RUNNER_CODE", code)
    specs = [CommandSpec("pipe", ("sh", "-c", "yes | head -n 1"), 10),
             CommandSpec("status", ("cat", "/proc/self/status"), 10),
             CommandSpec("out", ("sh", "-c", "echo out; echo err >&2; exit 4"), 10)]
    pipe, status, out = LocalTransport().run_batch(specs)
    assert (pipe.rc, pipe.stdout, pipe.stderr) == (0, b"y\n", b"")
    ignored = int(next(line for line in status.stdout.splitlines() if line.startswith(b"SigIgn:")).split()[1], 16)
    for number in (signal.SIGHUP, signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ):
        assert not ignored & (1 << (number - 1)), (number, hex(ignored))
    assert (out.rc, out.stdout, out.stderr) == (4, b"out\n", b"err\n")


def test_the_inventory_can_ask_for_the_shell_batch_on_a_node(tmp_path):
    """node_python: false sends a node the POSIX sh batch even where it has a system Python (an escape hatch for a
    node image whose Python misbehaves); it must be a boolean."""
    from nvdeploy.config.inventory import load_inventory
    from nvdeploy.config.profiles import ProfileCatalog
    from nvdeploy.config.yamlfile import ConfigError
    from nvdeploy.runner.engine import EngineOptions, make_transport

    catalog = ProfileCatalog()
    path = tmp_path / "inv.yaml"
    path.write_text("all:\n  hosts:\n    a: {connection: local}\n    b: {connection: local, node_python: false}\n"
                    "    c: {address: 127.0.0.1, node_python: true}\n  vars: {profile: h100-sxm-8x}\n")
    hosts = {h.name: h for h in load_inventory(path, catalog).hosts}
    picked = {name: make_transport(host, catalog, EngineOptions()).python_batch for name, host in hosts.items()}
    assert picked == {"a": True, "b": False, "c": True}
    path.write_text("all:\n  hosts:\n    a: {connection: local, node_python: 'no'}\n  vars: {profile: h100-sxm-8x}\n")
    with pytest.raises(ConfigError) as raised:
        load_inventory(path, catalog)
    assert "node_python" in str(raised.value) and "true or false" in str(raised.value)
