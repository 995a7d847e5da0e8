"""Quantities as people type them (``70B`` parameters, ``2T`` tokens, ``8k`` context) and the input error type."""

from __future__ import annotations

import math
import re

# Decimal multipliers: parameter and token counts are quoted in powers of ten (70B = 70e9), never 2**30.
_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12, "p": 1e15}
_QUANTITY = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([kKmMbBgGtTpP]?)\s*$")


class SizingError(ValueError):
    """Bad input to the calculator: the message says which input and why (the CLI prints it and exits 2)."""


def parse_quantity(text: str, what: str) -> float:
    """``"70B"`` -> 7e10, ``"2T"`` -> 2e12, ``"8k"`` -> 8000, ``"1.5e9"`` -> 1.5e9; positive and finite only."""
    if text.strip().startswith("-"):
        raise SizingError(f"{what}: {text!r} is negative; must be a positive number")
    match = _QUANTITY.match(text)
    if match is None:
        raise SizingError(f"{what}: {text!r} is not a number with an optional suffix k, M, B, T "
                          "(e.g. 70B, 2T, 8k)")
    value = float(match.group(1)) * _SUFFIX[match.group(2).lower()]
    if not math.isfinite(value) or value <= 0:
        raise SizingError(f"{what}: {text!r} must be a positive number")
    return value
