"""nccl-tests checks. :func:`assess` judges one nccl-tests run (facts + raw result + expectations) and is shared
with multi-node runs (same table, more ranks, another floor); :func:`nccl_all_reduce` is the single-node check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from nvdeploy.checks.gating import raw_gate
from nvdeploy.checks.registry import NodeContext, register
from nvdeploy.collect.nccl_commands import NcclExpectation, expectation  # noqa: F401  re-exported for multi-node runs
from nvdeploy.parsers.nccl_tests import NcclFacts
from nvdeploy.results import CommandResult, ErrorReason, Remediation, Verdict

COLLECTOR = "nccl_all_reduce"
_ENV_RE = re.compile(r"\b(NCCL_[A-Z0-9_]+)=(\S+)")
_ENV_INFO_RE = re.compile(r"NCCL INFO (NCCL_[A-Z0-9_]+) set by environment to (\S+)")
_AVG_FAILED_RE = re.compile(r"Avg bus bandwidth\s*:\s*\S+\s+FAILED")
# NCCL variables whose presence makes a low bandwidth a tuning question rather than a hardware one.
TUNING_VARS = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_NVLS_ENABLE", "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE",
               "NCCL_MAX_NCHANNELS", "NCCL_MIN_NCHANNELS", "NCCL_NET_GDR_LEVEL", "NCCL_IB_DISABLE", "NCCL_BUFFSIZE")
_TABLE_FAILURES = ("Test NCCL failure", "Test CUDA failure")


@dataclass(frozen=True)
class Assessment:
    """One verdict about a run; a check turns it into a Finding (node or cluster level)."""

    verdict: Verdict
    summary: str
    observed: Any = None
    expected: Any = None
    unit: str = ""
    reason: Optional[ErrorReason] = None
    remediation: Remediation = Remediation.NONE
    details: Mapping[str, Any] = field(default_factory=dict)


def nccl_env(result: Optional[CommandResult]) -> dict[str, str]:
    """The NCCL_* environment of a run: what the command set, plus what NCCL reported as set (NCCL_DEBUG=INFO)."""
    env: dict[str, str] = {}
    if result is None:
        return env
    for name, value in _ENV_RE.findall(result.command.split(" -- ")[-1]):
        env[name] = value.strip("'\"")
    for name, value in _ENV_INFO_RE.findall(result.text):
        env.setdefault(name, value)
    return env


def _size(size: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} B"


def _context(facts: NcclFacts, env: Mapping[str, str]) -> str:
    parts = [f"NCCL {facts.nccl_version or 'version unknown'}"]
    shown = {k: v for k, v in env.items() if k != "NCCL_TESTS_MIN_BW"}
    if shown:
        parts.append(" ".join(f"{k}={v}" for k, v in sorted(shown.items())))
    return "; ".join(parts)


def assess(facts: Optional[NcclFacts], result: Optional[CommandResult], *, ranks: Optional[int],
           exp: NcclExpectation, label: str = "all_reduce_perf",
           low_bw_hint: Optional[str] = None) -> list[Assessment]:
    """Judge one completed nccl-tests run. ``result`` is the raw command (for its exit status and NCCL_* env);
    ``ranks`` the number of ranks the run must have (GPUs per node x nodes); ``exp`` its busbw floor.

    FAIL: the table was replaced by "Test NCCL failure"/"Test CUDA failure", ``#wrong`` or "Out of bounds values"
    is not 0, or busbw at the largest message size is below the floor. ERROR: no validation (``-c 0``, ``#wrong``
    N/A), a rank count other than ``ranks``, no table, or the summary footer missing (cut off). PASS otherwise.
    """
    env = nccl_env(result)
    rc = result.rc if result is not None else None
    if facts is None:
        return [Assessment(Verdict.ERROR, f"{label} printed nothing readable", reason=ErrorReason.UNPARSEABLE)]
    context = _context(facts, env)
    details = {"nccl_version": facts.nccl_version, "env": env, "nranks": facts.nranks, "rc": rc}
    table_failures = [e for e in facts.errors if any(t in e for t in _TABLE_FAILURES)]
    if table_failures and not facts.rows:
        hint = (" (fabric manager not running?)" if "system not yet initialized" in table_failures[0] else "")
        return [Assessment(Verdict.FAIL, f"{label} failed: {table_failures[0]}{hint} ({context})",
                           observed=table_failures[0], expected="a result table",
                           remediation=Remediation.INVESTIGATE, details=details)]
    if not facts.rows:
        first = facts.errors[0] if facts.errors else (facts.warnings[0] if facts.warnings else "no output")
        reason = ErrorReason.NOT_RUN if facts.errors else ErrorReason.INCOMPLETE
        return [Assessment(Verdict.ERROR, f"{label} printed no result table (exit {rc}): {first}", reason=reason,
                           details=details)]
    out: list[Assessment] = []
    unvalidated = facts.validation is False or any(w is None for r in facts.rows for w in (r.wrong_oop, r.wrong_ip))
    if unvalidated:
        out.append(Assessment(Verdict.ERROR, f"{label} ran without data validation (-c 0, #wrong N/A): results "
                              "not trusted; run with -c 1", observed="#wrong N/A", expected="-c 1",
                              reason=ErrorReason.NOT_RUN, details=details))
    if ranks is not None and facts.nranks is not None and facts.nranks != ranks:
        out.append(Assessment(Verdict.ERROR, f"{label} ran on {facts.nranks} ranks, expected {ranks} (one per GPU)",
                              observed=facts.nranks, expected=ranks, reason=ErrorReason.NOT_RUN, details=details))
    if facts.wrong_total or facts.out_of_bounds:
        out.append(Assessment(Verdict.FAIL, f"{label} data check failed: #wrong {facts.wrong_total}, out of bounds "
                              f"values {facts.out_of_bounds if facts.out_of_bounds is not None else '?'}: corrupted "
                              f"results ({context})", observed=facts.wrong_total, expected=0,
                              remediation=Remediation.ISOLATE, details=details))
    if not facts.complete:
        out.append(Assessment(Verdict.ERROR, f"{label} output ends before its summary footer (cut off)",
                              reason=ErrorReason.INCOMPLETE, details=details))
    largest = max(facts.rows, key=lambda r: r.size_bytes)
    values = [v for v in (largest.busbw_oop, largest.busbw_ip) if v is not None]
    busbw = max(values) if values else None
    floor = exp.floor_gbps
    at = f"at {_size(largest.size_bytes)}"
    bw_details = dict(details, size_bytes=largest.size_bytes, busbw_gbps=busbw, floor_gbps=floor,
                      reference_gbps=exp.busbw_gbps)
    if busbw is None:
        out.append(Assessment(Verdict.ERROR, f"{label}: no bus bandwidth {at}", reason=ErrorReason.UNPARSEABLE,
                              details=bw_details))
    elif floor is not None and busbw < floor:
        tuned = [k for k in env if k in TUNING_VARS]
        remediation = Remediation.TUNE if tuned and low_bw_hint is None else Remediation.INVESTIGATE
        why = low_bw_hint or (f"check the NCCL tuning ({', '.join(tuned)})" if tuned else
                              "check NVLink/NVSwitch (nvlink.links), fabric manager, clocks and GPU health")
        out.append(Assessment(Verdict.FAIL, f"{label} busbw {busbw:g} GB/s {at} below the floor {floor:g} GB/s "
                              f"({exp.floor_pct:g}% of {exp.busbw_gbps:g}): {why} ({context})", observed=busbw,
                              expected=f">= {floor:g}", unit="GB/s", remediation=remediation, details=bw_details))
    elif not any(a.verdict in (Verdict.FAIL, Verdict.ERROR) for a in out):
        gate = f" >= floor {floor:g} GB/s" if floor is not None else " (no floor in the profile: not judged)"
        out.append(Assessment(Verdict.PASS, f"{label} busbw {busbw:g} GB/s {at}{gate}, #wrong 0 ({context})",
                              observed=busbw, expected=f">= {floor:g}" if floor is not None else None, unit="GB/s",
                              details=bw_details))
    failed = any(a.verdict in (Verdict.FAIL, Verdict.ERROR) for a in out)
    if rc not in (0, None) and not failed:
        if result is not None and _AVG_FAILED_RE.search(result.text):
            out = [a for a in out if a.verdict is not Verdict.PASS]
            out.append(Assessment(Verdict.WARN, f"{label} exited {rc}: the average busbw over all sizes is below 90% "
                                  f"of NCCL_TESTS_MIN_BW={env.get('NCCL_TESTS_MIN_BW', '?')} although busbw {at} "
                                  "meets the floor", observed=facts.avg_busbw, unit="GB/s",
                                  remediation=Remediation.MONITOR, details=bw_details))
        else:
            out = [a for a in out if a.verdict is not Verdict.PASS]
            out.append(Assessment(Verdict.ERROR, f"{label} exited {rc} with a clean table", reason=ErrorReason.NOT_RUN,
                                  details=bw_details))
    return out


@register("nccl.all_reduce", collectors=(COLLECTOR,))
def nccl_all_reduce(ctx: NodeContext) -> list[Any]:
    """Runs nccl-tests ``all_reduce_perf -b 1G -e 8G -f 2 -g <GPU count> -c 1`` on the node (from the host var
    ``nccl_tests_dir``, else the PATH), with ``NCCL_DEBUG=VERSION``, ``NCCL_TESTS_MIN_BW=<floor>`` and the host's
    ``nccl_env``; hard timeout 900 s (host var ``nccl_timeout``).

    PASS: busbw at the largest size (8 GiB) >= the floor, ``all_reduce_busbw_gbps`` x ``floor_pct``% from the
    profile's ``nccl`` section, ``#wrong`` 0 everywhere, "Out of bounds values : 0 OK", one rank per GPU. FAIL:
    below the floor (TUNE when NCCL_* tuning variables are set, else INVESTIGATE NVLink, fabric manager,
    clocks), data errors (ISOLATE), or a "Test NCCL/CUDA failure" instead of the table. ERROR: not installed
    (REINSTALL), hung (timeout), no ``-c 1`` validation, a rank count other than the GPU count, or the output cut
    off before its footer. The NCCL version, message size and NCCL_* environment go into the summary. A profile
    without a ``nccl`` section gets busbw recorded, not judged.
    """
    gated = raw_gate(ctx, "nccl.all_reduce", COLLECTOR, "all_reduce_perf",
                     "install nccl-tests or set the host var nccl_tests_dir")
    if gated:
        return gated
    exp = expectation(ctx.profile)
    found = assess(ctx.facts.get("nccl"), ctx.results[COLLECTOR], ranks=ctx.profile.gpu.count, exp=exp)
    return [ctx.finding("nccl.all_reduce", a.verdict, a.summary, observed=a.observed, expected=a.expected,
                        unit=a.unit, reason=a.reason, remediation=a.remediation, collector=COLLECTOR) for a in found]
