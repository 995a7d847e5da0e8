"""fleet.performance on the figures of a burn-in and of GPUDirect RDMA, over 10 simulated nodes whose healthy
figures spread by +-1% (fleet_spread): one GPU clocking at 92% under the burn-in's load (slow_clock:3:92), one GPU
8 C hotter than the same GPU of the others (hot_gpu:5:8), and one node at 94% of its peers on every figure
(slower:94), whose GPUDirect pair is re-tested so that its partner is not named. Exactly those are named."""

from __future__ import annotations

import json

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.levels import load_levels
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import Verdict
from nvdeploy.runner.engine import EngineOptions

CATALOG = ProfileCatalog()
CHECKS = (*load_levels()["quick"], "burnin.stability", "burnin.load", "rdma.gpudirect", "fleet.performance")
FAULTS = {"gpu03": ["slow_clock:3:92"], "gpu06": ["hot_gpu:5:8"], "gpu08": ["slower:94"]}


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    base = tmp_path_factory.mktemp("fleet-burnin")
    lines = ["all:", "  vars: {connection: sim, profile: h100-sxm-8x, cluster: fleet, driver_version: \"550.90.07\"}",
             "  hosts:"]
    for i in range(1, 11):
        name = f"gpu{i:02d}"
        lines.append(f"    {name}: {{sim_faults: {json.dumps(['fleet_spread', *FAULTS.get(name, [])])}}}")
    path = base / "fleet.yaml"
    path.write_text("\n".join(lines) + "\n")
    return run_validate(load_inventory(path, CATALOG), CATALOG,
                        EngineOptions(checks=CHECKS, burn_in_s=300.0, burn_in_interval_s=5.0), base / "r",
                        level="quick")


def named(outcome, figure_words: str) -> dict[str, list]:
    # A node-wide figure has no GPU (None, first), a per-GPU or per-rail one its GPU.
    return {n.name: sorted(((f.gpu, f.verdict.value) for f in n.findings
                            if f.check == "fleet.performance" and figure_words in f.summary),
                           key=lambda item: (item[0] is not None, item[0] or 0, item[1]))
            for n in outcome.run.nodes
            if any(f.check == "fleet.performance" and figure_words in f.summary for f in n.findings)}


def cluster(outcome, figure: str) -> list:
    return [f for f in outcome.run.cluster_findings if f.check == "fleet.performance"
            and isinstance(f.observed, dict) and f.observed.get("figure") == figure]


def test_the_slow_gpu_under_load_and_the_slower_node_are_named_on_the_clock(outcome):
    clock = named(outcome, "SM clock under the burn-in's load")
    assert clock["gpu03"] == [(3, "FAIL")], clock
    assert set(clock) == {"gpu03", "gpu08"} and len(clock["gpu08"]) == 8, clock  # gpu08: every GPU at 94%
    (summary,) = cluster(outcome, "burnin_sm_clock")
    assert summary.observed["nodes"] == 10 and summary.observed["samples"] == 80


def test_the_hot_gpu_warns_against_its_slot_and_nothing_else_does(outcome):
    hot = named(outcome, "GPU temperature under the burn-in's load")
    assert hot == {"gpu06": [(5, "WARN")]}, hot
    slots = cluster(outcome, "burnin_temperature")
    assert len(slots) == 8 and [f.verdict for f in slots].count(Verdict.WARN) == 1
    gpu06 = next(n for n in outcome.run.nodes if n.name == "gpu06")
    # The throttle rules see nothing wrong: the hot GPU is only an outlier among its peers.
    assert {f.verdict for f in gpu06.findings if f.check == "burnin.stability"} == {Verdict.PASS}


def test_gpudirect_names_the_slower_node_not_its_partner(outcome):
    rdma = named(outcome, "GPUDirect RDMA write bandwidth")
    assert set(rdma) == {"gpu08"}, rdma
    # Its best figure and each of its 8 rails against the same rail of the others (slower:94 slows them all).
    assert [gpu for gpu, _ in rdma["gpu08"]] == [None, *range(8)], rdma
    figures = {n.name: n.facts.get("rdma_gpudirect_gbps") for n in outcome.run.nodes}
    assert all(isinstance(v, float) for v in figures.values()), figures
    partner = next(f.summary for f in outcome.run.cluster_findings if f.check == "rdma.gpudirect"
                   and "gpu08" in f.summary)
    assert partner, outcome.run.cluster_findings
    healthy = sorted(v for name, v in figures.items() if name != "gpu08")
    assert figures["gpu08"] < healthy[0] * 0.97, figures
