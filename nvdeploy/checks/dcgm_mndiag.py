"""dcgm.mndiag's judgement of one ``dcgmi mndiag --json`` run over an NVLink domain (run by
nvdeploy/phases/mndiag.py). DCGM judges the run itself (mnubergemm's GPU-scoped errors); this reads its verdict:
Pass on every GPU of every host asked is PASS; a GPU with Fail is FAIL on its tray naming DCGM's message; Warn is
WARN; a run DCGM could not complete (runtime_error, an MPI error with no GPU error), Skip/Not Run or hosts missing
is ERROR, never PASS.
"""

from __future__ import annotations

from typing import Optional

from nvdeploy.checks.nvloom import DomainVerdict
from nvdeploy.parsers.dcgm_mndiag import MnDiagRun
from nvdeploy.results import ErrorReason, Remediation, Verdict

GET_IT = ("dcgmi mndiag is not on the launcher tray: it needs DCGM 4.3 or later (datacenter-gpu-manager-4) with "
          "nv-hostengine running on every tray of the domain, Open MPI and mnubergemm (GB200/GB300 NVL only)")
HINT = "drain the tray, run dcgmi diag -r 3 on it and check its NVLink cabling/cartridges (DCGM multi-node diagnostics)"


def mndiag_absent(run: MnDiagRun, exit_code: Optional[int], text: str) -> bool:
    """Whether dcgmi (or its mndiag command) is not there: exit 127 or the shell's words, or dcgmi refusing
    ``mndiag`` as a command it does not know (a DCGM before 4.3). The last is read from words, not a captured
    message: no public capture of an older dcgmi's refusal was found."""
    if run.json_ok:
        return False
    low = (text or "").lower()
    if exit_code == 127 or "command not found" in low or "no such file or directory" in low:
        return True
    return "mndiag" in low and any(w in low for w in ("unknown command", "invalid command", "unsupported",
                                                      "not a valid", "unknown subcommand"))


def judge_mndiag(run: MnDiagRun, exit_code: Optional[int], expected_hosts: int, where: str) -> DomainVerdict:
    if not run.json_ok:
        return DomainVerdict(Verdict.ERROR, f"dcgmi mndiag on {where}: no JSON result (exit {exit_code})",
                             reason=ErrorReason.UNPARSEABLE, remediation=Remediation.INVESTIGATE)
    failed = [(r, "Fail") for t in run.tests for r in t.results if r.status.lower() == "fail"]
    warned = [(r, "Warn") for t in run.tests for r in t.results if r.status.lower() == "warn"]
    if failed:
        suspects = tuple((r.hostname, r.entity_id, None, "; ".join(r.errors)[:200] or "Fail") for r, _ in failed)
        said = "; ".join(f"{r.hostname} GPU {r.entity_id}: {'; '.join(r.errors) or 'Fail'}" for r, _ in failed)
        return DomainVerdict(Verdict.FAIL, f"dcgmi mndiag on {where}: {said[:600]}: {HINT}", suspects,
                             remediation=Remediation.ISOLATE)
    problems = [run.runtime_error] if run.runtime_error else []
    problems += [t.mpi_error for t in run.tests if t.mpi_error]
    problems += [e for e in run.global_errors if e not in problems]
    statuses = {t.status.lower() for t in run.tests}
    if any(t.status.lower() == "fail" for t in run.tests):
        return DomainVerdict(Verdict.FAIL, f"dcgmi mndiag on {where}: Fail, no GPU named"
                             + (f" ({'; '.join(problems)[:400]})" if problems else ""),
                             remediation=Remediation.INVESTIGATE)
    if problems or not run.tests:
        return DomainVerdict(Verdict.ERROR, f"dcgmi mndiag on {where} did not complete: "
                             f"{'; '.join(problems)[:400] or 'no test in the result'}", reason=ErrorReason.INCOMPLETE,
                             remediation=Remediation.INVESTIGATE)
    if statuses - {"pass", "warn"}:
        said = ", ".join(f"{t.name} {t.status}" for t in run.tests)
        return DomainVerdict(Verdict.ERROR, f"dcgmi mndiag on {where}: {said}", reason=ErrorReason.NOT_RUN,
                             remediation=Remediation.INVESTIGATE)
    if len(run.hosts) != expected_hosts or (run.num_hosts is not None and run.num_hosts != expected_hosts):
        return DomainVerdict(Verdict.ERROR, f"dcgmi mndiag on {where}: {len(run.hosts)} hosts in the result, "
                             f"{expected_hosts} asked", reason=ErrorReason.INCOMPLETE,
                             remediation=Remediation.INVESTIGATE)
    gpus = sum(len(t.results) for t in run.tests)
    if warned:
        said = "; ".join(f"{r.hostname} GPU {r.entity_id}: {'; '.join(r.errors) or 'Warn'}" for r, _ in warned)
        return DomainVerdict(Verdict.WARN, f"dcgmi mndiag on {where}: {said[:600]}")
    return DomainVerdict(Verdict.PASS, f"dcgmi mndiag on {where}: {', '.join(t.name for t in run.tests)} Pass on "
                         f"{gpus} GPUs of {len(run.hosts)} hosts")
