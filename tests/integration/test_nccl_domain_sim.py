"""nccl.domain over two simulated GB200 NVL72 racks (inventories/gb200-2rack.yaml, 36 trays) at level full,
in-process, with one tray's multi-node NVLink slow (mnnvl_slow): the slow rack's all_reduce is bisected down to
exactly that tray, the other rack PASSes over its healthy trays, and the InfiniBand run across the racks is
reported (SKIP with its figure: the tray profile states no multi-node InfiniBand floor)."""

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


def test_the_slow_tray_and_only_it_is_named(outcome):
    named = sorted((n.name, f.verdict.value) for n in outcome.run.nodes for f in n.findings
                   if f.check == "nccl.domain" and f.verdict is not Verdict.PASS)
    assert named == [("tray10", "FAIL")]
    tray10 = next(f for n in outcome.run.nodes if n.name == "tray10" for f in n.findings if f.check == "nccl.domain")
    assert tray10.remediation is Remediation.ISOLATE and "localised by bisection" in tray10.summary
    localised = [f for f in domain_findings(outcome) if "localised to" in f.summary]
    assert len(localised) == 1 and localised[0].observed == "tray10" and localised[0].summary.startswith("rack rack1")


def test_rack1_is_low_over_its_healthy_trays_and_rack2_passes(outcome):
    rack1 = next(f for f in domain_findings(outcome) if f.summary.startswith("rack rack1:") and "floor" in f.summary)
    assert rack1.verdict is Verdict.FAIL and rack1.observed < 798
    # tray01-02 never registered, tray03 failed its fabric health: run over tray[04-18], and said so.
    assert "tray[04-18]" in rack1.summary and "tray03 left out" in rack1.summary and "16 of 18" in rack1.summary
    assert "NCCL_MNNVL_ENABLE=1 NCCL_NVLS_ENABLE=1" in rack1.summary
    rack2 = next(f for f in domain_findings(outcome) if f.summary.startswith("rack rack2 (clique 32766"))
    assert rack2.verdict is Verdict.PASS and rack2.observed >= 798 and "tray[19,22-36]" in rack2.summary
    # tray21 registered with a clique of its own: a domain of one tray, not run (nvlink.domain FAILs it).
    alone = next(f for f in domain_findings(outcome) if f.summary.startswith("rack rack2 (clique 32765"))
    assert alone.verdict is Verdict.SKIP
    passed = {n.name for n in outcome.run.nodes for f in n.findings
              if f.check == "nccl.domain" and f.verdict is Verdict.PASS}
    assert passed == {f"tray{i:02d}" for i in [*range(4, 10), *range(11, 20), *range(22, 37)]}


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
