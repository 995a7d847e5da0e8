"""nvloom.domain's judgement of one ``nvloom_cli`` run over an NVLink domain (run by nvdeploy/phases/nvloom.py).

nvloom states no bandwidth figure a GPU must reach, so the judgement is relative: in the testcases run here every
GPU copies at the same time over the same kind of path (the bisect pattern: GPU X with GPU X + N/2), so a GPU whose
figure is well below the median of its peers (``RELATIVE_FLOOR_PCT``) has a slow path to the fabric. A GPU with no
measurement (``N/A``) or a testcase nvloom stopped on (``Error running testcase``) FAILs; a run that did not finish
or shows fewer ranks than asked is ERROR, never PASS.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Optional

from nvdeploy.parsers.nvloom import NvloomProcess, NvloomRun
from nvdeploy.results import ErrorReason, Remediation, Verdict

RELATIVE_FLOOR_PCT = 90.0
GET_IT = ("nvloom_cli is not on the launcher tray: build it from github.com/NVIDIA/nvloom (cmake . && make, CUDA "
          "12.8+, MPI) on every tray and set the host var nvloom_dir to its folder")
HINT = ("check that GPU's tray NVLink cabling/cartridges and the switch trays, then reset the tray (NVIDIA GB200 NVL "
        "Multi-Node Tuning Guide)")
_ABSENT = ("command not found", "No such file or directory", "was unable to find the specified executable",
           "not found")


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


NvloomVerdict = DomainVerdict


def tool_absent(run: NvloomRun, exit_code: Optional[int], text: str) -> bool:
    """Whether the run says nvloom_cli (or mpirun) is not there: exit 127, or mpirun's and the shell's words
    for a missing program, with nothing of nvloom's own output."""
    if run.recognised:
        return False
    return exit_code == 127 or any(word in (text or "") for word in _ABSENT)


def _gpu(processes: dict[int, NvloomProcess], label: str) -> tuple[str, int]:
    try:
        process = processes[int(label)]
    except (ValueError, KeyError):
        return label, -1
    return process.host, process.device


def _name(host: str, device: int) -> str:
    return f"{host} GPU {device}" if device >= 0 else host


def judge_nvloom(run: NvloomRun, exit_code: Optional[int], expected_ranks: int, where: str,
                 floor_pct: float = RELATIVE_FLOOR_PCT) -> NvloomVerdict:
    """The verdict of one run over ``where`` (the domain's name) that asked for ``expected_ranks`` ranks."""
    processes = {p.rank: p for p in run.processes}
    suspects: list[tuple[str, int, Optional[float], str]] = []
    bits: list[str] = []
    for testcase in run.testcases:
        if testcase.waived:
            continue
        rows: dict[str, list[float]] = {}
        for cell in testcase.cells:
            if cell.value is None:
                if cell.row != cell.column:  # a GPU against itself is N/A in a square matrix
                    host, dev = _gpu(processes, cell.row)
                    if (host, dev, None, "no measurement") not in suspects:
                        suspects.append((host, dev, None, "no measurement"))
                        bits.append(f"{_name(host, dev)}: no measurement in {testcase.name}")
                continue
            rows.setdefault(cell.row, []).append(cell.value)
        figures = {row: statistics.median(values) for row, values in rows.items()}
        if len(figures) < 2:
            continue
        median = statistics.median(figures.values())
        for row, figure in figures.items():
            if figure < median * floor_pct / 100:
                host, dev = _gpu(processes, row)
                suspects.append((host, dev, figure, f"{figure:.2f} GB/s, below its peers"))
                bits.append(f"{_name(host, dev)}: {figure:.2f} {testcase.unit or 'GB/s'} in {testcase.name} "
                            f"(median {median:.2f}, floor {floor_pct:g}%)")
    if run.errors:
        said = "; ".join(f"{name}: {message}" for name, message in run.errors)
        return NvloomVerdict(Verdict.FAIL, f"nvloom_cli on {where} stopped: {said[:400]}"
                             + (f"; {'; '.join(bits)[:400]}" if bits else ""), tuple(suspects),
                             remediation=Remediation.INVESTIGATE)
    if suspects:
        worst = min((s[2] for s in suspects if s[2] is not None), default=None)
        return NvloomVerdict(Verdict.FAIL, f"nvloom_cli on {where}: {'; '.join(bits)[:600]}: {HINT}",
                             tuple(suspects), remediation=Remediation.ISOLATE, observed=worst)
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
