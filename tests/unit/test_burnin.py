"""Burn-in (validate --burn-in): the duration parser, the sampler's CSV time series and the load's iterations
(parsers/burnin.py), burnin.stability and burnin.load (checks/burnin.py), the command lines and the simulator's
throttle_after fault.

The sampler rows below use the field formats of the real 590.48.01 capture
(tests/fixtures/real/nvidia-smi-csv/h100-80gb-hbm3-query-gpu-all-fields-load-590.48.01.csv: timestamp
``2026/07/14 08:12:53.353``, reasons ``0x0000000000000000``, power without units); no public capture of a long
``-lms`` series was found, so the series themselves are built here.
"""

from __future__ import annotations

import datetime
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest
from _catalog_helpers import context, profile_with, result, run_check, timed_out

from nvdeploy.checks.burnin import decode
from nvdeploy.collect.burnin_commands import (
    KMSG_AFTER,
    LOAD,
    SAMPLER,
    SAMPLER_SCRIPT,
    burnin_specs,
    load_argv,
    parse_duration,
    sampler_argv,
)
from nvdeploy.collect.catalog import specs_for
from nvdeploy.collect.datacenter import DCGM_IGNORE_VAR
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.parsers.burnin import parse_load, parse_sampler
from nvdeploy.results import ErrorReason, Remediation, Verdict
from nvdeploy.sim.scenario import NodeScenario, validate_fault

from nvdeploy.sim import tools  # noqa: F401  isort: skip  (every simulated tool first)
from nvdeploy.sim.tools import run_tool  # noqa: E402  isort: skip

REAL_CSV = (Path(__file__).parent.parent / "fixtures/real/nvidia-smi-csv"
            / "h100-80gb-hbm3-query-gpu-all-fields-load-590.48.01.csv")
FIELDS = ("timestamp,index,temperature.gpu,clocks.sm,clocks_event_reasons.active,power.draw,"
          "ecc.errors.uncorrected.volatile.total")
START = datetime.datetime(2026, 7, 14, 8, 12, 53, 353000)


def series(duration: int = 600, interval: int = 10, gpus: int = 8, reasons=lambda g, t: 0,
           clock=lambda g, t: 1980, ecc=lambda g, t: "0", end: str = "@@end running") -> str:
    lines = [f"@@burnin-sampler {duration} {interval * 1000} {FIELDS}"]
    for t in range(0, duration + 1, interval):
        stamp = (START + datetime.timedelta(seconds=t)).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
        for g in range(gpus):
            lines.append(f"{stamp}, {g}, 65, {clock(g, t)}, 0x{reasons(g, t):016X}, 631.95, {ecc(g, t)}")
    return "\n".join(lines + ([end] if end else [])) + "\n"


def load_text(iterations: int = 3, busbw=lambda n: 480.0, dcgm_rc: int = 0, dcgm_result: str = "Pass") -> str:
    from nvdeploy.sim.tools import run_tool as sim_tool

    scenario = NodeScenario("node01", ProfileCatalog().get("h100-sxm-8x"), ())
    nccl = sim_tool(scenario, ("all_reduce_perf", "-b", "1G", "-e", "8G", "-f", "2", "-g", "8", "-c", "1"))
    dcgm = sim_tool(scenario, ("dcgmi", "diag", "-r", "2", "-j")).stdout.decode()
    out = []
    for n in range(1, iterations + 1):
        text = nccl.stdout.decode()
        text = text.replace("# Avg bus bandwidth    : ", f"# Avg bus bandwidth    : {busbw(n)} #")
        out.append(f"@@iteration {n} dcgm\n{dcgm if dcgm_result == 'Pass' else dcgm.replace('Pass', dcgm_result)}\n"
                   f"@@rc {dcgm_rc}\n@@iteration {n} nccl\n{text}\n@@rc 0\n")
    return "".join(out) + f"@@done {iterations}\n"


BOOT_LOG = ("[   18.204519] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC 2024\n"
            "[ 1234.567890] NVRM: Xid (PCI:0000:2a:00): 13, pid=1234, name=python3, Graphics SM Warp Exception\n")
XID_79 = "[ 8434.567890] NVRM: Xid (PCI:0000:9a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"


def judge(sampler: str, load: str | None = None, profile="h100-sxm-8x", after: str | None = BOOT_LOG):
    results = {SAMPLER: result(SAMPLER, sampler)}
    results[LOAD] = result(LOAD, load if load is not None else load_text())
    results["kmsg"] = result("kmsg", BOOT_LOG)
    if after is not None:
        results[KMSG_AFTER] = result(KMSG_AFTER, after)
    ctx = context(results, profile)
    return run_check("burnin.stability", ctx), run_check("burnin.load", ctx)


# -- durations and command lines ------------------------------------------------------------------------------


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("30m", 1800), ("4h", 14400), ("1.5h", 5400),
                                          ("1d", 86400), ("120", 120), (" 2H ", 7200)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "4x", "h", "-5m", "10s", "8d", "4h30m", "1e3"])
def test_bad_durations_say_why(text):
    with pytest.raises(ValueError, match="duration|1m to 7d"):
        parse_duration(text)


def test_planned_specs_carry_the_runs_duration_and_the_hosts_nccl_line():
    catalog = ProfileCatalog()
    profile = catalog.get("h100-sxm-8x")
    host_vars = {"nccl_tests_dir": "/opt/nccl tests/build", "nccl_timeout": 600}
    # Never planned without a duration (as storage without storage_paths): only burnin_specs makes them.
    assert {s.name for s in specs_for([SAMPLER, LOAD, KMSG_AFTER], host_vars, heavy=True, profile=profile)} == \
        {KMSG_AFTER}
    specs = {s.name: s for s in burnin_specs(host_vars, profile, 1800, 2)}
    # Then on until the load's done file appears (its last iteration may run past the duration), at most to the
    # load's own limit.
    assert specs[SAMPLER].argv[3:7] == ("nvdeploy-burnin-sampler", "1800", "2000", str(3600 + 600 + 20 - 1))
    done_file = specs[SAMPLER].argv[7]
    assert done_file.startswith("/tmp/nvdeploy-burnin-") and done_file.endswith(".done")
    assert specs[SAMPLER].timeout_s == specs[LOAD].timeout_s - 1
    load = specs[LOAD].argv
    # Level 3 (the first with a GEMM test); "-": no waiver names DCGM error codes for this node.
    # Level 3's diag limit (its collector's, 3600 s) for each iteration.
    assert load[3:10] == ("nvdeploy-burnin-load", "1800", "3", "3600", "600", "-", done_file)
    assert any(a.endswith("all_reduce_perf") and a.startswith("/opt/nccl tests/build") for a in load[10:])
    # The duration, one more iteration of both tests, their kill grace and slack.
    assert specs[LOAD].timeout_s == 1800 + 3600 + 600 + 20 + 60
    assert load_argv(60, {"burnin_dcgm_level": 2}, profile)[6] == "1200"
    assert load_argv(60, {"dcgm_timeout": 900}, profile)[6] == "900"
    assert load_argv(60, {"burnin_dcgm_level": 9}, profile)[5] == "3"  # out of range: the default
    assert load_argv(60, {"burnin_dcgm_level": 2}, profile)[5] == "2"
    waived = load_argv(60, {DCGM_IGNORE_VAR: "gpu3:40;gpu5:101"}, profile)
    assert waived[8] == "gpu3:40;gpu5:101"  # one argv word: the script passes it to --ignoreErrorCodes quoted


def test_sampler_script_runs_for_its_duration_and_stops_the_loop(tmp_path):
    """The real script with a stand-in nvidia-smi that prints a row every interval and never ends by itself."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\ncase \"$*\" in *-lms*) while :; do echo \"2026/07/14 08:12:53.353, 0, 60, 1980, "
                    "0x0000000000000000, 600.00, 0\"; sleep 0.2; done;; esac\nexit 0\n")
    fake.chmod(0o755)
    argv = sampler_argv(1, 0.2)
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=20,
                          env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    out = parse_sampler(done.stdout)
    assert done.returncode == 0, done.stderr
    assert out.duration_s == 1 and out.interval_ms == 200 and out.ended == "running"
    assert "clocks_event_reasons.active" in out.fields
    assert len(out.samples) >= 2


def test_sampler_script_falls_back_to_the_older_throttle_field(tmp_path):
    # An older driver knows only clocks_throttle_reasons.active: the probe for the new name fails (exit 2).
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\ncase \"$*\" in *clocks_event_reasons*) echo 'Field \"clocks_event_reasons.active\" "
                    "is not a valid field to query.' ; exit 2;; esac\nexit 9\n")
    fake.chmod(0o755)
    done = subprocess.run(list(sampler_argv(1, 1)), capture_output=True, text=True, timeout=20,
                          env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    out = parse_sampler(done.stdout)
    assert "clocks_throttle_reasons.active" in out.fields
    assert out.ended == "exited" and out.exit_rc == 9  # the loop died at once (driver not loaded)
    assert "$f" in SAMPLER_SCRIPT  # the field is chosen on the node, never spliced in here


# -- parsers --------------------------------------------------------------------------------------------------


def test_parser_reads_the_real_rows_field_formats():
    # The real capture's values of the sampler's fields, in the sampler's order.
    import csv

    rows = [r for r in csv.reader(REAL_CSV.open()) if r]
    header = [h.strip().split(" [")[0] for h in rows[0]]
    pick = ["timestamp", "index", "temperature.gpu", "clocks.current.sm", "clocks_event_reasons.active",
            "power.draw", "ecc.errors.uncorrected.volatile.total"]
    values = [rows[1][header.index(name)].strip() for name in pick]
    out = parse_sampler(f"@@burnin-sampler 60 1000 {FIELDS}\n" + ", ".join(values) + "\n@@end running\n")
    sample = out.samples[0]
    assert (sample.gpu, sample.temperature_c, sample.reasons, sample.power_w, sample.ecc_uncorrected) == \
        (0, 59, 0, 631.95, 0)
    assert sample.sm_clock_mhz and sample.sm_clock_mhz > 0


def test_parser_tolerates_na_and_odd_lines():
    text = (f"@@burnin-sampler 60 1000 {FIELDS}\n"
            "2026/07/14 08:12:53.353, 0, [N/A], [Not Supported], [N/A], [N/A], [N/A]\n"
            "garbage line\n"
            "2026/07/14 08:12:54.353, 0, 61, 1980 MHz, 0x0000000000000004, 650.00 W, 0\n"
            "@@end running\n")
    out = parse_sampler(text)
    assert len(out.samples) == 2 and out.warnings
    first, second = out.samples
    assert first.temperature_c is None and first.reasons is None and first.ecc_uncorrected is None
    assert second.t == pytest.approx(1.0) and second.sm_clock_mhz == 1980 and second.reasons == 4
    assert parse_sampler("").ended is None and parse_sampler("").duration_s is None


def test_load_parser_splits_iterations():
    out = parse_load(load_text(2))
    assert out.done == 2 and [(s.iteration, s.test) for s in out.steps] == [(1, "dcgm"), (1, "nccl"), (2, "dcgm"),
                                                                          (2, "nccl")]
    assert out.steps[0].dcgm.overall == "PASS" and out.steps[1].nccl.avg_busbw == 480.0
    cut = parse_load("@@iteration 1 dcgm\n{\"partial\": ")
    assert cut.done is None and cut.steps[0].rc is None


def test_reason_bits_are_nvmls():
    assert decode(0x4) == ["sw_power_cap"]
    assert decode(0x20 | 0x40 | 0x80 | 0x8) == ["hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                                                  "hw_power_brake_slowdown"]
    assert decode(0x1) == ["gpu_idle"]


# -- burnin.stability ----------------------------------------------------------------------------------------


def test_healthy_series_passes_per_gpu():
    stability, load = judge(series())
    assert [f.verdict for f in stability] == [Verdict.PASS] * 8
    assert {f.gpu for f in stability} == set(range(8))
    assert "61 samples over 10m00s" in stability[0].summary
    assert [f.verdict for f in load] == [Verdict.PASS]


@pytest.mark.parametrize("bit", [0x8, 0x20, 0x40, 0x80])
def test_thermal_or_power_throttle_under_load_fails(bit):
    stability, _ = judge(series(reasons=lambda g, t: bit if g == 3 and t >= 300 else 0))
    bad = [f for f in stability if f.verdict is not Verdict.PASS]
    assert [(f.gpu, f.verdict) for f in bad] == [(3, Verdict.FAIL)]
    assert "from 5m00s" in bad[0].summary and decode(bit)[0] in bad[0].summary


def test_sw_power_cap_warns_unless_the_profile_fails_it():
    # under DCGM's GEMM and Targeted Power every GPU holds its power limit; the cap alone at its
    # peers' clock is the load's, not a finding. With the clock 5% below its peers' under it: WARN.
    text = series(reasons=lambda g, t: 0x4 if g == 0 else 0)
    stability, _ = judge(text)
    assert stability[0].verdict is Verdict.PASS and "at its peers' clock" in stability[0].summary
    everyone = series(reasons=lambda g, t: 0x4 if 100 < t < 400 else 0, clock=lambda g, t: 1650 if 100 < t < 400
                      else 1980)
    assert [f.verdict for f in judge(everyone)[0]] == [Verdict.PASS] * 8
    text = series(reasons=lambda g, t: 0x4 if g == 0 else 0, clock=lambda g, t: 1880 if g == 0 else 1980)
    stability, _ = judge(text)
    assert stability[0].verdict is Verdict.WARN and stability[0].remediation is Remediation.MONITOR
    assert "5.1% below its peers' there" in stability[0].summary
    strict = profile_with("h100-sxm-8x", burnin={"fail": ["sw_power_cap", "hw_slowdown"]})
    stability, _ = judge(text, profile=strict)
    assert stability[0].verdict is Verdict.FAIL


def test_idle_samples_are_not_under_load():
    # Between two tests the GPU is idle (0x1) and at a low clock: neither throttle nor a clock fall.
    stability, _ = judge(series(reasons=lambda g, t: 0x1 | 0x20 if t > 550 else 0,
                                clock=lambda g, t: 345 if t > 550 else 1980))
    assert [f.verdict for f in stability] == [Verdict.PASS] * 8


def test_clock_falling_more_than_the_limit_fails():
    falling = series(clock=lambda g, t: 1980 - (t * 0.5 if g == 5 else 0))  # 1980 -> 1680 MHz at 10 min
    stability, _ = judge(falling)
    gpu5 = next(f for f in stability if f.gpu == 5)
    assert gpu5.verdict is Verdict.FAIL and "SM clock fell" in gpu5.summary and gpu5.observed > 10
    loose = profile_with("h100-sxm-8x", burnin={"clock_drop_pct": 20})
    stability, _ = judge(falling, profile=loose)
    assert next(f for f in stability if f.gpu == 5).verdict is Verdict.PASS


def test_uncorrected_ecc_growth_fails_isolate():
    stability, _ = judge(series(ecc=lambda g, t: "2" if g == 1 and t > 200 else "0"))
    gpu1 = next(f for f in stability if f.gpu == 1)
    assert gpu1.verdict is Verdict.FAIL and gpu1.remediation is Remediation.ISOLATE
    assert "grew by 2" in gpu1.summary


def test_ecc_not_supported_is_not_judged():
    stability, _ = judge(series(ecc=lambda g, t: "[N/A]"))
    assert all(f.verdict is Verdict.PASS and "ECC not readable" in f.summary for f in stability)


def test_too_few_samples_or_short_cover_is_error():
    # The samples end after 5 of 10 minutes (the header says 600 s).
    short = series(duration=300).replace("@@burnin-sampler 300", "@@burnin-sampler 600")
    stability, _ = judge(short)
    assert all(f.verdict is Verdict.ERROR and f.reason is ErrorReason.INCOMPLETE for f in stability)
    # A GPU missing from the series is ERROR too, never PASS.
    stability, _ = judge(series(gpus=7))
    assert next(f for f in stability if f.gpu == 7).verdict is Verdict.ERROR


def test_cut_off_and_early_exit_and_timeout_are_error():
    stability, _ = judge(series(end=""))
    assert [f.verdict for f in stability] == [Verdict.ERROR] and stability[0].reason is ErrorReason.INCOMPLETE
    stability, _ = judge(series(end="@@end exited 15"))
    assert stability[0].verdict is Verdict.ERROR and "exit 15" in stability[0].summary
    ctx = context({SAMPLER: timed_out(SAMPLER), LOAD: timed_out(LOAD)})
    assert [f.reason for f in run_check("burnin.stability", ctx)] == [ErrorReason.TIMEOUT]
    assert [f.reason for f in run_check("burnin.load", ctx)] == [ErrorReason.TIMEOUT]


def test_unreadable_reasons_are_error():
    text = series().replace("0x0000000000000000", "[N/A]")
    stability, _ = judge(text)
    assert all(f.verdict is Verdict.ERROR and f.reason is ErrorReason.UNPARSEABLE for f in stability)


# -- burnin.load ---------------------------------------------------------------------------------------------


def test_a_later_iteration_slower_than_the_first_fails():
    _, load = judge(series(), load_text(3, busbw=lambda n: 480.0 if n < 3 else 430.0))
    assert load[0].verdict is Verdict.FAIL and "iteration 3 busbw 430" in load[0].summary
    _, load = judge(series(), load_text(3, busbw=lambda n: 480.0 - n))  # within 5%
    assert load[0].verdict is Verdict.PASS


def _gemm_load(gflops) -> str:
    """Load iterations whose DCGM diag (level 3, the simulator's) prints ``gflops(n, gpu)`` for each GPU."""
    import re

    scenario = NodeScenario("node01", ProfileCatalog().get("h100-sxm-8x"), ())
    dcgm = run_tool(scenario, ("dcgmi", "diag", "-r", "3", "-j")).stdout.decode()
    assert "gigaflops" in dcgm
    out = [load_text(1).split("@@iteration 1 nccl\n", 1)[1].join(["@@iteration {n} nccl\n", ""])]
    text = []
    for n in (1, 2, 3):
        def figure(match: re.Match, n: int = n) -> str:
            return f"GPU {match.group(1)} calculated at approximately {gflops(n, int(match.group(1))):.2f} gigaflops"

        diag = re.sub(r"GPU (\d+) calculated at approximately [0-9.]+ gigaflops", figure, dcgm)
        text.append(f"@@iteration {n} dcgm\n{diag}\n@@rc 0\n" + out[0].replace("{n}", str(n)))
    return "".join(text) + "@@done 3\n"


def test_a_gpu_whose_gemm_falls_in_a_later_iteration_fails_by_name():
    load_run = parse_load(_gemm_load(lambda n, g: 850.0 if g != 4 or n == 1 else 780.0))
    assert [s.gflops.get("4") for s in load_run.steps if s.test == "dcgm"] == [850.0, 780.0, 780.0]
    _, load = judge(series(), _gemm_load(lambda n, g: 850.0 if g != 4 or n == 1 else 780.0))
    assert load[0].verdict is Verdict.FAIL and load[0].remediation is Remediation.ISOLATE
    assert "GPU4 GEMM 780 gigaflops in iteration 2, 8.2% below its first (850; limit 5%)" in load[0].summary
    assert "GPU3" not in load[0].summary
    _, load = judge(series(), _gemm_load(lambda n, g: 850.0 - 10 * n))  # within 5%: noise, not a slowdown
    assert load[0].verdict is Verdict.PASS and "GEMM on 8 GPU(s)" in load[0].summary


def test_load_script_passes_waived_error_codes_as_one_word(tmp_path):
    """The real script with a stand-in dcgmi that prints its argv: ``-`` adds nothing, a waiver's value is one
    word after --ignoreErrorCodes (its ';' is DCGM's separator, never the shell's)."""
    for tool in ("dcgmi", "all_reduce_perf"):
        fake = tmp_path / tool
        fake.write_text("#!/bin/sh\nfor a in \"$@\"; do printf '<%s>' \"$a\"; done; echo\n")
        fake.chmod(0o755)
    profile = ProfileCatalog().get("h100-sxm-8x")
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    for codes, expected in (("-", "<diag><-r><3><-j>\n"),
                            ("gpu3:40;gpu5:101", "<diag><-r><3><-j><--ignoreErrorCodes><gpu3:40;gpu5:101>\n")):
        argv = list(load_argv(1, {DCGM_IGNORE_VAR: codes} if codes != "-" else {}, profile))
        argv[argv.index(next(a for a in argv if a.endswith("all_reduce_perf")))] = str(tmp_path / "all_reduce_perf")
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, env=env)
        assert done.returncode == 0, done.stderr
        assert re.split(r"@@iteration 1 dcgm [0-9/: ]+\n", done.stdout, maxsplit=1)[1].startswith(expected), done.stdout


def test_a_failed_dcgm_iteration_fails_and_a_cut_off_load_is_error():
    _, load = judge(series(), load_text(2, dcgm_rc=226, dcgm_result="Fail"))
    assert load[0].verdict is Verdict.FAIL and "dcgm FAIL" in load[0].summary
    cut = load_text(2).rsplit("@@rc 0\n@@done 2\n", 1)[0]
    _, load = judge(series(), cut)
    assert load[0].verdict is Verdict.ERROR


def test_an_xid_during_the_burn_in_fails_one_seen_before_does_not():
    _, load = judge(series(), after=BOOT_LOG + XID_79)
    assert load[0].verdict is Verdict.FAIL and "1 Xid event(s) during the burn-in: Xid 79 on PCI:0000:9a:00" in \
        load[0].summary
    _, load = judge(series(), after=BOOT_LOG)  # the Xid 13 of the boot log was there before: not the burn-in's
    assert load[0].verdict is Verdict.PASS
    _, load = judge(series(), after=None)  # the log afterwards not read: no claim that no Xid came
    assert load[0].verdict is Verdict.ERROR and "kernel log after the burn-in" in load[0].summary


# -- the simulator -------------------------------------------------------------------------------------------


def _sim(faults, duration=600, interval=5):
    catalog = ProfileCatalog()
    profile = catalog.get("h100-sxm-8x")
    scenario = NodeScenario("node01", profile, tuple(faults))
    results = {"kmsg": result("kmsg", run_tool(scenario, ("dmesg",)).stdout.decode())}
    for spec in burnin_specs({}, profile, duration, interval):
        out = run_tool(scenario, spec.argv)
        results[spec.name] = result(spec.name, out.stdout.decode(), out.rc, command=shlex.join(spec.argv))
    ctx = context(results)
    return run_check("burnin.stability", ctx), run_check("burnin.load", ctx)


def test_sim_healthy_node_passes_and_throttle_after_fails_after_its_minutes():
    stability, load = _sim(())
    assert {f.verdict for f in stability} == {Verdict.PASS} and load[0].verdict is Verdict.PASS
    stability, load = _sim(("throttle_after:4:2",))
    assert [(f.gpu, f.verdict) for f in stability if f.verdict is not Verdict.PASS] == [(2, Verdict.FAIL)]
    # Its GEMM falls with its clock in the later iterations (and no other GPU's).
    assert load[0].verdict is Verdict.FAIL and "GPU2 GEMM" in load[0].summary and "GPU1 " not in load[0].summary
    gpu2 = next(f for f in stability if f.gpu == 2)
    assert "sw_thermal_slowdown" in gpu2.summary and "from 4m00s" in gpu2.summary and "SM clock fell" in gpu2.summary
    # Throttling after the burn-in's end is not seen.
    stability, _ = _sim(("throttle_after:20",))
    assert {f.verdict for f in stability} == {Verdict.PASS}
    assert validate_fault("throttle_after:5") is None and validate_fault("throttle_after:x") is not None


def test_sim_burnin_xid_is_in_the_log_after_the_load_only():
    _, load = _sim(("burnin_xid:79:3",))
    assert load[0].verdict is Verdict.FAIL and "Xid 79 on PCI:0000:5d:00" in load[0].summary
    assert "Xid 79" not in run_tool(NodeScenario("n", ProfileCatalog().get("h100-sxm-8x"), ("burnin_xid:79",)),
                                    ("dmesg",)).stdout.decode()


def test_profile_burnin_section_is_schema_checked():
    from nvdeploy.config.profile_schema import check_sections
    from nvdeploy.config.yamlfile import ConfigError

    check_sections({"burnin": {"clock_drop_pct": 10, "figure_drop_pct": 5, "fail": ["sw_power_cap"],
                               "warn": ["sync_boost"]}}, "p.yaml")
    for bad, key in (({"clock_drop": 10}, "burnin.clock_drop"), ({"fail": ["hot"]}, "burnin.fail"),
                     ({"figure_drop_pct": 0}, "burnin.figure_drop_pct")):
        with pytest.raises(ConfigError, match=key):
            check_sections({"burnin": bad}, "p.yaml")


def test_a_load_that_fails_at_once_stops_and_its_gpus_were_never_loaded(tmp_path):
    """With dcgmi and all_reduce_perf missing, the real script spun (32 iterations in 1.3 s) to the
    end of the duration; now it stops after three iterations that each ended at once, and says so."""
    profile = ProfileCatalog().get("h100-sxm-8x")
    argv = list(load_argv(8, {}, profile))
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
    assert time.monotonic() - start < 6
    run = parse_load(done.stdout)
    assert run.aborted == 3 and run.done == 3 and max(s.iteration for s in run.steps) == 3
    idle = series(reasons=lambda g, t: 0x1, clock=lambda g, t: 345)
    stability, load = judge(idle, done.stdout)
    assert all(f.verdict is Verdict.ERROR and "never loaded" in f.summary for f in stability)
    assert load[0].verdict is Verdict.ERROR and "failed at once in 3 iterations" in load[0].summary


def test_the_loads_done_file_is_made_new_never_written_through_a_planted_link(tmp_path):
    """The done file lies in /tmp, where another user who read the argv could plant a link to a file root owns:
    the load (often under sudo) creates it only when the name is free (noclobber), and leaves a planted one as is."""
    profile = ProfileCatalog().get("h100-sxm-8x")
    fresh = tmp_path / "fresh.done"
    subprocess.run(list(load_argv(8, {}, profile, str(fresh))), capture_output=True, timeout=30,
                   env={"PATH": "/usr/bin:/bin"})
    assert fresh.is_file() and fresh.read_bytes() == b""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    planted = tmp_path / "planted.done"
    planted.symlink_to(victim)
    subprocess.run(list(load_argv(8, {}, profile, str(planted))), capture_output=True, timeout=30,
                   env={"PATH": "/usr/bin:/bin"})
    assert victim.read_text() == "precious\n" and planted.is_symlink()


def test_a_phase_change_is_no_clock_fall_and_a_gpu_below_its_peers_fails():
    """The first tenth of a burn-in runs DCGM's memory plugin at 1980 MHz, the last tenth its
    power-capped GEMM at 1650 MHz: every GPU alike, no GPU got worse (it FAILed 'fell 16.7%')."""
    phases = series(clock=lambda g, t: 1980 if t < 300 else 1650)
    stability, _ = judge(phases)
    assert [f.verdict for f in stability] == [Verdict.PASS] * 8, stability[0].summary
    # One GPU 12% below the others at the same instants, from the start (no fall to see): FAIL by its peers.
    slow = series(clock=lambda g, t: (1980 if t < 300 else 1650) * (0.88 if g == 4 else 1.0))
    stability, _ = judge(slow)
    assert stability[4].verdict is Verdict.FAIL and "12.0% below its peers'" in stability[4].summary
    assert all(f.verdict is Verdict.PASS for i, f in enumerate(stability) if i != 4)
    # One GPU that slows against its peers as the run goes on: the fall, phase-free.
    falling = series(clock=lambda g, t: (1980 if t < 300 else 1650) * (1 - (t / 600 * 0.12 if g == 2 else 0)))
    stability, _ = judge(falling)
    assert stability[2].verdict is Verdict.FAIL and "SM clock fell" in stability[2].summary
