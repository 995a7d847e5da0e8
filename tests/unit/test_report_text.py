from __future__ import annotations

from nvdeploy.report.text import summary_lines
from nvdeploy.results import Finding, NodeResult, Remediation, RunResult, Verdict


def _node(name: str, *bad: tuple[str, str]) -> NodeResult:
    findings = [Finding("gpu.count", Verdict.PASS, "8 GPUs", node=name)]
    findings += [Finding(check, Verdict.FAIL, summary, node=name, remediation=Remediation.ISOLATE)
                 for check, summary in bad]
    return NodeResult(name, tuple(findings))


def test_one_line_per_group_of_nodes_folded_like_the_matrix():
    nodes = [_node(f"gpu{i:03d}") for i in range(1, 9)]
    nodes[2] = _node("gpu003", ("gpu.persistence", "persistence mode disabled on 8 of 8 GPUs"))
    nodes[5] = _node("gpu006", ("gpu.persistence", "persistence mode disabled on 8 of 8 GPUs"))
    nodes[6] = _node("gpu007", ("kmsg.xid", "Xid 79 " + "x" * 300))
    run = RunResult("r", "c", "validate", tuple(nodes),
                    cluster_findings=(Finding("driver.consistency", Verdict.FAIL, "2 driver versions"),))
    lines = summary_lines(run)
    assert lines[0] == "FAIL  gpu[003,006]  gpu.persistence: persistence mode disabled on 8 of 8 GPUs"
    # The reason is never what gets cut for width; only node output beyond REASON_LIMIT is.
    assert lines[1] == "FAIL  gpu007  kmsg.xid: Xid 79 " + "x" * 300
    assert lines[2] == "PASS  gpu[001-002,004-005,008]"
    assert lines[3] == "FAIL  cluster  driver.consistency: 2 driver versions"


def test_a_reason_is_cut_only_beyond_its_limit():
    from nvdeploy.report.text import REASON_LIMIT

    run = RunResult("r", "c", "validate", (_node("gpu001", ("kmsg.xid", "Xid 13 name=" + "y" * 2000)),))
    (line,) = summary_lines(run)
    assert line.startswith("FAIL  gpu001  kmsg.xid: Xid 13 name=yyy") and line.endswith("\u2026")
    assert len(line) == len("FAIL  gpu001  kmsg.xid: ") + REASON_LIMIT


def test_a_node_line_keeps_its_node_list_short_on_scattered_failures_of_a_large_fleet() -> None:
    """10,000 nodes, every 7th failing: the PASS and FAIL lists folded to ~1,800 and ~700 characters each; a line
    shows the first ranges and the count (the FAIL/ERROR hosts line keeps the whole list for pdsh/clush)."""
    from nvdeploy.report.text import HOSTS_LIMIT, folded_brief, node_summary_lines

    nodes = [NodeResult(f"gpu{i:05d}", (Finding("gpu.count", Verdict.FAIL if i % 7 == 0 else Verdict.PASS,
                                                 "7 of 8 GPUs" if i % 7 == 0 else "8 of 8 GPUs"),))
             for i in range(1, 10001)]
    lines = node_summary_lines(nodes)
    assert [line.split()[0] for line in lines] == ["FAIL", "PASS"]
    assert lines[0].startswith("FAIL  gpu[00007,00014,00021,") and "(1,428 nodes)  gpu.count: 7 of 8 GPUs" in lines[0]
    assert lines[1].startswith("PASS  gpu[00001-00006,00008-00013,") and lines[1].endswith("(8,572 nodes)")
    assert all(len(line) <= 160 for line in lines), [len(line) for line in lines]
    assert folded_brief(["gpu1", "gpu2", "gpu3"]) == "gpu[1-3]"
    assert len(folded_brief([f"n{i}" for i in range(0, 5000, 2)])) <= HOSTS_LIMIT + len(",...] (2,500 nodes)")


def test_nodes_are_grouped_only_when_their_findings_are_the_same():
    """Two trays with different faults of one check, and a Xid 13 (MONITOR) beside a Xid 63
    (RESET_GPU), are separate lines; nothing is quoted as an example for nodes it does not describe."""
    zero = "GPU0: NVLink fabric registration Completed but clusterUuid 00000000-0000-0000-0000-000000000000 (all zero)"
    sick = "GPU2: NVLink fabric registration Completed but health Unhealthy; bandwidth Degraded"
    trays = [NodeResult(name, (Finding("nvlink.fabric", Verdict.FAIL, summary, node=name, gpu=gpu,
                                       remediation=Remediation.ISOLATE),))
             for name, summary, gpu in (("tray02", zero, 0), ("tray03", sick, 2), ("tray04", zero, 0))]
    lines = summary_lines(RunResult("r", "c", "validate", tuple(trays)))
    assert lines == [f"FAIL  tray[02,04]  nvlink.fabric: {zero}", f"FAIL  tray03  nvlink.fabric: {sick}"]
    xids = [NodeResult("gpu006", (Finding("kmsg.xid", Verdict.WARN, "Xid 63 x1 on 0000:3a:00 (GPU2): row remapping",
                                          node="gpu006", gpu=2, code=63, remediation=Remediation.RESET_GPU),)),
            NodeResult("gpu014", (Finding("kmsg.xid", Verdict.WARN, "Xid 13 x1 on 0000:2a:00 (GPU1): app fault",
                                          node="gpu014", gpu=1, code=13, remediation=Remediation.MONITOR),))]
    lines = summary_lines(RunResult("r", "c", "validate", tuple(xids)))
    assert lines == ["WARN  gpu006  kmsg.xid: Xid 63 x1 on 0000:3a:00 (GPU2): row remapping",
                     "WARN  gpu014  kmsg.xid: Xid 13 x1 on 0000:2a:00 (GPU1): app fault"]
    assert not any("e.g." in line for line in lines)
