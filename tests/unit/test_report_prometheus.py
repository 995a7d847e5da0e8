from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess

import pytest

from nvdeploy.files import OutputError
from nvdeploy.report.prometheus import escape_label, render_prometheus, write_prometheus
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
        # Never reached: the engine only knows the inventory's bare profile name.
        NodeResult("gpu03", (Finding("system.reachable", Verdict.ERROR, "refused"),), profile="h100-sxm-8x"),
    )
    return RunResult("r1", "dc1", "validate", nodes, started_at="2026-11-30T10:00:00+00:00",
                     finished_at="2026-11-30T10:05:00+00:00", duration_s=300.0,
                     profiles={"h100-sxm-8x": "h100-sxm-8x@2026.11.1"})


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
    # Base units: bytes per second (401.5 GB/s as nccl-tests means it, 1e9 bytes), no "gbps" anywhere.
    assert 'nvdeploy_node_bandwidth_bytes_per_second{cluster="dc1",node="gpu\\"01\\\\\\n",metric="nccl.all_reduce"} ' \
           "401500000000" in text
    assert 'metric="fact:nvlink_h2d_gbps"} 55100000000' in text
    assert 'nvdeploy_bandwidth_floor_bytes_per_second{cluster="dc1",metric="nccl.all_reduce",' \
           'profile="h100-sxm-8x@2026.11.1"} 452200000000' in text
    assert "_gbps{" not in text and "_gbps " not in text
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


def test_node_info_gives_one_profile_one_label_value_reached_or_not():
    text = render_prometheus(run())
    profiles = set(re.findall(r'^nvdeploy_node_info\{[^}]*profile="([^"]*)"', text, re.M))
    assert profiles == {"h100-sxm-8x@2026.11.1", ""}  # gpu02 has no profile at all
    assert 'nvdeploy_node_info{cluster="dc1",node="gpu03",profile="h100-sxm-8x@2026.11.1"' in text


def test_promtool_accepts_the_textfile(tmp_path):
    """The real linter Prometheus ships (Debian's ``prometheus`` package): names, units, HELP/TYPE, syntax."""
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("NVDEPLOY_REQUIRE_SSHD"):
            pytest.fail("promtool is required in CI but missing (.ci/run installs it with apt-get install prometheus)")
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    done = subprocess.run([promtool, "check", "metrics"], input=render_prometheus(run()), capture_output=True,
                          text=True, timeout=60)
    # promtool prints lint problems (e.g. "... should have a unit suffix") and exits 3; a clean file says nothing.
    assert (done.returncode, done.stdout + done.stderr) == (0, "")
