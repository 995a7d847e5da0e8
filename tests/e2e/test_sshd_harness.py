"""The real-SSH harness: loopback sshd processes acting as fake nodes, reached with paramiko and strict host keys."""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import paramiko
import pytest
import yaml

from nvdeploy.testing import (
    FakeNode,
    HarnessError,
    SshCluster,
    iter_cluster_processes,
    node_address,
    pid_alive,
    sshd_available,
)
from nvdeploy.testing.pytest_plugin import ClusterFactory, ssh_cluster_factory  # noqa: F401

needs_sshd = pytest.mark.skipif(not sshd_available(), reason="/usr/sbin/sshd is not installed (openssh-server)")
REPO = Path(__file__).resolve().parents[2]


def connect(cluster: SshCluster, node: FakeNode, *, strict: bool = True, nodelay: bool = False) -> paramiko.SSHClient:
    """Paramiko with strict host key checking. ``nodelay``: set TCP_NODELAY, which paramiko leaves off (Nagle
    plus delayed ACKs then cost ~40 ms per command)."""
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    if strict:
        client.load_host_keys(str(cluster.known_hosts))
    sock = socket.create_connection((node.address, node.port), timeout=10)
    if nodelay:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        client.connect(node.address, port=node.port, username=node.user, key_filename=str(cluster.client_key),
                       look_for_keys=False, allow_agent=False, timeout=10, banner_timeout=10, auth_timeout=10,
                       sock=sock)
    except BaseException:
        sock.close()
        raise
    return client


def run(client: paramiko.SSHClient, command: str, timeout: float = 30) -> tuple[int, str, str]:
    stdin, stdout, stderr = client.exec_command(command, timeout=timeout)
    stdin.close()
    out = stdout.read().decode()
    err = stderr.read().decode()
    return stdout.channel.recv_exit_status(), out, err


def scenario(name: str) -> str:
    return json.dumps({"name": name, "profile": "h100-sxm-8x"})


def process_state(pid: int) -> str:
    """The one-letter state of ``pid`` from /proc ('' once it is gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def wait_for_state(pids: list[int], state: str, within_s: float) -> dict[int, str]:
    """Poll until every pid shows ``state`` or ``within_s`` passes; return the states last seen."""
    deadline = time.monotonic() + within_s
    while True:
        seen = {pid: process_state(pid) for pid in pids}
        if all(value == state for value in seen.values()) or time.monotonic() > deadline:
            return seen
        time.sleep(0.01)


def add_probe_tool(node: FakeNode) -> Path:
    """A tool of our own on the node's PATH, independent of nvdeploy.sim's fake tools."""
    tool = node.bin_dir / "nvd-probe"
    tool.write_text('#!/bin/sh\nprintf "%s|" "$NVD_NODE_NAME"; cat "$NVD_SCENARIO_FILE"\n')
    tool.chmod(0o755)
    return tool


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        SshCluster(0)
    with pytest.raises(ValueError):
        SshCluster([("a", "{}"), ("a", "{}")])
    with pytest.raises(ValueError):
        SshCluster([("bad name", "{}")])
    assert node_address(0) == "127.0.1.1"
    assert node_address(253) == "127.0.1.254"
    assert node_address(254) == "127.0.2.1"


@needs_sshd
@pytest.mark.timeout(120)
def test_three_nodes_each_on_its_own_address(ssh_cluster_factory: ClusterFactory) -> None:  # noqa: F811
    cluster = ssh_cluster_factory([(f"gpu{i}", scenario(f"gpu{i}")) for i in range(3)])
    print(f"\n3-node start: {cluster.start_seconds:.3f} s (port {cluster.port}, user {cluster.user})")
    assert [n.address for n in cluster.nodes] == ["127.0.1.1", "127.0.1.2", "127.0.1.3"]
    assert len({n.port for n in cluster.nodes}) == 1
    seen_files = set()
    for node in cluster.nodes:
        tool = add_probe_tool(node)
        client = connect(cluster, node)
        try:
            assert client.get_transport().getpeername()[0] == node.address  # type: ignore[union-attr]
            rc, out, err = run(client, 'printf "%s\\n" "$NVD_SCENARIO_FILE" "$PATH" "$HOME" "$(id -un)" '
                                       '"$SSH_CONNECTION"; command -v nvd-probe; nvd-probe')
            assert rc == 0, err
            assert err == ""
            scen_file, path, home, user, ssh_conn, probe_path, probe_out = out.split("\n")[:7]
            assert scen_file == str(node.scenario_file)
            assert path == f"{node.bin_dir}:/usr/local/bin:/usr/bin:/bin"
            assert home == str(node.home)
            assert user == node.user == cluster.user
            assert ssh_conn.split()[2:] == [node.address, str(node.port)]
            assert probe_path == str(tool)
            assert probe_out == f"{node.name}|{scenario(node.name)}"
            seen_files.add(scen_file)
            if cluster.fake_tools_installed:
                rc, out, err = run(client, "command -v nvidia-smi")
                assert (rc, out.strip()) == (0, str(node.bin_dir / "nvidia-smi")), err
        finally:
            client.close()
    assert len(seen_files) == 3


@needs_sshd
@pytest.mark.timeout(120)
def test_strict_host_key_checking(ssh_cluster_factory: ClusterFactory) -> None:  # noqa: F811
    cluster = ssh_cluster_factory(2)
    lines = cluster.known_hosts.read_text().splitlines()
    assert [line.split()[0] for line in lines] == [f"[{n.address}]:{n.port}" for n in cluster.nodes]
    assert all(line.split()[1] == "ssh-ed25519" for line in lines)
    with pytest.raises(paramiko.SSHException):
        connect(cluster, cluster.nodes[0], strict=False)  # RejectPolicy and no known host keys
    client = connect(cluster, cluster.nodes[1])
    client.close()


@needs_sshd
@pytest.mark.timeout(120)
def test_set_scenario_and_round_trip_time(ssh_cluster_factory: ClusterFactory) -> None:  # noqa: F811
    cluster = ssh_cluster_factory([("a", scenario("a"))])
    node = cluster.node("a")
    client = connect(cluster, node)
    try:
        assert run(client, 'cat "$NVD_SCENARIO_FILE"')[1] == scenario("a")
        cluster.set_scenario("a", '{"changed": true}')
        assert run(client, 'cat "$NVD_SCENARIO_FILE"')[1] == '{"changed": true}'
    finally:
        client.close()
    print()
    for nodelay in (False, True):
        client = connect(cluster, node, nodelay=nodelay)
        try:
            times = []
            for _ in range(20):
                began = time.perf_counter()
                assert run(client, "true")[0] == 0
                times.append(time.perf_counter() - began)
        finally:
            client.close()
        print(f"command round trip on an open connection (TCP_NODELAY={nodelay}): "
              f"median {statistics.median(times) * 1000:.1f} ms, max {max(times) * 1000:.1f} ms")
    began = time.perf_counter()
    connect(cluster, node).close()
    print(f"new connection (TCP + handshake + auth): {(time.perf_counter() - began) * 1000:.1f} ms")


@needs_sshd
@pytest.mark.timeout(120)
def test_fake_tools_run_on_the_node(ssh_cluster_factory: ClusterFactory) -> None:  # noqa: F811
    cluster = ssh_cluster_factory([("n1", scenario("n1"))])
    if not cluster.fake_tools_installed:
        pytest.skip("nvdeploy.sim.fake_tool is not available")
    client = connect(cluster, cluster.node("n1"))
    try:
        began = time.perf_counter()
        rc, out, err = run(client, "nvidia-smi -L")
        print(f"\nfake nvidia-smi -L round trip: {(time.perf_counter() - began) * 1000:.1f} ms")
        assert rc == 0, err
        assert out.strip()
    finally:
        client.close()


@needs_sshd
@pytest.mark.timeout(120)
def test_freeze_and_thaw(ssh_cluster_factory: ClusterFactory) -> None:  # noqa: F811
    cluster = ssh_cluster_factory(2)
    frozen_node, other = cluster.nodes
    client, other_client = connect(cluster, frozen_node), connect(cluster, other)
    try:
        chan = client.get_transport().open_session(timeout=10)  # type: ignore[union-attr]
        chan.exec_command("for i in 1 2 3 4 5 6 7 8 9 10; do echo $i; sleep 0.2; done")
        chan.settimeout(10)
        assert chan.recv(100).startswith(b"1")
        pids = cluster.freeze(frozen_node.name)
        assert pids
        # SIGSTOP is delivered asynchronously: on a loaded machine /proc may still show 'S' for a moment.
        assert wait_for_state(pids, "T", within_s=10) == {pid: "T" for pid in pids}
        chan.settimeout(1.5)
        got = b""
        with pytest.raises(socket.timeout):
            while True:  # whatever was in flight before the freeze may still arrive; then silence
                data = chan.recv(100)
                assert data, "channel closed while frozen"
                got += data
        assert b"10" not in got
        # the other node is unaffected
        assert run(other_client, "echo ok", timeout=10)[1] == "ok\n"
        cluster.thaw(frozen_node.name)
        chan.settimeout(10)
        rest = got
        while True:
            data = chan.recv(100)
            if not data:
                break
            rest += data
        assert rest.split()[-1] == b"10"
        assert chan.recv_exit_status() == 0
    finally:
        client.close()
        other_client.close()


@needs_sshd
@pytest.mark.timeout(120)
def test_kill_sessions_drops_the_connection(ssh_cluster_factory: ClusterFactory) -> None:  # noqa: F811
    cluster = ssh_cluster_factory(2)
    node = cluster.nodes[0]
    client = connect(cluster, node)
    try:
        chan = client.get_transport().open_session(timeout=10)  # type: ignore[union-attr]
        chan.exec_command("echo started; exec sleep 60")
        chan.settimeout(10)
        assert chan.recv(100) == b"started\n"
        pids = cluster.kill_sessions(node.name)
        assert pids
        deadline = time.monotonic() + 10
        while client.get_transport().is_active() and time.monotonic() < deadline:  # type: ignore[union-attr]
            time.sleep(0.05)
        assert not client.get_transport().is_active()  # type: ignore[union-attr]
        assert not [pid for pid in pids if pid_alive(pid)]
        assert cluster.session_pids(node.name) == []
    finally:
        client.close()
    fresh = connect(cluster, node)  # the node still accepts new connections
    assert run(fresh, "echo back")[1] == "back\n"
    fresh.close()


@needs_sshd
@pytest.mark.timeout(120)
def test_stop_leaves_no_process_behind() -> None:
    cluster = SshCluster(3)
    with cluster:
        workdir = cluster.workdir
        clients = [connect(cluster, node) for node in cluster.nodes]
        busy = clients[0].get_transport().open_session(timeout=10)  # type: ignore[union-attr]
        busy.exec_command("echo go; exec sleep 300")
        busy.settimeout(10)
        assert busy.recv(10) == b"go\n"
        # a double-forked leftover that is no longer in any sshd's process tree
        rc, out, _ = run(clients[1], "setsid sleep 301 </dev/null >/dev/null 2>&1 & echo $!")
        orphan = int(out)
        cluster.freeze(cluster.nodes[2].name)
        pids = set(iter_cluster_processes(cluster)) | {orphan}
        assert len(cluster.listener_pids) == 1
        assert pid_alive(orphan)
        assert len(pids) > 5
        for client in clients:
            client.get_transport().sock.close()  # type: ignore[union-attr]  # do not wait on the frozen one
    print(f"\n3-node stop with live, frozen and orphaned sessions: {cluster.stop_seconds:.3f} s")
    assert not [pid for pid in pids if pid_alive(pid)]
    assert not workdir.exists()
    cluster.stop()  # idempotent


@needs_sshd
@pytest.mark.timeout(120)
def test_watchdog_cleans_up_after_the_test_process_is_killed() -> None:
    code = textwrap.dedent("""
        import json, os, signal, sys
        from nvdeploy.testing import SshCluster
        from nvdeploy.testing.sshd import iter_cluster_processes
        c = SshCluster(2).start()
        print(json.dumps({"workdir": str(c.workdir), "pids": list(iter_cluster_processes(c))}), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == -9, proc.stderr
    info = json.loads(proc.stdout)
    assert info["pids"]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (any(pid_alive(p) for p in info["pids"]) or Path(info["workdir"]).exists()):
        time.sleep(0.05)
    assert not [pid for pid in info["pids"] if pid_alive(pid)]
    assert not Path(info["workdir"]).exists()


@needs_sshd
@pytest.mark.timeout(120)
def test_64_nodes_start_and_stop() -> None:
    cluster = SshCluster(64)
    began = time.monotonic()
    cluster.start()
    try:
        print(f"\n64-node start: {cluster.start_seconds:.3f} s (measured outside: {time.monotonic() - began:.3f} s)")
        assert len(cluster.listener_pids) == 4
        assert cluster.nodes[-1].address == "127.0.1.64"
        for node in (cluster.nodes[0], cluster.nodes[16], cluster.nodes[-1]):
            client = connect(cluster, node)
            try:
                assert run(client, 'echo "$NVD_SCENARIO_FILE"')[1].strip() == str(node.scenario_file)
            finally:
                client.close()
        pids = set(iter_cluster_processes(cluster))
    finally:
        cluster.stop()
    print(f"64-node stop: {cluster.stop_seconds:.3f} s")
    assert not [pid for pid in pids if pid_alive(pid)]


@needs_sshd
@pytest.mark.timeout(120)
def test_inventory_yaml(ssh_cluster_factory: ClusterFactory, tmp_path: Path) -> None:  # noqa: F811
    cluster = ssh_cluster_factory(2)
    text = cluster.inventory_yaml(extra_host_vars={"node02": {"driver_version": "550.120"}})
    data = yaml.safe_load(text)
    assert data["all"]["vars"] == {
        "connection": "ssh", "profile": "h100-sxm-8x", "ssh_user": cluster.user, "ssh_port": cluster.port,
        "ssh_key": str(cluster.client_key), "ssh_known_hosts": str(cluster.known_hosts),
    }
    # each node's fake python3 is its probe_python: the probe runs from a fixed path, never the PATH's python3
    python = {n.name: str(n.bin_dir / "python3") for n in cluster.nodes}
    assert data["all"]["hosts"] == {
        "node01": {"address": "127.0.1.1", "probe_python": python["node01"]},
        "node02": {"address": "127.0.1.2", "probe_python": python["node02"], "driver_version": "550.120"}}
    assert '  driver_version: "550.120"\n' in text
    assert f"  ssh_port: {cluster.port}\n" in text and '  connection: "ssh"\n' in text
    with pytest.raises(KeyError):
        cluster.inventory_yaml(extra_host_vars={"nope": {}})
    from nvdeploy.config.inventory import load_inventory

    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    inventory = load_inventory(path)
    assert [(h.name, h.address, h.connection) for h in inventory.hosts] == [
        ("node01", "127.0.1.1", "ssh"), ("node02", "127.0.1.2", "ssh")]


@needs_sshd
@pytest.mark.timeout(120)
def test_given_workdir_is_checked_and_kept(tmp_path: Path) -> None:
    if os.geteuid() == 0:  # pytest's tmp_path is 0700: the nvdtest login user could not reach it
        with pytest.raises(HarnessError, match="not searchable"):
            SshCluster(1, workdir=tmp_path / "cluster").start()
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="nvd-sshd-test-", dir="/tmp"))
    base.chmod(0o755)
    try:
        with SshCluster(1, workdir=base / "cluster") as cluster:
            client = connect(cluster, cluster.nodes[0])
            assert run(client, "echo hi")[1] == "hi\n"
            client.close()
        assert (base / "cluster" / "nodes" / "node01" / "scenario.json").exists()
    finally:
        import shutil

        shutil.rmtree(base, ignore_errors=True)
