from __future__ import annotations

import pytest

from nvdeploy.runner.pairing import BisectLog, bisect, pair_rounds


def test_pairs_are_disjoint_and_cover_every_node():
    rounds = pair_rounds([f"n{i}" for i in range(5)])
    assert rounds[0] == [("n0", "n1"), ("n2", "n3")]
    assert rounds[1] == [("n4", "n0")]
    for round_ in rounds:
        flat = [n for pair in round_ for n in pair]
        assert len(flat) == len(set(flat))
    assert pair_rounds(["only"]) == []


@pytest.mark.parametrize("size", [2, 3, 7, 16, 33])
@pytest.mark.parametrize("bad_index", [0, 1, -1])
def test_bisect_names_the_one_bad_node(size, bad_index):
    nodes = [f"gpu{i:03d}" for i in range(size)]
    bad = nodes[bad_index]
    reference = None if size > 2 else "good-ref"
    log = BisectLog()
    found = bisect(nodes, lambda group: bad not in group, reference=reference, log=log)
    assert found == [bad]
    assert len(log.steps) <= 4 * size.bit_length() + 4


def test_bisect_finds_two_bad_nodes_in_different_halves():
    nodes = [f"n{i}" for i in range(16)]
    bad = {"n3", "n12"}
    assert sorted(bisect(nodes, lambda g: not bad & set(g))) == ["n12", "n3"]


def test_bisect_without_a_good_node_returns_the_smallest_failing_group():
    assert bisect(["a", "b"], lambda g: False) == ["a", "b"]


def test_fabric_fault_between_halves_blames_the_whole_set():
    nodes = ["a", "b", "c", "d"]
    assert bisect(nodes, lambda g: len(g) < 4) == nodes
