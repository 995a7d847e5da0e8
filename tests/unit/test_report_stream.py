"""Streaming report writers and explicit serialisation give what the whole-document forms gave, byte for byte."""

from __future__ import annotations

import collections
import dataclasses
import io
import json
import xml.etree.ElementTree as ET

import pytest

from nvdeploy.files import OutputError, atomic_file
from nvdeploy.report import render_json, write_json, write_reports
from nvdeploy.report.junit import render_junit
from nvdeploy.results import (
    ErrorReason,
    EvidenceRecord,
    Finding,
    NodeResult,
    Remediation,
    RunResult,
    Verdict,
)

Pair = collections.namedtuple("Pair", "a b")


@dataclasses.dataclass(frozen=True)
class Inner:
    x: int
    y: tuple[int, ...]


def _finding(node: str, verdict: Verdict, observed: object = None) -> Finding:
    return Finding("memory.ecc_errors", verdict, 'summary with "quotes"\nand a newline', node=node,
                   observed=observed, expected={"max": [0, Pair(1, 2)]}, unit="", gpu=3,
                   reason=ErrorReason.TIMEOUT if verdict is Verdict.ERROR else None,
                   remediation=Remediation.RESET_GPU, evidence="evidence/x/y.out", profile="h100@1")


def _run(nodes: int, phases: bool = False) -> RunResult:
    record = EvidenceRecord("nvidia_smi_xml", "nvidia-smi -q -x", "evidence/n/nvidia_smi_xml.out", 0, 10, False,
                            "ab" * 32, 0.25, None)
    result = tuple(NodeResult(f"n{i:03d}", (_finding(f"n{i:03d}", Verdict.FAIL if i % 3 else Verdict.ERROR,
                                                     observed=[i, Inner(i, (1, 2))]),
                                            Finding("gpu.count", Verdict.PASS, "8 GPUs", node=f"n{i:03d}")),
                              evidence=(record,), facts={"driver_version": "550.90.07", "list": [1, 2]})
                   for i in range(nodes))
    return RunResult("r1", "c", "install" if phases else "validate", result,
                     cluster_findings=(_finding("", Verdict.WARN),), started_at="2026-12-01T06:00:00+00:00",
                     phases=({"phase": "install", "steps": [{"a": 1}]},) if phases else ())


@pytest.mark.parametrize("nodes,phases", [(0, False), (1, False), (7, True)])
def test_streamed_results_json_is_byte_identical_to_one_dump(nodes, phases):
    run = _run(nodes, phases)
    whole = (json.dumps(run.to_dict(), indent=2, default=str) + "\n").encode("utf-8")
    assert render_json(run) == whole
    reread = RunResult.from_dict(json.loads(whole))  # what nvdeploy report/diff/history read back
    assert json.loads(render_json(reread)) == json.loads(whole)


def test_explicit_to_dict_matches_asdict_for_nested_values():
    finding = _finding("n1", Verdict.ERROR, observed={"a": [Inner(1, (2,)), Pair(3, [4])]})
    expected = dataclasses.asdict(finding)
    expected.update(verdict="ERROR", reason="timeout", remediation="RESET_GPU")
    # code and waiver are written only where set: on every finding they would grow a fleet's results.json.
    assert (expected.pop("code"), expected.pop("waiver")) == (None, None)
    assert finding.to_dict() == expected
    assert list(finding.to_dict()) == list(expected)  # key order too: results.json diffs stay quiet
    record = _run(1).nodes[0].evidence[0]
    assert record.to_dict() == dataclasses.asdict(record)


def test_streamed_junit_counts_and_structure():
    run = _run(6)
    root = ET.fromstring(render_junit(run))
    suites = root.findall("testsuite")
    assert len(suites) == 7  # six nodes and the cluster
    assert root.get("tests") == str(sum(int(s.get("tests")) for s in suites)) == "13"
    assert root.get("failures") == str(sum(int(s.get("failures")) for s in suites)) == "4"
    assert root.get("errors") == str(sum(int(s.get("errors")) for s in suites)) == "2"
    assert suites[0].get("timestamp") == "2026-12-01T06:00:00"


def test_write_reports_streams_every_file(tmp_path):
    run = _run(5)
    paths = write_reports(run, tmp_path)
    assert json.loads(paths["json"].read_text())["counts"]["FAIL"] == 3
    ET.fromstring(paths["junit"].read_bytes())
    assert "n004" in paths["html"].read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left behind


def test_atomic_file_leaves_nothing_when_the_writer_fails(tmp_path):
    target = tmp_path / "results.json"
    with pytest.raises(RuntimeError):
        with atomic_file(target) as handle:
            handle.write(b"half")
            raise RuntimeError("writer crashed")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(OutputError):
        with atomic_file(tmp_path / "missing" / "x.json") as handle:
            handle.write(b"x")


def test_write_json_into_a_plain_buffer():
    buffer = io.BytesIO()
    write_json(_run(2), buffer)
    assert json.loads(buffer.getvalue())["nodes"][1]["name"] == "n001"
