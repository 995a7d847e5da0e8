"""Host ranges: folding is ClusterShell's ``nodeset -f``, expanding follows ClusterShell and Ansible exactly."""

from __future__ import annotations

import random
import shutil
import subprocess
import textwrap

import pytest
from ClusterShell.NodeSet import NodeSet
from hypothesis import given, settings
from hypothesis import strategies as st

from nvdeploy.config.hostrange import HostRangeError, expand, expand_hostlist, fold, fold_slurm, split_hostlist
from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.config.yamlfile import ConfigError


def _generated_sets() -> list[tuple[str, list[str]]]:
    rng = random.Random(20)
    sets = [
        ("node1..node10000", [f"node{i}" for i in range(1, 10001)]),
        ("sparse padded 10k", [f"gpu{i:05d}" for i in sorted(rng.sample(range(20000), 10000))]),
        ("suffix 10k", [f"hgx{i:05d}.mgmt" for i in rng.sample(range(12000), 10000)]),
        ("grid 40x250 with holes", [f"rack{r}-gpu{i:03d}" for r in range(1, 41) for i in range(1, 251)
                                    if rng.random() > 0.02]),
        ("shuffled mixed", rng.sample([f"gpu{i}" for i in range(300)] + [f"gpu{i:03d}" for i in range(200, 400)]
                                      + [f"login{i}" for i in range(3)] + ["mgmt", "dgx-a100-7"], 505)),
    ]
    for n in range(40):
        size = rng.choice([1, 2, 5, 30, 300])
        width = rng.choice([0, 2, 3])
        prefix = rng.choice(["gpu", "node-", "r1n", "a"])
        suffix = rng.choice(["", "", ".ib", "-bmc"])
        names = {f"{prefix}{str(rng.randrange(0, 2000)).zfill(width)}{suffix}" for _ in range(size)}
        if n % 5 == 0:
            names |= {f"rack{rng.randrange(1, 9)}-gpu{rng.randrange(1, 9):02d}" for _ in range(20)}
        sets.append((f"random {n}", rng.sample(sorted(names), len(names))))
    return sets


SETS = _generated_sets()


@pytest.mark.parametrize("label, names", SETS, ids=[label for label, _ in SETS])
def test_fold_is_clustershells_nodeset_fold(label, names):
    assert fold(names) == str(NodeSet.fromlist(names))


@pytest.mark.parametrize("label, names", SETS, ids=[label for label, _ in SETS])
def test_folded_strings_read_back_through_nvdeploy_and_clustershell(label, names):
    folded = fold(names)
    assert sorted(expand_hostlist(folded)) == sorted(set(names))
    assert sorted(NodeSet(folded)) == sorted(set(names))


def test_fold_as_the_issue_asks():
    assert fold(f"node{i}" for i in range(1, 10001)) == "node[1-10000]"
    assert fold(f"hgx{i:02d}.mgmt" for i in [*range(1, 14), *range(16, 21)]) == "hgx[01-13,16-20].mgmt"
    assert fold(f"rack{r}-gpu{i:02d}" for r in (5, 3) for i in range(1, 9)) == "rack[3,5]-gpu[01-08]"
    assert fold(["gpu003", "gpu001", "gpu002"]) == "gpu[001-003]"
    names = [f"gpu{i:03d}" for i in range(1, 128)] + ["gpu200", "login"]
    assert fold(names) == "gpu[001-127,200],login"


def test_names_no_range_can_hold_are_kept_as_they_are():
    assert fold(["a%sb", "x,y", "gpu1", "gpu2", ""]) == "gpu[1-2],a%sb,x,y"


def _scontrol_hostnames(hostlist: str, tmp_path) -> list[str]:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=t\nSlurmctldHost=localhost\nNodeName=x\nPartitionName=p Nodes=x\n", encoding="utf-8")
    done = subprocess.run(["scontrol", "show", "hostnames", hostlist], capture_output=True, text=True, timeout=60,
                          env={"SLURM_CONF": str(conf), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.split()


# Not the 10,000 suffixed names: Slurm cannot fold them, and listed one by one they pass MAX_ARG_STRLEN.
SLURM_SETS = [s for s in SETS[:5] if s[0] != "suffix 10k"] + SETS[5::8]


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="scontrol (slurm-client) is not installed")
@pytest.mark.parametrize("label, names", SLURM_SETS, ids=[label for label, _ in SLURM_SETS])
def test_fold_slurm_is_read_by_scontrol_show_hostnames(label, names, tmp_path):
    assert sorted(_scontrol_hostnames(fold_slurm(names), tmp_path)) == sorted(set(names))


def test_fold_slurm_lists_suffixed_names_one_by_one():
    # Slurm 22.05 refuses 'hgx[01-02].mgmt' ("Invalid hostlist"): a suffix after the last bracket.
    assert fold_slurm(["hgx01.mgmt", "hgx02.mgmt", "n1", "n2"]) == "n[1-2],hgx01.mgmt,hgx02.mgmt"
    assert fold_slurm(["rack3-gpu01", "rack3-gpu02", "rack5-gpu01", "rack5-gpu02"]) == "rack[3,5]-gpu[01-02]"


@pytest.mark.parametrize("pattern, expected", [
    ("gpu[001-002,005]", ["gpu001", "gpu002", "gpu005"]),
    ("gpu[1-15/4]", ["gpu1", "gpu5", "gpu9", "gpu13"]),
    ("gpu[01:04]", ["gpu01", "gpu02", "gpu03", "gpu04"]),
    ("gpu[1:15:7]", ["gpu1", "gpu8", "gpu15"]),
    ("r[a:b]n[1:2]", ["ran1", "ran2", "rbn1", "rbn2"]),
    ("hgx[01-02].mgmt", ["hgx01.mgmt", "hgx02.mgmt"]),
    ("x[8-10]", ["x8", "x9", "x10"]),
])
def test_both_range_syntaxes_expand(pattern, expected):
    assert expand(pattern) == expected


@pytest.mark.parametrize("pattern", ["gpu[1-2]x[1:2]", "gpu[001:10]", "gpu[1:5:0]", "gpu[008-10]", "gpu[1:]",
                                     "gpu[1:2:3:4]", "gpu[1:99999999]"])
def test_bad_ranges_are_refused(pattern):
    with pytest.raises(HostRangeError):
        expand(pattern)


def test_split_hostlist_keeps_commas_inside_brackets():
    assert split_hostlist("gpu[001-002,005], login1,,rack[1,3]-n[1-2]") == ["gpu[001-002,005]", "login1",
                                                                              "rack[1,3]-n[1-2]"]
    with pytest.raises(HostRangeError):
        split_hostlist("gpu[1-2,3")


_bound = st.one_of(st.integers(0, 120).map(str), st.integers(0, 120).map(lambda n: f"{n:03d}"),
                   st.sampled_from(["", "a", "c", "Z", "05", "1_0"]))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(head=st.sampled_from(["gpu", "n-", ""]), beg=_bound, end=_bound,
       step=st.sampled_from([None, "1", "2", "7", "0", "x"]), tail=st.sampled_from(["", ".ib", "-[1:2]"]))
def test_ansible_ranges_expand_as_ansible_does(head, beg, end, step, tail):
    from ansible.errors import AnsibleError
    from ansible.plugins.inventory import expand_hostname_range

    pattern = f"{head}[{beg}:{end}{'' if step is None else ':' + step}]{tail}"
    try:
        theirs = expand_hostname_range(pattern)
    except (AnsibleError, ValueError):
        theirs = None
    try:
        ours = expand(pattern)
    except HostRangeError:
        ours = None
    assert ours == theirs, pattern


CATALOG = ProfileCatalog()


@pytest.fixture
def limit_inventory(write_inventory):
    return load_inventory(write_inventory(textwrap.dedent("""\
        all:
          vars: {profile: h100-sxm-8x, connection: sim}
          children:
            rack1: {hosts: {"gpu[001:004]": {}}}
            rack2: {hosts: {"gpu[005:008]": {}}}
        """)), CATALOG)


def test_limit_accepts_the_folded_form_nvdeploy_prints(limit_inventory):
    inv = limit_inventory
    assert [h.name for h in inv.limit("gpu[001-002,005]").hosts] == ["gpu001", "gpu002", "gpu005"]
    assert [h.name for h in inv.limit("gpu[001-004,007],!gpu[002-003]").hosts] == ["gpu001", "gpu004", "gpu007"]
    assert [h.name for h in inv.limit("rack2,!gpu[006,008]").hosts] == ["gpu005", "gpu007"]
    folded = fold(h.name for h in inv.hosts if h.name != "gpu006")
    assert folded == "gpu[001-005,007-008]"
    assert len(inv.limit(folded).hosts) == 7


def test_limit_error_names_the_inventory_file(limit_inventory):
    with pytest.raises(ConfigError) as info:
        limit_inventory.limit("gpu[009-010,012]")
    assert info.value.file == limit_inventory.path
    assert info.value.render().startswith(f"{limit_inventory.path}: key '--limit': ")
    with pytest.raises(ConfigError) as info:
        limit_inventory.limit("gpu[001-002")
    assert "<input>" not in info.value.render() and "unbalanced" in info.value.message
