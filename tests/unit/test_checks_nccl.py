"""nccl.all_reduce (single-node nccl-tests) and the shared assess(): busbw floor from the profile, #wrong, footer,
validation and rank count; NCCL version, size and environment recorded."""

from __future__ import annotations

from pathlib import Path

from _catalog_helpers import CATALOG, context, profile_with, result, run_check, sim_check, sim_results, verdicts

from nvdeploy.checks.nccl import NcclExpectation, assess, expectation
from nvdeploy.collect.catalog import specs_for
from nvdeploy.parsers.nccl_tests import parse_nccl_tests
from nvdeploy.results import ErrorReason, Remediation, Verdict
from nvdeploy.sim.scenario import NodeScenario

REAL = Path(__file__).parent.parent / "fixtures" / "real" / "nccl-tests"
H100 = "h100-sxm-8x"


def sim_output(*faults: str, host_vars=None, profile: str = H100):
    scenario = NodeScenario("node01", CATALOG.get(profile), faults)
    return sim_results(scenario, ["nccl_all_reduce"], host_vars)["nccl_all_reduce"]


def test_command_line_from_profile_and_host_vars():
    spec = specs_for(["nccl_all_reduce"], {"nccl_tests_dir": "/opt/nccl-tests/build/",
                                           "nccl_env": {"NCCL_NVLS_ENABLE": "1"}}, heavy=True,
                     profile=CATALOG.get(H100))[0]
    assert spec.argv == ("env", "NCCL_DEBUG=VERSION", "NCCL_TESTS_MIN_BW=452.2", "NCCL_NVLS_ENABLE=1",
                         "/opt/nccl-tests/build/all_reduce_perf", "-b", "1G", "-e", "8G", "-f", "2", "-g", "8",
                         "-c", "1")
    assert spec.timeout_s == 900.0
    assert specs_for(["nccl_all_reduce"], {"nccl_timeout": 60}, heavy=True)[0].timeout_s == 60.0
    assert expectation(CATALOG.get("h200-8x")).floor_gbps == 456.0
    assert expectation(CATALOG.get("l40s-8x")).floor_gbps is None


def test_healthy_node_passes_and_records_version_size_env():
    findings = sim_check("nccl.all_reduce")
    assert verdicts(findings) == [Verdict.PASS]
    finding = findings[0]
    assert finding.observed == 480.76 and finding.expected == ">= 452.2" and finding.unit == "GB/s"
    assert "at 8 GiB" in finding.summary and "NCCL 2.21.5" in finding.summary
    assert "NCCL_DEBUG=VERSION" in finding.summary


def test_low_bandwidth_fails_with_observed_and_expected():
    findings = sim_check("nccl.all_reduce", "nccl_low_bw")
    assert verdicts(findings) == [Verdict.FAIL]
    assert findings[0].observed == 288.46 and findings[0].expected == ">= 452.2"
    assert "below the floor 452.2 GB/s (95% of 476)" in findings[0].summary
    assert findings[0].remediation is Remediation.INVESTIGATE
    tuned = sim_check("nccl.all_reduce", "nccl_low_bw", host_vars={"nccl_env": {"NCCL_ALGO": "Ring"}})
    assert tuned[0].remediation is Remediation.TUNE and "NCCL_ALGO=Ring" in tuned[0].summary
    # The tool's own exit status agrees: NCCL_TESTS_MIN_BW made it fail.
    assert sim_output("nccl_low_bw").rc == 1 and sim_output().rc == 0


def test_floor_is_profile_data():
    strict = profile_with(H100, nccl={"all_reduce_busbw_gbps": 600, "floor_pct": 95})
    assert verdicts(sim_check("nccl.all_reduce", profile=strict)) == [Verdict.FAIL]
    unjudged = sim_check("nccl.all_reduce", profile="l40s-8x")
    assert verdicts(unjudged) == [Verdict.PASS] and "not judged" in unjudged[0].summary


def test_wrong_values_fail():
    findings = sim_check("nccl.all_reduce", "nccl_wrong")
    assert Verdict.FAIL in verdicts(findings)
    wrong = next(f for f in findings if "data check failed" in f.summary)
    assert wrong.observed == 6144 and wrong.remediation is Remediation.ISOLATE


def test_hang_and_missing_tool_are_errors():
    hung = sim_check("nccl.all_reduce", "nccl_hang")
    assert verdicts(hung) == [Verdict.ERROR] and hung[0].reason is ErrorReason.TIMEOUT
    ctx = context({"nccl_all_reduce": result("nccl_all_reduce", "", rc=127, stderr="env: 'all_reduce_perf': No such "
                                             "file or directory")})
    missing = run_check("nccl.all_reduce", ctx)
    assert missing[0].reason is ErrorReason.TOOL_MISSING and "nccl_tests_dir" in missing[0].summary


def test_failure_replacing_the_table_fails():
    findings = sim_check("nccl.all_reduce", "fabricmanager_down")
    assert verdicts(findings) == [Verdict.FAIL] and "system not yet initialized" in findings[0].summary
    text = (REAL / "all_reduce_perf-8xH100-cuda-system-not-yet-initialized-no-fabricmanager.log").read_text()
    real = run_check("nccl.all_reduce", context({"nccl_all_reduce": result("nccl_all_reduce", text, rc=1)}))
    assert verdicts(real) == [Verdict.FAIL] and "fabric manager" in real[0].summary


def test_no_validation_wrong_rank_count_and_cut_off_are_errors():
    healthy = sim_output().stdout.decode()
    no_check = healthy.replace("validation: 1", "validation: 0")
    no_check = "\n".join(line[:-7] + "    N/A" if line.startswith("  ") else line for line in no_check.splitlines())
    findings = run_check("nccl.all_reduce", context({"nccl_all_reduce": result("nccl_all_reduce", no_check)}))
    assert Verdict.ERROR in verdicts(findings) and Verdict.PASS not in verdicts(findings)
    assert any("without data validation" in f.summary for f in findings)
    four = run_check("nccl.all_reduce", context({"nccl_all_reduce": result(
        "nccl_all_reduce", "\n".join(line for line in healthy.splitlines() if "Rank  4" not in line
                                     and "Rank  5" not in line and "Rank  6" not in line and "Rank  7" not in line))}))
    assert any(f.verdict is Verdict.ERROR and "ran on 4 ranks, expected 8" in f.summary for f in four)
    cut = healthy[: healthy.index("# Out of bounds")]
    findings = run_check("nccl.all_reduce", context({"nccl_all_reduce": result("nccl_all_reduce", cut)}))
    assert verdicts(findings) == [Verdict.ERROR] and findings[0].reason is ErrorReason.INCOMPLETE


def test_average_gate_alone_is_a_warning():
    healthy = sim_output().stdout.decode().replace("OK\n#\n# Collective", "FAILED\n#\n# Collective")
    findings = run_check("nccl.all_reduce", context({"nccl_all_reduce": result("nccl_all_reduce", healthy, rc=1,
                                                                               command="env NCCL_TESTS_MIN_BW=600")})
                         )
    assert verdicts(findings) == [Verdict.WARN] and "NCCL_TESTS_MIN_BW=600" in findings[0].summary


def test_assess_is_reusable_for_a_multi_node_run():
    text = (REAL / "all_reduce_perf-2node-16xH100-mpirun-gcp-a3mega.log").read_text()
    facts = parse_nccl_tests(text)
    run = result("nccl_all_reduce", text, command="mpirun -x NCCL_ALGO=RING all_reduce_perf")
    ok = assess(facts, run, ranks=16, exp=NcclExpectation(340, 95), label="2-node all_reduce_perf")
    assert [a.verdict for a in ok] == [Verdict.PASS] and ok[0].details["env"] == {"NCCL_ALGO": "RING"}
    low = assess(facts, run, ranks=16, exp=NcclExpectation(380, 95))
    assert [a.verdict for a in low] == [Verdict.FAIL] and low[0].remediation is Remediation.TUNE
    wrong_ranks = assess(facts, run, ranks=8, exp=NcclExpectation(340, 95))
    assert Verdict.ERROR in [a.verdict for a in wrong_ranks]


def test_catalog_host_vars_are_validated(tmp_path):
    import pytest

    from nvdeploy.config.inventory import load_inventory
    from nvdeploy.config.yamlfile import ConfigError

    def inventory(host_vars: str):
        path = tmp_path / "inv.yaml"
        path.write_text("all:\n  vars: {connection: sim, profile: h100-sxm-8x}\n  hosts:\n"
                        f"    gpu01: {host_vars}\n")
        return load_inventory(path, CATALOG)

    host = inventory('{nccl_env: {NCCL_NVLS_ENABLE: "1", NCCL_IB_HCA: "mlx5"}, nccl_tests_dir: /opt/nccl-tests, '
                     'dcgm_timeout: 30, nccl_timeout: 120, ib_hcas: 4, ib_rate_gbps: 200}').hosts[0]
    assert host.vars["nccl_env"] == {"NCCL_NVLS_ENABLE": "1", "NCCL_IB_HCA": "mlx5"}
    for bad, key in (('{nccl_env: {LD_PRELOAD: "/tmp/x.so"}}', "nccl_env"), ("{ib_hcas: true}", "ib_hcas"),
                     ("{dcgm_timeout: -1}", "dcgm_timeout"), ("{nccl_env: [NCCL_ALGO]}", "nccl_env")):
        with pytest.raises(ConfigError) as info:
            inventory(bad)
        assert key in info.value.render()
