"""Heavy collectors (dcgmi diag, nccl-tests) over simulated nodes: fail fast, the busy guard, the deadline, a
batch refused by another run's lock. Each case asserts the verdict, the reason, the text, and that the heavy
command was never sent to the node (no evidence of it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.levels import load_levels
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import CommandResult, ErrorReason, Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.transport.base import Transport, TransportError

CATALOG = ProfileCatalog()
STANDARD = load_levels()["standard"]
DEFAULT = EngineOptions(checks=STANDARD)
HEAVY = {"dcgm.diag_r2": "dcgm_diag_r2", "nccl.all_reduce": "nccl_all_reduce"}


def run(tmp_path: Path, hosts: dict[str, list[str]], options: EngineOptions = DEFAULT, command_timeout: int = 2):
    lines = ["all:", "  vars:", "    connection: sim", "    profile: h100-sxm-8x",
             f"    command_timeout: {command_timeout}", '    driver_version: "550.90.07"', "  hosts:"]
    lines += [f"    {name}: {{sim_faults: {json.dumps(faults)}}}" for name, faults in hosts.items()]
    path = tmp_path / "cluster.yaml"
    path.write_text("\n".join(lines) + "\n")
    return run_validate(load_inventory(path, CATALOG), CATALOG, options, tmp_path / "reports", level="standard")


def node(outcome, name):
    return next(n for n in outcome.run.nodes if n.name == name)


def heavy_findings(result_node):
    return {f.check: f for f in result_node.findings if f.check in HEAVY}


def sent(outcome, name: str) -> set[str]:
    """The collectors whose output came back from the node (every command sent has its evidence file)."""
    return {e.collector for e in node(outcome, name).evidence}


@pytest.mark.parametrize("fault, text", [
    ("smi_hang", "skipped: nvidia-smi hung"),
    ("driver_missing", "skipped: driver not loaded (nvidia-smi exit 9)"),
    ("smi_rc:15", "skipped: a GPU fell off the bus (nvidia-smi exit 15)"),
    ("xid79", "skipped: Xid 79 in the kernel log (a GPU fell off the bus)"),
    ("gpu_missing", "skipped: a GPU is lost (8 NVIDIA GPUs on the PCIe bus, the driver lists 7)"),
])
def test_a_node_that_cannot_run_gpu_work_gets_no_heavy_test(tmp_path, fault, text):
    outcome = run(tmp_path, {"ok": [], "bad": [fault, "dcgm_hang", "nccl_hang"]})
    bad = heavy_findings(node(outcome, "bad"))
    assert set(bad) == set(HEAVY)
    for finding in bad.values():
        assert finding.verdict is Verdict.ERROR and finding.reason is ErrorReason.NOT_RUN
        assert finding.summary.startswith(text), finding.summary
    # Never started: dcgm_hang/nccl_hang would otherwise have cost their timeouts and left evidence.
    assert not sent(outcome, "bad") & set(HEAVY.values())
    assert set(HEAVY.values()) <= sent(outcome, "ok")
    assert all(f.verdict is Verdict.PASS for f in heavy_findings(node(outcome, "ok")).values())


def test_busy_node_gets_error_busy_naming_the_processes_and_quick_checks_still_run(tmp_path):
    outcome = run(tmp_path, {"busy": ["gpu_busy"], "idle": []})
    busy = node(outcome, "busy")
    for finding in heavy_findings(busy).values():
        assert finding.verdict is Verdict.ERROR and finding.reason is ErrorReason.BUSY
        assert "2 GPU compute process(es) run: pid 41230 python3 (30512 MiB), pid 41231 python3 (30512 MiB)" \
            in finding.summary
        assert "--allow-busy" in finding.summary
    assert not sent(outcome, "busy") & set(HEAVY.values())
    quick = [f for f in busy.findings if f.check in load_levels()["quick"]]
    assert quick and all(f.verdict in (Verdict.PASS, Verdict.SKIP) for f in quick), quick
    assert busy.verdict is Verdict.ERROR
    assert node(outcome, "idle").verdict is Verdict.PASS
    assert b"41230, python3, 30512 MiB" in (outcome.run_dir / "evidence" / "busy" / "compute_apps.out").read_bytes()
    assert (outcome.run_dir / "evidence" / "idle" / "compute_apps.out").read_bytes() == b""
    assert busy.facts["compute_processes"] == ["pid 41230 python3 (30512 MiB)", "pid 41231 python3 (30512 MiB)"]
    assert node(outcome, "idle").facts["compute_processes"] == []


def test_allow_busy_runs_the_heavy_tests(tmp_path):
    outcome = run(tmp_path, {"busy": ["gpu_busy"]}, EngineOptions(checks=STANDARD, allow_busy=True))
    busy = node(outcome, "busy")
    assert {c: f.verdict for c, f in heavy_findings(busy).items()} == {c: Verdict.PASS for c in HEAVY}
    assert set(HEAVY.values()) <= sent(outcome, "busy")


def test_allow_busy_does_not_lift_fail_fast(tmp_path):
    outcome = run(tmp_path, {"bad": ["gpu_busy", "driver_missing"]}, EngineOptions(checks=STANDARD, allow_busy=True))
    assert {f.reason for f in heavy_findings(node(outcome, "bad")).values()} == {ErrorReason.NOT_RUN}


def test_quick_level_does_not_ask_for_processes(tmp_path):
    outcome = run_validate(_inventory(tmp_path, {"busy": ["gpu_busy"]}), CATALOG, EngineOptions(), tmp_path / "r")
    assert node(outcome, "busy").verdict is Verdict.PASS
    assert "compute_apps" not in sent(outcome, "busy")


def _inventory(tmp_path, hosts):
    path = tmp_path / "quick.yaml"
    path.write_text("all:\n  vars: {connection: sim, profile: h100-sxm-8x}\n  hosts:\n" + "".join(
        f"    {n}: {{sim_faults: {json.dumps(f)}}}\n" for n, f in hosts.items()))
    return load_inventory(path, CATALOG)


def test_no_heavy_test_starts_after_the_deadline(tmp_path):
    # lsmod answers only after 60 s: the light batch ends at the 6 s deadline, and nothing heavy may start then.
    outcome = run(tmp_path, {"late": ["slow:lsmod:60"]}, EngineOptions(checks=STANDARD, deadline_s=6),
                  command_timeout=120)
    late = heavy_findings(node(outcome, "late"))
    assert {c: (f.verdict, f.reason, f.summary) for c, f in late.items()} == {
        c: (Verdict.ERROR, ErrorReason.NOT_RUN, "skipped: the global --deadline passed") for c in HEAVY}
    assert not sent(outcome, "late") & set(HEAVY.values())


class _Refusing(Transport):
    """A node whose lock is held by another run: it refuses the batch (both ways a transport may say so)."""

    name = "refusing"

    def __init__(self, raise_it: bool) -> None:
        self.raise_it = raise_it
        self.batches = 0

    def connect(self) -> None:
        pass

    def run_batch(self, commands, deadline_s=None):
        self.batches += 1
        holder = "held by alice (run 20261201T060000Z-abcdef, since 2026-12-01T06:00:00Z)"
        if self.raise_it:
            raise TransportError(ErrorReason.BUSY, holder)
        return [CommandResult(c.name, c.display, None, error=ErrorReason.BUSY, error_detail=holder) for c in commands]


@pytest.mark.parametrize("raise_it", [True, False])
def test_a_batch_refused_by_another_runs_lock_is_error_busy_naming_the_holder(tmp_path, monkeypatch, raise_it):
    transports: list[_Refusing] = []

    def fake(host, catalog, options, peers=(), **kwargs):
        transports.append(_Refusing(raise_it))
        return transports[-1]

    monkeypatch.setattr("nvdeploy.runner.engine.make_transport", fake)
    outcome = run(tmp_path, {"held": []})
    held = node(outcome, "held")
    lock = [f for f in held.findings if f.reason is ErrorReason.BUSY]
    assert [f.check for f in lock] == ["system.lock"]
    assert "held by alice (run 20261201T060000Z-abcdef" in lock[0].summary
    assert held.verdict is Verdict.ERROR
    assert transports[0].batches == 1  # the light batch only: no heavy collector was sent


def test_cli_allow_busy_flag_and_checks_show_say_the_rule(tmp_path):
    from click.testing import CliRunner

    from nvdeploy.cli.app import cli

    inventory = tmp_path / "busy.yaml"
    inventory.write_text("all:\n  vars: {connection: sim, profile: h100-sxm-8x}\n  hosts:\n"
                         "    busy: {sim_faults: [gpu_busy]}\n")
    base = ["validate", "-i", str(inventory), "--level", "standard", "--out", str(tmp_path / "r"), "--no-history", "-q"]
    guarded = CliRunner().invoke(cli, base)
    assert guarded.exit_code == 3, guarded.output
    assert guarded.output.startswith("INCOMPLETE")
    allowed = CliRunner().invoke(cli, [*base, "--allow-busy"])
    assert allowed.exit_code == 0, allowed.output
    shown = CliRunner().invoke(cli, ["checks", "show", "dcgm.diag_r2"])
    assert "skipped: nvidia-smi hung" in shown.output and "--allow-busy" in shown.output
    light = CliRunner().invoke(cli, ["checks", "show", "gpu.count"])
    assert "Heavy check" not in light.output


def test_storage_is_measured_on_a_busy_node_while_the_gpu_tests_are_held(tmp_path):
    """The busy guard is about the GPUs: storage.throughput loads none, so it runs beside somebody's GPU job."""
    path = tmp_path / "busy.yaml"
    path.write_text("all:\n  vars: {connection: sim, profile: h100-sxm-8x, command_timeout: 2, "
                    "driver_version: '550.90.07', storage_paths: {/data: {read_gbps: 10}}}\n"
                    "  hosts:\n    busy: {sim_faults: [gpu_busy]}\n")
    outcome = run_validate(load_inventory(path, CATALOG), CATALOG, DEFAULT, tmp_path / "reports", level="standard")
    busy = node(outcome, "busy")
    for finding in heavy_findings(busy).values():
        assert finding.verdict is Verdict.ERROR and finding.reason is ErrorReason.BUSY, finding
    storage = [f for f in busy.findings if f.check == "storage.throughput"]
    assert [(f.verdict, f.summary.split(" with ")[0]) for f in storage] == [
        (Verdict.PASS, "/data write 12 GB/s"), (Verdict.PASS, "/data read 24 GB/s")], storage
    assert "storage_throughput" in sent(outcome, "busy")
    assert not sent(outcome, "busy") & set(HEAVY.values())
