"""Install / run over real SSH: OpenSSH's sshd on loopback; the fake nodes keep their state in their home folder."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.install import run_install
from nvdeploy.phases.playbook import resolve_playbook
from nvdeploy.phases.rollout import PhaseOptions
from nvdeploy.phases.run import run_all
from nvdeploy.results import ClusterVerdict, ErrorReason, Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.runner.record import iter_files
from nvdeploy.sim import state
from nvdeploy.sim.scenario import NodeScenario

CATALOG = ProfileCatalog()
PROFILE = CATALOG.get("h100-sxm-8x")
CANARY = "Canary-Sudo-Pw-7f3e1"

pytestmark = [pytest.mark.usefixtures("requires_sshd")]


def scenario(name: str, *faults: str) -> tuple[str, str]:
    return name, NodeScenario(name, PROFILE, tuple(faults)).to_json()


def inventory(cluster, tmp_path: Path, name: str = "ssh.yaml"):
    path = tmp_path / name
    path.write_text(cluster.inventory_yaml(profile="h100-sxm-8x", command_timeout=120, connect_timeout=30).replace(
        "  vars:\n", '  vars:\n    driver_version: "550.90.07"\n', 1))
    return load_inventory(path, CATALOG)


def node_log(cluster, name: str) -> list[dict]:
    return state.read_file_state(cluster.node(name).home)[1]


@pytest.mark.timeout(600)
def test_bare_nodes_over_ssh_dry_run_then_run_ready_then_second_run_changes_nothing(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory([scenario("gpu01", "bare", "sudo_nopasswd"),
                                   scenario("gpu02", "bare", f"sudo_password:{CANARY}")])
    inv = inventory(cluster, tmp_path)
    options = PhaseOptions(engine=EngineOptions(sudo_password=CANARY))
    homes = {n.name: n.home for n in cluster.nodes}

    dry = run_install(inv, CATALOG, replace(options, dry_run=True), tmp_path / "reports",
                      resolve_playbook(None, "install"))
    assert dry.exit_code == 0, [f for n in dry.run.nodes for f in n.findings if f.verdict is not Verdict.PASS]
    assert dry.phases[0].counts()["would_change"] >= 8 * 2
    for name, home in homes.items():
        assert not (home / state.STATE_FILE_NAME).exists(), name  # nothing stored: nothing changed
        assert not [c for c in node_log(cluster, name) if c["mutates"]]
    plan = (dry.run_dir / "install-plan.txt").read_text()
    assert "would run: sudo -n -- sh -c" in plan and "nvdeploy-write" in plan and "apt-get -y -q" in plan

    first = run_all(inv, CATALOG, options, tmp_path / "reports", resolve_playbook(None, "run"))
    assert first.run.verdict is ClusterVerdict.READY, [f for n in first.run.nodes for f in n.findings
                                                       if f.verdict not in (Verdict.PASS, Verdict.SKIP)]
    assert first.exit_code == 0
    assert [p["phase"] for p in first.run.phases] == ["install", "validate", "optimize", "validate-after"]
    for name in homes:
        saved = state.read_file_state(homes[name])[0]
        assert saved is not None and saved.installed_driver == "550.90.07" and saved.governor == "performance"
        log = node_log(cluster, name)
        # sudo only where root is needed: every change went through sudo, no read did (but the sudo checks).
        assert all(c["sudo"] for c in log if c["mutates"])
        assert {tuple(c["argv"]) for c in log if c["sudo"] and not c["mutates"]} == {("true",)}
    marks = {name: len(node_log(cluster, name)) for name in homes}

    second = run_all(inv, CATALOG, options, tmp_path / "reports", resolve_playbook(None, "run"))
    assert second.run.verdict is ClusterVerdict.READY
    assert [p.counts()["changed"] for p in second.phases] == [0, 0]
    for name, mark in marks.items():
        assert not [c for c in node_log(cluster, name)[mark:] if c["mutates"]], name

    # The sudo password reached sudo only: not one file of any run folder holds it.
    for path in iter_files(tmp_path / "reports"):
        assert CANARY.encode() not in path.read_bytes(), path


@pytest.mark.timeout(300)
def test_failed_package_install_over_ssh_stops_the_rollout(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory([scenario("gpu01", "bare", "install_fail", "sudo_nopasswd"),
                                   scenario("gpu02", "bare", "sudo_nopasswd"),
                                   scenario("gpu03", "bare", "sudo_nopasswd")])
    inv = inventory(cluster, tmp_path)
    outcome = run_install(inv, CATALOG, PhaseOptions(serial="1", max_fail_percent=0), tmp_path / "r",
                          resolve_playbook(None, "install"))
    nodes = {n.name: n for n in outcome.run.nodes}
    driver = next(f for f in nodes["gpu01"].findings if f.check == "install.driver")
    assert driver.verdict is Verdict.FAIL and "nvidia-dkms-550" in driver.summary
    assert "rollout stopped after batch 1 of 3" in (outcome.phases[0].stopped or "")
    for name in ("gpu02", "gpu03"):
        assert nodes[name].verdict is Verdict.ERROR
        assert nodes[name].findings[0].reason is ErrorReason.NOT_RUN
        assert node_log(cluster, name) == []  # never connected to, never touched
    assert outcome.exit_code == 1


@pytest.mark.timeout(300)
def test_without_working_sudo_nothing_is_changed(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory([scenario("gpu01", "bare")])
    outcome = run_install(inventory(cluster, tmp_path), CATALOG, PhaseOptions(), tmp_path / "r",
                          resolve_playbook(None, "install"))
    sudo = next(f for f in outcome.run.nodes[0].findings if f.check == "install.sudo")
    assert sudo.verdict is Verdict.ERROR and sudo.reason is ErrorReason.SUDO
    assert "requires a password" in sudo.summary
    assert outcome.exit_code == 3
    assert not [c for c in node_log(cluster, "gpu01") if c["mutates"]]


@pytest.mark.timeout(600)
def test_a_node_with_cuda_keyring_over_ssh_reuses_its_repository_reaches_ready_and_a_second_run_changes_nothing(
        ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory([scenario("gpu01", "bare", "cuda_keyring", "dpkg_locked", "docker",
                                            "sudo_nopasswd")])
    inv = inventory(cluster, tmp_path)
    first = run_all(inv, CATALOG, PhaseOptions(), tmp_path / "reports", resolve_playbook(None, "run"))
    assert first.run.verdict is ClusterVerdict.READY, [f for n in first.run.nodes for f in n.findings
                                                       if f.verdict not in (Verdict.PASS, Verdict.SKIP)]
    install = next(p for p in first.run.phases if p["phase"] == "install")
    steps = {s["step"]: s for n in install["nodes"] for s in n["steps"]}
    assert steps["repo"]["status"] == "ok" and "cuda-ubuntu2204-x86_64.list" in steps["repo"]["message"]
    saved = state.read_file_state(cluster.node("gpu01").home)[0]
    assert saved is not None and "/etc/apt/sources.list.d/nvdeploy-nvidia.list" not in saved.files
    assert "datacenter-gpu-manager-4-core" in saved.packages
    assert '"nvidia"' in saved.files["/etc/docker/daemon.json"] and "/etc/cdi/nvidia.yaml" in saved.files
    log = node_log(cluster, "gpu01")
    assert all("DPkg::Lock::Timeout=600" in c["argv"] for c in log if c["mutates"] and "apt-get" in c["argv"])
    mark = len(log)
    second = run_all(inv, CATALOG, PhaseOptions(), tmp_path / "reports", resolve_playbook(None, "run"))
    assert second.run.verdict is ClusterVerdict.READY
    assert [p.counts()["changed"] for p in second.phases] == [0, 0]
    assert not [c for c in node_log(cluster, "gpu01")[mark:] if c["mutates"]]
