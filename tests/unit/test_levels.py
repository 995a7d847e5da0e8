"""The validation levels file: check ids are refused with file, line and level against the catalog handed in."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvdeploy.checks import CHECKS
from nvdeploy.checks.registry import CLUSTER_CHECKS
from nvdeploy.config.levels import load_levels
from nvdeploy.config.yamlfile import ConfigError

KNOWN = (*CHECKS, *CLUSTER_CHECKS)


def test_the_builtin_levels_name_only_known_checks() -> None:
    assert load_levels(known_checks=KNOWN) == load_levels()


def test_an_unknown_check_names_file_line_and_level(tmp_path: Path) -> None:
    path = tmp_path / "validate.yaml"
    path.write_text("levels:\n  quick: [gpu.count]\n  standard: [gpu.count, nope.x]\n")
    with pytest.raises(ConfigError) as err:
        load_levels(path, KNOWN)
    assert err.value.render() == f"{path}:3: key 'standard': unknown check 'nope.x' (see 'nvdeploy checks list')"
