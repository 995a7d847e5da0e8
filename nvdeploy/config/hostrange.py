"""Host ranges as operators write them and folding names back into them.

Two range syntaxes are read, each with its reference tool's exact semantics:

- ClusterShell / Slurm / pdsh: ``gpu[001-128]``, ``gpu[01-04,07]``, ``gpu[1-15/2]``, ``rack[3,5]-gpu[01-08]``;
  each bracket is parsed by ClusterShell's ``RangeSet`` (padding rules included).
- Ansible: ``gpu[01:08]``, ``gpu[1:15:2]``, ``rack[a:c]``; the algorithm of Ansible's ``expand_hostname_range``.

Folding is ClusterShell's ``nodeset -f``: the same string, in the same order (``node[1-10000]``,
``hgx[01-13,16-20].mgmt``, ``rack[3,5]-gpu[01-08]``). Pure functions, shared by the inventory (expanding),
``--limit`` (matching) and reports (folding identical results into ``gpu[001-127]: PASS``).
"""

from __future__ import annotations

import itertools
import re
import string
from typing import Iterable, Optional

from ClusterShell.NodeSet import NodeSet, NodeSetBase
from ClusterShell.RangeSet import RangeSet, RangeSetException, RangeSetND

MAX_EXPANSION = 100_000
_BRACKET = re.compile(r"\[([^\[\]]*)\]")
# What may stand in a name that is folded: anything else (a comma, a bracket, '%', ClusterShell's operators
# '!&^@', blanks) would make the folded string mean something else, so such a name is printed as it is.
_FOLDABLE = re.compile(r"^[A-Za-z0-9._-]+$")
_TOKEN = re.compile(r"(\D*)(\d*)")
# ClusterShell refuses indexes above 1e100; a run of digits that long is a literal, never a range.
_MAX_DIGITS = 18


class HostRangeError(ValueError):
    pass


def split_hostlist(text: str) -> list[str]:
    """Split ``a[1-2,5],b`` at the commas outside brackets: ``['a[1-2,5]', 'b']`` (empty parts dropped)."""
    parts: list[str] = []
    depth = 0
    start = 0
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise HostRangeError(f"unbalanced bracket in {text!r}")
        elif char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    if depth != 0:
        raise HostRangeError(f"unbalanced bracket in {text!r}")
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _ansible_expand(line: str) -> list[str]:
    """Ansible's ``expand_hostname_range``, with its messages; bounded so a typo cannot exhaust memory."""
    head, nrange, tail = line.replace("[", "|", 1).replace("]", "|", 1).split("|")
    bounds = nrange.split(":")
    if len(bounds) not in (2, 3):
        raise HostRangeError(f"bad Ansible range [{nrange}] (host range must be begin:end or begin:end:step)")
    beg, end = bounds[0] or "0", bounds[1]
    step_text = bounds[2] if len(bounds) == 3 else "1"
    if not end:
        raise HostRangeError(f"bad Ansible range [{nrange}] (host range must specify end value)")
    width = 0
    if beg[0] == "0" and len(beg) > 1:
        width = len(beg)
        if width != len(end):
            raise HostRangeError(f"bad Ansible range [{nrange}] (host range must specify equal-length begin and end"
                                 " formats)")
    try:
        step = int(step_text)
    except ValueError:
        raise HostRangeError(f"bad Ansible range [{nrange}] (the step must be a number)") from None
    if step < 1:
        raise HostRangeError(f"bad Ansible range [{nrange}] (the step must be at least 1)")
    seq: Iterable[str]
    if beg in string.ascii_letters and end in string.ascii_letters:
        i_beg, i_end = string.ascii_letters.index(beg), string.ascii_letters.index(end)
        if i_beg > i_end:
            raise HostRangeError(f"bad Ansible range [{nrange}] (host range must have begin <= end)")
        seq = list(string.ascii_letters[i_beg : i_end + 1 : step])
    else:
        try:
            numbers = range(int(beg), int(end) + 1, step)
        except ValueError:
            raise HostRangeError(f"bad Ansible range [{nrange}] (begin and end must be numbers or letters)") from None
        if len(numbers) > MAX_EXPANSION:
            raise HostRangeError(f"{line!r} expands to more than {MAX_EXPANSION} hosts")
        seq = (str(n).zfill(width) for n in numbers)
    hosts: list[str] = []
    for item in seq:
        name = f"{head}{item}{tail}"
        if "[" in name:
            hosts.extend(_ansible_expand(name))
        else:
            hosts.append(name)
        if len(hosts) > MAX_EXPANSION:
            raise HostRangeError(f"{line!r} expands to more than {MAX_EXPANSION} hosts")
    return hosts


def _rangeset(body: str, pattern: str) -> list[str]:
    try:
        values = RangeSet(body)
    except (RangeSetException, ValueError, OverflowError) as exc:
        raise HostRangeError(f"bad range [{body}] in {pattern!r}: {exc}") from None
    if len(values) > MAX_EXPANSION:
        raise HostRangeError(f"range [{body}] is larger than {MAX_EXPANSION} hosts")
    return list(values.striter())


def expand(pattern: str) -> list[str]:
    """Expand every ``[...]`` of one host pattern; a name without brackets is returned as is.

    A pattern whose brackets hold ``:`` is Ansible's syntax, any other is ClusterShell's; one pattern does not mix
    them. Top-level commas are not split here: see :func:`split_hostlist`.
    """
    if "[" not in pattern and "]" not in pattern:
        return [pattern]
    bodies = _BRACKET.findall(pattern)
    literal = _BRACKET.sub("", pattern)
    if "[" in literal or "]" in literal:
        raise HostRangeError(f"unbalanced bracket in {pattern!r}")
    ansible = [":" in body for body in bodies]
    if any(ansible):
        if not all(ansible):
            raise HostRangeError(f"{pattern!r} mixes Ansible ranges [a:b] with ClusterShell ranges [a-b]")
        return _ansible_expand(pattern)
    pieces: list[list[str]] = []
    position = 0
    for match in _BRACKET.finditer(pattern):
        pieces.append([pattern[position : match.start()]])
        pieces.append(_rangeset(match.group(1), pattern))
        position = match.end()
    pieces.append([pattern[position:]])
    total = 1
    for options in pieces:
        total *= len(options)
    if total > MAX_EXPANSION:
        raise HostRangeError(f"{pattern!r} expands to more than {MAX_EXPANSION} hosts")
    return ["".join(combo) for combo in itertools.product(*pieces)]


def expand_hostlist(text: str) -> list[str]:
    """Expand a comma-separated host list as Slurm, pdsh and clush write it: ``gpu[001-002,005],login1``."""
    return [name for part in split_hostlist(text) for name in expand(part)]


def _split_name(name: str) -> Optional[tuple[str, tuple[str, ...]]]:
    """``rack3-gpu01`` -> (``rack%s-gpu%s``, (``3``, ``01``)), as ClusterShell scans a node name."""
    if not _FOLDABLE.match(name):
        return None
    parts = _TOKEN.findall(name)[:-1]
    if any(len(digits) > _MAX_DIGITS for _, digits in parts):
        return None
    return "".join(p + ("%s" if d else "") for p, d in parts), tuple(d for _, d in parts if d)


def fold(names: Iterable[str]) -> str:
    """Fold host names as ClusterShell's ``nodeset -f`` does: ``gpu001..gpu127, gpu200`` -> ``gpu[001-127,200]``.

    The result reads back through :func:`expand_hostlist`, ``--limit``, ``clush -w`` and ``pdsh -w``. A name that no
    range syntax can hold is appended as it is.
    """
    patterns: dict[str, set[tuple[str, ...]]] = {}
    literal: set[str] = set()
    for name in names:
        if not name:
            continue
        split = _split_name(name)
        if split is None:
            literal.add(name)
        else:
            patterns.setdefault(split[0], set()).add(split[1])
    nodes = NodeSet()
    for pattern, indexes in patterns.items():
        dims = len(next(iter(indexes)))
        rangeset: Optional[object]
        if dims == 0:
            rangeset = None
        elif dims == 1:
            # Built from the index strings at once: NodeSet.fromlist parses each name, 4x slower on 10,000 nodes.
            rangeset = RangeSet()
            rangeset.update(index for (index,) in indexes)
        else:
            rangeset = RangeSetND([[_one(i) for i in vector] for vector in indexes], copy_rangeset=False)
        nodes.update(NodeSetBase(pattern, rangeset, copy_rangeset=False))
    folded = str(nodes) if patterns else ""
    return ",".join(([folded] if folded else []) + sorted(literal))


def _one(index: str) -> RangeSet:
    values = RangeSet()
    values.update((index,))
    return values


def fold_slurm(names: Iterable[str]) -> str:
    """Like :func:`fold`, for Slurm's hostlist parser, which refuses a suffix after the last bracket.

    ``scontrol show hostnames`` (22.05) rejects ``hgx[01-02].mgmt``: names whose last digits are not at the end are
    listed one by one, the others folded as :func:`fold` does.
    """
    tail: list[str] = []
    head: list[str] = []
    for name in names:
        if not name:
            continue
        (head if name[-1:].isdigit() or not any(c.isdigit() for c in name) else tail).append(name)
    parts = [fold(head)] if head else []
    return ",".join(parts + sorted(set(tail)))
