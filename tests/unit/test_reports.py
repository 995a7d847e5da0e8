from __future__ import annotations

import xml.etree.ElementTree as ET
from html.parser import HTMLParser

from nvdeploy.report.html import render_html, report_script, script_hash
from nvdeploy.report.junit import render_junit
from nvdeploy.results import ErrorReason, Finding, NodeResult, Remediation, RunResult, Verdict

PAYLOADS = ['<script>alert(1)</script>', '"><img src=x onerror=alert(1)>', "javascript:alert(1)", "\x1b[31mred\x00"]


def hostile_run() -> RunResult:
    findings = tuple(Finding("kmsg.xid", Verdict.FAIL, f"Xid 79: {p}", node="gpu01", observed=p, expected=p,
                             remediation=Remediation.ISOLATE, evidence="evidence/gpu01/kmsg.out") for p in PAYLOADS)
    nodes = (NodeResult("gpu01", findings, address="10.0.0.1", profile="h100-sxm-8x@1"),
             NodeResult("gpu02", (Finding("gpu.count", Verdict.PASS, "8 GPUs", node="gpu02"),)),
             NodeResult("gpu03", (Finding("system.reachable", Verdict.ERROR, "connect timed out", node="gpu03",
                                          reason=ErrorReason.UNREACHABLE),)),
             NodeResult("gpu04", (Finding("system.sudo", Verdict.SKIP, "not requested", node="gpu04"),)))
    return RunResult("r1", "<b>cluster</b>", "validate", nodes, user="ops")


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.script_text: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        if tag == "script":
            self.scripts.append(dict(attrs))
            self.script_text.append("")
            self._in_script = True
        self.attrs.extend(attrs)

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.script_text[-1] += data


def test_html_escapes_everything_from_nodes():
    html = render_html(hostile_run()).decode()
    parser = _Collector()
    parser.feed(html)
    # Exactly two scripts, both ours: the data block (JSON, never executed) and the constant script whose hash is
    # the only one the CSP allows.
    assert [s.get("type") for s in parser.scripts] == ["application/json", None]
    assert parser.script_text[1] == report_script()
    csp = next(v for k, v in parser.attrs if k == "content") or ""  # the first content= is the CSP meta tag
    assert csp.startswith("default-src 'none';")
    assert f"script-src {script_hash(report_script())};" in csp
    assert "unsafe" not in csp.split("script-src", 1)[1].split(";", 1)[0]
    assert not any(name.startswith("on") for name, _ in parser.attrs)
    assert not any((value or "").startswith("javascript:") for _, value in parser.attrs)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    assert "http://" not in html and "https://" not in html


def test_html_states_the_verdict_first():
    html = render_html(hostile_run()).decode()
    body = html[html.index("<body>"):]
    assert body.index("NOT READY") < body.index("Nodes x checks")
    assert 'href="evidence/gpu01/kmsg.out"' in html


def test_junit_maps_verdicts():
    root = ET.fromstring(render_junit(hostile_run()))
    cases = {(c.get("classname"), c.get("name")): c for c in root.iter("testcase")}
    assert cases[("<b>cluster</b>.gpu01", "kmsg.xid")].find("failure") is not None
    assert cases[("<b>cluster</b>.gpu03", "system.reachable")].find("error").get("type") == "unreachable"
    assert cases[("<b>cluster</b>.gpu04", "system.sudo")].find("skipped") is not None
    assert cases[("<b>cluster</b>.gpu02", "gpu.count")].find("failure") is None
    assert "\x00" not in render_junit(hostile_run()).decode()


def test_skip_only_and_pass_nodes_do_not_fail_the_cluster():
    run = hostile_run()
    assert run.verdict.value == "NOT_READY"
    assert run.nodes[3].verdict is Verdict.SKIP
    assert Verdict.worst([Verdict.PASS, Verdict.SKIP]) is Verdict.PASS
    assert Verdict.worst([]) is Verdict.ERROR
