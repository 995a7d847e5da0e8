"""Host ranges as operators write them (``gpu[001-128]``, ``gpu[01-04,07]``) and folding names back into them.

Pure functions, shared by the inventory (expanding), ``--limit`` (matching) and reports (folding identical
results into ``gpu[001-127]: PASS``).
"""

from __future__ import annotations

import itertools
import re
from typing import Iterable

MAX_EXPANSION = 100_000
_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_PART = re.compile(r"^(\d+)(?:-(\d+))?$")


class HostRangeError(ValueError):
    pass


def _expand_bracket(body: str) -> list[str]:
    values: list[str] = []
    for part in body.split(","):
        part = part.strip()
        match = _PART.match(part)
        if not match:
            raise HostRangeError(f"bad range element {part!r} (expected N or N-M)")
        start_text, end_text = match.group(1), match.group(2) or match.group(1)
        start, end = int(start_text), int(end_text)
        if end < start:
            raise HostRangeError(f"range {part!r} runs backwards")
        if end - start + 1 > MAX_EXPANSION:
            raise HostRangeError(f"range {part!r} is larger than {MAX_EXPANSION} hosts")
        width = len(start_text) if start_text.startswith("0") or len(start_text) == len(end_text) else 0
        values.extend(str(n).zfill(width) for n in range(start, end + 1))
    return values


def expand(pattern: str) -> list[str]:
    """Expand every ``[...]`` group of a host pattern; a name without brackets is returned as is."""
    if "[" not in pattern and "]" not in pattern:
        return [pattern]
    pieces: list[list[str]] = []
    position = 0
    for match in _BRACKET.finditer(pattern):
        pieces.append([pattern[position : match.start()]])
        pieces.append(_expand_bracket(match.group(1)))
        position = match.end()
    pieces.append([pattern[position:]])
    literal = "".join(p[0] for p in pieces[::2])
    if "[" in literal or "]" in literal:
        raise HostRangeError(f"unbalanced bracket in {pattern!r}")
    total = 1
    for options in pieces:
        total *= len(options)
    if total > MAX_EXPANSION:
        raise HostRangeError(f"{pattern!r} expands to more than {MAX_EXPANSION} hosts")
    return ["".join(combo) for combo in itertools.product(*pieces)]


_SPLIT = re.compile(r"^(.*?)(\d+)$")


def fold(names: Iterable[str]) -> str:
    """Fold host names into ranges: ``gpu001..gpu127, gpu200`` -> ``gpu[001-127,200]``."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    order: list[tuple[str, int]] = []
    for name in names:
        match = _SPLIT.match(name)
        if not match:
            plain.append(name)
            continue
        key = (match.group(1), len(match.group(2)))
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(match.group(2)))
    folded: list[str] = []
    for prefix, width in order:
        numbers = sorted(set(groups[(prefix, width)]))
        if len(numbers) == 1:
            folded.append(f"{prefix}{str(numbers[0]).zfill(width)}")
            continue
        spans: list[str] = []
        start = prev = numbers[0]
        for number in numbers[1:] + [None]:  # type: ignore[list-item]
            if number is not None and number == prev + 1:
                prev = number
                continue
            spans.append(str(start).zfill(width) if start == prev else
                         f"{str(start).zfill(width)}-{str(prev).zfill(width)}")
            if number is not None:
                start = prev = number
        folded.append(f"{prefix}[{','.join(spans)}]")
    return ",".join(folded + sorted(plain))
