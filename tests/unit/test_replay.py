"""The replayed fake tools record the commands a collector's own script runs, not only the collector's argv: a
dcgm_health batch on a replayed node must not fall back to the Python simulator (64 of them at once time out)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from nvdeploy.collect.datacenter import DCGM_HEALTH
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.sim.fake_tool import install_fake_tools
from nvdeploy.sim.scenario import NodeScenario
from nvdeploy.testing.replay import _with_inner_commands, replay_node
from nvdeploy.testing.sshd import FakeNode

PROFILE = ProfileCatalog().get("h100-sxm-8x")


def test_the_simple_commands_of_an_sh_c_collector_are_recorded_too():
    argvs = list(_with_inner_commands([DCGM_HEALTH.argv, ("nvidia-smi", "-q", "-x")]))
    assert argvs[1:3] == [["dcgmi", "health", "-g", "0", "-s", "a"], ["dcgmi", "health", "-g", "0", "-c", "-j"]]
    assert argvs[0] == DCGM_HEALTH.argv and argvs[-1] == ("nvidia-smi", "-q", "-x")
    assert list(_with_inner_commands([("sh", "-c", 'exit $?; echo "$1"', "x")])) == [("sh", "-c", 'exit $?; echo "$1"',
                                                                                       "x")]


def test_a_replayed_node_answers_dcgm_health_without_the_simulator(tmp_path: Path):
    scenario = NodeScenario("n1", PROFILE, ())
    bin_dir, home = tmp_path / "bin", tmp_path / "home"
    home.mkdir()
    install_fake_tools(bin_dir)
    scenario_file = tmp_path / "scenario.json"
    scenario_file.write_text(scenario.to_json())
    node = FakeNode("n1", "127.0.1.1", 22, "nobody", bin_dir, scenario_file, home)
    assert replay_node(node, scenario, [DCGM_HEALTH.argv]) == 2
    # Without the scenario variable the Python fake tool would fail: an answer means the recording replied.
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(home)}
    proc = subprocess.run(list(DCGM_HEALTH.argv), env=env, capture_output=True, text=True, timeout=30,
                          cwd=os.fspath(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert '"Healthy"' in proc.stdout
