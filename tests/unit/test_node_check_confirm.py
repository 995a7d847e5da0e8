"""The anti-flap decision of ``node-check --drain`` (pure) and its state folder rules."""

from __future__ import annotations

import json
import os
from pathlib import Path

from nvdeploy.cli.commands.node_check_state import StateFile, state_dir, unsafe_reason
from nvdeploy.results import ErrorReason, Finding, Verdict
from nvdeploy.slurm.confirm import decide

BOOT = "b0"


def _f(check: str, verdict: Verdict, reason: ErrorReason | None = None) -> Finding:
    return Finding(check, verdict, "x", node="gpu7", reason=reason)


def _run(state, findings, confirm=2, boot=BOOT, uptime=1e6, settle=0.0, on_error=False):
    return decide(state, findings, node="gpu7", boot_id=boot, confirm=confirm, drain_on_error=on_error,
                  uptime_s=uptime, settle_s=settle, now="t")


def test_a_fail_drains_only_when_seen_in_n_consecutive_checks() -> None:
    bad = [_f("nvlink.links", Verdict.FAIL), _f("gpu.count", Verdict.PASS)]
    first = _run(None, bad)
    assert not first.may_drain and first.pending == (("nvlink.links", 1),)
    assert first.note == "FAIL seen 1 of 2 times: not drained yet"
    second = _run(first.state, bad)
    assert second.may_drain and second.confirmed == ("nvlink.links",) and second.note == ""
    third = _run(_run(second.state, bad).state, bad, confirm=4)
    assert third.may_drain and third.state["streaks"]["nvlink.links"]["count"] == 4


def test_a_pass_in_between_starts_the_count_again() -> None:
    bad, good = [_f("nvlink.links", Verdict.FAIL)], [_f("nvlink.links", Verdict.PASS)]
    state = _run(_run(None, bad).state, good).state
    assert state["streaks"] == {}
    assert not _run(state, bad).may_drain


def test_confirm_1_drains_on_first_sight() -> None:
    assert _run(None, [_f("gpu.count", Verdict.FAIL)], confirm=1).may_drain


def test_a_check_not_looked_at_keeps_its_count() -> None:
    """The node lock busy (another run) or an interrupted check says nothing either way."""
    bad = [_f("nvlink.links", Verdict.FAIL)]
    busy = [_f("nvlink.links", Verdict.ERROR, ErrorReason.BUSY)]
    state = _run(_run(None, bad).state, busy).state
    assert state["streaks"]["nvlink.links"] == {"verdict": "FAIL", "count": 1}
    assert _run(state, bad).may_drain
    # Absent altogether: kept too.
    assert _run(_run(None, bad).state, []).state["streaks"]["nvlink.links"]["count"] == 1


def test_error_confirms_only_with_drain_on_error_and_fail_after_error_starts_again() -> None:
    err = [_f("gpu.count", Verdict.ERROR, ErrorReason.TIMEOUT)]
    one = _run(None, err)
    assert not one.may_drain and one.note == ""  # ERROR never drains without --drain-on-error
    assert _run(one.state, err, on_error=True).may_drain
    fail = _run(one.state, [_f("gpu.count", Verdict.FAIL)])
    assert not fail.may_drain and fail.pending == (("gpu.count", 1),)


def test_a_reboot_or_another_node_name_forgets_the_counts() -> None:
    bad = [_f("nvlink.links", Verdict.FAIL)]
    state = _run(None, bad).state
    assert not _run(state, bad, boot="b1").may_drain
    assert not decide(state, bad, node="gpu8", boot_id=BOOT, confirm=2, drain_on_error=False, uptime_s=1e6,
                      settle_s=0, now="t").may_drain
    assert not _run({"version": 1, "node": "gpu7", "boot_id": BOOT, "streaks": {"x": {"count": "2"}}}, bad).may_drain


def test_settle_reports_but_never_drains_and_counts_nothing() -> None:
    bad = [_f("nvlink.links", Verdict.FAIL)]
    early = _run(None, bad, confirm=1, uptime=45, settle=300)
    assert not early.may_drain and early.settling and early.state is None
    assert early.note == "FAIL within the settle time (45 s of 300 s since boot): not drained"
    assert _run(None, bad, confirm=1, uptime=301, settle=300).may_drain
    # No uptime known: the settle time cannot hold a drain back.
    assert _run(None, bad, confirm=1, uptime=None, settle=300).may_drain


def test_state_folder_rules(tmp_path: Path) -> None:
    ok = tmp_path / "lock"
    ok.mkdir(mode=0o700)
    assert unsafe_reason(str(ok)) is None
    open_ = tmp_path / "open"
    open_.mkdir()
    open_.chmod(0o777)
    assert "writable by other users" in (unsafe_reason(str(open_)) or "")
    link = tmp_path / "link"
    link.symlink_to(ok)
    assert "symbolic link" in (unsafe_reason(str(link)) or "")
    assert "goes through .." in (unsafe_reason(f"{ok}/../lock") or "")
    assert unsafe_reason("/tmp") is not None  # never /tmp itself
    folder, why = state_dir({"NVDEPLOY_LOCK_DIR": str(tmp_path / "new")})
    assert folder == tmp_path / "new" and why == "" and (os.stat(folder).st_mode & 0o777) == 0o700
    assert state_dir({"NVDEPLOY_LOCK_DIR": str(link)})[0] is None


def test_state_file_is_atomic_and_never_follows_a_link(tmp_path: Path) -> None:
    with StateFile(tmp_path) as store:
        assert store.read() is None
        store.write({"a": 1})
        assert store.read() == {"a": 1}
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"planted": True}))
    (tmp_path / "node-check.state.json").unlink()
    (tmp_path / "node-check.state.json").symlink_to(target)
    with StateFile(tmp_path) as store:
        assert store.read() is None  # O_NOFOLLOW: a planted link is not read
        store.write({"b": 2})
    assert json.loads(target.read_text()) == {"planted": True}  # nor written through
    assert not (tmp_path / "node-check.state.json").is_symlink()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".node-check.state.")] == []


def test_a_fail_beside_an_error_of_another_gpu_still_drains() -> None:
    """Within one check ERROR outranks FAIL; the streaks are per check and GPU."""
    both = [Finding("dcgm.diag_r2", Verdict.FAIL, "x", node="gpu7", gpu=3),
            Finding("dcgm.diag_r2", Verdict.ERROR, "y", node="gpu7", gpu=7, reason=ErrorReason.NOT_RUN)]
    first = _run(None, both)
    assert not first.may_drain and first.pending == (("dcgm.diag_r2#GPU3", 1),)
    second = _run(first.state, both)
    assert second.may_drain and second.confirmed == ("dcgm.diag_r2#GPU3",)
    # The GPU healthy again, its check judged: its count clears.
    healed = _run(first.state, [Finding("dcgm.diag_r2", Verdict.PASS, "ok", node="gpu7")])
    assert healed.state["streaks"] == {}
