"""``nvdeploy parse --verdicts`` on what an engineer pastes: a check whose evidence is in the
paste runs, a section the paste does not print is SKIP "not in the pasted text", every format a run parses can be
pasted, and the Windows default table is read. Every input is a real capture (tests/fixtures/real, PROVENANCE.tsv);
where a value is changed to make a failure, the test says which."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nvdeploy.cli.app import cli
from nvdeploy.parsers.detect import FORMATS, detect_format
from nvdeploy.parsers.nvidia_smi import parse_text

REAL = Path(__file__).parent.parent / "fixtures" / "real"
NOT_SHOWN = "not in the pasted text"


def judged(text: str, profile: str, fmt: str = "auto") -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    result = CliRunner().invoke(cli, ["parse", fmt, "-", "--verdicts", "--profile", profile, "--json"], input=text)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    by_check: dict[str, list[dict[str, Any]]] = {}
    for finding in data["verdicts"]["findings"]:
        by_check.setdefault(finding["check"], []).append(finding)
    return data, by_check


# ---------------------------------------------------------------- 4: nvlink.fabric on a pasted GB200/GB300 capture

TRAYS = [("gb200-4gpu-fabric-platforminfo-c2c-v13-580.173.02.xml", "gb200-nvl72", 2),
         ("gb300-4gpu-fabric-platforminfo-v13-580.173.02.xml", "gb300-nvl72", 32766)]
# (what is changed in GPU0's <fabric> block, the verdict, what the summary says)
FABRIC_FAULTS = [
    ("<clusterUuid>00000001-0000-0000-0000-000000000001</clusterUuid>",
     "<clusterUuid>00000000-0000-0000-0000-000000000000</clusterUuid>", "FAIL", "(all zero)"),
    ("<cliqueId>{clique}</cliqueId>", "<cliqueId>0</cliqueId>", "FAIL", "cliqueId 0"),
    ("<summary>Healthy</summary>", "<summary>Unhealthy</summary>", "FAIL", "health Unhealthy"),
    ("<bandwidth>Full</bandwidth>", "<bandwidth>Degraded</bandwidth>", "FAIL", "bandwidth Degraded"),
    ("<state>Completed</state>", "<state>In Progress</state>", "ERROR", "time since boot unknown"),
]


@pytest.mark.parametrize("piece", [False, True], ids=["whole", "gpu0-element"])
@pytest.mark.parametrize("old, new, verdict, words", FABRIC_FAULTS, ids=[f[3] for f in FABRIC_FAULTS])
@pytest.mark.parametrize("name, profile, clique", TRAYS, ids=["gb200", "gb300"])
def test_a_fabric_fault_in_a_pasted_tray_capture_is_found(name, profile, clique, old, new, verdict, words, piece):
    """Before: nvlink.fabric needs the uptime collector too, which no paste has, so it never ran: no finding."""
    xml = (REAL / "nvidia-smi-xml" / name).read_text()
    start, end = xml.index("<fabric>"), xml.index("</fabric>")
    old = old.format(clique=clique)
    assert old in xml[start:end]
    xml = xml[:start] + xml[start:end].replace(old, new, 1) + xml[end:]
    if piece:  # GPU0's <gpu> element alone, as pasted into a ticket
        xml = xml[xml.index("<gpu id="):xml.index("</gpu>") + len("</gpu>")]
    data, by_check = judged(xml, profile)
    assert data["fragment"] is piece
    (fabric,) = by_check["nvlink.fabric"]
    assert fabric["verdict"] == verdict and words in fabric["summary"], fabric
    assert data["verdicts"]["verdict"] == verdict


@pytest.mark.parametrize("name, profile, clique", TRAYS, ids=["gb200", "gb300"])
def test_a_healthy_tray_capture_passes_nvlink_fabric(name, profile, clique):
    data, by_check = judged((REAL / "nvidia-smi-xml" / name).read_text(), profile)
    (fabric,) = by_check["nvlink.fabric"]
    assert fabric["verdict"] == "PASS" and "4 GPUs registered" in fabric["summary"]
    assert data["verdicts"]["verdict"] == "PASS"


def test_nvlink_fabric_is_judged_without_uptime_only_because_it_declares_uptime_optional():
    from nvdeploy.checks import CHECKS
    from nvdeploy.cli.commands.parse import pasted_checks

    assert CHECKS["nvlink.fabric"].optional == ("uptime",)
    assert "nvlink.fabric" in pasted_checks("nvidia_smi_xml")
    # a check that needs another collector to judge stays out of a paste (it would be ERROR "not run")
    assert "gpu.pci_visible" not in pasted_checks("nvidia_smi_xml")


# ------------------------------------------------------------- 5: a section absent from the text is SKIP, not PASS

# Whole -q captures of one-GPU nodes: 'Attached GPUs : 1' and one GPU section, even in their first 40 lines.
Q_TEXT = ["h100-80gb-hbm3-idle-590.48.01.txt", "l40s-load-595.80.txt", "a10-q-535.129.03.txt"]


@pytest.mark.parametrize("name", Q_TEXT)
def test_first_40_lines_of_a_real_q_text_header_included_are_a_fragment(name):
    """Before: 1 attached GPU and 1 section looked whole: clocks.throttle PASS on a section that was not pasted,
    and ECC, temperature and PCIe ERROR "not reported (N/A)"."""
    text = "".join((REAL / "nvidia-smi-text" / name).read_text().splitlines(keepends=True)[:40])
    assert "Attached GPUs" in text and "Clocks Event Reasons" not in text
    data, by_check = judged(text, "h100-sxm-8x")
    assert data["fragment"] is True and data["verdicts"]["verdict"] in ("FAIL", "ERROR")
    for check in ("clocks.throttle", "memory.ecc_errors", "clocks.temperature", "pcie.link", "memory.ecc_mode"):
        (finding,) = by_check[check]
        assert finding["verdict"] == "SKIP" and NOT_SHOWN in finding["summary"], finding
    (note,) = by_check["parse.fragment"]
    assert "cut before their end" in note["summary"]


@pytest.mark.parametrize("name", [*Q_TEXT, "h100-8gpu-hgx-q-535.161.08.txt", "rtx4090-8gpu-q-535.154.05.txt"])
def test_the_whole_q_text_is_not_a_fragment(name):
    facts = parse_text((REAL / "nvidia-smi-text" / name).read_text())
    assert facts.fragment is False and not any("Processes" in w for w in facts.warnings)


def test_the_default_table_shows_no_throttle_reasons_so_clocks_throttle_is_skip():
    """Before: PASS "no GPU is throttled" from a table that has no column for it."""
    data, by_check = judged((REAL / "nvidia-smi-text" / "default-table-8xH100-550.90.07.txt").read_text(),
                            "h100-sxm-8x")
    for check in ("clocks.throttle", "pcie.link", "memory.ecc_mode", "memory.remapped_rows"):
        (finding,) = by_check[check]
        assert finding["verdict"] == "SKIP" and NOT_SHOWN in finding["summary"], finding
    assert [f["verdict"] for f in by_check["memory.ecc_errors"]] == ["PASS"]  # the table's ECC column


def test_csv_columns_not_queried_are_not_in_the_text_never_pass_or_not_reported():
    """Before: clocks.throttle PASS, driver.loaded PASS "driver None loaded", memory ERROR "not reported (N/A)"."""
    text = (REAL / "nvidia-smi-csv" / "tesla-p100-pcie-16gb-query-gpu-510.47.03.csv").read_text()
    data, by_check = judged(text, "h100-sxm-8x")
    for check in ("clocks.throttle", "driver.loaded", "driver.version", "gpu.memory", "pcie.link"):
        (finding,) = by_check[check]
        assert finding["verdict"] == "SKIP" and NOT_SHOWN in finding["summary"], finding
    assert "None" not in " ".join(f["summary"] for f in data["verdicts"]["findings"])


# ------------------------------------------------------------------ 6: every format a run parses can be pasted

def test_perftest_nvbandwidth_and_mig_are_parse_formats():
    assert {"perftest", "nvbandwidth", "nvidia-smi-mig"} <= set(FORMATS)
    for folder, fmt in (("perftest", "perftest"), ("nvbandwidth", "nvbandwidth"), ("nvidia-smi-mig", "nvidia-smi-mig")):
        for path in sorted((REAL / folder).iterdir()):
            assert detect_format(path.read_text()) == fmt, path.name


NVB_47 = REAL / "nvbandwidth" / "v0.8-1xrtx3080-575.64.03-d2h-CUDA_ERROR_INVALID_CONTEXT.txt"


@pytest.mark.parametrize("error", ["[CUDA_ERROR_INVALID_CONTEXT] invalid device context",
                                   "[CUDA_ERROR_NOT_PERMITTED] operation not permitted"])
def test_nvbandwidth_stopped_by_a_cuda_error_says_so_not_cut_off(error):
    """Before: the [CUDA_ERROR_...] line was dropped and the testcase blamed on a cut-off. The NOT_PERMITTED
    line is the real #47 capture with its error name and text changed."""
    from nvdeploy.parsers.nvbandwidth import parse_nvbandwidth

    text = NVB_47.read_text().replace("[CUDA_ERROR_INVALID_CONTEXT] invalid device context", error)
    (case,) = parse_nvbandwidth(text).testcases  # type: ignore[union-attr]
    assert case.status == "Error" and case.error.startswith(error) and "cut off" not in case.error
    data, by_check = judged(text, "l40s-8x")
    assert data["input_format"] == "nvbandwidth" and data["verdicts"]["verdict"] == "ERROR"
    d2h = [f for f in by_check["nvbandwidth.copies"] if "device->host" in f["summary"]]
    assert d2h[0]["verdict"] == "ERROR" and error in d2h[0]["summary"], d2h


def test_nvbandwidth_copy_that_failed_verification_is_fail_isolate():
    text = (REAL / "nvbandwidth" / "v0.7-8xa100-sxm4-80gb-550.127.08-d2d-read-pattern-check-ASSERT.txt").read_text()
    data, by_check = judged(text, "a100-sxm-8x")
    (peer,) = [f for f in by_check["nvbandwidth.copies"] if "peer read" in f["summary"]]
    assert peer["verdict"] == "FAIL" and peer["remediation"] == "ISOLATE" and "checking the pattern" in peer["summary"]


def test_pasted_perftest_is_judged_as_the_gpudirect_pair_run_judges_it():
    data, by_check = judged((REAL / "perftest" / "ib-write-bw-use-cuda-t4-roce-client.txt").read_text(), "h100-sxm-8x")
    (rdma,) = by_check["rdma.gpudirect"]
    assert data["input_format"] == "perftest"
    assert rdma["verdict"] == "FAIL" and rdma["observed"] == 22.99 and "GPUDirect RDMA 22.99 Gb/s" in rdma["summary"]
    _, by_check = judged((REAL / "perftest" / "ib-write-bw-server-waiting-cut.txt").read_text(), "h100-sxm-8x")
    assert [f["verdict"] for f in by_check["rdma.gpudirect"]] == ["ERROR"]


def test_mig_lgip_and_lgi_are_read_and_said_to_be_unjudged():
    from nvdeploy.parsers.mig import parse_mig

    facts = parse_mig((REAL / "nvidia-smi-mig" / "lgip-a100-sxm4-40gb-7-profiles-450.80.02.txt").read_text())
    assert [(p.name, p.profile_id, p.free, p.total) for p in facts.profiles][:2] == [
        ("MIG 1g.5gb", 19, 7, 7), ("MIG 1g.5gb+me", 20, 1, 1)]
    assert (facts.profiles[-1].sm, facts.profiles[-1].memory_gib, facts.profiles[-1].ofa) == (98, 39.25, 1)
    instances = parse_mig((REAL / "nvidia-smi-mig" / "lgi-a100-40gb-two-3g.20gb-instances-450.80.02.txt").read_text())
    assert [(i.instance_id, i.placement_start, i.placement_size) for i in instances.instances] == [(1, 4, 4), (2, 0, 4)]
    data, by_check = judged((REAL / "nvidia-smi-mig" / "lgi-a100-40gb-two-3g.20gb-instances-450.80.02.txt").read_text(),
                            "a100-sxm-8x")
    assert data["input_format"] == "nvidia-smi-mig" and len(data["instances"]) == 2
    (note,) = by_check["parse.unjudged"]
    assert note["verdict"] == "SKIP" and "no check judges" in note["summary"]


@pytest.mark.parametrize("text", ["", "garbage\n", "| GPU instances: |\n|   0  MIG",
                                  "No GPU instances found: Not Found\n", "\x00" * 50,
                                  "|   0  MIG 1g.5gb  19  7/7  4.75  No  14  0  0  |\n" * 3])
def test_mig_parser_never_raises(text):
    from nvdeploy.parsers.mig import parse_mig

    facts = parse_mig(text)
    assert isinstance(facts.to_dict(), dict)


# ----------------------------------------------------------------------- 7: the Windows default table (R610+)

WINDOWS = REAL / "nvidia-smi-text" / "default-table-windows-wddm-driver-model-rtx5060-616.92-kmd-umd-header.txt"


@pytest.mark.parametrize("model", ["WDDM", "TCC"])
def test_windows_table_gpus_are_read_persistence_not_in_it(model):
    """Before: 0 GPUs ("nvidia-smi table without GPU rows"). TCC: the real WDDM row with its cell changed."""
    text = WINDOWS.read_text().replace("...  WDDM  |", f"...  {model}   |")
    facts = parse_text(text)
    (gpu,) = facts.gpus
    assert gpu.name == "NVIDIA GeForce RTX 5060 ..." and gpu.memory_total_mib == 8151 and gpu.persistence_mode is None
    assert any(f"Driver-Model {model}" in w for w in facts.warnings)
    data, by_check = judged(text, "l40s-8x")
    (persistence,) = by_check["gpu.persistence"]
    assert persistence["verdict"] == "SKIP" and NOT_SHOWN in persistence["summary"]
    assert [f["verdict"] for f in by_check["gpu.count"]] == ["FAIL"]  # 1 of 8: the table was read


def test_windows_table_rows_without_the_title_are_detected():
    rows = "".join(line for line in WINDOWS.read_text().splitlines(keepends=True) if "WDDM" in line or "MiB /" in line)
    assert detect_format(rows) == "nvidia-smi-text"
    assert parse_text(rows).fragment is True and len(parse_text(rows).gpus) == 1
