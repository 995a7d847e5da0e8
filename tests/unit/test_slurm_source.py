"""An inventory group whose hosts come from Slurm (the scheduler answer is a captured node list)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.config.yamlfile import ConfigError
from nvdeploy.slurm import source
from nvdeploy.slurm.client import SlurmError
from nvdeploy.slurm.nodes import parse_text

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


@pytest.fixture
def from_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = parse_text((FIXTURES / "scontrol-show-node-22.05.txt").read_text())
    monkeypatch.setattr(source, "fetch_nodes", lambda timeout: nodes)


def _write(tmp_path: Path, group: str) -> Path:
    path = tmp_path / "inv.yaml"
    path.write_text("all:\n  vars: {profile: h100-sxm-8x, connection: sim}\n  children:\n    gpu:\n" + group)
    return path


def test_hosts_from_slurm_in_slurms_order_with_vars_and_facts(tmp_path: Path, from_capture: None) -> None:
    inv = load_inventory(_write(tmp_path, "      slurm: {partition: debug, states: [idle, drained]}\n"
                                          "      hosts:\n        node2: {sim_faults: [gpu_missing]}\n"),
                         ProfileCatalog(), slurm_groups=source.resolve_group)
    assert [h.name for h in inv.hosts] == ["node1", "node2"]  # node3 mixed, node4 down: not selected
    node2 = inv.host("node2")
    assert node2.faults == ("gpu_missing",) and node2.vars["slurm_node"]["state"] == "drained"
    assert node2.vars["slurm_node"]["reason"].startswith("nvdeploy x:") and inv.groups["gpu"] == ("node1", "node2")


def test_nodes_hostlist_and_no_state_filter(tmp_path: Path, from_capture: None) -> None:
    inv = load_inventory(_write(tmp_path, "      slurm: {nodes: 'node[2-4]'}\n"), slurm_groups=source.resolve_group)
    assert [h.name for h in inv.hosts] == ["node2", "node3", "node4"]
    assert inv.host("node4").vars["slurm_node"]["state"] == "down"


def test_hosts_entry_for_a_node_filtered_out_adds_nothing(tmp_path: Path, from_capture: None) -> None:
    inv = load_inventory(_write(tmp_path, "      slurm: {states: [idle]}\n      hosts:\n        node4: {}\n"),
                         slurm_groups=source.resolve_group)
    assert [h.name for h in inv.hosts] == ["node1"]


@pytest.mark.parametrize("group,message", [
    ("      slurm: {partition: nope}\n", "Slurm has no partition 'nope' (known: debug)"),
    ("      slurm: {states: [sleepy]}\n", "must be a list of Slurm state names"),
    ("      slurm: {colour: red}\n", "unknown key in slurm"),
    ("      slurm: {nodes: 'n[3-1]'}\n", "bad hostlist"),
    ("      slurm: {}\n      hosts:\n        gpu999: {}\n", "Slurm knows no node 'gpu999'"),
])
def test_bad_slurm_group_is_a_config_error_with_line(tmp_path: Path, from_capture: None, group: str,
                                                     message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_inventory(_write(tmp_path, group), slurm_groups=source.resolve_group)
    assert message in err.value.render() and err.value.line is not None


def test_slurmctld_unreachable_is_a_config_error_with_slurms_message(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def down(timeout: float) -> list:
        raise SlurmError(["sinfo", "--json"], "slurm_load_node: Unable to contact slurm controller (connect failure)")

    monkeypatch.setattr(source, "fetch_nodes", down)
    with pytest.raises(ConfigError) as err:
        load_inventory(_write(tmp_path, "      slurm: {partition: debug}\n"), slurm_groups=source.resolve_group)
    assert "Unable to contact slurm controller (connect failure)" in err.value.render()
    assert err.value.key == "slurm" and err.value.line == 5


def test_a_slurm_group_needs_the_slurm_source_from_the_caller(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_inventory(_write(tmp_path, "      slurm: {partition: debug}\n"))
    assert err.value.key == "slurm" and err.value.line == 5
