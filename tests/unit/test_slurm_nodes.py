"""Slurm's node list in both formats: sinfo --json (22.05, real capture), scontrol --json (23.02+ shape) and
scontrol -o show node text (real capture); both real captures must give the same nodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvdeploy.slurm.nodes import (
    SlurmParseError,
    gres_gpu_count,
    gres_gpu_type,
    matches_states,
    node_from_facts,
    parse_json,
    parse_text,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def _json() -> list:
    return parse_json((FIXTURES / "sinfo-22.05.json").read_text())


def _text() -> list:
    return parse_text((FIXTURES / "scontrol-show-node-22.05.txt").read_text())


def test_real_captures_json_and_text_agree() -> None:
    assert [n.to_dict() for n in _json()] == [n.to_dict() for n in _text()]
    assert [n.name for n in _text()] == ["node1", "node2", "node3", "node4"]


def test_states_flags_reason_gres_from_real_capture() -> None:
    idle, drained, busy, down = _text()
    assert (idle.short_state, idle.drained, idle.busy, idle.gpus) == ("idle", False, False, 8)
    assert drained.short_state == "drained" and drained.flags == ("DRAIN",)
    # The reason is free text: quotes and $( ) kept verbatim, the [user@time] tail split off.
    assert drained.reason == 'nvdeploy x: "q" $(touch /tmp/x) ; a' and drained.reason_user == "root"
    assert busy.short_state == "mixed" and busy.busy and busy.alloc_cpus == 1
    assert down.short_state == "down" and down.reason == "hw: PSU"
    assert idle.partitions == ("debug",) and idle.features == ()


def test_slurm_23_json_shape_state_list() -> None:
    doc = {"nodes": [{"name": "gpu001", "state": ["IDLE", "DRAIN"], "reason": "nvdeploy r: x",
                      "reason_set_by_user": "ops", "gres": "gpu:h100:8(S:0-1)", "partitions": ["h100", "all"],
                      "features": ["nvlink", "ib"], "alloc_cpus": 0},
                     {"name": "gpu002", "state": ["MIXED"], "gres": "gpu:h100:4,gpu:h100:3", "alloc_cpus": 12}]}
    first, second = parse_json(json.dumps(doc))
    assert first.short_state == "drained" and first.reason_user == "ops" and first.gpu_type == "h100"
    assert first.gpus == 8 and first.partitions == ("h100", "all") and first.features == ("nvlink", "ib")
    assert second.short_state == "mixed" and second.gpus == 7 and second.busy


def test_text_values_with_spaces_and_reason_holding_key_like_text() -> None:
    line = ("NodeName=gpu007 Arch=x86_64 AvailableFeatures=a100,ib Gres=gpu:a100:8 NodeAddr=10.0.0.7 "
            "OS=Linux 6.1.0 #1 SMP PREEMPT  RealMemory=1000 State=MIXED+DRAIN CPUAlloc=4 Partitions=gpu,all "
            "Reason=nvdeploy x: gpu.count 7/8 State=FAKE [slurm@2026-12-01T05:13:00]")
    (node,) = parse_text(line)
    assert node.short_state == "draining" and node.reason == "nvdeploy x: gpu.count 7/8 State=FAKE"
    assert node.features == ("a100", "ib") and node.partitions == ("gpu", "all") and node.address == "10.0.0.7"


def test_not_responding_star_and_unknown_json() -> None:
    (node,) = parse_text("NodeName=n1 State=IDLE*+DRAIN Gres=(null)")
    assert node.drained and "NOT_RESPONDING" in node.flags and node.gpus is None
    with pytest.raises(SlurmParseError):
        parse_json("sinfo: error: Unable to contact slurm controller")
    with pytest.raises(SlurmParseError):
        parse_json('{"sinfo": []}')  # Slurm 23.02+ sinfo --json: no node list
    with pytest.raises(SlurmParseError, match="line 1"):
        parse_text("garbage without the key")


@pytest.mark.parametrize("gres,count,kind", [
    ("gpu:8", 8, ""), ("gpu:h100:8(S:0-1)", 8, "h100"), ("gpu:a:4,gpu:b:2", 6, "a,b"),
    ("shard:8,gpu:h200:8", 8, "h200"), ("", None, ""), ("(null)", None, ""), ("mps:100", None, ""),
])
def test_gres_gpu_count(gres: str, count: object, kind: str) -> None:
    assert gres_gpu_count(gres) == count and gres_gpu_type(gres) == kind


def test_state_names_as_operators_mean_them() -> None:
    idle, drained, busy, down = _text()
    # sinfo -t idle lists drained nodes too (gotcha 6); nvdeploy's states: do not.
    assert matches_states(idle, ["idle"]) and not matches_states(drained, ["idle"])
    assert matches_states(drained, ["drained"]) and matches_states(busy, ["mixed"]) and matches_states(down, ["down"])
    assert matches_states(down, [])


def test_facts_round_trip() -> None:
    for node in _text():
        again = node_from_facts(node.name, node.to_dict())
        assert again.to_dict() == node.to_dict()


def test_sinfo_json_with_controller_down_is_an_error_not_an_empty_cluster() -> None:
    # Slurm 22.05.8, slurmctld killed: sinfo --json exits 0 with this (captured on the test cluster).
    text = '{"meta": {}, "errors": [{"error": "Unspecified error", "errno": -1}], "nodes": []}'
    with pytest.raises(SlurmParseError, match="Unspecified error"):
        parse_json(text)
