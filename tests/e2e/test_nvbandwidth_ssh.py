"""nvbandwidth.copies over real SSH (fake GB200 trays behind sshd on loopback): the fake nvbandwidth answers -j with
the tray profile's figures, a tray with c2c_slow FAILs its host copies at PCIe speed, and the findings are the same
as the same trays give in-process."""

from __future__ import annotations

import pytest

from nvdeploy.runner.engine import EngineOptions

OPTIONS = EngineOptions(checks=("nvbandwidth.copies",))
TRAYS = {"tray01": (), "tray02": ("c2c_slow",)}

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("requires_sshd")]


def findings(outcome):
    return sorted((n.name, f.verdict.value, f.gpu, f.summary) for n in outcome.run.nodes for f in n.findings
                  if f.check == "nvbandwidth.copies")


def test_c2c_slow_tray_fails_its_host_copies_over_ssh_as_in_process(validate_trays_both_ways):
    over_ssh, in_process = validate_trays_both_ways(TRAYS, OPTIONS)
    assert findings(over_ssh) == findings(in_process)
    assert [(n, v, g) for n, v, g, _ in findings(over_ssh)] == [
        ("tray01", "PASS", None), ("tray01", "PASS", None), ("tray01", "PASS", None),
        ("tray02", "FAIL", 2), ("tray02", "FAIL", 2), ("tray02", "PASS", None)]
    slow = [s for n, v, _, s in findings(over_ssh) if v == "FAIL"]
    assert all("below the floor 120 GB/s" in s and "did not go over NVLink-C2C" in s for s in slow)
