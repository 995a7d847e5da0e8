"""Install, optimize and run over simulated nodes whose state install and optimize really change."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from nvdeploy.actions import StepStatus
from nvdeploy.cli.app import cli
from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.install import run_install
from nvdeploy.phases.optimize import run_optimize
from nvdeploy.phases.playbook import resolve_playbook
from nvdeploy.phases.rollout import PhaseOptions
from nvdeploy.phases.run import run_all
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import ClusterVerdict, ErrorReason, Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim import state

CATALOG = ProfileCatalog()
INSTALL = resolve_playbook(None, "install")
OPTIMIZE = resolve_playbook(None, "optimize")
RUN = resolve_playbook(None, "run")

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def fresh_state():
    state.reset_memory()
    yield
    state.reset_memory()


def inventory(tmp_path: Path, hosts: dict[str, list[str]], cluster: str = "lab", extra: str = "",
              profile: str = "h100-sxm-8x"):
    lines = ["all:", "  vars:", f"    cluster: {cluster}", "    connection: sim", f"    profile: {profile}",
             '    driver_version: "550.90.07"']
    lines += [f"    {line}" for line in extra.splitlines() if line.strip()]
    lines.append("  hosts:")
    lines += [f"    {name}: {{sim_faults: {json.dumps(faults)}}}" for name, faults in hosts.items()]
    path = tmp_path / f"{cluster}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return load_inventory(path, CATALOG)


def steps_of(outcome, phase: str, node: str):
    entry = next(p for p in outcome.run.phases if p["phase"] == phase)
    return {s["step"]: s for n in entry["nodes"] if n["name"] == node for s in n["steps"]}


def mutating_calls(cluster: str, node: str) -> list[dict]:
    return [c for c in state.memory_calls(cluster, node) if c["mutates"]]


def test_bare_node_goes_through_run_and_ends_ready(tmp_path):
    inv = inventory(tmp_path, {"gpu01": ["bare"], "gpu02": ["bare"]})
    before = run_validate(inv, CATALOG, EngineOptions(), tmp_path / "v")
    assert before.run.verdict is not ClusterVerdict.READY  # nvidia-smi not found on a bare node
    outcome = run_all(inv, CATALOG, PhaseOptions(), tmp_path / "r", RUN)
    assert outcome.run.verdict is ClusterVerdict.READY, [f for n in outcome.run.nodes for f in n.findings
                                                         if f.verdict not in (Verdict.PASS, Verdict.SKIP)]
    assert outcome.exit_code == 0
    assert [p["phase"] for p in outcome.run.phases] == ["install", "validate", "optimize", "validate-after"]
    driver = steps_of(outcome, "install", "gpu01")["driver"]
    assert driver["status"] == "changed"
    assert {"item": "package nvidia-driver-550", "before": "absent", "after": "550.90.07-0ubuntu1"} in driver["changes"]
    assert steps_of(outcome, "install", "gpu01")["fabricmanager"]["status"] == "changed"  # NVSwitch SKU
    data = json.loads((outcome.run_dir / "results.json").read_text())
    assert data["phase"] == "run" and data["verdict"] == "READY" and len(data["phases"]) == 4
    assert {"schema_version", "run_id", "cluster", "nodes", "summary", "counts"} <= set(data)
    html = (outcome.run_dir / "report.html").read_text()
    assert 'id="phases"' in html and "nvidia-driver-550" in html
    assert (outcome.run_dir / "install-plan.txt").is_file()
    assert (outcome.run_dir / "evidence" / "gpu01" / "install").is_dir()
    # What validate sees now comes from the node's state: a later validate run is READY too.
    assert run_validate(inv, CATALOG, EngineOptions(), tmp_path / "v2").run.verdict is ClusterVerdict.READY


def test_second_run_changes_nothing(tmp_path):
    inv = inventory(tmp_path, {"gpu01": ["bare"], "gpu02": ["persistence_off", "power_capped"]})
    first = run_all(inv, CATALOG, PhaseOptions(), tmp_path / "r", RUN)
    assert first.run.verdict is ClusterVerdict.READY
    assert sum(p.counts()["changed"] for p in first.phases) > 0
    marks = {n: len(state.memory_calls("lab", n)) for n in ("gpu01", "gpu02")}
    second = run_all(inv, CATALOG, PhaseOptions(), tmp_path / "r", RUN)
    assert second.run.verdict is ClusterVerdict.READY
    assert [p.counts()["changed"] for p in second.phases] == [0, 0]
    assert "0 changed" in second.run.phases[0]["summary"] and "0 changed" in second.run.phases[2]["summary"]
    for node, mark in marks.items():
        later = state.memory_calls("lab", node)[mark:]
        assert later and not [c for c in later if c["mutates"]], node  # it probed, and changed nothing


def test_dry_run_leaves_every_node_unchanged_and_prints_every_command(tmp_path):
    inv = inventory(tmp_path, {"gpu01": ["bare"], "gpu02": ["persistence_off"], "gpu03": []})
    snapshot = state.snapshot_memory("lab")
    result = CliRunner().invoke(cli, ["run", "-i", str(inv.path), "--dry-run", "--out", str(tmp_path / "r"),
                                      "--continue-on-fail"])
    assert result.exit_code in (0, 1, 3), result.output
    assert state.snapshot_memory("lab") == snapshot == {}
    for node in ("gpu01", "gpu02", "gpu03"):
        assert mutating_calls("lab", node) == []
        assert all(not c["sudo"] for c in state.memory_calls("lab", node) if c["argv"] != ["true"])
    assert "would run: sudo -n -- env DEBIAN_FRONTEND=noninteractive apt-get" in result.output
    assert "nvidia-driver-550" in result.output
    assert "would run: sudo -n -- systemctl enable --now nvidia-persistenced" in result.output
    assert "DRY-RUN" in result.output
    install = run_install(inv, CATALOG, PhaseOptions(dry_run=True), tmp_path / "r2", INSTALL)
    assert install.exit_code == 0
    assert install.phases[0].counts()["would_change"] > 0 and install.phases[0].counts()["changed"] == 0
    assert state.snapshot_memory("lab") == {}


def test_failed_package_install_stops_the_rollout_past_max_fail_percent(tmp_path):
    hosts = {"gpu01": ["bare", "install_fail"], "gpu02": ["bare"], "gpu03": ["bare"], "gpu04": ["bare"],
             "gpu05": ["bare"], "gpu06": ["bare"]}
    inv = inventory(tmp_path, hosts)
    options = PhaseOptions(serial="2", max_fail_percent=25)
    outcome = run_install(inv, CATALOG, options, tmp_path / "r", INSTALL)
    phase = outcome.phases[0]
    assert phase.batches == (("gpu01", "gpu02"), ("gpu03", "gpu04"), ("gpu05", "gpu06"))
    assert "rollout stopped after batch 1 of 3" in (phase.stopped or "")
    nodes = {n.name: n for n in outcome.run.nodes}
    failed = nodes["gpu01"]
    driver = next(f for f in failed.findings if f.check == "install.driver")
    assert driver.verdict is Verdict.FAIL and "nvidia-dkms-550" in driver.summary
    assert driver.evidence == "evidence/gpu01/install/driver.install.out"
    later = [f for f in failed.findings if f.check in ("install.cuda", "install.dcgm", "install.persistenced")]
    assert later and all(f.reason is ErrorReason.NOT_RUN for f in later)
    steps = {s.step: s for s in phase.steps["gpu01"]}
    assert "dpkg returned an error code" in steps["driver"].output
    assert nodes["gpu02"].verdict is Verdict.PASS  # same batch: finished
    for name in ("gpu03", "gpu04", "gpu05", "gpu06"):
        assert nodes[name].verdict is Verdict.ERROR
        assert all(f.reason in (ErrorReason.NOT_RUN, None) for f in nodes[name].findings if f.verdict is Verdict.ERROR)
        assert "rollout stopped" in nodes[name].findings[0].summary
        assert state.memory_calls("lab", name) == []  # never touched
    # The failing node got no command after its failed install.
    calls = state.memory_calls("lab", "gpu01")
    last = max(i for i, c in enumerate(calls) if c["argv"][:1] == ["apt-get"] and c["rc"] == 100)
    assert not [c for c in calls[last + 1:] if c["mutates"]]
    assert outcome.exit_code == 1 and outcome.run.verdict is ClusterVerdict.NOT_READY
    # Under the threshold the rollout goes on: 1 of 2 failed is 50%, not more than 50.
    state.reset_memory()
    relaxed = run_install(inv, CATALOG, replace(options, max_fail_percent=50), tmp_path / "r2", INSTALL)
    assert relaxed.phases[0].stopped is None
    assert {n.name: n.verdict for n in relaxed.run.nodes}["gpu06"] is Verdict.PASS


def test_sudo_is_used_only_by_the_steps_that_need_it(tmp_path):
    inv = inventory(tmp_path, {"gpu01": ["bare", "persistence_off"]})
    run_all(inv, CATALOG, PhaseOptions(), tmp_path / "r", RUN)
    calls = state.memory_calls("lab", "gpu01")
    assert calls
    for call in calls:
        if call["mutates"]:
            assert call["sudo"], call
        elif call["sudo"]:
            # validate's root collectors are not used (sudo not set for validate): only the one sudo check
            assert call["argv"] == ["true"], call
    assert sum(1 for c in calls if c["sudo"] and not c["mutates"]) == 2  # install's and optimize's sudo check
    # Without sudo the root commands fail the way the real tools do (and the steps say so).
    state.reset_memory()
    text = Path(inv.path).read_text().replace("    driver_version:", "    sudo: false\n    driver_version:")
    no_sudo = tmp_path / "nosudo.yaml"
    no_sudo.write_text(text)
    outcome = run_install(load_inventory(no_sudo, CATALOG), CATALOG, PhaseOptions(), tmp_path / "r2", INSTALL)
    repo = next(f for f in outcome.run.nodes[0].findings if f.check == "install.repo")
    assert repo.verdict is Verdict.FAIL and "Failure writing output" in repo.summary


@pytest.mark.parametrize("faults, words", [
    (["bare", "secure_boot"], "Secure Boot is enabled"),
    (["driver_mismatch", "gpu_busy"], "GPU process(es) running"),  # an upgrade while jobs run on the GPUs
    (["bare", "no_headers"], "kernel headers"),
])
def test_preflight_refuses_a_driver_install_and_changes_nothing(tmp_path, faults, words):
    inv = inventory(tmp_path, {"gpu01": faults})
    outcome = run_install(inv, CATALOG, PhaseOptions(), tmp_path / "r", INSTALL)
    finding = next(f for f in outcome.run.nodes[0].findings if f.check == "install.preflight")
    assert finding.verdict is Verdict.FAIL and "preflight refused the driver install" in finding.summary
    assert words in finding.summary
    assert state.memory_state("lab", "gpu01") is None
    assert mutating_calls("lab", "gpu01") == []


def test_unsupported_os_fails_clearly_and_rocky_installs_with_dnf(tmp_path):
    inv = inventory(tmp_path, {"alpine": ["bare", "os:alpine-3.19"], "rocky": ["bare", "os:rocky-9.4"]})
    outcome = run_all(inv, CATALOG, PhaseOptions(), tmp_path / "r", RUN, continue_on_fail=True)
    nodes = {n.name: n for n in outcome.run.nodes}
    os_step = next(f for f in nodes["alpine"].findings if f.check == "install.os")
    assert os_step.verdict is Verdict.FAIL and "unsupported OS" in os_step.summary and "dnf" in os_step.summary
    assert mutating_calls("lab", "alpine") == []
    assert nodes["rocky"].verdict is Verdict.PASS, nodes["rocky"].findings
    rocky = state.memory_state("lab", "rocky")
    assert rocky is not None and rocky.packages["nvidia-driver"].startswith("550.90.07")
    done = [c["argv"] for c in mutating_calls("lab", "rocky")]
    assert ["dnf", "-y", "module", "enable", "nvidia-driver:550-dkms"] in done
    assert ["dnf", "-y", "install", "nvidia-driver-550.90.07", "kmod-nvidia-latest-dkms-550.90.07",
            "nvidia-fabric-manager-550.90.07"] in done


def test_optimize_records_each_change_before_and_after_and_revalidates(tmp_path):
    inv = inventory(tmp_path, {"gpu01": ["persistence_off", "power_capped"], "gpu02": []},
                    extra="compute_mode: EXCLUSIVE_PROCESS")
    outcome = run_optimize(inv, CATALOG, PhaseOptions(), tmp_path / "r", OPTIMIZE)
    assert outcome.run.verdict is ClusterVerdict.READY
    steps = steps_of(outcome, "optimize", "gpu01")
    assert steps["persistence"]["changes"][0] == {"item": "persistence mode (8 GPUs)", "before": "Disabled",
                                                   "after": "Enabled"}
    assert steps["power_limit"]["changes"] == [{"item": "power limit W (8 GPUs)", "before": "560.00",
                                                 "after": "700.00"}]
    assert steps["compute_mode"]["changes"][0]["after"] == "Exclusive_Process"
    assert steps["governor"]["changes"] == [{"item": "cpu governor", "before": "powersave", "after": "performance"}]
    assert steps_of(outcome, "optimize", "gpu02")["power_limit"]["status"] == "ok"
    optimize = next(p for p in outcome.run.phases if p["phase"] == "optimize")
    rows = {(r["node"], r["check"]): r for r in optimize["comparison"]["rows"]}
    persistence = rows[("gpu01", "gpu.persistence")]
    assert persistence["before"]["verdict"] == "FAIL" and persistence["after"]["verdict"] == "PASS"
    power = [r for (node, check), r in rows.items() if node == "gpu01" and check == "clocks.power_limit"]
    assert power and power[0]["after"]["verdict"] == "PASS" and power[0]["before"]["verdict"] == "WARN"
    assert [p["phase"] for p in outcome.run.phases] == ["validate-before", "optimize", "validate-after"]
    again = run_optimize(inv, CATALOG, PhaseOptions(), tmp_path / "r2", OPTIMIZE)
    assert again.phases[0].counts()["changed"] == 0


def test_run_stops_before_optimize_when_validate_is_not_ready(tmp_path):
    inv = inventory(tmp_path, {"gpu01": ["bare"], "gpu02": ["xid79"]})
    outcome = run_all(inv, CATALOG, PhaseOptions(), tmp_path / "r", RUN)
    assert outcome.run.verdict is ClusterVerdict.NOT_READY and outcome.exit_code == 1
    optimize = next(p for p in outcome.run.phases if p["phase"] == "optimize")
    assert optimize["status"] == "not_run" and "NOT_READY" in optimize["summary"]
    assert not any(c["argv"][:2] == ["cpupower", "frequency-set"] for c in state.memory_calls("lab", "gpu01"))
    state.reset_memory()
    forced = run_all(inv, CATALOG, PhaseOptions(), tmp_path / "r2", RUN, continue_on_fail=True)
    assert [p["phase"] for p in forced.run.phases] == ["install", "validate", "optimize", "validate-after"]
    assert forced.run.verdict is ClusterVerdict.NOT_READY  # the Xid 79 node is still broken


def test_driver_upgrade_needs_a_reboot_only_with_allow_reboot(tmp_path):
    inv = inventory(tmp_path, {"gpu01": ["driver_mismatch"]})  # 535.161.08 installed and loaded
    refused = run_install(inv, CATALOG, PhaseOptions(), tmp_path / "r", INSTALL)
    findings = {f.check: f for f in refused.run.nodes[0].findings}
    # The plan needs the reboot nvdeploy may not do: refused before any change (the new driver is not left
    # installed and unloaded), ERROR reboot_required (not a FAIL), saying what to do.
    reboot = findings["install.reboot"]
    assert reboot.verdict is Verdict.ERROR and reboot.reason is ErrorReason.REBOOT_REQUIRED
    assert "refused before any change" in reboot.summary and "--allow-reboot" in reboot.summary
    assert reboot.remediation.value == "REBOOT"
    assert refused.phases[0].steps["gpu01"][3].status is StepStatus.NOT_RUN  # driver: not installed
    assert mutating_calls("lab", "gpu01") == [] and state.snapshot_memory("lab") == {}
    assert refused.exit_code == 3
    assert state.memory_state("lab", "gpu01") is None  # never changed: the scenario's own state
    rebooted = run_install(inv, CATALOG, PhaseOptions(allow_reboot=True), tmp_path / "r2", INSTALL)
    steps = {s.step: s for s in rebooted.phases[0].steps["gpu01"]}
    assert steps["reboot"].status is StepStatus.CHANGED, steps["reboot"]
    assert steps["driver_loaded"].status is StepStatus.OK and "550.90.07" in steps["driver_loaded"].message
    assert state.memory_state("lab", "gpu01").boots == 2
    assert rebooted.run.verdict is ClusterVerdict.READY


def test_reboot_that_never_comes_back_times_out(tmp_path):
    inv = inventory(tmp_path, {"gpu01": ["driver_mismatch", "reboot_stuck"]}, extra="reboot_timeout: 1")
    playbook = tmp_path / "install.yaml"
    playbook.write_text(INSTALL.read_text().replace("params: {timeout_s: \"{{ reboot_timeout | default(900) }}\"}",
                                                    "params: {timeout_s: \"{{ reboot_timeout }}\", wait_s: 0, "
                                                    "poll_s: 0.2}"))
    outcome = run_install(inv, CATALOG, PhaseOptions(allow_reboot=True), tmp_path / "r", playbook)
    reboot = next(f for f in outcome.run.nodes[0].findings if f.check == "install.reboot")
    assert reboot.verdict is Verdict.ERROR and reboot.reason is ErrorReason.TIMEOUT
    assert "did not come back" in reboot.summary


def test_local_mirror_works_offline_and_the_internet_repo_does_not(tmp_path):
    offline = inventory(tmp_path, {"gpu01": ["bare", "offline"]})
    failed = run_install(offline, CATALOG, PhaseOptions(), tmp_path / "r", INSTALL)
    repo = next(f for f in failed.run.nodes[0].findings if f.check == "install.repo")
    assert repo.verdict is Verdict.FAIL and "developer.download.nvidia.com" in repo.summary
    state.reset_memory()
    mirrored = inventory(tmp_path, {"gpu01": ["bare", "offline"]}, cluster="mirror",
                         extra='package_mirror: "http://mirror.lab.local/cuda/repos"')
    outcome = run_install(mirrored, CATALOG, PhaseOptions(), tmp_path / "r2", INSTALL)
    assert outcome.run.verdict is ClusterVerdict.READY
    node = state.memory_state("mirror", "gpu01")
    assert "http://mirror.lab.local/cuda/repos/ubuntu2204/x86_64/" in node.files[
        "/etc/apt/sources.list.d/nvdeploy-nvidia.list"]


def test_tags_select_steps_and_nccl_tests_install_from_a_tarball(tmp_path):
    inv = inventory(tmp_path, {"gpu01": []}, extra='nccl_tests_source: "/srv/mirror/nccl-tests-2.13.11.tar.gz"')
    outcome = run_install(inv, CATALOG, PhaseOptions(tags=("nccl",)), tmp_path / "r", INSTALL)
    steps = {s.step: s for s in outcome.phases[0].steps["gpu01"]}
    assert steps["nccl_tests"].status is StepStatus.CHANGED
    assert all(s.status is StepStatus.SKIPPED for name, s in steps.items() if name != "nccl_tests")
    node = state.memory_state("lab", "gpu01")
    assert node.files["/opt/nccl-tests/.nvdeploy-source"] == "/srv/mirror/nccl-tests-2.13.11.tar.gz\n"
    skipped = run_install(inv, CATALOG, PhaseOptions(skip_tags=("nccl", "driver", "repo", "cuda", "dcgm", "containers",
                                                                "ib", "preflight", "always")), tmp_path / "r2", INSTALL)
    assert all(s.status is StepStatus.SKIPPED for s in skipped.phases[0].steps["gpu01"])


def test_unreachable_node_is_error_and_its_steps_not_run(tmp_path):
    inv = inventory(tmp_path, {"gpu01": ["unreachable"], "gpu02": ["bare"]})
    outcome = run_install(inv, CATALOG, PhaseOptions(), tmp_path / "r", INSTALL)
    nodes = {n.name: n for n in outcome.run.nodes}
    assert nodes["gpu01"].findings[0].reason is ErrorReason.UNREACHABLE
    assert {s.status for s in outcome.phases[0].steps["gpu01"]} <= {StepStatus.NOT_RUN, StepStatus.SKIPPED}
    assert nodes["gpu02"].verdict is Verdict.PASS
    assert outcome.exit_code == 3


def test_cli_install_then_dry_run_of_a_done_node_plans_nothing(tmp_path):
    inv = inventory(tmp_path, {"gpu01": ["bare"]})
    runner = CliRunner()
    done = runner.invoke(cli, ["install", "-i", str(inv.path), "--out", str(tmp_path / "r")])
    assert done.exit_code == 0, done.output
    assert "CHANGED driver" in done.output and "READY" in done.output
    # In-process state lives as long as the process: the same process sees the installed node.
    again = runner.invoke(cli, ["install", "-i", str(inv.path), "--out", str(tmp_path / "r"), "--dry-run"])
    assert again.exit_code == 0, again.output
    assert "would run" not in again.output and "0 would change" in again.output


def test_global_deadline_stops_a_slow_step_and_nothing_after_it_runs(tmp_path):
    inv = inventory(tmp_path, {"gpu01": ["bare", "slow:modprobe:60"], "gpu02": ["bare"]})
    options = PhaseOptions(engine=EngineOptions(deadline_s=3))
    outcome = run_install(inv, CATALOG, options, tmp_path / "r", INSTALL)
    assert outcome.run.duration_s < 30
    steps = {s.step: s for s in outcome.phases[0].steps["gpu01"]}
    assert steps["driver"].status is StepStatus.FAILED and steps["driver"].reason is ErrorReason.TIMEOUT
    assert all(steps[name].status is StepStatus.NOT_RUN for name in ("cuda", "dcgm", "peermem"))
    driver = next(f for f in outcome.run.nodes[0].findings if f.check == "install.driver")
    assert driver.verdict is Verdict.ERROR  # could not finish: not a proven failure, never a PASS
    assert outcome.exit_code == 3


def test_optimize_reports_only_what_it_changed_and_lists_only_what_moved(tmp_path):
    """A node that gets a state of its own (its governor tuned) keeps the toolkit it had: no cuda.compat
    PASS -> WARN that optimize did not cause; the terminal lists the findings that moved, and counts the rest."""
    inv = inventory(tmp_path, {"gpu01": ["driver_mismatch"], "gpu02": ["persistence_off"]})
    result = CliRunner().invoke(cli, ["optimize", "-i", str(inv.path), "--out", str(tmp_path / "o")])
    assert result.exit_code in (0, 1), result.output
    entry = next(p for p in json.loads(next((tmp_path / "o").rglob("results.json")).read_text())["phases"]
                 if p["phase"] == "optimize")
    moved = [(r["node"], r["check"]) for r in entry["comparison"]["rows"] if r["changed"]]
    assert moved == [("gpu02", "gpu.persistence")], moved
    listed = [line for line in result.output.splitlines() if line.startswith("    gpu0")]
    assert listed == ["    gpu02 gpu.persistence: FAIL Disabled -> PASS Enabled"], listed
    assert "measured figure(s) unchanged" in result.output


def test_run_prints_each_phase_under_its_own_heading_in_one_stream(tmp_path):
    inv = inventory(tmp_path, {"gpu01": []})
    result = CliRunner().invoke(cli, ["run", "-i", str(inv.path), "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output + result.stderr
    out = result.stdout.splitlines()
    heads = [i for i, line in enumerate(out) if line.startswith("== ")]
    assert [out[i] for i in heads] == ["== install", "== validate", "== optimize", "== validate-after"]
    install_summary = next(i for i, line in enumerate(out) if line.startswith("install: "))
    optimize_summary = next(i for i, line in enumerate(out) if line.startswith("optimize: "))
    # each phase's lines come right after its heading and before the next one
    assert heads[0] < install_summary < heads[1] < heads[2] < optimize_summary < heads[3]
    assert out.count("-- install") == 1 and out.count("-- optimize") == 1
    assert "== " not in result.stderr


def test_install_and_optimize_leave_a_trail_in_the_history_and_a_dry_run_none(tmp_path):
    from nvdeploy.runner.history_db import default_db_path, list_runs, node_record

    inv = inventory(tmp_path, {"gpu01": ["driver_mismatch"]})
    state_dir = tmp_path / "state"
    for args in (["install", "--dry-run"], ["install", "--allow-reboot"], ["optimize"]):
        result = CliRunner().invoke(cli, [*args, "-i", str(inv.path), "--out", str(state_dir), "-q"])
        assert result.exit_code in (0, 1, 3), result.output  # the plan: 3, it needs a reboot it may not do
    runs = list_runs(default_db_path(state_dir))
    assert [r["phase"] for r in runs] == ["install", "optimize"]  # the plan changed nothing: not recorded
    assert all(r["user"] for r in runs)
    driver = node_record(default_db_path(state_dir), "gpu01", "install.driver")
    assert "535.161.08" in driver[0]["findings"][0]["summary"] and "550.90.07" in driver[0]["findings"][0]["summary"]
    listed = CliRunner().invoke(cli, ["history", "--state-dir", str(state_dir)])
    assert listed.exit_code == 0 and " install " in listed.output and " optimize " in listed.output, listed.output
