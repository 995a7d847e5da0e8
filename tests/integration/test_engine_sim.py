"""The engine over the simulated transport: every fault gives the right verdict on the right node only."""

from __future__ import annotations

import json
import textwrap
import threading
import time
from pathlib import Path

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import rebuild_reports, run_validate
from nvdeploy.results import ClusterVerdict, ErrorReason, Verdict
from nvdeploy.runner.engine import EngineOptions, Interrupted

CATALOG = ProfileCatalog()
DEFAULT_OPTIONS = EngineOptions()


def run(tmp_path: Path, hosts: dict, options: EngineOptions = DEFAULT_OPTIONS, extra_vars: str = "", **kwargs):
    lines = ["all:", "  vars:", "    connection: sim", "    profile: h100-sxm-8x", '    driver_version: "550.90.07"']
    lines += [f"    {line}" for line in extra_vars.splitlines() if line.strip()]
    lines.append("  hosts:")
    for name, faults in hosts.items():
        lines.append(f"    {name}: {{sim_faults: {json.dumps(faults)}}}" if faults else f"    {name}: {{}}")
    path = tmp_path / "cluster.yaml"
    path.write_text("\n".join(lines) + "\n")
    inventory = load_inventory(path, CATALOG)
    return run_validate(inventory, CATALOG, options, tmp_path / "reports", **kwargs)


def node(outcome, name):
    return next(n for n in outcome.run.nodes if n.name == name)


def verdicts_of(result_node, check):
    return [f.verdict for f in result_node.findings if f.check == check]


def test_healthy_cluster_is_ready_and_exits_0(tmp_path):
    outcome = run(tmp_path, {"a": [], "b": []})
    assert outcome.run.verdict is ClusterVerdict.READY
    assert outcome.exit_code == 0
    for name in ("a", "b"):
        assert node(outcome, name).verdict is Verdict.PASS
    assert {f.check for f in node(outcome, "a").findings} >= {"driver.loaded", "gpu.count", "kmsg.xid"}


@pytest.mark.parametrize("fault, check, verdict, reason", [
    ("unreachable", "system.reachable", Verdict.ERROR, ErrorReason.UNREACHABLE),
    ("auth_fail", "system.reachable", Verdict.ERROR, ErrorReason.AUTH),
    ("driver_missing", "driver.loaded", Verdict.FAIL, None),
    ("driver_mismatch", "driver.version", Verdict.FAIL, None),
    ("gpu_missing", "gpu.count", Verdict.FAIL, None),
    ("gpu_missing", "gpu.pci_visible", Verdict.FAIL, None),
    ("persistence_off", "gpu.persistence", Verdict.FAIL, None),
    ("ecc_uncorrectable", "memory.ecc_errors", Verdict.FAIL, None),
    ("row_remap_pending", "memory.remapped_rows", Verdict.FAIL, None),
    ("row_remap_failure", "memory.remapped_rows", Verdict.FAIL, None),
    ("xid79", "kmsg.xid", Verdict.FAIL, None),
    ("xid48", "kmsg.xid", Verdict.FAIL, None),
    ("xid74", "kmsg.xid", Verdict.FAIL, None),
    ("xid13", "kmsg.xid", Verdict.WARN, None),
    ("xid31", "kmsg.xid", Verdict.WARN, None),
])
def test_each_fault_gives_its_verdict_on_its_node_only(tmp_path, fault, check, verdict, reason):
    outcome = run(tmp_path, {"good1": [], "bad": [fault], "good2": []})
    bad = node(outcome, "bad")
    found = [f for f in bad.findings if f.check == check]
    assert found and max(f.verdict.severity for f in found) == verdict.severity, bad.findings
    if reason is not None:
        assert found[0].reason is reason
    assert bad.verdict is verdict
    for good in ("good1", "good2"):
        assert node(outcome, good).verdict is Verdict.PASS, node(outcome, good).findings
    expected_cluster = {Verdict.FAIL: ClusterVerdict.NOT_READY, Verdict.ERROR: ClusterVerdict.INCOMPLETE,
                        Verdict.WARN: ClusterVerdict.READY}[verdict]
    assert outcome.run.verdict is expected_cluster
    assert outcome.exit_code == {ClusterVerdict.NOT_READY: 1, ClusterVerdict.INCOMPLETE: 3,
                                 ClusterVerdict.READY: 0}[expected_cluster]


def test_driver_missing_never_passes_dependent_checks(tmp_path):
    outcome = run(tmp_path, {"bad": ["driver_missing"]})
    bad = node(outcome, "bad")
    for check in ("gpu.count", "gpu.persistence", "memory.ecc_errors"):
        assert verdicts_of(bad, check) == [Verdict.ERROR]
    assert verdicts_of(bad, "gpu.pci_visible") == [Verdict.ERROR]


def test_wrong_sku_in_group_fails_model_and_memory(tmp_path):
    path = tmp_path / "inv.yaml"
    path.write_text(textwrap.dedent("""
        all:
          vars: {connection: sim, profile: h100-sxm-8x}
          hosts:
            a: {}
            b: {sim_sku: l40s-8x}
        """))
    outcome = run_validate(load_inventory(path, CATALOG), CATALOG, EngineOptions(), tmp_path / "r")
    b = node(outcome, "b")
    assert verdicts_of(b, "gpu.model") == [Verdict.FAIL]
    assert verdicts_of(b, "gpu.memory")[0] is Verdict.FAIL
    assert node(outcome, "a").verdict is Verdict.PASS


def test_driver_mismatch_without_target_fails_the_minority(tmp_path):
    path = tmp_path / "inv.yaml"
    path.write_text("all:\n  vars: {connection: sim, profile: h100-sxm-8x}\n  hosts:\n"
                    "    gpu[01-03]: {}\n    gpu04: {sim_faults: [driver_mismatch]}\n")
    outcome = run_validate(load_inventory(path, CATALOG), CATALOG, EngineOptions(), tmp_path / "r")
    assert verdicts_of(node(outcome, "gpu04"), "driver.consistency") == [Verdict.FAIL]
    assert node(outcome, "gpu01").verdict is Verdict.PASS
    cluster = outcome.run.cluster_findings[0]
    assert "gpu[01-03]: 550.90.07 | gpu04: 535.161.08" in cluster.summary


def test_hang_costs_only_the_hung_node_its_timeout(tmp_path):
    started = time.monotonic()
    outcome = run(tmp_path, {"ok": [], "stuck": ["hang"]}, extra_vars="command_timeout: 2")
    elapsed = time.monotonic() - started
    stuck = node(outcome, "stuck")
    assert stuck.verdict is Verdict.ERROR
    assert any(f.reason is ErrorReason.TIMEOUT for f in stuck.findings)
    assert node(outcome, "ok").verdict is Verdict.PASS
    assert elapsed < 30
    assert outcome.exit_code == 3


def test_global_deadline_bounds_the_run(tmp_path):
    options = EngineOptions(deadline_s=1.5)
    started = time.monotonic()
    outcome = run(tmp_path, {"stuck": ["hang"], "ok": []}, options=options, extra_vars="command_timeout: 60")
    assert time.monotonic() - started < 15
    assert node(outcome, "stuck").verdict is Verdict.ERROR


def test_interrupt_keeps_finished_nodes_and_marks_the_rest(tmp_path, ctrl_c_reaches_main):
    hosts = {f"n{i:02d}": [] for i in range(6)}
    hosts.update({"h1": ["hang"], "h2": ["hang"]})
    main_thread = threading.main_thread()

    def interrupt_soon():
        time.sleep(1.0)
        import _thread

        _thread.interrupt_main()

    assert threading.current_thread() is main_thread
    threading.Thread(target=interrupt_soon, daemon=True).start()
    started = time.monotonic()
    outcome = run(tmp_path, hosts, extra_vars="command_timeout: 60")
    assert time.monotonic() - started < 15
    assert outcome.exit_code == 130
    assert outcome.run.interrupted
    assert outcome.run.verdict is ClusterVerdict.INCOMPLETE
    for i in range(6):
        assert node(outcome, f"n{i:02d}").verdict is Verdict.PASS
    for hung in ("h1", "h2"):
        assert node(outcome, hung).verdict is Verdict.ERROR
    journal = (outcome.run_dir / "results.jsonl").read_text().splitlines()
    assert sum(1 for line in journal if '"type":"node"' in line) >= 6
    assert "INTERRUPTED" in (outcome.run_dir / "report.html").read_text()


def test_interrupted_exception_carries_sigterm_code():
    assert Interrupted(143).exit_code == 143


def test_reports_rebuild_from_journal_after_a_crash(tmp_path):
    outcome = run(tmp_path, {"a": [], "b": ["xid79"]})
    (outcome.run_dir / "results.json").unlink()
    (outcome.run_dir / "report.html").unlink()
    journal = outcome.run_dir / "results.jsonl"
    header, *nodes = journal.read_text().splitlines()
    line_a = next(line for line in nodes if '"name":"a"' in line)
    line_b = next(line for line in nodes if '"name":"b"' in line)
    journal.write_text(f"{header}\n{line_a}\n{line_b[:40]}")  # b's line torn as by a crash mid-write
    rebuilt = rebuild_reports(outcome.run_dir)
    assert (outcome.run_dir / "report.html").exists()
    assert node(rebuilt, "a").verdict is Verdict.PASS
    assert node(rebuilt, "b").verdict is Verdict.ERROR
    assert rebuilt.run.verdict is ClusterVerdict.INCOMPLETE


def test_evidence_files_are_written_and_private(tmp_path):
    outcome = run(tmp_path, {"a": ["xid79"]})
    a = node(outcome, "a")
    paths = {e.collector: outcome.run_dir / e.path for e in a.evidence}
    assert b"Xid" in paths["kmsg"].read_bytes()
    assert paths["nvidia_smi_xml"].read_bytes().startswith(b"<?xml")
    xid = next(f for f in a.findings if f.check == "kmsg.xid")
    assert xid.evidence == "evidence/a/kmsg.out"
    assert (outcome.run_dir.stat().st_mode & 0o077) == 0
    assert (paths["kmsg"].stat().st_mode & 0o077) == 0


def test_results_json_has_the_documented_shape(tmp_path):
    outcome = run(tmp_path, {"a": [], "b": ["persistence_off"]})
    data = json.loads((outcome.run_dir / "results.json").read_text())
    for key in ("schema_version", "run_id", "cluster", "phase", "verdict", "summary", "nodes"):
        assert key in data
    assert data["verdict"] == "NOT_READY"
    b = next(n for n in data["nodes"] if n["name"] == "b")
    assert b["verdict"] == "FAIL"
    finding = next(f for f in b["findings"] if f["check"] == "gpu.persistence")
    for key in ("check", "verdict", "summary", "observed", "expected", "remediation", "evidence"):
        assert key in finding
    assert finding["remediation"] == "TUNE"


def test_resume_finishes_only_the_nodes_without_a_result(tmp_path, ctrl_c_reaches_main):
    import _thread

    from nvdeploy.phases.validate import resume_validate

    hosts = {f"n{i}": [] for i in range(4)}
    hosts["late"] = ["hang"]
    threading.Thread(target=lambda: (time.sleep(1.0), _thread.interrupt_main()), daemon=True).start()
    first = run(tmp_path, hosts, extra_vars="command_timeout: 60")
    assert first.exit_code == 130
    inventory_path = tmp_path / "cluster.yaml"
    # The node is fixed before the resume: the same inventory without the hang.
    inventory_path.write_text(inventory_path.read_text().replace('{sim_faults: ["hang"]}', "{}"))
    inventory = load_inventory(inventory_path, CATALOG)
    before = {n.name: n.duration_s for n in first.run.nodes}
    resumed = resume_validate(first.run_dir, inventory, CATALOG, EngineOptions())
    assert resumed.run_dir == first.run_dir
    assert resumed.exit_code == 0
    assert not resumed.run.interrupted
    assert {n.name: n.verdict for n in resumed.run.nodes} == {name: Verdict.PASS for name in hosts}
    for name in ("n0", "n1", "n2", "n3"):
        assert node(resumed, name).duration_s == round(before[name], 3)  # kept from the journal, not re-run
    journal = (first.run_dir / "results.jsonl").read_text()
    assert '"type":"resume"' in journal and '"nodes":["late"]' in journal
