"""The data flows one way, collect -> parse -> evaluate, and so do the imports: the parse layer imports no collector
and no check, the collect layer no parser and no check. Catalogs are built from explicit lists, never by importing
a module, and importing the collectors does not build the probe's ~70 KB payload."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from nvdeploy import checks as checks_package
from nvdeploy.checks import CHECK_MODULES, CHECKS
from nvdeploy.checks.registry import build_catalog, declared_checks, register
from nvdeploy.collect.catalog import COLLECTORS
from nvdeploy.collect.collector import Collector, build_collectors

PACKAGE = Path(checks_package.__file__).resolve().parent.parent  # .../nvdeploy
ROOT = PACKAGE.parent

PARSE_LAYER = sorted(PACKAGE.glob("parsers/*.py"))
COLLECT_LAYER = sorted(PACKAGE.glob("collect/**/*.py"))
CHECKS_OR_LATER = ("nvdeploy.checks", "nvdeploy.runner.engine", "nvdeploy.phases")
COLLECT_MODULES = ("nvdeploy.collect",)
PARSE_MODULES = ("nvdeploy.parsers",)


def _module_name(path: Path, root: Path = ROOT) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts)


def imported_modules(path: Path, root: Path = ROOT) -> set[str]:
    """Every module ``path`` imports, at any depth of its code (function-level imports too), relative ones resolved;
    ``from a import b`` counts as both ``a`` and ``a.b`` (b may be a module)."""
    package = _module_name(path, root).rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_the_layer_lists_name_real_files() -> None:
    # A renamed module must not make the rules below pass by checking nothing.
    assert PACKAGE / "parsers/facts.py" in PARSE_LAYER and PACKAGE / "parsers" / "smi_status.py" in PARSE_LAYER
    assert PACKAGE / "collect/catalog.py" in COLLECT_LAYER and PACKAGE / "collect/probe/ship.py" in COLLECT_LAYER
    assert all(p.is_file() for p in PARSE_LAYER + COLLECT_LAYER)


def test_imported_modules_sees_every_form(tmp_path: Path) -> None:
    sample = tmp_path / "nvdeploy" / "parsers" / "sample.py"
    sample.parent.mkdir(parents=True)
    sample.write_text("import nvdeploy.checks.gpu\nfrom nvdeploy import collect\nfrom . import text\n"
                      "def f():\n    from ..checks.nccl import assess\n", encoding="utf-8")
    found = imported_modules(sample, root=tmp_path)
    assert {"nvdeploy.checks.gpu", "nvdeploy.collect", "nvdeploy.parsers.text", "nvdeploy.checks.nccl"} <= found
    assert _within("nvdeploy.collect.stack", COLLECT_MODULES) and not _within("nvdeploy.collected", COLLECT_MODULES)


@pytest.mark.parametrize("path", PARSE_LAYER, ids=lambda p: p.name)
def test_parse_layer_imports_no_collector_and_no_check(path: Path) -> None:
    bad = sorted(m for m in imported_modules(path) if _within(m, CHECKS_OR_LATER + COLLECT_MODULES))
    assert bad == [], f"{path.name} imports {bad}: parsing reads command results, not collectors or checks"


@pytest.mark.parametrize("path", COLLECT_LAYER, ids=lambda p: p.name)
def test_collect_layer_imports_no_parser_and_no_check(path: Path) -> None:
    bad = sorted(m for m in imported_modules(path) if _within(m, CHECKS_OR_LATER + PARSE_MODULES))
    assert bad == [], f"{path.name} imports {bad}: collectors must not depend on what reads their output"


def _in_fresh_python(code: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_imports_pull_in_no_higher_layer_and_do_not_build_the_probe_payload() -> None:
    # Transitively, in a fresh interpreter: what the AST rules above cannot see (an import through a third module).
    seen = _in_fresh_python(
        "import json, sys\n"
        "import nvdeploy.collect.catalog\n"
        "after_collect = sorted(m for m in sys.modules if m.startswith('nvdeploy.'))\n"
        "import nvdeploy.parsers.facts\n"
        "after_parse = sorted(m for m in sys.modules if m.startswith('nvdeploy.'))\n"
        "import nvdeploy.cli.app, nvdeploy.runner.engine, nvdeploy.checks\n"
        "from nvdeploy.collect.probe import ship\n"
        "import nvdeploy.collect.catalog as c\n"
        "cached = ship.payload.cache_info().currsize\n"
        "spec = c.specs_for(['nvidia_smi_xml'], {}, heavy=False)[-1]\n"
        "print(json.dumps({'collect': after_collect, 'parse': after_parse, 'cached': cached,\n"
        "                  'built': ship.payload.cache_info().currsize, 'probe_argv_ok': spec.name == 'nvml_probe'\n"
        "                  and list(spec.argv) == list(ship.probe_argv()), 'catalog': list(c.COLLECTORS)}))\n")
    assert not [m for m in seen["collect"] if _within(m, CHECKS_OR_LATER + PARSE_MODULES)], seen["collect"]
    assert not [m for m in seen["parse"] if _within(m, CHECKS_OR_LATER)], seen["parse"]
    assert seen["cached"] == 0, "importing the CLI, engine, checks or collectors built the probe payload"
    assert seen["built"] == 1 and seen["probe_argv_ok"], "the probe's argv is built when a plan first needs it"


def test_the_collector_catalog_does_not_depend_on_what_was_imported() -> None:
    alone = _in_fresh_python("import json\nfrom nvdeploy.collect.catalog import COLLECTORS\n"
                             "print(json.dumps(list(COLLECTORS)))")
    assert alone == list(COLLECTORS)
    named = {c for check in CHECKS.values() for c in check.collectors}
    assert named <= set(COLLECTORS), sorted(named - set(COLLECTORS))
    with pytest.raises(ValueError, match="duplicate collector"):
        build_collectors([Collector("x", ("true",), 1.0)], [Collector("x", ("false",), 1.0)])


def test_declaring_a_check_registers_nothing() -> None:
    before = dict(CHECKS)

    def probe_only(ctx: object) -> list:
        """A check no catalog lists."""
        return []

    register("layering.unlisted")(probe_only)
    assert CHECKS == before and "layering.unlisted" not in CHECKS
    module = types.ModuleType("layering_sample")
    probe_only.__module__ = module.__name__
    module.probe_only = probe_only  # type: ignore[attr-defined]
    module.alias = probe_only  # type: ignore[attr-defined]
    assert [c.id for c in declared_checks(module)] == ["layering.unlisted"]
    assert list(build_catalog([module])) == ["layering.unlisted"]
    with pytest.raises(ValueError, match="duplicate check id"):
        build_catalog([module, module])


def test_every_module_that_declares_a_check_is_in_the_catalog() -> None:
    declaring = set()
    for path in sorted((PACKAGE / "checks").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "register":
                declaring.add(_module_name(path))
    listed = {m.__name__ for m in CHECK_MODULES}
    assert declaring and declaring <= listed, sorted(declaring - listed)
    # Each listed module's checks all reach the catalog (the dcgm.diag_rN ones are made in a loop).
    for module in CHECK_MODULES:
        assert all(CHECKS[c.id] is c for c in declared_checks(module)), module.__name__
    assert {f"dcgm.diag_r{n}" for n in (1, 2, 3, 4)} <= set(CHECKS)
