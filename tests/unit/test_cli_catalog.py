"""The catalog from the command line: every id a report can show is listed and shown (the cluster stage's too),
`checks list` gives whole first sentences without markup and a level, the catalog commands have help, and
docs/checks.md is the catalog's own output."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from nvdeploy.cli.app import cli
from nvdeploy.cli.commands.checks import _md, catalog_entries, first_sentence, markdown, plain

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "nvdeploy"
DOCS = ROOT / "docs" / "checks.md"


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _cluster_ids() -> set[str]:
    import nvdeploy.checks.cluster  # noqa: F401 - its import fills in the consistency checks' text
    from nvdeploy.checks.cluster import VERSION_CONSISTENCY
    from nvdeploy.checks.registry import CLUSTER_CHECKS

    return set(CLUSTER_CHECKS) | {check_id for _, check_id, _ in VERSION_CONSISTENCY}


@pytest.mark.parametrize("check_id", ["driver.consistency", "cuda.consistency", "dcgm.consistency",
                                      "nccl.consistency", "ofed.consistency", "fabric.consistency", "power.budget",
                                      "power.cluster", "nccl.multinode", "rdma.gpudirect", "system.reachable"])
def test_checks_show_knows_the_ids_reports_show(check_id):
    shown = invoke("checks", "show", check_id)
    assert shown.exit_code == 0, shown.output
    assert shown.output.startswith(check_id + "\n") and "PASS" in shown.output and "level:" in shown.output


def test_driver_consistency_says_what_it_compares_and_what_to_do():
    shown = invoke("checks", "show", "driver.consistency").output
    assert "cluster stage" in shown and "nvidia-smi -q -x" in shown and "REINSTALL" in shown
    assert "source: nvdeploy/checks/cluster.py" in shown


def test_every_cluster_stage_check_is_listed_and_shown():
    listed = {line.split()[0]: line.split()[1] for line in invoke("checks", "list").output.splitlines()[1:]}
    for check_id in sorted(_cluster_ids()):
        assert check_id in listed, check_id
        assert invoke("checks", "show", check_id).exit_code == 0, check_id


def _ids_written_by_the_code() -> set[tuple[str, str]]:
    """Check ids the package's code writes into findings: Finding("x.y", ...), error_node(host, "x.y", ...) and
    the module constants that name one (CHECK_ID = "x.y", GRES_CHECK = "x.y")."""
    patterns = (r'Finding\(\s*"([a-z_]+\.[a-z_0-9]+)"', r'error_node\(\s*[a-z_]+,\s*"([a-z_]+\.[a-z_0-9]+)"',
                r'(?m)^[A-Z_]*CHECK[A-Z_]* = "([a-z_]+\.[a-z_0-9]+)"', r'(?m)^CHECK_ID = "([a-z_]+\.[a-z_0-9]+)"')
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for pattern in patterns:
            found.update((m.group(1), str(path.relative_to(ROOT))) for m in re.finditer(pattern, text))
    return found


def test_every_id_the_code_writes_is_in_the_catalog():
    ids = {entry.id for entry in catalog_entries()}
    written = _ids_written_by_the_code()
    assert {"system.reachable", "driver.consistency", "slurm.gres"} <= {i for i, _ in written} | ids
    missing = sorted((i, where) for i, where in written if i not in ids)
    assert missing == [], f"ids in reports that 'nvdeploy checks show' does not know: {missing}"


def test_checks_list_gives_whole_first_sentences_a_level_and_no_markup():
    result = invoke("checks", "list")
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0].split() == ["CHECK", "LEVEL", "WHAT", "IT", "CHECKS"]
    assert "`" not in result.output and "\u2026" not in result.output
    rows = {line.split()[0]: line for line in lines[1:]}
    entries = catalog_entries()
    assert len(rows) == len(entries)
    for entry in entries:
        row = rows[entry.id]
        assert row.split()[1] == entry.level
        assert row.endswith(plain(first_sentence(entry.doc))), entry.id
    assert rows["driver.loaded"].split()[1] == "quick" and rows["dcgm.diag_r2"].split()[1] == "standard"
    assert rows["nccl.multinode"].split()[1] == "full" and rows["driver.consistency"].split()[1] == "cluster"
    assert rows["system.reachable"].split()[1] == "run" and rows["dcgm.diag_r4"].split()[1] == "-"
    # "e.g." does not end a sentence, and the sentence is whole: the old list cut it at the docstring's first line.
    assert "e.g. nvidia-nvswitch3: SXid" in rows["kmsg.sxid"]
    assert "driver.min_version." in rows["driver.version"]


@pytest.mark.parametrize(("text", "first"), [
    ("Reads the log, e.g. ``dmesg``. Then more.", "Reads the log, e.g. ``dmesg``."),
    ("Runs x (see y. z) fully. Next.", "Runs x (see y. z) fully."),
    ("Version 1.18.2 or later\nacross lines. Second.", "Version 1.18.2 or later across lines."),
    ("No end at all", "No end at all"),
    ("Is it? Yes.", "Is it?"),
])
def test_first_sentence(text, first):
    assert first_sentence(text) == first


def test_plain_drops_backticks():
    assert plain("Runs ``nvidia-smi -q -x`` and `lsmod`.") == "Runs nvidia-smi -q -x and lsmod."


@pytest.mark.parametrize(("args", "words"), [
    (("checks", "--help"), ("The check catalog", "list", "show", "docs")),
    (("checks", "list", "--help"), ("Every check with its level",)),
    (("checks", "show", "--help"), ("What check ID runs",)),
    (("checks", "docs", "--help"), ("Markdown",)),
    (("actions", "list", "--help"), ("Every action",)),
    (("actions", "show", "--help"), ("What action NAME does",)),
])
def test_catalog_commands_have_help(args, words):
    result = invoke(*args)
    assert result.exit_code == 0
    for word in words:
        assert word in result.output, (args, word)


def test_the_group_help_lists_a_line_for_each_subcommand():
    for group, names in (("checks", ("list", "show", "docs")), ("actions", ("list", "show"))):
        output = invoke(group, "--help").output
        for name in names:
            line = next(line for line in output.splitlines() if line.strip().startswith(name + " "))
            assert len(line.split()) > 2, (group, line)


@pytest.mark.parametrize("command", ["install", "optimize", "run"])
def test_percent_signs_in_help_are_single(command):
    output = invoke(command, "--help").output
    assert "%%" not in output
    assert "N% of them" in " ".join(output.split()) and "this % of nodes" in " ".join(output.split())


def test_unknown_check_suggests_the_nearest():
    result = invoke("checks", "show", "driver.consistenc")
    assert result.exit_code == 2 and "did you mean 'driver.consistency'?" in result.output


def test_unknown_inventory_key_suggests_the_nearest_key_on_the_command_line(tmp_path):
    path = tmp_path / "inv.yaml"
    path.write_text("all:\n  vars: {profle: h100-sxm-8x}\n  hosts: {gpu01: {connection: sim}}\n", encoding="utf-8")
    result = invoke("inventory", "check", "-i", str(path))
    assert result.exit_code == 2
    assert f"{path}:2" in result.output and "did you mean `profile`?" in result.output
    assert "cuda_version" not in result.output and result.output.count(",") < 5


def test_limit_error_names_the_inventory_file_not_input():
    demo = ROOT / "inventories" / "demo.yaml"
    result = invoke("inventory", "list", "-i", str(demo), "--limit", "nosuch[1-2]")
    assert result.exit_code == 2
    assert "<input>" not in result.output and str(demo) in result.output and "--limit" in result.output


def test_docs_checks_md_is_the_catalog_s_own_output():
    expected = markdown(catalog_entries())
    assert DOCS.is_file() and DOCS.read_text(encoding="utf-8") == expected, (
        "docs/checks.md is stale: regenerate it with `nvdeploy checks docs > docs/checks.md` and commit it")
    assert invoke("checks", "docs").output == expected


def test_docs_name_each_check_with_its_fields():
    text = markdown(catalog_entries())
    for entry in catalog_entries():
        section = text.split(f"\n## {entry.id}\n", 1)[1].split("\n## ", 1)[0]
        for field in ("**level:**", "**runs:**", "**PASS:**", "**remediation:**", "**sources:**", "**code:**"):
            assert field in section, (entry.id, field)


def test_markdown_shows_html_looking_words_and_stars_as_written():
    assert _md("a <b> ``x <c>`` *d*\n#wrong 0") == "a &lt;b&gt; ``x <c>`` \\*d\\*\n\\#wrong 0"


def test_on_a_terminal_the_list_wraps_under_the_sentence_column():
    from nvdeploy.cli.commands.checks import list_lines

    entries = [e for e in catalog_entries() if e.id in ("driver.flavour", "gpu.count")]
    lines = list_lines(entries, 80)
    assert all(len(line) <= 80 for line in lines)
    column = lines[0].index("WHAT")
    assert lines[1].startswith("driver.flavour") and lines[2].startswith(" " * column) and lines[2][column] != " "
    assert " ".join(" ".join(lines[1:]).split()).endswith(plain(first_sentence(entries[-1].doc)))
