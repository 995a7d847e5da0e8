"""``ssh_jump`` over real OpenSSH: a second sshd on loopback is the bastion, the fake nodes sit behind it.

- a run through the bastion works and gives the same findings as a direct run;
- a frozen bastion (its sshd SIGSTOPped: TCP accepted by the kernel, no banner) is ERROR ``unreachable`` naming
  the jump host, by connect_timeout, not after paramiko's hour;
- a bastion that refuses, or that cannot reach the node, is ERROR ``unreachable`` naming the jump host;
- a bastion whose forwarded connection hangs (the node's port a black hole) ends at connect_timeout: the
  direct-tcpip channel wait that fabric leaves unbounded.

Every address is in 127.0.0.0/8. Time bounds are loose (3x connect_timeout): they prove "does not hang".
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest
import yaml

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import ErrorReason, Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim.scenario import NodeScenario
from nvdeploy.testing.faults import black_hole
from nvdeploy.testing.sshd import SshCluster, free_port
from nvdeploy.transport.base import TransportError
from nvdeploy.transport.ssh import SSHTransport

CATALOG = ProfileCatalog()
PROFILE = CATALOG.get("h100-sxm-8x")
# Long enough for a live bastion's key exchange on a loaded machine (the suite runs in parallel workers): the
# tests that end at the timeout need the bastion connected first, then the stage that hangs.
CONNECT_TIMEOUT = 10.0
BASTION_INDEX = 254 * 200  # 127.0.201.1: an address of its own, apart from the nodes'

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("requires_sshd")]


def scenario(name: str, *faults: str) -> tuple[str, str]:
    return name, NodeScenario(name, PROFILE, tuple(faults)).to_json()


@contextlib.contextmanager
def bastion_for(cluster: SshCluster, also_permit: tuple[str, ...] = ()) -> Iterator[SshCluster]:
    bastion = SshCluster([("bastion", "{}")], install_tools=False, forward_to=cluster, first_index=BASTION_INDEX,
                         also_permit=also_permit)
    bastion.start()
    try:
        yield bastion
    finally:
        bastion.stop()


def jump_spec(bastion: SshCluster) -> str:
    node = bastion.nodes[0]
    return f"{bastion.user}@{node.address}:{node.port}"


def both_known_hosts(cluster: SshCluster, bastion: SshCluster, folder: Path) -> Path:
    path = folder / "known_hosts"
    path.write_text(cluster.known_hosts.read_text() + bastion.known_hosts.read_text())
    return path


def inventory(cluster: SshCluster, folder: Path, **all_vars: object) -> Path:
    data = yaml.safe_load(cluster.inventory_yaml(profile="h100-sxm-8x", command_timeout=120))
    data["all"]["vars"].update(all_vars)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "inventory.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def validate(path: Path, folder: Path):
    options = EngineOptions(connect_timeout_s=CONNECT_TIMEOUT)
    began = time.monotonic()
    outcome = run_validate(load_inventory(path, CATALOG), CATALOG, options, folder / "reports")
    return outcome, time.monotonic() - began


def comparable(node) -> list[tuple[str, str, str, str]]:
    return sorted((f.check, f.verdict.value, f.summary, str(f.observed)) for f in node.findings
                  if f.check != "system.reachable")


def reach(node):
    (finding,) = [f for f in node.findings if f.check == "system.reachable"]
    return finding


def test_run_through_the_jump_host_gives_the_same_findings_as_direct(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory([scenario("gpu01"), scenario("gpu02", "xid79", "row_remap_pending")])
    with bastion_for(cluster) as bastion:
        known = both_known_hosts(cluster, bastion, tmp_path)
        direct, _ = validate(inventory(cluster, tmp_path / "direct"), tmp_path / "direct")
        jumped, took = validate(inventory(cluster, tmp_path / "jump", ssh_jump=jump_spec(bastion),
                                          ssh_known_hosts=str(known)), tmp_path / "jump")
        # The transport really goes through the bastion: the node's connection is a channel of the jump host's,
        # and the bastion serves a session while it is open.
        node = cluster.nodes[0]
        transport = SSHTransport(node.address, user=cluster.user, port=node.port, key_file=str(cluster.client_key),
                                 known_hosts=str(known), jump=jump_spec(bastion), connect_timeout_s=CONNECT_TIMEOUT)
        transport.connect()
        try:
            inner = transport._conn.client.get_transport()  # noqa: SLF001
            assert isinstance(inner.sock, paramiko.Channel)
            assert bastion.session_pids("bastion")
        finally:
            transport.close()
    by_direct = {n.name: n for n in direct.run.nodes}
    by_jump = {n.name: n for n in jumped.run.nodes}
    assert set(by_jump) == {"gpu01", "gpu02"}
    assert by_jump["gpu01"].verdict is Verdict.PASS, by_jump["gpu01"].findings
    assert by_jump["gpu02"].verdict is Verdict.FAIL
    for name in by_direct:
        assert reach(by_jump[name]).verdict is Verdict.PASS
        assert comparable(by_jump[name]) == comparable(by_direct[name]), name
    print(f"\nvalidate of 2 nodes through the jump host: {took:.2f} s")


def test_frozen_jump_host_is_unreachable_by_connect_timeout(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory([scenario("gpu01"), scenario("gpu02")])
    with bastion_for(cluster) as bastion:
        known = both_known_hosts(cluster, bastion, tmp_path)
        path = inventory(cluster, tmp_path, ssh_jump=jump_spec(bastion), ssh_known_hosts=str(known))
        listeners = bastion.listener_pids
        assert listeners
        for pid in listeners:
            os.kill(pid, signal.SIGSTOP)  # the kernel still completes TCP handshakes; sshd never answers
        try:
            outcome, took = validate(path, tmp_path)
        finally:
            for pid in listeners:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
    bastion_at = f"{bastion.nodes[0].address}:{bastion.nodes[0].port}"
    for node in outcome.run.nodes:
        finding = reach(node)
        assert (finding.verdict, finding.reason) == (Verdict.ERROR, ErrorReason.UNREACHABLE), finding
        assert f"through jump host {bastion_at}" in finding.summary, finding.summary
        assert f"no SSH banner from {bastion_at}" in finding.summary, finding.summary
        assert node.evidence == ()
        assert node.duration_s < 3 * CONNECT_TIMEOUT, (node.name, node.duration_s)
    assert took < 60
    print(f"\nfrozen jump host: nodes ERROR after {max(n.duration_s for n in outcome.run.nodes):.2f} s "
          f"(connect timeout {CONNECT_TIMEOUT:g} s)")


def test_refusing_jump_host_is_unreachable_naming_it(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory([scenario("gpu01")])
    closed = f"127.0.201.9:{free_port()}"
    path = inventory(cluster, tmp_path, ssh_jump=f"{cluster.user}@{closed}")
    outcome, _ = validate(path, tmp_path)
    (node,) = outcome.run.nodes
    finding = reach(node)
    assert (finding.verdict, finding.reason) == (Verdict.ERROR, ErrorReason.UNREACHABLE)
    assert f"through jump host {closed}" in finding.summary and "refused" in finding.summary, finding.summary
    assert node.evidence == ()


def test_jump_host_that_cannot_reach_the_node_names_both(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory([scenario("gpu01")])
    closed_port = free_port()
    with bastion_for(cluster, also_permit=(f"127.0.1.1:{closed_port}",)) as bastion:
        known = both_known_hosts(cluster, bastion, tmp_path)
        cases = {closed_port: "Connect failed", 1: "prohibited"}  # nothing listening; not in PermitOpen
        for port, words in cases.items():
            transport = SSHTransport("127.0.1.1", user=cluster.user, port=port, key_file=str(cluster.client_key),
                                     known_hosts=str(known), jump=jump_spec(bastion),
                                     connect_timeout_s=CONNECT_TIMEOUT)
            with pytest.raises(TransportError) as caught:
                transport.connect()
            assert caught.value.reason is ErrorReason.UNREACHABLE
            detail = caught.value.detail
            bastion_at = f"{bastion.nodes[0].address}:{bastion.nodes[0].port}"
            assert f"jump host {bastion_at} could not connect to 127.0.1.1:{port}" in detail, detail
            assert words in detail, detail


def test_hanging_forwarded_connection_ends_at_connect_timeout(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory([scenario("gpu01")])
    with black_hole() as (hole, hole_port), bastion_for(cluster, also_permit=(f"{hole}:{hole_port}",)) as bastion:
        known = both_known_hosts(cluster, bastion, tmp_path)
        transport = SSHTransport(hole, user=cluster.user, port=hole_port, key_file=str(cluster.client_key),
                                 known_hosts=str(known), jump=jump_spec(bastion), connect_timeout_s=CONNECT_TIMEOUT)
        began = time.monotonic()
        with pytest.raises(TransportError) as caught:
            transport.connect()
        took = time.monotonic() - began
    assert caught.value.reason is ErrorReason.UNREACHABLE
    bastion_at = f"{bastion.nodes[0].address}:{bastion.nodes[0].port}"
    assert caught.value.detail == (f"jump host {bastion_at} did not open a connection to {hole}:{hole_port} "
                                   f"within {CONNECT_TIMEOUT:g} s")
    assert took < 3 * CONNECT_TIMEOUT
    print(f"\nforwarded connection to a black hole: ERROR after {took:.2f} s (connect timeout {CONNECT_TIMEOUT:g} s)")
