"""A storage path every node mounts (storage_paths {PATH: {shared: true}}) is measured a few nodes at a time
(storage_concurrency, default 4), so that each node's figure is its own and not its share of what all pull at once;
a node's own path is measured by every node at once, as before."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.levels import load_levels
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import run_validate
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim.transport import SimTransport

CATALOG = ProfileCatalog()
pytestmark = pytest.mark.timeout(120)
NODES = 8


def _run(tmp_path: Path, monkeypatch, paths: str, extra: str = "") -> tuple[int, object]:
    at_once, most = [0], [0]
    joined = threading.Condition()
    original = SimTransport.run_batch

    def spy(self, commands, deadline_s=None):
        storage = any(c.name == "storage_throughput" for c in commands)
        if storage:
            with joined:
                at_once[0] += 1
                most[0] = max(most[0], at_once[0])
                joined.notify_all()
                # Stay in until every node is in, or 2 s: whatever the machine's load, the nodes the engine lets
                # in together are seen together.
                joined.wait_for(lambda: at_once[0] >= NODES, timeout=2.0)
        try:
            return original(self, commands, deadline_s)
        finally:
            if storage:
                with joined:
                    at_once[0] -= 1

    monkeypatch.setattr(SimTransport, "run_batch", spy)
    hosts = "".join(f"    gpu{i:02d}: {{}}\n" for i in range(1, NODES + 1))
    path = tmp_path / "inv.yaml"
    path.write_text(f"all:\n  vars: {{connection: sim, profile: h100-sxm-8x, storage_paths: {paths}{extra}}}\n"
                    f"  hosts:\n{hosts}")
    checks = ("storage.throughput",)
    assert "storage.throughput" in load_levels()["standard"]
    outcome = run_validate(load_inventory(path, CATALOG), CATALOG, EngineOptions(checks=checks), tmp_path / "r",
                           level="standard")
    return most[0], outcome


def test_a_shared_path_is_measured_a_few_nodes_at_a_time(tmp_path, monkeypatch):
    most, outcome = _run(tmp_path, monkeypatch, "{/lustre: {read_gbps: 5, shared: true}}", ", storage_concurrency: 2")
    assert most == 2, most
    found = [f for n in outcome.run.nodes for f in n.findings if f.check == "storage.throughput"]
    assert len(found) == 16 and all("shared path: measured at most 2 node(s) at a time" in f.summary for f in found)


def test_a_nodes_own_path_is_measured_by_every_node_at_once(tmp_path, monkeypatch):
    most, outcome = _run(tmp_path, monkeypatch, "{/raid: {read_gbps: 5}}")
    assert most == NODES, most
    found = [f for n in outcome.run.nodes for f in n.findings if f.check == "storage.throughput"]
    assert found and not any("shared path" in f.summary for f in found)
