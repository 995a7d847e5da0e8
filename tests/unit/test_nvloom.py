"""nvloom_cli's output parsed and judged. No public capture of a real nvloom run exists: the texts below are laid
out from nvloom 1.3's format strings (github.com/NVIDIA/nvloom commit 2e7b742: cli/nvloom_cli.cpp, cli/util.cpp,
cli/util.h, cli/testcases.h), not captured on a machine."""

from __future__ import annotations

from nvdeploy.checks.nvloom import judge_nvloom, tool_absent
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
