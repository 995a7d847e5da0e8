"""Waivers: a named finding on named nodes/GPUs accepted until a date (fixed clock), shown WAIVED with owner and
expiry, not counted until it expires; malformed and expired waivers are errors naming file and line."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from nvdeploy.config.waivers import Waiver, apply_waivers, expired, load_waivers, parse_waivers
from nvdeploy.config.yamlfile import ConfigError, load_yaml_text
from nvdeploy.results import ClusterVerdict, Finding, NodeResult, Remediation, Verdict, Waived, cluster_verdict

KNOWN = ("memory.remapped_rows", "nccl.all_reduce", "fleet.performance", "kmsg.xid")
UNTIL = dt.date(2027, 1, 15)
WAIVERS = """waivers:
  - check: memory.remapped_rows
    nodes: gpu017
    gpus: [3]
    until: 2027-01-15
    owner: jdoe@example.com
    reason: "remapped rows: RMA 4711 open"
  - check: fleet.performance
    nodes: ["gpu[020-021]"]
    until: "2027-02-01"
    owner: ops
    reason: slow node known, replacement ordered
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "waivers.yaml"
    path.write_text(text)
    return path


def remap(node: str, gpu: int, verdict: Verdict = Verdict.FAIL) -> Finding:
    return Finding("memory.remapped_rows", verdict, f"GPU{gpu}: remapped rows pending", node=node, gpu=gpu,
                   remediation=Remediation.RESET_GPU)


def nodes() -> list[NodeResult]:
    return [NodeResult("gpu017", (remap("gpu017", 3),)),
            NodeResult("gpu018", (remap("gpu018", 3),)),
            NodeResult("gpu020", (Finding("fleet.performance", Verdict.WARN, "4.0% below the median", node="gpu020"),
                                  Finding("kmsg.xid", Verdict.FAIL, "Xid 79", node="gpu020")))]


def test_a_waiver_hides_a_fail_until_its_date_then_it_counts_again(tmp_path):
    waivers = load_waivers(write(tmp_path, WAIVERS), KNOWN)
    on_the_day = apply_waivers(nodes(), waivers, UNTIL)
    waived = on_the_day[0].findings[0]
    assert waived.verdict is Verdict.SKIP and on_the_day[0].verdict is not Verdict.FAIL
    # Decided once, in the record: the verdict it had, who, why, until when; the check's own words stay its own.
    assert waived.waiver == Waived(Verdict.FAIL, "jdoe@example.com", "remapped rows: RMA 4711 open", "2027-01-15",
                                   f"{tmp_path / 'waivers.yaml'}:2")
    assert waived.summary == "GPU3: remapped rows pending"
    assert waived.display_summary == ("WAIVED FAIL until 2027-01-15 (owner jdoe@example.com: remapped rows: RMA 4711 "
                                      f"open; {tmp_path / 'waivers.yaml'}:2): GPU3: remapped rows pending")
    assert waived.gpu == 3 and waived.remediation is Remediation.RESET_GPU
    assert on_the_day[1].verdict is Verdict.FAIL  # another node: not waived
    assert expired(waivers, UNTIL) == []
    day_after = apply_waivers(nodes(), waivers, UNTIL + dt.timedelta(days=1))
    assert day_after[0].findings[0].verdict is Verdict.FAIL and day_after[0] == nodes()[0]
    (message,) = expired(waivers, UNTIL + dt.timedelta(days=1))
    assert message.startswith(f"{tmp_path / 'waivers.yaml'}:2: waiver of memory.remapped_rows on 1 node(s) by "
                              "jdoe@example.com expired on 2027-01-15") and "count again" in message


def test_the_exit_code_ignores_waived_findings_only():
    waivers = load_waivers_text(WAIVERS)
    result = apply_waivers(nodes()[:1], waivers, UNTIL)
    assert cluster_verdict([n.verdict for n in result]) is ClusterVerdict.READY
    # gpu020: its fleet WARN is waived, its Xid FAIL is not.
    gpu020 = apply_waivers(nodes()[2:], waivers, UNTIL)[0]
    assert [f.verdict for f in gpu020.findings] == [Verdict.SKIP, Verdict.FAIL]
    assert cluster_verdict([gpu020.verdict]) is ClusterVerdict.NOT_READY


def test_only_the_named_gpu_and_never_an_error():
    waivers = load_waivers_text(WAIVERS)
    node = NodeResult("gpu017", (remap("gpu017", 2), remap("gpu017", 3, Verdict.ERROR)))
    assert apply_waivers([node], waivers, UNTIL)[0] is node


def load_waivers_text(text: str):
    return parse_waivers(load_yaml_text(text, "waivers.yaml"), "waivers.yaml", KNOWN)


@pytest.mark.parametrize("text, line, key, message", [
    ("waivers: {}\n", 1, "waivers", "needs a 'waivers:' list"),
    ("waivers:\n  - check: memory.remapped_rows\n    nodes: gpu1\n    owner: a\n    reason: b\n", 2, "until",
     "missing required key"),
    ("waivers:\n  - check: memory.remapped_rows\n    nodes: gpu1\n    until: 15.01.2027\n    owner: a\n"
     "    reason: b\n", 4, "until", "must be a date YYYY-MM-DD"),
    ("waivers:\n  - check: memory.remapped_rows\n    nodes: gpu1\n    until: 2027-13-01\n    owner: a\n"
     "    reason: b\n", 4, None, "invalid value '2027-13-01': month must be in 1..12"),
    ("waivers:\n  - check: memory.nope\n    nodes: gpu1\n    until: 2027-01-01\n    owner: a\n    reason: b\n", 2,
     "check", "unknown check 'memory.nope'"),
    ("waivers:\n  - check: kmsg.xid\n    nodes: gpu1\n    until: 2027-01-01\n    owner: a\n    reason: b\n"
     "    expires: 2027-01-01\n", 7, "expires", "unknown key"),
    ("waivers:\n  - check: kmsg.xid\n    nodes: gpu[1-\n    until: 2027-01-01\n    owner: a\n    reason: b\n", 3,
     "nodes", "not a host range"),
    ("waivers:\n  - check: kmsg.xid\n    nodes: gpu1\n    gpus: [a]\n    until: 2027-01-01\n    owner: a\n"
     "    reason: b\n", 4, "gpus", "GPU index"),
    ("waivers:\n  - check: kmsg.xid\n    nodes: gpu1\n    until: 2027-01-01\n    owner: ''\n    reason: b\n", 5,
     "owner", "non-empty string"),
])
def test_a_malformed_waiver_names_file_line_and_key(tmp_path, text, line, key, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_waivers(path, KNOWN)
    error = caught.value
    assert (error.file, error.line, error.key) == (str(path), line, key), error.render()
    assert message in error.message


def test_an_impossible_date_anywhere_in_yaml_is_a_config_error_not_a_traceback(tmp_path):
    from nvdeploy.config.inventory import load_inventory
    from nvdeploy.config.profiles import ProfileCatalog

    path = tmp_path / "inv.yaml"
    path.write_text("all:\n  hosts:\n    a: {connection: sim, profile: h100-sxm-8x, note: 2027-02-30}\n")
    with pytest.raises(ConfigError) as caught:
        load_inventory(path, ProfileCatalog())
    assert (caught.value.file, caught.value.line) == (str(path), 3)
    assert "invalid value '2027-02-30'" in caught.value.message


# --- kmsg.xid: by GPU, by Xid; gpus only where findings name a GPU --------------------------------------------------

def xid(node: str, code: int, gpu, verdict: Verdict = Verdict.FAIL) -> Finding:
    return Finding("kmsg.xid", verdict, f"Xid {code} x1 on 0000:2a:00 (GPU{gpu})", node=node, gpu=gpu, code=code)


def test_a_waiver_by_xid_code_leaves_an_xid_79_on_the_same_gpu_counting():
    waivers = load_waivers_text("waivers:\n  - check: kmsg.xid\n    nodes: gpu014\n    xid_codes: [13]\n"
                                "    until: 2027-01-15\n    owner: ops\n    reason: user job\n")
    node = NodeResult("gpu014", (xid("gpu014", 13, 1, Verdict.WARN), xid("gpu014", 79, 1)))
    (waived,) = apply_waivers([node], waivers, UNTIL)
    assert [(f.code, f.verdict) for f in waived.findings] == [(13, Verdict.SKIP), (79, Verdict.FAIL)]
    assert waived.findings[0].waiver is not None and waived.findings[0].waiver.verdict is Verdict.WARN
    assert waivers[0].xid_codes == frozenset({13}) and Waiver.from_dict(waivers[0].to_dict()) == waivers[0]


def test_a_gpu_waiver_of_kmsg_xid_waives_that_gpu_s_xids_only():
    waivers = load_waivers_text("waivers:\n  - check: kmsg.xid\n    nodes: gpu014\n    gpus: [1]\n"
                                "    until: 2027-01-15\n    owner: ops\n    reason: RMA\n")
    node = NodeResult("gpu014", (xid("gpu014", 79, 1), xid("gpu014", 79, 2), xid("gpu014", 79, None)))
    (waived,) = apply_waivers([node], waivers, UNTIL)
    assert [(f.gpu, f.verdict) for f in waived.findings] == [(1, Verdict.SKIP), (2, Verdict.FAIL), (None, Verdict.FAIL)]


@pytest.mark.parametrize("entry, key, message", [
    ("  - check: nccl.all_reduce\n    nodes: gpu1\n    gpus: [0]\n", "gpus",
     "nccl.all_reduce's findings name no GPU, so a waiver of it cannot be narrowed to GPUs"),
    ("  - check: memory.remapped_rows\n    nodes: gpu1\n    xid_codes: [79]\n", "xid_codes",
     "only a waiver of kmsg.xid can name Xids"),
    ("  - check: kmsg.xid\n    nodes: gpu1\n    xid_codes: [seventy-nine]\n", "xid_codes", "must be an Xid number"),
])
def test_a_waiver_that_would_waive_nothing_is_refused(tmp_path, entry, key, message):
    path = write(tmp_path, "waivers:\n" + entry + "    until: 2027-01-15\n    owner: a\n    reason: b\n")
    with pytest.raises(ConfigError) as caught:
        load_waivers(path, KNOWN, {"memory.remapped_rows", "kmsg.xid", "fleet.performance"})
    assert (caught.value.line, caught.value.key) == (4, key) and message in caught.value.message


def test_the_cli_knows_which_checks_name_a_gpu(tmp_path, capsys):
    import click

    from nvdeploy.cli.app import _waivers

    path = write(tmp_path, "waivers:\n  - check: system.sudo\n    nodes: gpu1\n    gpus: [0]\n"
                           "    until: 2099-01-01\n    owner: a\n    reason: b\n")
    with pytest.raises(click.exceptions.Exit) as caught:
        _waivers(path)
    assert caught.value.exit_code == 2
    assert f"{path}:4: key 'gpus': system.sudo's findings name no GPU" in capsys.readouterr().err
    path.write_text(path.read_text().replace("system.sudo", "kmsg.xid"))
    assert [w.gpus for w in _waivers(path)] == [frozenset({0})]
