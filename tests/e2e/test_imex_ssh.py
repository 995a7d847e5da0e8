"""IMEX over real SSH (OpenSSH on loopback, the simulator's fake tools on each tray's PATH): imex.daemon on each
GB200 tray and imex.domain from one tray's ``nvidia-imex-ctl -N -j``, with one tray cut off from the others; the
same findings as in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim.scenario import NodeScenario

CATALOG = ProfileCatalog()
IMEX = EngineOptions(checks=("imex.daemon", "imex.domain"))
TRAYS = {"t1": (), "t2": (), "t3": ("imex_peer_missing",)}

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("requires_sshd"),
              pytest.mark.skipif("gb200-nvl72" not in CATALOG.names(), reason="no GB200 NVL72 profile")]


def scenario(name: str) -> tuple[str, str]:
    # The fake tray knows its rack's other trays (their names: the inventory gives imex_address = name).
    peers = tuple((other, faults) for other, faults in TRAYS.items() if other != name)
    return name, NodeScenario(name, CATALOG.get("gb200-nvl72"), TRAYS[name], peers=peers).to_json()


def findings(outcome) -> dict[str, list[tuple[str, str, str]]]:
    out = {n.name: sorted((f.check, f.verdict.value, f.summary) for f in n.findings if f.check.startswith("imex."))
           for n in outcome.run.nodes}
    out["_cluster"] = sorted((f.check, f.verdict.value, f.summary) for f in outcome.run.cluster_findings
                             if f.check.startswith("imex."))
    return out


def test_cut_off_tray_is_named_over_ssh_as_in_process(ssh_cluster_factory, tmp_path: Path):
    cluster = ssh_cluster_factory([scenario(name) for name in TRAYS])
    path = tmp_path / "ssh.yaml"
    extra = {name: {"rack": "rack1", "imex_address": name} for name in TRAYS}
    path.write_text(cluster.inventory_yaml(profile="gb200-nvl72", extra_host_vars=extra, command_timeout=120,
                                           connect_timeout=30))
    over_ssh = findings(run_validate(load_inventory(path, CATALOG), CATALOG, IMEX, tmp_path / "ssh"))
    assert [v for _, v, _ in over_ssh["_cluster"]] == [Verdict.FAIL.value]
    assert [(c, v) for c, v, _ in over_ssh["t3"]] == [("imex.daemon", "PASS"), ("imex.domain", "FAIL")]
    assert [(c, v) for c, v, _ in over_ssh["t1"]] == [("imex.daemon", "PASS")]
    sim = tmp_path / "sim.yaml"
    sim.write_text("all:\n  vars: {connection: sim, profile: gb200-nvl72, rack: rack1}\n  hosts:\n" + "".join(
        f"    {name}: {{sim_faults: {json.dumps(list(faults))}}}\n" for name, faults in TRAYS.items()))
    in_process = findings(run_validate(load_inventory(sim, CATALOG), CATALOG, IMEX, tmp_path / "sim"))
    assert over_ssh == in_process
