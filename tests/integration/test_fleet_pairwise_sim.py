"""fleet.performance on the multi-node pairwise figure: 8 simulated nodes at level full with --nccl-pattern
pairwise. A node at 92% (slower:92) is below the multi-node floor too: the stage localises it and fleet.performance
FAILs it on nccl_pair_busbw. A node at 96% (slower:96) meets the floor: its pair is below the other pairs, both
members are re-tested with a node of the best pair, and only the slow node is named (WARN); its partner is not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.levels import load_levels
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.multinode import PAIR_FACT
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import Verdict
from nvdeploy.runner.engine import EngineOptions

CATALOG = ProfileCatalog()
CHECKS = tuple(c for c in load_levels()["full"] if c != "rdma.gpudirect")
SLOW, PARTNER = "gpu03", "gpu04"


def run(tmp_path: Path, faults: dict[str, list[str]], count: int = 8):
    lines = ["all:", "  vars: {connection: sim, profile: h100-sxm-8x, cluster: pairs, dcgm_timeout: 30, "
             "nccl_timeout: 30}", "  hosts:"]
    for i in range(1, count + 1):
        name = f"gpu{i:02d}"
        lines.append(f"    {name}: {{sim_faults: {json.dumps(faults.get(name, []))}}}")
    path = tmp_path / "pairs.yaml"
    path.write_text("\n".join(lines) + "\n")
    options = EngineOptions(checks=CHECKS, multinode_pattern="pairwise")
    return run_validate(load_inventory(path, CATALOG), CATALOG, options, tmp_path / "r", level="full")





@pytest.mark.parametrize("fault, verdict, stage", [("slower:92", Verdict.FAIL, {Verdict.PASS, Verdict.FAIL}),
                                                   ("slower:96", Verdict.WARN, {Verdict.PASS})])
def test_the_slow_node_is_named_on_the_pair_figure_and_its_partner_is_not(tmp_path, fault, verdict, stage):
    outcome = run(tmp_path, {SLOW: [fault]})
    facts = {n.name: n.facts for n in outcome.run.nodes}
    assert all(PAIR_FACT in f for f in facts.values())
    healthy = facts["gpu01"][PAIR_FACT]
    assert facts[PARTNER][PAIR_FACT] == healthy  # re-tested with a node of the best pair
    assert facts[SLOW][PAIR_FACT] < healthy * 0.97
    named = {n.name: [f for f in n.findings if f.check == "fleet.performance" and "two-node" in f.summary]
             for n in outcome.run.nodes}
    assert [f.verdict for f in named[SLOW]] == [verdict]
    assert all(not found for name, found in named.items() if name != SLOW)
    cluster = next(f for f in outcome.run.cluster_findings
                   if f.check == "fleet.performance" and f.observed["figure"] == "nccl_pair_busbw")
    assert [o["node"] for o in cluster.observed["outliers"]] == [SLOW]
    # Above the floor the stage's own verdicts stay PASS: the re-tests change none.
    multinode = {n.name: {f.verdict for f in n.findings if f.check == "nccl.multinode"} for n in outcome.run.nodes}
    assert set().union(*multinode.values()) == stage and multinode[PARTNER] == {Verdict.PASS}


def test_healthy_pairs_are_not_re_tested(tmp_path):
    outcome = run(tmp_path, {}, count=4)
    evidence = sorted(p.name for p in (outcome.run_dir / "evidence" / "_cluster").iterdir())
    assert len([e for e in evidence if e.startswith("nccl_multinode")]) == 2
