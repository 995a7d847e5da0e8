"""Fault ``smi_r610``: a simulated node's nvidia-smi prints the R610 layouts (versions with a deprecation note next to
KMD/CUDA UMD versions, limits under GPU Ceiling Power Limit, the KMD table header, --version's deprecated DRIVER
line), and every nvidia-smi parser reads the same facts from them as from the older layouts."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.parsers.detect import detect_format
from nvdeploy.parsers.nvidia_smi import parse_text, parse_version, parse_xml
from nvdeploy.parsers.nvml_json import parse_probe_json
from nvdeploy.sim.fake_nvml import run_probe
from nvdeploy.sim.scenario import NodeScenario
from nvdeploy.sim.tools import run_tool

CATALOG = ProfileCatalog()


def _out(scenario: NodeScenario, *args: str) -> str:
    result = run_tool(scenario, ["nvidia-smi", *args])
    assert result.rc == 0, result.stdout
    return result.stdout.decode()


@pytest.mark.parametrize("profile", CATALOG.names())
def test_r610_xml_reads_as_the_older_layout(profile: str) -> None:
    old = NodeScenario("gpu01", CATALOG.get(profile))
    new = NodeScenario("gpu01", CATALOG.get(profile), ("smi_r610",))
    old_xml, new_xml = _out(old, "-q", "-x"), _out(new, "-q", "-x")
    assert "<gpu_ceiling_power_limit>" in new_xml and "Use KMD Version instead" in new_xml
    assert "<gpu_ceiling_power_limit>" not in old_xml
    old_facts, new_facts = parse_xml(old_xml), parse_xml(new_xml)
    assert (new_facts.driver_version, new_facts.cuda_version) == (old_facts.driver_version, old_facts.cuda_version)
    assert [asdict(g) for g in new_facts.gpus] == [asdict(g) for g in old_facts.gpus]
    assert all(g.power_limit_w is not None and g.default_power_limit_w is not None for g in new_facts.gpus)
    # The probe reads NVML, whose API did not change: the same facts as either XML.
    probed = parse_probe_json(run_probe(new).stdout.decode())
    assert [asdict(g) for g in probed.gpus] == [asdict(g) for g in new_facts.gpus]


def test_r610_table_and_version_read_as_the_older_ones() -> None:
    old = NodeScenario("gpu01", CATALOG.get("h200-8x"))
    new = NodeScenario("gpu01", CATALOG.get("h200-8x"), ("smi_r610",))
    old_table, new_table = _out(old), _out(new)
    assert "KMD Version: " in new_table and "CUDA UMD Version: " in new_table and "Driver Version" not in new_table
    assert detect_format(new_table) == detect_format(old_table) == "nvidia-smi-text"
    old_facts, new_facts = parse_text(old_table), parse_text(new_table)
    assert new_facts.driver_version == old_facts.driver_version is not None
    assert new_facts.cuda_version == old_facts.cuda_version is not None
    assert [asdict(g) for g in new_facts.gpus] == [asdict(g) for g in old_facts.gpus]
    assert len(new_facts.gpus) == 8 and all(g.power_limit_w == 700.0 for g in new_facts.gpus)
    new_version = _out(new, "--version")
    assert "DRIVER version      : Deprecated, see KMD version" in new_version
    assert parse_version(new_version).driver_version == parse_version(_out(old, "--version")).driver_version \
        == old_facts.driver_version
