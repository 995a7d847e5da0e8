"""dcgmi mndiag --json parsed and judged. No public capture of a real run exists: the documents below are laid out
from DCGM 4.6.0's dcgmi/MnDiag.cpp (HelperJsonBuildOutput and its helpers) and nvvs/include/NvvsJsonStrings.h,
not captured on a machine."""

from __future__ import annotations

import json

from nvdeploy.checks.dcgm_mndiag import judge_mndiag, mndiag_absent
from nvdeploy.parsers.dcgm_mndiag import parse_mndiag
from nvdeploy.results import ErrorReason, Remediation, Verdict


def document(statuses=("Pass", "Pass"), test_status="Pass", warnings=None, runtime_error=None, hosts=2):
    out = {"DCGM Diagnostic": "DCGM Multi-Node Diagnostic", "metadata": {"num_hosts": hosts, "num_entities": 2}}
    if runtime_error is None:
        out["hosts"] = [{"host_id": i, "hostname": f"tray{i + 1:02d}", "dcgm_version": "4.6.0",
                         "driver_version": "580.173.02", "num_entities": 1,
                         "entities": [{"entity_group_id": 1, "entity_group": "GPU", "entity_id": 0,
                                       "device_id": "2941"}]} for i in range(hosts)]
    results = []
    for host_id, status in enumerate(statuses):
        result = {"host_id": host_id, "entity_group_id": 1, "entity_group": "GPU", "entity_id": 0, "status": status}
        if status == "Fail" and warnings:
            result["warnings"] = [{"warning": w, "error_id": 95, "error_category": 1, "error_severity": 2}
                                  for w in warnings]
        results.append(result)
    test = {"name": "mnubergemm", "status": test_status, "test_summary": {"status": test_status},
            "results": results}
    if test_status != "Pass" and not warnings:
        test["mpi_error"] = {"warning": "Error: mpirun exited with 1", "error_category": "MPI"}
        out["global_errors"] = [{"warning": "Error: mpirun exited with 1", "error_category": "MPI"}]
    out["test_categories"] = [{"category": "Multi-Node Tests", "tests": [test]}]
    if runtime_error is not None:
        out["runtime_error"] = runtime_error
    return json.dumps(out, indent=3)


def test_pass():
    run = parse_mndiag(document())
    assert run.json_ok and run.num_hosts == 2 and run.hosts == ((0, "tray01"), (1, "tray02"))
    assert run.tests[0].name == "mnubergemm" and len(run.tests[0].results) == 2
    assert judge_mndiag(run, 0, 2, "rack rack1").verdict is Verdict.PASS


def test_fail_names_the_gpu_and_message():
    run = parse_mndiag(document(("Pass", "Fail"), "Fail", ["GPU 0 reported an uncorrectable error"]))
    verdict = judge_mndiag(run, 1, 2, "rack rack1")
    assert verdict.verdict is Verdict.FAIL and verdict.remediation is Remediation.ISOLATE
    assert verdict.suspects == (("tray02", 0, None, "GPU 0 reported an uncorrectable error"),)
    assert "tray02 GPU 0: GPU 0 reported an uncorrectable error" in verdict.summary


def test_mpi_error_and_runtime_error_are_not_pass():
    mpi = judge_mndiag(parse_mndiag(document(test_status="Fail")), 1, 2, "d")
    assert mpi.verdict is Verdict.FAIL and "mpirun exited with 1" in mpi.summary
    runtime = document(statuses=(), test_status="Not Run", hosts=2,
                       runtime_error="Error: Unable to complete multi-node diagnostic on host tray01. Return: (x) -18")
    verdict = judge_mndiag(parse_mndiag(runtime), 238, 2, "d")
    assert verdict.verdict is Verdict.ERROR and verdict.reason is ErrorReason.INCOMPLETE
    short = judge_mndiag(parse_mndiag(document(("Pass",), hosts=1)), 0, 2, "d")
    assert short.verdict is Verdict.ERROR and "1 hosts in the result, 2 asked" in short.summary


def test_absent_and_garbage():
    assert mndiag_absent(parse_mndiag(""), 127, "bash: dcgmi: command not found")
    assert mndiag_absent(parse_mndiag(""), 255, "dcgmi: unknown command 'mndiag'")
    assert not mndiag_absent(parse_mndiag(document()), 0, document())
    for text in ("", "{", "[1, 2]", '{"test_categories": [{"tests": [{"results": [{"host_id": "x"}]}]}]}',
                 "Error: Unable to connect\n" + document()[:40]):
        run = parse_mndiag(text)
        assert judge_mndiag(run, 0, 2, "d").verdict is not Verdict.PASS
