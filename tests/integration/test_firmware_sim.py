"""firmware.* over a simulated 16-node fleet: one GPU with an odd VBIOS (vbios_mismatch:5), one node with older
ConnectX firmware (cx_fw_old), one with an older BIOS (bios_mismatch), one with an older BMC firmware (bmc_fw_old).
firmware.consistency names exactly those parts, nothing else; firmware.minimum FAILs the old ConnectX firmware where
a profile states a minimum; diff and history show the firmware that changed between two runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from nvdeploy.cli.app import cli
from nvdeploy.config.builtin import data_dir
from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import run_validate
from nvdeploy.report.compare import compare_runs
from nvdeploy.results import Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.runner.history_db import record_run

CHECKS = ("firmware.minimum", "firmware.consistency")
VBIOS_NODE, CX_NODE, BIOS_NODE, BMC_NODE = "gpu03", "gpu07", "gpu12", "gpu15"
FAULTS = {VBIOS_NODE: ["vbios_mismatch:5"], CX_NODE: ["cx_fw_old"], BIOS_NODE: ["bios_mismatch"],
          BMC_NODE: ["bmc_fw_old"]}


def run(tmp_path: Path, faults: dict[str, list[str]], catalog: ProfileCatalog, profile: str = "h100-sxm-8x",
        out: str = "r"):
    lines = ["all:", f"  vars: {{connection: sim, profile: {profile}, cluster: fw}}", "  hosts:"]
    for i in range(1, 17):
        name = f"gpu{i:02d}"
        lines.append(f"    {name}: {{sim_faults: {json.dumps(faults.get(name, []))}}}")
    path = tmp_path / f"{out}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return run_validate(load_inventory(path, catalog), catalog, EngineOptions(checks=CHECKS), tmp_path / out,
                        level="quick")


@pytest.fixture(scope="module")
def strict(tmp_path_factory):
    """h100-sxm-8x with a ConnectX minimum and the VBIOS a must-match component, as a user profile folder."""
    folder = tmp_path_factory.mktemp("profiles")
    text = (data_dir("checks") / "profiles" / "h100-sxm-8x.yaml").read_text()
    text += ('firmware:\n  must_match: [gpu.vbios]\n  minimum:\n    nic.firmware[MT4129]: {version: "28.41.1000", '
             'source: "test: the fleet\'s qualified ConnectX-7 release"}\n')
    (folder / "h100-sxm-8x.yaml").write_text(text)
    return ProfileCatalog([folder])


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    return run(tmp_path_factory.mktemp("fw16"), FAULTS, ProfileCatalog())


def consistency(outcome) -> dict[str, list]:
    return {n.name: [f for f in n.findings if f.check == "firmware.consistency"] for n in outcome.run.nodes}


def test_exactly_the_odd_parts_are_named(outcome):
    named = {name: [(f.verdict, f.gpu, f.summary) for f in found] for name, found in consistency(outcome).items()
             if found}
    assert set(named) == {VBIOS_NODE, CX_NODE, BIOS_NODE, BMC_NODE}
    (vbios,) = named[VBIOS_NODE]
    assert vbios[:2] == (Verdict.WARN, 5) and "GPU 5 VBIOS 96.00.61.00.01" in vbios[2]
    assert "96.00.74.00.1C" in vbios[2]
    (cx,) = named[CX_NODE]
    assert cx[0] is Verdict.WARN and "mlx5_0 ConnectX firmware (MT4129) 28.39.1002" in cx[2]
    assert "28.41.1000" in cx[2]
    bios = sorted(s for _v, _g, s in named[BIOS_NODE])  # the BIOS version and its date
    assert len(bios) == 2 and any("system BIOS 1.6a" in s for s in bios) and any("08/11/2023" in s for s in bios)
    cluster = [f for f in outcome.run.cluster_findings if f.check == "firmware.consistency"]
    (bmc,) = named[BMC_NODE]
    assert bmc[0] is Verdict.WARN and "BMC firmware 1.2" in bmc[2] and "1.4" in bmc[2]
    assert {f.observed.split(":")[0] for f in cluster} == {VBIOS_NODE, CX_NODE, BIOS_NODE, BMC_NODE}
    assert all(f.verdict is Verdict.WARN for f in cluster)


def test_minimum_skips_without_a_profile_minimum_and_records(outcome):
    node = next(n for n in outcome.run.nodes if n.name == "gpu01")
    (finding,) = [f for f in node.findings if f.check == "firmware.minimum"]
    assert finding.verdict is Verdict.SKIP and "VBIOS 96.00.74.00.1C" in finding.summary
    firmware = node.facts["firmware"]
    assert firmware["gpu.vbios"]["GPU 7"] == "96.00.74.00.1C"
    assert firmware["system.board_name"] == {"": "X13DEG-OAD"}
    assert firmware["nic.firmware[MT4129]"]["mlx5_3"] == "28.41.1000"


def test_a_profile_minimum_and_must_match(tmp_path, strict):
    outcome = run(tmp_path, FAULTS, strict)
    failing = {n.name: [f for f in n.findings if f.verdict is Verdict.FAIL] for n in outcome.run.nodes}
    failing = {k: v for k, v in failing.items() if v}
    assert set(failing) == {VBIOS_NODE, CX_NODE}
    (vbios,) = failing[VBIOS_NODE]
    assert vbios.check == "firmware.consistency" and vbios.gpu == 5  # must_match: FAIL, not WARN
    (cx,) = failing[CX_NODE]
    assert cx.check == "firmware.minimum" and "28.39.1002" in cx.summary and "mlxfwmanager" in cx.summary
    bios = [f for n in outcome.run.nodes if n.name == BIOS_NODE for f in n.findings
            if f.check == "firmware.consistency"]
    assert bios and all(f.verdict is Verdict.WARN for f in bios)


def test_a_healthy_fleet_passes(tmp_path):
    outcome = run(tmp_path, {}, ProfileCatalog())
    assert not any(f.check == "firmware.consistency" for n in outcome.run.nodes for f in n.findings)
    (cluster,) = [f for f in outcome.run.cluster_findings if f.check == "firmware.consistency"]
    assert cluster.verdict is Verdict.PASS


def test_diff_shows_the_firmware_change(tmp_path, outcome):
    healthy = run(tmp_path, {}, ProfileCatalog(), out="base")
    diff = compare_runs(healthy.run, outcome.run)
    changed = {(d.node, d.component) for d in diff.drift}
    assert (VBIOS_NODE, "firmware.gpu.vbios") in changed
    assert (CX_NODE, "firmware.nic.firmware[MT4129]") in changed
    assert (BIOS_NODE, "firmware.system.bios_version") in changed
    assert (BMC_NODE, "firmware.system.bmc_firmware") in changed
    assert all(node in (VBIOS_NODE, CX_NODE, BIOS_NODE, BMC_NODE) for node, _c in changed)
    shutil.rmtree(tmp_path / "base", ignore_errors=True)


def test_history_names_the_firmware_change(tmp_path, outcome):
    """The node's record over time says which firmware changed between its runs, and only where it changed."""
    db = tmp_path / "history.sqlite"
    healthy = run(tmp_path, {}, ProfileCatalog(), out="before")
    record_run(db, healthy.run, healthy.run_dir)
    record_run(db, outcome.run, outcome.run_dir)
    shown = CliRunner().invoke(cli, ["history", "--db", str(db), "--node", VBIOS_NODE])
    assert shown.exit_code == 0, shown.output
    (changed,) = [line.strip() for line in shown.output.splitlines() if line.strip().startswith("changed ")]
    assert changed.startswith("changed firmware.gpu.vbios: ") and "GPU 5" in changed, shown.output
    quiet = CliRunner().invoke(cli, ["history", "--db", str(db), "--node", "gpu01"])
    assert quiet.exit_code == 0 and "changed " not in quiet.output, quiet.output
    shutil.rmtree(tmp_path / "before", ignore_errors=True)
