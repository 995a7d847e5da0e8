"""Hostile input: shell metacharacters in every command template, hostile node names on disk, markup
in node output, and YAML built to exhaust time or memory. Each gets a clear error or is inert; never a traceback.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from html.parser import HTMLParser
from pathlib import Path
from typing import Optional

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nvdeploy.cli.app import cli
from nvdeploy.collect.catalog import COLLECTORS, light_specs, specs_for
from nvdeploy.collect.probe.ship import SYSTEM_PYTHONS, launched_python
from nvdeploy.config.inventory import VAR_SCHEMA, load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.config.yamlfile import MAX_FILE_BYTES, ConfigError, load_yaml_text
from nvdeploy.phases.validate import run_validate
from nvdeploy.report.html import render_html
from nvdeploy.results import CommandResult, ErrorReason, Finding, NodeResult, Remediation, RunResult, Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.runner.record import RunRecorder, safe_name
from nvdeploy.sim.fake_tool import wrapper_script
from nvdeploy.transport import batch
from nvdeploy.transport.base import CommandSpec

CATALOG = ProfileCatalog()
PROFILE = CATALOG.get("h100-sxm-8x")
PAYLOADS = [
    "; rm -rf {canary_dir}; touch {canary}",
    "$(touch {canary})",
    "`touch {canary}`",
    "a\nb; touch {canary}\n",
    "'; touch {canary}; '",
    '"; touch {canary}; "',
    "\\'\\\"\\\\",
    "${IFS}touch${IFS}{canary}",
    "-n",
    "--",
    "-oProxyCommand=touch {canary}",
    "*",
    "~root",
    "$HOME",
    "%s%n",
    "!!",
    "0,1; touch {canary}",
    "|| touch {canary}",
    "& touch {canary} &",
    "> {canary}",
    "\t \r",
    "",
    "é ☃ \u202e",
]
# Any text an argv can carry (no NUL, no lone surrogate), biased towards shell syntax.
SHELLY = st.text(alphabet=st.sampled_from(list(" \t\n'\"\\$`;|&<>(){}[]*?!#~=%,-.:/aZ09é")), max_size=24)
ARG_TEXT = st.one_of(st.sampled_from(PAYLOADS), SHELLY,
                     st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=24))

ARGV_ECHO = """#!/bin/sh
# prints every argument as LENGTH:BYTES (LC_ALL=C: the length counts bytes), then what it read on stdin
for a in "$@"; do printf '%s:%s' "${#a}" "$a"; done
printf 'STDIN:'
cat
"""
FAKE_SUDO = """#!/bin/sh
# a stand-in for sudo: records the line given on its stdin (the password) and its options, then runs the command
IFS= read -r pw || pw='<none>'
printf '%s' "$pw" >"$NVD_TEST_SUDO_LOG"
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; break ;;
    -p) shift 2 ;;
    *) shift ;;
  esac
done
exec "$@"
"""


def _fill(text: str, canary: Path) -> str:
    return text.replace("{canary_dir}", str(canary.parent)).replace("{canary}", str(canary))


def _decode_args(raw: bytes) -> tuple[list[bytes], bytes]:
    """Undo ARGV_ECHO's output: (arguments, stdin)."""
    args = []
    position = 0
    while not raw.startswith(b"STDIN:", position):
        colon = raw.index(b":", position)
        length = int(raw[position:colon])
        args.append(raw[colon + 1 : colon + 1 + length])
        position = colon + 1 + length
    return args, raw[position + len(b"STDIN:") :]


@pytest.fixture(scope="module")
def shell_lab():
    """A folder with the argv-echo program (also under each collector's tool name), a fake sudo and a canary."""
    with tempfile.TemporaryDirectory(prefix="nvd-hostile-") as folder:
        root = Path(folder)
        bin_dir = root / "bin"
        bin_dir.mkdir()
        echo = bin_dir / "argv-echo"
        echo.write_text(ARGV_ECHO)
        echo.chmod(0o755)
        sudo = bin_dir / "sudo"
        sudo.write_text(FAKE_SUDO)
        sudo.chmod(0o755)
        (root / "canary").mkdir()
        yield root


def _run_script(lab: Path, script: str, stdin: bytes = b"", via_ssh_wrapper: bool = False) -> bytes:
    """Run a batch script as the local transport does, or as sshd would run SSHTransport's command line."""
    env = {"PATH": f"{lab / 'bin'}:/usr/bin:/bin", "NVD_TEST_SUDO_LOG": str(lab / "sudo.log"), "LC_ALL": "C",
           "NVDEPLOY_LOCK_DIR": str(lab / "lock")}
    if via_ssh_wrapper:
        from nvdeploy.transport.ssh import _quote

        argv = ["/bin/sh", "-c", "sh -c " + _quote(script)]  # sshd: $SHELL -c "<the command SSHTransport sent>"
    else:
        argv = ["/bin/sh", "-c", script]
    # As the transports do: stdin stays open until the answer is read (EOF there ends the batch early).
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            cwd=lab, start_new_session=True)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(stdin)
    proc.stdin.flush()
    timer = threading.Timer(60, proc.kill)
    timer.start()
    try:
        out = proc.stdout.read()
    finally:
        timer.cancel()
        proc.stdin.close()
    err = proc.stderr.read()
    proc.wait(60)
    assert batch.END_MARKER in out, err
    return out


def _canary_untouched(lab: Path) -> None:
    leftovers = list((lab / "canary").iterdir())
    assert not leftovers, f"a payload ran a command: {leftovers}"


@pytest.mark.timeout(180)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(commands=st.lists(st.lists(ARG_TEXT, max_size=5), min_size=1, max_size=3), ssh=st.booleans(),
       sudo=st.booleans())
def test_batch_script_passes_every_value_as_one_literal_argument(shell_lab, commands, ssh, sudo):
    canary = shell_lab / "canary" / "pwned"
    values = [[_fill(v, canary) for v in argv] for argv in commands]
    specs = [CommandSpec(f"c{i}", (str(shell_lab / "bin" / "argv-echo"), *argv), 10, sudo=sudo)
             for i, argv in enumerate(values)]
    raw = _run_script(shell_lab, batch.build_script(specs), via_ssh_wrapper=ssh)
    results = batch.parse_output(specs, raw, 0.0)
    for argv, result in zip(values, results):
        assert result.rc == 0 and result.error is None, result
        args, stdin = _decode_args(result.stdout)
        assert args == [v.encode() for v in argv]
        assert stdin == b""
    _canary_untouched(shell_lab)


@pytest.mark.timeout(180)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=st.lists(ARG_TEXT, max_size=4),
       password=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\n\r"),
                        min_size=1, max_size=30))
def test_sudo_password_reaches_only_sudo_stdin(shell_lab, argv, password):
    """The password is read by the script from its own stdin and piped to sudo: never in the script text, never
    in an argv, never on the command's stdin; the command's arguments stay literal.

    Found here: the batch put ``</dev/null`` after ``printf pw | sudo ...``, which bound to sudo and replaced the
    pipe, so sudo never got the password (NVDEPLOY_SUDO_PASSWORD could not work)."""
    (shell_lab / "sudo.log").unlink(missing_ok=True)
    canary = shell_lab / "canary" / "pwned"
    argv = [_fill(v, canary) for v in argv]
    password = "pw-" + password  # distinctive, so that "not in the script" means something
    spec = CommandSpec("c", (str(shell_lab / "bin" / "argv-echo"), *argv), 10, sudo=True)
    script = batch.build_script([spec], sudo_password=True)
    assert password not in script
    raw = _run_script(shell_lab, script, stdin=(password + "\n").encode(), via_ssh_wrapper=True)
    result = batch.parse_output([spec], raw, 0.0)[0]
    assert result.rc == 0, result
    args, stdin = _decode_args(result.stdout)
    assert args == [v.encode() for v in argv]
    assert stdin == b""
    assert (shell_lab / "sudo.log").read_bytes() == password.encode()
    _canary_untouched(shell_lab)


@pytest.mark.timeout(180)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=ARG_TEXT)
def test_every_collector_template_with_hostile_host_vars(shell_lab, value):
    """Every registered collector, built from host vars that all carry the payload, runs its tool with exactly the
    argv nvdeploy planned: each value one literal argument (a tool folder with a hostile name included)."""
    canary = shell_lab / "canary" / "pwned"
    value = _fill(value, canary)
    tools_dir = shell_lab / "tools" / ("d" + value.replace("/", "_").replace("\x00", ""))[:60]
    tools_dir.mkdir(parents=True, exist_ok=True)
    host_vars: dict = {"sudo": False, "nccl_tests_dir": str(tools_dir), "nccl_env": {"NCCL_HOSTILE": value}}
    for key, (check, _) in VAR_SCHEMA.items():
        # A timeout takes only a number (never text that could reach a shell); a drawn "1" made every tool's
        # limit 1 s, which a loaded machine cannot meet (rc None): not what this test is about.
        if key not in host_vars and check(value) and key not in ("connection", "sudo") \
                and not key.endswith("_timeout"):
            host_vars[key] = value
    names = list(COLLECTORS)
    specs = light_specs(host_vars, names, PROFILE) + specs_for(names, host_vars, heavy=True, profile=PROFILE)
    # storage.throughput is planned only for a storage_paths mapping, which a text payload is not; the burn-in's
    # sampler and load only by a run with --burn-in (collect/burnin_commands.py burnin_specs); the MIG listings only
    # for a valid mig_config layout name, which the payload is not.
    assert {s.name for s in specs} >= set(names) - {"storage_throughput", "burnin_sampler", "burnin_load",
                                                    "mig_lgi", "mig_lci"}
    # The probe runs from a fixed path (/bin/sh, then the node's Python by its absolute path): not echoed, but its
    # interpreter is the one word the host var gave, or the system Python's.
    probe = next(s for s in specs if s.name == "nvml_probe")
    specs = [s for s in specs if s is not probe]
    assert probe.argv[0] == "/bin/sh" and launched_python(probe.argv) == (
        (host_vars["probe_python"],) if "probe_python" in host_vars else SYSTEM_PYTHONS)
    for spec in specs:  # every tool a template names is the argv-echo program
        tool = spec.argv[0]
        target = Path(tool) if "/" in tool else shell_lab / "bin" / tool
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(ARGV_ECHO)
            target.chmod(0o755)
    raw = _run_script(shell_lab, batch.build_script(specs), via_ssh_wrapper=True)
    for spec, result in zip(specs, batch.parse_output(specs, raw, 0.0)):
        assert result.rc == 0, (spec.argv[:3], result.stderr[-300:])
        args, _ = _decode_args(result.stdout)
        assert args == [a.encode() for a in spec.argv[1:]], spec.name
    nccl = next(s for s in specs if s.name == "nccl_all_reduce")
    assert f"NCCL_HOSTILE={value}" in nccl.argv
    assert f"{tools_dir}/all_reduce_perf" in nccl.argv
    _canary_untouched(shell_lab)


@settings(max_examples=200, deadline=None)
@given(argv=st.lists(ARG_TEXT, min_size=1, max_size=5), sudo=st.booleans())
def test_command_display_round_trips_through_a_shell_parser(argv, sudo):
    spec = CommandSpec("c", tuple(argv), 5, sudo=sudo)
    words = shlex.split(spec.display)
    assert words == (["sudo", "-n", "--"] if sudo else []) + list(argv)


@pytest.mark.timeout(120)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(folder=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/"), min_size=1,
                      max_size=20).filter(lambda t: t not in (".", "..")))
def test_fake_tool_wrapper_quotes_interpreter_and_pythonpath(shell_lab, folder):
    canary = shell_lab / "canary" / "pwned"
    folder = _fill(folder, canary).replace("/", "_")
    base = shell_lab / "wrap" / folder
    base.mkdir(parents=True, exist_ok=True)
    python = base / "python"
    python.write_text(ARGV_ECHO.replace("\nfor a", '\nset -- "$PYTHONPATH" "$@"\nfor a', 1))  # PYTHONPATH first
    python.chmod(0o755)
    tool = base / "nvidia-smi"
    tool.write_text(wrapper_script(python=str(python), pythonpath=base))
    tool.chmod(0o755)
    proc = subprocess.run([str(tool), "-q", "a b", "$(x)"], capture_output=True, timeout=30,
                          stdin=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
    args, _ = _decode_args(proc.stdout)
    assert args == [os.fsencode(a) for a in (str(base), "-m", "nvdeploy.sim.fake_tool", str(tool), "-q", "a b",
                                             "$(x)")], proc.stderr
    _canary_untouched(shell_lab)


# ------------------------------------------------------------------------------------------------- file names


@settings(max_examples=300, deadline=None)
@given(name=st.text(max_size=120) | st.sampled_from(["..", ".", "/", "../../etc/cron.d/x", "/tmp/evil", "a/../../b",
                                                     "-rf", "~", "con", "x" * 300, "\u202egpu01", "a\x00b"]))
def test_safe_name_is_a_plain_file_name(name):
    cleaned = safe_name(name)
    assert re.fullmatch(r"[A-Za-z0-9._-]+", cleaned)
    assert cleaned not in (".", "..") and not cleaned.startswith(".")
    assert len(cleaned) <= 80 + 9
    assert safe_name(name) == cleaned


@pytest.mark.timeout(120)
@settings(max_examples=60, deadline=None)
@given(node=st.text(max_size=60) | st.sampled_from(["..", "../../etc", "/etc/passwd", "a/b/../../../c", "."]),
       collector=st.text(max_size=40) | st.sampled_from(["..", "../x", "/abs", "evidence/../../y"]))
def test_evidence_of_any_node_name_stays_inside_the_run_folder(node, collector):
    with tempfile.TemporaryDirectory(prefix="nvd-names-") as folder:
        base = Path(folder) / "out"
        run_dir = base / "cluster" / "run"
        recorder = RunRecorder(run_dir)
        try:
            records = recorder.write_evidence(node, [CommandResult(collector, "x", 0, b"out", b"err")])
        finally:
            recorder.close()
        root = run_dir.resolve()
        written = [p for p in Path(folder).rglob("*") if p.is_file()]
        assert written and all(root in p.resolve().parents for p in written), written
        for record in records:
            assert not Path(record.path).is_absolute() and ".." not in Path(record.path).parts
            assert root in (run_dir / record.path).resolve().parents


@pytest.mark.timeout(60)
def test_hostile_cluster_name_stays_inside_the_output_folder(tmp_path):
    inventory = tmp_path / "inv.yaml"
    inventory.write_text('all:\n  vars: {connection: sim, profile: h100-sxm-8x, cluster: "../../../../tmp/../etc/x"}\n'
                         "  hosts:\n    a: {}\n")
    outcome = run_validate(load_inventory(inventory, CATALOG), CATALOG, EngineOptions(), tmp_path / "out")
    out = (tmp_path / "out").resolve()
    assert out in outcome.run_dir.resolve().parents
    assert all(out in p.resolve().parents for p in (tmp_path / "out").rglob("*"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inv.yaml", "out"]


# ------------------------------------------------------------------------------------------------------- HTML

MARKUP = ["<script>alert(1)</script>", '"><img src=x onerror=alert(2)>', "javascript:alert(3)",
          "'><svg onload=alert(4)>", "</script><script>alert(5)</script>", "<a href=\"javascript:alert(6)\">x</a>",
          "{{ 7*7 }}", "&lt;b&gt;", "</style><style>*{display:none}</style>", "</textarea><iframe src=//x>"]


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str]]]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, [(k, v or "") for k, v in attrs]))


def _structure(html: str) -> list[tuple[str, list[tuple[str, str]]]]:
    parser = _Tags()
    parser.feed(html)
    return parser.tags


def _assert_inert(html: str) -> None:
    """No tag or attribute came from the payload: no event handler, no script URL, no extra script or style."""
    tags = _structure(html)
    for tag, attrs in tags:
        for name, value in attrs:
            assert not name.startswith("on"), (tag, name, value)
            assert not value.strip().lower().startswith(("javascript:", "data:text/html", "vbscript:")), (tag, value)
    kinds = {t for t, _ in tags}
    for dangerous in ("img", "svg", "iframe", "textarea", "object", "embed", "base", "form"):
        assert dangerous not in kinds, dangerous
    benign = _structure(_benign_html())
    for tag in ("script", "style", "meta", "link"):
        assert sum(1 for x, _ in tags if x == tag) == sum(1 for x, _ in benign if x == tag), tag
    assert "<script>alert" not in html and "<img src=x" not in html


def _hostile_run(payload: str) -> RunResult:
    finding = Finding(check=f"gpu.model{payload}", verdict=Verdict.FAIL, summary=f"model {payload}", node=payload,
                      observed=payload, expected=payload, unit=payload, gpu=0, reason=ErrorReason.UNPARSEABLE,
                      remediation=Remediation.ISOLATE, evidence=payload, profile=payload)
    error = Finding(check="kmsg.xid", verdict=Verdict.ERROR, summary=payload, node=payload,
                    reason=ErrorReason.UNPARSEABLE, evidence=f"evidence/{payload}/kmsg.out")
    node = NodeResult(name=payload, findings=(finding, error), address=payload, profile=payload,
                      connection="ssh", facts={"driver_version": payload, "gpu_model": payload, "gpu_count": payload})
    return RunResult(run_id=payload, cluster=payload, phase="validate", nodes=(node,),
                     cluster_findings=(Finding("driver.consistency", Verdict.FAIL, payload),),
                     profiles={payload: payload}, inventory=payload, user=payload, started_at=payload,
                     nvdeploy_version=payload)


@functools.lru_cache(maxsize=1)
def _benign_html() -> str:
    return render_html(_hostile_run("plain")).decode()


@pytest.mark.parametrize("payload", MARKUP)
def test_markup_in_every_report_field_is_inert(payload):
    """A journal carrying markup in every field (a tampered results.jsonl, rebuilt by ``nvdeploy report``)."""
    html = render_html(_hostile_run(payload)).decode()
    _assert_inert(html)
    if "<" in payload:
        assert payload not in html


@pytest.mark.timeout(60)
def test_markup_in_node_output_is_inert_in_the_report(tmp_path):
    """Node output (a kernel log whose Xid line names a process with markup) goes through the real pipeline."""
    from nvdeploy.sim import tools

    inventory = tmp_path / "inv.yaml"
    inventory.write_text("all:\n  vars: {connection: sim, profile: h100-sxm-8x}\n  hosts:\n"
                         "    a: {sim_faults: [xid13]}\n")
    payload = " ".join(MARKUP)
    original = tools.XID_MESSAGES[13]
    tools.XID_MESSAGES[13] = (True, payload)
    try:
        outcome = run_validate(load_inventory(inventory, CATALOG), CATALOG, EngineOptions(), tmp_path / "out")
    finally:
        tools.XID_MESSAGES[13] = original
    xid = next(f for f in outcome.run.nodes[0].findings if f.check == "kmsg.xid")
    assert "<script>" in xid.summary  # the payload reached the finding ...
    html = (outcome.run_dir / "report.html").read_text()
    _assert_inert(html)  # ... and is inert in the report
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_control_characters_never_break_junit(tmp_path):
    import xml.etree.ElementTree as ET

    from nvdeploy.report.junit import render_junit

    ET.fromstring(render_junit(_hostile_run("\x00\x1b]0;x\x07\x1b[2J\x08\ufffe\x7f" + MARKUP[0])))


# ------------------------------------------------------------------------------------------------------- YAML


def _bounded(function, seconds: float = 30.0, megabytes: Optional[float] = 100.0) -> ConfigError:
    """Run ``function`` expecting ConfigError; assert it came within time and (unless None) memory bounds.

    The time bounds are loose (this machine may be shared with other test runs): they catch minutes, not ms.

    tracemalloc makes deep recursion ~20x slower: measure memory only where the input is wide, not deep."""
    if megabytes is not None:
        tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(ConfigError) as info:
            function()
    finally:
        elapsed = time.monotonic() - started
        if megabytes is not None:
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
    assert elapsed < seconds, f"took {elapsed:.1f} s"
    if megabytes is not None:
        assert peak < megabytes * 1024 * 1024, f"peak {peak / 2**20:.0f} MiB"
    return info.value


BILLION_LAUGHS = """
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
all:
  vars: {connection: sim, profile: h100-sxm-8x}
  hosts:
    x: {sim_faults: *i}
"""


@pytest.mark.timeout(60)
def test_yaml_alias_bomb_is_a_clear_error(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(BILLION_LAUGHS)
    error = _bounded(lambda: load_inventory(path, CATALOG))
    assert "alias bomb" in str(error) and str(path) in str(error)


@pytest.mark.timeout(60)
def test_100_mb_inventory_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as handle:
        handle.write(b"all:\n  hosts:\n    # ")
        handle.truncate(100 * 1024 * 1024)  # sparse: 100 MB by size, no disk used
    error = _bounded(lambda: load_inventory(path, CATALOG), seconds=10, megabytes=5)
    assert str(MAX_FILE_BYTES) in str(error) and str(path) in str(error)


@pytest.mark.timeout(60)
def test_inventory_just_under_the_size_limit_is_bounded(tmp_path):
    path = tmp_path / "big.yaml"
    filler = ("# " + "x" * 100 + "\n") * ((MAX_FILE_BYTES - 4096) // 103)
    path.write_text(filler + "all:\n  vars: {connection: sim, profile: h100-sxm-8x}\n  hosts: {a: {}}\n")
    started = time.monotonic()
    assert [h.name for h in load_inventory(path, CATALOG).hosts] == ["a"]
    assert time.monotonic() - started < 60


@pytest.mark.timeout(60)
@pytest.mark.parametrize("text", ["[" * 20000, "- " * 5000 + "x", "{a: " * 20000],
                         ids=["flow-sequences", "block-sequences", "flow-mappings"])
def test_deeply_nested_yaml_is_a_clear_error(text):
    """Found here: PyYAML's composer recursed until RecursionError, a traceback instead of exit 2."""
    error = _bounded(lambda: load_yaml_text(text, "deep.yaml"), seconds=60, megabytes=None)
    assert "nested too deeply" in str(error)


@pytest.mark.timeout(60)
def test_host_range_bomb_is_a_clear_error(tmp_path):
    """Found here: 20 lines of ``hN[1-99999]`` (each within the per-range limit) built 2 million hosts: 37 s, 2.2 GB."""
    path = tmp_path / "ranges.yaml"
    path.write_text("all:\n  vars: {connection: sim, profile: h100-sxm-8x}\n  hosts:\n"
                    + "".join(f"    h{i}x[1-99999]: {{}}\n" for i in range(20)))
    error = _bounded(lambda: load_inventory(path, CATALOG), seconds=60, megabytes=300)
    assert "host entries" in str(error) and error.line is not None


def test_python_tags_are_refused(tmp_path):
    path = tmp_path / "tag.yaml"
    path.write_text("all:\n  hosts:\n    a: !!python/object/apply:os.system ['touch /tmp/nvd-pwned']\n")
    with pytest.raises(ConfigError) as info:
        load_inventory(path, CATALOG)
    assert info.value.line == 3


_CANDIDATES = [[], {}, {"a": 1}, 12345, 1.5, -1, 0, True, "some text", ["x", 1], 70000]


def _wrong_values(key: str) -> list:
    check, _ = VAR_SCHEMA[key]
    return [value for value in _CANDIDATES if not check(value)][:4]


@pytest.mark.parametrize("key", sorted(VAR_SCHEMA))
def test_wrong_type_for_every_inventory_key_names_file_line_and_key(tmp_path, key):
    wrong = _wrong_values(key)
    assert wrong, f"{key} accepts any value: give it a type in VAR_SCHEMA"
    for value in wrong:
        path = tmp_path / "inv.yaml"
        path.write_text("all:\n  vars:\n    profile: h100-sxm-8x\n    connection: sim\n  hosts:\n    a:\n"
                        f"      {key}: {json.dumps(value)}\n")
        with pytest.raises(ConfigError) as info:
            load_inventory(path, CATALOG)
        error = info.value
        assert (error.file, error.line, error.key) == (str(path), 7, key), (value, error.render())
        assert "must be" in error.message


@pytest.mark.timeout(120)
def test_cli_gives_exit_2_and_one_line_for_hostile_inventories(tmp_path):
    bad = {
        "bomb.yaml": BILLION_LAUGHS,
        "deep.yaml": "all: " + "[" * 20000,
        "type.yaml": "all:\n  vars: {connection: sim, profile: h100-sxm-8x, driver_version: 550.120}\n"
                     "  hosts: {a: {}}\n",
        "utf.yaml": None,
    }
    runner = CliRunner()
    for name, text in bad.items():
        path = tmp_path / name
        if text is None:
            path.write_bytes(b"all:\n  hosts: {\xff\xfe: {}}\n")
        else:
            path.write_text(text)
        result = runner.invoke(cli, ["inventory", "check", "-i", str(path)])
        assert result.exit_code == 2, (name, result.output, result.exception)
        assert "Traceback" not in result.output and not isinstance(result.exception, RecursionError)
        assert str(path) in result.output


# --------------------------------------------------------------------------------------------- terminal output


@pytest.mark.timeout(60)
def test_escape_codes_in_node_output_never_reach_the_terminal(tmp_path):
    """An Xid line names a user's process, and a process may be named ESC ] 0 ; ... BEL (sets the title) or
    ESC [ 2 J (clears the screen): found here going raw to the operator's terminal."""
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("all:\n  vars: {connection: sim, profile: h100-sxm-8x}\n  hosts:\n"
                         "    a: {sim_faults: ['garbage:dmesg']}\n    b: {}\n")
    proc = subprocess.run([sys.executable, "-m", "nvdeploy", "validate", "-i", str(inventory), "--out",
                           str(tmp_path / "out")], capture_output=True, timeout=60, stdin=subprocess.DEVNULL,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert proc.returncode == 0, proc.stderr  # Xid 13 is a WARN: READY
    assert b"Xid 13" in proc.stdout
    for stream in (proc.stdout, proc.stderr):
        assert not re.search(rb"[\x00-\x08\x0b-\x1f\x7f]", stream), stream
        assert "\x9b" not in stream.decode("utf-8", "replace")


def test_yaml_dump_of_schema_is_stable():
    """The wrong-type test builds values with json.dumps; YAML reads JSON back as the same types."""
    for value in _CANDIDATES:
        assert yaml.safe_load(json.dumps(value)) == value


def test_summary_lines_never_carry_control_characters():
    """Whatever a check puts in a summary (node output quoted verbatim), the terminal lines show it escaped."""
    from nvdeploy.cli.common import _summary_lines

    hostile = "\x1b]0;pwn\x07\x1b[2J\x00\x08\r\x9b31m Xid 13 from a process named like this"
    node = NodeResult("gpu01", (Finding("kmsg.xid", Verdict.WARN, hostile, node="gpu01"),))
    lines = _summary_lines([node])
    assert lines and all(not re.search(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]", line) for line in lines), lines
