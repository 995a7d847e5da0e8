"""ib.ports (ibstat) and ib.peermem (lsmod): expectations from the profile's ib section or host vars."""

from __future__ import annotations

from pathlib import Path

from _catalog_helpers import context, result, run_check, sim_check, verdicts

from nvdeploy.results import ErrorReason, Remediation, Verdict

REAL = Path(__file__).parent.parent / "fixtures" / "real" / "ibstat"


def ibstat_ctx(name: str, profile: str = "h100-sxm-8x", **host_vars: object):
    text = (REAL / name).read_text()
    return context({"ibstat": result("ibstat", text)}, profile=profile, host_vars=host_vars)


def test_eight_ndr_hcas_and_an_ethernet_bond_pass():
    findings = sim_check("ib.ports")
    assert verdicts(findings) == [Verdict.PASS]
    assert findings[0].observed == 8 and "mlx5_bond_0" not in findings[0].summary
    real = run_check("ib.ports", ibstat_ctx("ibstat-h100-node-8x-ib-ndr400-plus-mlx5_bond_0-all-active.txt"))
    assert verdicts(real) == [Verdict.PASS] and real[0].observed == 8


def test_port_down_fails_naming_it():
    findings = sim_check("ib.ports", "ib_port_down")
    assert verdicts(findings) == [Verdict.FAIL]
    assert "7 of 8" in findings[0].summary and "mlx5_3 port 1: Down (Polling)" in findings[0].summary
    assert findings[0].remediation is Remediation.INVESTIGATE


def test_ethernet_ports_are_not_ib_ports():
    # 12 HCAs: 8 IB Active at 400, 4 Ethernet, 3 of them down: the Ethernet ones are not counted or flagged.
    findings = run_check("ib.ports", ibstat_ctx("ibstat-h100-node-12hca-ib-and-eth-3-down-disabled.txt"))
    assert verdicts(findings) == [Verdict.PASS], findings
    roce = run_check("ib.ports", ibstat_ctx("ibstat-h100-node-12hca-roce-2-down-polling-disabled.txt"))
    assert verdicts(roce) == [Verdict.FAIL] and roce[0].observed == 0


def test_rate_and_count_from_host_vars_override_the_profile():
    slow = run_check("ib.ports", ibstat_ctx("ibstat-connectx6-mt4123-active-rate100.txt", ib_hcas=1, ib_rate_gbps=200))
    assert verdicts(slow) == [Verdict.FAIL] and "Active at 100" in slow[0].summary
    ok = run_check("ib.ports", ibstat_ctx("ibstat-connectx6-mt4123-active-rate100.txt", ib_hcas=1, ib_rate_gbps=100))
    assert verdicts(ok) == [Verdict.PASS]
    no_sm = run_check("ib.ports", ibstat_ctx("ibstat-connectx4-state-initializing-no-subnet-manager-no-catype.txt",
                                             ib_hcas=1, ib_rate_gbps=100))
    assert verdicts(no_sm) == [Verdict.FAIL] and "Initializing" in no_sm[0].summary


def test_no_ib_expected_skips_and_missing_ibstat_is_error():
    assert verdicts(sim_check("ib.ports", profile="l40s-8x")) == [Verdict.SKIP]
    assert verdicts(sim_check("ib.ports", host_vars={"ib_hcas": 0})) == [Verdict.SKIP]
    ctx = context({"ibstat": result("ibstat", "", rc=127, stderr="sh: 1: ibstat: not found")})
    assert run_check("ib.ports", ctx)[0].reason is ErrorReason.TOOL_MISSING


def test_peermem_loaded_passes_and_missing_fails():
    assert verdicts(sim_check("ib.peermem")) == [Verdict.PASS]
    missing = sim_check("ib.peermem", "peermem_missing")
    assert verdicts(missing) == [Verdict.FAIL] and missing[0].remediation is Remediation.TUNE
    assert verdicts(sim_check("ib.peermem", profile="l40s-8x")) == [Verdict.SKIP]
    ctx = context({"lsmod": result("lsmod", "", rc=127)})
    assert run_check("ib.peermem", ctx)[0].reason is ErrorReason.TOOL_MISSING
