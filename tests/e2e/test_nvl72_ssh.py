"""A small NVL72 rack over real SSH (fake GB200 trays behind sshd on loopback): the fabric, recovery-action and
domain findings are the same as the same trays give in-process."""

from __future__ import annotations

import pytest

from nvdeploy.config.levels import load_levels
from nvdeploy.results import Verdict
from nvdeploy.runner.engine import EngineOptions

QUICK = EngineOptions(checks=load_levels()["quick"])
MINE = ("nvlink.fabric", "gpu.recovery_action", "nvlink.domain")
TRAYS = {"tray01": (), "tray02": ("fabric_incomplete",), "tray03": ("domain_split", "recovery_reset"),
         "tray04": ("fabric_unhealthy",)}

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("requires_sshd")]


def comparable(outcome):
    nodes = sorted((n.name, f.check, f.verdict.value, f.gpu, f.summary) for n in outcome.run.nodes
                   for f in n.findings if f.check in MINE)
    cluster = sorted((f.verdict.value, f.summary) for f in outcome.run.cluster_findings if f.check == "nvlink.domain")
    return nodes, cluster


def test_a_small_rack_over_ssh_gives_the_same_domain_findings_as_in_process(validate_trays_both_ways):
    over_ssh, in_process = validate_trays_both_ways(TRAYS, QUICK)
    assert comparable(over_ssh) == comparable(in_process)
    nodes, domains = comparable(over_ssh)
    assert {(n, c, v) for n, c, v, _, _ in nodes if v != "PASS"} == {
        ("tray02", "nvlink.fabric", "ERROR"), ("tray03", "gpu.recovery_action", "FAIL"),
        ("tray03", "nvlink.domain", "FAIL"), ("tray04", "nvlink.fabric", "FAIL")}
    assert [v for v, _ in domains] == [Verdict.FAIL.value, Verdict.FAIL.value]
    assert any("missing tray02: no GPU registered" in s and "tray03: in clique 32765" in s for _, s in domains)
