"""kmsg.sxid (NVSwitch SXids, checks/sxid.yaml) and what the kernel-log checks say about a log cut to its newest
part (kmsg.xid and kmsg.sxid)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _catalog_helpers import context, result, run_check, sim_check, verdicts

from nvdeploy.checks.kmsg import FABRIC_ACTION, sxid_catalog
from nvdeploy.results import CommandResult, Remediation, Verdict

FATAL = "[ 5123.1] nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 48 LTSSM Fault Up\n"
NONFATAL = ("[186965.348898] nvidia-nvswitch2: SXid (PCI:0000:85:00.0): 12028, Non-fatal, Link 61 egress "
            "non-posted PRIV error (First)\n")
MIB = 1024 * 1024


def kmsg(text: str, profile: str = "h100-sxm-8x", **kwargs):
    ctx = context({"kmsg": result("kmsg", text, **kwargs)}, profile)
    return ctx


def sxid(text: str, profile: str = "h100-sxm-8x", **kwargs):
    return run_check("kmsg.sxid", kmsg(text, profile, **kwargs))


def test_fatal_sxid_alone_fails_naming_switch_and_link_with_the_fabric_remediation():
    findings = sxid("[    0.0] Linux version 6.8\n" + FATAL)
    assert verdicts(findings) == [Verdict.FAIL]
    fail = findings[0]
    assert fail.remediation is Remediation.REBOOT
    assert "SXid 20034 (Fatal) x1 on nvidia-nvswitch3 (PCI 0000:05:00.0), link 48" in fail.summary
    assert FABRIC_ACTION in fail.summary
    assert fail.observed == "SXid 20034 x1 on nvidia-nvswitch3 (PCI 0000:05:00.0), link 48"
    # Xid is another matter: the same log has no Xid.
    assert verdicts(run_check("kmsg.xid", kmsg(FATAL))) == [Verdict.PASS]


def test_non_fatal_sxid_warns():
    findings = sxid(NONFATAL)
    assert verdicts(findings) == [Verdict.WARN]
    assert "nvidia-nvswitch2 (PCI 0000:85:00.0), link 61" in findings[0].summary


def test_fatal_flag_in_the_line_overrides_a_non_fatal_table_entry():
    assert sxid_catalog()[1][12028]["severity"] == "WARN"
    line = NONFATAL.replace("Non-fatal", "Fatal")
    assert verdicts(sxid(line)) == [Verdict.FAIL]


def test_a_non_fatal_flag_does_not_lower_a_fatal_table_entry():
    line = FATAL.replace("Fatal", "Non-fatal")
    assert verdicts(sxid(line)) == [Verdict.FAIL]


def test_unknown_sxid_is_a_warning_unless_the_driver_says_fatal():
    unknown = "nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 99999, Non-fatal, Link 3 something new\n"
    findings = sxid(unknown)
    assert verdicts(findings) == [Verdict.WARN]
    assert "unknown SXid" in findings[0].summary and findings[0].remediation is Remediation.INVESTIGATE
    assert verdicts(sxid(unknown.replace("Non-fatal", "Fatal"))) == [Verdict.FAIL]
    no_flag = "nvidia-nvswitch2: SXid (PCI:0000:c4:00.0): 10002, Severity 5 Engine instance 00\n"
    assert verdicts(sxid(no_flag)) == [Verdict.WARN]


def test_one_finding_per_sxid_and_switch_fatal_first():
    text = NONFATAL + FATAL + FATAL.replace("Link 48", "Link 49")
    findings = sxid(text)
    assert verdicts(findings) == [Verdict.FAIL, Verdict.WARN]
    assert "x2" in findings[0].summary and "links 48, 49" in findings[0].summary


def test_no_sxid_passes_on_nvswitch_skus_and_skips_without_nvswitch():
    assert verdicts(sxid("[ 1.0] nothing here\n")) == [Verdict.PASS]
    assert verdicts(sxid("[ 1.0] nothing here\n", profile="l40s-8x")) == [Verdict.SKIP]
    # A PCIe SKU that logs an SXid anyway still gets it judged.
    assert verdicts(sxid(FATAL, profile="l40s-8x")) == [Verdict.FAIL]


def test_unreadable_kernel_log_is_error_never_pass():
    ctx = context({"kmsg": result("kmsg", "", rc=1, stderr="dmesg: read kernel buffer failed: Operation not "
                                                          "permitted\n")})
    assert verdicts(run_check("kmsg.sxid", ctx)) == [Verdict.ERROR]


@pytest.mark.parametrize("faults, verdict", [(("sxid_fatal",), Verdict.FAIL), (("sxid_nonfatal",), Verdict.WARN),
                                             ((), Verdict.PASS)])
def test_simulated_sxid_faults(faults, verdict):
    findings = sim_check("kmsg.sxid", *faults)
    assert verdicts(findings) == [verdict]
    if faults == ("sxid_fatal",):
        assert "nvidia-nvswitch3 (PCI 0000:08:00.0), link 48" in findings[0].summary


def test_simulated_sxid_fault_has_no_effect_without_nvswitch():
    assert verdicts(sim_check("kmsg.sxid", "sxid_fatal", profile="l40s-8x")) == [Verdict.SKIP]


# --------------------------------------------------------------------------------------- truncated log

def cut_log(tail: str, kept: int = 1 * MIB, total: int = int(3.3 * MIB)) -> CommandResult:
    """A kernel log cut to its newest ``kept`` bytes: starts mid-line, ``stdout_total`` is the true size."""
    filler_line = "[ 100.000000] usb 1-1: new high-speed USB device number 2 using xhci_hcd\n"
    head = "(PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
    body = head + filler_line * ((kept - len(head) - len(tail)) // len(filler_line))
    text = (body + tail).encode()
    text = b"x" * (kept - len(text)) + text  # pad the partial first line up to exactly ``kept`` bytes
    return CommandResult("kmsg", "dmesg", 0, stdout=text, truncated=True, stdout_total=total)


NOTE = "kernel log cut to its newest 1.0 MiB of 3.3 MiB: 2.3 MiB of older lines not read"


@pytest.mark.parametrize("check_id", ["kmsg.xid", "kmsg.sxid"])
def test_cut_log_without_events_is_a_warning_that_says_what_was_dropped(check_id):
    findings = run_check(check_id, context({"kmsg": cut_log("")}))
    assert verdicts(findings) == [Verdict.WARN]
    assert NOTE in findings[0].summary and findings[0].remediation is Remediation.INVESTIGATE


def test_cut_log_partial_first_line_is_not_read_as_an_event():
    # The cut fell inside an Xid 79 line: its fragment is dropped, not half-parsed.
    ctx = context({"kmsg": cut_log("")})
    assert ctx.facts["kmsg"].xid_events == ()
    assert ctx.facts["kmsg"].dropped_first_line.endswith("GPU has fallen off the bus.")


def test_cut_log_events_carry_the_note():
    ctx = context({"kmsg": cut_log(FATAL + "[ 9.0] NVRM: Xid (PCI:0000:2a:00): 48, pid='<unknown>', name=<unknown>, "
                                          "An uncorrectable double bit error\n")})
    for check_id in ("kmsg.xid", "kmsg.sxid"):
        findings = run_check(check_id, ctx)
        assert verdicts(findings) == [Verdict.FAIL]
        assert NOTE in findings[0].summary


def test_whole_log_has_no_note():
    findings = run_check("kmsg.xid", kmsg("[ 1.0] hello\n"))
    assert verdicts(findings) == [Verdict.PASS] and "cut" not in findings[0].summary


REAL_XID = Path(__file__).parent.parent / "fixtures" / "real" / "xid-logs"


def _real(name: str) -> str:
    return (REAL_XID / name).read_text(encoding="utf-8")


def test_gpu_that_never_initialised_fails_naming_its_pci_address_and_the_failure():
    # 24 init failures of one GPU next to an Xid 119 on another (the shape in the issue): both are findings.
    init = "".join(f"[ {100 + n}.5] NVRM: GPU 0000:41:00.0: RmInitAdapter failed! (0x62:0x40:2404)\n"
                   for n in range(24))
    xid119 = _real("dmesg-T-xid119-gsp-rpc-timeout-h100-xe9680-rpc-history-stacktrace.log")
    findings = run_check("kmsg.xid", kmsg(init + xid119))
    init_findings = [f for f in findings if "RmInitAdapter" in f.summary]
    assert len(init_findings) == 1
    fail = init_findings[0]
    assert fail.verdict is Verdict.FAIL and fail.remediation is Remediation.ISOLATE
    assert "GPU 0000:41:00.0 failed to initialise" in fail.summary and "(0x62:0x40:2404) x24" in fail.summary
    assert "short a GPU" in fail.summary
    assert any("Xid 119" in f.summary for f in findings)


def test_real_init_failure_captures_fail_per_gpu():
    findings = run_check("kmsg.xid",
                         kmsg(_real("syslog-rminitadapter-failed-0x24-0x72-1568-gpu-0a-repeated-EXCERPT.log")))
    assert verdicts(findings) == [Verdict.FAIL]
    assert findings[0].observed == "RmInitAdapter failed (0x24:0x72:1568) x6 on 0000:0a:00.0"
    two = run_check("kmsg.xid",
                    kmsg(_real("dmesg-rminitadapter-failed-0x11-0x45-2525-two-gpus-interleaved-EXCERPT.log")))
    assert [f.observed for f in two] == ["RmInitAdapter failed (0x11:0x45:2525) x3 on 0000:04:01.0",
                                         "RmInitAdapter failed (0x11:0x45:2525) x3 on 0000:04:02.0"]


def test_one_sxid_event_with_severity_and_data_lines_is_counted_once():
    findings = sxid(_real("dmesg-nvswitch-sxid22013-severity-data-continuation-lines.log"))
    assert len(findings) == 1
    assert findings[0].observed == "SXid 22013 x1 on nvidia-nvswitch3 (PCI 0000:08:00.0), link 60"


# --------------------------------------------------------------------------------------- Xid -> GPU

def _xid_line(pci: str, xid: int, text: str = "Graphics SM Warp Exception") -> str:
    return f"[ 1234.5] NVRM: Xid (PCI:{pci}): {xid}, pid=3546406, name=python3, {text}\n"


def test_each_xid_finding_names_the_gpu_at_its_pci_address():
    # Xid 13 on GPU 1 (0000:2a:00), Xid 63 on GPU 2 (0000:3a:00): one finding each, by Xid, naming GPU and code.
    findings = sim_check("kmsg.xid", "xid13", "row_remap_pending")
    assert [(f.code, f.gpu, f.verdict, f.remediation) for f in findings] == [
        (13, 1, Verdict.WARN, Remediation.MONITOR), (63, 2, Verdict.WARN, Remediation.RESET_GPU)]
    assert "Xid 13 x1 on 0000:2a:00 (GPU1): " in findings[0].summary and findings[0].observed == "Xid 13 x1"


def test_one_xid_on_two_gpus_is_a_finding_per_gpu_and_an_unlisted_address_names_none():
    from _catalog_helpers import CATALOG, sim_results

    from nvdeploy.sim.scenario import NodeScenario

    results = sim_results(NodeScenario("node01", CATALOG.get("h100-sxm-8x"), ()), ["nvidia_smi_xml"])
    results["kmsg"] = result("kmsg", "[    0.0] Linux version 6.8\n" + _xid_line("0000:3a:00", 79) * 2
                             + _xid_line("0000:2a:00", 79) + _xid_line("0000:c1:00", 79))
    findings = run_check("kmsg.xid", context(results))
    assert [(f.gpu, f.observed) for f in findings] == [(1, "Xid 79 x1"), (2, "Xid 79 x2"), (None, "Xid 79 x1")]
    assert all(f.code == 79 and f.verdict is Verdict.FAIL for f in findings)
    assert "on 0000:c1:00: " in findings[2].summary  # no GPU nvidia-smi lists there: it names the address only


def test_without_nvidia_smi_an_xid_names_no_gpu():
    (finding,) = run_check("kmsg.xid", kmsg(_xid_line("0000:2a:00", 79)))
    assert finding.gpu is None and finding.code == 79 and "on 0000:2a:00: " in finding.summary
