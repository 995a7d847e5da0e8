"""nccl-tests parser against real captures (tests/fixtures/real/nccl-tests, see PROVENANCE.tsv)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from nvdeploy.parsers.nccl_tests import NcclFacts, NcclRow, parse_nccl_tests

NCCL_DIR = Path(__file__).parent.parent / "fixtures" / "real" / "nccl-tests"

# file -> top-level facts, number of rows, {row position: fields}, substrings of errors
EXPECT: dict[str, dict[str, Any]] = {
    "all_gather_perf-2node-16xH100-a3mega-tcpxo-srun-l-rank-prefix-c0.log": {
        "top": {"collective": None, "nccl_version": None, "nranks": None, "validation": None, "avg_busbw": 128.817,
                "max_busbw": 188.99, "wrong_total": 0, "out_of_bounds": 0, "complete": True},
        "n": 11,
        "rows": {0: {"size_bytes": 8388608, "count": 131072, "type": "float", "redop": "none", "root": -1,
                     "algbw_oop": 27.11, "busbw_oop": 25.41, "wrong_oop": None, "busbw_ip": 25.63, "wrong_ip": None},
                 10: {"size_bytes": 8589934592, "time_us_oop": 42637.0, "busbw_oop": 188.88, "busbw_ip": 188.99}},
    },
    "all_reduce_perf-1xRTX3090-single-rank-busbw-zero-columns-merge.log": {
        "top": {"nranks": 1, "validation": True, "avg_busbw": 0.0, "max_busbw": 0.0, "wrong_total": 0,
                "out_of_bounds": 0, "complete": True},
        "n": 27,
        "rows": {0: {"size_bytes": 8, "count": 2, "redop": "sum", "algbw_oop": 0.0, "algbw_ip": 0.05, "wrong_ip": 0},
                 25: {"size_bytes": 268435456, "algbw_oop": 420.41, "time_us_ip": 0.16, "algbw_ip": 1675104.25,
                      "busbw_ip": 0.0, "wrong_ip": 0},
                 26: {"size_bytes": 536870912, "algbw_ip": 3253763.1}},
    },
    "all_reduce_perf-2node-16xA100-80GB-pairwise-nccl2.12.12-host-placeholders.log": {
        "top": {"nccl_version": "2.12.12+cuda11.6", "nranks": 16, "validation": True, "avg_busbw": 150.209,
                "max_busbw": 182.8, "wrong_total": 0, "out_of_bounds": 0, "complete": True},
        "n": 6,
        "rows": {5: {"size_bytes": 1073741824, "busbw_oop": 182.8, "busbw_ip": 181.39, "wrong_oop": 0}},
    },
    "all_reduce_perf-2node-16xH100-mpirun-gcp-a3mega.log": {
        "top": {"nranks": 16, "validation": True, "avg_busbw": 70.742, "max_busbw": 338.82, "wrong_total": 0,
                "out_of_bounds": 0, "complete": True},
        "n": 31,
        "rows": {30: {"size_bytes": 8589934592, "count": 2147483648, "busbw_oop": 338.82, "busbw_ip": 337.35}},
    },
    "all_reduce_perf-2node-p5.48xlarge-eks-efa-mpirun-tag-output-prefix-EXCERPT.log": {
        "top": {"nranks": None, "avg_busbw": 53.2202, "max_busbw": 439.28, "out_of_bounds": None, "complete": True},
        "n": 1,
        "rows": {0: {"size_bytes": 2147483648, "redop": "sum", "busbw_oop": 438.85, "busbw_ip": 439.28,
                     "wrong_oop": 0, "wrong_ip": 0}},
    },
    "all_reduce_perf-2xRTX3090-NCCL_DEBUG-INFO-stub-library-failure.log": {
        "top": {"collective": "all_reduce_perf", "nccl_version": "2.15.5+cuda11.8", "nranks": 2, "validation": False,
                "avg_busbw": None, "max_busbw": None, "complete": False},
        "n": 0,
        "errors": ["NCCL WARN Cuda failure 'CUDA driver is a stub library'",
                   "Test NCCL failure all_reduce.cu:44 'unhandled cuda error / '"],
    },
    # GB200 NVL72 full rack (coreweave/nccl-tests pull request 43): only rank 71's line was posted, so the rank count
    # comes from the highest rank index; no header (validation unknown).
    "all_reduce_perf-gb200-nvl72-full-rack-72ranks-excerpt.log": {
        "top": {"collective": None, "nccl_version": None, "nranks": 72, "validation": None, "avg_busbw": 745.53,
                "max_busbw": 846.82, "wrong_total": 0, "out_of_bounds": 0, "complete": True},
        "n": 5,
        "rows": {0: {"size_bytes": 536870912, "busbw_oop": 586.06, "busbw_ip": 576.74},
                 4: {"size_bytes": 8589934592, "count": 2147483648, "busbw_oop": 834.57, "busbw_ip": 846.82,
                     "wrong_oop": 0, "wrong_ip": 0}},
    },
    "all_reduce_perf-8xA100-40GB-single-node-old-format.log": {
        "top": {"nranks": 8, "validation": False, "avg_busbw": 68.4048, "max_busbw": 235.26, "wrong_total": 0,
                "out_of_bounds": 0, "complete": True},
        "n": 34,
        "rows": {0: {"size_bytes": 0, "redop": "sum", "root": None, "wrong_oop": None, "time_us_oop": 35.2},
                 33: {"size_bytes": 8589934592, "busbw_oop": 235.26, "busbw_ip": 235.03, "wrong_ip": None}},
    },
    "all_reduce_perf-8xA100-80GB-single-node-nccl2.16.2-hostname-placeholder.log": {
        "top": {"nccl_version": "2.16.2+cuda11.6", "nranks": 8, "validation": True, "avg_busbw": 210.99,
                "max_busbw": 231.72, "wrong_total": 0, "out_of_bounds": 0, "complete": True},
        "n": 6,
        "rows": {0: {"size_bytes": 33554432, "busbw_oop": 170.31, "busbw_ip": 167.99}},
    },
    "all_reduce_perf-8xH100-cuda-system-not-yet-initialized-no-fabricmanager.log": {
        "top": {"nranks": None, "validation": True, "avg_busbw": None, "complete": False, "out_of_bounds": None},
        "n": 0,
        "errors": ["Test CUDA failure common.cu:941 'system not yet initialized'"],
    },
    "alltoall_perf-1xRTX5090-single-rank-inplace-wrong-NA.log": {
        "top": {"nranks": 1, "validation": True, "avg_busbw": 0.0, "max_busbw": 0.0, "wrong_total": 0,
                "out_of_bounds": 0, "complete": True},
        "n": 1,
        "rows": {0: {"size_bytes": 33554432, "redop": "none", "algbw_oop": 1715.44, "wrong_oop": 0,
                     "algbw_ip": 43046.1, "busbw_ip": 0.0, "wrong_ip": None}},
    },
    "alltoall_perf-8xA100-40GB-single-node-empty-redop.log": {
        "top": {"nranks": 8, "validation": False, "avg_busbw": 58.6481, "max_busbw": 226.16, "wrong_total": 0,
                "out_of_bounds": 0, "complete": True},
        "n": 34,
        "rows": {5: {"size_bytes": 32, "count": 1, "type": "float", "redop": None, "root": None,
                     "time_us_oop": 89.0, "wrong_oop": None},
                 33: {"algbw_oop": 256.36, "busbw_oop": 224.31, "algbw_ip": 258.47, "busbw_ip": 226.16}},
    },
}


def test_every_fixture_has_expectations() -> None:
    assert sorted(p.name for p in NCCL_DIR.iterdir()) == sorted(EXPECT)


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_real_nccl_tests(name: str) -> None:
    expected = EXPECT[name]
    facts = parse_nccl_tests((NCCL_DIR / name).read_text(encoding="utf-8"))
    for key, value in expected["top"].items():
        assert getattr(facts, key) == value, key
    assert len(facts.rows) == expected["n"]
    for position, fields in expected.get("rows", {}).items():
        row = facts.rows[position]
        for key, value in fields.items():
            assert getattr(row, key) == value, (position, key)
    for part in expected.get("errors", []):
        assert any(part in e for e in facts.errors), (part, facts.errors)
    if not expected.get("errors"):
        assert facts.errors == ()
    assert facts.warnings == ()
    assert [r.size_bytes for r in facts.rows] == sorted(r.size_bytes for r in facts.rows)
    assert json.loads(json.dumps(facts.to_dict()))["complete"] is facts.complete


NEW_HEADER = """# nccl-tests version 2.13.10 nccl-headers=22304 nccl-library=22304
# Collective test starting: reduce_scatter_perf
# nThread 1 nGpus 1 minBytes 1024 maxBytes 2048 step: 2(factor) warmup iters: 1 iters: 5 agg iters: 1 validation: 1
#
# Using devices
#  Rank  0 Group  0 Pid  11 on host-a device  0 [0000:18:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  12 on host-a device  1 [0000:2a:00] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
host-a:11:11 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 18000 - Init COMPLETE
        1024           128     float     sum      -1    10.00    0.10    0.05      3    10.00    0.10    0.05      1
        2048           256     float     sum      -1    10.00  421.171675104.25      0    10.00    0.20    0.10      0
# Out of bounds values : 4 FAILED
# Avg bus bandwidth    : 0.075
"""


def test_newest_header_failed_validation_and_merged_columns() -> None:
    facts = parse_nccl_tests(NEW_HEADER)
    assert facts.collective == "reduce_scatter_perf"
    assert facts.nccl_version == "2.23.4"
    assert facts.nranks == 2 and facts.validation is True
    assert facts.out_of_bounds == 4 and facts.wrong_total == 4
    assert facts.rows[0] == NcclRow(1024, 128, "float", "sum", 0.1, 0.05, 3, 0.1, 0.05, 1, -1, 10.0, 10.0)
    # "421.171675104.25" is two columns run together (a 10-character value in a 6-wide column): split again
    assert facts.rows[1] == NcclRow(2048, 256, "float", "sum", 421.17, 1675104.25, 0, 0.2, 0.1, 0, -1, 10.0, 10.0)
    assert facts.complete and facts.errors == ()


def test_mpirun_stderr_prefix_and_mpi_abort() -> None:
    text = ("[1,0]<stdout>:# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20 "
            "validation: 1\n"
            "[1,3]<stderr>:node2: Test NCCL failure common.cu:1005 'unhandled system error (run with NCCL_DEBUG=INFO "
            "for details) / '\n"
            "[1,3]<stderr>: .. node2 pid 77: Test failure common.cu:891\n"
            "MPI_ABORT was invoked on rank 3 in communicator MPI_COMM_WORLD\n"
            "with errorcode 1.\n")
    facts = parse_nccl_tests(text)
    assert facts.rows == () and facts.complete is False
    assert facts.errors[0].startswith("node2: Test NCCL failure common.cu:1005")
    assert any("MPI_ABORT" in e for e in facts.errors)
    assert not any("Test failure common.cu:891" in e for e in facts.errors)


def test_only_backtrace_lines_are_kept_when_nothing_else_explains() -> None:
    facts = parse_nccl_tests(" .. host pid 1: Test failure common.cu:891\n")
    assert facts.errors == (".. host pid 1: Test failure common.cu:891",)


def test_table_without_summary_is_incomplete() -> None:
    text = (NCCL_DIR / "all_reduce_perf-2node-16xH100-mpirun-gcp-a3mega.log").read_text()
    facts = parse_nccl_tests(text[: text.index("  4294967296")])
    assert facts.complete is False and len(facts.rows) == 29 and facts.avg_busbw is None


def test_command_line_gives_collective_and_check() -> None:
    text = "$ mpirun -np 16 ./build/all_gather_perf -b 8 -e 1G -f 2 -g 1 -c 0\n# Avg bus bandwidth    : 1.5\n"
    facts = parse_nccl_tests(text)
    assert facts.collective == "all_gather_perf" and facts.validation is False and facts.avg_busbw == 1.5


@pytest.mark.parametrize("text", ["", "\x00", "\ufffd\ufffd", "hello\n", "# Avg bus bandwidth : x\n"])
def test_bad_input_warns(text: str) -> None:
    facts = parse_nccl_tests(text)
    assert facts.rows == () and facts.complete is False
    assert facts.warnings


def test_random_and_truncated_input_never_raises() -> None:
    rng = random.Random(5)
    texts = [p.read_text() for p in NCCL_DIR.iterdir()] + [NEW_HEADER]
    for text in texts:
        for cut in range(0, len(text), 37):
            assert isinstance(parse_nccl_tests(text[:cut]), NcclFacts)
    for _ in range(300):
        seed = rng.choice(texts)
        cut = rng.randrange(len(seed))
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(40))).decode("utf-8", errors="replace")
        assert isinstance(parse_nccl_tests(seed[:cut] + junk + seed[cut:]), NcclFacts)
    assert isinstance(parse_nccl_tests("1" * 5000 + " 2 float sum 1e999 " * 3 + "\n"), NcclFacts)
