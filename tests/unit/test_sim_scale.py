"""The simulator at fleet scale: a node's facts are computed once, yet follow every change of its state."""

from __future__ import annotations

import threading

from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.sim import state
from nvdeploy.sim.datacenter import NVLINK_DOWN_GPU, NVLINK_DOWN_LINKS, down_links
from nvdeploy.sim.scenario import NodeScenario, node_facts
from nvdeploy.sim.tools import run_tool

CATALOG = ProfileCatalog()
H100 = CATALOG.get("h100-sxm-8x")


def test_facts_of_a_node_are_computed_once():
    node = NodeScenario("gpu001", H100)
    first = node_facts(node)
    assert node_facts(node) is first  # the same object: nothing recomputed per tool call
    assert node_facts(NodeScenario("gpu001", H100)) == first  # and the same value as a fresh derivation


def test_memoised_facts_follow_the_node_state(tmp_path):
    cluster = f"scale-{tmp_path.name}"
    node = NodeScenario("gpu001", H100, ("persistence_off",), cluster=cluster)
    try:
        before = node_facts(node)
        assert not any(g.persistence for g in before.gpus)
        assert node_facts(node) is before
        assert run_tool(node, ["sudo", "-n", "--", "systemctl", "enable", "--now", "nvidia-persistenced"]).rc == 0
        after = node_facts(node)
        assert all(g.persistence for g in after.gpus)  # the memo was dropped with the change
        assert node_facts(node) is after
        state.reset_memory(cluster)
        assert not any(g.persistence for g in node_facts(node).gpus)  # and again when the state is forgotten
    finally:
        state.reset_memory(cluster)


def test_has_stored_is_what_stored_says():
    cluster = "scale-has-stored"
    node = NodeScenario("gpu002", H100, cluster=cluster)
    try:
        assert not state.has_stored(node) and state.stored(node) is None
        with state.mutate(node) as current:
            current.persistence_pm = True
        assert state.has_stored(node) and state.stored(node) is not None
    finally:
        state.reset_memory(cluster)


def test_down_links_without_recomputing_facts():
    healthy = NodeScenario("gpu003", H100)
    faulty = NodeScenario("gpu003", H100, ("nvlink_down",))
    assert all(down_links(healthy, i) == () for i in range(8))
    assert [down_links(faulty, i) for i in range(8)] == [
        NVLINK_DOWN_LINKS if i == NVLINK_DOWN_GPU else () for i in range(8)]
    topo = run_tool(faulty, ["nvidia-smi", "topo", "-m"]).stdout.decode()
    row = next(line for line in topo.splitlines() if line.startswith(f"GPU{NVLINK_DOWN_GPU}\t"))
    assert row.split("\t")[1] == "NV16"  # 18 links less GPU 3's two down ones


def test_many_threads_read_one_node_without_a_global_lock():
    node = NodeScenario("gpu004", H100)
    outputs: list[bytes] = []

    def work() -> None:
        for _ in range(20):
            outputs.append(run_tool(node, ["nvidia-smi", "-q", "-x"]).stdout)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(outputs) == 160 and len(set(outputs)) == 1  # byte-identical every time


def test_cached_gpu_blocks_render_what_the_uncached_path_renders():
    from nvdeploy.sim import smi_xml

    for profile in CATALOG.names():
        for faults in [(), ("ecc_uncorrectable",), ("gpu_missing",), ("thermal_throttle",), ("mig_enabled",)]:
            for name in ("gpu001", "gpu002"):
                facts = node_facts(NodeScenario(name, CATALOG.get(profile), faults))
                blocks = []
                for gpu in facts.gpus:
                    out: list[str] = []
                    smi_xml._render(smi_xml._gpu_node(facts, gpu), 1, out)
                    blocks.append("\n".join(out))
                rendered = smi_xml.render_xml(facts)
                assert all(block in rendered for block in blocks)
                assert all(gpu.uuid in rendered and gpu.serial in rendered for gpu in facts.gpus)
                assert "@@nvdeploy-sim" not in rendered


def test_a_probe_run_on_a_simulated_node_leaves_no_reference_cycle():
    """The fake NVML namespace of each probe run (with the node's facts) is freed when the run ends, by reference
    counting: a cycle would leave it to the cyclic collector, which at 10,000 nodes freed ~100 MB late and in
    bulk, and the heap it left fragmented raised the run's peak RSS."""
    import gc

    from nvdeploy.sim.fake_nvml import run_probe

    scenario = NodeScenario("cyc01", H100, ())
    assert run_probe(scenario).rc == 0  # imports and memos done before counting
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds is kept in gc.garbage, to be looked at
    try:
        out = run_probe(scenario)
        gc.collect()
        # Only the probe's own objects count: another thread of the test process may leave garbage of its own.
        ours = [o for o in gc.garbage if getattr(o, "__module__", None) == "nvdeploy.sim.fake_nvml"
                or type(o).__module__ in ("nvdeploy.sim.fake_nvml", "nvdeploy.sim.scenario")]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert out.rc == 0 and b"gpus" in out.stdout
    assert ours == [], f"{len(ours)} objects of the probe run were only freed by the cyclic collector"
