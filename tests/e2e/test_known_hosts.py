"""Learned host keys persist, in the file OpenSSH itself uses, over real OpenSSH on loopback.

Without ``ssh_known_hosts`` the transport reads and learns into ``~/.ssh/known_hosts`` (HOME points at a temp
folder here): strict by default, ``--accept-new-host-keys`` writes the new keys there (``[host]:port`` lines,
folder 0700, file 0600), a later run without the flag uses them, OpenSSH's ``ssh-keygen -F`` and ``ssh`` find
them, and a changed key is still refused. Many nodes learning at once, through one jump host, write each key
exactly once.
"""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import ErrorReason, Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim.scenario import NodeScenario
from nvdeploy.testing.faults import run_nvdeploy
from nvdeploy.testing.sshd import SshCluster

CATALOG = ProfileCatalog()
PROFILE = CATALOG.get("h100-sxm-8x")

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("requires_sshd")]


def scenario(name: str) -> tuple[str, str]:
    return name, NodeScenario(name, PROFILE, ()).to_json()


def inventory_without_known_hosts(cluster: SshCluster, folder: Path, **all_vars: object) -> Path:
    data = yaml.safe_load(cluster.inventory_yaml(profile="h100-sxm-8x", command_timeout=120))
    del data["all"]["vars"]["ssh_known_hosts"]
    data["all"]["vars"].update(all_vars)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "inventory.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def validate(path: Path, folder: Path, accept_new: bool = False):
    options = EngineOptions(accept_new_host_keys=accept_new, connect_timeout_s=10)
    return run_validate(load_inventory(path, CATALOG), CATALOG, options, folder / "reports")


def reach(node):
    (finding,) = [f for f in node.findings if f.check == "system.reachable"]
    return finding


def test_learned_keys_go_to_the_users_known_hosts_and_are_used_next_time(ssh_cluster_factory, tmp_path,
                                                                         monkeypatch):
    cluster = ssh_cluster_factory([scenario("gpu01"), scenario("gpu02"), scenario("gpu03")])
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    known = home / ".ssh" / "known_hosts"
    path = inventory_without_known_hosts(cluster, tmp_path)

    # Strict by default: nothing known yet, so every node is refused and nothing is written.
    refused = validate(path, tmp_path / "strict")
    for node in refused.run.nodes:
        assert (reach(node).verdict, reach(node).reason) == (Verdict.ERROR, ErrorReason.HOST_KEY), node.name
        assert f"is not in {known};" in reach(node).summary and "--accept-new-host-keys" in reach(node).summary
    assert not known.exists()

    # The CLI flag learns the keys into ~/.ssh/known_hosts (the subprocess gets the same HOME).
    run = run_nvdeploy(["validate", "-i", str(path), "--out", str(tmp_path / "learn"), "--accept-new-host-keys"],
                       env={"HOME": str(home)}, cwd=tmp_path, timeout=180)
    assert run.rc == 0, run.stdout + run.stderr
    assert stat.S_IMODE(known.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(known.stat().st_mode) == 0o600
    assert sorted(known.read_text().splitlines()) == sorted(cluster.known_hosts.read_text().splitlines())
    assert all(line.startswith("[127.0.1.") and f"]:{cluster.port} ssh-ed25519 " in line
               for line in known.read_text().splitlines())

    # A second run without the flag uses them.
    again = validate(path, tmp_path / "again")
    assert [reach(n).verdict for n in again.run.nodes] == [Verdict.PASS] * 3
    assert again.run.nodes[0].verdict is Verdict.PASS, again.run.nodes[0].findings

    # OpenSSH reads the file as its own.
    node = cluster.node("gpu02")
    found = subprocess.run(["ssh-keygen", "-F", f"[{node.address}]:{node.port}", "-f", str(known)],
                           capture_output=True, text=True, check=False)
    assert found.returncode == 0, found.stderr
    assert cluster.known_hosts.read_text().splitlines()[1].split()[2] in found.stdout
    if shutil.which("ssh"):
        ssh = subprocess.run(["ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                              "-o", f"UserKnownHostsFile={known}", "-o", "GlobalKnownHostsFile=/dev/null",
                              "-o", "ConnectTimeout=10", "-i", str(cluster.client_key), "-p", str(node.port),
                              f"{cluster.user}@{node.address}", "echo", "strict-ok"],
                             capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60, check=False)
        assert (ssh.returncode, ssh.stdout.strip()) == (0, "strict-ok"), ssh.stderr


def test_a_changed_key_is_refused_even_with_accept_new(ssh_cluster_factory, tmp_path, monkeypatch):
    import paramiko

    cluster = ssh_cluster_factory([scenario("gpu01"), scenario("gpu02")])
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    known = home / ".ssh" / "known_hosts"
    victim, other = cluster.nodes
    forged = paramiko.Ed25519Key.from_private_key_file(str(cluster.client_key))  # any other ed25519 key
    # No newline at the end: the learned line must still start on a line of its own.
    known.write_text(f"[{victim.address}]:{victim.port} ssh-ed25519 {forged.get_base64()}")
    outcome = validate(inventory_without_known_hosts(cluster, tmp_path), tmp_path, accept_new=True)
    nodes = {n.name: n for n in outcome.run.nodes}
    finding = reach(nodes[victim.name])
    assert (finding.verdict, finding.reason) == (Verdict.ERROR, ErrorReason.HOST_KEY)
    assert "HOST KEY CHANGED" in finding.summary
    assert nodes[victim.name].evidence == ()
    assert reach(nodes[other.name]).verdict is Verdict.PASS
    lines = known.read_text().splitlines()
    assert lines[0] == f"[{victim.address}]:{victim.port} ssh-ed25519 {forged.get_base64()}"  # untouched
    assert lines[1:] == [line for line in cluster.known_hosts.read_text().splitlines()
                         if line.startswith(f"[{other.address}]:")]


def test_many_nodes_learning_at_once_through_one_jump_host_write_each_key_once(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory([scenario(f"gpu{i:02d}") for i in range(1, 7)])
    bastion = SshCluster([("bastion", "{}")], install_tools=False, forward_to=cluster, first_index=254 * 200)
    bastion.start()
    try:
        jump_node = bastion.nodes[0]
        learned = tmp_path / "fleet" / "known_hosts"  # its folder does not exist yet
        path = inventory_without_known_hosts(cluster, tmp_path, ssh_known_hosts=str(learned),
                                             ssh_jump=f"{bastion.user}@{jump_node.address}:{jump_node.port}")
        outcome = validate(path, tmp_path, accept_new=True)
        assert [reach(n).verdict for n in outcome.run.nodes] == [Verdict.PASS] * 6
        expected = cluster.known_hosts.read_text().splitlines() + bastion.known_hosts.read_text().splitlines()
        lines = learned.read_text().splitlines()
        assert sorted(lines) == sorted(expected)  # the bastion's key once, though six connections learned it
        again = validate(path, tmp_path / "again")
        assert [reach(n).verdict for n in again.run.nodes] == [Verdict.PASS] * 6
        assert learned.read_text().splitlines() == lines
    finally:
        bastion.stop()
