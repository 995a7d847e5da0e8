"""nvloom_cli's output parsed and judged. No public capture of a real nvloom run exists: the texts below are laid
out from nvloom 1.3's format strings (github.com/NVIDIA/nvloom commit 2e7b742: cli/nvloom_cli.cpp, cli/util.cpp,
cli/util.h, cli/testcases.h, cli/testcases.cpp), not captured on a machine."""

from __future__ import annotations

from nvdeploy.checks.nvloom import judge_nvloom, needs_localising, row_ranks, tool_absent
from nvdeploy.parsers.nvloom import parse_nvloom
from nvdeploy.results import ErrorReason, Remediation, Verdict

HEADER = """nvloom_cli 1.3.0
git commit: unknown
NVCC version: 12.8
CUDA version: 12090
Driver version: 580.173.02
Allocation strategy: reuse
Buffer size: 512 MiB
Iteration count: 16
Process 0 (tray01.example): device 0: NVIDIA GB200 (00000000:01:00); rackGuid: 1a2b
Process 1 (tray01.example): device 1: NVIDIA GB200 (00000001:01:00); rackGuid: 1a2b
Process 2 (tray02.example): device 0: NVIDIA GB200 (00000000:01:00); rackGuid: 1a2b
Process 3 (tray02.example): device 1: NVIDIA GB200 (00000001:01:00); rackGuid: 1a2b

"""


def bisect(values, name="bisect_device_to_device_write_sm", done=True):
    rows = "".join(f"{i}\t{v}\t\n" for i, v in enumerate(values))
    numbers = [float(v) for v in values if v != "N/A"]
    tail = (f"\nMin {name} {min(numbers):.2f} GB/s\nAvg {name} {sum(numbers) / len(numbers):.2f} GB/s\n"
            f"Max {name} {max(numbers):.2f} GB/s\nTotal {name} {sum(numbers):.2f} GB/s\n\n"
            f"ExecutionTime {name} 2.87 s\n" + (f"Done {name}\n\n" if done else ""))
    return f"Running {name}\n\t0\t\n{rows}" + tail


def test_healthy_run_parses_and_passes():
    run = parse_nvloom(HEADER + bisect(["750.10", "749.80", "750.30", "749.90"]))
    assert run.version == "1.3.0" and len(run.processes) == 4 and not run.problems
    assert run.processes[2].host == "tray02.example" and run.processes[2].device == 0
    assert run.processes[1].pci == "00000001:01:00" and run.processes[1].rack_guid == "1a2b"
    (case,) = run.testcases
    assert case.done and case.stat("Min") == 749.8 and case.unit == "GB/s" and len(case.cells) == 4
    verdict = judge_nvloom(run, 0, 4, "rack rack1")
    assert verdict.verdict is Verdict.PASS and verdict.observed == 749.8


def test_slow_gpu_and_missing_measurement_named():
    run = parse_nvloom(HEADER + bisect(["750.10", "420.00", "N/A", "749.90"]))
    verdict = judge_nvloom(run, 0, 4, "rack rack1")
    assert verdict.verdict is Verdict.FAIL and verdict.remediation is Remediation.ISOLATE
    assert set(verdict.suspects) == {("tray01.example", 1, 420.0, "420.00 GB/s, below its peers"),
                                     ("tray02.example", 0, None, "no measurement")}
    assert "tray01.example GPU 1: 420.00 GB/s" in verdict.summary


def test_error_line_fails_naming_the_testcase():
    text = HEADER + "Running bisect_device_to_device_write_sm\n" + \
        "Error running testcase bisect_device_to_device_write_sm: CUDA_ERROR_ILLEGAL_ADDRESS\n"
    verdict = judge_nvloom(parse_nvloom(text), 1, 4, "rack rack1")
    assert verdict.verdict is Verdict.FAIL and "CUDA_ERROR_ILLEGAL_ADDRESS" in verdict.summary


def test_cut_off_short_and_waived_are_error_never_pass():
    cut = judge_nvloom(parse_nvloom(HEADER + bisect(["750", "750", "750", "750"], done=False)), 0, 4, "d")
    assert cut.verdict is Verdict.ERROR and cut.reason is ErrorReason.INCOMPLETE
    short = judge_nvloom(parse_nvloom(HEADER + bisect(["750", "750", "750", "750"])), 0, 8, "d")
    assert short.verdict is Verdict.ERROR and "4 ranks reported, 8 asked" in short.summary
    waived = HEADER + "Running multicast_one_to_all_red\ntestcase WAIVED\nExecutionTime multicast_one_to_all_red " \
        "0.01 s\nDone multicast_one_to_all_red\n"
    run = parse_nvloom(waived)
    assert run.testcases[0].waived
    assert judge_nvloom(run, 0, 4, "d").reason is ErrorReason.NOT_RUN


def test_absent_tool_and_garbage():
    absent = ("mpirun was unable to find the specified executable file, and therefore\ndid not launch the job.\n")
    assert tool_absent(parse_nvloom(absent), 1, absent)
    assert tool_absent(parse_nvloom("bash: nvloom_cli: command not found"), 127, "")
    assert not tool_absent(parse_nvloom(HEADER), 1, HEADER)
    for text in ("", "\x00\xff garbage\tRunning\n", "Running x\n\t0\t1\n0\tnope\t\n", "Process x\n" * 3):
        run = parse_nvloom(text)
        assert judge_nvloom(run, 0, 4, "d").verdict is not Verdict.PASS


def test_square_matrix_diagonal_na_is_not_a_fault():
    name = "pairwise_device_to_device_write_sm"
    matrix = (f"Running {name}\n\t0\t1\t2\t3\t\n0\tN/A\t750.00\t751.00\t749.00\t\n1\t750.00\tN/A\t750.00\t750.00\t\n"
              f"2\t750.00\t750.00\tN/A\t750.00\t\n3\t750.00\t750.00\t750.00\tN/A\t\n\nMin {name} 749.00 GB/s\n"
              f"Avg {name} 750.00 GB/s\nMax {name} 751.00 GB/s\nTotal {name} 9000.00 GB/s\n\n"
              f"ExecutionTime {name} 9.1 s\nDone {name}\n")
    run = parse_nvloom(HEADER + matrix)
    assert len(run.testcases[0].cells) == 16
    assert judge_nvloom(run, 0, 4, "d").verdict is Verdict.PASS


# --- nvloom's real row labels (cli/testcases.cpp bisect_pattern: "i->peer", peer = (i + N/2) mod N) -------------

def real_bisect(values, name="bisect_device_to_device_write_sm"):
    """The bisect matrix as nvloom 1.3 prints it: rows labelled ``i->peer``."""
    n = len(values)
    rows = "".join(f"{i}->{(i + n // 2) % n}\t{v}\t\n" for i, v in enumerate(values))
    return f"Running {name}\n\t0\t\n{rows}\nMin {name} 450.00 GB/s\n\nExecutionTime {name} 2.87 s\nDone {name}\n\n"


def gpu_to_rack(values, name="gpu_to_rack_device_to_device_unidir_write_sm"):
    """gpu_to_rack as nvloom 1.3 prints it without --richOutput: one column per rack GUID, rows the ranks."""
    rows = "".join(f"{i}\t{v}\t\n" for i, v in enumerate(values))
    return f"Running {name}\n\t1a2b\t\n{rows}\nMin {name} 450.00 GB/s\n\nExecutionTime {name} 9.1 s\nDone {name}\n\n"


# GPU 0 of tray01 is slow: it writes slowly to tray02 GPU 0 (0->2), and tray02 GPU 0 writes slowly back (2->0).
WEAK = real_bisect(["450.00", "750.00", "450.00", "750.00"])


def test_bisect_labels_name_a_pair_and_a_pair_is_never_blamed_unretested():
    run = parse_nvloom(HEADER + WEAK)
    assert [c.row for c in run.testcases[0].cells] == ["0->2", "1->3", "2->0", "3->1"]
    verdict = judge_nvloom(run, 0, 4, "rack rack1")
    # Without a re-test neither end of the weak path is named: both are placed on their trays, not localised.
    assert verdict.verdict is Verdict.FAIL and verdict.suspects == () and verdict.remediation is Remediation.INVESTIGATE
    assert sorted(u[:2] for u in verdict.unresolved) == [("tray01.example", 0), ("tray02.example", 0)]
    assert "not re-tested" in verdict.unresolved[0][2]


def test_the_localising_retest_names_the_slow_gpu_and_clears_its_partner():
    run = parse_nvloom(HEADER + WEAK)
    assert needs_localising(run)
    retest = parse_nvloom(HEADER + gpu_to_rack(["450.00", "750.00", "749.00", "750.00"]))
    verdict = judge_nvloom(run, 0, 4, "rack rack1", retest=(retest, 0))
    assert verdict.verdict is Verdict.FAIL and verdict.remediation is Remediation.ISOLATE
    assert [s[:3] for s in verdict.suspects] == [("tray01.example", 0, 450.0)] and verdict.unresolved == ()
    assert "with tray02.example GPU 0" in verdict.suspects[0][3]


def test_a_retest_that_clears_both_or_failed_leaves_the_pair_unresolved():
    run = parse_nvloom(HEADER + WEAK)
    clean = parse_nvloom(HEADER + gpu_to_rack(["750.00", "750.00", "749.00", "750.00"]))
    cleared = judge_nvloom(run, 0, 4, "d", retest=(clean, 0))
    assert cleared.suspects == () and len(cleared.unresolved) == 2
    assert "found neither slow" in cleared.unresolved[0][2]
    failed = judge_nvloom(run, 0, 4, "d", retest=(parse_nvloom(HEADER), 1))
    assert failed.suspects == () and "printed no gpu_to_rack" in failed.unresolved[0][2]
    stopped = judge_nvloom(run, 0, 4, "d", retest_problem="re-test not run: the --deadline passed")
    assert stopped.suspects == () and "--deadline" in stopped.unresolved[0][2]


def test_a_run_with_gpu_to_rack_already_localises_itself_and_healthy_bisect_needs_no_retest():
    run = parse_nvloom(HEADER + WEAK + gpu_to_rack(["450.00", "750.00", "749.00", "750.00"]))
    assert not needs_localising(run)
    assert [s[:2] for s in judge_nvloom(run, 0, 4, "d").suspects] == [("tray01.example", 0)]
    healthy = parse_nvloom(HEADER + real_bisect(["750.00", "749.00", "750.00", "749.50"]))
    assert not needs_localising(healthy) and judge_nvloom(healthy, 0, 4, "d").verdict is Verdict.PASS


def test_row_labels():
    assert row_ranks("0->36") == (0, 36) and row_ranks("7") == (7,) and row_ranks("1a2b3c") == ()
