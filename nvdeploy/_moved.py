"""Old import paths of modules that moved into the stage folders keep working: ``import nvdeploy.engine`` gives
``nvdeploy.runner.engine`` itself (one module object, one state), with a DeprecationWarning naming the new path.

Plugins and scripts written against the flat layout go on loading; nothing inside the package uses these names
(a unit test keeps it so). Installed from ``nvdeploy/__init__.py`` as a finder at the end of ``sys.meta_path``, so it
is asked only for names no real module answers.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import Callable, Optional, Sequence

# old name below nvdeploy. -> new name below nvdeploy.; a moved folder (commands, probe) moves its modules with it.
# nvdeploy.cli and nvdeploy.collect are packages now (the stage folders): they answer the old modules' names
# themselves (a module __getattr__ in their __init__).
MOVED = {
    "commands": "cli.commands",
    "collect_catalog": "collect.datacenter",
    "collect_stack": "collect.stack",
    "collector": "collect.collector",
    "nccl_commands": "collect.nccl_commands",
    "stack_commands": "collect.stack_commands",
    "storage_commands": "collect.storage_commands",
    "probe": "collect.probe",
    "parse_facts": "parsers.facts",
    "parse_catalog": "parsers.catalog",
    "engine": "runner.engine",
    "evaluate": "runner.evaluate",
    "runs": "runner.folders",
    "record": "runner.record",
    "progress": "runner.progress",
    "multinode": "runner.pairing",
    "signals": "runner.signals",
    "statedir": "runner.statedir",
    "history": "runner.history_db",
    "diff": "report.compare",
    "metrics": "report.metrics",
    "prometheus": "report.prometheus",
    "inventory": "config.inventory",
    "inventory_ansible": "config.inventory_ansible",
    "hostrange": "config.hostrange",
    "yamlfile": "config.yamlfile",
    "profiles": "config.profiles",
    "profile_schema": "config.profile_schema",
    "playbook": "phases.playbook",
    "levels": "config.levels",
    "builtin": "config.builtin",
    "waivers": "config.waivers",
}


def new_name(fullname: str) -> Optional[str]:
    """The current name of a module imported by its old flat path, or None when the name did not move."""
    prefix, _, rest = fullname.partition(".")
    if prefix != "nvdeploy" or not rest:
        return None
    head, dot, tail = rest.partition(".")
    target = MOVED.get(head)
    if target is None:
        return None
    return f"nvdeploy.{target}{dot}{tail}"


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None):
        if new_name(fullname) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        current = new_name(spec.name)
        assert current is not None  # find_spec answered only for moved names
        warnings.warn(f"{spec.name} moved to {current}", DeprecationWarning, stacklevel=2)
        return importlib.import_module(current)

    def exec_module(self, module: ModuleType) -> None:
        """The module is the already imported new one: nothing to run."""


def install() -> None:
    if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder())


def forward_names(package: str, module: str) -> Callable[[str], object]:
    """A module ``__getattr__`` for ``package``, a stage folder that took the place of a flat module: the flat
    module's names, now in ``module``, are found there, with a DeprecationWarning."""

    def forwarded(name: str) -> object:
        try:
            value = getattr(importlib.import_module(module), name)
        except AttributeError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        warnings.warn(f"{package}.{name} moved to {module}.{name}", DeprecationWarning, stacklevel=2)
        return value

    return forwarded
