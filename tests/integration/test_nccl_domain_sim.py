"""nccl.domain over simulated GB200 NVL72 racks at level full, in-process. inventories/gb200-2rack.yaml (36 trays,
both racks short of healthy trays, one slow tray): the short racks are run and reported, SKIP, since the profile's
floor is of a 72-rank run; the InfiniBand run across the racks is reported (SKIP with its figure: the tray profile
states no multi-node InfiniBand floor). A whole rack with one slow tray FAILs its floor and the comparison of its
pairs names that tray, never its partner; a domain of two trays keeps NCCL's algorithm and is not judged."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.levels import load_levels
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import Remediation, Verdict
from nvdeploy.runner.engine import EngineOptions

CATALOG = ProfileCatalog()
ROOT = Path(__file__).resolve().parents[2]
FAULTS = """        tray03:
          sim_faults: [fabric_unhealthy]"""


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    base = tmp_path_factory.mktemp("nccl-domain")
    text = (ROOT / "inventories" / "gb200-2rack.yaml").read_text()
    assert FAULTS in text
    inventory = base / "gb200-2rack.yaml"
    inventory.write_text(text.replace(FAULTS, FAULTS + "\n        tray10:\n          sim_faults: [mnnvl_slow]"))
    return run_validate(load_inventory(inventory, CATALOG), CATALOG, EngineOptions(checks=load_levels()["full"]),
                        base / "reports", level="full")


def domain_findings(outcome):
    return [f for f in outcome.run.cluster_findings if f.check == "nccl.domain"]


def test_short_racks_have_no_sourced_floor_and_are_reported_never_judged(outcome):
    # rack1 runs over 15 healthy trays (60 ranks), rack2's clique over 16 (64): the profile's 798 GB/s floor is of a
    # 72-rank run, and no figure is published for other sizes, so neither is judged against it (SKIP, never PASS).
    rack1 = next(f for f in domain_findings(outcome) if f.summary.startswith("rack rack1:"))
    assert rack1.verdict is Verdict.SKIP and "no floor in the profile for 60 ranks" in rack1.summary
    assert "72-rank run" in rack1.summary and rack1.observed is not None
    # tray01-02 never registered, tray03 failed its fabric health: run over tray[04-18], and said so.
    assert "tray[04-18]" in rack1.summary and "tray03 left out" in rack1.summary and "16 of 18" in rack1.summary
    rack2 = next(f for f in domain_findings(outcome) if f.summary.startswith("rack rack2 (clique 32766"))
    assert rack2.verdict is Verdict.SKIP and "for 64 ranks" in rack2.summary and "tray[19,22-36]" in rack2.summary
    # tray21 registered with a clique of its own: a domain of one tray, not run (nvlink.domain FAILs it).
    alone = next(f for f in domain_findings(outcome) if f.summary.startswith("rack rack2 (clique 32765"))
    assert alone.verdict is Verdict.SKIP
    judged = {(n.name, f.verdict) for n in outcome.run.nodes for f in n.findings
              if f.check == "nccl.domain" and f.verdict is not Verdict.SKIP}
    assert judged == set()


WHOLE = """all:
  vars: {cluster: gb200-whole, connection: sim, profile: gb200-nvl72, driver_version: "580.173.02"}
  children:
    rack1:
      vars: {rack: rack1}
      hosts:
        "a[01:18]": {}
        a10: {sim_faults: [mnnvl_slow]}
    rack2: {vars: {rack: rack2}, hosts: {"b[1:2]": {}}}
"""


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """A whole rack (18 trays, 72 ranks: the floor's own size) with one slow tray, and a domain of two trays."""
    base = tmp_path_factory.mktemp("nccl-domain-whole")
    (base / "whole.yaml").write_text(WHOLE)
    return run_validate(load_inventory(base / "whole.yaml", CATALOG), CATALOG,
                        EngineOptions(checks=("nvlink.fabric", "nccl.domain")), base / "reports", level="full")


def test_a_whole_rack_below_its_floor_names_the_slow_tray_never_its_partner(whole):
    mine = {n.name: [f for f in n.findings if f.check == "nccl.domain"] for n in whole.run.nodes}
    rack1 = next(f for f in domain_findings(whole) if f.summary.startswith("rack rack1:") and "floor" in f.summary)
    assert rack1.verdict is Verdict.FAIL and rack1.observed < 798
    assert sorted(name for name, found in mine.items() if any(f.verdict is Verdict.FAIL for f in found)) == ["a10"]
    (a10,) = mine["a10"]
    assert a10.remediation is Remediation.ISOLATE and "its partner cleared" in a10.summary
    # a10's pair partner (a09) ran slow with it, and is cleared by its re-test with a third tray: PASS, not FAIL.
    (a09,) = mine["a09"]
    assert a09.verdict is Verdict.PASS and "cleared" in a09.summary
    localised = [f for f in domain_findings(whole) if "localised to" in f.summary]
    assert len(localised) == 1 and localised[0].observed == "a10"
    assert all(f.verdict is Verdict.PASS for name, found in mine.items() if name.startswith("a") and name != "a10"
               for f in found)


def test_a_domain_of_two_trays_is_not_judged_on_the_rack_floor(whole):
    # 8 ranks: the 72-rank floor does not hold (the simulator's healthy pair is ~753 GB/s, below 798): SKIP.
    pair = next(f for f in domain_findings(whole) if f.summary.startswith("rack rack2"))
    assert pair.verdict is Verdict.SKIP and "for 8 ranks" in pair.summary and pair.observed < 798
    assert all(f.verdict is Verdict.SKIP for n in whole.run.nodes if n.name.startswith("b") for f in n.findings
               if f.check == "nccl.domain")


def test_pairs_of_trays_keep_nccls_own_algorithm(tmp_path, monkeypatch):
    # The multi-node stage sets NCCL_ALGO=RING on its InfiniBand pairs; over multi-node NVLink ring busbw is bounded
    # by one GPU's link, and the floor's run used NCCL's choice, so no nccl.domain run forces it.
    from nvdeploy.phases import multinode

    argvs: list = []
    real = multinode.mpirun_argv
    monkeypatch.setattr(multinode, "mpirun_argv", lambda *a, **k: argvs.append(real(*a, **k)) or argvs[-1])
    (tmp_path / "two.yaml").write_text(WHOLE.replace('"a[01:18]": {}', '"a[01:02]": {}').replace(
        "        a10: {sim_faults: [mnnvl_slow]}\n", ""))
    run_validate(load_inventory(tmp_path / "two.yaml", CATALOG), CATALOG,
                 EngineOptions(checks=("nvlink.fabric", "nccl.domain")), tmp_path / "reports", level="full")
    domain = [a for a in argvs if "NCCL_MNNVL_ENABLE=1" in a]
    assert len(domain) == 2 and all(len([w for w in a if "," in w and ":" in w][0].split(",")) == 2 for a in domain)
    assert not any(w.startswith("NCCL_ALGO") for a in domain for w in a)
    # The InfiniBand run across the two domains is a pair too: it keeps its ring.
    assert any("NCCL_ALGO=RING" in a for a in argvs if "NCCL_MNNVL_ENABLE=0" in a)


def test_the_inter_domain_run_over_infiniband_is_reported(outcome):
    inter = [f for f in domain_findings(outcome) if f.summary.startswith("inter-domain")]
    assert len(inter) == 1
    assert inter[0].verdict is Verdict.SKIP and "NCCL_MNNVL_ENABLE=0 NCCL_NVLS_ENABLE=0" in inter[0].summary
    assert "no floor in the profile" in inter[0].summary and "tray[04,19]" in inter[0].summary
    assert inter[0].observed is not None and inter[0].evidence


def test_gb300_racks_without_a_floor_are_run_and_skip_never_pass(tmp_path):
    inventory = tmp_path / "gb300.yaml"
    inventory.write_text("""all:
  vars: {cluster: gb300-small, connection: sim, profile: gb300-nvl72, driver_version: "580.173.02"}
  children:
    rack1: {vars: {rack: rack1}, hosts: {"t[1:3]": {}}}
    rack2: {vars: {rack: rack2}, hosts: {"t[4:6]": {}}}
""")
    hosts = load_inventory(inventory, CATALOG)
    alone = run_validate(hosts, CATALOG, EngineOptions(checks=("nccl.domain",)), tmp_path / "alone", level="full")
    # The domains are what the GPUs registered with: without nvlink.fabric's facts nothing is run.
    assert [(f.verdict, "with nvlink.fabric" in f.summary) for f in domain_findings(alone)] == [(Verdict.SKIP, True)]
    outcome = run_validate(hosts, CATALOG, EngineOptions(checks=("nvlink.fabric", "nccl.domain")),
                           tmp_path / "reports", level="full")
    findings = domain_findings(outcome)
    assert [f.verdict for f in findings] == [Verdict.SKIP] * 3
    assert all("no floor in the profile" in f.summary and f.observed for f in findings)
    assert all(f.verdict is not Verdict.PASS for n in outcome.run.nodes for f in n.findings if f.check == "nccl.domain")


def test_no_domain_run_starts_after_the_deadline_and_none_passes(tmp_path):
    import time

    from nvdeploy.phases.domain import run_domains
    from nvdeploy.results import ErrorReason
    from nvdeploy.runner.record import RunRecorder

    inventory = tmp_path / "gb200.yaml"
    inventory.write_text("""all:
  vars: {cluster: gb200-small, connection: sim, profile: gb200-nvl72, driver_version: "580.173.02"}
  children:
    rack1: {vars: {rack: rack1}, hosts: {"t[1:3]": {}}}
""")
    hosts = load_inventory(inventory, CATALOG)
    options = EngineOptions(checks=("nvlink.fabric",))
    fabric = run_validate(hosts, CATALOG, options, tmp_path / "fabric", level="quick")
    nodes, cluster = run_domains(list(fabric.run.nodes), list(hosts.hosts), CATALOG, options,
                                 RunRecorder(tmp_path / "late"), deadline_at=time.monotonic() - 1)
    assert [(f.verdict, f.reason) for f in cluster] == [(Verdict.ERROR, ErrorReason.NOT_RUN)]
    assert "--deadline" in cluster[0].summary
    mine = [(n.name, f.verdict, f.reason) for n in nodes for f in n.findings if f.check == "nccl.domain"]
    assert mine == [(f"t{i}", Verdict.ERROR, ErrorReason.NOT_RUN) for i in (1, 2, 3)]


def test_multinode_nccl_between_trays_runs_over_infiniband(outcome):
    """nccl.multinode judges the inter-node network: on NVL72 trays its mpirun turns multi-node NVLink off, or NCCL
    would carry the trays of one rack over NVLink and the InfiniBand verdict would be about NVLink."""
    runs = [f for f in outcome.run.cluster_findings
            if f.check == "nccl.multinode" and "all_reduce_perf on" in f.summary]
    assert runs, [f.summary for f in outcome.run.cluster_findings if f.check == "nccl.multinode"]
    assert all("NCCL_MNNVL_ENABLE=0 NCCL_NVLS_ENABLE=0" in f.summary for f in runs), [f.summary for f in runs]
