"""Stateful simulated nodes: what install/optimize change is what validate then sees; other nodes are unchanged."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.sim import scenario as scenario_module
from nvdeploy.sim import state
from nvdeploy.sim.fake_tool import FAKE_TOOLS, install_fake_tools
from nvdeploy.sim.scenario import NodeScenario, node_facts
from nvdeploy.sim.tools import run_tool

CATALOG = ProfileCatalog()
H100 = CATALOG.get("h100-sxm-8x")


@pytest.fixture(autouse=True)
def fresh_state():
    state.reset_memory()
    yield
    state.reset_memory()


def node(*faults: str, name: str = "gpu01", **kw) -> NodeScenario:
    return NodeScenario(name, H100, tuple(faults), cluster="unit", **kw)


@pytest.mark.parametrize("faults", [(), ("persistence_off",), ("driver_missing",), ("driver_mismatch",),
                                    ("gpu_missing", "xid79"), ("mig_enabled",), ("ecc_uncorrectable",)])
def test_a_node_without_state_faults_reports_exactly_what_it_did_before(monkeypatch, faults):
    plain = node(*faults)
    with_state = node_facts(plain)
    monkeypatch.setattr(scenario_module, "FACT_FILTERS", [])
    assert node_facts(plain) == with_state
    assert not state.involved(plain)


def test_bare_node_has_no_nvidia_software_until_installed():
    bare = node("bare")
    assert run_tool(bare, ["nvidia-smi", "-q", "-x"]).rc == 127
    assert run_tool(bare, ["dcgmi", "discovery", "-l"]).rc == 127
    assert run_tool(bare, ["nv-fabricmanager", "--version"]).rc == 127
    assert b"nvidia" not in run_tool(bare, ["lsmod"]).stdout
    assert run_tool(bare, ["systemctl", "is-active", "nvidia-dcgm"]).stdout == b"inactive\n"
    assert run_tool(bare, ["lspci", "-D", "-n", "-d", "10de:"]).stdout.count(b"0302:") == 8  # the GPUs are there
    assert b"NVRM: loading" not in run_tool(bare, ["dmesg"]).stdout
    # Installing changes what every tool reports.
    sudo = ["sudo", "-n", "--"]
    repo = state.official_repo_text("apt", "ubuntu2204").strip()
    assert run_tool(bare, [*sudo, "sh", "-c", "x", "nvdeploy-write", repo, state.repo_file("apt")]).rc == 0
    assert run_tool(bare, [*sudo, "apt-get", "install", "nvidia-driver-550"]).rc == 100  # not updated yet
    assert run_tool(bare, [*sudo, "apt-get", "update"]).rc == 0
    assert run_tool(bare, [*sudo, "apt-get", "-y", "install", "nvidia-driver-550"]).rc == 0
    assert run_tool(bare, ["nvidia-smi", "-q", "-x"]).rc == 9  # installed, module not loaded
    assert run_tool(bare, [*sudo, "modprobe", "nvidia"]).rc == 0
    xml = run_tool(bare, ["nvidia-smi", "-q", "-x"])
    assert xml.rc == 0 and b"<driver_version>550.90.07</driver_version>" in xml.stdout
    assert b"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07" in run_tool(bare, ["dmesg"]).stdout


def test_root_only_commands_fail_without_sudo_like_the_real_tools():
    plain = node("persistence_off")
    out = run_tool(plain, ["nvidia-smi", "-pm", "1"])
    assert out.rc == 4 and b"Insufficient Permissions" in out.stdout
    assert run_tool(plain, ["systemctl", "enable", "--now", "nvidia-persistenced"]).rc == 1
    assert state.stored(plain) is None
    assert run_tool(plain, ["sudo", "-n", "--", "systemctl", "enable", "--now", "nvidia-persistenced"]).rc == 0
    assert b"Enabled" in run_tool(plain, ["nvidia-smi", "--query-gpu=persistence_mode", "--format=csv"]).stdout
    calls = state.calls(plain)
    assert [c["sudo"] for c in calls if c["argv"][:2] == ["systemctl", "enable"]] == [False, True]


def test_settings_queries_and_changes_on_every_gpu():
    capped = node("power_capped")
    query = ["nvidia-smi", "--query-gpu=power.limit,power.default_limit,compute_mode,clocks.applications.memory",
             "--format=csv,noheader,nounits"]
    assert run_tool(capped, query).stdout.decode().splitlines()[0] == "560.00, 700.00, Default, 2619"
    assert run_tool(capped, ["sudo", "-n", "--", "nvidia-smi", "-pl", "800"]).rc == 2  # above the maximum
    set_out = run_tool(capped, ["sudo", "-n", "--", "nvidia-smi", "-pl", "700"])
    assert set_out.rc == 0 and b"was set to 700.00 W from 560.00 W" in set_out.stdout
    assert run_tool(capped, ["sudo", "-n", "--", "nvidia-smi", "-c", "EXCLUSIVE_PROCESS"]).rc == 0
    assert run_tool(capped, query).stdout.decode().splitlines()[7] == "700.00, 700.00, Exclusive_Process, 2619"


def test_state_is_kept_per_cluster_in_memory():
    one, other = node("bare", name="gpu01"), NodeScenario("gpu01", H100, ("bare",), cluster="elsewhere")
    assert run_tool(one, ["sudo", "-n", "--", "cpupower", "frequency-set", "-g", "performance"]).rc == 0
    assert b'"performance"' in run_tool(one, ["cpupower", "frequency-info", "-p"]).stdout
    assert b'"powersave"' in run_tool(other, ["cpupower", "frequency-info", "-p"]).stdout
    assert state.memory_state("unit", "gpu01").governor == "performance"


def test_a_scenario_can_name_its_state_file(tmp_path):
    path = tmp_path / "state.json"
    named = node("bare", state_file=str(path))
    assert NodeScenario.from_json(named.to_json(), CATALOG).state_file == str(path)
    assert run_tool(named, ["sudo", "-n", "--", "cpupower", "frequency-set", "-g", "performance"]).rc == 0
    saved, log = state.read_file_state(tmp_path)
    assert saved is None  # the file is named state.json here, not the default name
    assert json.loads(path.read_text())["governor"] == "performance"
    assert state.calls(named)[-1]["argv"] == ["cpupower", "frequency-set", "-g", "performance"]


def test_fake_ssh_node_tools_keep_state_in_home_and_cat_stays_real(tmp_path):
    bin_dir = tmp_path / "bin"
    install_fake_tools(bin_dir)
    assert {"sudo", "apt-get", "cat", "modprobe"} <= set(FAKE_TOOLS)
    home = tmp_path / "home"
    home.mkdir()
    scenario_file = tmp_path / "scenario.json"
    scenario_file.write_text(NodeScenario("gpu01", H100, ("bare", "os:rocky-9.4")).to_json())
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(NVD_SCENARIO_FILE=str(scenario_file), NVD_NODE_NAME="gpu01", HOME=str(home),
               PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}")

    def sh(command: str, stdin: str = "") -> subprocess.CompletedProcess:
        return subprocess.run(["/bin/sh", "-c", command], env=env, capture_output=True, text=True, input=stdin,
                              timeout=60)

    plain = tmp_path / "plain.txt"
    plain.write_text("real file\n")
    assert sh(f"cat {plain}").stdout == "real file\n"  # any other file: the real cat
    assert "ID=rocky" in sh("cat /etc/os-release").stdout
    denied = sh("sudo -n -- dnf -y install nvidia-container-toolkit")
    assert denied.returncode == 1 and "a password is required" in denied.stderr
    scenario_file.write_text(NodeScenario("gpu01", H100, ("bare", "os:rocky-9.4", "sudo_password:s3cret")).to_json())
    wrong = sh("sudo -S -p '' -- true", "nope\n")
    assert wrong.returncode == 1 and "incorrect password" in wrong.stderr
    assert sh("sudo -S -p '' -- cpupower frequency-set -g performance", "s3cret\n").returncode == 0
    saved, log = state.read_file_state(home)
    assert saved is not None and saved.governor == "performance"
    assert [c["argv"][0] for c in log if c["sudo"]] == ["dnf", "true", "cpupower"]
    assert log[-1]["sudo"] and log[-1]["mutates"]
    assert not any("s3cret" in json.dumps(c) for c in log)
    assert "s3cret" not in (home / state.STATE_FILE_NAME).read_text()


def test_unknown_state_faults_are_rejected():
    with pytest.raises(ValueError, match="unknown fault 'os:'"):
        node("os:")
    assert node("os:debian-12", "sudo_password:x y".split()[0]).faults


def test_state_module_files_are_listed():
    assert Path(state.__file__).name == "state.py"
