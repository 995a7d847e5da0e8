"""Burn-in (``validate --burn-in DURATION``): the heavy tests repeated under sustained load for DURATION, with a
sampler of temperature, SM clock, throttle reasons, power and uncorrected ECC running beside them. Part of the
collect layer: it imports no check; nvdeploy/parsers/burnin.py reads what the two scripts print.

Two collectors, run side by side in ONE batch after the node's other heavy collectors (the engine, runner/engine.py),
each under its own timeout, their outputs kept apart:

- ``burnin_sampler``: ``sh -c SAMPLER nvdeploy-burnin-sampler DURATION_S INTERVAL_MS``. It picks the throttle field
  the driver knows (``clocks_event_reasons.active`` on newer drivers, which renamed the NVML "throttle" reasons to
  "clock event" reasons: the 590.48.01 capture in tests/fixtures/real/nvidia-smi-csv lists only that name;
  ``clocks_throttle_reasons.active`` on older ones), then runs ``nvidia-smi --query-gpu=timestamp,index,
  temperature.gpu,clocks.sm,<reasons>,power.draw,ecc.errors.uncorrected.volatile.total
  --format=csv,noheader,nounits -lms INTERVAL_MS`` in the background for DURATION_S and stops it. ``-lms`` loops
  until killed, so the script owns the end: ``sleep`` then ``kill``, and an EXIT trap kills the loop when the
  script itself is ended (its timeout, the batch's, Ctrl-C). Output::

      @@burnin-sampler <duration_s> <interval_ms> <the query's fields>
      <one CSV row per GPU per interval>
      @@end running          (the loop ran for the whole duration and was stopped)
      @@end exited <rc>      (nvidia-smi's loop ended early by itself: driver gone, bad field)

- ``burnin_load``: ``sh -c LOAD nvdeploy-burnin-load DURATION_S DCGM_LEVEL DCGM_TIMEOUT NCCL_TIMEOUT IGNORE
  NCCL_ARGV...``: iterations of ``dcgmi diag -r LEVEL -j`` (level 3 by default: its Diagnostic and Targeted Stress
  plugins are the per-GPU GEMM stress, and Diagnostic prints each GPU's gigaflops, which burnin.load follows from
  iteration to iteration; levels 1 and 2 have no GEMM test), with ``--ignoreErrorCodes IGNORE`` where the run's
  waivers name DCGM error codes for the node (``-``: none; config/waivers.py), then the node's nccl-tests
  ``all_reduce_perf`` line (collect/nccl_commands.py), each under ``timeout -k`` (the diag at its level's limit,
  3600 s at level 3, or ``dcgm_timeout``), until
  DURATION_S has passed; a new iteration starts only before then, so the last one may run past the sampled window
  by up to one iteration. Output::

      @@iteration <n> dcgm <YYYY/MM/DD hh:mm:ss, the node's local time, as nvidia-smi's timestamps>
      <dcgmi JSON>
      @@rc <exit status>
      @@iteration <n> nccl <time>
      <all_reduce_perf output>
      @@rc <exit status>
      ...
      [@@abort <n>]      (n iterations in a row each ended within 5 s: a load failing at once, stopped)
      @@end <time>
      @@done <iterations>

  On exit it creates the run's done file (an argument, ``/tmp/nvdeploy-burnin-<random>.done``): the sampler,
  given the same file, samples on past DURATION until it appears (at most to the load's limit) and removes it, so
  the last iteration is watched to its end. The step times place each sample in its test (burnin.stability).

- ``burnin_kmsg``: ``dmesg -k`` (the kernel's messages, where Xid lines are) in a batch of its own once the load has
  ended: the Xid events it shows that the light batch's ``dmesg`` did not are those of the burn-in.

Every argument reaches the node shlex-quoted by the batch (nvdeploy/transport/batch.py): the nccl-tests argv, with
its folder from the host vars, is ``"$@"`` inside the script, never shell text.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import replace
from typing import Any, Mapping, Optional, Sequence

from nvdeploy.collect.collector import Collector
from nvdeploy.collect.datacenter import DCGM_IGNORE_VAR, DCGM_TIMEOUTS
from nvdeploy.collect.nccl_commands import NCCL_TIMEOUT_S, build_nccl_all_reduce
from nvdeploy.transport.base import CommandSpec

SAMPLER = "burnin_sampler"
LOAD = "burnin_load"
KMSG_AFTER = "burnin_kmsg"
COLLECTOR_NAMES = (SAMPLER, LOAD, KMSG_AFTER)
SAMPLER_HELPER = "nvdeploy-burnin-sampler"  # $0 of the scripts: the simulator recognises them by it
LOAD_HELPER = "nvdeploy-burnin-load"
EVENT_FIELD = "clocks_event_reasons.active"
THROTTLE_FIELD = "clocks_throttle_reasons.active"
# The query after the reasons field is chosen; {reasons} is filled in on the node.
QUERY_FIELDS = ("timestamp", "index", "temperature.gpu", "clocks.sm", "{reasons}", "power.draw",
                "ecc.errors.uncorrected.volatile.total")
DEFAULT_INTERVAL_S = 5.0
MIN_INTERVAL_S = 0.1
# Level 3: the first with a GEMM load (Diagnostic, Targeted Stress), about 15 minutes an iteration.
DEFAULT_DCGM_LEVEL = 3
# One iteration's tests, each under its own limit inside the load script.
# Each iteration's dcgmi diag: the limit of that level's own collector (collect/datacenter.py), or dcgm_timeout.
KILL_GRACE_S = 10
# Beyond the duration: the sampler's start and stop; the load's last iteration started just before the end.
SAMPLER_SLACK_S = 60.0
# 8 GPUs x one ~80-byte row every 5 s for 24 h is ~11 MB; sub-second intervals over hours can be more: kept.
SAMPLER_MAX_BYTES = 64 * 1024 * 1024
LOAD_MAX_BYTES = 32 * 1024 * 1024

SAMPLER_SCRIPT = r"""d=$1; ms=$2; x=${3:-0}; done_file=${4:-}
f=clocks_event_reasons.active
nvidia-smi --query-gpu=$f --format=csv,noheader >/dev/null 2>&1 || f=clocks_throttle_reasons.active
q=timestamp,index,temperature.gpu,clocks.sm,$f,power.draw,ecc.errors.uncorrected.volatile.total
echo "@@burnin-sampler $d $ms $q"
nvidia-smi --query-gpu=$q --format=csv,noheader,nounits -lms "$ms" &
p=$!
trap 'kill $p 2>/dev/null' EXIT
trap 'exit 143' HUP INT TERM
sleep "$d"
w=0
while [ -n "$done_file" ] && [ ! -e "$done_file" ] && [ "$w" -lt "$x" ] && kill -0 $p 2>/dev/null; do
  sleep 1; w=$((w+1))
done
[ -z "$done_file" ] || rm -f "$done_file" 2>/dev/null
if kill -0 $p 2>/dev/null; then kill $p 2>/dev/null; wait $p; echo "@@end running"
else wait $p; echo "@@end exited $?"; fi
"""

LOAD_SCRIPT = r"""d=$1; lvl=$2; dt=$3; nt=$4; ic=$5; done_file=$6; shift 6
end=$(( $(date +%s) + d ))
n=0; quick=0
trap 'exit 143' HUP INT TERM
trap '[ "$done_file" = - ] || (set -C; : >"$done_file") 2>/dev/null' EXIT
while :; do
  n=$((n+1)); t0=$(date +%s)
  echo "@@iteration $n dcgm $(date '+%Y/%m/%d %H:%M:%S')"
  if [ "$ic" = - ]; then timeout -k 10 "$dt" dcgmi diag -r "$lvl" -j
  else timeout -k 10 "$dt" dcgmi diag -r "$lvl" -j --ignoreErrorCodes "$ic"; fi
  echo "@@rc $?"
  echo "@@iteration $n nccl $(date '+%Y/%m/%d %H:%M:%S')"
  timeout -k 10 "$nt" "$@"
  echo "@@rc $?"
  now=$(date +%s)
  if [ $((now - t0)) -lt 5 ]; then quick=$((quick+1)); else quick=0; fi
  if [ "$quick" -ge 3 ]; then echo "@@abort $quick"; break; fi
  [ "$now" -lt "$end" ] || break
done
echo "@@end $(date '+%Y/%m/%d %H:%M:%S')"
echo "@@done $n"
"""
# Three iterations in a row that each end within 5 s are a load that fails at once (dcgmi or all_reduce_perf
# missing, nv-hostengine down): the script stops instead of spinning to the end of the duration.
FAST_FAIL_S = 5
FAST_FAIL_ITERATIONS = 3

_DURATION = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhd]?)\s*", re.IGNORECASE)
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# Under a minute is no burn-in (one DCGM iteration takes longer); a week is surely a typo.
MIN_DURATION_S = 60.0
MAX_DURATION_S = 7 * 86400.0


def parse_duration(text: str) -> float:
    """``90s``, ``30m``, ``4h``, ``1.5h``, ``1d`` or plain seconds -> seconds; ValueError saying why otherwise."""
    match = _DURATION.fullmatch(str(text))
    if match is None:
        raise ValueError(f"{text!r} is not a duration: a number with s, m, h or d (90s, 30m, 4h)")
    seconds = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if not MIN_DURATION_S <= seconds <= MAX_DURATION_S:
        raise ValueError(f"{text!r}: a burn-in lasts from 1m to 7d")
    return seconds


def format_duration(seconds: float) -> str:
    """``45s``, ``5m00s``, ``4h00m``: how burn-in findings and messages write a duration."""
    seconds = int(round(seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else \
        f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def dcgm_level(host_vars: Mapping[str, Any]) -> int:
    """The DCGM diag level each iteration runs: host var ``burnin_dcgm_level`` (1-4), else 3."""
    value = host_vars.get("burnin_dcgm_level", DEFAULT_DCGM_LEVEL)
    try:
        level = int(value)
    except (TypeError, ValueError):
        return DEFAULT_DCGM_LEVEL
    return level if 1 <= level <= 4 else DEFAULT_DCGM_LEVEL


def dcgm_iteration_timeout(host_vars: Mapping[str, Any]) -> float:
    """One load iteration's limit for its dcgmi diag: host var ``dcgm_timeout``, else its level's own (3600 s at
    level 3)."""
    return _number(host_vars, "dcgm_timeout", DCGM_TIMEOUTS[dcgm_level(host_vars)])


def _number(host_vars: Mapping[str, Any], key: str, default: float) -> float:
    try:
        value = float(host_vars.get(key) or default)
    except (TypeError, ValueError):
        return default
    return value if value > 0 else default


def sampler_argv(duration_s: float, interval_s: float, extra_s: float = 0.0, done_file: str = "") -> tuple[str, ...]:
    """The sampler for ``duration_s``, then on until ``done_file`` appears (the load ended: its last iteration may
    run past the duration), for at most ``extra_s`` more."""
    tail = (str(int(extra_s)), done_file) if done_file else ()
    return ("sh", "-c", SAMPLER_SCRIPT, SAMPLER_HELPER, str(int(round(duration_s))),
            str(max(int(MIN_INTERVAL_S * 1000), int(round(interval_s * 1000)))), *tail)


def load_argv(duration_s: float, host_vars: Mapping[str, Any], profile: Any, done_file: str = "-") -> tuple[str, ...]:
    dcgm_timeout = dcgm_iteration_timeout(host_vars)
    nccl_timeout = _number(host_vars, "nccl_timeout", NCCL_TIMEOUT_S)
    ignore = host_vars.get(DCGM_IGNORE_VAR) or "-"
    return ("sh", "-c", LOAD_SCRIPT, LOAD_HELPER, str(int(round(duration_s))), str(dcgm_level(host_vars)),
            str(int(dcgm_timeout)), str(int(nccl_timeout)), str(ignore), done_file,
            *build_nccl_all_reduce(host_vars, profile))


def sampler_timeout(duration_s: float, extra_s: float = 0.0) -> float:
    return duration_s + extra_s + SAMPLER_SLACK_S


def load_timeout(duration_s: float, host_vars: Mapping[str, Any]) -> float:
    """The duration, one more iteration started just before its end, and the kill grace of both its steps."""
    return (duration_s + dcgm_iteration_timeout(host_vars)
            + _number(host_vars, "nccl_timeout", NCCL_TIMEOUT_S) + 2 * KILL_GRACE_S + SAMPLER_SLACK_S)


def burnin_interval(host_vars: Mapping[str, Any], interval_s: Optional[float] = None) -> float:
    """The sampling interval: the run's (``--burn-in-interval``), else host var ``burnin_interval``, else 5 s."""
    if interval_s is not None:
        return max(MIN_INTERVAL_S, interval_s)
    return max(MIN_INTERVAL_S, _number(host_vars, "burnin_interval", DEFAULT_INTERVAL_S))


# In the catalog (checks list them, docs/checks.md shows them) with a one-hour argv, but never planned by specs_for
# (their build returns nothing, as storage's without storage_paths): only a run with a duration makes them, through
# burnin_specs (runner/engine.py), and runs the two together, never one by one as other heavy collectors.
_CATALOG_DURATION_S = 3600.0


def _not_planned(host_vars: Mapping[str, Any], profile: Any) -> tuple[str, ...]:
    return ()

BURNIN_SAMPLER = Collector(
    SAMPLER, sampler_argv(_CATALOG_DURATION_S, DEFAULT_INTERVAL_S), sampler_timeout(_CATALOG_DURATION_S),
    heavy=True, max_bytes=SAMPLER_MAX_BYTES, timeout_var="burnin_sampler_timeout", build=_not_planned,
    description="burn-in sampler: temperature, SM clock, throttle reasons, power, uncorrected ECC every interval "
                "(nvidia-smi --query-gpu ... -lms) for the burn-in's duration")
BURNIN_LOAD = Collector(
    LOAD, ("sh", "-c", LOAD_SCRIPT, LOAD_HELPER, str(int(_CATALOG_DURATION_S)), str(DEFAULT_DCGM_LEVEL),
           str(int(DCGM_TIMEOUTS[DEFAULT_DCGM_LEVEL])), str(int(NCCL_TIMEOUT_S)), "-", "-", "all_reduce_perf"),
    load_timeout(_CATALOG_DURATION_S, {}), heavy=True, max_bytes=LOAD_MAX_BYTES, timeout_var="burnin_load_timeout",
    build=_not_planned,
    description="burn-in load: DCGM diag and nccl-tests all_reduce_perf iterations for the burn-in's duration")

BURNIN_KMSG = Collector(
    KMSG_AFTER, ("dmesg", "-k"), 20.0, needs_root=True, heavy=True, keep_tail=True,
    description="the kernel log once the burn-in's load ended: Xid events of the burn-in")

COLLECTORS: tuple[Collector, ...] = (BURNIN_SAMPLER, BURNIN_LOAD, BURNIN_KMSG)


def burnin_specs(host_vars: Mapping[str, Any], profile: Any, duration_s: float,
                 interval_s: Optional[float] = None) -> list[CommandSpec]:
    """The burn-in's three specs for this host and run: the sampler and the load for ``duration_s`` (the host's
    nccl-tests line and limits), then the kernel log. The engine runs them in two batches (:func:`burnin_batches`);
    the Slurm budget (slurm/budget.py) counts each batch once, at its longest limit."""
    sudo = bool(host_vars.get("sudo", False))
    # The load's last iteration may run past the duration: the sampler watches until the load says it ended (a
    # file of this run's own name), at most as long as the load's limit.
    done_file = f"/tmp/nvdeploy-burnin-{uuid.uuid4().hex[:16]}.done"
    extra = load_timeout(duration_s, host_vars) - SAMPLER_SLACK_S - duration_s - 1  # the load the longest
    sampler = replace(BURNIN_SAMPLER.spec(sudo), timeout_s=sampler_timeout(duration_s, extra),
                      argv=sampler_argv(duration_s, burnin_interval(host_vars, interval_s), extra, done_file))
    load = replace(BURNIN_LOAD.spec(sudo), argv=load_argv(duration_s, host_vars, profile, done_file),
                   timeout_s=load_timeout(duration_s, host_vars))
    return [sampler, load, BURNIN_KMSG.spec(sudo)]


def burnin_batches(specs: Sequence[CommandSpec]) -> list[list[CommandSpec]]:
    """The batches the burn-in runs in, in order: the sampler beside the load, then the kernel log after them."""
    during = [s for s in specs if s.name in (SAMPLER, LOAD)]
    after = [s for s in specs if s.name == KMSG_AFTER]
    return [batch for batch in (during, after) if batch]
