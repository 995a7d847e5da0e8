"""End to end over real SSH: the busy guard, fail fast per node, and sudo's one try, on fake GPU nodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.levels import load_levels
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import ErrorReason, Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim.scenario import NodeScenario

CATALOG = ProfileCatalog()
PROFILE = CATALOG.get("h100-sxm-8x")
HEAVY = {"dcgm.diag_r2": "dcgm_diag_r2", "nccl.all_reduce": "nccl_all_reduce"}

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("requires_sshd")]


def scenario(name: str, *faults: str) -> tuple[str, str]:
    return name, NodeScenario(name, PROFILE, tuple(faults)).to_json()


def validate(cluster, tmp_path: Path, options: EngineOptions, extra_host_vars=None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "ssh.yaml"
    # Generous timeouts: the fake tools are Python processes on a shared 2-core machine.
    path.write_text(cluster.inventory_yaml(profile="h100-sxm-8x", extra_host_vars=extra_host_vars,
                                           command_timeout=120, connect_timeout=30))
    return run_validate(load_inventory(path, CATALOG), CATALOG, options, tmp_path / "reports",
                        level="standard" if options.checks != load_levels()["quick"] else "quick")


def findings(outcome, name: str, checks) -> dict:
    result = next(n for n in outcome.run.nodes if n.name == name)
    return {f.check: f for f in result.findings if f.check in checks}


def sent(outcome, name: str) -> set[str]:
    return {e.collector for e in next(n for n in outcome.run.nodes if n.name == name).evidence}


def test_busy_and_hung_nodes_get_no_heavy_test_over_ssh(ssh_cluster_factory, tmp_path):
    # dcgm_hang/nccl_hang on the hung node: had its heavy tests started, the run would wait out their timeouts.
    cluster = ssh_cluster_factory([scenario("gpu01"), scenario("gpu02", "gpu_busy"),
                                   scenario("gpu03", "smi_hang", "dcgm_hang", "nccl_hang")])
    options = EngineOptions(checks=load_levels()["standard"])
    short = {"gpu03": {"command_timeout": 8}}  # nvidia-smi hangs there: the light batch waits only this long
    outcome = validate(cluster, tmp_path, options, extra_host_vars=short)

    healthy = findings(outcome, "gpu01", HEAVY)
    assert {c: f.verdict for c, f in healthy.items()} == {c: Verdict.PASS for c in HEAVY}, healthy
    assert set(HEAVY.values()) <= sent(outcome, "gpu01")

    busy = findings(outcome, "gpu02", HEAVY)
    assert set(busy) == set(HEAVY)
    for finding in busy.values():
        assert finding.verdict is Verdict.ERROR and finding.reason is ErrorReason.BUSY
        assert "pid 41230 python3 (30512 MiB), pid 41231 python3 (30512 MiB)" in finding.summary
    quick = findings(outcome, "gpu02", load_levels()["quick"])
    assert quick and all(f.verdict in (Verdict.PASS, Verdict.SKIP) for f in quick.values()), quick

    hung = findings(outcome, "gpu03", HEAVY)
    assert set(hung) == set(HEAVY)
    for finding in hung.values():
        assert finding.verdict is Verdict.ERROR and finding.reason is ErrorReason.NOT_RUN
        assert finding.summary.startswith("skipped: nvidia-smi hung"), finding.summary

    for name in ("gpu02", "gpu03"):
        assert not sent(outcome, name) & set(HEAVY.values()), name  # never sent to the node

    allowed = validate(cluster, tmp_path / "allowed", EngineOptions(checks=load_levels()["standard"],
                                                                    allow_busy=True), extra_host_vars=short)
    assert {c: f.verdict for c, f in findings(allowed, "gpu02", HEAVY).items()} == {c: Verdict.PASS for c in HEAVY}


def test_a_rejected_sudo_password_is_tried_on_one_node_only(ssh_cluster_factory, tmp_path):
    names = ("gpu01", "gpu02", "gpu03")
    cluster = ssh_cluster_factory([scenario(n, "sudo_password:right-one") for n in names])
    options = EngineOptions(sudo_password="a-typo", forks=3)
    outcome = validate(cluster, tmp_path, options, extra_host_vars={n: {"sudo": True} for n in names})
    sudo = {n: findings(outcome, n, {"system.sudo"})["system.sudo"] for n in names}
    assert all(f.verdict is Verdict.ERROR and f.reason is ErrorReason.SUDO for f in sudo.values()), sudo
    tried = [n for n, f in sudo.items() if "not tried here" not in f.summary]
    assert len(tried) == 1, sudo
    for name, finding in sudo.items():
        if name != tried[0]:
            assert f"password rejected on {tried[0]}; not tried here" in finding.summary
    assert "a-typo" not in (outcome.run_dir / "results.json").read_text()


def test_a_node_held_by_another_run_is_error_busy_naming_the_holder(ssh_cluster_factory, tmp_path):
    import fcntl
    import os

    cluster = ssh_cluster_factory([scenario("gpu01")])
    lock_dir = cluster.node("gpu01").home / "nvdeploy.lock"  # the harness's NVDEPLOY_LOCK_DIR for this node
    lock_dir.mkdir(mode=0o1777, exist_ok=True)
    holder = lock_dir / f"holder.{os.getpid()}"  # a live pid: the lock is held, not stale
    holder.write_text(f"user=alice run=20261201T050000Z-other since=2026-12-01T05:00:00Z pid={os.getpid()}\n")
    fd = os.open(lock_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        held = validate(cluster, tmp_path / "held", EngineOptions(checks=load_levels()["standard"]))
    finally:
        os.close(fd)  # releases the flock
    node = held.run.nodes[0]
    busy = [f for f in node.findings if f.reason is ErrorReason.BUSY]
    assert [f.check for f in busy] == ["system.lock"], node.findings
    assert "run 20261201T050000Z-other of user alice" in busy[0].summary
    assert node.verdict is Verdict.ERROR and node.evidence == ()  # nothing ran, heavy or light
    holder.unlink()
    free = validate(cluster, tmp_path / "free", EngineOptions(checks=load_levels()["quick"]))
    assert free.run.nodes[0].verdict is Verdict.PASS, free.run.nodes[0].findings


def test_no_heavy_test_starts_after_the_deadline_over_ssh(ssh_cluster_factory, tmp_path):
    # dcgmi diag hangs: it is cut at the deadline on the node (its timeout is capped to the time left), and
    # nccl-tests, next in line, must not start at all.
    # 40 s: the light batch (its nvidia-smi capped to the time left) must finish well inside it on a loaded
    # machine, so that what the deadline stops is the heavy step (at 15 s, CI under 4 workers saw nvidia-smi cut).
    cluster = ssh_cluster_factory([scenario("gpu01", "dcgm_hang")])
    options = EngineOptions(checks=load_levels()["standard"], deadline_s=40)
    outcome = validate(cluster, tmp_path, options)
    heavy = findings(outcome, "gpu01", HEAVY)
    nccl = heavy["nccl.all_reduce"]
    assert (nccl.verdict, nccl.reason, nccl.summary) == (Verdict.ERROR, ErrorReason.NOT_RUN,
                                                         "skipped: the global --deadline passed")
    dcgm = heavy["dcgm.diag_r2"]
    assert dcgm.verdict is Verdict.ERROR and dcgm.reason in (ErrorReason.TIMEOUT, ErrorReason.NOT_RUN), dcgm
    assert "nccl_all_reduce" not in sent(outcome, "gpu01")
