"""dcgm.mndiag: DCGM's multi-node diagnostic (``dcgmi mndiag``, DCGM 4.3+, GB200/GB300 NVL) across each NVLink domain.

Cluster stage at level full, for profiles with ``nvlink_domain``. The domains are nccl.domain's
(``phases/domain.group_domains``); per domain one ``dcgmi mndiag --hostList '<tray>;<tray>;...' --json`` on its
first healthy tray (the head node: its host engine reaches the others' and launches mnubergemm through MPI), host
list from the inventory's addresses (validated there; one argv word, no shell), ``--parameters`` from the host var
``mndiag_parameters``. The domains run in parallel. Timeout: host var ``mndiag_timeout`` (900 s) and the global
deadline. dcgmi or its mndiag absent: ERROR not_run on the domain's trays saying how to get it, never PASS.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Optional, Sequence

from nvdeploy.checks.dcgm_mndiag import GET_IT, judge_mndiag, mndiag_absent
from nvdeploy.checks.nvloom import DomainVerdict
from nvdeploy.collect.stage_limits import MNDIAG_TIMEOUT_S as DEFAULT_TIMEOUT_S
from nvdeploy.config.inventory import Host
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.parsers.dcgm_mndiag import parse_mndiag
from nvdeploy.phases.domain import Domain
from nvdeploy.phases.multinode import DEADLINE_TEXT, round_timeouts
from nvdeploy.phases.nvloom import run_per_domain
from nvdeploy.results import ErrorReason, Finding, NodeResult, Remediation, Verdict
from nvdeploy.runner.engine import EngineOptions, make_transport
from nvdeploy.runner.record import RunRecorder
from nvdeploy.transport.base import CommandSpec, TransportError

CHECK_ID = "dcgm.mndiag"


def mndiag_argv(group: Sequence[Host], launcher: Host) -> tuple[str, ...]:
    argv = ["dcgmi", "mndiag", "--hostList", ";".join(h.address for h in group)]
    wanted = launcher.get("mndiag_parameters") or ()
    for parameter in [wanted] if isinstance(wanted, str) else wanted:
        if str(parameter) and not str(parameter).startswith("-"):
            argv += ["--parameters", str(parameter)]
    return (*argv, "--json")


def _run_one(domain: Domain, index: int, hosts: Sequence[Host], catalog: ProfileCatalog, options: EngineOptions,
             recorder: RunRecorder, deadline_at: Optional[float]) -> tuple[DomainVerdict, Optional[str]]:
    by_name = {h.name: h for h in hosts}
    group = [by_name[t] for t in domain.trays]
    launcher = group[0]
    remaining = None if deadline_at is None else deadline_at - time.monotonic()
    timeouts = round_timeouts(float(launcher.get("mndiag_timeout", DEFAULT_TIMEOUT_S)), remaining)
    if timeouts is None:
        return DomainVerdict(Verdict.ERROR, f"dcgmi mndiag on {domain.name} not run: {DEADLINE_TEXT}",
                             reason=ErrorReason.NOT_RUN), None
    spec = CommandSpec("dcgm_mndiag", mndiag_argv(group, launcher), timeouts[1])
    transport = make_transport(launcher, catalog, options, peers=list(hosts))
    try:
        transport.connect()
        result = transport.run_batch([spec], remaining)[0]
    except TransportError as exc:
        return DomainVerdict(Verdict.ERROR, f"dcgmi mndiag on {domain.name} not run: launcher {launcher.name} "
                             f"unreachable: {exc.detail}", reason=exc.reason), None
    finally:
        transport.close()
    evidence = recorder.write_evidence("_cluster", [replace(result, name=f"dcgm_mndiag_{index:02d}")])[0].path
    if result.error is not None or result.timed_out:
        return DomainVerdict(Verdict.ERROR, f"dcgmi mndiag on {domain.name} did not finish: "
                             f"{result.error_detail or 'timed out'}", reason=result.error or ErrorReason.TIMEOUT,
                             remediation=Remediation.INVESTIGATE), evidence
    text = result.text + "\n" + result.err_text
    run = parse_mndiag(result.text)
    if mndiag_absent(run, result.rc, text):
        return DomainVerdict(Verdict.ERROR, f"dcgmi mndiag not run on {domain.name}: {GET_IT}",
                             reason=ErrorReason.NOT_RUN, missing=True), evidence
    return judge_mndiag(run, result.rc, len(group), domain.name), evidence


def run_mndiag(nodes: Sequence[NodeResult], hosts: Sequence[Host], catalog: ProfileCatalog, options: EngineOptions,
               recorder: RunRecorder, deadline_at: Optional[float] = None
               ) -> tuple[list[NodeResult], list[Finding]]:
    return run_per_domain(CHECK_ID, "dcgmi mndiag", _run_one, nodes, hosts, catalog, options, recorder, deadline_at)
