"""rdma.gpudirect rail by rail over a simulated 16-node 8x H100 fleet (8 compute NICs, each PIX to its GPU): one rail
slow but above the floor (rail_slow:mlx5_5:92, named by fleet.performance against the same rail of the peers), one
rail below the floor (rail_slow:mlx5_2:60, named by rdma.gpudirect after a re-test with another partner), one port
down (rail_down:mlx5_3, named from ibstat's port state, that rail not started). Each is named by node, GPU and NIC, its
partners and every other rail are not."""

from __future__ import annotations

import json

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases import gpudirect
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import Verdict
from nvdeploy.runner.engine import EngineOptions

CATALOG = ProfileCatalog()
CHECKS = ("driver.loaded", "ib.ports", "rdma.rails", "rdma.gpudirect", "fleet.performance")
SLOWISH, SLOW, DOWN = "gpu03", "gpu07", "gpu11"
FAULTS = {SLOWISH: ["rail_slow:mlx5_5:92"], SLOW: ["rail_slow:mlx5_2:60"], DOWN: ["rail_down:mlx5_3"]}


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        # The simulated server needs no head start to be listening: each wave then costs no real second.
        patch.setattr(gpudirect, "HEAD_START_S", 0.01)
        return _run(tmp_path_factory)


def _run(tmp_path_factory):
    base = tmp_path_factory.mktemp("rails")
    lines = ["all:", "  vars: {connection: sim, profile: h100-sxm-8x, cluster: rails}", "  hosts:"]
    for i in range(1, 17):
        name = f"gpu{i:02d}"
        lines.append(f"    {name}: {{sim_faults: {json.dumps(FAULTS.get(name, []))}}}")
    path = base / "fleet.yaml"
    path.write_text("\n".join(lines) + "\n")
    return run_validate(load_inventory(path, CATALOG), CATALOG, EngineOptions(checks=CHECKS), base / "r",
                        level="full")


def bad(outcome, check: str) -> dict[str, list]:
    return {n.name: sorted((f.gpu, f.verdict.value) for f in n.findings
                           if f.check == check and f.verdict is not Verdict.PASS)
            for n in outcome.run.nodes if any(f.check == check and f.verdict is not Verdict.PASS for f in n.findings)}


def test_every_node_has_eight_pix_rails_in_one_wave(outcome):
    for node in outcome.run.nodes:
        rails = node.facts["gpudirect_rails"]
        assert [(r["gpu"], r["nic"], r["link"]) for r in rails["rails"]] == \
            [(k, f"mlx5_{k}", "PIX") for k in range(8)], node.name
        assert rails["waves"] == [list(range(8))] and rails["unpaired"] == []  # mlx5_bond_0 is no compute NIC
        assert {f.verdict for f in node.findings if f.check == "rdma.rails"} == {Verdict.PASS}


def test_only_the_rail_below_the_floor_and_the_down_port_fail_gpudirect(outcome):
    assert bad(outcome, "rdma.gpudirect") == {SLOW: [(2, "FAIL"), (2, "FAIL")], DOWN: [(3, "FAIL")]}
    slow = [f.summary for f in next(n for n in outcome.run.nodes if n.name == SLOW).findings
            if f.check == "rdma.gpudirect" and f.verdict is Verdict.FAIL]
    # Its pair's run, then the re-test with a node that passed that rail: both on GPU2's rail, mlx5_2 port 1.
    assert all("rail GPU2 mlx5_2 port 1" in s and "< 320" in s for s in slow), slow
    assert len({s.split(" rail ")[0] for s in slow}) == 2, slow
    (down,) = [f for f in next(n for n in outcome.run.nodes if n.name == DOWN).findings
               if f.check == "rdma.gpudirect" and f.verdict is Verdict.FAIL]
    assert "rail GPU3 mlx5_3 port 1" in down.summary and f"{DOWN}'s mlx5_3 port 1 is Down (ibstat)" in down.summary
    # Not started: a perftest server facing a client whose port is down would wait out its whole timeout.
    assert "not started" in down.summary and down.evidence is None
    ran = [p.name for p in (outcome.run_dir / "evidence" / "_cluster").glob("gpudirect_*mlx5_3_*.out")]
    assert ran and not any(DOWN in name for name in ran), ran


def test_the_down_port_is_the_one_ib_ports_names(outcome):
    assert bad(outcome, "ib.ports") == {DOWN: [(None, "FAIL")]}
    (ports,) = [f for f in next(n for n in outcome.run.nodes if n.name == DOWN).findings if f.check == "ib.ports"]
    assert "mlx5_3 port 1: Down" in ports.summary


def test_the_slowish_rail_is_named_against_the_same_rail_of_its_peers(outcome):
    fleet = {name: found for name, found in bad(outcome, "fleet.performance").items()}
    assert fleet == {SLOWISH: [(5, "FAIL")]}, fleet
    (finding,) = [f for f in next(n for n in outcome.run.nodes if n.name == SLOWISH).findings
                  if f.check == "fleet.performance"]
    assert "rail GPU5/mlx5_5" in finding.summary
    figures = {n.name: n.facts["rdma_gpudirect_rail_gbps"] for n in outcome.run.nodes}
    # Every rail measured (the partners of the bad rails by their re-tests), but the two that never passed.
    missing = {name: sorted({f"GPU{k}/mlx5_{k}" for k in range(8)} - set(v)) for name, v in figures.items()}
    assert {n: m for n, m in missing.items() if m} == {SLOW: ["GPU2/mlx5_2"], DOWN: ["GPU3/mlx5_3"]}, missing
    assert figures[SLOWISH]["GPU5/mlx5_5"] < 0.93 * figures[SLOWISH]["GPU4/mlx5_4"]
    # The node's best figure is untouched by one slow rail: the per-node figure names nobody.
    assert not any("node's best" in f.summary for n in outcome.run.nodes for f in n.findings
                   if f.check == "fleet.performance")


def test_nothing_else_is_named(outcome):
    named = {(n.name, f.check) for n in outcome.run.nodes for f in n.findings if f.verdict is not Verdict.PASS}
    assert named == {(SLOW, "rdma.gpudirect"), (DOWN, "rdma.gpudirect"), (DOWN, "ib.ports"),
                     (SLOWISH, "fleet.performance")}, named
