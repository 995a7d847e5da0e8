"""Which nodes test together in multi-node nccl-tests: all at once, disjoint pairs, bisection, and pairs compared
with each other (where no floor holds for a pair's size).

Pure planning: a ``test`` callable runs one group (via mpirun on the transport) and says whether it met the
bandwidth floor, a ``measure`` callable gives its figure; these functions only decide who runs with whom, so they
are tested without any network.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence


def pair_rounds(nodes: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Disjoint pairs, run in parallel within a round; an odd node out is paired with the first node in a
    second round, so every node is measured in at least one pair."""
    names = list(nodes)
    if len(names) < 2:
        return []
    first = [(names[i], names[i + 1]) for i in range(0, len(names) - 1, 2)]
    rounds = [first]
    if len(names) % 2:
        rounds.append([(names[-1], names[0])])
    return rounds


GroupTest = Callable[[Sequence[str]], bool]


@dataclass
class BisectLog:
    """Every group that was run while bisecting, in order, and what it showed."""

    steps: list[tuple[tuple[str, ...], bool]] = field(default_factory=list)

    def record(self, group: Sequence[str], ok: bool) -> bool:
        self.steps.append((tuple(group), ok))
        return ok


def bisect(nodes: Sequence[str], test: GroupTest, reference: Optional[str] = None,
           log: Optional[BisectLog] = None) -> list[str]:
    """Name the nodes that make a failing set fail.

    Split the set in halves and test each half (a half of one node is tested with a known-good ``reference``
    node); recurse into failing halves. A failing pair is resolved by testing each of its nodes with the
    reference. Without any known-good node the smallest failing group is returned whole: honest, not a guess.
    """
    log = log if log is not None else BisectLog()

    def run(group: Sequence[str]) -> bool:
        return log.record(group, test(group))

    def with_reference(node: str) -> Optional[bool]:
        if reference is None or reference == node:
            return None
        return run([node, reference])

    def solve(group: list[str]) -> list[str]:
        nonlocal reference
        if reference is None and 2 <= len(group) <= 3:
            # Too small to halve into testable groups and no known-good node: try every pair; a node that
            # is in a passing pair is good.
            pairs = [(a, b) for i, a in enumerate(group) for b in group[i + 1:]]
            good: set[str] = set()
            for pair in pairs:
                if run(pair):
                    good.update(pair)
            if good:
                reference = sorted(good)[0]
                return [node for node in group if node not in good]
            return group
        if len(group) == 1:
            verdict = with_reference(group[0])
            return [] if verdict else group
        if len(group) == 2:
            first, second = with_reference(group[0]), with_reference(group[1])
            if first is None or second is None:
                return group
            bad = [node for node, ok in zip(group, (first, second)) if not ok]
            return bad or group
        middle = len(group) // 2
        halves = [group[:middle], group[middle:]]
        results: list[bool] = [False, False]
        # Groups of two or more first: a passing one supplies the reference a single node needs.
        for index in sorted(range(2), key=lambda i: len(halves[i]) < 2):
            half = halves[index]
            ok = run(half) if len(half) >= 2 else bool(with_reference(half[0]))
            results[index] = ok
            if ok and reference is None:
                reference = half[0]
        bad: list[str] = []
        for half, ok in zip(halves, results):
            if not ok:
                bad += solve(half)
        # Both halves fine but the whole failed: the fault is between them (the fabric), not in one node.
        return bad if bad or any(not ok for ok in results) else group

    return solve(list(nodes))


Measure = Callable[[Sequence[str]], Optional[float]]


@dataclass(frozen=True)
class PeerLocalisation:
    """What ``localise_by_peers`` found: the nodes slow in their pair and again with a third node, the nodes of a
    low pair the re-tests did not split, and the pairs' median figure (the reference)."""

    named: tuple[str, ...] = ()
    unresolved: tuple[str, ...] = ()
    median: Optional[float] = None


def localise_by_peers(nodes: Sequence[str], measure: Measure, floor_pct: float = 90.0) -> PeerLocalisation:
    """Name the nodes that make a group slow by comparing groups of one size with each other, never with a floor
    of another size: disjoint pairs (an odd node out paired with the first node), each measured (``measure``: the
    figure, None when the run failed); a pair below ``floor_pct`` of the pairs' median is low; each node of a low
    pair not cleared by a good pair is re-tested with a node of a good pair (a third peer) and named when that is
    low too. A low pair whose re-tests both pass, or a run with fewer than two pairs or no good pair, names no one:
    its nodes are unresolved, honest rather than a guess."""
    names = list(nodes)
    pairs = [(names[i], names[i + 1]) for i in range(0, len(names) - 1, 2)]
    if len(names) % 2 and len(names) > 2:
        pairs.append((names[-1], names[0]))
    figures = {pair: measure(pair) for pair in pairs}
    known = [f for f in figures.values() if f is not None]
    if len(pairs) < 2 or not known:
        return PeerLocalisation(unresolved=tuple(names))
    median = statistics.median(known)
    floor = median * floor_pct / 100
    good = [n for pair, f in figures.items() if f is not None and f >= floor for n in pair]
    low = [pair for pair, f in figures.items() if f is None or f < floor]
    if not low:
        return PeerLocalisation(median=median)
    suspects = [n for n in names if any(n in pair for pair in low) and n not in good]
    if not good:
        return PeerLocalisation(unresolved=tuple(suspects), median=median)
    named: list[str] = []
    for node in suspects:
        # A third peer: a node of a good pair (never the node's own partner, which is not good).
        again = measure((node, good[0]))
        if again is None or again < floor:
            named.append(node)
    cleared = [pair for pair in low if not any(n in named for n in pair)]
    unresolved = [n for n in suspects if n not in named and any(n in pair for pair in cleared)]
    return PeerLocalisation(tuple(named), tuple(unresolved), median)
