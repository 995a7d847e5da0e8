"""MIG layouts: the nvidia-smi mig parsers on real captures (-lgi, -lci, -lgip, -lgipp, -cgi/-dci/-dgi lines), the
mig-parted config reader (bad input names file, line and key; exit 2), and the simulated nvidia-smi mig."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from nvdeploy.cli.app import cli
from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.mig_config import host_layout, load_config
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.config.yamlfile import ConfigError
from nvdeploy.parsers.detect import detect_format
from nvdeploy.parsers.mig import parse_mig
from nvdeploy.sim import state
from nvdeploy.sim.scenario import NodeScenario
from nvdeploy.sim.tools import run_tool

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "nvidia-smi-mig"
CATALOG = ProfileCatalog()


def real(name: str) -> str:
    return (REAL / name).read_text()


# ------------------------------------------------------------------------------------------- parsers, real captures


def test_lci_with_placement_h100_seven_1g_10gb():
    facts = parse_mig(real("lci-h100-80gb-hbm3-seven-1g.10gb-with-placement-column.txt"))
    assert facts.tables == ("compute",) and not facts.warnings
    rows = [(c.gpu, c.gpu_instance_id, c.name, c.profile_id, c.instance_id, c.placement_start, c.placement_size)
            for c in facts.compute_instances]
    assert rows[:2] == [(0, 7, "MIG 1g.10gb", 0, 0, 0, 1), (0, 8, "MIG 1g.10gb", 0, 0, 0, 1)]
    assert len(facts.compute_instances) == 7 and detect_format(real(
        "lci-h100-80gb-hbm3-seven-1g.10gb-with-placement-column.txt")) == "nvidia-smi-mig"


def test_lci_two_compute_slices_in_one_gpu_instance_a100():
    facts = parse_mig(real("lci-a100-sxm4-40gb-mixed-two-1c.2g.10gb-in-one-gi-placement-580.126.09.txt"))
    rows = [(c.gpu_instance_id, c.name, c.profile_id, c.instance_id, c.placement_start)
            for c in facts.compute_instances]
    assert rows == [(9, "MIG 1g.5gb", 0, 0, 0), (3, "MIG 1c.2g.10gb", 0, 0, 0), (3, "MIG 1c.2g.10gb", 0, 1, 1),
                    (2, "MIG 4g.20gb", 3, 0, 0)]


def test_lci_rtx_pro_and_lgi_of_three_drivers():
    assert len(parse_mig(real("lci-rtx-pro-6000-blackwell-four-1g.24gb-placement.txt")).compute_instances) == 4
    a30 = parse_mig(real("lgi-a30-two-1g.6gb-one-2g.12gb-535.183.01.txt"))
    assert sorted(i.name for i in a30.instances) == ["MIG 1g.6gb", "MIG 1g.6gb", "MIG 2g.12gb"]
    rtx = parse_mig(real("lgi-rtx-pro-6000-blackwell-mixed-2g.48gb-listed-last.txt"))
    assert [(i.name, i.profile_id, i.instance_id, i.placement_start, i.placement_size) for i in rtx.instances][-1] == \
        ("MIG 2g.48gb", 5, 1, 0, 6)
    h100 = parse_mig(real("lgi-h100-80gb-hbm3-seven-1g.10gb-instances.txt"))
    assert {i.name for i in h100.instances} == {"MIG 1g.10gb"} and len(h100.instances) == 7


def test_no_instances_placements_and_change_lines():
    empty = parse_mig(real("lgi-a30-no-gpu-instances-not-found-535.183.01.txt"))
    assert empty.message == "No GPU instances found: Not Found" and not empty.instances and not empty.warnings
    placements = parse_mig(real("lgipp-h100-80gb-hbm3-placements.txt")).placements
    assert placements[0] == (0, 19, (0, 1, 2, 3, 4, 5, 6), 1) and placements[4] == (0, 9, (0, 4), 4)
    assert placements[-1] == (0, 0, (0,), 8)  # "Placement :" where there is one
    made = parse_mig(real("cgi-C-h100-80gb-hbm3-seven-1g.10gb-created-out-of-order.txt")).changes
    assert len(made) == 14
    assert made[0] == "Successfully created GPU instance ID 13 on GPU 0 using profile MIG 1g.10gb (ID 19)"
    assert len(parse_mig(real("dci-h100-80gb-hbm3-seven-destroyed.txt")).changes) == 7
    refused = parse_mig(real("dgi-rtx-pro-6000-blackwell-FAIL-in-use-by-another-client.txt"))
    assert "In use by another client" in (refused.message or "") and not refused.changes


def test_every_real_mig_capture_is_detected_and_parsed():
    for path in sorted(REAL.iterdir()):
        text = path.read_text()
        assert detect_format(text) == "nvidia-smi-mig", path.name
        facts = parse_mig(text)
        assert facts.profiles or facts.instances or facts.compute_instances or facts.placements or facts.changes \
            or facts.message or facts.tables, path.name


def test_lci_row_without_title_is_a_fragment():
    line = real("lci-h100-80gb-hbm3-seven-1g.10gb-with-placement-column.txt").splitlines()[6]
    facts = parse_mig(line + "\n")
    assert facts.fragment and len(facts.compute_instances) == 1 and detect_format(line + "\n") == "nvidia-smi-mig"


# ------------------------------------------------------------------------------------------- the config file

GOOD = """version: v1
mig-configs:
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
  mixed:
    - devices: [0, 1]
      device-filter: ["0x233010DE"]
      mig-enabled: true
      mig-devices: {"3g.40gb": 1, "4g.40gb": 1}
    - devices: [2]
      mig-enabled: false
"""


def test_a_mig_parted_config_and_a_configmap_carrying_one(tmp_path):
    path = tmp_path / "mig.yaml"
    path.write_text(GOOD)
    layouts = load_config(path)
    mixed = layouts["mixed"]
    assert mixed.for_gpu(0, "0x233010DE").instances == (("3g.40gb", 1), ("4g.40gb", 1))
    assert mixed.for_gpu(0, "0x20B210DE") is None and mixed.for_gpu(5, "0x233010DE") is None
    assert mixed.for_gpu(2, None).enabled is False
    cm = tmp_path / "cm.yaml"
    cm.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: custom-mig-parted-config}\ndata:\n"
                  "  config.yaml: |\n" + "".join("    " + line + "\n" for line in GOOD.splitlines()))
    assert set(load_config(cm)) == {"all-1g.10gb", "mixed"}
    assert host_layout({"mig_config": "all-disabled"}).entries[0].enabled is False


@pytest.mark.parametrize("body, line, key, words", [
    (GOOD.replace("version: v1", "version: v2"), 1, "version", "must be v1"),
    (GOOD.replace('"1g.10gb": 7', '"1g.10gb": 9'), 7, "1g.10gb", "count of instances"),
    (GOOD.replace('"1g.10gb": 7', '"1g.10gbx": 7'), 7, "1g.10gbx", "not a GPU instance profile"),
    (GOOD.replace("      device-filter", "      device-filters"), 10, "device-filters", "unknown key"),
    (GOOD.replace("devices: [2]", "devices: [two]"), 13, "devices", "list of GPU indexes"),
    (GOOD.replace("      mig-enabled: false", "      mig-enabled: nope"), 14, "mig-enabled", "true or false"),
    (GOOD.replace('{"3g.40gb": 1, "4g.40gb": 1}', '{"1c.3g.40gb": 2}'), 12, "1c.3g.40gb", "compute instance slices"),
])
def test_bad_config_names_file_line_and_key(tmp_path, body, line, key, words):
    path = tmp_path / "mig.yaml"
    path.write_text(body)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert (info.value.file, info.value.line, info.value.key) == (str(path), line, key), info.value
    assert words in info.value.message


def inventory(tmp_path: Path, vars_: str) -> Path:
    (tmp_path / "mig.yaml").write_text(GOOD)
    path = tmp_path / "inv.yaml"
    path.write_text("all:\n  vars: {connection: sim, profile: h100-sxm-8x}\n  hosts:\n"
                    f"    gpu01: {{{vars_}}}\n")
    return path


def test_inventory_checks_the_layout_before_any_connection(tmp_path):
    inv = load_inventory(inventory(tmp_path, "mig_config: mixed, mig_config_file: mig.yaml"), CATALOG)
    assert inv.hosts[0].vars["mig_config_file"] == str((tmp_path / "mig.yaml").resolve())  # relative to the inventory
    with pytest.raises(ConfigError) as info:
        load_inventory(inventory(tmp_path, "mig_config: all-2g.20gb, mig_config_file: mig.yaml"), CATALOG)
    assert info.value.key == "mig_config" and info.value.line == 4 and "all-1g.10gb, mixed" in info.value.message
    with pytest.raises(ConfigError) as info:
        load_inventory(inventory(tmp_path, "mig_config: all-1g.10gb"), CATALOG)
    assert "mig_config_file" in info.value.message  # only all-disabled / all-enabled are built in
    with pytest.raises(ConfigError) as info:
        load_inventory(inventory(tmp_path, "mig_config_file: mig.yaml"), CATALOG)
    assert info.value.key == "mig_config_file"


def test_a_bad_layout_file_is_exit_2_naming_it(tmp_path):
    path = inventory(tmp_path, "mig_config: mixed, mig_config_file: mig.yaml")
    (tmp_path / "mig.yaml").write_text(GOOD.replace('"1g.10gb": 7', '"1g.10gb": -1'))
    result = CliRunner().invoke(cli, ["validate", "-i", str(path)])
    assert result.exit_code == 2, result.output
    assert f"{tmp_path / 'mig.yaml'}:7: key '1g.10gb'" in result.output and "Traceback" not in result.output


# ------------------------------------------------------------------------------------------- the simulator


@pytest.fixture(autouse=True)
def fresh_state():
    state.reset_memory()
    yield
    state.reset_memory()


def smi(scenario: NodeScenario, *args: str, root: bool = True):
    out = run_tool(scenario, (["sudo", "-n"] if root else []) + ["nvidia-smi", *args])
    return out.rc, out.stdout.decode()


def test_sim_mig_is_root_only_and_refuses_what_does_not_fit():
    node = NodeScenario("n1", CATALOG.get("h100-sxm-8x"), cluster="u")
    assert smi(node, "-i", "0", "-mig", "1", root=False)[0] == 4
    assert smi(node, "-i", "0", "-mig", "1") == (0, "Enabled MIG Mode for GPU 00000000:18:00.0\nAll done.\n")
    rc, text = smi(node, "mig", "-i", "0", "-cgi", "4g.40gb,3g.40gb", "-C", root=False)
    assert rc == 4 and "Insufficient Permissions" in text
    rc, text = smi(node, "mig", "-i", "0", "-cgi", "4g.40gb,3g.40gb,1g.10gb", "-C")
    assert rc != 0 and text.endswith("Unable to create a GPU instance on GPU  0 using profile 19: Insufficient "
                                     "Resources\n") and text.count("Successfully created GPU instance") == 2
    facts = parse_mig(smi(node, "mig", "-lgi", root=False)[1])  # listing needs no root
    assert sorted((i.name, i.placement_start, i.placement_size) for i in facts.instances) == [
        ("MIG 3g.40gb", 4, 4), ("MIG 4g.40gb", 0, 4)]
    cis = parse_mig(smi(node, "mig", "-lci")[1]).compute_instances
    assert sorted((c.name, c.profile_id) for c in cis) == [("MIG 3g.40gb", 2), ("MIG 4g.40gb", 3)]
    assert smi(node, "mig", "-i", "0", "-dgi")[0] != 0  # compute instances first
    assert smi(node, "mig", "-i", "0", "-dci")[0] == 0 and smi(node, "mig", "-i", "0", "-dgi")[0] == 0
    assert parse_mig(smi(node, "mig", "-lgi")[1]).message == "No GPU instances found: Not Found"


def test_sim_a100_mode_change_stays_pending_until_a_reset_and_vm_cannot_reset():
    node = NodeScenario("n1", CATALOG.get("a100-sxm-8x"), cluster="u")
    rc, text = smi(node, "-i", "1", "-mig", "1")
    assert rc == 0 and "pending enable state" in text
    query = ("--query-gpu=index,mig.mode.current,mig.mode.pending", "--format=csv,noheader")
    assert smi(node, *query)[1].splitlines()[1] == "1, Disabled, Enabled"
    assert smi(node, "-i", "1", "-r")[0] == 0
    assert smi(node, *query)[1].splitlines()[1] == "1, Enabled, Enabled"
    vm = NodeScenario("n2", CATALOG.get("a100-sxm-8x"), ("vm_passthrough",), cluster="u")
    smi(vm, "-i", "1", "-mig", "1")
    assert smi(vm, "-i", "1", "-r")[0] != 0
    assert run_tool(vm, ["systemd-detect-virt", "--vm"]).stdout == b"kvm\n"
    assert run_tool(vm, ["sudo", "-n", "reboot"]).rc == 0
    assert smi(vm, *query)[1].splitlines()[1] == "1, Enabled, Enabled"  # the reboot activated it


def test_sim_mig_drift_loses_one_instance_of_that_gpu_only():
    node = NodeScenario("n1", CATALOG.get("h100-sxm-8x"), ("mig_drift:2",), cluster="u")
    smi(node, "-mig", "1")
    for gpu in ("1", "2"):
        smi(node, "mig", "-i", gpu, "-cgi", ",".join(["1g.10gb"] * 7), "-C")
    instances = parse_mig(smi(node, "mig", "-lgi")[1]).instances
    assert sum(i.gpu == 1 for i in instances) == 7 and sum(i.gpu == 2 for i in instances) == 6
