"""The node spool (record.py NodeSpool): a validate run's nodes kept on disk, read back exactly, reports unchanged."""

from __future__ import annotations

import re
from dataclasses import replace

from nvdeploy.report import render_json
from nvdeploy.report.html import render_html
from nvdeploy.report.junit import render_junit
from nvdeploy.report.text import summary_lines
from nvdeploy.results import (
    ErrorReason,
    EvidenceRecord,
    Finding,
    NodeResult,
    Remediation,
    RunResult,
    Verdict,
)
from nvdeploy.runner.record import NodeSpool


def _node(name: str, verdict: Verdict = Verdict.PASS, driver: str = "550.90.07") -> NodeResult:
    findings = (
        Finding("system.reachable", Verdict.PASS, "connected", node=name, observed=0.01, unit="s"),
        Finding("gpu.count", verdict, "8 of 8 GPUs" if verdict is Verdict.PASS else "7 of 8 GPUs", node=name,
                observed=(7, 8), expected=8, remediation=Remediation.NONE if verdict is Verdict.PASS
                else Remediation.ISOLATE, reason=ErrorReason.TIMEOUT if verdict is Verdict.ERROR else None),
        Finding("gpu.model", Verdict.PASS, "H100", node=name, gpu=0, observed={"name": "H100"}),
    )
    evidence = (EvidenceRecord("smi", "nvidia-smi -q", f"evidence/{name}/smi.out", 0, 10, False, "ab", 0.1),)
    return NodeResult(name, findings, address=f"10.0.0.{len(name)}", profile="h100-sxm-8x@1", connection="sim",
                      duration_s=1.25, evidence=evidence,
                      facts={"driver_version": driver, "gpu_count": 8, "gpu_model": "H100", "cuda_version": "12.4"})


def test_nodes_come_back_exactly_tuples_and_enums_included(tmp_path):
    spool = NodeSpool(tmp_path)
    nodes = [_node("a"), _node("b", Verdict.FAIL), _node("c", Verdict.ERROR)]
    for node in nodes:
        spool.add(node)
    read = spool.nodes(["c", "a", "b"])
    assert [n.name for n in read] == ["c", "a", "b"]
    assert list(read) == [nodes[2], nodes[0], nodes[1]]
    assert read[1].findings[1].observed == (7, 8)  # a tuple stays a tuple (JSON would give a list)
    assert [b.verdict for b in read.briefs] == [Verdict.ERROR, Verdict.PASS, Verdict.FAIL]
    assert not [p for p in tmp_path.iterdir()]  # the spool file is anonymous: nothing left in the run folder


def test_a_node_added_again_replaces_the_first_and_briefs_are_shared(tmp_path):
    spool = NodeSpool(tmp_path)
    spool.add(_node("a"))
    spool.add(_node("b"))
    amended = _node("a").with_findings([Finding("driver.consistency", Verdict.FAIL, "differs", node="a")])
    spool.add(amended)
    assert spool.get("a") == amended
    assert spool.brief("a").verdict is Verdict.FAIL
    assert [n.name for n in spool.nodes()] == ["a", "b"]
    # Equal fact subsets of different nodes are one object: a brief costs a small tuple per node.
    assert spool.brief("a").facts is spool.brief("b").facts


def test_reports_from_spooled_nodes_are_those_of_nodes_in_memory(tmp_path):
    nodes = [_node(f"n{i:02d}", Verdict.FAIL if i == 3 else Verdict.ERROR if i == 5 else Verdict.PASS,
                   driver="535.1" if i == 7 else "550.90.07") for i in range(12)]
    spool = NodeSpool(tmp_path)
    for node in reversed(nodes):
        spool.add(node)
    cluster = (Finding("driver.consistency", Verdict.FAIL, "2 driver versions"),)
    memory = RunResult("r1", "c", "validate", tuple(nodes), cluster, started_at="2026-01-01T00:00:00+00:00")
    spooled = replace(memory, nodes=spool.nodes([n.name for n in nodes]))
    assert spooled.verdict is memory.verdict and spooled.counts() == memory.counts()
    assert render_json(spooled) == render_json(memory)
    assert render_junit(spooled) == render_junit(memory)
    # The page names the minute it was rendered: the two renders may straddle a minute.
    def strip(page: bytes) -> bytes:
        return re.sub(rb"\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC", b"T", page)

    assert b"n03" in render_html(spooled)
    assert strip(render_html(spooled)) == strip(render_html(memory))
    assert summary_lines(spooled) == summary_lines(memory)
