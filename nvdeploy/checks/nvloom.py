"""nvloom.domain's judgement of one ``nvloom_cli`` run over an NVLink domain (run by nvdeploy/phases/nvloom.py).

nvloom states no bandwidth figure a GPU must reach, so the judgement is relative: a row whose figure is well below
the median of the testcase's rows (``RELATIVE_FLOOR_PCT``) has a slow path to the fabric. What a row names depends
on the testcase (nvloom 1.3, cli/testcases.cpp at commit 2e7b742):

- the bisect pattern labels its rows ``i->peer`` (GPU i writes to GPU i + N/2 and, in the row ``peer->i``, back),
  so one weak GPU lowers two rows and names a pair: its partner is healthy. nvloom's README offers bisect as the
  quick pass/fail and the ``gpu-to-rack`` suite for localising, so a low bisect pair is re-tested with
  ``LOCALISE_TESTCASE`` (each GPU against random peers of each rack, the median kept: a GPU with a slow link is
  slow against every peer, a healthy one against most). Only a GPU of the pair that is slow there too is named; a
  pair the re-test clears, or that was not re-tested, is not localised (its trays ERROR, neither FAILs);
- the other testcases label rows with the rank (``0``, ``1``, ...) and name that GPU;
- rack-to-rack rows are racks: a low one names no tray.

A GPU with no measurement (``N/A``) or a testcase nvloom stopped on (``Error running testcase``) FAILs; a run that
did not finish or shows fewer ranks than asked is ERROR, never PASS.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from typing import Optional

from nvdeploy.parsers.nvloom import NvloomProcess, NvloomRun, NvloomTestcase
from nvdeploy.results import ErrorReason, Remediation, Verdict

RELATIVE_FLOOR_PCT = 90.0
# The gpu-to-rack testcase of the same copy as the default bisect one (write, SM copies).
LOCALISE_TESTCASE = "gpu_to_rack_device_to_device_unidir_write_sm"
GET_IT = ("nvloom_cli is not on the launcher tray: build it from github.com/NVIDIA/nvloom (cmake . && make, CUDA "
          "12.8+, MPI) on every tray and set the host var nvloom_dir to its folder")
HINT = ("check that GPU's tray NVLink cabling/cartridges and the switch trays, then reset the tray (NVIDIA GB200 NVL "
        "Multi-Node Tuning Guide)")
_ABSENT = ("command not found", "No such file or directory", "was unable to find the specified executable",
           "not found")
_PAIR = re.compile(r"^(\d+)->(\d+)$")


@dataclass(frozen=True)
class DomainVerdict:
    """One domain-wide tool run's verdict (nvloom.domain, dcgm.mndiag) and the GPUs it names."""

    verdict: Verdict
    summary: str
    # (host, GPU, its figure or None, what is wrong with it) of each GPU named.
    suspects: tuple[tuple[str, int, Optional[float], str], ...] = ()
    reason: Optional[ErrorReason] = None
    remediation: Remediation = Remediation.NONE
    observed: Optional[float] = None
    # The tool is not installed where it runs: a finding of the run, said once, not one ERROR per tray (whose own
    # verdicts stay theirs).
    missing: bool = False
    # (host, GPU, why) of each GPU on a weak path that was not localised to it or to its partner: their trays are
    # not judged (ERROR), the domain's other trays are.
    unresolved: tuple[tuple[str, int, str], ...] = ()


NvloomVerdict = DomainVerdict


def tool_absent(run: NvloomRun, exit_code: Optional[int], text: str) -> bool:
    """Whether the run says nvloom_cli (or mpirun) is not there: exit 127, or mpirun's and the shell's words
    for a missing program, with nothing of nvloom's own output."""
    if run.recognised:
        return False
    return exit_code == 127 or any(word in (text or "") for word in _ABSENT)


def row_ranks(label: str) -> tuple[int, ...]:
    """The ranks a row label names: ``i->peer`` (bisect) both, ``i`` one, a rack GUID none."""
    match = _PAIR.match(label.strip())
    if match:
        return int(match.group(1)), int(match.group(2))
    return (int(label),) if label.strip().isdigit() else ()


def _bisect(testcase: NvloomTestcase) -> bool:
    return testcase.name.startswith("bisect_")


def _localiser(testcase: NvloomTestcase) -> bool:
    return testcase.name.startswith("gpu_to_rack_") and not testcase.waived


@dataclass(frozen=True)
class _Low:
    """One row below the floor (or without a measurement) of one testcase."""

    testcase: str
    label: str
    ranks: tuple[int, ...]
    figure: Optional[float]
    median: Optional[float]


def low_rows(run: NvloomRun, floor_pct: float = RELATIVE_FLOOR_PCT) -> list[_Low]:
    """Every row of the run's testcases below ``floor_pct`` of its testcase's median row, or with no
    measurement (a GPU against itself is N/A in a square matrix and is not one)."""
    found: list[_Low] = []
    for testcase in run.testcases:
        if testcase.waived:
            continue
        rows: dict[str, list[float]] = {}
        for cell in testcase.cells:
            if cell.value is None:
                if cell.row != cell.column and not any(f.label == cell.row and f.testcase == testcase.name
                                                       for f in found):
                    found.append(_Low(testcase.name, cell.row, row_ranks(cell.row), None, None))
                continue
            rows.setdefault(cell.row, []).append(cell.value)
        figures = {row: statistics.median(values) for row, values in rows.items()}
        if len(figures) < 2:
            continue
        median = statistics.median(figures.values())
        found += [_Low(testcase.name, row, row_ranks(row), figure, median) for row, figure in figures.items()
                  if figure < median * floor_pct / 100]
    return found


def needs_localising(run: NvloomRun, floor_pct: float = RELATIVE_FLOOR_PCT) -> bool:
    """Whether a low bisect pair wants the re-test: the run finished its testcases and holds no gpu-to-rack one
    that already localises."""
    if run.errors or any(_localiser(t) for t in run.testcases):
        return False
    names = {t.name for t in run.testcases if _bisect(t)}
    return any(low.testcase in names and len(low.ranks) == 2 for low in low_rows(run, floor_pct))


def _slow_in(localiser: NvloomRun, floor_pct: float) -> dict[tuple[str, int], Optional[float]]:
    """(host, GPU) -> figure of the GPUs a gpu-to-rack testcase finds slow."""
    processes = {p.rank: p for p in localiser.processes}
    names = {t.name for t in localiser.testcases if _localiser(t)}
    slow: dict[tuple[str, int], Optional[float]] = {}
    for low in low_rows(localiser, floor_pct):
        if low.testcase in names and len(low.ranks) == 1 and low.ranks[0] in processes:
            process = processes[low.ranks[0]]
            slow[(process.host, process.device)] = low.figure
    return slow


def _usable(localiser: Optional[NvloomRun], exit_code: Optional[int], expected_ranks: int) -> str:
    """Why a re-test cannot localise ('' when it can)."""
    if localiser is None:
        return "not re-tested"
    if not any(_localiser(t) for t in localiser.testcases):
        return f"the re-test printed no {LOCALISE_TESTCASE} result (exit {exit_code})"
    if localiser.errors:
        return f"the re-test stopped: {localiser.errors[0][1][:200]}"
    if exit_code != 0 or any(not t.done for t in localiser.testcases):
        return f"the re-test did not finish (exit {exit_code})"
    if len(localiser.processes) != expected_ranks:
        return f"the re-test reported {len(localiser.processes)} ranks, {expected_ranks} asked"
    return ""


def _gpu(processes: dict[int, NvloomProcess], label: str, rank: Optional[int] = None) -> tuple[str, int]:
    process = processes.get(rank) if rank is not None else None
    if process is None:
        return label, -1  # a rack, or a rank the run did not list: names no tray
    return process.host, process.device


def _name(host: str, device: int) -> str:
    return f"{host} GPU {device}" if device >= 0 else host


def judge_nvloom(run: NvloomRun, exit_code: Optional[int], expected_ranks: int, where: str,
                 floor_pct: float = RELATIVE_FLOOR_PCT,
                 retest: Optional[tuple[NvloomRun, Optional[int]]] = None,
                 retest_problem: str = "") -> NvloomVerdict:
    """The verdict of one run over ``where`` (the domain's name) that asked for ``expected_ranks`` ranks;
    ``retest`` is the gpu-to-rack run (and its exit status) made over the same ranks after a low bisect pair,
    ``retest_problem`` what kept it from running."""
    processes = {p.rank: p for p in run.processes}
    suspects: list[tuple[str, int, Optional[float], str]] = []
    unresolved: list[tuple[str, int, str]] = []
    bits: list[str] = []
    pairs: list[_Low] = []
    for low in low_rows(run, floor_pct):
        unit = next((t.unit for t in run.testcases if t.name == low.testcase), "") or "GB/s"
        if len(low.ranks) == 2 and any(t.name == low.testcase and _bisect(t) for t in run.testcases):
            pairs.append(low)
            continue
        host, dev = _gpu(processes, low.label, low.ranks[0] if low.ranks else None)
        if low.figure is None:
            what, said = "no measurement", f"{_name(host, dev)}: no measurement in {low.testcase}"
        else:
            what = f"{low.figure:.2f} {unit}, below its peers"
            said = (f"{_name(host, dev)}: {low.figure:.2f} {unit} in {low.testcase} (median {low.median:.2f}, "
                    f"floor {floor_pct:g}%)")
        if not any(s[:2] == (host, dev) for s in suspects):
            suspects.append((host, dev, low.figure, what))
            bits.append(said)
    if pairs:
        localiser, code = retest if retest is not None else (None, None)
        if localiser is None and any(_localiser(t) for t in run.testcases):
            localiser, code = run, exit_code
        why = _usable(localiser, code, expected_ranks) if not retest_problem else retest_problem
        slow = _slow_in(localiser, floor_pct) if localiser is not None and not why else {}
        for low in pairs:
            ends = [_gpu(processes, low.label, rank) for rank in low.ranks]
            figure = "no measurement" if low.figure is None else f"{low.figure:.2f} GB/s"
            culprits = [end for end in ends if end in slow]
            for host, dev in culprits:
                if not any(s[:2] == (host, dev) for s in suspects):
                    partner = next(_name(*e) for e in ends if e != (host, dev)) if len(set(ends)) > 1 else "itself"
                    suspects.append((host, dev, slow[(host, dev)],
                                     f"slow path to the fabric: {figure} in {low.testcase} ({low.label}, with "
                                     f"{partner}), {slow[(host, dev)] or 0:.2f} GB/s in {LOCALISE_TESTCASE}"))
                    bits.append(f"{_name(host, dev)}: {figure} in {low.testcase} ({low.label}) and "
                                f"{slow[(host, dev)] or 0:.2f} GB/s in {LOCALISE_TESTCASE}")
            if culprits:
                continue
            said = why or f"{LOCALISE_TESTCASE} found neither slow"
            pair = " and ".join(_name(*e) for e in ends)
            for host, dev in ends:
                if not any(u[:2] == (host, dev) for u in unresolved):
                    unresolved.append((host, dev, f"{figure} in {low.testcase} ({low.label}): a weak path between "
                                       f"{pair}, not localised to either ({said})"))
            bits.append(f"{pair}: {figure} in {low.testcase} ({low.label}), not localised ({said})")
    if run.errors:
        said = "; ".join(f"{name}: {message}" for name, message in run.errors)
        return NvloomVerdict(Verdict.FAIL, f"nvloom_cli on {where} stopped: {said[:400]}"
                             + (f"; {'; '.join(bits)[:400]}" if bits else ""), tuple(suspects),
                             remediation=Remediation.INVESTIGATE)
    if suspects or unresolved:
        worst = min((s[2] for s in suspects if s[2] is not None), default=None)
        return NvloomVerdict(Verdict.FAIL, f"nvloom_cli on {where}: {'; '.join(bits)[:600]}: {HINT}",
                             tuple(suspects), remediation=Remediation.ISOLATE if suspects else
                             Remediation.INVESTIGATE, observed=worst, unresolved=tuple(unresolved))
    run_cases = [t for t in run.testcases if not t.waived]
    if not run.recognised:
        return NvloomVerdict(Verdict.ERROR, f"nvloom_cli on {where}: output not recognised (exit {exit_code})",
                             reason=ErrorReason.UNPARSEABLE, remediation=Remediation.INVESTIGATE)
    if exit_code != 0 or any(not t.done for t in run.testcases):
        unfinished = [t.name for t in run.testcases if not t.done]
        return NvloomVerdict(Verdict.ERROR, f"nvloom_cli on {where} did not finish (exit {exit_code}"
                             + (f"; {', '.join(unfinished)} without its Done line" if unfinished else "") + ")",
                             reason=ErrorReason.INCOMPLETE, remediation=Remediation.INVESTIGATE)
    if len(run.processes) != expected_ranks:
        return NvloomVerdict(Verdict.ERROR, f"nvloom_cli on {where}: {len(run.processes)} ranks reported, "
                             f"{expected_ranks} asked", reason=ErrorReason.INCOMPLETE,
                             remediation=Remediation.INVESTIGATE)
    if not run_cases:
        return NvloomVerdict(Verdict.ERROR, f"nvloom_cli on {where}: every testcase WAIVED (its requirements, e.g. "
                             "multi-node NVLink memory, not met)", reason=ErrorReason.NOT_RUN,
                             remediation=Remediation.INVESTIGATE)
    figures = [f"{t.name} min {t.stat('Min'):.2f} avg {t.stat('Avg'):.2f} {t.unit}" for t in run_cases
               if t.stat("Min") is not None and t.stat("Avg") is not None]
    low = min((t.stat("Min") for t in run_cases if t.stat("Min") is not None), default=None)
    return NvloomVerdict(Verdict.PASS, f"nvloom_cli on {where}: {len(run.processes)} GPUs, no GPU below "
                         f"{floor_pct:g}% of the median ({'; '.join(figures)[:400]})", observed=low)
