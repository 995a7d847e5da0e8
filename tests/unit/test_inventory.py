from __future__ import annotations

import textwrap

import pytest

from nvdeploy.config.hostrange import HostRangeError, expand, fold
from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.config.yamlfile import ConfigError
from nvdeploy.sim.scenario import validate_fault

CATALOG = ProfileCatalog()


def load(write_inventory, text: str):
    return load_inventory(write_inventory(textwrap.dedent(text)), CATALOG, check_fault=validate_fault)


def error_of(write_inventory, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(write_inventory, text)
    return info.value


@pytest.mark.parametrize("pattern, expected", [
    ("gpu[001-003]", ["gpu001", "gpu002", "gpu003"]),
    ("gpu[01-02,07]", ["gpu01", "gpu02", "gpu07"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    ("plain", ["plain"]),
])
def test_host_ranges_expand_with_zero_padding(pattern, expected):
    assert expand(pattern) == expected


@pytest.mark.parametrize("pattern", ["gpu[3-1]", "gpu[a-b]", "gpu[1-2", "gpu[]", "gpu[1-9999999]"])
def test_bad_host_ranges_are_rejected(pattern):
    with pytest.raises(HostRangeError):
        expand(pattern)


def test_fold_names_into_ranges():
    names = [f"gpu{i:03d}" for i in range(1, 128)] + ["gpu200", "login"]
    assert fold(names) == "gpu[001-127,200],login"


def test_group_and_host_var_precedence(write_inventory):
    inv = load(write_inventory, """
        all:
          vars: {connection: sim, profile: h100-sxm-8x, ssh_port: 22, command_timeout: 30}
          children:
            rack:
              vars: {ssh_port: 2222, command_timeout: 40}
              children:
                inner:
                  vars: {command_timeout: 50}
                  hosts:
                    gpu[01-02]: {}
                    gpu02: {command_timeout: 60}
        """)
    gpu01, gpu02 = inv.host("gpu01"), inv.host("gpu02")
    assert gpu01.get("ssh_port") == 2222
    assert gpu01.get("command_timeout") == 50
    assert gpu02.get("command_timeout") == 60
    assert set(gpu01.groups) == {"all", "rack", "inner"}
    assert inv.cluster == "inv"


def test_unquoted_version_is_rejected_with_line_and_key(write_inventory):
    err = error_of(write_inventory, """
        all:
          vars:
            profile: h100-sxm-8x
            driver_version: 550.120
          hosts:
            gpu01: {}
        """)
    assert err.key == "driver_version"
    assert err.line == 5
    assert "quoted string" in err.message and "550.12" in err.message
    assert err.file.endswith("inv.yaml")


@pytest.mark.parametrize("body, key", [
    ("all:\n  hosts:\n    gpu01: {profile: h100-sxm-8x, colour: red}\n", "colour"),
    ("all:\n  vars: {profile: h100-sxm-8x, ssh_port: '22'}\n  hosts: {gpu01: {}}\n", "ssh_port"),
    ("all:\n  vars: {profile: h100-sxm-8x, sudo: 'yes'}\n  hosts: {gpu01: {}}\n", "sudo"),
    ("all:\n  vars: {profile: h100-sxm-8x, connection: telnet}\n  hosts: {gpu01: {}}\n", "connection"),
    ("all:\n  vars: {profile: h100-sxm-8x, sim_faults: xid79}\n  hosts: {gpu01: {}}\n", "sim_faults"),
    ("all:\n  vars: {profile: no-such-profile}\n  hosts: {gpu01: {}}\n", "profile"),
    ("all:\n  vars: {profile: h100-sxm-8x}\n  hosts: {gpu01: {}}\n  groups: {}\n", "groups"),
    ("all:\n  hosts: {gpu01: {}}\n", "profile"),
    ("all:\n  vars: {profile: h100-sxm-8x, connection: sim, sim_faults: [melted]}\n  hosts: {gpu01: {}}\n",
     "sim_faults"),
    ("all:\n  vars: {profile: h100-sxm-8x, address: '-oProxyCommand=x'}\n  hosts: {gpu01: {}}\n", "address"),
])
def test_bad_keys_and_types_name_the_key(write_inventory, body, key):
    err = error_of(write_inventory, body)
    assert err.key == key, err.render()
    assert err.line is not None
    assert str(err.line) in err.render()


def test_bad_range_names_the_line(write_inventory):
    err = error_of(write_inventory, "all:\n  vars: {profile: h100-sxm-8x}\n  hosts:\n    gpu[9-1]: {}\n")
    assert err.line == 4 and "range" in err.message


def test_host_name_starting_with_dash_is_rejected(write_inventory):
    err = error_of(write_inventory, "all:\n  vars: {profile: h100-sxm-8x}\n  hosts:\n    '-oProxyCommand=sh': {}\n")
    assert "invalid host name" in err.message


def test_malformed_yaml_reports_line(write_inventory):
    err = error_of(write_inventory, "all:\n  hosts:\n    gpu01: {profile: [\n")
    assert "malformed YAML" in err.message and err.line is not None


def test_duplicate_key_is_an_error(write_inventory):
    err = error_of(write_inventory, "all:\n  vars: {profile: h100-sxm-8x}\n  hosts:\n    gpu01: {}\n    gpu01: {}\n")
    assert "duplicate" in err.message and err.line == 5


def test_python_tags_are_refused(write_inventory):
    err = error_of(write_inventory, "all: !!python/object/apply:os.system ['true']\n")
    assert "tag" in err.message


def test_alias_bomb_is_bounded(write_inventory):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    err = error_of(write_inventory, "\n".join(lines) + "\n")
    assert "alias bomb" in err.message


def test_huge_file_is_refused_before_reading(tmp_path):
    path = tmp_path / "big.yaml"
    with open(path, "wb") as handle:
        handle.truncate(100 * 1024 * 1024)
    with pytest.raises(ConfigError) as info:
        load_inventory(path, CATALOG)
    assert "limit" in info.value.message


def test_duplicate_ssh_address_is_rejected(write_inventory):
    err = error_of(write_inventory, """
        all:
          vars: {profile: h100-sxm-8x}
          hosts:
            a: {address: 10.0.0.1}
            b: {address: 10.0.0.1}
        """)
    assert err.key == "address"


def test_limit_patterns(write_inventory):
    inv = load(write_inventory, """
        all:
          vars: {profile: h100-sxm-8x, connection: sim}
          children:
            rack1: {hosts: {"gpu[01-04]": {}}}
            rack2: {hosts: {"gpu[05-08]": {}}}
        """)
    assert [h.name for h in inv.limit("rack2,!gpu06").hosts] == ["gpu05", "gpu07", "gpu08"]
    assert [h.name for h in inv.limit("gpu0[1-2]").hosts] == ["gpu01", "gpu02"]
    assert [h.name for h in inv.limit("gpu[03-04]").hosts] == ["gpu03", "gpu04"]
    with pytest.raises(ConfigError):
        inv.limit("gpu99")


def test_builtin_inventories_load():
    from nvdeploy.config.builtin import data_dir

    for path in sorted(data_dir("inventories").glob("*.yaml")):
        inv = load_inventory(path, CATALOG)
        assert inv.hosts
