"""Node side: whatever ends a node's work ends every process it started there and removes what it made there (its
holder file; the shell batch's temp folder); one run per node at a time; the sudo password is tried once per run.
Real sshd on loopback (127.0.0.0/8). Every row runs with the Python batch (this machine has a system Python) and
again with the shell batch.

Each node's nvidia-smi is replaced by a "stubborn" tool: it ignores SIGTERM, and starts a Python child that moves
to a process group of its own (so ``timeout(1)``'s group kill misses it, as mpirun's daemons would). Rows:
- the command timeout: test_command_timeout_leaves_nothing
- the global --deadline: test_deadline_leaves_nothing (prints deadline-to-return)
- Ctrl-C, SIGTERM, controller SIGKILL: test_controller_ending_leaves_nothing (prints signal-to-last-process-gone)
- the SSH connection dropping (sshd's session processes killed, the commands not): test_connection_drop_leaves_nothing
- a connection gone silent without closing (sshd frozen: no EOF, no heartbeat): test_silent_connection_leaves_nothing
- the normal end with a tool that leaves a child behind: test_normal_end_reaps_what_a_tool_left
- a second run on a busy node / a stale lock: test_second_run_is_refused_busy_and_a_stale_lock_is_taken
- a wrong sudo password: test_wrong_sudo_password_is_tried_once_per_run
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Callable

import pytest
import yaml

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import ErrorReason, Verdict
from nvdeploy.runner.engine import QUICK_CHECKS, EngineOptions
from nvdeploy.sim.scenario import NodeScenario
from nvdeploy.testing.faults import node_processes, run_nvdeploy, start_nvdeploy
from nvdeploy.testing.replay import replay_cluster
from nvdeploy.testing.sshd import FakeNode, SshCluster
from nvdeploy.transport import batch

CATALOG = ProfileCatalog()
PROFILE = CATALOG.get("h100-sxm-8x")
GONE_WITHIN_S = 30  # seconds; measured 2-4 s, the bound is for a loaded 2-core machine

pytestmark = [pytest.mark.usefixtures("requires_sshd")]

# The child is perl's (Debian's perl-base is essential), not python3's: a fake node's ``python3`` is the simulated
# one, which runs only the NVML probe and exits at once, and the test's own interpreter may live where the node's
# user cannot read (a virtualenv under /root).
_GROUP_CHILD = "perl -e 'setpgrp(0, 0); sleep 100000' &"

STUBBORN = f"""#!/bin/sh
# nvdeploy test: a tool that ignores SIGTERM and leaves a child in a process group of its own.
echo "$$" >>"$HOME/stubborn.calls"
trap '' TERM
{_GROUP_CHILD}
sleep 100000
"""

LEAVES_CHILD = f"""#!/bin/sh
# nvdeploy test: answers at once, but leaves a child running (in a group of its own) that holds stdout.
{_GROUP_CHILD}
exec {{real}} "$@"
"""


def _scenario(name: str) -> tuple[str, str]:
    return name, NodeScenario(name, PROFILE, ()).to_json()


@pytest.fixture(scope="module")
def cluster():
    names = ["tmo", "dl", "sigint", "sigterm", "sigkill", "drop", "silent", "normal", "lock", "pw1", "pw2", "squat",
             "links"]
    with SshCluster([_scenario(n) for n in names]) as started:
        replay_cluster(started)
        yield started


def _stubborn(node: FakeNode) -> None:
    tool = node.bin_dir / "nvidia-smi"
    if not (node.bin_dir / "nvidia-smi.orig").exists():
        shutil.copy2(tool, node.bin_dir / "nvidia-smi.orig")
    tool.write_text(STUBBORN)
    tool.chmod(0o755)


def _restore(node: FakeNode) -> None:
    shutil.copy2(node.bin_dir / "nvidia-smi.orig", node.bin_dir / "nvidia-smi")


def _inventory(cluster: SshCluster, folder: Path, names: list[str], **host_vars) -> Path:
    """The cluster's inventory reduced to ``names``, with ``host_vars`` for each of them."""
    data = yaml.safe_load(cluster.inventory_yaml(profile="h100-sxm-8x"))
    hosts = data["all"]["hosts"]
    data["all"]["hosts"] = {name: {**hosts[name], **host_vars} for name in names}
    folder.mkdir(parents=True, exist_ok=True)
    inventory = folder / "inventory.yaml"
    inventory.write_text(yaml.safe_dump(data, sort_keys=False))
    return inventory


def _wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll ``predicate`` until true; returns when it became true (monotonic). Fails after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic()


def _batch_files(node: FakeNode) -> set[str]:
    """What the batch made on the node: its holder file in the node's lock folder and, for the shell batch, the
    temp folders (``.../nvd.XXXXXX``) the node's processes have open (found through /proc)."""
    found = {str(path) for path in (node.home / "nvdeploy.lock").glob("holder.*")
             if Path("/proc", path.name.split(".")[1]).is_dir()}  # a live batch's, not a stale one planted here
    for pid in node_processes(node):
        try:
            for fd in os.scandir(f"/proc/{pid}/fd"):
                target = os.readlink(fd.path)
                if "/nvd." in target:
                    found.add(target[: target.index("/", target.index("/nvd.") + 1)])
        except OSError:
            continue
    return found


def _running_stubborn(node: FakeNode) -> set[str]:
    """Wait until the stubborn tool and its child run on ``node``; what the batch made then (_batch_files)."""
    def ready() -> bool:
        cmdlines = []
        for pid in node_processes(node):
            try:
                cmdlines.append(Path(f"/proc/{pid}/cmdline").read_bytes())
            except OSError:
                continue
        return any(b"setpgrp" in c for c in cmdlines) and any(b"sleep\x00100000" in c for c in cmdlines)

    _wait_for(ready, 60, f"the stubborn tool on {node.name}")
    made = _batch_files(node)
    assert made, "the batch's holder file was not found"
    return made


def _assert_clean(node: FakeNode, dirs: set[str]) -> float:
    """Zero processes of the node's work left and what the batch made gone (polled, bounded); when it got so."""
    at = _wait_for(lambda: not node_processes(node), GONE_WITHIN_S, f"the processes of {node.name} to end")
    left = [d for d in dirs if Path(d).exists()]
    assert not left, f"batch files left on {node.name}: {left}"
    assert node_processes(node) == []
    return at


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text()
    except OSError:
        return ""


def _in_process(cluster: SshCluster, folder: Path, names: list[str], options: EngineOptions, **host_vars):
    inventory = load_inventory(_inventory(cluster, folder, names, **host_vars), CATALOG)
    return run_validate(inventory, CATALOG, options, folder / "reports")


@pytest.mark.timeout(120)
def test_command_timeout_leaves_nothing(cluster, tmp_path, each_batch):
    node = cluster.node("tmo")
    _stubborn(node)
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(out=_in_process(
        cluster, tmp_path, ["tmo"], EngineOptions(checks=QUICK_CHECKS), command_timeout=8)), daemon=True)
    worker.start()
    dirs = _running_stubborn(node)
    assert any("/nvd." in d for d in dirs) is (each_batch == "shell"), dirs  # the shell batch's temp folder
    worker.join(90)
    assert not worker.is_alive()
    (found,) = result["out"].run.nodes
    smi = next(e for e in found.evidence if e.collector == "nvidia_smi_xml")
    assert smi.error and smi.error.startswith("timeout"), smi
    _assert_clean(node, dirs)


@pytest.mark.timeout(120)
def test_deadline_leaves_nothing(cluster, tmp_path, each_batch):
    node = cluster.node("dl")
    _stubborn(node)
    # Long enough for the connect and the batch's start on a loaded CI machine (at 6 s the tool once never started:
    # the deadline passed first), far below the stubborn tool's own 60 s timeout.
    deadline = 15.0
    result: dict = {}

    def run() -> None:
        started = time.monotonic()
        result["deadline_at"] = started + deadline
        result["out"] = _in_process(cluster, tmp_path, ["dl"], EngineOptions(checks=QUICK_CHECKS,
                                                                              deadline_s=deadline))
        result["took"] = time.monotonic() - started

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    dirs = _running_stubborn(node)
    worker.join(90)
    assert not worker.is_alive()
    (found,) = result["out"].run.nodes
    assert found.verdict is Verdict.ERROR
    gone_at = _assert_clean(node, dirs)
    late = result["took"] - deadline
    print(f"\n--deadline {deadline:g} s: the run returned {late:.2f} s after the deadline; the last remote process "
          f"was gone {gone_at - result['deadline_at']:.2f} s after it")
    assert late < 10  # seconds after the deadline, not the tool's 60 s timeout


@pytest.mark.timeout(180)
@pytest.mark.parametrize("node_python", [True, False], ids=["python", "shell"])
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_controller_ending_leaves_nothing(cluster, tmp_path, sig, node_python):
    """The controller is a process of its own: the inventory's node_python picks the batch."""
    name = {"SIGINT": "sigint", "SIGTERM": "sigterm", "SIGKILL": "sigkill"}[sig]
    node = cluster.node(name)
    _stubborn(node)
    inventory = _inventory(cluster, tmp_path, [name], node_python=node_python)
    process = start_nvdeploy(["validate", "-i", str(inventory), "--out", str(tmp_path / "reports")], cwd=tmp_path)
    try:
        dirs = _running_stubborn(node)
    except BaseException:
        process.send_signal(signal.SIGKILL)
        process.wait(30)
        raise
    assert any("/nvd." in d for d in dirs) is not node_python, dirs  # only the shell batch makes a temp folder
    signalled = time.monotonic()
    process.send_signal(getattr(signal, sig))
    run = process.wait(60)
    gone = _assert_clean(node, dirs) - signalled
    expected = {"SIGINT": 130, "SIGTERM": 143, "SIGKILL": -signal.SIGKILL}[sig]
    assert run.rc == expected, run.stderr
    print(f"\n{sig}: controller exited {run.wall_s:.1f} s into the run; last remote process gone {gone:.2f} s "
          f"after the signal")


@pytest.mark.timeout(120)
def test_connection_drop_leaves_nothing(cluster, tmp_path, each_batch):
    node = cluster.node("drop")
    _stubborn(node)
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(out=_in_process(
        cluster, tmp_path, ["drop"], EngineOptions(checks=QUICK_CHECKS))), daemon=True)
    worker.start()
    dirs = _running_stubborn(node)
    # Only sshd's session processes die (as when the network or sshd goes): the commands are left to themselves.
    sshd = [pid for pid in cluster.session_pids("drop") if _comm(pid).startswith("sshd")]
    assert sshd
    dropped = time.monotonic()
    for pid in sshd:
        os.kill(pid, signal.SIGKILL)
    gone = _assert_clean(node, dirs) - dropped
    worker.join(90)
    assert not worker.is_alive()
    (found,) = result["out"].run.nodes
    assert found.verdict is Verdict.ERROR
    print(f"\nconnection dropped: last remote process gone {gone:.2f} s later")


@pytest.mark.timeout(150)
def test_silent_connection_leaves_nothing(cluster, tmp_path, monkeypatch, each_batch):
    """sshd's session processes stopped (SIGSTOP): TCP stays up, nothing closes, no EOF ever reaches the batch, as
    in a network partition. The batch hears no heartbeat and ends itself."""
    monkeypatch.setattr(batch, "HEARTBEAT_LOST_S", 5)  # 60 s in production
    # Heartbeats every second until the freeze (10 s in production, 60 s of loss): with none, a batch that takes
    # over 5 s to reach the stubborn tool on a loaded machine would end itself before the freeze was even tried.
    monkeypatch.setattr(batch, "HEARTBEAT_S", 1.0)
    node = cluster.node("silent")
    _stubborn(node)
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(out=_in_process(
        cluster, tmp_path, ["silent"], EngineOptions(checks=QUICK_CHECKS))), daemon=True)
    worker.start()
    dirs = _running_stubborn(node)
    frozen_at = time.monotonic()
    assert cluster.freeze("silent")
    try:
        gone = _assert_clean(node, dirs) - frozen_at
    finally:
        cluster.thaw("silent")
    worker.join(90)
    assert not worker.is_alive()
    (found,) = result["out"].run.nodes
    assert found.verdict is Verdict.ERROR
    print(f"\nconnection silent (heartbeat loss after 5 s): last remote process gone {gone:.2f} s after the freeze")


@pytest.mark.timeout(120)
def test_normal_end_reaps_what_a_tool_left(cluster, tmp_path, each_batch):
    node = cluster.node("normal")
    real = node.bin_dir / "lspci.real"
    if not real.exists():  # once per cluster: the test runs for each batch
        shutil.move(node.bin_dir / "lspci", real)
    (node.bin_dir / "lspci").write_text(LEAVES_CHILD.format(real=real))
    (node.bin_dir / "lspci").chmod(0o755)
    out = _in_process(cluster, tmp_path, ["normal"], EngineOptions(checks=QUICK_CHECKS))
    (found,) = out.run.nodes
    assert found.verdict is Verdict.PASS, [f for f in found.findings if f.verdict is not Verdict.PASS]
    assert node_processes(node) == []  # nothing polled for: the batch answered only once it had reaped


@pytest.mark.timeout(150)
def test_second_run_is_refused_busy_and_a_stale_lock_is_taken(cluster, tmp_path, each_batch):
    node = cluster.node("lock")
    _stubborn(node)
    first: dict = {}
    worker = threading.Thread(target=lambda: first.update(out=_in_process(
        cluster, tmp_path / "first", ["lock"], EngineOptions(checks=QUICK_CHECKS), command_timeout=20)),
        daemon=True)
    worker.start()
    dirs = _running_stubborn(node)
    holder = Path(next(iter(dirs & {str(p) for p in (node.home / "nvdeploy.lock").glob("holder.*")}))).read_text()
    second = _in_process(cluster, tmp_path / "second", ["lock"], EngineOptions(checks=QUICK_CHECKS))
    (refused,) = second.run.nodes
    busy = [f for f in refused.findings if f.reason is ErrorReason.BUSY]
    assert refused.verdict is Verdict.ERROR and busy, refused.findings
    assert "another nvdeploy run holds the node lock" in busy[0].summary
    run_id = holder.split("run=")[1].split()[0]
    assert f"run {run_id} of user " in busy[0].summary and "since " in busy[0].summary, busy[0].summary
    worker.join(90)
    assert not worker.is_alive()
    assert first["out"].run.run_id == run_id  # the holder named is the first run
    _assert_clean(node, dirs)

    # A stale lock: holder info of a process that is gone, and nobody holding the flock: taken over.
    stale = node.home / "nvdeploy.lock" / "holder.999999999"
    stale.write_text("user=ghost run=old since=then pid=999999999\n")
    _restore(node)
    try:
        third = _in_process(cluster, tmp_path / "third", ["lock"], EngineOptions(checks=QUICK_CHECKS))
    finally:
        stale.unlink(missing_ok=True)  # root's: the node's user may not remove it, and the test runs again
    (taken,) = third.run.nodes
    assert not [f for f in taken.findings if f.reason is ErrorReason.BUSY], taken.findings
    assert taken.verdict is Verdict.PASS, [f for f in taken.findings if f.verdict is not Verdict.PASS]


@pytest.mark.timeout(180)
def test_wrong_sudo_password_is_tried_once_per_run(cluster, tmp_path):
    """Each node's ``sudo`` records its calls (then runs the real sudo, which refuses: the test user has no
    password). With a wrong password and --forks 1, the first node gets ONE password attempt, the second none."""
    if shutil.which("sudo") is None:
        pytest.skip("sudo is not installed")
    real = shutil.which("sudo")
    for name in ("pw1", "pw2"):
        node = cluster.node(name)
        wrapper = node.bin_dir / "sudo"
        wrapper.write_text(f'#!/bin/sh\necho "$*" >>"$HOME/sudo.calls"\nexec {real} "$@"\n')
        wrapper.chmod(0o755)
        (node.home / "sudo.calls").unlink(missing_ok=True)
    inventory = _inventory(cluster, tmp_path, ["pw1", "pw2"], sudo=True)
    env = {**os.environ, "NVDEPLOY_SUDO_PASSWORD": "wrong-password"}
    run = run_nvdeploy(["validate", "-i", str(inventory), "--out", str(tmp_path / "reports"), "--forks", "1"],
                       env=env, cwd=tmp_path, timeout=150)
    assert run.rc in (1, 3) and "Traceback" not in run.stderr, run.stdout + run.stderr  # not READY: sudo is ERROR
    calls = {n: (cluster.node(n).home / "sudo.calls").read_text().splitlines()
             if (cluster.node(n).home / "sudo.calls").exists() else [] for n in ("pw1", "pw2")}
    with_password = {n: [c for c in lines if c.startswith("-S ")] for n, lines in calls.items()}
    tried = [n for n, lines in with_password.items() if lines]
    assert len(tried) == 1 and len(with_password[tried[0]]) == 1, calls  # one attempt in the whole run
    (other,) = [n for n in ("pw1", "pw2") if n not in tried]
    assert calls[other] == [], calls  # the second node was not even asked to run sudo
    data = json.loads(next((tmp_path / "reports").glob("*/*/results.json")).read_text())
    nodes = {n["name"]: n for n in data["nodes"]}
    sudo_first = next(f for f in nodes[tried[0]]["findings"] if f["check"] == "system.sudo")
    assert "refused the password" in sudo_first["summary"], sudo_first
    # sudo's own count of PAM failures for that one invocation, kept as the sudo collector's stderr evidence
    run_dir = next((tmp_path / "reports").glob("*/*/results.json")).parent
    sudo_err = next(e for e in nodes[tried[0]]["evidence"] if e["collector"] == "sudo")["path"]
    assert b"sudo: 1 incorrect password attempt" in (run_dir / sudo_err).with_suffix(".err").read_bytes()
    sudo_other = next(f for f in nodes[other]["findings"] if f["check"] == "system.sudo")
    assert (sudo_other["verdict"], sudo_other["reason"]) == ("ERROR", "sudo")
    assert f"password rejected on {tried[0]}; not tried here" in sudo_other["summary"], sudo_other
    kmsg_other = next(f for f in nodes[other]["findings"] if f["check"] == "kmsg.xid")
    assert (kmsg_other["verdict"], kmsg_other["reason"]) == ("ERROR", "sudo"), kmsg_other
    assert next(f for f in nodes[other]["findings"] if f["check"] == "gpu.count")["verdict"] == "PASS"


def _lock_errors(run) -> list:
    (node,) = run.nodes
    return [f for f in node.findings if f.reason is ErrorReason.LOCK]


@pytest.mark.timeout(120)
def test_lock_folder_another_user_made_first_is_refused_over_ssh(cluster, tmp_path):
    """Over real sshd: the node's lock folder made first by another local user (world-writable and sticky, as a
    squatter in /tmp would make it) is refused with ERROR lock naming it; nothing runs and nothing is written into it.
    """
    if os.geteuid() != 0:
        pytest.skip("needs root to hand the folder to another uid")
    node = cluster.node("squat")
    lock = node.home / "nvdeploy.lock"
    shutil.rmtree(lock, ignore_errors=True)
    lock.mkdir()
    lock.chmod(0o1777)
    os.chown(lock, 65534, -1)  # nobody
    try:
        out = _in_process(cluster, tmp_path, ["squat"], EngineOptions(checks=QUICK_CHECKS))
        errors = _lock_errors(out.run)
        assert errors and out.run.nodes[0].verdict is Verdict.ERROR, out.run.nodes[0].findings
        assert f"{lock} is owned by another user" in " ".join(f.summary for f in errors), errors[0].summary
        assert list(lock.iterdir()) == []
        # connected, and then nothing judged: no check ran on the node
        assert [f.check for f in out.run.nodes[0].findings if f.verdict is Verdict.PASS] == ["system.reachable"]
    finally:
        shutil.rmtree(lock, ignore_errors=True)


@pytest.mark.timeout(120)
def test_planted_links_are_never_followed_over_ssh(cluster, tmp_path):
    """A lock folder that is a link is refused (its target untouched); a holder file planted as a link inside a
    good lock folder is neither followed nor removed, and the run still locks and passes."""
    node = cluster.node("links")
    lock = node.home / "nvdeploy.lock"
    shutil.rmtree(lock, ignore_errors=True)
    target = node.home / "elsewhere"
    target.mkdir(exist_ok=True)
    victim = node.home / "victim.txt"
    victim.write_text("precious\n")
    lock.symlink_to(target)
    out = _in_process(cluster, tmp_path / "a", ["links"], EngineOptions(checks=QUICK_CHECKS))
    errors = _lock_errors(out.run)
    assert errors and "is a symbolic link" in errors[0].summary, out.run.nodes[0].findings
    assert list(target.iterdir()) == []

    lock.unlink()
    lock.mkdir(mode=0o700)
    planted = lock / "holder.999999999"
    planted.symlink_to(victim)
    out = _in_process(cluster, tmp_path / "b", ["links"], EngineOptions(checks=QUICK_CHECKS))
    assert not _lock_errors(out.run), out.run.nodes[0].findings
    assert out.run.nodes[0].verdict is Verdict.PASS, [f for f in out.run.nodes[0].findings
                                                      if f.verdict is not Verdict.PASS]
    assert planted.is_symlink() and victim.read_text() == "precious\n"
