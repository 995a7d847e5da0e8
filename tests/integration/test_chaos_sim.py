"""The chaos faults of nvdeploy.sim.chaos on the in-process simulated transport (the same faults run behind the
fake SSH nodes: tests/e2e/test_fault_matrix_ssh.py proves both give the same findings)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.config.yamlfile import ConfigError
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import ErrorReason, Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim.chaos import GARBAGE, parse_chaos
from nvdeploy.sim.scenario import NodeScenario, validate_fault
from nvdeploy.sim.tools import run_tool

CATALOG = ProfileCatalog()
PROFILE = CATALOG.get("h100-sxm-8x")
DEFAULT_OPTIONS = EngineOptions()


def run(tmp_path, hosts: dict, extra: str = "", options: EngineOptions = DEFAULT_OPTIONS):
    path = tmp_path / "inv.yaml"
    path.write_text("all:\n  vars: {connection: sim, profile: h100-sxm-8x" + extra + "}\n  hosts:\n" + "".join(
        f"    {name}: {{sim_faults: {json.dumps(faults)}}}\n" for name, faults in hosts.items()))
    return run_validate(load_inventory(path, CATALOG, check_fault=validate_fault), CATALOG, options, tmp_path / "out")


def by_name(outcome):
    return {n.name: n for n in outcome.run.nodes}


def one(node, check):
    (finding,) = [f for f in node.findings if f.check == check]
    return finding


@pytest.mark.parametrize("fault", ["smi_hang", "driver_hang", "smi_cut", "garbage", "garbage:dmesg", "flood",
                                   "flood:1", "flood:1024", "slow", "slow:2", "slow:0.5", "slow:dmesg",
                                   "slow:nvidia-smi:3", "smi_rc:0", "smi_rc:18", "smi_rc:255"])
def test_chaos_faults_are_known(fault):
    assert validate_fault(fault) is None


@pytest.mark.parametrize("fault", ["smi_rc", "smi_rc:256", "smi_rc:-1", "flood:0", "flood:1025", "slow:",
                                   "slow:abc:x", "garbage:", "smi_hang:1"])
def test_malformed_chaos_faults_are_refused_at_inventory_load(tmp_path, fault):
    assert validate_fault(fault) is not None
    with pytest.raises(ConfigError) as info:
        run(tmp_path, {"a": [fault]})
    assert info.value.key == "sim_faults"


def test_parse_chaos_reads_every_parameter():
    chaos = parse_chaos(("smi_rc:15", "flood:3", "slow:dmesg:2.5", "slow:1", "garbage:lspci", "xid79"))
    assert chaos.smi_rc == 15 and chaos.flood_bytes == 3 * 1024 * 1024
    assert chaos.delay_for("dmesg") == 2.5 and chaos.delay_for("lspci") == 1.0
    assert chaos.garbles("lspci") and not chaos.garbles("dmesg")
    assert not parse_chaos(("xid79",)).active


@pytest.mark.parametrize("rc, verdict", [(6, Verdict.FAIL), (9, Verdict.FAIL), (12, Verdict.FAIL),
                                         (14, Verdict.FAIL), (15, Verdict.FAIL), (18, Verdict.FAIL),
                                         (2, Verdict.ERROR), (3, Verdict.ERROR), (42, Verdict.ERROR),
                                         (255, Verdict.ERROR), (0, Verdict.PASS)])
def test_nvidia_smi_exit_code_decides(tmp_path, rc, verdict):
    node = by_name(run(tmp_path, {"a": [f"smi_rc:{rc}"]}))["a"]
    assert one(node, "driver.loaded").verdict is verdict
    if rc:
        assert node.verdict is not Verdict.PASS


def test_inforom_table_looks_healthy_but_the_exit_code_fails_it():
    out = run_tool(NodeScenario("a", PROFILE, ("smi_rc:14",)), ["nvidia-smi", "-q", "-x"])
    assert out.rc == 14 and b"</nvidia_smi_log>" in out.stdout and b"infoROM is corrupted" in out.stdout


def test_flood_is_capped_marked_truncated_and_error(tmp_path):
    outcome = run(tmp_path, {"a": ["flood"], "b": []})
    node = by_name(outcome)["a"]
    record = {e.collector: e for e in node.evidence}["nvidia_smi_xml"]
    assert record.truncated and record.bytes_total == 50 * 1024 * 1024
    assert (outcome.run_dir / record.path).stat().st_size == 4 * 1024 * 1024
    assert (one(node, "driver.loaded").verdict, one(node, "driver.loaded").reason) == (Verdict.ERROR,
                                                                                        ErrorReason.INCOMPLETE)
    assert by_name(outcome)["b"].verdict is Verdict.PASS


def test_garbage_is_parsed_or_error_and_kept_byte_for_byte(tmp_path):
    outcome = run(tmp_path, {"a": ["garbage"]})
    node = by_name(outcome)["a"]
    assert one(node, "driver.loaded").reason is ErrorReason.UNPARSEABLE
    assert one(node, "kmsg.xid").verdict is Verdict.WARN
    record = {e.collector: e for e in node.evidence}["kmsg"]
    assert GARBAGE in (outcome.run_dir / record.path).read_bytes()


def test_smi_hang_leaves_the_kernel_log_readable(tmp_path):
    node = by_name(run(tmp_path, {"a": ["smi_hang", "xid79"]}, ", command_timeout: 1"))["a"]
    assert one(node, "driver.loaded").reason is ErrorReason.TIMEOUT
    assert one(node, "kmsg.xid").verdict is Verdict.FAIL


def test_slow_node_passes_after_its_delay_and_others_do_not_wait(tmp_path):
    arrived = {}
    started = time.monotonic()
    path = tmp_path / "inv.yaml"
    path.write_text("all:\n  vars: {connection: sim, profile: h100-sxm-8x}\n  hosts:\n"
                    "    slow: {sim_faults: ['slow:1.5']}\n    fast: {}\n")
    outcome = run_validate(load_inventory(path, CATALOG), CATALOG, EngineOptions(), tmp_path / "out",
                           progress=lambda n: arrived.setdefault(n.name, time.monotonic() - started))
    assert all(n.verdict is Verdict.PASS for n in outcome.run.nodes)
    assert arrived["slow"] >= 1.5 > arrived["fast"]


def test_slow_beyond_the_command_timeout_is_a_timeout(tmp_path):
    node = by_name(run(tmp_path, {"a": ["slow:lspci:30"]}, ", command_timeout: 1"))["a"]
    assert one(node, "gpu.pci_visible").verdict is Verdict.ERROR
    assert one(node, "driver.loaded").verdict is Verdict.PASS


def test_global_deadline_stops_a_slow_command(tmp_path):
    started = time.monotonic()
    node = by_name(run(tmp_path, {"a": ["slow:30"]}, options=EngineOptions(deadline_s=1)))["a"]
    assert time.monotonic() - started < 10
    assert one(node, "driver.loaded").reason is ErrorReason.TIMEOUT
    assert node.verdict is Verdict.ERROR


@pytest.mark.timeout(60)
def test_interrupt_during_a_slow_command_is_interrupted_not_a_result(tmp_path, ctrl_c_reaches_main):
    def interrupt_soon():
        time.sleep(1.0)
        import _thread

        _thread.interrupt_main()

    threading.Thread(target=interrupt_soon, daemon=True).start()
    outcome = run(tmp_path, {"slow": ["slow:30"], "fast": []})
    assert outcome.exit_code == 130
    slow = by_name(outcome)["slow"]
    assert slow.verdict is Verdict.ERROR
    assert any(f.reason is ErrorReason.INTERRUPTED for f in slow.findings)
    assert not any(f.verdict is Verdict.PASS for f in slow.findings if f.check != "system.reachable")
