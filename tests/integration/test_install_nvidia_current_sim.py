"""The install phase installs exactly what the inventory asks for, the way NVIDIA ships it today: the exact driver
point release (and its fabric manager), the open kernel modules where NVIDIA requires them, NVLSM and ib_umad on
NVLink 5 HGX, containerd configured through the toolkit's drop-in, every package of the branch version-locked,
no ``dnf module`` on RHEL 10, DCGM 3 removed whole, and default versions that validate clean. Each test runs the
install against the simulated apt/dnf/nvidia-ctk (nvdeploy/sim/pkgtools.py) and reads what the node ended with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.levels import load_levels
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.install import run_install
from nvdeploy.phases.playbook import resolve_playbook
from nvdeploy.phases.rollout import PhaseOptions
from nvdeploy.phases.run import run_all
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import ClusterVerdict, Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim import state
from nvdeploy.sim.scenario import NodeScenario
from nvdeploy.sim.tools import run_tool

CATALOG = ProfileCatalog()
INSTALL = resolve_playbook(None, "install")
RUN = resolve_playbook(None, "run")
VERSIONLOCK = "/etc/dnf/plugins/versionlock.list"
APT_HOLD = "/etc/apt/preferences.d/nvdeploy-nvidia-driver"
DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
NVIDIA_RUNTIME = ('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n  runtime_type = '
                  '"io.containerd.runc.v2"\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
                  '  BinaryName = "/usr/bin/nvidia-container-runtime"\n')

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def fresh_state():
    state.reset_memory()
    yield
    state.reset_memory()


def inventory(tmp_path: Path, faults: list[str], profile: str = "h100-sxm-8x", driver: Optional[str] = None,
              extra: str = "", name: str = "lab.yaml"):
    lines = ["all:", "  vars:", "    cluster: lab", "    connection: sim", f"    profile: {profile}"]
    if driver:
        lines.append(f'    driver_version: "{driver}"')
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


def argvs() -> list[list[str]]:
    return [c["argv"] for c in state.memory_calls("lab", "gpu01") if c["mutates"]]


def node() -> state.NodeState:
    found = state.memory_state("lab", "gpu01")
    assert found is not None
    return found


def findings(outcome) -> dict[str, object]:
    return {f.check: f for n in outcome.run.nodes for f in n.findings}


def bad(outcome) -> list:
    return [(f.check, f.verdict.value, f.summary) for n in outcome.run.nodes for f in n.findings
            if f.verdict not in (Verdict.PASS, Verdict.SKIP)]


# -- the exact driver version -------------------------------------------------------------------------------------


def test_apt_installs_the_driver_version_asked_for_not_the_newer_point_release_and_pins_that_one(tmp_path):
    faults = ["bare", "repo_ahead"]  # the repository also offers 550.163.01
    outcome = run_all(inventory(tmp_path, faults, driver="550.90.07"), CATALOG, PhaseOptions(), tmp_path / "r", RUN)
    assert outcome.run.verdict is ClusterVerdict.READY, bad(outcome)
    assert node().packages["nvidia-driver-550"] == "550.90.07-0ubuntu1"
    assert node().packages["nvidia-fabricmanager-550"] == "550.90.07-1" and node().loaded_driver == "550.90.07"
    install = next(a for a in argvs() if "nvidia-driver-550=550.90.07-*" in a)
    assert "nvidia-fabricmanager-550=550.90.07-*" in install  # the same transaction, the same release
    assert "Pin: version 550.90.07-*" in node().files[APT_HOLD]
    assert findings(outcome)["driver.version"].verdict is Verdict.PASS


def test_a_node_on_a_newer_point_release_is_brought_to_the_version_asked_for(tmp_path):
    faults = ["bare", "repo_ahead"]
    newer = run_install(inventory(tmp_path, faults, driver="550.163.01"), CATALOG, PhaseOptions(), tmp_path / "r",
                        INSTALL)
    assert newer.run.verdict is ClusterVerdict.READY, bad(newer)
    assert node().installed_driver == "550.163.01"
    back = run_all(inventory(tmp_path, faults, driver="550.90.07", name="b.yaml"), CATALOG,
                   PhaseOptions(allow_reboot=True), tmp_path / "r2", RUN)
    assert back.run.verdict is ClusterVerdict.READY, bad(back)
    assert node().installed_driver == node().loaded_driver == "550.90.07"
    assert node().packages["nvidia-fabricmanager-550"] == "550.90.07-1"
    assert any("--allow-downgrades" in a and "nvidia-driver-550=550.90.07-*" in a for a in argvs())
    assert "Pin: version 550.90.07-*" in node().files[APT_HOLD]


def test_dnf_installs_the_exact_nevra_and_locks_every_package_of_the_branch(tmp_path):
    faults = ["bare", "repo_ahead", "os:rocky-9.4"]
    outcome = run_install(inventory(tmp_path, faults, driver="550.90.07"), CATALOG, PhaseOptions(), tmp_path / "r",
                          INSTALL)
    assert outcome.run.verdict is ClusterVerdict.READY, bad(outcome)
    assert ["dnf", "-y", "install", "nvidia-driver-550.90.07", "kmod-nvidia-latest-dkms-550.90.07",
            "nvidia-fabric-manager-550.90.07"] in argvs()
    packages = node().packages
    assert packages["nvidia-driver"] == packages["kmod-nvidia-latest-dkms"] == "550.90.07-1.el9"
    locks = node().files[VERSIONLOCK].splitlines()
    assert sorted(locks) == ["kmod-nvidia-latest-dkms-0:550.90.07-1.el9.*", "nvidia-driver-0:550.90.07-1.el9.*",
                             "nvidia-fabric-manager-0:550.90.07-1.*"]


def test_dry_run_shows_the_resolved_versions_not_a_placeholder(tmp_path):
    outcome = run_install(inventory(tmp_path, ["bare"], driver="550.90.07"), CATALOG, PhaseOptions(dry_run=True),
                          tmp_path / "r", INSTALL)
    driver = steps(outcome)["driver"]
    commands = " ".join(c["command"] for c in driver["commands"] if not c["executed"])
    assert "nvidia-driver-550=550.90.07-*" in commands and "nvidia-fabricmanager-550=550.90.07-*" in commands
    assert "DRIVER_VERSION" not in commands
    assert "550.90.07" in driver["name"]
    assert not argvs()


def test_a_driver_version_of_another_branch_than_driver_branch_fails_before_any_change(tmp_path):
    outcome = run_install(inventory(tmp_path, ["bare"], driver="550.90.07", extra='driver_branch: "535"'), CATALOG,
                          PhaseOptions(), tmp_path / "r", INSTALL)
    driver = findings(outcome)["install.driver"]
    assert driver.verdict is Verdict.FAIL and "not of branch 535" in driver.summary
    assert not [a for a in argvs() if any("nvidia-driver" in w for w in a)]


# -- the kernel module flavour, NVLSM ------------------------------------------------------------------------------


def test_blackwell_dry_run_installs_the_open_kernel_modules_with_nvlsm_and_ib_umad(tmp_path):
    outcome = run_install(inventory(tmp_path, ["bare"], profile="b200-8x"), CATALOG, PhaseOptions(dry_run=True),
                          tmp_path / "r", INSTALL)
    planned = steps(outcome)
    commands = " ".join(c["command"] for c in planned["driver"]["commands"] if not c["executed"])
    assert "nvidia-driver-570-open" in commands and "open kernel modules" in planned["driver"]["name"]
    assert "nvidia-driver-570 " not in commands + " "
    assert planned["nvlsm"]["status"] == "would_change" and planned["ib_umad"]["status"] == "would_change"


def test_blackwell_gets_open_modules_nvlsm_and_ib_umad_and_validates_them(tmp_path):
    outcome = run_all(inventory(tmp_path, ["bare"], profile="b200-8x"), CATALOG, PhaseOptions(), tmp_path / "r", RUN)
    assert outcome.run.verdict is ClusterVerdict.READY, bad(outcome)
    assert "nvidia-driver-570-open" in node().packages and node().loaded_open is True
    assert "nvlsm" in node().packages and "ib_umad" in node().modules
    assert node().files["/etc/modules-load.d/nvdeploy-ib_umad.conf"] == "ib_umad\n"
    assert node().services["nvidia-fabricmanager"] == [True, True]
    found = findings(outcome)
    assert found["driver.flavour"].verdict is Verdict.PASS and found["driver.flavour"].observed == "open"
    assert found["fabric.nvlsm"].verdict is Verdict.PASS and found["fabric.manager"].verdict is Verdict.PASS


def test_blackwell_on_rocky_uses_the_open_module_stream(tmp_path):
    outcome = run_install(inventory(tmp_path, ["bare", "os:rocky-9.4"], profile="b200-8x"), CATALOG, PhaseOptions(),
                          tmp_path / "r", INSTALL)
    assert outcome.run.verdict is ClusterVerdict.READY, bad(outcome)
    assert ["dnf", "-y", "module", "enable", "nvidia-driver:570-open"] in argvs()
    assert "kmod-nvidia-open-dkms" in node().packages and "kmod-nvidia-latest-dkms" not in node().packages


def test_the_fabric_manager_of_nvlink_5_does_not_start_without_nvlsm_and_ib_umad():
    sim = scenario(["bare"], profile="b200-8x")
    with state.mutate(sim) as changed:
        changed.packages.update({"nvidia-driver-570-open": "570.124.06-0ubuntu1",
                                 "nvidia-fabricmanager-570": "570.124.06-1"})
        changed.services["nvidia-fabricmanager"] = [False, False]
    assert run_tool(sim, ["sudo", "modprobe", "nvidia"]).rc == 0
    started = run_tool(sim, ["sudo", "systemctl", "enable", "--now", "nvidia-fabricmanager"])
    assert started.rc == 1 and b"nvidia-fabricmanager.service failed" in started.stderr


def test_proprietary_modules_on_blackwell_fail_driver_flavour(tmp_path):
    sim = scenario([], profile="b200-8x")
    with state.mutate(sim) as changed:  # someone installed the proprietary flavour by hand
        version = changed.packages.pop("nvidia-driver-570-open")
        changed.packages["nvidia-driver-570"] = version
        changed.loaded_open = False
    outcome = run_validate(inventory(tmp_path, [], profile="b200-8x"), CATALOG,
                           EngineOptions(checks=load_levels()["quick"]), tmp_path / "r")
    flavour = findings(outcome)["driver.flavour"]
    assert flavour.verdict is Verdict.FAIL and flavour.observed == "proprietary" and flavour.expected == "open"
    assert "Blackwell" in flavour.summary


# -- containerd through the toolkit's drop-in ------------------------------------------------------------------------


def _configured_the_1_18_way(sim: NodeScenario) -> None:
    with state.mutate(sim) as changed:
        changed.packages["nvidia-container-toolkit"] = "1.18.1-1"
        changed.files["/etc/containerd/config.toml"] = ('imports = ["/etc/containerd/conf.d/*.toml"]\nversion = 2\n'
                                                        '[plugins."io.containerd.grpc.v1.cri"]\n')
        changed.files[DROP_IN] = "version = 2\n" + NVIDIA_RUNTIME


def test_a_node_configured_through_the_drop_in_is_left_alone_and_passes_container_runtime(tmp_path):
    faults = ["containerd"]
    _configured_the_1_18_way(scenario(faults))
    mark = len(state.memory_calls("lab", "gpu01"))
    outcome = run_all(inventory(tmp_path, faults, driver="550.90.07"), CATALOG, PhaseOptions(), tmp_path / "r", RUN)
    step = steps(outcome)["container_runtime"]
    assert step["status"] in ("ok", "changed")  # changed: this baseline has no CDI spec yet
    assert [c["item"] for c in step["changes"]] in ([], ["CDI spec /etc/cdi/nvidia.yaml"])
    later = [c["argv"] for c in state.memory_calls("lab", "gpu01")[mark:]]
    assert not [a for a in later if a[:2] == ["nvidia-ctk", "runtime"] or a == ["systemctl", "restart", "containerd"]]
    runtime = findings(outcome)["container.runtime"]
    assert runtime.verdict is Verdict.PASS and DROP_IN in runtime.summary


def test_a_bare_containerd_node_is_configured_by_the_drop_in_and_a_second_run_changes_nothing(tmp_path):
    faults = ["bare", "containerd"]
    first = run_all(inventory(tmp_path, faults, driver="550.90.07"), CATALOG, PhaseOptions(), tmp_path / "r", RUN)
    assert first.run.verdict is ClusterVerdict.READY, bad(first)
    files = node().files
    assert "runtimes.nvidia]" in files[DROP_IN] and "runtimes.nvidia]" not in files["/etc/containerd/config.toml"]
    assert 'imports = ["/etc/containerd/conf.d/*.toml"]' in files["/etc/containerd/config.toml"]
    assert findings(first)["container.runtime"].verdict is Verdict.PASS
    mark = len(state.memory_calls("lab", "gpu01"))
    second = run_install(inventory(tmp_path, faults, driver="550.90.07"), CATALOG, PhaseOptions(), tmp_path / "r2",
                         INSTALL)
    assert second.phases[0].counts()["changed"] == 0
    assert not [c for c in state.memory_calls("lab", "gpu01")[mark:] if c["mutates"]]


def test_a_drop_in_config_toml_does_not_import_is_not_configured(tmp_path):
    faults = ["containerd"]
    sim = scenario(faults)
    _configured_the_1_18_way(sim)
    with state.mutate(sim) as changed:
        changed.files["/etc/containerd/config.toml"] = "version = 2\n"  # the imports line lost
    outcome = run_install(inventory(tmp_path, faults, driver="550.90.07"), CATALOG, PhaseOptions(dry_run=True),
                          tmp_path / "r", INSTALL)
    step = steps(outcome)["container_runtime"]
    assert step["status"] == "would_change"
    assert "does not import it" in step["changes"][0]["before"]


# -- dnf on RHEL 10, DCGM 3 -> 4 ----------------------------------------------------------------------------------


def test_rhel_10_installs_without_dnf_module(tmp_path):
    faults = ["bare", "os:rocky-10.0", "repo_ahead"]
    refused = run_tool(scenario(faults), ["sudo", "dnf", "module", "list"])
    assert refused.rc == 1 and b"No such command: module" in refused.stderr
    mark = len(state.memory_calls("lab", "gpu01"))
    outcome = run_install(inventory(tmp_path, faults), CATALOG, PhaseOptions(), tmp_path / "r", INSTALL)
    assert outcome.run.verdict is ClusterVerdict.READY, bad(outcome)
    done = [c["argv"] for c in state.memory_calls("lab", "gpu01")[mark:]]
    assert not [a for a in done if a[:2] == ["dnf", "module"] or a[1:3] == ["-y", "module"]]
    # No driver_version: the newest point release of the profile's branch (535), held by the versionlock.
    assert node().installed_driver == "535.247.01"
    assert "nvidia-driver-0:535.247.01-1.el9.*" in node().files[VERSIONLOCK]


def test_the_dcgm_3_to_4_step_removes_the_dcgm_3_config_package_too(tmp_path):
    sim = scenario([])
    with state.mutate(sim) as changed:  # a node installed with DCGM 3 (its diag config package with it)
        changed.packages["datacenter-gpu-manager-config"] = "1:3.3.9"
    outcome = run_install(inventory(tmp_path, [], driver="550.90.07"), CATALOG, PhaseOptions(), tmp_path / "r",
                          INSTALL)
    assert outcome.run.verdict is ClusterVerdict.READY, bad(outcome)
    packages = node().packages
    assert "datacenter-gpu-manager" not in packages and "datacenter-gpu-manager-config" not in packages
    assert "datacenter-gpu-manager-4-core" in packages


# -- defaults that validate clean -----------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", CATALOG.names())
def test_a_fresh_install_with_the_profiles_defaults_validates_clean(tmp_path, profile):
    outcome = run_all(inventory(tmp_path, ["bare"], profile=profile), CATALOG, PhaseOptions(), tmp_path / "r", RUN)
    if CATALOG.get(profile).nvlink_domain is not None:
        # One NVL72 tray is not a whole NVLink domain: nvlink.domain FAILs it as a tray alone (whole racks are in
        # tests/integration/test_nvl72_sim.py); nothing else may be wrong with it.
        assert [(check, verdict) for check, verdict, _ in bad(outcome)] == [("nvlink.domain", "FAIL")], bad(outcome)
    else:
        assert outcome.run.verdict is ClusterVerdict.READY, bad(outcome)
    found = findings(outcome)
    for check in ("cuda.compat", "driver.version", "driver.flavour", "fabric.manager", "dcgm.discovery"):
        if check in found:
            assert found[check].verdict in (Verdict.PASS, Verdict.SKIP), (check, found[check].summary)
    assert found["cuda.compat"].verdict is Verdict.PASS
