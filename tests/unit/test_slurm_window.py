"""The Slurm steps around a run (nvdeploy/slurm/window.py) with a scripted scheduler: busy marking, the
reservation, nodes resumed inside it, facts and findings on the run, and a scheduler that stops answering."""

from __future__ import annotations

from typing import Optional, Sequence

import pytest

from nvdeploy.config.inventory import Host, Inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.results import Finding, NodeResult, RunResult, Verdict
from nvdeploy.slurm.client import SlurmClient, SlurmError
from nvdeploy.slurm.drain import Policy
from nvdeploy.slurm.nodes import SlurmNode
from nvdeploy.slurm.window import BUSY_VAR, SlurmRunOptions, SlurmWindow, exit_code

OURS = "nvdeploy 20261130T010000Z-aaaaaa: gpu.count 7/8"


class Scheduler(SlurmClient):
    def __init__(self, nodes: list[SlurmNode], jobs: Optional[dict] = None) -> None:
        super().__init__()
        self.state = {n.name: n for n in nodes}
        self.job_map = jobs or {}
        self.log: list[str] = []
        self.down = False

    def nodes(self, names: Optional[str] = None) -> list[SlurmNode]:
        if self.down:
            raise SlurmError(["sinfo"], "Unable to contact slurm controller (connect failure)")
        return list(self.state.values())

    def jobs_on(self, nodes: Sequence[str]) -> dict[str, list[str]]:
        return {n: j for n, j in self.job_map.items() if n in nodes}

    def drain(self, node: str, reason: str) -> None:  # type: ignore[override]
        if self.down:
            raise SlurmError(["scontrol"], "slurm_update error: Unable to contact slurm controller")
        self.log.append(f"drain {node} {reason}")
        old = self.state[node]
        self.state[node] = SlurmNode(node, old.state, ("DRAIN",), reason, "root", old.gres)

    def resume(self, node: str) -> None:  # type: ignore[override]
        self.log.append(f"resume {node}")
        old = self.state[node]
        self.state[node] = SlurmNode(node, old.state, (), "", "", old.gres)

    def create_reservation(self, name: str, nodes: Sequence[str], minutes: int, user: str) -> None:  # type: ignore[override]
        self.log.append(f"create {name} {','.join(nodes)} {minutes}")

    def delete_reservation(self, name: str) -> None:  # type: ignore[override]
        self.log.append(f"delete {name}")


def node(name: str, state: str = "idle", flags: tuple = (), reason: str = "", alloc: int = 0) -> SlurmNode:
    return SlurmNode(name, state, flags, reason, "ops" if reason else "", "gpu:8", ("debug",), (), alloc)


def inventory(*names: str) -> Inventory:
    hosts = tuple(Host(n, {"profile": "h100-sxm-8x", "connection": "sim"}) for n in names)
    return Inventory("c", hosts, {"all": names})


def run_of(verdicts: dict[str, Verdict]) -> RunResult:
    nodes = tuple(NodeResult(n, (Finding("gpu.count", v, "x", node=n, observed=7 if v is Verdict.FAIL else 8,
                                         expected=8),), profile="h100-sxm-8x@1") for n, v in verdicts.items())
    return RunResult("20261201T000000Z-abcdef", "c", "validate", nodes)


def test_busy_nodes_marked_for_heavy_levels_only_unless_drained_and_empty() -> None:
    sched = Scheduler([node("n1", "mixed", alloc=4), node("n2"), node("n3", "idle", ("DRAIN",), "x")],
                      {"n1": ["17 (alice)"]})
    window = SlurmWindow(inventory("n1", "n2", "n3"), SlurmRunOptions(), sched)
    marked = window.open("r", "standard")
    assert marked.host("n1").vars[BUSY_VAR] == "Slurm job(s) running: 17 (alice) (node mixed); heavy checks not run"
    assert BUSY_VAR not in marked.host("n2").vars and BUSY_VAR not in marked.host("n3").vars
    assert marked.host("n2").vars["slurm_node"]["state"] == "idle"
    quick = SlurmWindow(inventory("n1", "n2"), SlurmRunOptions(), sched).open("r", "quick")
    assert BUSY_VAR not in quick.host("n1").vars
    allowed = SlurmWindow(inventory("n1"), SlurmRunOptions(allow_busy=True), sched).open("r", "full")
    assert BUSY_VAR not in allowed.host("n1").vars


def test_unknown_node_is_refused_before_anything_changes() -> None:
    sched = Scheduler([node("n1")])
    window = SlurmWindow(inventory("n1", "gpu9"), SlurmRunOptions(policy=Policy(drain_failed=True)), sched)
    with pytest.raises(SlurmError, match="Slurm knows no node gpu9"):
        window.open("r", "quick")
    assert sched.log == []


def test_window_reopens_our_drained_nodes_and_settles_them() -> None:
    sched = Scheduler([node("n1"), node("n2", "idle", ("DRAIN",), OURS), node("n3", "idle", ("DRAIN",), OURS),
                       node("n4", "idle", ("DRAIN",), "ops: PSU")])
    options = SlurmRunOptions(policy=Policy(drain_failed=True, resume_passed=True), maintenance_s=3600,
                              via="slurm")
    window = SlurmWindow(inventory("n1", "n2", "n3", "n4"), options, sched)
    window.open("20261201T000000Z-abcdef", "quick")
    assert sched.log == ["create nvdeploy-20261201T000000Z-abcdef n1,n2,n3,n4 60", "resume n2", "resume n3"]
    run, failed = window.finish(run_of({"n1": Verdict.PASS, "n2": Verdict.PASS, "n3": Verdict.FAIL,
                                        "n4": Verdict.ERROR}), ProfileCatalog(), False)
    assert not failed
    assert sched.log[3:] == ["drain n3 nvdeploy 20261201T000000Z-abcdef: gpu.count 7/8",
                             "delete nvdeploy-20261201T000000Z-abcdef"]
    entry = run.phases[-1]
    actions = {a["node"]: a for a in entry["actions"]}
    assert actions["n2"]["action"] == "resume" and actions["n2"]["status"] == "done"
    assert actions["n4"]["action"] == "leave"
    assert entry["reservation"]["deleted"] and "1 resumed, 1 drained, 1 left drained" in entry["summary"]
    gres = [f for n in run.nodes for f in n.findings if f.check == "slurm.gres"]
    assert [f.verdict for f in gres] == [Verdict.PASS] * 4 and run.nodes[0].facts["slurm"]["gres"] == "gpu:8"


def test_reopened_node_not_passing_is_drained_again_with_its_old_reason() -> None:
    sched = Scheduler([node("n2", "idle", ("DRAIN",), OURS)])
    options = SlurmRunOptions(policy=Policy(drain_failed=True, resume_passed=True), maintenance_s=600, via="slurm")
    window = SlurmWindow(inventory("n2"), options, sched)
    window.open("r", "quick")
    window.finish(run_of({"n2": Verdict.ERROR}), ProfileCatalog(), False)
    assert f"drain n2 {OURS}" in sched.log


def test_scheduler_gone_after_validation_is_error_and_exit_3() -> None:
    sched = Scheduler([node("n1"), node("n2")])
    window = SlurmWindow(inventory("n1", "n2"), SlurmRunOptions(policy=Policy(drain_failed=True)), sched)
    window.open("r", "quick")
    sched.down = True
    run, failed = window.finish(run_of({"n1": Verdict.PASS, "n2": Verdict.FAIL}), ProfileCatalog(), False)
    assert failed
    (finding,) = [f for f in run.cluster_findings if f.check == "slurm.actions"]
    assert finding.verdict is Verdict.ERROR and "Unable to contact slurm controller" in finding.summary
    assert exit_code(1, failed) == 3 and exit_code(0, failed) == 3 and exit_code(130, failed) == 130
    assert exit_code(1, False) == 1


def test_gres_count_against_the_profile() -> None:
    from nvdeploy.slurm.findings import gres_finding

    ok = gres_finding(SlurmNode("g1", "idle", gres="gpu:h100:8(S:0-1)"), 8, "h100-sxm-8x@1")
    assert ok.verdict is Verdict.PASS and ok.summary == "Slurm's GRES gpu:h100:8(S:0-1): 8 GPUs (h100), as the " \
                                                         "profile expects"
    short = gres_finding(SlurmNode("g1", "idle", gres="gpu:h100:7"), 8)
    assert (short.verdict, short.observed, short.expected) == (Verdict.FAIL, 7, 8)
    none = gres_finding(SlurmNode("g1", "idle", gres=""), 8)
    assert none.verdict is Verdict.FAIL and "no GPU GRES" in none.summary
    assert gres_finding(SlurmNode("g1", "idle", gres="gpu:8"), None).verdict is Verdict.SKIP
