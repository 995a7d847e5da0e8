"""``nvdeploy node-check`` on this machine with the simulated NVIDIA tools first on PATH: one line, the exit
status, the drain reason text; no Slurm needed (the Slurm side is in tests/e2e/slurm)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.sim.fake_tool import install_fake_tools
from nvdeploy.sim.scenario import NodeScenario


@pytest.fixture
def node(tmp_path: Path):
    install_fake_tools(tmp_path / "bin")
    (tmp_path / "lock").mkdir()

    def check(*faults: str, args: tuple = (), profile: str = "h100-sxm-8x") -> subprocess.CompletedProcess:
        scenario = tmp_path / "scenario.json"
        scenario.write_text(NodeScenario("gpu7", ProfileCatalog().get(profile), faults).to_json())
        env = dict(os.environ, PATH=f"{tmp_path}/bin:/usr/bin:/bin", NVD_SCENARIO_FILE=str(scenario),
                   NVDEPLOY_LOCK_DIR=str(tmp_path / "lock"), SLURM_CONF=str(tmp_path / "no-slurm.conf"))
        env.pop("SLURMD_NODENAME", None)
        return subprocess.run([sys.executable, "-m", "nvdeploy", "node-check", "--profile", profile,
                               "--node", "gpu7", "--timeout", "30", *args], env=env, capture_output=True, text=True,
                              timeout=120)

    return check


def test_healthy_node_one_line_exit_0(node) -> None:
    done = node()
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(done.stdout.splitlines()) == 1 and done.stdout.startswith("nvdeploy node-check gpu7: PASS (")


def test_failed_node_names_the_checks_exit_1(node) -> None:
    done = node("gpu_missing", "xid79")
    assert done.returncode == 1
    assert done.stdout.startswith("nvdeploy node-check gpu7: FAIL gpu.count 7/8, gpu.pci_visible 8/7, kmsg.xid ")


def test_hung_tool_is_error_exit_3_not_a_hung_health_check(node) -> None:
    done = node("hang", args=("--timeout", "2"))
    assert done.returncode == 3, done.stdout + done.stderr
    assert ": ERROR " in done.stdout and "timeout" in done.stdout


def test_drain_without_a_reachable_slurm_keeps_the_verdict_and_says_so(node) -> None:
    done = node("gpu_missing", args=("--drain", "--confirm", "1", "--slurm-timeout", "5"))
    assert done.returncode == 1
    assert "; slurm: " in done.stdout


def test_profile_required(node, monkeypatch) -> None:
    done = subprocess.run([sys.executable, "-m", "nvdeploy", "node-check"], capture_output=True, text=True,
                          timeout=60, env={k: v for k, v in os.environ.items() if k != "NVDEPLOY_PROFILE"})
    assert done.returncode == 2 and "--profile or $NVDEPLOY_PROFILE is required" in done.stderr


@pytest.mark.parametrize("fault,check", [("fabricmanager_down", "fabric.manager"), ("nvlink_down", "nvlink.links"),
                                         ("thermal_throttle", "clocks.throttle")])
def test_faults_that_stop_jobs_fail_the_health_check(node, fault: str, check: str) -> None:
    done = node(fault)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith("nvdeploy node-check gpu7: FAIL ") and check in done.stdout


def test_a_node_check_holding_the_lock_is_named_by_the_next_one(node, tmp_path: Path) -> None:
    """Slurm runs the health check every few seconds: a run that finds the node busy must say it was one."""
    scenario = tmp_path / "scenario.json"
    scenario.write_text(NodeScenario("gpu7", ProfileCatalog().get("h100-sxm-8x"), ("hang",)).to_json())
    env = dict(os.environ, PATH=f"{tmp_path}/bin:/usr/bin:/bin", NVD_SCENARIO_FILE=str(scenario),
               NVDEPLOY_LOCK_DIR=str(tmp_path / "lock"), SLURM_CONF=str(tmp_path / "no-slurm.conf"))
    first = subprocess.Popen([sys.executable, "-m", "nvdeploy", "node-check", "--profile", "h100-sxm-8x", "--node",
                              "gpu7", "--timeout", "20"], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while (not any(p.read_text().endswith("\n") for p in (tmp_path / "lock").glob("holder.*"))
               and time.monotonic() < deadline):
            time.sleep(0.1)  # the holder file is made first, then written
        (holder,) = (tmp_path / "lock").glob("holder.*")
        assert " run=node-check-" in " " + holder.read_text()
        second = node()
        assert second.returncode == 3, second.stdout + second.stderr
        assert "another nvdeploy run holds the node lock: run node-check-" in second.stdout, second.stdout
    finally:
        first.kill()
        first.wait(timeout=30)


def test_drain_waits_for_the_second_fail_and_keeps_the_counts_beside_the_lock(node, tmp_path: Path) -> None:
    """Anti-flap: the first FAIL is reported but Slurm is not asked; the second consecutive one drains."""
    first = node("nvlink_down", args=("--drain", "--slurm-timeout", "2"))
    assert first.returncode == 1, first.stdout + first.stderr
    assert first.stdout.rstrip().endswith("; FAIL seen 1 of 2 times: not drained yet"), first.stdout
    assert "slurm" not in first.stdout
    state = tmp_path / "lock" / "node-check.state.json"
    assert oct(state.stat().st_mode & 0o777) == "0o600"
    assert '"nvlink.links#GPU3": {"count": 1, "verdict": "FAIL"}' in state.read_text()  # per check and GPU
    second = node("nvlink_down", args=("--drain", "--slurm-timeout", "2"))
    assert second.returncode == 1 and "not drained yet" not in second.stdout and "; slurm: " in second.stdout


def test_a_pass_between_two_fails_holds_the_drain_again(node) -> None:
    node("nvlink_down", args=("--drain",))
    assert node(args=("--drain",)).returncode == 0
    again = node("nvlink_down", args=("--drain",))
    assert "FAIL seen 1 of 2 times: not drained yet" in again.stdout, again.stdout


def test_confirm_from_the_environment_and_settle_after_boot(node, monkeypatch) -> None:
    monkeypatch.setenv("NVDEPLOY_CONFIRM", "1")
    once = node("gpu_missing", args=("--drain", "--slurm-timeout", "2"))
    assert "not drained" not in once.stdout and "; slurm: " in once.stdout, once.stdout
    # Any machine's uptime is inside a settle time this long: reported FAIL, never drained, Slurm not asked.
    settling = node("gpu_missing", args=("--drain", "--confirm", "1", "--settle", "1e9"))
    assert settling.returncode == 1 and "FAIL within the settle time (" in settling.stdout, settling.stdout
    assert "slurm" not in settling.stdout
    monkeypatch.setenv("NVDEPLOY_CONFIRM", "0")
    bad = node(args=("--drain",))
    assert bad.returncode == 2 and "$NVDEPLOY_CONFIRM='0' is not a whole number of at least 1" in bad.stderr, bad.stderr


def test_a_healthy_nvl72_tray_passes(node) -> None:
    done = node(profile="gb200-nvl72")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("nvdeploy node-check gpu7: PASS ("), done.stdout


def test_a_tray_the_driver_asks_to_reset_is_named_and_drains_only_on_the_second_fail(node, tmp_path: Path) -> None:
    first = node("recovery_reset", args=("--drain", "--slurm-timeout", "2"), profile="gb200-nvl72")
    assert first.returncode == 1, first.stdout + first.stderr
    assert first.stdout.startswith("nvdeploy node-check gpu7: FAIL gpu.recovery_action"), first.stdout
    assert first.stdout.rstrip().endswith("; FAIL seen 1 of 2 times: not drained yet"), first.stdout
    second = node("recovery_reset", args=("--drain", "--slurm-timeout", "2"), profile="gb200-nvl72")
    assert "not drained yet" not in second.stdout and "; slurm: " in second.stdout, second.stdout


def test_a_tray_whose_fabric_registration_is_in_progress_is_named(node) -> None:
    done = node("fabric_incomplete", profile="gb200-nvl72")
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.startswith("nvdeploy node-check gpu7: ERROR nvlink.fabric"), done.stdout


def test_an_h100_node_gets_no_nvlink_domain_or_imex_finding(node, tmp_path: Path) -> None:
    """The tray checks SKIP off an NVLink domain: an IMEX fault on an H100 does not reach the line or the counts."""
    done = node("imex_down", args=("--drain",))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "imex" not in done.stdout and "fabric" not in done.stdout, done.stdout
    state = (tmp_path / "lock" / "node-check.state.json").read_text()
    assert "imex" not in state and "nvlink.fabric" not in state and "recovery" not in state, state
