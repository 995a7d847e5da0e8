"""``nvdeploy parse --verdicts`` for the NVLink domain tools' outputs: ``dcgmi mndiag --json``, ``nvloom_cli`` and
``nvidia-imex-ctl`` (-q, -N, -N -j). None of them is a node collector's output (the cluster stages run them over a
domain), so validate's node evaluation does not apply; each is judged as its stage judges one run, against what
the paste itself shows (the hosts it lists, the ranks it reports), and says what a paste cannot show.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from nvdeploy.checks.dcgm_mndiag import judge_mndiag
from nvdeploy.checks.imex import DAEMON_CHECK, DOMAIN_CHECK, Tray, judge_domain
from nvdeploy.checks.nvloom import DomainVerdict, judge_nvloom
from nvdeploy.parsers.imex import READY
from nvdeploy.results import ErrorReason, Finding, Remediation, Verdict

FORMATS = ("dcgmi-mndiag", "nvloom", "nvidia-imex-ctl")


def _domain(check_id: str, verdict: DomainVerdict, profile: Any, label: str) -> list[Finding]:
    """The run's finding, and one per GPU it names (FAIL) or cannot place on one GPU of a weak pair (ERROR)."""
    stamp = profile.stamp
    out = [Finding(check_id, verdict.verdict, verdict.summary, node=label, observed=verdict.observed,
                   unit="GB/s" if verdict.observed is not None else "", reason=verdict.reason,
                   remediation=verdict.remediation, profile=stamp)]
    for host, gpu, figure, what in verdict.suspects:
        out.append(Finding(check_id, Verdict.FAIL, f"{host} GPU {gpu}: {what}" if gpu >= 0 else f"{host}: {what}",
                           node=host, gpu=gpu if gpu >= 0 else None, observed=figure,
                           unit="GB/s" if figure is not None else "", remediation=Remediation.ISOLATE, profile=stamp))
    for host, gpu, what in verdict.unresolved:
        out.append(Finding(check_id, Verdict.ERROR, f"{host} GPU {gpu}: {what}", node=host,
                           gpu=gpu if gpu >= 0 else None, reason=ErrorReason.INCOMPLETE,
                           remediation=Remediation.INVESTIGATE, profile=stamp))
    return out


def judge_pasted(fmt: str, parsed: Any, profile: Any, label: str) -> list[Finding]:
    """The findings of one pasted domain-tool output (``fmt`` one of FORMATS)."""
    where = f"pasted {label}"
    if fmt == "dcgmi-mndiag":
        # The hosts asked are not in a paste: the result's own count stands for them.
        hosts = parsed.num_hosts if parsed.num_hosts else len(parsed.hosts)
        return _domain("dcgm.mndiag", judge_mndiag(parsed, None, hosts, where), profile, label)
    if fmt == "nvloom":
        # No exit status in a paste: each testcase's Done line says whether it finished.
        return _domain("nvloom.domain", judge_nvloom(parsed, 0, len(parsed.processes), where), profile, label)
    if parsed.view is not None:
        trays = [Tray(n.host, n.host) for n in parsed.view.nodes]
        per_tray, cluster = judge_domain(label, trays, parsed.view, f"the pasted nvidia-imex-ctl {parsed.form}")
        out = [f for found in per_tray.values() for f in found]
        for finding in cluster:
            if finding.verdict is Verdict.PASS:
                # What a paste cannot show: the inventory's trays, and every tray's node list hash.
                finding = Finding(DOMAIN_CHECK, Verdict.PASS, f"IMEX domain ({where}): {parsed.view.status}, "
                                  f"{len(parsed.view.nodes)} nodes READY and connected (the inventory's trays and "
                                  "their nodes_config.cfg hashes are not in the pasted text)",
                                  observed=finding.observed)
            out.append(replace(finding, node=finding.node or label, profile=profile.stamp))
        return out
    if parsed.state is not None:
        if parsed.state == READY:
            return [Finding(DAEMON_CHECK, Verdict.SKIP, "the IMEX daemon answered READY; its service and channel0 "
                            "are not in the pasted text", node=label, observed=READY, profile=profile.stamp)]
        return [Finding(DAEMON_CHECK, Verdict.FAIL, f"the IMEX daemon is {parsed.state}, not READY: it serves no "
                        "import or export until every tray of its domain is connected (nvidia-imex-ctl -N; journalctl "
                        "-u nvidia-imex)", node=label, observed=parsed.state, expected=READY,
                        remediation=Remediation.INVESTIGATE, profile=profile.stamp)]
    return [Finding(DAEMON_CHECK, Verdict.ERROR, f"{where}: no nvidia-imex-ctl answer in it", node=label,
                    reason=ErrorReason.UNPARSEABLE, profile=profile.stamp)]
