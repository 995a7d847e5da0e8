"""GPUDirect rails: each GPU with its nearest compute NIC from real ``nvidia-smi topo -m`` captures with 10-12 NICs,
the rdma.rails check, perftest's port-state message, the simulator's rail faults, and the stage's rails (waves, TCP
ports, host var overrides, the fallback without a rail map, the deadline)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _catalog_helpers import CATALOG, context, result, run_check

from nvdeploy.config.inventory import Host, load_inventory
from nvdeploy.parsers.ibstat import parse_ibstat
from nvdeploy.parsers.perftest import parse_perftest
from nvdeploy.parsers.topo import parse_topo, rail_map
from nvdeploy.phases import gpudirect
from nvdeploy.phases.gpudirect import NodeRails, RailSpec, match_rails, node_rails, rail_waves
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim.scenario import NodeScenario
from nvdeploy.sim.tools import run_tool

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
TOPO = REAL / "nvidia-smi-topo"
DGX_A100 = TOPO / "8xA100-SXM4-40GB-dgx-NIC0-9-legend-PXB-pairs-storage-NICs-525.105.17-tabs.txt"
DGX_A100_OLD = TOPO / "8xA100-dgx-mlx5_0-11-columns-no-nic-legend-PXB-pairs-storage-PIX-pairs-tabs.txt"
DELL_H100 = TOPO / "8xH100-topo-mp-NIC0-11-legend-gpu0-gpu4-three-PIX-nics-dell-tabs.txt"
HOPPER = TOPO / "8xHopper-NV18-NIC0-11-legend-single-numa-0-191-gpu3-NIC5-bond-nic-pairs-tabs.txt"
DGX_H100_PIECE = "nvidia-smi-topo-8xH100-dgx-NIC0-11-PXB-cut-after-NIC5-no-legend-580.126.20.txt"
# A real H100 node's ibstat: 8 InfiniBand HCAs (mlx5_0, 3-6, 9-11) and 4 Ethernet ports (mlx5_1, 2, 7, 8).
IBSTAT_12 = REAL / "ibstat" / "ibstat-h100-node-12hca-ib-and-eth-3-down-disabled.txt"


def rails_of(path: Path, compute=None):
    return rail_map(parse_topo(path.read_text()), compute)


def pairs(rails) -> list[tuple[int, str, str]]:
    return [(r.gpu, r.nic, r.link) for r in rails.rails]


def test_dgx_a100_gpu_pairs_share_two_pxb_nics_one_each_in_two_waves():
    rails = rails_of(DGX_A100)
    assert pairs(rails) == [(k, f"mlx5_{k}", "PXB") for k in range(8)]
    assert rails.unpaired == ("mlx5_8", "mlx5_9")  # the storage pair, SYS to every GPU
    # GPU0 and GPU1 sit behind one PCIe switch with mlx5_0 and mlx5_1: never measured side by side.
    assert rails.near == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert rails.waves == ((0, 2, 4, 6), (1, 3, 5, 7))
    assert all(not r.shared_with and r.direct for r in rails.rails)


def test_dgx_a100_old_driver_columns_are_the_devices_themselves():
    rails = rails_of(DGX_A100_OLD)
    assert [r.nic for r in rails.rails] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_6", "mlx5_7", "mlx5_8",
                                            "mlx5_9"]
    assert [r.column for r in rails.rails][4] == "mlx5_6"  # no NIC Legend: the column is the device
    assert rails.unpaired == ("mlx5_4", "mlx5_5", "mlx5_10", "mlx5_11")


def test_hopper_rails_where_gpu_index_and_nic_index_differ():
    rails = rails_of(HOPPER)
    assert pairs(rails) == [(0, "mlx5_0", "PIX"), (1, "mlx5_1", "PIX"), (2, "mlx5_2", "PIX"), (3, "mlx5_5", "PIX"),
                            (4, "mlx5_6", "PIX"), (5, "mlx5_7", "PIX"), (6, "mlx5_8", "PIX"), (7, "mlx5_11", "PIX")]
    assert rails.unpaired == ("mlx5_3", "mlx5_4", "mlx5_9", "mlx5_10")  # PIX pairs with no GPU (bond ports)
    assert rails.waves == (tuple(range(8)),)


def test_dell_h100_compute_nics_from_ibstat_skip_the_ethernet_ports_behind_gpu0():
    ib = parse_ibstat(IBSTAT_12.read_text())
    compute = [d.name for d in ib.devices if any(p.link_layer == "InfiniBand" for p in d.ports)]
    rails = rails_of(DELL_H100, compute)
    # GPU0 is PIX to mlx5_0, mlx5_1 and mlx5_2: only mlx5_0 is InfiniBand. By names alone it would take mlx5_0 too,
    # but mlx5_1/2 would count as NICs on no rail.
    assert pairs(rails) == [(0, "mlx5_0", "PIX"), (1, "mlx5_3", "PIX"), (2, "mlx5_4", "PIX"), (3, "mlx5_5", "PIX"),
                            (4, "mlx5_6", "PIX"), (5, "mlx5_9", "PIX"), (6, "mlx5_10", "PIX"), (7, "mlx5_11", "PIX")]
    assert rails.unpaired == () and rails.compute_from == "ibstat"
    assert rails_of(DELL_H100).unpaired == ("mlx5_1", "mlx5_2", "mlx5_7", "mlx5_8")


def test_gpus_with_only_sys_nics_and_gpus_sharing_one():
    # The DGX A100 capture with only the first socket's four NICs counted: GPU4-7 reach a NIC only through SYS.
    rails = rails_of(DGX_A100, ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"])
    far = [(r.gpu, r.link, r.direct) for r in rails.rails if r.gpu >= 4]
    assert far == [(4, "SYS", False), (5, "SYS", False), (6, "SYS", False), (7, "SYS", False)]
    # Two compute NICs for eight GPUs: GPUs behind one PCIe switch share its NIC.
    shared = rails_of(DGX_A100, ["mlx5_0", "mlx5_2"])
    # (The SYS GPUs of the other socket spread over the two as well: the one the fewest GPUs share.)
    assert [(r.gpu, r.nic, r.link) for r in shared.rails][:2] == [(0, "mlx5_0", "PXB"), (1, "mlx5_0", "PXB")]
    assert 1 in shared.rails[0].shared_with and 0 in shared.rails[1].shared_with
    assert not any(set(w) >= {0, 1} for w in shared.waves)


def test_dgx_h100_piece_cut_before_its_legend_pairs_by_column():
    # A real DGX H100 matrix whose NIC Legend was cut off: GPU k is PXB (not PIX) to its NIC, GPU1's is NIC3, and
    # the PIX pair NIC1/NIC2 (the in-band bond's ports) is on no GPU's rail.
    rails = rails_of(REAL / "fragments" / DGX_H100_PIECE)
    assert pairs(rails) == [(0, "NIC0", "PXB"), (1, "NIC3", "PXB"), (2, "NIC4", "PXB"), (3, "NIC5", "PXB"),
                            (4, "NIC6", "PXB"), (5, "NIC9", "PXB"), (6, "NIC10", "PXB"), (7, "NIC11", "PXB")]
    assert rails.unpaired == ("NIC1", "NIC2", "NIC7", "NIC8") and rails.waves == (tuple(range(8)),)
    # The report that printed it kept the GPU rows and NIC0-NIC5 only: the parser says the matrix was cut.
    assert parse_topo((REAL / "fragments" / DGX_H100_PIECE).read_text()).warnings == (
        "no matrix row for NIC6, NIC7, NIC8, NIC9, NIC10, NIC11",)


def test_pairing_never_raises_on_cut_captures():
    for path in (DGX_A100, DGX_A100_OLD, DELL_H100, HOPPER):
        text = path.read_text()
        for cut in range(0, len(text), 11):
            result_ = rail_map(parse_topo(text[:cut]), ["mlx5_0", "mlx5_3"])
            assert result_ is None or all(r.link in ("PIX", "PXB", "PHB", "NODE", "SYS") for r in result_.rails)


def test_no_matrix_no_map():
    assert rail_map(parse_topo("")) is None
    assert rail_map(parse_topo((TOPO / "8xH100-NV18-2numa-spaces.txt").read_text())).rails == ()  # no NIC columns


def ctx_of(topo: str, ibstat: str = "", **host_vars):
    results = {"nvidia_smi_topo": result("nvidia_smi_topo", topo)}
    if ibstat:
        results["ibstat"] = result("ibstat", ibstat)
    return context(results, "a100-sxm-8x", host_vars)


FOUR_IB = "".join(f"CA 'mlx5_{i}'\n\tCA type: MT4123\n\tNumber of ports: 1\n\tPort 1:\n\t\tState: Active\n"
                  f"\t\tPhysical state: LinkUp\n\t\tRate: 200\n\t\tLink layer: InfiniBand\n" for i in range(4))


def test_rails_check_passes_with_the_map_and_fails_a_gpu_whose_nic_is_sys():
    (ok,) = run_check("rdma.rails", ctx_of(DGX_A100.read_text()))
    assert ok.verdict is Verdict.PASS and "GPU0-mlx5_0 (PXB)" in ok.summary and "2 wave(s)" in ok.summary
    assert "compute NICs from names" in ok.summary and ok.observed["unpaired"] == ["mlx5_8", "mlx5_9"]
    found = run_check("rdma.rails", ctx_of(DGX_A100.read_text(), FOUR_IB))
    assert [(f.gpu, f.verdict, f.observed) for f in found] == [(g, Verdict.FAIL, "SYS") for g in range(4, 8)]
    assert "NCCL_NET_GDR_LEVEL" in found[0].summary and "The map:" in found[0].summary
    # A node with fewer NICs than GPUs by design: the same far GPU is a WARN.
    fewer = run_check("rdma.rails", ctx_of(DGX_A100.read_text(), FOUR_IB, ib_hcas=4))
    assert {f.verdict for f in fewer} == {Verdict.WARN}


def test_rails_check_error_and_skip():
    (error,) = run_check("rdma.rails", ctx_of((TOPO / "8xH100-NV18-2numa-spaces.txt").read_text()))
    assert error.verdict is Verdict.ERROR and "default rail" in error.summary
    (skip,) = run_check("rdma.rails", context({}, "l40s-8x"))
    assert skip.verdict is Verdict.SKIP


def test_perftest_port_state():
    # The three lines perftest prints for a port that is not Active (as in a public log of a Down port).
    parsed = parse_perftest(" Port number 1 state is Down\n Couldn't set the link layer\n Couldn't get context for "
                            "the device\n")
    assert parsed.port_state == (1, "Down") and not parsed.complete
    assert parse_perftest("Couldn't connect to 10.55.206.82:18515\n").port_state is None


def test_sim_rail_faults():
    profile = CATALOG.get("h100-sxm-8x")
    down = NodeScenario("n1", profile, ("rail_down:mlx5_3",))
    tool = run_tool(down, ["ib_write_bw", "-d", "mlx5_3", "--use_cuda=3", "-p", "18518", "-F", "--report_gbits",
                           "-D", "5"])
    assert tool.rc == 1 and tool.stderr.startswith(b" Port number 1 state is Down\n")
    assert run_tool(down, ["ib_write_bw", "-d", "mlx5_2", "--use_cuda=2", "-F", "-D", "5"]).rc == 0
    ibstat = parse_ibstat(run_tool(down, ["ibstat"]).stdout.decode())
    assert [d.name for d in ibstat.devices if d.ports[0].state != "Active"] == ["mlx5_3"]
    # The partner's client on that rail: nobody listens on the server's port.
    peer = NodeScenario("n2", profile, (), peers=(("10.0.0.1", ("rail_down:mlx5_3",)),))
    refused = run_tool(peer, ["ib_write_bw", "-d", "mlx5_3", "--use_cuda=3", "-p", "18518", "-F", "--report_gbits",
                              "-D", "5", "10.0.0.1"])
    assert refused.rc == 1 and refused.stderr.startswith(b"Couldn't connect to 10.0.0.1:18518\n")
    slow = NodeScenario("n3", profile, ("rail_slow:mlx5_5:50",))
    figures = {nic: parse_perftest(run_tool(slow, ["ib_write_bw", "-d", nic, "--use_cuda=5", "-F", "--report_gbits",
                                                   "-D", "5"]).stdout.decode()).bw_gbps for nic in ("mlx5_4", "mlx5_5")}
    assert figures == {"mlx5_4": 388.0, "mlx5_5": 194.0}  # 97% of 400, and half of it


def test_rails_matched_by_gpu_waves_and_overrides():
    a100 = rails_of(DGX_A100).to_dict()
    host = load_host({})
    rails = node_rails(host, {"gpudirect_rails": a100})
    assert rails.source == "map" and len(rails.rails) == 8
    matched = match_rails(rails, rails)
    assert [s.gpu for s, _ in matched] == list(range(8))
    assert rail_waves(matched, rails, rails) == [[0, 2, 4, 6], [1, 3, 5, 7]]
    just = node_rails(load_host({"gpudirect_gpu": 4}), {"gpudirect_rails": a100})
    assert (just.source, just.rails) == ("host vars", (RailSpec(4, "mlx5_4"),))
    assert match_rails(just, rails) == [(RailSpec(4, "mlx5_4"), RailSpec(4, "mlx5_4"))]
    hca = node_rails(load_host({"gpudirect_hca": "mlx5_7"}), {})
    assert hca.rails == (RailSpec(0, "mlx5_7"),)
    assert node_rails(host, {}) == NodeRails((RailSpec(0, "mlx5_0"),), frozenset(), "default")


def load_host(vars_: dict) -> Host:
    return Host(name="n1", vars={"address": "10.0.0.1", "profile": "a100-sxm-8x", **vars_})


def run(tmp_path, hosts: str, checks=("driver.loaded", "rdma.rails", "rdma.gpudirect"), **options):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "inv.yaml"
    path.write_text(f"all:\n  vars: {{connection: sim, profile: h100-sxm-8x}}\n  hosts:\n{hosts}")
    return run_validate(load_inventory(path, CATALOG), CATALOG, EngineOptions(checks=checks, **options),
                        tmp_path / "out", level="full")


@pytest.fixture(autouse=True)
def quick_head_start(monkeypatch):
    monkeypatch.setattr(gpudirect, "HEAD_START_S", 0.01)


def test_stage_runs_every_rail_on_its_own_port(tmp_path, monkeypatch):
    batches: list[tuple[str, list[str]]] = []
    real = gpudirect.PairRunner._run

    def record(self, host, specs, remaining):
        batches.append((host.name, [s.display for s in specs]))
        return real(self, host, specs, remaining)

    monkeypatch.setattr(gpudirect.PairRunner, "_run", record)
    outcome = run(tmp_path, "    n1: {}\n    n2: {}\n")
    runs = [f for f in outcome.run.cluster_findings if f.check == "rdma.gpudirect" and f.evidence]
    assert sorted(f.gpu for f in runs) == list(range(8))
    commands = sorted((outcome.run_dir / "evidence" / "_cluster").glob("*_client.out"))
    assert len(commands) == 8
    # One wave: the 8 servers in one batch on n1, then the 8 clients on n2, each rail on its own port.
    assert [(name, len(displays)) for name, displays in batches] == [("n1", 8), ("n2", 8)]
    for k in range(8):
        assert f"-d mlx5_{k} --use_cuda={k} -p {18515 + k} -F" in batches[0][1][k]
        assert batches[1][1][k].endswith(f"-p {18515 + k} -F --report_gbits -D 5 n1")
    summary = [f.summary for f in outcome.run.cluster_findings if f.check == "rdma.gpudirect" and not f.evidence]
    assert summary and "every rail of the rail map" in summary[0]


def test_stage_without_a_map_tests_the_default_rail_and_says_so(tmp_path):
    outcome = run(tmp_path, "    n1: {}\n    n2: {}\n", checks=("driver.loaded", "rdma.gpudirect"))
    node = [f for f in outcome.run.nodes[0].findings if f.check == "rdma.gpudirect"]
    assert len(node) == 1 and "rail GPU0 mlx5_0 port 1 [no rail map: the default rail only]" in node[0].summary
    summary = [f.summary for f in outcome.run.cluster_findings if f.check == "rdma.gpudirect" and not f.evidence]
    assert "only the default rail GPU0 mlx5_0" in summary[0]


def test_stage_host_vars_test_just_that_rail(tmp_path):
    outcome = run(tmp_path, "    n1: {gpudirect_gpu: 6}\n    n2: {}\n")
    node = [f for f in outcome.run.nodes[1].findings if f.check == "rdma.gpudirect"]
    assert [(f.gpu, f.verdict) for f in node] == [(6, Verdict.PASS)] and "rail GPU6 mlx5_6" in node[0].summary


def test_stage_honours_the_deadline(tmp_path, monkeypatch):
    monkeypatch.setattr(gpudirect, "HEAD_START_S", 10_000.0)  # any remaining time is below the head start
    outcome = run(tmp_path, "    n1: {}\n    n2: {}\n", deadline_s=600)
    found = [f for f in outcome.run.nodes[0].findings if f.check == "rdma.gpudirect"]
    assert len(found) == 8 and {(f.verdict, f.reason.value) for f in found} == {(Verdict.ERROR, "not_run")}
