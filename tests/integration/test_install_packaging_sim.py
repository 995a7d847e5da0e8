"""The install phase against NVIDIA's current packaging, over simulated nodes whose fake apt/dnf reproduce the real
failures: each fix has its failure reproduced by the simulator first, then the install that avoids it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.install import run_install
from nvdeploy.phases.playbook import resolve_playbook
from nvdeploy.phases.rollout import PhaseOptions
from nvdeploy.phases.run import run_all
from nvdeploy.results import ClusterVerdict, ErrorReason, Verdict
from nvdeploy.sim import state
from nvdeploy.sim.scenario import NodeScenario
from nvdeploy.sim.tools import run_tool

CATALOG = ProfileCatalog()
INSTALL = resolve_playbook(None, "install")
RUN = resolve_playbook(None, "run")
NVIDIA = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/"
KEYRING_LIST = "/etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list"
LEGACY_LIST = "/etc/apt/sources.list.d/nvdeploy-nvidia.list"
LEGACY_LINE = f"deb [signed-by=/usr/share/keyrings/nvdeploy-cuda-archive-keyring.gpg] {NVIDIA} /\n"
CONFLICT = (f"E: Conflicting values set for option Signed-By regarding source {NVIDIA} /: "
            "/usr/share/keyrings/cuda-archive-keyring.gpg != /usr/share/keyrings/nvdeploy-cuda-archive-keyring.gpg\n"
            "E: The list of sources could not be read.\n")

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(autouse=True)
def fresh_state():
    state.reset_memory()
    yield
    state.reset_memory()


def inventory(tmp_path: Path, faults: list[str], extra: str = "", profile: str = "h100-sxm-8x",
              driver: str = "550.90.07", name: str = "lab.yaml"):
    lines = ["all:", "  vars:", "    cluster: lab", "    connection: sim", f"    profile: {profile}",
             f'    driver_version: "{driver}"']
    lines += [f"    {line}" for line in extra.splitlines() if line.strip()]
    lines += ["  hosts:", f"    gpu01: {{sim_faults: {json.dumps(faults)}}}"]
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return load_inventory(path, CATALOG)


def scenario(faults: list[str], profile: str = "h100-sxm-8x") -> NodeScenario:
    return NodeScenario("gpu01", CATALOG.get(profile), tuple(faults), cluster="lab")


def steps(outcome, phase: str = "install") -> dict[str, dict]:
    entry = next(p for p in outcome.run.phases if p["phase"] == phase)
    return {s["step"]: s for n in entry["nodes"] for s in n["steps"]}


def argvs(mutating: bool = True) -> list[list[str]]:
    return [c["argv"] for c in state.memory_calls("lab", "gpu01") if c["mutates"] or not mutating]


def bad(outcome) -> list:
    return [f for n in outcome.run.nodes for f in n.findings if f.verdict not in (Verdict.PASS, Verdict.SKIP)]


def node() -> state.NodeState:
    found = state.memory_state("lab", "gpu01")
    assert found is not None
    return found


# -- the repository ---------------------------------------------------------------------------------------------


def test_the_simulated_apt_refuses_two_signed_by_values_with_apts_own_words():
    sim = scenario(["bare", "cuda_keyring"])
    assert run_tool(sim, ["sudo", "apt-get", "update"]).rc == 0  # the keyring's list alone is fine
    with state.mutate(sim) as changed:
        changed.files[LEGACY_LIST] = LEGACY_LINE  # what nvdeploy wrote before: its own key for the same URL
    for argv in (["sudo", "apt-get", "update"], ["sudo", "apt-get", "-y", "install", "nvidia-driver-550"]):
        out = run_tool(sim, argv)
        assert out.rc == 100 and out.stderr.decode() == CONFLICT


def test_a_bare_node_with_cuda_keyring_reaches_ready_reusing_its_source_and_a_second_run_changes_nothing(tmp_path):
    inv = inventory(tmp_path, ["bare", "cuda_keyring"])
    first = run_all(inv, CATALOG, PhaseOptions(), tmp_path / "r", RUN)
    assert first.run.verdict is ClusterVerdict.READY, bad(first)
    repo = steps(first)["repo"]
    assert repo["status"] == "ok" and KEYRING_LIST in repo["message"]
    files = node().files
    assert LEGACY_LIST not in files and not [p for p in files if "nvdeploy-cuda-archive" in p]
    assert not any("curl" in a[:1] for a in argvs())  # nothing fetched: the keyring was there
    mark = len(state.memory_calls("lab", "gpu01"))
    second = run_all(inv, CATALOG, PhaseOptions(), tmp_path / "r2", RUN)
    assert second.run.verdict is ClusterVerdict.READY
    assert [p.counts()["changed"] for p in second.phases] == [0, 0]
    assert not [c for c in state.memory_calls("lab", "gpu01")[mark:] if c["mutates"]]


def test_the_duplicate_an_older_nvdeploy_wrote_is_removed_and_apt_works_again(tmp_path):
    sim = scenario(["bare", "cuda_keyring"])
    with state.mutate(sim) as changed:
        changed.files[LEGACY_LIST] = LEGACY_LINE
    outcome = run_install(inventory(tmp_path, ["bare", "cuda_keyring"]), CATALOG, PhaseOptions(), tmp_path / "r",
                          INSTALL)
    assert outcome.run.verdict is ClusterVerdict.READY, bad(outcome)
    repo = steps(outcome)["repo"]
    assert repo["status"] == "changed" and "apt refuses to run" in repo["changes"][0]["before"]
    assert repo["changes"][0]["after"] == f"in {KEYRING_LIST}"
    assert LEGACY_LIST not in node().files
    assert run_tool(sim, ["sudo", "apt-get", "update"]).rc == 0


def test_conflicting_files_nvdeploy_did_not_write_fail_the_step_naming_them_and_nothing_changes(tmp_path):
    sim = scenario(["bare", "cuda_keyring"])
    with state.mutate(sim) as changed:  # someone's deb822 file for the same URL with another key
        changed.files["/etc/apt/sources.list.d/cuda.sources"] = (
            f"Types: deb\nURIs: {NVIDIA}\nSuites: /\nSigned-By: /etc/apt/keyrings/cuda.gpg\n")
    before = state.memory_state("lab", "gpu01")
    outcome = run_install(inventory(tmp_path, ["bare", "cuda_keyring"]), CATALOG, PhaseOptions(), tmp_path / "r",
                          INSTALL)
    repo = next(f for f in outcome.run.nodes[0].findings if f.check == "install.repo")
    assert repo.verdict is Verdict.FAIL
    assert "cuda.sources" in repo.summary and KEYRING_LIST in repo.summary and "Signed-By" in repo.summary
    assert node().files == before.files and not argvs()


def test_a_bare_node_gets_the_repository_the_documented_way_cuda_keyring(tmp_path):
    outcome = run_install(inventory(tmp_path, ["bare"]), CATALOG, PhaseOptions(), tmp_path / "r", INSTALL)
    assert outcome.run.verdict is ClusterVerdict.READY, bad(outcome)
    done = argvs()
    assert ["curl", "-fsSL", "--retry", "3", "-o", "/var/cache/nvdeploy-cuda-keyring_1.1-1_all.deb",
            NVIDIA + "cuda-keyring_1.1-1_all.deb"] in done
    assert any(a[-1] == "/var/cache/nvdeploy-cuda-keyring_1.1-1_all.deb" and "apt-get" in a for a in done)
    assert node().packages["cuda-keyring"] == "1.1-1" and KEYRING_LIST in node().files


def test_grace_nodes_use_the_sbsa_repository(tmp_path):
    assert run_tool(scenario(["bare", "arm64"]), ["uname", "-m"]).stdout == b"aarch64\n"
    outcome = run_install(inventory(tmp_path, ["bare", "arm64"]), CATALOG, PhaseOptions(), tmp_path / "r", INSTALL)
    assert outcome.run.verdict is ClusterVerdict.READY, bad(outcome)
    assert "/etc/apt/sources.list.d/cuda-ubuntu2204-sbsa.list" in node().files
    assert any(a[0] == "curl" and a[-1].endswith("/ubuntu2204/sbsa/cuda-keyring_1.1-1_all.deb") for a in argvs())


def test_rocky_gets_the_official_repo_file(tmp_path):
    outcome = run_install(inventory(tmp_path, ["bare", "os:rocky-9.4"]), CATALOG, PhaseOptions(), tmp_path / "r",
                          INSTALL)
    assert outcome.run.verdict is ClusterVerdict.READY, bad(outcome)
    assert ["dnf", "config-manager", "--add-repo",
            "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64/cuda-rhel9.repo"] in argvs()
    assert "baseurl=https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64" in node().files[
        "/etc/yum.repos.d/cuda-rhel9.repo"]


# -- the dpkg lock, the hold --------------------------------------------------------------------------------------


def test_apt_waits_for_the_dpkg_lock_unattended_upgrades_holds_after_boot(tmp_path):
    sim = scenario(["bare", "cuda_keyring", "dpkg_locked"])
    refused = run_tool(sim, ["sudo", "apt-get", "-y", "install", "curl"])
    assert refused.rc == 100
    assert refused.stderr.decode().startswith("E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by "
                                              "process 1234 (unattended-upgr)\n")
    outcome = run_install(inventory(tmp_path, ["bare", "cuda_keyring", "dpkg_locked"]), CATALOG, PhaseOptions(),
                          tmp_path / "r", INSTALL)
    assert outcome.run.verdict is ClusterVerdict.READY, bad(outcome)
    apt = [a for a in argvs() if "apt-get" in a]
    assert apt and all("DPkg::Lock::Timeout=600" in a for a in apt)


def test_the_apt_pin_keeps_an_unattended_upgrade_from_moving_the_driver(tmp_path):
    faults = ["no_fabricmanager", "repo_ahead"]  # 550.90.07 installed; the repository now offers 550.163.01
    unpinned = scenario(faults)
    assert run_tool(unpinned, ["sudo", "apt-get", "-y", "upgrade"]).rc == 0
    assert state.memory_state("lab", "gpu01").installed_driver == "550.163.01"  # what an upgrade does unheld
    state.reset_memory()
    outcome = run_install(inventory(tmp_path, faults), CATALOG, PhaseOptions(), tmp_path / "r", INSTALL)
    assert outcome.run.verdict is ClusterVerdict.READY, bad(outcome)
    pin = node().files["/etc/apt/preferences.d/nvdeploy-nvidia-driver"]
    assert "Package: nvidia-driver-550 nvidia-fabricmanager-550" in pin and "Pin: version 550.90.07-*" in pin
    assert "Pin-Priority: 1001" in pin
    assert run_tool(scenario(faults), ["sudo", "apt-get", "-y", "upgrade"]).rc == 0
    assert node().installed_driver == "550.90.07"
    assert node().packages["nvidia-fabricmanager-550"] == "550.90.07-1"


# -- the fabric manager ------------------------------------------------------------------------------------------


def test_an_unpinned_fabric_manager_lands_newer_and_refuses_to_start(tmp_path):
    sim = scenario(["no_fabricmanager", "repo_ahead"])
    assert run_tool(sim, ["sudo", "apt-get", "-y", "install", "nvidia-fabricmanager-550"]).rc == 0
    assert node().packages["nvidia-fabricmanager-550"] == "550.163.01-1"
    started = run_tool(sim, ["sudo", "systemctl", "enable", "--now", "nvidia-fabricmanager"])
    assert started.rc == 1 and b"nvidia-fabricmanager.service failed" in started.stderr


def test_the_fabric_manager_is_pinned_to_the_driver_and_runs(tmp_path):
    outcome = run_install(inventory(tmp_path, ["no_fabricmanager", "repo_ahead"]), CATALOG, PhaseOptions(),
                          tmp_path / "r", INSTALL)
    assert outcome.run.verdict is ClusterVerdict.READY, bad(outcome)
    assert any(a[-1] == "nvidia-fabricmanager-550=550.90.07-*" for a in argvs())
    assert node().packages["nvidia-fabricmanager-550"] == "550.90.07-1"
    assert node().services["nvidia-fabricmanager"] == [True, True]
    assert steps(outcome)["fabricmanager"]["status"] == "changed"


# -- DCGM 4 ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", ["h100-sxm-8x", "b200-8x"])
def test_dcgm_4_core_and_cuda_package_for_the_drivers_cuda_major_running_and_answering(tmp_path, profile):
    outcome = run_install(inventory(tmp_path, ["bare"], profile=profile), CATALOG, PhaseOptions(), tmp_path / "r",
                          INSTALL)
    assert outcome.run.verdict is ClusterVerdict.READY, bad(outcome)
    packages = node().packages
    assert "datacenter-gpu-manager-4-core" in packages and "datacenter-gpu-manager-4-cuda12" in packages
    assert "datacenter-gpu-manager" not in packages
    assert any("--install-recommends" in a and "datacenter-gpu-manager-4-core" in a for a in argvs())
    assert node().services["nvidia-dcgm"] == [True, True]
    changes = {c["item"]: c["after"] for c in steps(outcome)["dcgm"]["changes"]}
    assert changes["dcgmi discovery -l"] == f"{CATALOG.get(profile).gpu.count} GPUs"


def test_the_legacy_dcgm_3_is_replaced_and_dcgm_major_3_keeps_it(tmp_path):
    sim = scenario([])  # a node installed earlier: datacenter-gpu-manager 1:3.3.9
    clash = run_tool(sim, ["sudo", "apt-get", "-y", "install", "datacenter-gpu-manager-4-core"])
    assert clash.rc == 100 and b"which is also in package datacenter-gpu-manager 1:3.3.9" in clash.stderr
    state.reset_memory()
    outcome = run_install(inventory(tmp_path, []), CATALOG, PhaseOptions(), tmp_path / "r", INSTALL)
    assert outcome.run.verdict is ClusterVerdict.READY, bad(outcome)
    done = argvs()
    purge = next(i for i, a in enumerate(done) if "purge" in a and "datacenter-gpu-manager" in a)
    install = next(i for i, a in enumerate(done) if "datacenter-gpu-manager-4-core" in a)
    assert purge < install
    state.reset_memory()
    legacy = run_install(inventory(tmp_path, [], extra='dcgm_major: "3"', name="dcgm3.yaml"), CATALOG,
                         PhaseOptions(), tmp_path / "r2", INSTALL)
    assert legacy.run.verdict is ClusterVerdict.READY and steps(legacy)["dcgm"]["status"] == "ok"


def test_dcgmi_discovery_needs_a_running_hostengine():
    sim = scenario(["bare"])
    with state.mutate(sim) as changed:
        changed.packages["datacenter-gpu-manager-4-core"] = "1:4.4.1-1"
        changed.services["nvidia-dcgm"] = [True, False]
    out = run_tool(sim, ["dcgmi", "discovery", "-l"])
    assert out.rc == 255 and b"unable to establish a connection" in out.stdout


# -- the container toolkit ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("runtime, path, marker", [
    ("docker", "/etc/docker/daemon.json", '"path": "nvidia-container-runtime"'),
    ("containerd", "/etc/containerd/conf.d/99-nvidia.toml", "containerd.runtimes.nvidia]"),  # toolkit 1.18+
])
def test_the_container_toolkit_is_configured_for_the_runtime_present_with_a_cdi_spec(tmp_path, runtime, path, marker):
    faults = ["bare", runtime]
    first = run_install(inventory(tmp_path, faults), CATALOG, PhaseOptions(), tmp_path / "r", INSTALL)
    assert first.run.verdict is ClusterVerdict.READY, bad(first)
    done = argvs()
    assert ["nvidia-ctk", "runtime", "configure", f"--runtime={runtime}"] in done
    assert ["systemctl", "restart", runtime] in done
    assert ["nvidia-ctk", "cdi", "generate", "--output=/etc/cdi/nvidia.yaml"] in done
    assert marker in node().files[path]
    assert "libcuda.so.550.90.07" in node().files["/etc/cdi/nvidia.yaml"]
    listed = run_tool(scenario(faults), ["nvidia-ctk", "cdi", "list"])
    assert b"Found 17 CDI devices" in listed.stderr and b"nvidia.com/gpu=all" in listed.stdout
    second = run_install(inventory(tmp_path, faults), CATALOG, PhaseOptions(), tmp_path / "r2", INSTALL)
    assert steps(second)["container_runtime"]["status"] == "ok" and second.phases[0].counts()["changed"] == 0


def test_without_a_runtime_only_the_cdi_spec_is_generated(tmp_path):
    outcome = run_install(inventory(tmp_path, ["bare"]), CATALOG, PhaseOptions(), tmp_path / "r", INSTALL)
    step = steps(outcome)["container_runtime"]
    assert step["status"] == "changed" and [c["item"] for c in step["changes"]] == ["CDI spec /etc/cdi/nvidia.yaml"]
    assert not [a for a in argvs() if a[:2] == ["nvidia-ctk", "runtime"]]


# -- RHEL: module streams; nouveau -------------------------------------------------------------------------------


def test_dnf_refuses_to_switch_an_enabled_module_stream_with_its_own_message():
    sim = scenario(["driver_mismatch", "os:rocky-9.4"])  # 535 installed from the 535-dkms stream
    out = run_tool(sim, ["sudo", "dnf", "-y", "module", "install", "nvidia-driver:550-dkms"])
    assert out.rc == 1 and out.stderr.decode().startswith(
        "Error: It is not possible to switch enabled streams of a module unless explicitly enabled via "
        "configuration option module_stream_switch.\n")
    assert run_tool(sim, ["sudo", "dnf", "-y", "module", "reset", "nvidia-driver"]).rc == 0
    assert run_tool(sim, ["sudo", "dnf", "-y", "module", "install", "nvidia-driver:550-dkms"]).rc == 0


def test_a_535_to_550_branch_switch_on_rocky(tmp_path):
    faults = ["bare", "os:rocky-9.4"]
    old = run_install(inventory(tmp_path, faults, driver="535.161.08"), CATALOG, PhaseOptions(), tmp_path / "r",
                      INSTALL)
    assert old.run.verdict is ClusterVerdict.READY, bad(old)
    assert node().installed_driver == "535.161.08" and node().files["dnf-module:nvidia-driver"] == "535-dkms"
    assert "nvidia-driver-0:535.161.08-1.el9.*" in node().files["/etc/dnf/plugins/versionlock.list"]
    switched = run_all(inventory(tmp_path, faults, name="550.yaml"), CATALOG, PhaseOptions(allow_reboot=True),
                       tmp_path / "r2", RUN)
    assert switched.run.verdict is ClusterVerdict.READY, bad(switched)
    done = argvs()
    reset = done.index(["dnf", "-y", "module", "reset", "nvidia-driver"])
    unlock = next(i for i, a in enumerate(done) if a[:4] == ["dnf", "-y", "versionlock", "delete"])
    enable = done.index(["dnf", "-y", "module", "enable", "nvidia-driver:550-dkms"])
    install = done.index(["dnf", "-y", "install", "nvidia-driver-550.90.07", "kmod-nvidia-latest-dkms-550.90.07",
                          "nvidia-fabric-manager-550.90.07"])
    assert reset < enable < install and unlock < install
    assert node().installed_driver == node().loaded_driver == "550.90.07" and node().boots == 2
    assert "nvidia-driver-0:550.90.07-1.el9.*" in node().files["/etc/dnf/plugins/versionlock.list"]
    assert node().packages["nvidia-fabric-manager"] == "550.90.07-1"


@pytest.mark.parametrize("os_fault, rebuild", [("os:ubuntu-22.04", ["update-initramfs", "-u"]),
                                               ("os:rocky-9.4", ["dracut", "-f"])])
def test_nouveau_is_blacklisted_and_the_reboot_is_error_reboot_required_without_allow_reboot(tmp_path, os_fault,
                                                                                             rebuild):
    faults = ["bare", "nouveau", os_fault]
    refused = run_install(inventory(tmp_path, faults), CATALOG, PhaseOptions(), tmp_path / "r", INSTALL)
    findings = {f.check: f for f in refused.run.nodes[0].findings}
    assert findings["install.driver"].verdict is Verdict.PASS
    reboot = findings["install.reboot"]
    assert reboot.verdict is Verdict.ERROR and reboot.reason is ErrorReason.REBOOT_REQUIRED
    assert "nouveau" in reboot.summary and "--allow-reboot" in reboot.summary
    assert refused.exit_code == 3
    assert node().files["/etc/modprobe.d/blacklist-nouveau.conf"] == "blacklist nouveau\noptions nouveau modeset=0\n"
    assert rebuild in argvs() and node().boots == 1 and "nouveau" in node().modules
    allowed = run_all(inventory(tmp_path, faults), CATALOG, PhaseOptions(allow_reboot=True), tmp_path / "r2", RUN)
    assert allowed.run.verdict is ClusterVerdict.READY, bad(allowed)
    assert node().boots == 2 and "nouveau" not in node().modules and node().loaded_driver == "550.90.07"
