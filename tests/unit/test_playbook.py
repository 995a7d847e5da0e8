"""Playbooks: strict schema with file/line/key errors, Jinja2 in a sandbox, values as single argv words."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from nvdeploy.cli.app import cli
from nvdeploy.config.inventory import Host, load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.config.yamlfile import ConfigError
from nvdeploy.phases.playbook import check_tags, load_playbook, plan_host, plan_hosts, resolve_playbook

CATALOG = ProfileCatalog()
PROFILE = CATALOG.get("h100-sxm-8x")
HOST = Host("gpu01", {"connection": "sim", "profile": "h100-sxm-8x", "driver_version": "550.90.07"})

GOOD = """\
name: test
steps:
  - id: driver
    action: driver.install
    params: {branch: "{{ driver_version.split('.')[0] }}"}
    changes: true
    tags: [driver]
  - id: verify
    action: driver.verify
    params: {branch: "550"}
    when: "gpu.count > 0"
    changes: false
"""


def write(tmp_path: Path, text: str, name: str = "pb.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def error_of(tmp_path: Path, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        playbook = load_playbook(write(tmp_path, text))
        plan_host(playbook, HOST, PROFILE)
    return info.value


def test_a_good_playbook_renders_params_from_inventory_and_profile(tmp_path):
    plan = plan_host(load_playbook(write(tmp_path, GOOD)), HOST, PROFILE)
    assert [p.step.id for p in plan] == ["driver", "verify"]
    assert plan[0].params["branch"] == "550" and plan[0].params["fabricmanager"] == "auto"
    assert plan[1].skip is None


@pytest.mark.parametrize("edit, line, key, words", [
    (("action: driver.verify", "action: driver.verfy"), 9, "steps[1].action", "unknown action 'driver.verfy'"),
    (("params: {branch: \"550\"}", "params: {branch: \"550\", force: true}"), 10, "steps.verify.params.force",
     "unknown parameter of driver.verify"),
    (("    changes: false\n", ""), 8, "steps.verify.changes", "say whether the step changes the node"),
    (("    changes: false\n", "    changes: true\n"), 12, "steps.verify.changes",
     "driver.verify does not change the node"),
    (("    tags: [driver]\n", "    tags: [driver]\n    retries: 3\n"), 8, "steps[0].retries", "unknown key in step"),
    (("name: test", "name: test\nhandlers: []"), 2, "handlers", "unknown top-level key"),
    (("\"gpu.count > 0\"", "\"gpu.count >\""), 11, "steps.verify.when", "template error"),
    (("{{ driver_version.split('.')[0] }}", "{{ driver_version.split('.')[0] }"), 5, "steps.driver.params.branch",
     "template error"),
    (("{{ driver_version.split('.')[0] }}", "{{ no_such_var }}"), 5, "steps.driver.params.branch",
     "host gpu01: undefined variable: 'no_such_var' is undefined"),
    (("branch: \"550\"", "branch: \"55; touch /tmp/pwned\""), 10, "steps.verify.params.branch", "is not allowed"),
    (("branch: \"550\"", "branch: [550]"), 10, "steps.verify.params.branch", "must be a string"),
    (("id: verify", "id: driver"), 8, "steps[1].id", "duplicate step id"),
])
def test_malformed_playbook_names_file_line_and_key(tmp_path, edit, line, key, words):
    old, new = edit
    assert old in GOOD
    error = error_of(tmp_path, GOOD.replace(old, new, 1))
    assert error.file == str(tmp_path / "pb.yaml")
    assert (error.line, error.key) == (line, key), error.render()
    assert words in error.message


def test_yaml_traps_are_errors(tmp_path):
    assert "malformed YAML" in error_of(tmp_path, "steps: [\n").message
    assert error_of(tmp_path, "steps: []\n").key == "steps"
    assert "unsupported YAML tag" in error_of(tmp_path, "steps: !!python/object/apply:os.system [x]\n").message
    error = error_of(tmp_path, GOOD + "name: again\n")
    assert error.key == "name" and "duplicate key" in error.message


def test_the_sandbox_refuses_python_internals(tmp_path):
    hostile = GOOD.replace("{{ driver_version.split('.')[0] }}", "{{ ''.__class__.__mro__[1].__subclasses__() }}")
    error = error_of(tmp_path, hostile)
    assert error.key == "steps.driver.params.branch"


def test_rendered_values_stay_one_argv_word(tmp_path):
    """A rendered value with shell syntax reaches the node as one argument of a fixed argv: nothing is pasted into a
    shell string (the write helper gets the content as "$1")."""
    from nvdeploy.actions.system import WRITE_SCRIPT, write_file_cmd

    cmd = write_file_cmd("w", "/etc/x.conf", "a; touch /tmp/pwned $(id)")
    assert cmd.argv[:3] == ("sh", "-c", WRITE_SCRIPT) and cmd.argv[4] == "a; touch /tmp/pwned $(id)"
    assert "$1" in WRITE_SCRIPT and "touch" not in WRITE_SCRIPT


def test_tags_that_match_no_step_are_an_error():
    playbook = load_playbook(resolve_playbook(None, "install"))
    check_tags(playbook, ("driver",), ("ib",))
    with pytest.raises(ConfigError, match="--tags 'drivr' matches no step"):
        check_tags(playbook, ("drivr",), ())


@pytest.mark.parametrize("name", ["install", "optimize"])
def test_builtin_playbooks_plan_for_every_profile(name):
    playbook = load_playbook(resolve_playbook(None, name))
    for profile in CATALOG.names():
        host = Host("n1", {"connection": "sim", "profile": profile})
        plan = plan_host(playbook, host, CATALOG.get(profile))
        assert plan and all(p.skip or p.params is not None for p in plan)


def test_run_playbook_names_its_phases(tmp_path):
    from nvdeploy.phases.run import load_run_playbook

    chain = load_run_playbook(resolve_playbook(None, "run"))
    assert (chain.install.name, chain.level, chain.optimize.name) == ("install", "quick", "optimize")
    bad = write(tmp_path, "install: install.yaml\nvalidate: {level: deep}\noptimize: optimize.yaml\n", "run.yaml")
    with pytest.raises(ConfigError) as info:
        load_run_playbook(bad)
    assert (info.value.line, info.value.key) == (2, "validate")


def test_cli_rejects_a_bad_playbook_before_any_connection(tmp_path):
    # SSH hosts on a closed port: any connection attempt would show up as unreachable, not exit 2.
    inventory = write(tmp_path, """\
        all:
          vars: {profile: h100-sxm-8x, ssh_port: 1, connect_timeout: 1}
          hosts:
            gpu01: {address: "127.0.0.1"}
        """, "inv.yaml")
    playbook = write(tmp_path, GOOD.replace("driver.verify", "driver.verfy"))
    for command in ("install", "optimize"):
        result = CliRunner().invoke(cli, [command, "-i", str(inventory), "--playbook", str(playbook), "--out",
                                          str(tmp_path / "r")])
        assert result.exit_code == 2, result.output
        assert f"{playbook}:9: key 'steps[1].action': unknown action 'driver.verfy'" in result.output
    undefined = write(tmp_path, GOOD.replace("{{ driver_version.split('.')[0] }}", "{{ mirror_url }}"), "u.yaml")
    result = CliRunner().invoke(cli, ["install", "-i", str(inventory), "--playbook", str(undefined)])
    assert result.exit_code == 2 and "u.yaml:5: key 'steps.driver.params.branch': host gpu01" in result.output
    bad_serial = CliRunner().invoke(cli, ["install", "-i", str(inventory), "--serial", "0%"])
    assert bad_serial.exit_code == 2 and "--serial" in bad_serial.output
    assert not (tmp_path / "r").exists()


def test_demo_inventory_plans_everywhere():
    from nvdeploy.cli.common import resolve_inventory_path

    inventory = load_inventory(resolve_inventory_path("demo"), CATALOG)
    plans = plan_hosts(load_playbook(resolve_playbook(None, "install")), inventory.hosts, CATALOG)
    assert len(plans) == len(inventory.hosts)
    assert {p.params["branch"] for plan in plans.values() for p in plan if p.step.id == "driver"} == {"550"}
