"""The HTML report in a real browser: headless Chromium driven over the DevTools protocol on a pipe.

No extra dependency: Chromium is started with ``--remote-debugging-pipe`` (it reads commands on fd 3 and
writes replies on fd 4, NUL-separated JSON). Skipped only when Chromium is missing on a developer's machine; in
CI (NVDEPLOY_REQUIRE_SSHD=1, set by .ci/run, which installs Debian's chromium) a missing Chromium fails.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Optional
from urllib.parse import unquote, urlparse

import pytest
from click.testing import CliRunner

from nvdeploy.cli.app import cli
from nvdeploy.report import write_reports
from nvdeploy.results import EvidenceRecord, Finding, NodeResult, Remediation, RunResult, Verdict

ROOT = Path(__file__).resolve().parents[2]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
         "--disable-default-apps", "--mute-audio", "--hide-scrollbars", "--force-color-profile=srgb"]

pytestmark = pytest.mark.timeout(240)


def chromium_path() -> Optional[str]:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


class BrowserError(RuntimeError):
    pass


class Browser:
    """One headless Chromium with a fresh, empty profile; DevTools protocol over a pipe."""

    def __init__(self, executable: str, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="nvdeploy-chromium-")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def child_fds() -> None:  # in the child: the pipe ends on fds 3 (commands) and 4 (replies)
            commands = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10)
            replies = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)
            os.dup2(commands, 3)
            os.dup2(replies, 4)

        self.proc = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-pipe", "about:blank"],
            pass_fds=(3, 4), preexec_fn=child_fds, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.version = self.send("Browser.getVersion")["product"]

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("timed out waiting for Chromium")
            ready, _, _ = select.select([self._from_chrome], [], [], left)
            if ready:
                chunk = os.read(self._from_chrome, 1 << 20)
                if not chunk:
                    raise BrowserError("Chromium closed the DevTools pipe")
                self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: Optional[dict[str, Any]] = None, session: Optional[str] = None) -> Any:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str, session: Optional[str]) -> dict[str, Any]:
        """The next ``method`` event of ``session`` (None: of the browser itself)."""
        deadline = time.monotonic() + self.timeout
        while True:
            for i, event in enumerate(self.events):
                if event.get("method") == method and event.get("sessionId") == session:
                    return self.events.pop(i)
            self.events.append(self._read(deadline))

    def open(self, path: Path, width: int = 1280, height: int = 900) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        page.send("Page.enable")
        page.send("Runtime.enable")
        page.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        page.send("Page.navigate", {"url": path.resolve().as_uri()})
        self.wait_event("Page.loadEventFired", session)
        return page

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (BrowserError, OSError):
            pass
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(15)
        for fd in (self._to_chrome, self._from_chrome):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    def send(self, method: str, params: Optional[dict[str, Any]] = None) -> Any:
        return self.browser.send(method, params, self.session)

    def eval(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def click(self, selector: str) -> None:
        """A real mouse click (press and release) at the middle of the element."""
        box = self.eval(f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
                        " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
                        " return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": box[0], "y": box[1], "button": "left",
                                                   "clickCount": 1})

    def type(self, selector: str, text: str) -> None:
        self.click(selector)
        self.send("Input.insertText", {"text": text})

    def visible(self, selector: str) -> list[str]:
        """Text of the elements matching ``selector`` that are rendered."""
        return self.eval(f"[...document.querySelectorAll({json.dumps(selector)})]"
                         ".filter(e => e.getClientRects().length > 0).map(e => e.innerText.trim())")

    def screenshot(self, path: Path) -> Path:
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", {"format": "png"})["data"]))
        return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = chromium_path()
    if executable is None:
        if os.environ.get("NVDEPLOY_REQUIRE_SSHD"):
            pytest.fail("chromium is required in CI but missing (.ci/run installs it with apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    instance = Browser(executable)
    yield instance
    instance.close()


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo")
    result = CliRunner().invoke(cli, ["validate", "-i", str(ROOT / "inventories" / "demo.yaml"), "--out", str(out),
                                      "-q"])
    assert result.exit_code == 1, result.output
    return next((out / "demo").iterdir()) / "report.html"


def test_first_screen_shows_the_verdict_and_counts(browser, demo_report, tmp_path_factory):
    page = browser.open(demo_report)
    first = page.eval("""(() => {
        const seen = id => { const e = document.getElementById(id); const r = e.getBoundingClientRect();
            return r.width > 0 && r.top >= 0 && r.bottom <= window.innerHeight ? e.innerText.trim() : null; };
        return {verdict: seen('verdict'), why: seen('why'), fail: seen('count-FAIL'), warn: seen('count-WARN'),
                pass: seen('count-PASS'), total: seen('count-total'),
                toolbar: !document.getElementById('toolbar').hidden, meta: document.querySelector('dl.meta').innerText};
    })()""")
    assert first["verdict"] == "NOT READY"
    assert first["why"].startswith("5 of 16 nodes failed")
    assert (first["fail"], first["warn"], first["pass"], first["total"]) == ("5\nFAIL", "1\nWARN", "10\nPASS",
                                                                             "16\nNODES")
    assert first["toolbar"], "the report's script did not run (CSP hash mismatch?)"
    assert "h100-sxm-8x@" in first["meta"] and "quick" in first["meta"]
    shot = page.screenshot(tmp_path_factory.mktemp("screenshots") / "report-first-screen.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    print(f"\nscreenshot of the first screen: {shot}")


def test_filter_hides_passing_nodes_and_search_finds_nodes_inside_ranges(browser, demo_report):
    page = browser.open(demo_report)
    assert len(page.visible("#nodes-table tbody tr")) == 16
    assert "PASS" in [row.split("\t")[2] for row in page.visible("#matrix-table tbody tr")]
    page.click("#only-action")
    assert page.eval("document.getElementById('only-action').checked")
    rows = page.visible("#nodes-table tbody tr")
    assert len(rows) == 6 and not any("\tPASS\t" in row for row in rows)
    assert {row.split("\t")[2] for row in page.visible("#matrix-table tbody tr")} == {"FAIL", "WARN"}
    assert page.visible("#search-status") == ["10 passing nodes hidden"]
    page.click("#only-action")
    page.type("#search", "gpu005")
    matrix = page.visible("#matrix-table tbody tr")
    assert len(matrix) == 1 and matrix[0].startswith("gpu[001-002,004-005,007-010,012,015] \u2192 gpu005")
    assert page.visible("#nodes-table tbody tr") == [page.visible("#nodes-table tbody tr")[0]]
    assert page.visible("#search-status") == ["1 of 16 nodes match"]


def test_evidence_links_open_files_beside_the_report(browser, demo_report):
    page = browser.open(demo_report)
    links = page.eval("[...document.querySelectorAll('a.evidence-link')].map(a => [a.getAttribute('href'), a.href])")
    assert links
    run_dir = demo_report.parent.resolve()
    for relative, absolute in links:
        assert not relative.startswith(("/", "file:", "javascript:")) and ".." not in relative
        target = Path(unquote(urlparse(absolute).path))
        assert target.is_file(), target
        assert run_dir in target.resolve().parents
    page.click("a.evidence-link")  # a real click opens the file itself
    browser.wait_event("Page.loadEventFired", page.session)
    assert page.eval("location.href") == links[0][1]
    first_line = Path(unquote(urlparse(links[0][1]).path)).read_text().splitlines()[0]
    assert first_line[:60] in page.eval("document.body.innerText")


PAYLOADS = ['<script>document.title="pwned-script"</script>',
            '<img src=x onerror="document.title=\'pwned-img\';document.body.setAttribute(\'data-pwned\',1)">',
            "<svg onload=\"document.body.setAttribute('data-pwned', 2)\">",
            '</script><script>window.pwned = 3</script>',
            '"><iframe srcdoc="<script>parent.pwned=4</script>">']


def test_node_output_carrying_script_or_onerror_never_executes(browser, tmp_path):
    evil = "".join(PAYLOADS)
    (tmp_path / "evidence" / "n1").mkdir(parents=True)
    (tmp_path / "evidence" / "n1" / "kmsg.out").write_text(
        f"[ 1.0] boot\n[ 1234.5] NVRM: Xid (PCI:0000:2a:00): 79, name={evil}, GPU has fallen off the bus\n")
    findings = (Finding("kmsg.xid", Verdict.FAIL, f"Xid 79 x1 on 0000:2a:00: {evil}", node=evil, observed=evil,
                        expected=evil, unit="GB/s", remediation=Remediation.ISOLATE, evidence="evidence/n1/kmsg.out"),
                Finding(f"check{PAYLOADS[1]}", Verdict.FAIL, evil, node=evil, evidence="javascript:alert(1)"),
                Finding("nccl.all_reduce", Verdict.FAIL, evil, node=evil, observed=300.0, expected=">= 452",
                        unit="GB/s"))
    nodes = (NodeResult(evil, findings, address=evil, profile=evil, facts={"driver_version": evil},
                        evidence=(EvidenceRecord("kmsg", evil, "evidence/n1/kmsg.out", 0, 10, False, "", 0.1),)),
             NodeResult("ok1", (Finding("gpu.count", Verdict.PASS, "8 GPUs", node="ok1"),)))
    run = RunResult(evil, evil, "validate", nodes, user=evil, inventory=evil, profiles={evil: evil},
                    cluster_findings=(Finding("driver.consistency", Verdict.FAIL, evil),))
    write_reports(run, tmp_path)
    page = browser.open(tmp_path / "report.html")
    page.type("#search", "<script>")  # the search runs over the names: they stay data
    page.click("#only-action")
    page.eval("window.dispatchEvent(new Event('beforeprint'))")
    state = page.eval("""({title: document.title, pwned: document.body.getAttribute('data-pwned'),
        win: typeof window.pwned, imgs: document.images.length, iframes: document.querySelectorAll('iframe').length,
        scripts: document.scripts.length, text: document.body.innerText})""")
    assert state["title"] == f"NOT READY: {evil} (nvdeploy validate {evil})"  # the payload's text, unchanged
    assert state["pwned"] is None and state["win"] == "undefined"
    assert state["imgs"] == 0 and state["iframes"] == 0 and state["scripts"] == 2
    assert '<script>document.title="pwned-script"</script>' in state["text"]  # shown as text, not run
    assert "name=<script>" in state["text"]  # the evidence excerpt too


def test_two_thousand_node_report_loads_and_filters_quickly(browser, tmp_path):
    nodes = []
    for i in range(1, 2001):
        name = f"gpu{i:04d}"
        findings = [Finding(f"check.{c}", Verdict.PASS, "fine", node=name) for c in range(15)]
        findings.append(Finding("nccl.all_reduce", Verdict.PASS, "busbw", node=name, observed=470.0 + i % 9,
                                expected=">= 452.2", unit="GB/s"))
        if i % 25 == 0:
            findings.append(Finding("memory.ecc_errors", Verdict.FAIL, "2 uncorrectable ECC errors", node=name,
                                    remediation=Remediation.RESET_GPU))
        nodes.append(NodeResult(name, tuple(findings), facts={"driver_version": "550.90.07"}))
    write_reports(RunResult("big", "fleet", "validate", tuple(nodes)), tmp_path)
    assert (tmp_path / "report.html").stat().st_size < 15_000_000
    started = time.monotonic()
    page = browser.open(tmp_path / "report.html")
    load_s = time.monotonic() - started
    timing = page.eval("""(() => { const t = performance.now(); document.getElementById('only-action').click();
        const shown = [...document.querySelectorAll('#nodes-table tbody tr')].filter(r => r.getClientRects().length);
        return [performance.now() - t, shown.length]; })()""")
    print(f"\n2,000-node report: loaded in {load_s:.2f} s, filter applied in {timing[0]:.0f} ms")
    assert load_s < 20 and timing[0] < 2000 and timing[1] == 80


def test_ten_thousand_node_report_is_small_and_every_node_findable(browser, tmp_path):
    nodes = []
    for i in range(1, 10_001):
        name = f"gpu{i:05d}"
        findings = [Finding(f"check.{c}", Verdict.PASS, "fine", node=name) for c in range(15)]
        if i % 100 == 0:
            findings.append(Finding("memory.ecc_errors", Verdict.FAIL, "2 uncorrectable ECC errors", node=name,
                                    remediation=Remediation.RESET_GPU))
        nodes.append(NodeResult(name, tuple(findings), facts={"driver_version": "550.90.07"}))
    write_reports(RunResult("big", "fleet", "validate", tuple(nodes)), tmp_path)
    size = (tmp_path / "report.html").stat().st_size
    assert size < 2_000_000  # passing nodes fold into host ranges; the 100 failing ones keep their rows
    started = time.monotonic()
    page = browser.open(tmp_path / "report.html")
    load_s = time.monotonic() - started
    assert len(page.visible("#nodes-table tbody tr")) == 101  # 100 failing nodes and one folded range
    page.type("#search", "gpu04242")  # a passing node inside the folded range is still found
    shown = page.visible("#nodes-table tbody tr")
    assert len(shown) == 1 and "gpu[00001-00099" in shown[0] and "gpu04242" in shown[0]
    page.eval("document.getElementById('search').value = ''; document.getElementById('search')"
              ".dispatchEvent(new Event('input'))")
    page.click("#only-action")
    assert len(page.visible("#nodes-table tbody tr")) == 100
    print(f"\n10,000-node report: {size / 1e6:.2f} MB, loaded in {load_s:.2f} s")
    assert load_s < 30


def _interrupted_fleet(run_dir: Path) -> RunResult:
    """500 nodes Ctrl-C'd: 194 finished (one FAILed), 64 were running (25 checks cut off each), 242 never started."""
    from nvdeploy.results import ErrorReason

    nodes = []
    for i in range(1, 501):
        name = f"gpu{i:03d}"
        if i <= 194:
            findings = [Finding(f"check.{c}", Verdict.PASS, "fine", node=name) for c in range(25)]
            if i == 3:
                findings.append(Finding("memory.ecc_errors", Verdict.FAIL, "2 uncorrectable ECC errors", node=name,
                                        remediation=Remediation.RESET_GPU))
        elif i <= 258:
            findings = [Finding("system.reachable", Verdict.PASS, "connected", node=name)]
            findings += [Finding(f"check.{c}", Verdict.ERROR, "not evaluated: nvidia-smi result unusable: run "
                                 "interrupted", node=name, reason=ErrorReason.INTERRUPTED) for c in range(25)]
        else:
            findings = [Finding("system.reachable", Verdict.ERROR, "not finished: run interrupted", node=name,
                                reason=ErrorReason.INTERRUPTED)]
        nodes.append(NodeResult(name, tuple(findings)))
    run = RunResult("20261202T020000Z-abc123", "fleet", "validate", tuple(nodes), interrupted=True,
                    inventory="fleet.yaml")
    run_dir.mkdir(parents=True)
    write_reports(run, run_dir)
    return run


def test_interrupted_report_names_not_run_nodes_once_and_the_resume_command_on_the_first_screen(browser, tmp_path):
    run_dir = tmp_path / "reports" / "fleet" / "20261202T020000Z-abc123"
    _interrupted_fleet(run_dir)
    page = browser.open(run_dir / "report.html")
    resume = f"nvdeploy validate --resume {run_dir}"
    first = page.eval("""(() => { const e = document.getElementById('resume'); if (!e) return null;
        const r = e.getBoundingClientRect();
        return {text: e.innerText.trim(), seen: r.width > 0 && r.top >= 0 && r.bottom <= window.innerHeight}; })()""")
    assert first is not None and first["seen"], first
    assert first["text"] == f"gpu[195-500] (306 nodes): not run: the run was interrupted; resume with {resume}"
    # One line per folded range of not-run nodes wherever nodes are listed, not a line (or 25) per node.
    matrix = [row for row in page.visible("#matrix-table tbody tr") if "not run" in row]
    assert len(matrix) == 1 and matrix[0].startswith("gpu[195-500]\t306\tERROR\tnot run: the run was interrupted")
    nodes = [row for row in page.visible("#nodes-table tbody tr") if "gpu[195-500]" in row or "gpu2" in row]
    assert nodes == [f"gpu[195-500]\tERROR\t306 nodes not run: the run was interrupted; resume with {resume}"]
    assert page.eval("document.querySelectorAll('#findings details.node').length") == 1  # gpu003's FAIL only
    assert page.visible("#not-run-findings") == [f"ERRORgpu[195-500] (306 nodes): not run: the run was "
                                                 f"interrupted; resume with {resume}"]
    steps = page.visible("ol.steps > li")
    assert steps[0].startswith("RESUME gpu[195-500] (306 nodes) \u2014 not run: the run was interrupted; resume "
                               f"with {resume}") and len(steps) == 2, steps
    assert "INVESTIGATE" not in page.eval("document.getElementById('actions').innerText")
    page.type("#search", "gpu300")  # a not-run node is still found inside its range
    assert page.visible("#gnr .hits") == ["\u2192 gpu300"]
    page.eval("document.getElementById('search').value = ''; document.getElementById('search')"
              ".dispatchEvent(new Event('input'))")
    page.eval("window.scrollTo(0, 0)")
    shot = page.screenshot(tmp_path / "interrupted-first-screen.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    print(f"\nscreenshot of the interrupted report's first screen: {shot}")


def test_a_waived_finding_reads_waived_with_owner_and_expiry(browser, tmp_path):
    """A waived FAIL is WAIVED in the matrix (not the grey SKIP of "not applicable"), its cell leads
    to the waived findings, which say what it was, who accepted it, why and until when; so does the cluster table
    for a cluster finding waived with its node findings."""
    waivers = tmp_path / "waivers.yaml"
    waivers.write_text("waivers:\n"
                       "  - check: memory.remapped_rows\n    nodes: gpu006\n    gpus: [2]\n    until: 2099-12-31\n"
                       "    owner: jdoe@example.com\n    reason: RMA 4711 open\n"
                       "  - check: driver.consistency\n    nodes: gpu013\n    until: 2099-06-30\n"
                       "    owner: ops@example.com\n    reason: driver canary\n")
    out = tmp_path / "reports"
    result = CliRunner().invoke(cli, ["validate", "-i", str(ROOT / "inventories" / "demo.yaml"), "--out", str(out),
                                      "--waivers", str(waivers), "-q", "--no-history"])
    assert result.exit_code == 1, result.output
    page = browser.open(next((out / "demo").iterdir()) / "report.html")
    cell = page.eval("""(() => {
        const heads = [...document.querySelectorAll('#matrix-table thead th')].map(th => th.innerText.trim());
        const column = heads.indexOf('memory.remapped_rows');
        const row = [...document.querySelectorAll('#matrix-table tbody tr')]
            .find(tr => tr.cells[0].innerText.trim() === 'gpu006');
        const td = row.cells[column];
        return {text: td.innerText.trim(), cls: td.className, background: getComputedStyle(td).backgroundColor};
    })()""")
    assert cell == {"text": "WAIVED", "cls": "c WAIVED", "background": "rgb(221, 244, 255)"}, cell
    page.click("#matrix-table td.WAIVED a")
    assert page.eval("location.hash") == "#waived"
    rows = page.visible("#waived-table tr.waived")
    assert rows[0].split("\t")[:9] == ["gpu006", "memory.remapped_rows", "2", "WAIVED", "FAIL", "jdoe@example.com",
                                       "2099-12-31", "RMA 4711 open", f"{waivers}:2"], rows
    assert any(row.startswith("(cluster)\tdriver.consistency\t\tWAIVED\tFAIL\tops@example.com\t2099-06-30") for row in
               rows), rows
    cluster = [row for row in page.visible("#cluster-table tr") if row.startswith("driver.consistency")]
    assert cluster and cluster[0].split("\t")[1] == "WAIVED\nFAIL until 2099-06-30", cluster
    assert "owner ops@example.com: driver canary" in cluster[0]
    assert page.eval("document.getElementById('verdict').innerText") == "NOT READY"  # the other faults still count
    page.eval("document.getElementById('waived').scrollIntoView()")
    shot = page.screenshot(tmp_path / "waived.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"\nscreenshot of the waived findings: {shot}")
