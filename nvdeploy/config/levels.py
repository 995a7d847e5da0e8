"""Validation levels from ``playbooks/validate.yaml``: which checks run at quick, standard and full."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

from nvdeploy.config.builtin import data_dir
from nvdeploy.config.yamlfile import ConfigError, line_of, load_yaml_file

LEVELS = ("quick", "standard", "full")


def load_levels(path: Optional[Path] = None,
                known_checks: Optional[Iterable[str]] = None) -> dict[str, tuple[str, ...]]:
    """{level: check ids}; each level includes every check of the levels before it, except those it drops
    with ``!check.id`` (the full level replaces ``dcgm.diag_r2`` by ``dcgm.diag_r3``: ``!dcgm.diag_r2``).

    A check id not in ``known_checks`` (when given) is a ConfigError naming its file, line and level. The caller
    hands in the catalog's ids, as for waivers: the checks import config/, so config/ cannot import them."""
    known = set(known_checks) if known_checks is not None else None
    path = path or data_dir("playbooks") / "validate.yaml"
    data = load_yaml_file(path)
    if not isinstance(data, dict) or not isinstance(data.get("levels"), dict):
        raise ConfigError("a validate playbook needs a 'levels:' mapping", path, line_of(data), "levels")
    levels = data["levels"]
    out: dict[str, tuple[str, ...]] = {}
    carried: list[str] = []
    for level in LEVELS:
        ids = levels.get(level) or []
        if not isinstance(ids, list):
            raise ConfigError("must be a list of check ids", path, line_of(levels, level), level)
        for index, check_id in enumerate(ids):
            drop = isinstance(check_id, str) and check_id.startswith("!")
            if drop:
                check_id = check_id[1:]
            if known is not None and check_id not in known:
                raise ConfigError(f"unknown check {check_id!r} (see 'nvdeploy checks list')", path,
                                  line_of(ids, index), level)
            if drop:
                carried = [c for c in carried if c != check_id]
            elif check_id not in carried:
                carried.append(check_id)
        out[level] = tuple(carried)
    for level in levels:
        if level not in LEVELS:
            raise ConfigError(f"unknown level (known: {', '.join(LEVELS)})", path, line_of(levels, level), str(level))
    return out
