"""JUnit XML: one test case per node x check; FAIL as failure, ERROR as error, SKIP as skipped."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict

from nvdeploy.results import Finding, RunResult, Verdict

_ILLEGAL = {c: None for c in range(32) if c not in (9, 10, 13)}


def _clean(text: str) -> str:
    """XML 1.0 cannot carry control characters; a node's output may contain them."""
    return str(text).translate(_ILLEGAL)


def _case(suite: ET.Element, classname: str, name: str, findings: list[Finding]) -> dict[str, int]:
    case = ET.SubElement(suite, "testcase", classname=_clean(classname), name=_clean(name), time="0")
    worst = Verdict.worst(f.verdict for f in findings)
    text = "\n".join(f"[{f.verdict.value}] {f.summary}" + (f" (observed {f.observed}, expected {f.expected})"
                                                          if f.observed is not None or f.expected is not None else "")
                     + (f" -> {f.remediation.value}" if f.remediation.value != "NONE" else "")
                     + (f" evidence: {f.evidence}" if f.evidence else "") for f in findings)
    first = next((f for f in findings if f.verdict is worst), findings[0])
    counts = {"failures": 0, "errors": 0, "skipped": 0}
    if worst is Verdict.FAIL:
        ET.SubElement(case, "failure", message=_clean(first.summary), type=first.remediation.value).text = _clean(text)
        counts["failures"] = 1
    elif worst is Verdict.ERROR:
        ET.SubElement(case, "error", message=_clean(first.summary),
                      type=first.reason.value if first.reason else "error").text = _clean(text)
        counts["errors"] = 1
    elif worst is Verdict.SKIP:
        ET.SubElement(case, "skipped", message=_clean(first.summary))
        counts["skipped"] = 1
    else:
        ET.SubElement(case, "system-out").text = _clean(text)
    return counts


def render_junit(run: RunResult) -> bytes:
    root = ET.Element("testsuites", name=_clean(f"nvdeploy {run.phase} {run.cluster}"))
    suites = [(node.name, node.findings) for node in run.nodes]
    if run.cluster_findings:
        suites.append(("cluster", run.cluster_findings))
    for suite_name, findings in suites:
        suite = ET.SubElement(root, "testsuite", name=_clean(f"{run.cluster}.{suite_name}"))
        by_check: dict[str, list[Finding]] = defaultdict(list)
        for finding in findings:
            by_check[finding.check].append(finding)
        totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        for check, grouped in by_check.items():
            counts = _case(suite, f"{run.cluster}.{suite_name}", check, grouped)
            totals["tests"] += 1
            for key, value in counts.items():
                totals[key] += value
        for key, value in totals.items():
            suite.set(key, str(value))
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"
