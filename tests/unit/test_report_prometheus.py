from __future__ import annotations

import os
import re
import stat

import pytest

from nvdeploy.prometheus import escape_label, render_prometheus, write_prometheus
from nvdeploy.record import OutputError
from nvdeploy.results import Finding, NodeResult, RunResult, Verdict

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*",?)*\})? '
                    r"(-?[0-9.eE+-]+|NaN|[+-]Inf)$")


def run() -> RunResult:
    nodes = (
        NodeResult('gpu"01\\\n', (Finding("nccl.all_reduce", Verdict.FAIL, "slow", observed=401.5, expected=">= 452.2",
                                          unit="GB/s"),
                                  Finding("gpu.count", Verdict.PASS, "8"),),
                   profile="h100-sxm-8x@2026.11.1", facts={"driver_version": "550.90.07", "xid_counts": {"79": 2}}),
        NodeResult("gpu02", (Finding("gpu.count", Verdict.PASS, "8"),), facts={"nvlink_h2d_gbps": 55.1}),
    )
    return RunResult("r1", "dc1", "validate", nodes, started_at="2026-11-30T10:00:00+00:00",
                     finished_at="2026-11-30T10:05:00+00:00", duration_s=300.0)


def test_textfile_format_is_valid_and_has_verdicts_and_key_metrics():
    text = render_prometheus(run())
    families: list[str] = []
    for line in text.splitlines():
        if line.startswith("# HELP "):
            families.append(line.split()[2])
            continue
        if line.startswith("# TYPE "):
            assert line.split()[2] == families[-1] and line.split()[3] == "gauge"
            continue
        match = SAMPLE.match(line)
        assert match, line
        assert match.group(1) == families[-1], line  # every sample under its own HELP/TYPE, families contiguous
    assert len(families) == len(set(families))
    assert 'nvdeploy_cluster_verdict{cluster="dc1",verdict="NOT_READY"} 1' in text
    assert 'nvdeploy_node_ready{cluster="dc1",node="gpu\\"01\\\\\\n"} 0' in text
    assert 'nvdeploy_node_severity{cluster="dc1",node="gpu02"} 1' in text
    assert 'nvdeploy_check_severity{cluster="dc1",node="gpu\\"01\\\\\\n",check="nccl.all_reduce",verdict="FAIL"} 4' \
        in text
    assert "check=\"gpu.count\"" not in text  # passing checks have no series
    assert 'metric="nccl.all_reduce"} 401.5' in text and 'metric="fact:nvlink_h2d_gbps"} 55.1' in text
    assert 'nvdeploy_bandwidth_floor_gbps{cluster="dc1",metric="nccl.all_reduce",profile="h100-sxm-8x@2026.11.1"} ' \
           "452.2" in text
    assert 'xid="79"} 2' in text
    assert 'nvdeploy_run_timestamp_seconds{cluster="dc1"} 1796033100' in text
    assert escape_label('a"b\\c\nd') == 'a\\"b\\\\c\\nd'


def test_write_is_atomic_and_readable_by_node_exporter(tmp_path):
    target = tmp_path / "nvdeploy.prom"
    target.write_text("old\n")
    assert write_prometheus(run(), target) == target
    assert target.read_text().startswith("# HELP nvdeploy_run_info")
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["nvdeploy.prom"]  # no temporary file left behind
    with pytest.raises(OutputError, match="cannot write"):
        write_prometheus(run(), tmp_path / "missing" / "x.prom")
