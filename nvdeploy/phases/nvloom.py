"""nvloom.domain: NVIDIA's nvloom (``nvloom_cli``) across each multi-node NVLink domain (NVL72 rack).

Cluster stage at level full, for profiles with ``nvlink_domain``. The domains are nccl.domain's
(``phases/domain.group_domains``: the trays whose GPUs registered with one clusterUuid + cliqueId, only those that
passed their own checks); per domain one mpirun from its first tray over its trays, one rank per GPU (nvloom
assumes one process per GPU), of ``nvloom_cli -t <testcases>`` (host var ``nvloom_testcases``, default the
bisect write over SM copies, which NVIDIA's README recommends to test a fabric quickly: every GPU writes at once,
about 3 s on 72 GPUs). The domains run in parallel. Timeout: host var ``nvloom_timeout`` (300 s) and the global
deadline, as nccl.domain's rounds. A low bisect row names a pair of GPUs (GPU X writes to X + N/2, and back), so
before a tray is named the domain is run once more with nvloom's localising testcase (``LOCALISE_TESTCASE``, the
gpu-to-rack pattern: each GPU against random peers, the median kept): a GPU of the pair slow there too is named,
its partner is not, and a pair it clears is not localised (ERROR on its two trays, never FAIL). nvloom_cli absent
(exit 127, mpirun cannot find it): one ERROR not_run of the run saying how to get it, never PASS.
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from dataclasses import replace
from typing import Callable, Optional, Sequence

from nvdeploy.checks.nvloom import (
    GET_IT,
    LOCALISE_TESTCASE,
    NvloomVerdict,
    judge_nvloom,
    needs_localising,
    tool_absent,
)
from nvdeploy.collect.stage_limits import NVLOOM_TIMEOUT_S as DEFAULT_TIMEOUT_S
from nvdeploy.config.hostrange import fold
from nvdeploy.config.inventory import Host
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.parsers.nvloom import NvloomRun, parse_nvloom
from nvdeploy.phases.domain import FABRIC_FACT, Domain, group_domains
from nvdeploy.phases.multinode import DEADLINE_TEXT, round_timeouts
from nvdeploy.results import ErrorReason, Finding, NodeResult, Remediation, Verdict
from nvdeploy.runner.engine import EngineOptions, make_transport
from nvdeploy.runner.record import RunRecorder
from nvdeploy.slurm.srun import pool_of
from nvdeploy.transport.base import CommandSpec, TransportError

CHECK_ID = "nvloom.domain"
DEFAULT_TESTCASES = ("bisect_device_to_device_write_sm",)
DOMAIN_TOOL_CHECKS = frozenset({CHECK_ID, "dcgm.mndiag"})


def nvloom_argv(group: Sequence[Host], ranks_per_node: int, launcher: Host, timeout_s: float,
                testcases: Sequence[str] = ()) -> tuple[str, ...]:
    """mpirun over the domain's trays (addresses from the inventory, validated there) of nvloom_cli; the
    testcase names (``testcases``, else the launcher's vars) as separate argv words, never through a shell."""
    hosts = ",".join(f"{h.address}:{ranks_per_node}" for h in group)
    argv = ["mpirun", "--timeout", str(int(timeout_s)), "--bind-to", "none", "-np",
            str(ranks_per_node * len(group)), "-H", hosts]
    if launcher.get("ssh_user") == "root":
        argv.insert(1, "--allow-run-as-root")
    folder = str(launcher.get("nvloom_dir") or "").rstrip("/")
    program = f"{folder}/nvloom_cli" if folder else "nvloom_cli"
    wanted = list(testcases) or launcher.get("nvloom_testcases") or DEFAULT_TESTCASES
    testcases = [str(t) for t in ([wanted] if isinstance(wanted, str) else wanted) if str(t) and
                 not str(t).startswith("-")]
    return (*argv, program, "-t", *(testcases or DEFAULT_TESTCASES))


def _mpirun(name: str, argv: tuple[str, ...], timeout_s: float, hosts: Sequence[Host],
            launcher: Host, catalog: ProfileCatalog, options: EngineOptions, recorder: RunRecorder,
            remaining: Optional[float]) -> tuple[Optional[str], Optional[tuple[str, Optional[int]]], str,
                                                 Optional[ErrorReason]]:
    """One mpirun from the launcher: (evidence path, (stdout + stderr, exit status) or None, why not, and the
    ERROR reason)."""
    transport = make_transport(launcher, catalog, options, peers=list(hosts))
    try:
        transport.connect()
        result = transport.run_batch([CommandSpec("nvloom", argv, timeout_s)], remaining)[0]
    except TransportError as exc:
        return None, None, f"not run: launcher {launcher.name} unreachable: {exc.detail}", exc.reason
    finally:
        transport.close()
    evidence = recorder.write_evidence("_cluster", [replace(result, name=name)])[0].path
    if result.error is not None or result.timed_out:
        return evidence, None, f"did not finish: {result.error_detail or 'timed out'}", \
            result.error or ErrorReason.TIMEOUT
    # nvloom's results go to stdout, its 'Error running testcase' and mpirun's own errors to stderr.
    return evidence, (result.text + "\n" + result.err_text, result.rc), "", None


def _run_one(domain: Domain, index: int, hosts: Sequence[Host], catalog: ProfileCatalog, options: EngineOptions,
             recorder: RunRecorder, deadline_at: Optional[float]) -> tuple[NvloomVerdict, Optional[str]]:
    by_name = {h.name: h for h in hosts}
    group = [by_name[t] for t in domain.trays]
    launcher = group[0]
    profile = catalog.get(launcher.profile or "")
    ranks = int(launcher.get("nccl_ranks_per_node") or profile.gpu.count)
    remaining = None if deadline_at is None else deadline_at - time.monotonic()
    timeouts = round_timeouts(float(launcher.get("nvloom_timeout", DEFAULT_TIMEOUT_S)), remaining)
    if timeouts is None:
        return NvloomVerdict(Verdict.ERROR, f"nvloom_cli on {domain.name} not run: {DEADLINE_TEXT}",
                             reason=ErrorReason.NOT_RUN), None
    if pool_of(launcher) is not None:
        return NvloomVerdict(Verdict.ERROR, f"nvloom_cli on {domain.name} not run: it runs by mpirun over SSH, "
                             "not through --via slurm", reason=ErrorReason.NOT_RUN), None
    mpirun_timeout, command_timeout = timeouts
    argv = nvloom_argv(group, ranks, launcher, mpirun_timeout)
    evidence, done, why, reason = _mpirun(f"nvloom_{index:02d}", argv, command_timeout, hosts, launcher,
                                          catalog, options, recorder, remaining)
    if done is None:
        return NvloomVerdict(Verdict.ERROR, f"nvloom_cli on {domain.name} {why}", reason=reason,
                             remediation=Remediation.INVESTIGATE if evidence else Remediation.NONE), evidence
    text, rc = done
    run = parse_nvloom(text)
    if tool_absent(run, rc, text):
        return NvloomVerdict(Verdict.ERROR, f"nvloom_cli not run on {domain.name}: {GET_IT}",
                             reason=ErrorReason.NOT_RUN, missing=True), evidence
    retest: Optional[tuple[NvloomRun, Optional[int]]] = None
    problem = ""
    if rc == 0 and needs_localising(run):
        # A low bisect row is a pair (X writes to X + N/2 and back): re-test before naming either tray.
        remaining = None if deadline_at is None else deadline_at - time.monotonic()
        again = round_timeouts(float(launcher.get("nvloom_timeout", DEFAULT_TIMEOUT_S)), remaining)
        if again is None:
            problem = f"re-test not run: {DEADLINE_TEXT}"
        else:
            _, redone, why, _ = _mpirun(f"nvloom_{index:02d}_localise",
                                        nvloom_argv(group, ranks, launcher, again[0], (LOCALISE_TESTCASE,)),
                                        again[1], hosts, launcher, catalog, options, recorder, remaining)
            if redone is None:
                problem = f"re-test {why}"
            else:
                retest = (parse_nvloom(redone[0]), redone[1])
    return judge_nvloom(run, rc, ranks * len(group), domain.name, retest=retest, retest_problem=problem), evidence


RunOne = Callable[[Domain, int, Sequence[Host], ProfileCatalog, EngineOptions, RunRecorder, Optional[float]],
                  tuple[NvloomVerdict, Optional[str]]]


def run_nvloom(nodes: Sequence[NodeResult], hosts: Sequence[Host], catalog: ProfileCatalog, options: EngineOptions,
               recorder: RunRecorder, deadline_at: Optional[float] = None
               ) -> tuple[list[NodeResult], list[Finding]]:
    """Run nvloom.domain; the nodes with their new findings and the cluster findings (none without a profile
    with an NVLink domain)."""
    return run_per_domain(CHECK_ID, "nvloom_cli", _run_one, nodes, hosts, catalog, options, recorder, deadline_at)


def _tray_of(host: str, members: Sequence[Host]) -> Optional[str]:
    # The tool names the host as the node calls itself: the inventory name, its address or a short name.
    return next((h.name for h in members if host in (h.name, h.address) or host.split(".")[0] == h.name), None)


def run_per_domain(check_id: str, tool: str, run_one: RunOne, nodes: Sequence[NodeResult], hosts: Sequence[Host],
                   catalog: ProfileCatalog, options: EngineOptions, recorder: RunRecorder,
                   deadline_at: Optional[float] = None) -> tuple[list[NodeResult], list[Finding]]:
    """One ``run_one`` per NVLink domain of two trays or more (in parallel), its verdict on the domain and on
    each of its trays: the GPUs it names FAIL on their tray, the GPUs of a weak path it could not localise are
    ERROR on theirs, the others PASS; a FAIL that names no GPU is ERROR (not localised) on every tray, an ERROR is
    that ERROR on every tray (a tool absent: one finding of the run instead)."""
    if not any(h.profile and catalog.get(h.profile).nvlink_domain is not None for h in hosts):
        return list(nodes), []
    # One domain-wide tool's verdict (nvloom absent: ERROR on every tray) keeps no tray out of the other's run.
    view = [replace(n, findings=tuple(f for f in n.findings if f.check not in DOMAIN_TOOL_CHECKS)) for n in nodes]
    domains = group_domains(view, hosts, catalog)
    if not domains:
        why = (f"no tray carries fabric facts: run {check_id} with nvlink.fabric (both are in level full)"
               if not any(FABRIC_FACT in n.facts for n in nodes) else "no tray registered with the fabric")
        return list(nodes), [Finding(check_id, Verdict.SKIP, f"no NVLink domain to run: {why}")]
    runnable = [(i, d) for i, d in enumerate(domains) if len(d.trays) >= 2]
    with cf.ThreadPoolExecutor(max_workers=max(1, min(len(runnable) or 1, options.forks))) as pool:
        verdicts = dict(zip([i for i, _ in runnable], pool.map(
            lambda pair: run_one(pair[1], pair[0], hosts, catalog, options, recorder, deadline_at), runnable)))
    profile_of = {h.name: catalog.get(h.profile or "") for h in hosts}
    cluster: list[Finding] = []
    extra: dict[str, list[Finding]] = {}
    missing = [(domains[i], verdicts[i]) for i in sorted(verdicts) if verdicts[i][0].missing]
    if missing:
        # Not installed: one finding for the run naming what to install, and no ERROR on the trays, whose own
        # checks say what they say (36 healthy trays all ERROR hid the real faults in the FAIL/ERROR line).
        (first, (verdict, evidence)) = missing[0]
        what = verdict.summary.split(": ", 1)[-1]
        cluster.append(Finding(check_id, Verdict.ERROR, f"{tool} not run on {', '.join(d.name for d, _ in missing)}"
                               f" ({sum(len(d.trays) for d, _ in missing)} trays, not judged by it): {what}",
                               reason=ErrorReason.NOT_RUN, remediation=Remediation.INVESTIGATE, evidence=evidence,
                               profile=profile_of[(first.trays + first.left_out)[0]].stamp))
    for index, domain in enumerate(domains):
        stamp = profile_of[(domain.trays + domain.left_out)[0]].stamp
        if index not in verdicts:
            cluster.append(Finding(check_id, Verdict.SKIP, f"{domain.name}: {len(domain.trays)} healthy tray(s), "
                                   "no multi-node NVLink run", profile=stamp))
            continue
        verdict, evidence = verdicts[index]
        if verdict.missing:
            continue
        said = f" [{fold(domain.left_out)} left out (failed their own checks)]" if domain.left_out else ""
        cluster.append(Finding(check_id, verdict.verdict, verdict.summary + said, observed=verdict.observed,
                               unit="GB/s" if verdict.observed is not None else "", reason=verdict.reason,
                               remediation=verdict.remediation, evidence=evidence, profile=stamp))
        named: dict[str, list[tuple[int, Optional[float], str]]] = {}
        doubtful: dict[str, list[tuple[int, str]]] = {}
        unplaced: list[str] = []
        members = [h for h in hosts if h.name in domain.trays]
        for host, device, figure, what in verdict.suspects:
            tray = _tray_of(host, members)
            if tray is None:
                unplaced.append(host)
            else:
                named.setdefault(tray, []).append((device, figure, what))
        for host, device, what in verdict.unresolved:
            tray = _tray_of(host, members)
            if tray is None:
                unplaced.append(host)
            else:
                doubtful.setdefault(tray, []).append((device, what))
        # The others PASS only when the failure is localised to GPUs placed on trays (named, or on a weak path of
        # two named GPUs the re-test could not split): a run the tool stopped, or one naming a host the inventory
        # does not know, leaves them not localised (never PASS).
        localised = (verdict.remediation is Remediation.ISOLATE or bool(verdict.unresolved)) and not unplaced
        for tray in domain.trays:
            if tray in doubtful and tray not in named:
                for device, what in doubtful[tray]:
                    extra.setdefault(tray, []).append(Finding(
                        check_id, Verdict.ERROR, f"{domain.name}: {tool}: GPU {device}: {what}", node=tray,
                        gpu=device if device >= 0 else None, reason=ErrorReason.INCOMPLETE,
                        remediation=Remediation.INVESTIGATE, evidence=evidence, profile=stamp))
            elif tray in named:
                for device, figure, what in named[tray]:
                    extra.setdefault(tray, []).append(Finding(
                        check_id, Verdict.FAIL, f"{domain.name}: {tool}: GPU {device}: {what}: "
                        "check this tray's NVLink cabling/cartridges and the switch trays, then reset the tray",
                        node=tray, gpu=device if device >= 0 else None, observed=figure,
                        unit="GB/s" if figure is not None else "",
                        remediation=Remediation.ISOLATE, evidence=evidence, profile=stamp))
            elif verdict.verdict is Verdict.FAIL and not localised:
                said = f"; it names {', '.join(sorted(set(unplaced)))[:200]}, not in the inventory" if unplaced else ""
                extra.setdefault(tray, []).append(Finding(
                    check_id, Verdict.ERROR, f"{domain.name}: {tool} failed with this tray taking part, not "
                    f"localised to a tray{said} ({verdict.summary[:200]})", node=tray, reason=ErrorReason.INCOMPLETE,
                    remediation=Remediation.INVESTIGATE, evidence=evidence, profile=stamp))
            else:
                plain = Verdict.PASS if verdict.verdict is Verdict.FAIL else verdict.verdict
                extra.setdefault(tray, []).append(Finding(
                    check_id, plain, f"{domain.name}: {verdict.summary[:300]}" if plain is not Verdict.PASS
                    else f"{domain.name}: {tool}: this tray's GPUs passed", node=tray,
                    reason=verdict.reason if plain is Verdict.ERROR else None,
                    remediation=verdict.remediation if plain is Verdict.ERROR else Remediation.NONE,
                    evidence=evidence, profile=stamp))
    updated = [n.with_findings(extra[n.name]) if n.name in extra else n for n in nodes]
    return updated, cluster
