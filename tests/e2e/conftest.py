"""Fixtures shared by the real-SSH tests of this folder."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Callable

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import ValidateOutcome, run_validate
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim.scenario import NodeScenario

TrayRun = Callable[[Mapping[str, Sequence[str]], EngineOptions], tuple[ValidateOutcome, ValidateOutcome]]


@pytest.fixture
def validate_trays_both_ways(ssh_cluster_factory, tmp_path: Path) -> TrayRun:
    """``run(trays, options) -> (over_ssh, in_process)``: validates one rack of GB200 trays ({name: sim faults},
    cluster ``nvl``, rack ``r1``) twice with the same options: as fake nodes behind sshd on loopback, and as the same
    scenarios in-process (``connection: sim``), so a test can require both to give the same findings."""
    catalog = ProfileCatalog()
    profile = catalog.get("gb200-nvl72")

    def run(trays: Mapping[str, Sequence[str]], options: EngineOptions) -> tuple[ValidateOutcome, ValidateOutcome]:
        cluster = ssh_cluster_factory([(name, NodeScenario(name, profile, tuple(faults), cluster="nvl",
                                                           rack="r1").to_json()) for name, faults in trays.items()])
        text = cluster.inventory_yaml(profile="gb200-nvl72", extra_host_vars={n: {"rack": "r1"} for n in trays},
                                      command_timeout=120, connect_timeout=30)
        (tmp_path / "ssh").mkdir()
        ssh_path = tmp_path / "ssh" / "nvl.yaml"
        ssh_path.write_text(text)
        over_ssh = run_validate(load_inventory(ssh_path, catalog), catalog, options, tmp_path / "ssh" / "r")
        sim_path = tmp_path / "nvl.yaml"
        sim_path.write_text("all:\n  vars: {connection: sim, profile: gb200-nvl72, cluster: nvl, rack: r1}\n"
                            "  hosts:\n" + "".join(f"    {n}: {{sim_faults: {json.dumps(list(f))}}}\n"
                                                   for n, f in trays.items()))
        in_process = run_validate(load_inventory(sim_path, catalog), catalog, options, tmp_path / "r")
        return over_ssh, in_process

    return run
