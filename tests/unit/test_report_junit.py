"""JUnit XML checked against the rules of the schema Jenkins' JUnit plugin accepts (junit-10.xsd) and against
what GitLab reads (classname + name unique per test case)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from nvdeploy.report.junit import render_junit
from nvdeploy.results import ErrorReason, Finding, NodeResult, Remediation, RunResult, Verdict

# element -> (required attributes, allowed attributes, allowed children in schema order)
SCHEMA = {
    "testsuites": ({"name"} & set(), {"name", "time", "tests", "failures", "disabled", "errors"}, ["testsuite"]),
    "testsuite": ({"name", "tests"}, {"name", "tests", "failures", "errors", "group", "time", "disabled", "skipped",
                                      "timestamp", "hostname", "id", "package", "file", "log", "url", "version"},
                  ["properties", "testcase", "system-out", "system-err"]),
    "testcase": ({"name"}, {"name", "assertions", "time", "classname", "status", "group", "file", "line"},
                 ["skipped", "error", "failure", "system-out", "system-err"]),
    "failure": (set(), {"message", "type"}, []),
    "error": (set(), {"message", "type"}, []),
    "skipped": (set(), {"message"}, []),
    "system-out": (set(), set(), []),
}


def check_schema(element: ET.Element) -> None:
    required, allowed, children = SCHEMA[element.tag]
    assert required <= set(element.attrib), (element.tag, element.attrib)
    assert set(element.attrib) <= allowed, (element.tag, set(element.attrib) - allowed)
    order = [children.index(child.tag) for child in element]
    assert order == sorted(order), (element.tag, [c.tag for c in element])
    for name in ("tests", "failures", "errors", "skipped", "disabled"):
        if name in element.attrib:
            assert element.attrib[name].isdigit()
    if "time" in element.attrib:
        float(element.attrib["time"])
    if element.tag == "testcase":
        assert len([c for c in element if c.tag in ("skipped", "error", "failure")]) <= 1
    for child in element:
        check_schema(child)


def fleet() -> RunResult:
    nodes = (
        NodeResult("gpu01.dc1.example.com", (
            Finding("memory.ecc_errors", Verdict.FAIL, "GPU3: 2 uncorrectable ECC errors", node="gpu01", gpu=3,
                    observed=2, expected=0, remediation=Remediation.RESET_GPU, evidence="evidence/gpu01/smi.out"),
            Finding("memory.ecc_errors", Verdict.PASS, "GPU2: no ECC errors", node="gpu01", gpu=2),
            Finding("kmsg.xid", Verdict.WARN, "Xid 13 (application fault)", node="gpu01"),
        ), address="10.0.0.1", duration_s=3.25),
        NodeResult("gpu02", (Finding("system.reachable", Verdict.ERROR, "connect timed out", node="gpu02",
                                     reason=ErrorReason.UNREACHABLE),)),
        NodeResult("gpu03", (Finding("memory.retired_pages", Verdict.SKIP, "not reported", node="gpu03"),
                             Finding("gpu.count", Verdict.PASS, "8 GPUs", node="gpu03"))),
    )
    return RunResult("r1", "dc1", "validate", nodes, started_at="2026-11-30T10:00:00+01:00", duration_s=12.5,
                     cluster_findings=(Finding("driver.consistency", Verdict.FAIL, "2 driver versions",
                                               remediation=Remediation.REINSTALL),))


def test_junit_follows_the_jenkins_schema_and_counts_add_up():
    root = ET.fromstring(render_junit(fleet()))
    check_schema(root)
    suites = root.findall("testsuite")
    assert sum(int(s.get("tests")) for s in suites) == int(root.get("tests")) == 6
    assert int(root.get("failures")) == 2 and int(root.get("errors")) == 1
    for suite in suites:
        cases = suite.findall("testcase")
        assert int(suite.get("tests")) == len(cases)
        assert int(suite.get("failures")) == sum(1 for c in cases if c.find("failure") is not None)
        assert int(suite.get("skipped")) == sum(1 for c in cases if c.find("skipped") is not None)
    assert suites[0].get("timestamp") == "2026-11-30T09:00:00"  # UTC, no zone: the schema's pattern
    assert suites[0].get("hostname") == "10.0.0.1" and suites[0].get("time") == "3.250"


def test_one_case_per_node_and_check_with_summary_and_remediation():
    root = ET.fromstring(render_junit(fleet()))
    cases = {(c.get("classname"), c.get("name")): c for c in root.iter("testcase")}
    assert len(cases) == len(list(root.iter("testcase")))  # GitLab keeps only the first of duplicate names
    ecc = cases[("dc1.gpu01_dc1_example_com", "memory.ecc_errors")]  # dots would split Jenkins' package/class
    failure = ecc.find("failure")
    assert failure.get("message") == "GPU3: 2 uncorrectable ECC errors" and failure.get("type") == "RESET_GPU"
    assert "observed: 2" in failure.text and "expected: 0" in failure.text
    assert "action: RESET_GPU (drain, then reset the GPU" in failure.text
    assert "evidence: evidence/gpu01/smi.out" in failure.text and "[PASS] GPU2" in failure.text
    assert cases[("dc1.gpu02", "system.reachable")].find("error").get("type") == "unreachable"
    assert cases[("dc1.gpu03", "memory.retired_pages")].find("skipped") is not None
    warn = cases[("dc1.gpu01_dc1_example_com", "kmsg.xid")]
    assert warn.find("failure") is None and "[WARN] Xid 13" in warn.find("system-out").text
    assert cases[("dc1.cluster", "driver.consistency")].find("failure") is not None


def test_the_text_writer_lays_out_and_escapes_as_elementtree_would():
    """The suites are written as text (ElementTree was half the reports' time at fleet scale); what
    ElementTree itself writes for the parsed document, indented as before, is the same bytes."""
    hostile = NodeResult('n"<&>\t\n', (
        Finding("kmsg.xid", Verdict.FAIL, 'Xid 79 <a href="x">&amp;</a>\tGPU\nfell off', node="n", gpu=0,
                observed="<b>", expected="&", remediation=Remediation.RESET_GPU),
        Finding("gpu.count", Verdict.ERROR, "", node="n", reason=ErrorReason.UNPARSEABLE),
        Finding("system.sudo", Verdict.PASS, "", node="n"),
        Finding("gpu.model", Verdict.SKIP, "skipped: 'quoted' \"double\"", node="n"),
    ), address="10.0.0.9 <x>")
    run = fleet()
    run = RunResult(run.run_id, 'dc"1&', run.phase, (*run.nodes, hostile, NodeResult("empty", ())),
                    started_at=run.started_at, duration_s=run.duration_s, cluster_findings=run.cluster_findings)
    text = render_junit(run)
    root = ET.fromstring(text)
    check_schema(root)
    ET.indent(root, space=" ")
    assert text == b"<?xml version='1.0' encoding='utf-8'?>\n" + ET.tostring(root, encoding="utf-8") + b"\n"
    assert root.find("testsuite[@hostname='10.0.0.9 <x>']/testcase[@name='kmsg.xid']/failure") is not None
