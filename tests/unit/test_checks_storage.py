"""storage.throughput on a simulated node: per-path floors from storage_paths, a missing path FAIL, a hung path ERROR
timeout, a read-only path ERROR (not measured), dd where fio is absent (said so), the command line's bounds and
quoting, and the inventory schema for storage_paths."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from _catalog_helpers import CATALOG, context, result, run_check, sim_check, timed_out

from nvdeploy.collect.catalog import specs_for
from nvdeploy.collect.storage_commands import COLLECTOR, MAX_FILE_MIB, MAX_RUNTIME_S, build_storage
from nvdeploy.config.inventory import load_inventory
from nvdeploy.parsers.facts import storage_figures, summary_facts
from nvdeploy.parsers.storage import parse_storage
from nvdeploy.results import ErrorReason, Remediation, Verdict
from nvdeploy.transport.batch import build_script

from nvdeploy.sim import tools  # noqa: F401  isort: skip  (every simulated tool first)
from nvdeploy.sim.storage_tool import HEALTHY_READ_GBPS, HEALTHY_WRITE_GBPS  # noqa: E402  isort: skip

CHECK = "storage.throughput"
PATHS = {"storage_paths": {"/data": {"read_gbps": 10}, "/local/nvme": {"write_gbps": 5}}}


def by_summary(findings):
    return {f.summary.split(":")[0].split(" GB/s")[0]: f for f in findings}


def test_healthy_paths_pass_against_their_floors():
    found = sim_check(CHECK, host_vars=PATHS)
    assert [f.verdict for f in found] == [Verdict.PASS] * 4
    data_read = next(f for f in found if f.summary.startswith("/data read"))
    assert data_read.observed == HEALTHY_READ_GBPS and data_read.unit == "GB/s" and data_read.expected == ">= 10"
    nvme_write = next(f for f in found if f.summary.startswith("/local/nvme write"))
    assert nvme_write.observed == HEALTHY_WRITE_GBPS and nvme_write.expected == ">= 5"
    # A direction without a floor is recorded, not judged.
    assert "recorded, not judged" in next(f for f in found if f.summary.startswith("/data write")).summary


def test_storage_slow_fails_the_floor():
    found = sim_check(CHECK, "storage_slow:40", host_vars=PATHS)
    data_read = next(f for f in found if f.summary.startswith("/data read"))
    assert data_read.verdict is Verdict.FAIL
    assert data_read.observed == pytest.approx(HEALTHY_READ_GBPS * 0.4)
    assert "below the floor 10 GB/s" in data_read.summary
    assert data_read.remediation is Remediation.INVESTIGATE
    nvme_write = next(f for f in found if f.summary.startswith("/local/nvme write"))
    assert nvme_write.verdict is Verdict.FAIL  # 4.8 < 5


def test_missing_path_fails_and_the_others_are_measured():
    found = sim_check(CHECK, "storage_missing:/data", host_vars=PATHS)
    missing = [f for f in found if f.summary.startswith("/data")]
    assert [f.verdict for f in missing] == [Verdict.FAIL]
    assert "does not exist" in missing[0].summary and "not mounted" in missing[0].summary
    assert [f.verdict for f in found if f.summary.startswith("/local/nvme")] == [Verdict.PASS, Verdict.PASS]


def test_hung_path_is_error_timeout_and_the_node_goes_on():
    found = sim_check(CHECK, "storage_hang:/data", host_vars=PATHS)
    hung = [f for f in found if f.summary.startswith("/data")]
    assert [(f.verdict, f.reason) for f in hung] == [(Verdict.ERROR, ErrorReason.TIMEOUT)]
    assert "no answer within 70 s" in hung[0].summary
    assert [f.verdict for f in found if f.summary.startswith("/local/nvme")] == [Verdict.PASS, Verdict.PASS]


def test_read_only_path_is_error_not_measured():
    found = sim_check(CHECK, "storage_readonly:/data", host_vars=PATHS)
    ro = [f for f in found if f.summary.startswith("/data")]
    assert [(f.verdict, f.reason) for f in ro] == [(Verdict.ERROR, ErrorReason.NOT_RUN)]
    assert "read-only" in ro[0].summary and "could not be measured" in ro[0].summary


def test_dd_where_fio_is_absent_is_said():
    found = sim_check(CHECK, "storage_no_fio", host_vars=PATHS)
    assert all(f.verdict is Verdict.PASS for f in found)
    assert all("with dd" in f.summary and "fio not installed" in f.summary for f in found)


def test_whole_command_timed_out_is_error_timeout():
    ctx = context({COLLECTOR: timed_out(COLLECTOR)}, host_vars=PATHS)
    found = run_check(CHECK, ctx)
    assert [(f.verdict, f.reason) for f in found] == [(Verdict.ERROR, ErrorReason.TIMEOUT)]


def test_cut_off_answer_is_error_for_the_paths_it_lacks():
    text = "@@nvd-storage /data\n@@tool fio\n@@step write\n"
    ctx = context({COLLECTOR: result(COLLECTOR, text, command="sh -c ...")}, host_vars=PATHS)
    found = run_check(CHECK, ctx)
    assert {f.verdict for f in found} == {Verdict.ERROR}
    assert {f.reason for f in found} == {ErrorReason.INCOMPLETE}


def test_no_storage_paths_skips():
    found = sim_check(CHECK)
    assert [f.verdict for f in found] == [Verdict.SKIP]


def test_figures_per_path_for_the_fleet_rule():
    facts = {"storage": parse_storage(tools.run_tool(_scenario(), build_storage(PATHS)).stdout.decode())}
    assert storage_figures(facts["storage"]) == {
        "storage_write_gbps": {"/data": HEALTHY_WRITE_GBPS, "/local/nvme": HEALTHY_WRITE_GBPS},
        "storage_read_gbps": {"/data": HEALTHY_READ_GBPS, "/local/nvme": HEALTHY_READ_GBPS}}
    assert "storage_read_gbps" in summary_facts(facts)


def _scenario(*faults):
    from nvdeploy.sim.scenario import NodeScenario

    return NodeScenario("node01", CATALOG.get("h100-sxm-8x"), faults)


def test_command_bounds_timeout_and_quoted_paths():
    hostile = "/data/x; touch /tmp/pwned $(id)"
    host_vars = {"storage_paths": {hostile: {}, "/b": {}}, "storage_file_mib": 10**6, "storage_runtime_s": 10**4}
    spec = specs_for([COLLECTOR], host_vars, heavy=True)[0]
    assert spec.argv[:2] == ("sh", "-c") and spec.argv[-2:] == (hostile, "/b")
    assert spec.argv[4:7] == (str(MAX_FILE_MIB), str(MAX_RUNTIME_S), str(2 * MAX_RUNTIME_S + 30))
    # Two paths, each its limit plus the kill grace: the whole command outlives the per-path timeouts.
    assert spec.timeout_s == 2 * (2 * MAX_RUNTIME_S + 30 + 7) + 15
    # The batch quotes every argument: the hostile path is one word of the node's shell line.
    script = build_script([spec])
    assert shlex.quote(hostile) in (script if isinstance(script, str) else script.decode())
    assert specs_for([COLLECTOR], {"storage_paths": {"/a": {}}, "storage_collector_timeout": 9}, heavy=True)[0] \
        .timeout_s == 9


@pytest.mark.parametrize("value,ok", [
    ("{/data: {read_gbps: 10}, /local/nvme: {write_gbps: 5}}", True),
    ("{/data: null}", True),
    ("{data: {read_gbps: 10}}", False),          # not absolute
    ("{/data: {read_gbs: 10}}", False),          # unknown floor key
    ("{/data: {read_gbps: -1}}", False),
    ("{/data: {read_gbps: fast}}", False),
    ("[/data]", False),
    ("{}", False),
])
def test_inventory_schema_for_storage_paths(tmp_path: Path, value, ok):
    path = tmp_path / "inv.yaml"
    path.write_text("all:\n  hosts:\n    gpu01:\n      connection: sim\n      profile: h100-sxm-8x\n"
                    f"      storage_paths: {value}\n")
    if ok:
        load_inventory(path, CATALOG)
        return
    from nvdeploy.config.yamlfile import ConfigError

    with pytest.raises(ConfigError) as info:
        load_inventory(path, CATALOG)
    assert info.value.key == "storage_paths" and info.value.line == 6 and str(path) in str(info.value)
