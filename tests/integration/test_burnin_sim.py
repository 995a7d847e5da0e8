"""validate --burn-in over simulated nodes: a burn-in of a few simulated minutes catches throttle_after on the
GPU and after the minutes it names, a healthy node passes, the two burn-in collectors run in one batch after the
other heavy ones, the busy guard and --deadline hold, a bad duration exits 2, and validate without --burn-in plans
no burn-in."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from nvdeploy.cli.app import cli
from nvdeploy.collect.burnin_commands import KMSG_AFTER, LOAD, SAMPLER
from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.levels import load_levels
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import ErrorReason, Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim.transport import SimTransport

CATALOG = ProfileCatalog()
QUICK = load_levels()["quick"]
BURN = (*QUICK, "burnin.stability", "burnin.load")


def inventory(tmp_path: Path, hosts: dict[str, list[str]]) -> Path:
    lines = ["all:", "  vars:", "    cluster: burn", "    connection: sim", "    profile: h100-sxm-8x",
             '    driver_version: "550.90.07"', "  hosts:"]
    lines += [f"    {name}: {{sim_faults: {json.dumps(faults)}}}" for name, faults in hosts.items()]
    path = tmp_path / "cluster.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def run(tmp_path: Path, hosts: dict[str, list[str]], **options):
    opts = EngineOptions(checks=options.pop("checks", BURN), **{"burn_in_s": 300.0, "burn_in_interval_s": 2.0,
                                                                **options})
    return run_validate(load_inventory(inventory(tmp_path, hosts), CATALOG), CATALOG, opts, tmp_path / "reports",
                        level="quick")


def findings(outcome, name, check):
    node = next(n for n in outcome.run.nodes if n.name == name)
    return [f for f in node.findings if f.check == check]


def test_burn_in_catches_throttle_after_and_passes_a_healthy_node(tmp_path, monkeypatch):
    batches: list[tuple[str, tuple[str, ...]]] = []
    original = SimTransport.run_batch

    def spy(self, commands, deadline_s=None):
        batches.append((self.scenario.name, tuple(c.name for c in commands)))
        return original(self, commands, deadline_s)

    monkeypatch.setattr(SimTransport, "run_batch", spy)
    outcome = run(tmp_path, {"good": [], "hot": ["throttle_after:2:6"]})
    good = findings(outcome, "good", "burnin.stability")
    assert len(good) == 8 and {f.verdict for f in good} == {Verdict.PASS}
    # Sampled until the load's end: its second iteration runs past the 5 minutes to 6.
    assert "181 samples over 6m00s" in good[0].summary
    assert [f.verdict for f in findings(outcome, "good", "burnin.load")] == [Verdict.PASS]
    hot = {f.gpu: f for f in findings(outcome, "hot", "burnin.stability")}
    assert hot[6].verdict is Verdict.FAIL and "sw_thermal_slowdown" in hot[6].summary
    assert "from 2m00s" in hot[6].summary and "SM clock fell" in hot[6].summary
    assert all(hot[g].verdict is Verdict.PASS for g in range(8) if g != 6)
    assert next(n for n in outcome.run.nodes if n.name == "hot").verdict is Verdict.FAIL
    # Sampler and load side by side, in one batch of their own after the light batch.
    assert ("good", (SAMPLER, LOAD)) in batches and ("hot", (SAMPLER, LOAD)) in batches
    # The kernel log after them, in a batch of its own.
    good_batches = [names for name, names in batches if name == "good"]
    # then DCGM's health watches read again, once they have had the burn-in's samples
    assert good_batches[-3:] == [(SAMPLER, LOAD), (KMSG_AFTER,), ("dcgm_health_after",)]
    assert all(SAMPLER not in names or names == (SAMPLER, LOAD) for _, names in batches)


def test_burn_in_respects_the_busy_guard_and_the_deadline(tmp_path):
    outcome = run(tmp_path, {"busy": ["gpu_busy"]})
    busy = findings(outcome, "busy", "burnin.stability")
    assert busy and all(f.verdict is Verdict.ERROR and f.reason is ErrorReason.BUSY for f in busy)
    # A deadline shorter than the burn-in: its batch is cut there, ERROR timeout, never PASS.
    outcome = run(tmp_path, {"n1": []}, burn_in_s=3600.0, deadline_s=1.5)
    cut = findings(outcome, "n1", "burnin.stability")
    assert cut and all(f.verdict is Verdict.ERROR for f in cut)


def test_burn_in_check_without_a_duration_is_error_not_run(tmp_path):
    outcome = run(tmp_path, {"n1": []}, burn_in_s=None)
    found = findings(outcome, "n1", "burnin.stability")
    assert [f.reason for f in found] == [ErrorReason.NOT_RUN] and "--burn-in" in found[0].summary


def test_cli_burn_in(tmp_path):
    path = inventory(tmp_path, {"good": [], "hot": ["throttle_after:3"]})
    runner = CliRunner()
    bad = runner.invoke(cli, ["validate", "-i", str(path), "--burn-in", "4x", "--state-dir", str(tmp_path / "s")])
    assert bad.exit_code == 2 and "--burn-in" in bad.output and "duration" in bad.output
    lonely = runner.invoke(cli, ["validate", "-i", str(path), "--burn-in-interval", "2", "--state-dir",
                                 str(tmp_path / "s")])
    assert lonely.exit_code == 2 and "needs --burn-in" in lonely.output
    done = runner.invoke(cli, ["validate", "-i", str(path), "--burn-in", "10m", "--burn-in-interval", "5",
                               "--state-dir", str(tmp_path / "s"), "--no-history", "-q"])
    assert done.exit_code == 1, done.output
    run_dir = next((tmp_path / "s" / "burn").iterdir())
    results = json.loads((run_dir / "results.json").read_text())
    load = {n["name"]: f for n in results["nodes"] for f in n["findings"] if f["check"] == "burnin.load"}
    assert {name: f["verdict"] for name, f in load.items()} == {"good": "PASS", "hot": "FAIL"}
    # Every GPU of the hot node throttles from 3 minutes: its DCGM GEMM figure falls with its clock.
    assert "GPU0 GEMM" in load["hot"]["summary"] and "below its first" in load["hot"]["summary"], load["hot"]
    assert "GEMM on 8 GPU(s)" in load["good"]["summary"], load["good"]
    assert (run_dir / "evidence" / "hot").is_dir()


def test_validate_without_burn_in_plans_none(tmp_path, monkeypatch):
    sent: list[str] = []
    original = SimTransport.run_batch

    def spy(self, commands, deadline_s=None):
        sent.extend(c.name for c in commands)
        return original(self, commands, deadline_s)

    monkeypatch.setattr(SimTransport, "run_batch", spy)
    outcome = run(tmp_path, {"n1": []}, checks=QUICK, burn_in_s=None)
    assert SAMPLER not in sent and LOAD not in sent
    assert not [f for n in outcome.run.nodes for f in n.findings if f.check.startswith("burnin.")]


def test_resume_burns_in_the_remaining_nodes_for_the_runs_duration(tmp_path):
    from nvdeploy.phases.validate import resume_validate

    first = run(tmp_path, {"a": [], "b": ["throttle_after:1"]})
    journal = first.run_dir / "results.jsonl"
    header = json.loads(journal.read_text().splitlines()[0])
    assert header["burn_in"] == {"seconds": 300.0, "interval_s": 2.0}
    # As if the run had been stopped before b finished: only a's result is in the journal.
    kept = [line for line in journal.read_text().splitlines()
            if json.loads(line).get("type") != "node" or json.loads(line)["node"]["name"] == "a"]
    journal.write_text("\n".join(kept) + "\n")
    inv = load_inventory(inventory(tmp_path, {"a": [], "b": ["throttle_after:1"]}), CATALOG)
    resumed = resume_validate(first.run_dir, inv, CATALOG, EngineOptions())  # no burn-in given: the header's
    hot = findings(resumed, "b", "burnin.stability")
    assert len(hot) == 8 and {f.verdict for f in hot} == {Verdict.FAIL}
    assert "181 samples over 6m00s" in hot[0].summary


def test_slurm_budget_covers_the_burn_in_once_per_node():
    from nvdeploy.config.inventory import Host
    from nvdeploy.slurm.budget import worst_case

    hosts = [Host(f"gpu{i}", {"profile": "h100-sxm-8x"}) for i in range(2)]
    plain = worst_case(hosts, CATALOG, QUICK, 64, 10.0, None)
    burn = worst_case(hosts, CATALOG, BURN, 64, 10.0, None, burn_in_s=4 * 3600.0)
    # The load's limit: 4 h, one more DCGM (level 3: 3600 s) and nccl-tests (900 s) iteration, kill grace and
    # slack; the sampler beside it is not added.
    assert burn.seconds - plain.seconds == (4 * 3600 + 3600 + 900 + 20 + 60 + 45) + (20 + 45)  # + dmesg after
    assert "burnin_load 18980 s" in burn.detail
    # Burn-in checks planned without a duration run nothing, and cost nothing.
    assert worst_case(hosts, CATALOG, BURN, 64, 10.0, None).seconds == plain.seconds


def test_a_waiver_of_dcgm_error_codes_reaches_the_burn_in_load_too(tmp_path, monkeypatch):
    """The run's waivers give the burn-in's dcgmi diag the same --ignoreErrorCodes as the heavy stage's."""
    from nvdeploy.config.waivers import load_waivers

    loads: dict[str, tuple[str, ...]] = {}
    original = SimTransport.run_batch

    def spy(self, commands, deadline_s=None):
        for command in commands:
            if command.name == LOAD:
                loads[self.scenario.name] = command.argv
        return original(self, commands, deadline_s)

    monkeypatch.setattr(SimTransport, "run_batch", spy)
    waivers_file = tmp_path / "waivers.yaml"
    waivers_file.write_text("waivers:\n  - check: dcgm.diag_r3\n    nodes: [good]\n    gpus: [3]\n"
                            "    dcgm_error_codes: [101]\n    owner: ops\n    reason: RMA open\n"
                            "    until: 2999-01-15\n")
    outcome = run(tmp_path, {"good": [], "other": []}, waivers=tuple(load_waivers(waivers_file)))
    # sh -c SCRIPT nvdeploy-burnin-load DURATION LEVEL DCGM_TIMEOUT NCCL_TIMEOUT IGNORE NCCL_ARGV...
    assert loads["good"][8] == "gpu3:101" and loads["other"][8] == "-", loads
    burned = {n.name: [f.verdict for f in n.findings if f.check == "burnin.load"] for n in outcome.run.nodes}
    assert burned == {"good": [Verdict.PASS], "other": [Verdict.PASS]}
