"""``nvdeploy parse`` on a pasted fragment: it FAILs what it shows and judges nothing else, in every format.

Every fragment is cut out of a real capture (tests/fixtures/real) here, by line numbers, so the piece is what an
operator would paste; where a value is changed to make a failure, the test says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nvdeploy.cli.app import cli
from nvdeploy.cli.commands import parse as parse_module

REAL = Path(__file__).parent.parent / "fixtures" / "real"
NOT_SHOWN = "not in the pasted text"


def lines(relative: str, start: int, end: int) -> str:
    """Lines ``start`` to ``end`` (1-based, inclusive) of a real capture."""
    text = (REAL / relative).read_text(encoding="utf-8").splitlines(keepends=True)
    return "".join(text[start - 1:end])


def invoke(*args: str, input: str | None = None) -> Any:
    result = CliRunner().invoke(cli, ["parse", *args], input=input)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 0, result.output
    return result


def judged(fmt: str, text: str, profile: str = "h100-sxm-8x") -> tuple[dict[str, Any], dict[str, list[dict]]]:
    """The JSON of ``parse FMT - --verdicts``, and its findings by check."""
    data = json.loads(invoke(fmt, "-", "--verdicts", "--profile", profile, input=text).output)
    by_check: dict[str, list[dict]] = {}
    for finding in data["verdicts"]["findings"]:
        by_check.setdefault(finding["check"], []).append(finding)
    return data, by_check


def verdicts_of(by_check: dict[str, list[dict]], check: str) -> list[str]:
    return [f["verdict"] for f in by_check[check]]


def assert_judges_only_what_it_shows(data: dict[str, Any], by_check: dict[str, list[dict]]) -> None:
    """A piece: flagged, never PASS overall, and the fragment finding says why."""
    assert data["fragment"] is True and data["verdicts"]["fragment"] is True
    assert data["verdicts"]["verdict"] in ("FAIL", "ERROR")
    (note,) = by_check["parse.fragment"]
    assert note["verdict"] == "ERROR" and "is a fragment" in note["summary"]


# ------------------------------------------------------------------------ nvidia-smi -q block without header

ECC_BLOCK = "nvidia-smi-text/ecc-sram-uncorrectable-volatile1-aggregate5-excerpt.txt"


def test_q_ecc_block_without_header_fails_the_ecc_and_skips_what_it_does_not_show():
    data, by_check = judged("auto", (REAL / ECC_BLOCK).read_text())
    assert data["input_format"] == "nvidia-smi-text"
    assert_judges_only_what_it_shows(data, by_check)
    assert data["verdicts"]["verdict"] == "FAIL"
    (ecc,) = by_check["memory.ecc_errors"]
    assert ecc["verdict"] == "FAIL" and ecc["observed"] == 1
    # Before: driver.loaded PASS "driver None loaded", clocks.throttle PASS, gpu.count FAIL "1 of 8".
    for check in ("driver.loaded", "clocks.throttle", "gpu.count", "gpu.model", "pcie.link"):
        (finding,) = by_check[check]
        assert finding["verdict"] == "SKIP" and NOT_SHOWN in finding["summary"], finding
    assert "None" not in " ".join(f["summary"] for f in data["verdicts"]["findings"])
    assert not [f for f in data["verdicts"]["findings"] if f["verdict"] == "PASS"]


def test_q_ecc_block_whose_first_line_lost_its_indent_still_shows_the_ecc():
    """Selecting text from its first word drops that line's indentation: "ECC Errors" at the margin."""
    text = (REAL / ECC_BLOCK).read_text()
    assert text.startswith("    ECC Errors")
    data, by_check = judged("nvidia-smi-text", text.lstrip())
    assert_judges_only_what_it_shows(data, by_check)
    (ecc,) = by_check["memory.ecc_errors"]
    assert ecc["verdict"] == "FAIL" and ecc["observed"] == 1  # not lost under a nameless "Volatile" section


def test_q_excerpt_with_attached_gpus_judges_the_count_from_that_line():
    """A -q excerpt that keeps 'Attached GPUs : 8' but shows one GPU section: 8 of 8, not "1 of 8"."""
    data, by_check = judged("auto", (REAL / "nvidia-smi-text" /
                                     "a100-sxm4-80gb-xid63-remapped-rows-pending-excerpt-510.73.08.txt").read_text(),
                            profile="a100-sxm-8x")
    assert_judges_only_what_it_shows(data, by_check)
    (count,) = by_check["gpu.count"]
    assert count["verdict"] == "PASS" and count["observed"] == 8
    assert "FAIL" in verdicts_of(by_check, "memory.remapped_rows")  # remapping pending, shown in the excerpt


def test_whole_q_output_is_still_judged_in_full():
    data, by_check = judged("auto", (REAL / "nvidia-smi-text" / "h100-8gpu-hgx-q-535.161.08.txt").read_text())
    assert data["fragment"] is False and "parse.fragment" not in by_check
    assert verdicts_of(by_check, "gpu.count") == ["PASS"] and "in the pasted text" not in by_check["gpu.count"][0][
        "summary"]


# -------------------------------------------------------------------------------------------- kernel log

XID119 = "xid-logs/dmesg-T-xid119-gsp-rpc-timeout-h100-xe9680-rpc-history-stacktrace.log"


def test_two_line_dmesg_paste_shows_its_xid_and_does_not_claim_no_sxid_since_boot():
    data, by_check = judged("auto", lines(XID119, 2, 3))
    assert data["input_format"] == "kmsg"
    assert_judges_only_what_it_shows(data, by_check)
    (xid,) = by_check["kmsg.xid"]
    assert xid["verdict"] == "FAIL" and "Xid 119" in xid["summary"]
    (sxid,) = by_check["kmsg.sxid"]  # before: PASS "no SXid events ... since boot"
    assert sxid["verdict"] == "SKIP" and NOT_SHOWN in sxid["summary"]


def test_a_log_that_starts_at_boot_still_passes_since_boot():
    # The real capture's lines with the kernel's first line added in front: a log from boot on.
    text = "[    0.000000] Linux version 5.15.0-105-generic (buildd@lcy02-amd64-007) #115-Ubuntu SMP\n" + \
        lines(XID119, 1, 2)
    data, by_check = judged("kmsg", text)
    assert data["fragment"] is False and "parse.fragment" not in by_check
    assert verdicts_of(by_check, "kmsg.sxid") == ["PASS"] and "since boot" in by_check["kmsg.sxid"][0]["summary"]


# --------------------------------------------------------------------------------- XML without its root

A100_XML = "nvidia-smi-xml/a100-sxm4-80gb-mig-v12-535.54.03.xml"


def ecc_xml_piece() -> str:
    """The <ecc_errors> block of a real A100 document (lines 267-280), its volatile DRAM count set to 2."""
    piece = lines(A100_XML, 267, 280)
    assert piece.lstrip().startswith("<ecc_errors>") and piece.rstrip().endswith("</ecc_errors>")
    return piece.replace("<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>2</dram_uncorrectable>", 1)


def test_xml_fragment_that_shows_dram_uncorrectable_2_fails_it():
    data, by_check = judged("auto", ecc_xml_piece(), profile="a100-sxm-8x")
    assert data["input_format"] == "nvidia-smi-xml"
    assert_judges_only_what_it_shows(data, by_check)
    assert data["verdicts"]["verdict"] == "FAIL"  # before: every finding ERROR, the FAIL lost
    (ecc,) = by_check["memory.ecc_errors"]
    assert ecc["verdict"] == "FAIL" and ecc["observed"] == 2
    assert verdicts_of(by_check, "gpu.count") == ["SKIP"] and verdicts_of(by_check, "driver.loaded") == ["SKIP"]


def test_xml_document_cut_off_after_the_ecc_block_fails_what_it_shows():
    """The head of a real document up to its <ecc_errors> block's end (the paste stopped there), DRAM count 2."""
    head = lines(A100_XML, 1, 280).replace("<dram_uncorrectable>0</dram_uncorrectable>",
                                           "<dram_uncorrectable>2</dram_uncorrectable>", 1)
    data, by_check = judged("auto", head, profile="a100-sxm-8x")
    assert data["input_format"] == "nvidia-smi-xml"
    assert_judges_only_what_it_shows(data, by_check)  # before: every finding ERROR "cut off or not XML"
    assert verdicts_of(by_check, "memory.ecc_errors") == ["FAIL"]
    (count,) = by_check["gpu.count"]  # from the document's <attached_gpus>, not from the one <gpu> shown
    assert count["observed"] == 4 and "Attached GPUs" in count["summary"]
    assert verdicts_of(by_check, "clocks.temperature") == ["SKIP"]  # <temperature> comes after the cut


def test_xml_fragment_cut_inside_a_gpu_without_its_openers():
    """Cut from the middle of <volatile> to after <retired_pages>: the closing tags without openers place it."""
    piece = lines(A100_XML, 270, 292)
    assert piece.lstrip().startswith("<sram_uncorrectable>")
    data, by_check = judged("nvidia-smi-xml", piece, profile="a100-sxm-8x")
    assert_judges_only_what_it_shows(data, by_check)
    assert data["gpus"][0]["ecc_uncorrectable_aggregate"] == 0
    assert all(f["verdict"] != "FAIL" for f in data["verdicts"]["findings"])


# ---------------------------------------------------------------- pieces parse auto did not recognise

IB_12HCA = "ibstat/ibstat-h100-node-12hca-ib-and-eth-3-down-disabled.txt"
DISCOVERY_A100 = "dcgmi-discovery/8xA100-SXM4-40GB-dgx-with-6-nvswitches.txt"
NCCL_A100 = "nccl-tests/all_reduce_perf-8xA100-80GB-single-node-nccl2.16.2-hostname-placeholder.log"
TABLE_H100 = "nvidia-smi-text/default-table-8xH100-550.90.07.txt"


@pytest.mark.parametrize(("relative", "start", "end", "fmt"), [
    (NCCL_A100, 17, 19, "nccl-tests"),  # result rows without the header
    (TABLE_H100, 9, 16, "nvidia-smi-text"),  # two GPUs' rows of the default table, no title or column header
    (TABLE_H100, 10, 10, "nvidia-smi-text"),  # one second row (temperature, power, memory)
    (A100_XML, 267, 280, "nvidia-smi-xml"),  # XML without its root
    ("nvidia-smi-xml/tesla-t4-v11-515.105.01.xml", 8, 40, "nvidia-smi-xml"),  # a <gpu> cut mid-way
    (DISCOVERY_A100, 5, 12, "dcgmi-discovery"),  # GPU rows of dcgmi discovery -l without the header
    (IB_12HCA, 76, 85, "ibstat"),  # an ibstat port block without its CA line
])
def test_auto_recognises_headerless_pieces(relative: str, start: int, end: int, fmt: str):
    data = json.loads(invoke("auto", "-", input=lines(relative, start, end)).output)
    assert data["input_format"] == fmt, data.get("warnings")


def test_nccl_rows_without_header_fail_only_what_they_show():
    rows = lines(NCCL_A100, 17, 19)  # 32-128 MiB rows, busbw 170-211 GB/s
    data, by_check = judged("auto", rows, profile="a100-sxm-8x")
    assert_judges_only_what_it_shows(data, by_check)
    # Before: FAIL "busbw 204.27 GB/s at 128 MiB below the floor 223.2" read off rows validate never judges.
    assert verdicts_of(by_check, "nccl.all_reduce") == ["SKIP"]
    assert NOT_SHOWN in by_check["nccl.all_reduce"][0]["summary"]
    # The same rows with a #wrong count (changed from 0 to 3 here): the corruption they show FAILs.
    corrupt = rows.replace("204.26      0", "204.26      3", 1)
    assert corrupt != rows
    data, by_check = judged("auto", corrupt, profile="a100-sxm-8x")
    assert data["verdicts"]["verdict"] == "FAIL" and "#wrong 3" in by_check["nccl.all_reduce"][0]["summary"]


def test_nccl_table_cut_before_the_large_sizes_is_not_a_bandwidth_failure():
    head = lines(NCCL_A100, 1, 19)  # the header and the 32-128 MiB rows: the paste stops before 1 GiB
    data, by_check = judged("auto", head, profile="a100-sxm-8x")
    assert_judges_only_what_it_shows(data, by_check)
    # Before: FAIL "busbw 204.27 GB/s at 128 MiB below the floor 223.2 GB/s", and ERROR "cut off".
    assert verdicts_of(by_check, "nccl.all_reduce") == ["SKIP"]


def test_default_table_rows_without_title_do_not_count_gpus():
    data, by_check = judged("auto", lines(TABLE_H100, 9, 16))
    assert data["input_format"] == "nvidia-smi-text" and data["gpu_count_reported"] is None
    assert_judges_only_what_it_shows(data, by_check)
    assert data["verdicts"]["verdict"] == "ERROR"  # nothing wrong shown, and a piece never PASSes
    assert verdicts_of(by_check, "gpu.count") == ["SKIP"]  # not "2 of 8 expected GPUs"
    (model,) = by_check["gpu.model"]
    assert model["verdict"] == "PASS" and "2 GPU(s) in the pasted text" in model["summary"]


def test_csv_rows_without_header_skip_every_check():
    """--format=csv,noheader rows (a real capture's data row, its header line cut): no column can be named."""
    capture = "nvidia-smi-csv/h100-80gb-hbm3-query-gpu-all-fields-load-590.48.01.csv"
    row = lines(capture, 2, 2)
    data, by_check = judged("nvidia-smi-csv", row)
    assert_judges_only_what_it_shows(data, by_check)
    assert data["verdicts"]["verdict"] == "ERROR" and data["gpus"] == []
    smi_checks = [f for f in data["verdicts"]["findings"] if f["check"] != "parse.fragment"]
    assert smi_checks and all(f["verdict"] == "SKIP" and NOT_SHOWN in f["summary"] for f in smi_checks)


# ------------------------------------------------------------------- topology, NVLink, ibstat pieces

def test_topology_rows_cut_judge_only_the_rows_shown():
    data, by_check = judged("nvidia-smi-topo", lines("nvidia-smi-topo/8xH100-NV18-2numa-spaces.txt", 1, 4))
    assert_judges_only_what_it_shows(data, by_check)
    (topo,) = by_check["nvlink.topology"]  # before: FAIL "10 GPU pair(s) not connected by NV18: GPU3-GPU4 ?..."
    assert topo["verdict"] == "PASS" and "3 matrix row(s) in the pasted text" in topo["summary"]


def test_topology_rows_without_header_are_read_from_the_diagonal():
    rows = lines("nvidia-smi-topo/8xH100-NV18-2numa-spaces.txt", 3, 5)  # GPU1..GPU3, no header
    data, by_check = judged("auto", rows)
    assert data["input_format"] == "nvidia-smi-topo" and data["matrix"]["GPU3"]["GPU1"] == "NV18"
    assert_judges_only_what_it_shows(data, by_check)
    assert verdicts_of(by_check, "nvlink.topology") == ["PASS"]  # before: ERROR "printed no GPU matrix"
    # A PCIe pair the rows show FAILs (a 2-GPU PCIe card judged as if it were an NVSwitch SKU).
    data, by_check = judged("auto", lines("nvidia-smi-topo/2gpu-PHB-no-nvlink.txt", 2, 3))
    (topo,) = by_check["nvlink.topology"]
    assert topo["verdict"] == "FAIL" and "GPU0-GPU1 PHB" in topo["summary"]
    # One row alone: its second column could be GPU1 or a NIC, so nothing is read beyond the diagonal.
    data, by_check = judged("auto", lines("nvidia-smi-topo/2gpu-PHB-no-nvlink.txt", 2, 2))
    assert verdicts_of(by_check, "nvlink.topology") == ["SKIP"]


def test_nvlink_list_cut_mid_gpu_is_not_links_missing():
    piece = lines("nvidia-smi-nvlink/a100-sxm4-80gb-8gpu-nvlink-status-12links-25GBs.txt", 1, 14)
    data, by_check = judged("nvidia-smi-nvlink", piece, profile="a100-sxm-8x")
    assert_judges_only_what_it_shows(data, by_check)
    assert "FAIL" not in verdicts_of(by_check, "nvlink.links")  # before: FAIL "GPU1: 0 of 12 links listed"


def test_nvlink_piece_of_one_gpu_fails_the_link_it_shows_down_not_the_links_it_does_not_show():
    # GPU0 and its first five links (of 12) from a real capture, link 3 changed from 25 GB/s to <inactive>.
    piece = lines("nvidia-smi-nvlink/a100-sxm4-80gb-8gpu-nvlink-status-12links-25GBs.txt", 1, 6)
    assert piece.count("Link ") == 5 and "Link 3: 25 GB/s" in piece
    data, by_check = judged("nvidia-smi-nvlink", piece.replace("Link 3: 25 GB/s", "Link 3: <inactive>"),
                            profile="a100-sxm-8x")
    assert_judges_only_what_it_shows(data, by_check)
    (links,) = by_check["nvlink.links"]  # before: FAIL "... 5 of 12 links listed"
    assert links["verdict"] == "FAIL" and "link(s) 3 inactive" in links["summary"]
    assert "listed" not in links["summary"]


def test_ibstat_piece_is_not_hcas_missing():
    data, by_check = judged("ibstat", lines("ibstat/ibstat-h100-node-8x-ib-ndr400-plus-mlx5_bond_0-all-active.txt",
                                            1, 20))
    assert_judges_only_what_it_shows(data, by_check)
    (ports,) = by_check["ib.ports"]  # before: FAIL "1 of 8 InfiniBand HCAs Active"
    assert ports["verdict"] == "SKIP" and NOT_SHOWN in ports["summary"]


def test_ibstat_port_block_without_its_device_line_fails_a_port_it_shows_down():
    # A real port block (mlx5_2's, lines 76-85) with its link layer changed from Ethernet to InfiniBand: an IB
    # port Down, pasted without the CA line.
    piece = lines(IB_12HCA, 76, 85).replace("Link layer: Ethernet", "Link layer: InfiniBand")
    assert piece.lstrip().startswith("Port 1:") and "State: Down" in piece
    data, by_check = judged("ibstat", piece)
    assert_judges_only_what_it_shows(data, by_check)
    (ports,) = by_check["ib.ports"]
    assert ports["verdict"] == "FAIL" and "Down" in ports["summary"] and "in the pasted text" in ports["summary"]


def test_discovery_rows_without_the_found_line_do_not_count_gpus():
    data, by_check = judged("auto", lines(DISCOVERY_A100, 5, 12), profile="a100-sxm-8x")
    assert data["input_format"] == "dcgmi-discovery" and len(data["gpus"]) == 2
    assert_judges_only_what_it_shows(data, by_check)
    assert verdicts_of(by_check, "dcgm.discovery") == ["SKIP"]  # not "DCGM sees 2 of 8 GPUs"
    # With its "8 GPUs found." line, the count is that line's, not the two rows'.
    data, by_check = judged("auto", lines(DISCOVERY_A100, 1, 12), profile="a100-sxm-8x")
    (seen,) = by_check["dcgm.discovery"]
    assert seen["verdict"] == "PASS" and seen["observed"] == 8


# ------------------------------------------------------------------------------------ terminal summary

def test_verdicts_on_a_terminal_print_a_short_summary_and_json_with_json(monkeypatch):
    monkeypatch.setattr(parse_module, "_on_terminal", lambda: True)
    args = ("auto", str(REAL / ECC_BLOCK), "--verdicts", "--profile", "h100-sxm-8x")
    out = invoke(*args).output
    first, *rest = out.splitlines()
    assert first.startswith("FAIL  ") and "a fragment" in first and "h100-sxm-8x@" in first
    assert rest[0].split()[:2] == ["FAIL", "memory.ecc_errors"]  # most severe first
    assert any(line.strip().startswith("SKIP") and "driver.loaded" in line for line in rest)
    assert "--json" in rest[-1] and len(out.splitlines()) < 12
    data = json.loads(invoke(*args, "--json").output)
    assert data["verdicts"]["verdict"] == "FAIL"


def test_not_a_terminal_keeps_json():
    out = invoke("auto", str(REAL / ECC_BLOCK), "--verdicts", "--profile", "h100-sxm-8x").output
    assert json.loads(out)["verdicts"]["verdict"] == "FAIL"


# ------------------------------------------------------------------------------------------ hostile pieces

@pytest.mark.parametrize("text", [
    "<gpu id='x'>" * 20000,  # never closed: nested 20,000 deep
    "Key" + " " * 100000 + "x\n",  # a long run of blanks without the ':' of a -q line
])
def test_hostile_pieces_are_read_in_linear_work(text: str):
    """Bounded by work, not time: the nesting kept is capped, and a -q line is scanned once."""
    from nvdeploy.parsers import nvidia_smi
    from nvdeploy.parsers.nvidia_smi import xml_log

    facts = nvidia_smi.parse_xml(text)
    assert all(len(path) <= xml_log._XML_PIECE_DEPTH + 1 for path in xml_log._flatten_xml(
        xml_log._xml_pieces(text)))
    assert isinstance(facts, nvidia_smi.SmiFacts) and isinstance(nvidia_smi.parse_text(text), nvidia_smi.SmiFacts)
