"""Where the built-in checks, profiles, playbooks and inventories live: in a checkout or an installed wheel.

In a checkout they are the top-level folders beside the package; a wheel carries them inside the package as
``nvdeploy/_data/<name>`` (see setup.cfg's package_dir mapping).
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]  # nvdeploy/, above config/


def data_dir(name: str) -> Path:
    """The folder of built-in ``name`` (checks, playbooks, inventories)."""
    installed = _PACKAGE / "_data" / name
    if installed.is_dir():
        return installed
    checkout = _PACKAGE.parent / name
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"built-in folder {name!r} not found (looked in {installed} and {checkout})")
