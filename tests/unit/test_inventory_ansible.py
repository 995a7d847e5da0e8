"""Inventories resolved as Ansible resolves them: compared with ``ansible-inventory --list`` on a corpus, or refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from nvdeploy.config import inventory_ansible as ansible
from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.config.yamlfile import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fixtures" / "inventories"
CATALOG = ProfileCatalog()
CASES = sorted(p for p in CORPUS.iterdir() if p.is_file()) + sorted((ROOT / "inventories").glob("*.yaml"))


def _ansible_inventory() -> str:
    # The test extra installs it beside this interpreter; the PATH of a test run may not include the venv.
    beside = Path(sys.executable).parent / "ansible-inventory"
    found = str(beside) if beside.is_file() else shutil.which("ansible-inventory")
    if found is None:
        pytest.skip("ansible-inventory is not installed (pip install -e '.[test]' installs ansible-core)")
    return found


def ansible_resolution(source: str, tmp_path: Path) -> tuple[dict[str, list[str]], dict[str, dict[str, Any]]]:
    """Groups per host and merged vars per host (mapped to nvdeploy's keys) as Ansible resolves ``source``."""
    env = dict(os.environ, ANSIBLE_INVENTORY_UNPARSED_FAILED="True", ANSIBLE_HOME=str(tmp_path / "ansible"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"), ANSIBLE_NOCOLOR="1")
    done = subprocess.run([_ansible_inventory(), "-i", source, "--list"], capture_output=True, text=True, env=env,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    hostvars = data["_meta"]["hostvars"]
    groups = {name: body for name, body in data.items() if name != "_meta"}

    def members(name: str) -> set[str]:
        body = groups.get(name, {})
        found = set(body.get("hosts", []))
        for child in body.get("children", []):
            found |= members(child)
        return found

    closure = {name: members(name) for name in groups}
    hosts = closure["all"]
    per_host = {h: sorted(g for g, m in closure.items() if h in m) for h in hosts}
    merged = {h: ansible.translate(hostvars.get(h, {}), {})[0] for h in hosts}
    return per_host, merged


def nvdeploy_resolution(source: str) -> tuple[dict[str, list[str]], dict[str, dict[str, Any]]]:
    inventory = load_inventory(source, CATALOG)
    return ({h.name: sorted(h.groups) for h in inventory.hosts}, {h.name: dict(h.vars) for h in inventory.hosts})


def test_the_corpus_covers_what_the_issue_names():
    names = {p.name for p in CASES}
    assert len(CASES) >= 12
    assert {"parent_before_children.yaml", "group_in_two_places.yaml", "siblings_same_depth.yaml", "ranges.yaml",
            "connection_vars.yaml", "hosts.ini", "demo.yaml", "example-ssh.yaml"} <= names


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_resolution_is_the_same_as_ansible_inventory_list(path, tmp_path):
    groups, merged = ansible_resolution(str(path), tmp_path)
    ours_groups, ours_vars = nvdeploy_resolution(str(path))
    assert set(ours_groups) == set(groups)
    for host in groups:
        assert ours_groups[host] == groups[host], host
        assert ours_vars[host] == merged[host], host


def test_the_issue_cases_resolve_as_ansible_says():
    parent_first = load_inventory(CORPUS / "parent_before_children.yaml", CATALOG)
    for name in ("hgpu01", "hgpu04"):
        assert parent_first.host(name).profile == "h200-8x"
        assert parent_first.host(name).get("driver_version") == "560.35.03"
    two_places = load_inventory(CORPUS / "group_in_two_places.yaml", CATALOG)
    a1, a3 = two_places.host("a1"), two_places.host("a3")
    assert a1.get("connect_timeout") == 25 and a3.get("connect_timeout") == 25  # pod_a's vars, from the 2nd place
    assert {"east", "west"} <= set(a1.groups) and {"east", "west"} <= set(a3.groups)
    assert a3.get("rack") == "east" and a1.get("command_timeout") == 90
    siblings = load_inventory(CORPUS / "siblings_same_depth.yaml", CATALOG)
    assert siblings.host("gpu03").get("connect_timeout") == 20  # rack1 sorts after burnin
    assert siblings.host("gpu05").get("connect_timeout") == 45
    priority = load_inventory(CORPUS / "group_priority.yaml", CATALOG)
    assert priority.host("n2").get("connect_timeout") == 30  # priority 10 beats the name
    assert priority.host("n4").get("command_timeout") == 25
    depth = load_inventory(CORPUS / "nested_depth.yaml", CATALOG)
    assert depth.host("x1").get("command_timeout") == 40 and depth.host("x2").get("connect_timeout") == 99


def test_ansible_connection_vars_map_to_nvdeploy_keys():
    inv = load_inventory(CORPUS / "connection_vars.yaml", CATALOG)
    gpu01, gpu02, gpu03, local = (inv.host(n) for n in ("gpu01", "gpu02", "gpu03", "localhost"))
    assert (gpu01.address, gpu01.get("ssh_port"), gpu01.get("ssh_user")) == ("10.0.0.11", 2200, "ops")
    assert gpu01.get("ssh_key") == "~/.ssh/id_ed25519" and gpu01.get("sudo") is True
    assert gpu01.get("ssh_jump") == "ops@bastion.example.com:2222"
    assert gpu01.get("ssh_known_hosts") == "~/.ssh/known_hosts_gpu"
    assert gpu02.get("ssh_port") == 22
    # A deeper ansible_ssh_common_args replaces the outer one whole, as in Ansible: no jump host left.
    assert gpu03.get("ssh_jump") is None and gpu03.get("ssh_known_hosts") == "/etc/ssh/ssh_known_hosts"
    assert local.connection == "local"
    assert not any(k.startswith("ansible_") for h in inv.hosts for k in h.vars)
    ini = load_inventory(CORPUS / "proxycommand.ini", CATALOG)
    assert ini.host("b3").get("ssh_jump") == "ops@jump.example.com"
    assert ini.host("b1").address == "10.2.0.1" and ini.host("b3").address == "b3"


def test_ini_values_are_python_literals_as_in_ansible():
    inv = load_inventory(CORPUS / "hosts.ini", CATALOG)
    gpu05 = inv.host("gpu05")
    assert gpu05.get("ssh_port") == 2222 and gpu05.get("sudo") is True
    assert gpu05.get("connect_timeout") == 12.5 and gpu05.get("driver_version") == "550.90.07"
    assert inv.host("gpu07").get("rack_power_budget_w") == 48000
    assert "ungrouped" in inv.host("lonely").groups and "ungrouped" not in gpu05.groups
    pending = load_inventory(CORPUS / "pending_children.ini", CATALOG)
    assert [h.name for h in pending.hosts] == ["c1", "c3", "c2", "s1"]
    assert pending.host("c3").get("command_timeout") == 90  # compute's priority 5 beats storage
    assert pending.host("s1").get("sim_faults") == ["xid13", "xid79"]


REFUSED = {
    "mixed_spelling.yaml": (6, "ansible_user", "one name for one setting"),
    "strict_host_key_off.yaml": (4, "ansible_ssh_common_args", "StrictHostKeyChecking"),
    "unsupported_ssh_option.yaml": (6, "ansible_ssh_common_args", "ControlMaster"),
    "two_jump_hops.yaml": (4, "ansible_ssh_common_args", "one jump host"),
    "port_in_name.yaml": (5, "gpu02:2222", "ansible_port"),
    "group_loop.yaml": (11, "a", "contains itself"),
    "priority_on_host.yaml": (5, "ansible_group_priority", "group variable"),
    "become_method.yaml": (7, "ansible_become_method", "did you mean `ansible_become`?"),
    "string_bool.ini": (6, "sudo", "must be true or false"),
    "float_version.ini": (2, "driver_version", "550.12"),
    "undefined_child.ini": (6, "rack9", "undefined group"),
    "vars_for_no_group.ini": (4, "rack9", "[rack9:vars]"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_cannot_be_read_as_ansible_does_is_refused_with_file_line_and_key(name):
    line, key, words = REFUSED[name]
    path = CORPUS / "refused" / name
    with pytest.raises(ConfigError) as info:
        load_inventory(path, CATALOG)
    err = info.value
    assert (err.file, err.line, err.key) == (str(path), line, key), err.render()
    assert words in err.message
    assert err.render().startswith(f"{path}:{line}: key '{key}'")


def test_every_refusal_fixture_is_checked():
    assert {p.name for p in (CORPUS / "refused").iterdir()} == set(REFUSED)


def test_unknown_key_suggests_the_nearest_instead_of_listing_every_key(write_inventory):
    path = write_inventory("all:\n  vars: {profle: h100-sxm-8x}\n  hosts: {gpu01: {}}\n")
    with pytest.raises(ConfigError) as info:
        load_inventory(path, CATALOG)
    assert info.value.key == "profle" and info.value.line == 2
    assert "did you mean `profile`?" in info.value.message
    assert "cuda_version" not in info.value.message
    path = write_inventory("all:\n  hosts: {gpu01: {}}\n  hots: {}\n")
    with pytest.raises(ConfigError) as info:
        load_inventory(path, CATALOG)
    assert "did you mean `hosts`?" in info.value.message


def test_ansible_source_reads_what_only_ansible_reads(tmp_path, monkeypatch):
    """``-i ansible:DIR``: an INI file plus group_vars/, which only Ansible's vars plugin reads."""
    _ansible_inventory()
    monkeypatch.setenv("ANSIBLE_HOME", str(tmp_path / "ansible"))
    source = tmp_path / "site"
    (source / "group_vars").mkdir(parents=True)
    (source / "hosts").write_text("[gpus]\ngpu[01:03]\n", encoding="utf-8")
    (source / "group_vars" / "gpus.yml").write_text(textwrap.dedent("""\
        profile: h200-8x
        ansible_user: ops
        driver_version: "560.35.03"
        """), encoding="utf-8")
    path = f"{ansible.ANSIBLE_SOURCE_PREFIX}{source}"
    inv = load_inventory(path, CATALOG)
    assert [h.name for h in inv.hosts] == ["gpu01", "gpu02", "gpu03"]
    assert {h.profile for h in inv.hosts} == {"h200-8x"}
    assert inv.host("gpu02").get("ssh_user") == "ops" and inv.host("gpu02").get("driver_version") == "560.35.03"
    assert set(inv.groups["gpus"]) == {"gpu01", "gpu02", "gpu03"}
    assert inv.path == path and inv.cluster == "site"


def test_ansible_source_applies_the_same_checks(tmp_path, monkeypatch):
    _ansible_inventory()
    monkeypatch.setenv("ANSIBLE_HOME", str(tmp_path / "ansible"))
    (tmp_path / "hosts").write_text("[gpus]\ngpu01 profile=h100-sxm-8x ntp_server=10.0.0.1\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_inventory(f"ansible:{tmp_path / 'hosts'}", CATALOG)
    assert info.value.key == "ntp_server" and "unknown variable" in info.value.message
    with pytest.raises(ConfigError) as info:
        load_inventory(f"ansible:{tmp_path / 'missing'}", CATALOG)
    assert "ansible-inventory failed" in info.value.message


@pytest.mark.parametrize("args, expected", [
    ("-J ops@bastion:2222", {"ssh_jump": "ops@bastion:2222"}),
    ("-o ProxyJump=bastion", {"ssh_jump": "bastion"}),
    ("-oProxyJump=ops@b", {"ssh_jump": "ops@b"}),
    ("-o 'ProxyCommand=ssh -W %h:%p -q -p 2200 ops@b'", {"ssh_jump": "ops@b:2200"}),
    ("-o UserKnownHostsFile=/k -J b", {"ssh_known_hosts": "/k", "ssh_jump": "b"}),
    ("", {}),
])
def test_ssh_common_args_that_map(args, expected):
    assert ansible.ssh_args(args) == expected


@pytest.mark.parametrize("args", ["-o ForwardAgent=yes", "-v", "-o ProxyCommand='nc %h %p'", "-J",
                                  "-o StrictHostKeyChecking=accept-new", "-o 'unclosed"])
def test_ssh_common_args_that_do_not_map_are_refused(args):
    with pytest.raises(ValueError):
        ansible.ssh_args(args)


SPELLINGS = ["yes", "no", "Yes", "NO", "true", "false", "True", "False", "TRUE", "on", "off", "1", "0", "y", "n",
             "t", "f"]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_ini_booleans_are_read_as_ansible_reads_them(tmp_path, spelling):
    """Ansible's own boolean() (the reference: ansible-core's convert_bool) decides what become=yes means."""
    from ansible.module_utils.parsing.convert_bool import boolean

    path = tmp_path / "hosts"
    path.write_text(f"[gpus]\ngpu01 ansible_become={spelling} node_python={spelling}\n[gpus:vars]\n"
                    f"profile=h100-sxm-8x\nmps={spelling}\n")
    host = load_inventory(path, CATALOG).host("gpu01")
    expected = boolean(_ini_literal(spelling))
    assert host.get("sudo") is expected and host.get("node_python") is expected and host.get("mps") is expected


def _ini_literal(text: str) -> Any:
    """What Ansible's INI parser hands to boolean(): a Python literal where the text is one (1, True), else text."""
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def test_a_folder_given_as_an_ini_file_points_at_ansible_source(tmp_path):
    (tmp_path / "group_vars").mkdir()
    with pytest.raises(ConfigError) as info:
        load_inventory(tmp_path, CATALOG)
    assert "is a folder" in info.value.message and f"-i ansible:{tmp_path}" in info.value.message
