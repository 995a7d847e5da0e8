"""IMEX over simulated NVLink domain trays, through validate and install: imex.daemon on each tray, imex.domain per
rack in the cluster stage (one tray asked, a second one when the first view is not clean), DRA-managed trays that
SKIP, HGX nodes with no IMEX finding at all; install writes one node list per domain, in inventory order, and a
second install changes nothing."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.levels import load_levels
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.install import run_install
from nvdeploy.phases.playbook import resolve_playbook
from nvdeploy.phases.rollout import PhaseOptions
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim import state

ROOT = Path(__file__).resolve().parents[2]
QUICK = load_levels()["quick"]
INSTALL = resolve_playbook(None, "install")
IMEX = ("imex.daemon", "imex.domain")
REPO_570 = state.DRIVERS["570"]  # the point release of branch 570 the simulated repository offers

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(autouse=True)
def fresh_state():
    state.reset_memory()
    yield
    state.reset_memory()


@pytest.fixture()
def catalog(tmp_path: Path) -> ProfileCatalog:
    """The built-in profiles and a tray profile: an HGX B200 made a tray of a 3-tray NVLink domain (small racks keep
    the test short; the NVL72 profiles have 18)."""
    folder = tmp_path / "profiles"
    folder.mkdir()
    text = (ROOT / "checks" / "profiles" / "b200-8x.yaml").read_text()
    text = text.replace("name: b200-8x", "name: b200-tray") + "nvlink_domain: {trays: 3, gpus: 24}\n"
    (folder / "b200-tray.yaml").write_text(text)
    return ProfileCatalog([folder] + ProfileCatalog().folders)


def inventory(tmp_path: Path, catalog: ProfileCatalog, racks: dict[str, dict[str, list[str]]],
              profile: str = "b200-tray", extra: str = "", driver: str = "570.172.08"):
    lines = ["all:", "  vars:", "    cluster: nvl", "    connection: sim", f"    profile: {profile}",
             f'    driver_version: "{driver}"']
    lines += [f"    {line}" for line in extra.splitlines() if line.strip()]
    lines.append("  children:")
    for rack, hosts in racks.items():
        lines += [f"    {rack}:", f"      vars: {{rack: {rack}}}", "      hosts:"]
        lines += [f"        {name}: {{sim_faults: {json.dumps(faults)}}}" for name, faults in hosts.items()]
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "nvl.yaml"
    path.write_text("\n".join(lines) + "\n")
    return load_inventory(path, catalog)


def imex_findings(outcome) -> dict[str, list[tuple[str, Verdict]]]:
    out = {n.name: [(f.check, f.verdict) for f in n.findings if f.check in IMEX] for n in outcome.run.nodes}
    out["_cluster"] = [(f.check, f.verdict) for f in outcome.run.cluster_findings if f.check in IMEX]
    return out


TWO_RACKS = {"rack1": {"r1t1": [], "r1t2": [], "r1t3": []}, "rack2": {"r2t1": [], "r2t2": [], "r2t3": []}}


def test_healthy_racks_pass_each_tray_and_each_domain(tmp_path, catalog):
    outcome = run_validate(inventory(tmp_path, catalog, TWO_RACKS), catalog, EngineOptions(checks=QUICK),
                           tmp_path / "r")
    found = imex_findings(outcome)
    assert all(found[n] == [("imex.daemon", Verdict.PASS)] for r in TWO_RACKS.values() for n in r)
    assert found["_cluster"] == [("imex.domain", Verdict.PASS)] * 2
    summaries = [f.summary for f in outcome.run.cluster_findings if f.check == "imex.domain"]
    assert any("rack1" in s and "r1t[1-3]" in s for s in summaries), summaries
    evidence = sorted(p.name for p in (outcome.run_dir / "evidence" / "_cluster").iterdir())
    assert evidence == ["imex_domain_rack1_r1t1.out", "imex_domain_rack2_r2t1.out"]  # one tray asked per domain


def test_one_fault_per_rack_names_exactly_that_tray(tmp_path, catalog):
    # rack1: a tray whose daemon is down; rack2: the FIRST tray cut off from the others (its own view would blame
    # everybody else, so a second tray is asked).
    racks = {"rack1": {"r1t1": [], "r1t2": ["imex_down"], "r1t3": []},
             "rack2": {"r2t1": ["imex_peer_missing"], "r2t2": [], "r2t3": []}}
    outcome = run_validate(inventory(tmp_path, catalog, racks), catalog, EngineOptions(checks=QUICK), tmp_path / "r")
    found = imex_findings(outcome)
    assert found["r1t2"] == [("imex.daemon", Verdict.FAIL), ("imex.domain", Verdict.FAIL)]
    assert found["r2t1"] == [("imex.daemon", Verdict.PASS), ("imex.domain", Verdict.FAIL)]
    for name in ("r1t1", "r1t3", "r2t2", "r2t3"):
        assert found[name] == [("imex.daemon", Verdict.PASS)], name
    assert found["_cluster"] == [("imex.domain", Verdict.FAIL)] * 2
    rack2 = next(f for f in outcome.run.cluster_findings if f.check == "imex.domain" and "rack2" in f.summary)
    assert "r2t1 UNAVAILABLE" in rack2.summary and "asked r2t3 (of r2t1, r2t3)" in rack2.summary


def test_hgx_cluster_has_no_imex_finding_and_no_imex_stage(tmp_path, catalog):
    outcome = run_validate(inventory(tmp_path, catalog, {"rack1": {"gpu01": [], "gpu02": []}}, profile="h100-sxm-8x"),
                           catalog, EngineOptions(checks=QUICK), tmp_path / "r")
    assert imex_findings(outcome) == {"gpu01": [], "gpu02": [], "_cluster": []}
    assert not (outcome.run_dir / "evidence" / "_cluster").exists()


def test_dra_managed_trays_skip_never_fail(tmp_path, catalog):
    racks = {"rack1": {"r1t1": ["imex_dra"], "r1t2": ["imex_dra"]}}
    declared = run_validate(inventory(tmp_path, catalog, racks, extra="imex: dra"), catalog,
                            EngineOptions(checks=QUICK), tmp_path / "declared")
    seen = run_validate(inventory(tmp_path, catalog, racks), catalog, EngineOptions(checks=QUICK), tmp_path / "seen")
    for outcome in (declared, seen):
        found = imex_findings(outcome)
        assert found["r1t1"] == found["r1t2"] == [("imex.daemon", Verdict.SKIP)]
        assert found["_cluster"] == [("imex.domain", Verdict.SKIP)]
        assert "Kubernetes" in next(f for f in outcome.run.cluster_findings if f.check == "imex.domain").summary


def test_dra_trays_with_the_host_daemon_running_fail_and_are_no_host_domain(tmp_path, catalog):
    # The DRA driver's plugin on both trays and the host nvidia-imex still enabled and active: FAIL on each tray
    # (it took PASS before), and no host IMEX domain is asked for them.
    racks = {"rack1": {"r1t1": ["imex_dra_host_active"], "r1t2": ["imex_dra_unmasked"]}}
    outcome = run_validate(inventory(tmp_path, catalog, racks), catalog, EngineOptions(checks=QUICK), tmp_path / "r")
    found = imex_findings(outcome)
    assert found["r1t1"] == [("imex.daemon", Verdict.FAIL)] and found["r1t2"] == [("imex.daemon", Verdict.WARN)]
    assert found["_cluster"] == [("imex.domain", Verdict.SKIP)]


def test_install_writes_one_node_list_per_domain_and_a_second_run_changes_nothing(tmp_path, catalog):
    racks = {"rack1": {"r1t1": ["bare"], "r1t2": ["bare"]}, "rack2": {"r2t1": ["bare"], "r2t2": ["bare"]}}
    inv = inventory(tmp_path, catalog, racks, driver=REPO_570)
    dry = run_install(inv, catalog, PhaseOptions(dry_run=True), tmp_path / "dry", INSTALL)
    plan = (dry.run_dir / "install-plan.txt").read_text()
    assert "nodes_config.cfg" in plan and "+r1t1" in plan and "+r2t2" in plan and state.snapshot_memory("nvl") == {}
    first = run_install(inv, catalog, PhaseOptions(), tmp_path / "i1", INSTALL)
    assert first.exit_code == 0, [s for p in first.run.phases for n in p["nodes"] for s in n["steps"]
                                  if s["status"] not in ("ok", "changed", "skipped")]
    lists = {n: state.memory_state("nvl", n).files["/etc/nvidia-imex/nodes_config.cfg"] for r in racks.values()
             for n in r}
    assert lists["r1t1"] == lists["r1t2"] == "r1t1\nr1t2\n" and lists["r2t1"] == lists["r2t2"] == "r2t1\nr2t2\n"
    packages = state.memory_state("nvl", "r1t1").packages
    assert packages["nvidia-imex-570"].startswith(REPO_570)  # the driver's own version
    second = run_install(inv, catalog, PhaseOptions(), tmp_path / "i2", INSTALL)
    assert second.phases[0].counts()["changed"] == 0
    outcome = run_validate(inv, catalog, EngineOptions(checks=QUICK), tmp_path / "v")
    found = imex_findings(outcome)
    assert found["_cluster"] == [("imex.domain", Verdict.PASS)] * 2
    digest = hashlib.sha256(b"r1t1\nr1t2\n").hexdigest()
    assert next(n for n in outcome.run.nodes if n.name == "r1t1").facts["imex_config_sha256"] == digest


def test_an_r580_install_takes_the_nvidia_imex_package_and_its_probe_sees_it(tmp_path, catalog):
    # From R580 NVIDIA ships IMEX as nvidia-imex (nvidia-imex-580 only a name it provides: apt installs no version
    # of it, dpkg never lists it), so installing and probing by the branch name failed or never settled.
    racks = {"rack1": {"r1t1": ["bare"], "r1t2": ["bare"]}}
    inv = inventory(tmp_path, catalog, racks, driver=state.DRIVERS["580"])
    first = run_install(inv, catalog, PhaseOptions(), tmp_path / "i1", INSTALL)
    assert first.exit_code == 0, [s for p in first.run.phases for n in p["nodes"] for s in n["steps"]
                                  if s["status"] not in ("ok", "changed", "skipped")]
    packages = state.memory_state("nvl", "r1t1").packages
    assert packages["nvidia-imex"].startswith(state.DRIVERS["580"]) and "nvidia-imex-580" not in packages
    second = run_install(inv, catalog, PhaseOptions(), tmp_path / "i2", INSTALL)
    assert second.phases[0].counts()["changed"] == 0
    assert imex_findings(run_validate(inv, catalog, EngineOptions(checks=QUICK), tmp_path / "v"))["r1t1"] == [
        ("imex.daemon", Verdict.PASS)]


def test_install_with_limit_still_lists_the_whole_domain(tmp_path, catalog):
    racks = {"rack1": {"r1t1": ["bare"], "r1t2": ["bare"], "r1t3": ["bare"]}}
    inv = inventory(tmp_path, catalog, racks, driver=REPO_570).limit("r1t2")
    run_install(inv, catalog, PhaseOptions(), tmp_path / "i", INSTALL)
    assert state.memory_state("nvl", "r1t2").files["/etc/nvidia-imex/nodes_config.cfg"] == "r1t1\nr1t2\nr1t3\n"
    assert state.memory_state("nvl", "r1t1") is None  # not touched


BUILTIN = ProfileCatalog()


@pytest.mark.skipif("gb200-nvl72" not in BUILTIN.names() or "b300-8x" not in BUILTIN.names(),
                    reason="the NVL72 and B300 profiles are not in this checkout")
def test_install_plans_open_modules_and_imex_on_gb200_and_fabric_manager_with_nvlsm_on_b300(tmp_path):
    gb200 = inventory(tmp_path / "gb", BUILTIN, {"rack1": {"t1": ["bare"], "t2": ["bare"]}}, profile="gb200-nvl72")
    plan = (run_install(gb200, BUILTIN, PhaseOptions(dry_run=True), tmp_path / "gbr", INSTALL).run_dir
            / "install-plan.txt").read_text()
    assert "-open" in plan and "nvidia-imex-" in plan and "/etc/nvidia-imex/nodes_config.cfg" in plan
    assert "nvidia-fabricmanager" not in plan  # the fabric is managed on the NVLink switch trays
    b300 = inventory(tmp_path / "b3", BUILTIN, {"rack1": {"h1": ["bare"]}}, profile="b300-8x")
    plan = (run_install(b300, BUILTIN, PhaseOptions(dry_run=True), tmp_path / "b3r", INSTALL).run_dir
            / "install-plan.txt").read_text()
    assert "nvidia-fabricmanager" in plan and "nvlsm" in plan and "ib_umad" in plan and "nvidia-imex" not in plan
