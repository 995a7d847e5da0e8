"""pcie.link: current PCIe generation and width equal the maximum on every GPU (from nvidia-smi -q -x)."""

from __future__ import annotations

from _catalog_helpers import profile_with, sim_check, verdicts

from nvdeploy.results import ErrorReason, Remediation, Verdict


def test_healthy_node_passes():
    findings = sim_check("pcie.link")
    assert verdicts(findings) == [Verdict.PASS]
    assert "Gen5 x16" in findings[0].summary and findings[0].expected == "Gen5 x16"


def test_degraded_width_fails_naming_the_gpu():
    findings = sim_check("pcie.link", "pcie_degraded")
    assert verdicts(findings) == [Verdict.FAIL]
    bad = findings[0]
    assert bad.gpu == 4 and "GPU4 (00000000:9A:00.0)" in bad.summary
    assert (bad.observed, bad.expected) == ("Gen5 x8", "Gen5 x16")
    assert bad.remediation is Remediation.ISOLATE
    assert bad.evidence and bad.evidence.endswith(".out")


def test_slot_below_the_profile_is_a_warning_from_profile_data():
    # An H100 PCIe board in Gen4 slots: current == max, but the profile expects Gen5.
    findings = sim_check("pcie.link", profile="h100-pcie-8x", sku="l40s-8x")
    assert verdicts(findings) == [Verdict.WARN] * 8
    assert findings[0].expected == "Gen5 x16" and findings[0].observed == "Gen4 x16"
    # The same hardware judged against a profile that states Gen4 passes: thresholds are data.
    relaxed = profile_with("h100-pcie-8x", pcie={"gen": 4, "width": 16})
    assert verdicts(sim_check("pcie.link", profile=relaxed, sku="l40s-8x")) == [Verdict.PASS]


def test_driver_not_loaded_is_error_never_pass():
    findings = sim_check("pcie.link", "driver_missing")
    assert verdicts(findings) == [Verdict.ERROR]
    only = findings[0]
    assert only.reason is ErrorReason.NOT_RUN
    assert only.summary == ("not evaluated: NVIDIA driver not loaded (nvidia-smi could not communicate with the "
                            "driver)")
    assert (only.gpu, only.observed, only.expected) == (None, None, None)
    assert only.remediation is Remediation.NONE
    assert only.evidence == "evidence/node01/nvidia_smi_xml.out"
