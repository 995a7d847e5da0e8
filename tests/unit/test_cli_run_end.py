"""The end of a validate run on the terminal: interrupted runs say how to resume, node lines name the reason, the
FAIL/ERROR hosts fold into a line for pdsh/clush/scontrol, colour only on a terminal (through click's runner)."""

from __future__ import annotations

import _thread
import json
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from nvdeploy.cli.app import cli
from nvdeploy.report import text
from nvdeploy.report.view import action_list, action_text
from nvdeploy.results import ErrorReason, Verdict
from nvdeploy.runner import engine
from nvdeploy.runner.folders import load_run

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def inventory(tmp_path: Path, hosts: dict[str, list[str]], timeout: int = 60) -> Path:
    lines = ["all:", "  vars:", "    cluster: lab", "    connection: sim", "    profile: h100-sxm-8x",
             '    driver_version: "550.90.07"', f"    command_timeout: {timeout}", "  hosts:"]
    lines += [f"    {name}: {{sim_faults: {json.dumps(faults)}}}" for name, faults in hosts.items()]
    path = tmp_path / "lab.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def interrupted_run(tmp_path, monkeypatch, ctrl_c_reaches_main):
    """A run Ctrl-C'd while its hung node ``h1`` runs, with one node at a time: a01-a02 finished before it,
    the five after it never started. The interrupt comes from h1's own start, so nothing races with load."""
    hosts = {"a01": [], "a02": [], "h1": ["hang"], **{f"b{i:02d}": [] for i in range(1, 6)}}
    path = inventory(tmp_path, hosts)
    original = engine.NodeRunner.run

    def run(self, host):
        if host.name == "h1":
            _thread.interrupt_main()
        return original(self, host)

    monkeypatch.setattr(engine.NodeRunner, "run", run)
    result = invoke("validate", "-i", str(path), "--out", str(tmp_path / "reports"), "--forks", "1")
    monkeypatch.setattr(engine.NodeRunner, "run", original)
    run_dir = next((tmp_path / "reports" / "lab").iterdir())
    return result, run_dir, path


def test_an_interrupted_run_is_one_not_run_line_with_the_resume_command(interrupted_run):
    result, run_dir, _ = interrupted_run
    assert result.exit_code == 130, result.output
    resume = f"nvdeploy validate --resume {run_dir}"
    lines = result.stdout.splitlines()
    errors = [line for line in lines if line.startswith("ERROR")]
    assert errors == [f"ERROR b[01-05],h1  not run: the run was interrupted; resume with `{resume}`"], lines
    assert f"resume with: {resume}" in lines
    assert "not evaluated" not in result.stdout and "INVESTIGATE" not in result.stdout
    # The data stays honest: those nodes are ERROR interrupted in results.json.
    data = json.loads((run_dir / "results.json").read_text())
    by_name = {n["name"]: n for n in data["nodes"]}
    for name in ("h1", "b01", "b05"):
        assert by_name[name]["verdict"] == "ERROR"
        assert any(f["reason"] == ErrorReason.INTERRUPTED.value for f in by_name[name]["findings"])
    assert by_name["a01"]["verdict"] == "PASS"


def test_an_interrupted_run_has_one_resume_step_not_investigate(interrupted_run):
    _, run_dir, _ = interrupted_run
    run = load_run(run_dir)
    steps = action_list(run, run_dir=run_dir)
    assert [(s["action"], s["hosts"], s["items"]) for s in steps] == [("RESUME", "b[01-05],h1", [])]
    ticket = action_text(run, run_dir=run_dir)
    assert f"1. RESUME b[01-05],h1 (6 nodes): not run: the run was interrupted; resume with `nvdeploy validate " \
           f"--resume {run_dir}`." in ticket
    assert "INVESTIGATE" not in ticket and "Re-validate" not in ticket


def test_resume_says_how_many_nodes_it_will_run(interrupted_run):
    _, run_dir, path = interrupted_run
    path.write_text(path.read_text().replace('["hang"]', "[]"))  # the node was fixed before the resume
    result = invoke("validate", "--resume", str(run_dir))
    assert result.exit_code == 0, result.output
    first = result.stderr.splitlines()[0]
    assert f"resuming run {run_dir.name} of lab: 6 of 8 node(s) left to check, 2 kept" in first, first
    assert "validating 8 node(s)" not in result.stderr
    assert "resume with" not in result.stdout


def test_node_lines_show_fail_and_error_apart_with_the_first_reason_uncut(tmp_path):
    path = inventory(tmp_path, {"ok1": [], "hung": ["hang"], "lost": ["xid79", "gpu_missing"]}, timeout=2)
    result = invoke("validate", "-i", str(path), "--out", str(tmp_path / "reports"))
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    fail = next(i for i, line in enumerate(lines) if line.startswith("FAIL  lost  "))
    assert lines[fail].startswith("FAIL  lost  gpu.count, gpu.pci_visible, kmsg.xid: 7 of 8 expected GPUs"), lines
    (hung,) = [line for line in lines if line.startswith("ERROR hung")]
    # The first check of the node's run order with its reason in words, whole; the list of checks gives way.
    assert re.match(r"ERROR hung  driver\.loaded \+\d+ more: nvidia-smi did not answer \(timed out after 2 s\): "
                    r"a hung GPU or driver \(check for processes in D state and Xid 79/45 in the kernel log\)$",
                    hung), hung
    assert lines.index(hung) > fail  # most severe first


def test_a_node_with_fail_and_error_gets_a_line_for_each():
    from nvdeploy.results import Finding, NodeResult

    node = NodeResult("gpu007", (
        Finding("dcgm.diag", Verdict.ERROR, "dcgmi diag timed out after 600 s", node="gpu007",
                reason=ErrorReason.TIMEOUT),
        Finding("memory.ecc_errors", Verdict.FAIL, "2 uncorrectable ECC errors on GPU3", node="gpu007"),
        Finding("gpu.count", Verdict.PASS, "8 GPUs", node="gpu007")))
    assert text.node_summary_lines([node]) == [
        "FAIL  gpu007  memory.ecc_errors: 2 uncorrectable ECC errors on GPU3",
        "      ERROR dcgm.diag: dcgmi diag timed out after 600 s"]


def test_failed_hosts_line_and_file_fold_fail_and_error_nodes(tmp_path):
    path = inventory(tmp_path, {"n01": [], "n02": ["ecc_uncorrectable"], "n03": ["unreachable"], "n04": [],
                                "n05": ["persistence_off"], "n06": ["xid13"]})
    listing = tmp_path / "failed.txt"
    result = invoke("validate", "-i", str(path), "--out", str(tmp_path / "reports"), "--failed-hosts", str(listing))
    assert result.exit_code == 1, result.output
    assert "FAIL/ERROR hosts: n[02-03,05]" in result.stdout.splitlines()
    assert listing.read_text() == "n[02-03,05]\n"  # WARN (n06) and PASS are left out
    healthy = inventory(tmp_path, {"n01": []})
    result = invoke("validate", "-i", str(healthy), "--out", str(tmp_path / "reports"), "--failed-hosts",
                    str(listing), "-q")
    assert result.exit_code == 0 and listing.read_text() == ""
    assert "FAIL/ERROR hosts" not in result.stdout


def test_interrupted_nodes_are_not_failed_hosts(interrupted_run):
    _, run_dir, _ = interrupted_run
    assert text.failed_hosts(load_run(run_dir)) == []


def test_verbose_prints_every_finding_that_did_not_pass(tmp_path):
    path = inventory(tmp_path, {"n01": [], "n02": ["xid79", "gpu_missing"]})
    plain = invoke("validate", "-i", str(path), "--out", str(tmp_path / "reports"))
    verbose = invoke("validate", "-i", str(path), "--out", str(tmp_path / "reports"), "-v")
    assert verbose.exit_code == plain.exit_code == 1
    wanted = ["FAIL  n02 gpu.count: 7 of 8 expected GPUs visible to the driver", "FAIL  n02 kmsg.xid"]
    for line in wanted:
        assert line in verbose.stdout and line not in plain.stdout


def test_colour_on_a_terminal_only_and_never_with_no_color(tmp_path, monkeypatch):
    path = inventory(tmp_path, {"n01": [], "n02": ["ecc_uncorrectable"]})
    args = ("validate", "-i", str(path), "--out", str(tmp_path / "reports"))
    piped = invoke(*args)
    assert not ANSI.search(piped.stdout)  # not a terminal: no colour
    monkeypatch.setattr(text, "_isatty", lambda stream: True)
    monkeypatch.delenv("NO_COLOR", raising=False)
    coloured = invoke(*args)
    assert "\x1b[1;31mFAIL\x1b[0m  n02" in coloured.stdout
    assert "\x1b[1;31mNOT_READY\x1b[0m: " in coloured.stdout
    def lines_of(output: str) -> list[str]:
        return [line for line in ANSI.sub("", output).splitlines() if not line.startswith("report: ")]

    assert lines_of(coloured.stdout) == lines_of(piped.stdout)  # the same text, only coloured
    monkeypatch.setenv("NO_COLOR", "1")
    assert not ANSI.search(invoke(*args).stdout)


def _tool_hosts(argv: list[str], tmp_path: Path) -> list[str]:
    import subprocess

    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=t\nSlurmctldHost=localhost\nNodeName=x\nPartitionName=p Nodes=x\n")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                          env={"SLURM_CONF": str(conf), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"})
    assert done.returncode == 0, (argv, done.stdout + done.stderr)
    return done.stdout


def test_the_failed_hosts_line_is_read_back_by_limit_scontrol_pdsh_and_clush(tmp_path):
    """The line an operator pastes, on names with a suffix and a rack grid: nvdeploy's own --limit, Slurm's
    ``scontrol show hostnames``, ``pdsh -w`` (its exec module: ``echo %h`` run here per target) and ClusterShell's
    ``nodeset -e`` (the NodeSet parser ``clush -w`` uses) each read exactly the failed hosts."""
    import shutil

    from nvdeploy.config.hostrange import expand_hostlist

    failing = {"hgx01.mgmt": ["ecc_uncorrectable"], "hgx02.mgmt": ["persistence_off"], "hgx04.mgmt": ["xid79"],
               "rack3-gpu01": ["gpu_missing"], "rack3-gpu02": ["gpu_missing"], "rack5-gpu01": ["gpu_missing"],
               "rack5-gpu02": ["gpu_missing"], "gpu007": ["persistence_off"], "gpu009": ["persistence_off"]}
    hosts = {**failing, "hgx03.mgmt": [], "rack4-gpu01": [], "gpu008": []}
    listing = tmp_path / "failed.txt"
    result = invoke("validate", "-i", str(inventory(tmp_path, hosts)), "--out", str(tmp_path / "reports"),
                    "--failed-hosts", str(listing))
    assert result.exit_code == 1, result.output
    (line,) = [ln for ln in result.stdout.splitlines() if ln.startswith("FAIL/ERROR hosts: ")]
    pasted = line.split(": ", 1)[1]
    assert listing.read_text() == pasted + "\n"
    assert pasted == "gpu[007,009],rack[3,5]-gpu[01-02],hgx01.mgmt,hgx02.mgmt,hgx04.mgmt"
    want = sorted(failing)
    assert sorted(expand_hostlist(pasted)) == want
    if shutil.which("scontrol"):
        assert sorted(_tool_hosts(["scontrol", "show", "hostnames", pasted], tmp_path).split()) == want
    if shutil.which("pdsh"):
        # The exec module runs the command here, once per target with %h its name: pdsh's own expansion, no network.
        shown = _tool_hosts(["pdsh", "-R", "exec", "-w", pasted, "echo", "%h"], tmp_path)
        assert sorted(line.split(": ", 1)[1] for line in shown.splitlines()) == want, shown
    assert sorted(_tool_hosts(["nodeset", "-e", "-S", " ", pasted], tmp_path).split()) == want
