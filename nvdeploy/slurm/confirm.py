"""Anti-flap for ``node-check --drain``: a finding must be seen in N consecutive checks before the node is drained,
and none drains within the settle time after boot. Pure: the caller reads and writes the state (a small JSON
document kept on the node) and the uptime.

Why: right after a planned reboot some facts are briefly wrong (NVLink links still training, the fabric manager
not yet up), and a health check that drains on its first sight of them takes healthy nodes out of service.

The state holds, per check id and GPU (``dcgm.diag_r2#GPU3``; the check id alone for a finding of no GPU), the bad
verdict (FAIL or ERROR) it had and in how many consecutive checks it had it. Per GPU, because within one check
ERROR outranks FAIL: a FAIL on GPU 3 beside an ERROR on GPU 7 every time would otherwise restart at 1 each time
and never drain. A check seen PASS, WARN or SKIP clears its count; a check not judged this time (absent, or ERROR
because nvdeploy did not look: the node lock busy, the run interrupted) keeps its count unchanged, since nothing was
seen either way. A check ERROR after FAIL (or FAIL after ERROR) starts again at 1: a different thing was seen. The
counts belong to one boot (the kernel's boot id): after a reboot the checks of the boot before count for nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from nvdeploy.results import ErrorReason, Finding, Verdict

DEFAULT_CONFIRM = 2
STATE_VERSION = 1
# An ERROR for one of these reasons says nvdeploy did not look at the node: it neither confirms nor clears.
_NOT_LOOKED = (ErrorReason.BUSY, ErrorReason.INTERRUPTED)
_BAD = (Verdict.FAIL, Verdict.ERROR)


@dataclass(frozen=True)
class Streak:
    verdict: str  # "FAIL" or "ERROR"
    count: int


@dataclass(frozen=True)
class Decision:
    """What this check may do. ``state`` is what to keep for the next check (None: keep the old one unchanged)."""

    may_drain: bool
    confirmed: tuple[str, ...]  # check ids seen bad in at least N consecutive checks
    pending: tuple[tuple[str, int], ...]  # (check id, times seen) not yet confirmed
    settling: bool  # within the settle time after boot: reported, never drained
    state: Optional[dict[str, Any]]
    note: str  # for the one-line output; "" when nothing is held back


def streak_key(finding: Finding) -> str:
    """``check`` or ``check#GPU<n>``: what one streak counts."""
    return finding.check if finding.gpu is None else f"{finding.check}#GPU{finding.gpu}"


def _check_of(key: str) -> str:
    return key.split("#", 1)[0]


def check_verdicts(findings: Sequence[Finding]) -> dict[str, Optional[Verdict]]:
    """Per check id and GPU (:func:`streak_key`): its worst verdict this time, or None when nvdeploy did not look
    (busy, interrupted)."""
    out: dict[str, Optional[Verdict]] = {}
    rank = {Verdict.ERROR: 3, Verdict.FAIL: 2, Verdict.WARN: 1, Verdict.PASS: 0, Verdict.SKIP: 0}
    for f in findings:
        key = streak_key(f)
        if f.verdict is Verdict.ERROR and f.reason in _NOT_LOOKED:
            out.setdefault(key, None)
            continue
        old = out.get(key)
        if old is None or rank.get(f.verdict, 0) > rank.get(old, 0):
            out[key] = f.verdict
    return out


def _streaks(state: Optional[Mapping[str, Any]], node: str, boot_id: str) -> dict[str, Streak]:
    if not isinstance(state, Mapping) or state.get("version") != STATE_VERSION or state.get("node") != node:
        return {}
    if state.get("boot_id") != boot_id:
        return {}
    raw = state.get("streaks")
    out: dict[str, Streak] = {}
    if isinstance(raw, Mapping):
        for check, value in raw.items():
            if (isinstance(check, str) and isinstance(value, Mapping) and value.get("verdict") in ("FAIL", "ERROR")
                    and isinstance(value.get("count"), int) and not isinstance(value.get("count"), bool)
                    and value["count"] > 0):
                out[check] = Streak(value["verdict"], value["count"])
    return out


def decide(state: Optional[Mapping[str, Any]], findings: Sequence[Finding], *, node: str, boot_id: str,
           confirm: int, drain_on_error: bool, uptime_s: Optional[float], settle_s: float,
           now: str) -> Decision:
    """Whether this check may drain, and the state to keep. ``now`` is a timestamp kept for the operator."""
    seen = check_verdicts(findings)
    bad_now = (Verdict.FAIL, Verdict.ERROR) if drain_on_error else (Verdict.FAIL,)
    if settle_s > 0 and uptime_s is not None and uptime_s < settle_s:
        # Counted from after the settle time: what a node shows while it is still coming up does not confirm.
        failing = sorted(c for c, v in seen.items() if v in bad_now)
        note = (f"{'/'.join(sorted({seen[c].value for c in failing}))} within the settle time "  # type: ignore[union-attr]
                f"({uptime_s:.0f} s of {settle_s:g} s since boot): not drained") if failing else ""
        return Decision(False, (), (), True, None, note)
    old = _streaks(state, node, boot_id)
    new: dict[str, Streak] = {}
    looked = {_check_of(k) for k, v in seen.items() if v is not None}
    for check, streak in old.items():
        if seen.get(check) is None and _check_of(check) not in looked:
            new[check] = streak  # the check was not looked at this time
    for check, verdict in seen.items():
        if verdict in _BAD:
            prev = old.get(check)
            count = prev.count + 1 if prev is not None and prev.verdict == verdict.value else 1  # type: ignore[union-attr]
            new[check] = Streak(verdict.value, count)  # type: ignore[union-attr]
    confirmed = tuple(sorted(c for c, s in new.items() if seen.get(c) in bad_now and s.count >= confirm))
    pending = tuple(sorted((c, s.count) for c, s in new.items() if seen.get(c) in bad_now and s.count < confirm))
    note = ""
    if pending and not confirmed:
        least = max(count for _, count in pending)
        verdicts = "/".join(sorted({seen[c].value for c, _ in pending}))  # type: ignore[union-attr]
        note = f"{verdicts} seen {least} of {confirm} times: not drained yet"
    kept = {"version": STATE_VERSION, "node": node, "boot_id": boot_id, "updated": now,
            "streaks": {c: {"verdict": s.verdict, "count": s.count} for c, s in sorted(new.items())}}
    return Decision(bool(confirmed), confirmed, pending, False, kept, note)
