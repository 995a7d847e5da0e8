"""The validate phase: plan, fan out over the nodes, evaluate the cluster, record and report."""

from __future__ import annotations

import datetime as dt
import getpass
import secrets
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from nvdeploy import __version__
from nvdeploy.checks.cluster import VERSION_CONSISTENCY
from nvdeploy.checks.firmware_consistency import FACT as FIRMWARE_FACT
from nvdeploy.checks.firmware_consistency import MUST_MATCH_FACT as FIRMWARE_MUST_MATCH
from nvdeploy.checks.fleet import CHECK_ID as FLEET_CHECK
from nvdeploy.checks.fleet import FIGURES as FLEET_FIGURES
from nvdeploy.checks.fleet import fleet_section
from nvdeploy.checks.nvlink_domain import FACT as DOMAIN_FACT
from nvdeploy.checks.power import NODE_CHECK as POWER_NODE_CHECK
from nvdeploy.checks.registry import CLUSTER_CHECKS
from nvdeploy.config.inventory import Host, Inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.report import write_reports
from nvdeploy.results import BRIEF_FACTS as REPORT_FACTS
from nvdeploy.results import ErrorReason, Finding, NodeBrief, NodeResult, RunResult
from nvdeploy.runner.engine import EngineOptions, NodeRunner, run_hosts
from nvdeploy.runner.evaluate import auto_processes, make_evaluator
from nvdeploy.runner.folders import finish_run
from nvdeploy.runner.record import NodeSpool, RunRecorder, read_journal, safe_name

MULTINODE_CHECK = next(iter(c for c in CLUSTER_CHECKS if c == "nccl.multinode"))
GPUDIRECT_CHECK = "rdma.gpudirect"  # nvdeploy/checks/rdma.py, run by nvdeploy/phases/gpudirect.py
GPU_OPERATOR_PREFIX = "gpu_operator."  # nvdeploy/checks/gpu_operator.py, run by nvdeploy/phases/k8s.py
IMEX_DOMAIN_CHECK = "imex.domain"  # nvdeploy/checks/imex.py, run by nvdeploy/phases/imex.py
NCCL_DOMAIN_CHECK = "nccl.domain"  # nvdeploy/checks/registry.py, run by nvdeploy/phases/domain.py
NVLOOM_DOMAIN_CHECK = "nvloom.domain"  # nvdeploy/checks/registry.py, run by nvdeploy/phases/nvloom.py
MNDIAG_CHECK = "dcgm.mndiag"  # nvdeploy/checks/registry.py, run by nvdeploy/phases/mndiag.py


@dataclass(frozen=True)
class ValidateOutcome:
    run: RunResult
    run_dir: Path
    reports: dict[str, Path]
    exit_code: int


def new_run_id() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry in some containers
        return "unknown"


# What a finished node keeps in memory besides its verdict and checks (results.py NodeBrief): the facts the
# cluster checks compare and the reports' node table shows, and the findings the power budget sums.
BRIEF_FACTS = tuple(dict.fromkeys(REPORT_FACTS + tuple(key for key, _check, _what in VERSION_CONSISTENCY)
                                  + tuple(figure.fact for figure in FLEET_FIGURES)))
# nvlink.domain groups the trays by the NVLink domains their GPUs registered with (nvdeploy/checks/nvlink_domain.py).
BRIEF_FACTS = BRIEF_FACTS + (DOMAIN_FACT,)
# firmware.consistency compares each profile's nodes' firmware (nvdeploy/checks/firmware_consistency.py).
BRIEF_FACTS = BRIEF_FACTS + (FIRMWARE_FACT, FIRMWARE_MUST_MATCH)
BRIEF_FINDINGS = (POWER_NODE_CHECK,)


def racks_of(hosts: Sequence[Host]) -> dict[str, list[Any]]:
    """Host -> [rack, rack_power_budget_w] for the hosts with a rack: the power budget must know a rack's nodes
    that gave no power figure."""
    return {h.name: [str(h.vars["rack"]), h.vars.get("rack_power_budget_w")] for h in hosts if h.vars.get("rack")}


def brief_of(node: NodeResult) -> NodeBrief:
    return NodeBrief.of(node, BRIEF_FACTS, BRIEF_FINDINGS)


def run_validate(inventory: Inventory, catalog: ProfileCatalog, options: EngineOptions, out_base: Path,
                 fail_on_warn: bool = False, level: str = "quick",
                 progress: Optional[Callable[[NodeResult], None]] = None,
                 run_id: Optional[str] = None) -> ValidateOutcome:
    # A caller may pick the id first (the Slurm maintenance reservation is named after the run).
    run_id = run_id or new_run_id()
    run_dir = out_base / safe_name(inventory.cluster) / run_id
    recorder = RunRecorder(run_dir)
    profiles = {name: catalog.get(name).stamp for name in sorted({h.profile for h in inventory.hosts if h.profile})}
    header = {"type": "run", "run_id": run_id, "cluster": inventory.cluster, "phase": "validate", "level": level,
              "started_at": _now(), "profiles": profiles, "nvdeploy_version": __version__,
              "inventory": inventory.path, "user": _user(), "hosts": [h.name for h in inventory.hosts],
              "fail_on_warn": fail_on_warn, "checks": list(options.checks), "racks": racks_of(inventory.hosts)}
    if options.only_checks:
        header["only_checks"] = True  # validate --check: the cluster stage runs only what was chosen
    if options.waivers:
        header["waivers"] = [w.to_dict() for w in options.waivers]
    if options.burn_in_s is not None:
        # validate --burn-in: a resumed run burns its remaining nodes in for as long as the first ones.
        header["burn_in"] = {"seconds": options.burn_in_s, "interval_s": options.burn_in_interval_s}
    if FLEET_CHECK in options.checks:
        # Each profile's fleet rule, kept with the run so that a resumed or rebuilt run judges its figures alike.
        header["fleet"] = {catalog.get(name).stamp: fleet_section(catalog.get(name)) for name in profiles}
        if options.fleet_baseline:
            header["fleet_baseline"] = options.fleet_baseline
    recorder.journal(header)
    return _execute(header, list(inventory.hosts), [], recorder, catalog, options, fail_on_warn, progress,
                    list(inventory.hosts))


def _execute(header: dict, todo: list[Host], kept: list[NodeResult], recorder: RunRecorder,
             catalog: ProfileCatalog, options: EngineOptions, fail_on_warn: bool,
             progress: Optional[Callable[[NodeResult], None]], all_hosts: list[Host]) -> ValidateOutcome:
    from nvdeploy.config.waivers import Waiver, run_date
    from nvdeploy.results import exit_code_for

    # The waivers from the run's header, judged on the day it started: a resumed run's nodes get the same DCGM
    # --ignoreErrorCodes as its first ones, and a waiver that lapsed since still holds for it.
    options = replace(options, waivers=tuple(Waiver.from_dict(w) for w in header.get("waivers") or ()),
                      waiver_date=run_date(header.get("started_at")))
    started = time.monotonic()
    deadline_at = started + options.deadline_s if options.deadline_s else None
    processes = auto_processes(len(todo)) if options.eval_processes is None else options.eval_processes
    evaluator = make_evaluator(processes)
    runner = NodeRunner(catalog, options, recorder, deadline_at, evaluator)
    # Each finished node goes to the journal and the spool, and is dropped: memory does not grow with the fleet.
    spool = NodeSpool(recorder.run_dir, brief_of)
    for node in kept:
        spool.add(node)
    del kept

    def on_result(node: NodeResult) -> None:
        recorder.node_done(node)
        spool.add(node)
        if progress is not None:
            progress(node)

    extra_cluster: list[Finding] = []
    if options.progress is not None:
        options.progress.begin(len(todo))
    try:
        try:
            unfinished, interrupt = run_hosts(todo, runner, options.forks, on_result, keep=False)
        finally:
            evaluator.close()
            broken = getattr(evaluator, "broken", None)
            if broken:  # every verdict stands (those nodes were evaluated here instead): said, not hidden
                print(f"nvdeploy: the evaluation worker processes failed ({broken}); the nodes after that were "
                      "evaluated in the run's own process", file=sys.stderr)
        for node in unfinished.values():  # never started (interrupt): not journaled, so --resume runs them
            spool.add(node)
        if interrupt is None:
            for stage in _cluster_stages(all_hosts, catalog, options, recorder, deadline_at):
                extra_cluster = extra_cluster + _run_stage(stage, spool, options, recorder)
    finally:
        if options.progress is not None:
            options.progress.end()  # the status line is gone before anything else is printed
        recorder.close()
    # The stages' cluster findings go in before the waivers are applied: those their node findings stand behind.
    run = finish_run(header, spool, list(header.get("hosts", [])), interrupt is not None,
                     time.monotonic() - started, fail_on_warn, extra_cluster)
    reports = write_reports(run, recorder.run_dir)
    code = exit_code_for(run.outcome, interrupt is not None, interrupt.exit_code if interrupt else 130)
    return ValidateOutcome(run, recorder.run_dir, reports, int(code))


@dataclass(frozen=True)
class _ClusterStage:
    """A stage after the nodes (multi-node nccl-tests, GPUDirect pairs, the GPU Operator): it may add findings to
    nodes, which are then journaled again, and returns cluster findings."""

    label: str
    run: Callable[[list[NodeResult]], tuple[list[NodeResult], list[Finding]]]


def _cluster_stages(all_hosts: list[Host], catalog: ProfileCatalog, options: EngineOptions, recorder: RunRecorder,
                    deadline_at: Optional[float]) -> list[_ClusterStage]:
    """The cluster stages the selected checks need, in order; none starts a round after the global deadline."""
    stages = []
    if MULTINODE_CHECK in options.checks:
        from nvdeploy.phases.multinode import run_multinode

        stages.append(_ClusterStage("multi-node nccl-tests", lambda nodes: run_multinode(
            nodes, all_hosts, catalog, options, recorder, options.multinode_pattern, deadline_at)))
    if NCCL_DOMAIN_CHECK in options.checks:
        from nvdeploy.phases.domain import run_domains

        stages.append(_ClusterStage("NVLink domains (nccl-tests over multi-node NVLink)", lambda nodes: run_domains(
            nodes, all_hosts, catalog, options, recorder, deadline_at)))
    if GPUDIRECT_CHECK in options.checks:
        from nvdeploy.phases.gpudirect import run_gpudirect

        stages.append(_ClusterStage("GPUDirect RDMA (perftest pairs)", lambda nodes: run_gpudirect(
            nodes, all_hosts, catalog, options, recorder, deadline_at)))
    if IMEX_DOMAIN_CHECK in options.checks:
        from nvdeploy.phases.imex import run_imex_domain
        from nvdeploy.phases.imex import wanted as imex_wanted

        # Only where some host runs IMEX (NVLink domain trays, host var imex): nothing is planned on HGX clusters.
        if imex_wanted(all_hosts, catalog):
            stages.append(_ClusterStage("IMEX domains (nvidia-imex-ctl -N -j)", lambda nodes: run_imex_domain(
                nodes, all_hosts, catalog, options, recorder, deadline_at)))
    if any(c.startswith(GPU_OPERATOR_PREFIX) for c in options.checks):
        from nvdeploy.phases.k8s import run_gpu_operator, wanted

        # kubectl runs on the controller, only for hosts with a kubeconfig: nothing to do without one.
        if any(wanted(h) for h in all_hosts):
            stages.append(_ClusterStage("Kubernetes GPU Operator (kubectl)", lambda nodes: run_gpu_operator(
                nodes, all_hosts, catalog, recorder, options.checks, deadline_at)))
    # Last: their verdicts (an ERROR not_run where a tool is absent, as on most trays) must not keep a tray out
    # of the stages above, which run only over trays without an ERROR.
    if NVLOOM_DOMAIN_CHECK in options.checks:
        from nvdeploy.phases.nvloom import run_nvloom

        stages.append(_ClusterStage("NVLink domains (nvloom_cli)", lambda nodes: run_nvloom(
            nodes, all_hosts, catalog, options, recorder, deadline_at)))
    if MNDIAG_CHECK in options.checks:
        from nvdeploy.phases.mndiag import run_mndiag

        stages.append(_ClusterStage("NVLink domains (dcgmi mndiag)", lambda nodes: run_mndiag(
            nodes, all_hosts, catalog, options, recorder, deadline_at)))
    return stages


def _run_stage(stage: _ClusterStage, spool: NodeSpool, options: EngineOptions,
               recorder: RunRecorder) -> list[Finding]:
    """Run one cluster stage over the spooled nodes; the nodes it changed are journaled and spooled again.

    A stage reads every node's full result (a stage's run time dwarfs it), so they are held while it runs."""
    if options.progress is not None:
        options.progress.stage(f"cluster stage: {stage.label}")
    nodes = list(spool.nodes())
    before = {n.name: n for n in nodes}
    updated, cluster = stage.run(nodes)
    del nodes
    for node in updated:
        if node is not before.get(node.name):
            recorder.node_done(node)
            spool.add(node)
    return list(cluster)


@dataclass(frozen=True)
class ResumePlan:
    """What ``validate --resume RUN_DIR`` will do: the run's header, the nodes it keeps and those it checks."""

    run_dir: Path
    header: dict
    kept: tuple[NodeResult, ...]
    todo: tuple[Host, ...]
    hosts: tuple[Host, ...]

    @property
    def level(self) -> str:
        return str(self.header.get("level", "quick"))


def plan_resume(run_dir: Path, inventory: Inventory) -> ResumePlan:
    """Read an interrupted run's journal: the nodes with a finished result are kept, the others are to check.

    Raises:
        FileNotFoundError: no journal, or one without a run header.
        ValueError: the inventory no longer lists some node of the run.
    """
    journal = run_dir / "results.jsonl"
    if not journal.is_file():
        raise FileNotFoundError(f"{journal} not found: nothing to resume")
    header, nodes, _ = read_journal(journal)
    if header is None:
        raise FileNotFoundError(f"{journal} has no run header")
    wanted = list(header.get("hosts", []))
    by_name = {h.name: h for h in inventory.hosts}
    missing = [name for name in wanted if name not in by_name]
    if missing:
        raise ValueError(f"the inventory no longer lists {', '.join(missing[:5])} of the run being resumed")
    kept = [n for n in nodes if n.name in wanted and not n.interrupted]
    done = {n.name for n in kept}
    todo = [by_name[name] for name in wanted if name not in done]
    return ResumePlan(run_dir, header, tuple(kept), tuple(todo), tuple(by_name[name] for name in wanted))


def resume_validate(run_dir: Path, inventory: Inventory, catalog: ProfileCatalog, options: EngineOptions,
                    progress: Optional[Callable[[NodeResult], None]] = None,
                    plan: Optional[ResumePlan] = None) -> ValidateOutcome:
    """``validate --resume RUN_DIR``: check only the nodes of that run without a finished result, then write the
    complete reports of the run (same run id, same folder)."""
    plan = plan if plan is not None else plan_resume(run_dir, inventory)
    header = plan.header
    recorder = RunRecorder(run_dir, append=True)
    recorder.journal({"type": "resume", "at": _now(), "nodes": [h.name for h in plan.todo]})
    if header.get("checks"):
        options = replace(options, checks=tuple(header["checks"]))
    burn_in = header.get("burn_in")
    if isinstance(burn_in, dict) and isinstance(burn_in.get("seconds"), (int, float)):
        interval = burn_in.get("interval_s")
        options = replace(options, burn_in_s=float(burn_in["seconds"]),
                          burn_in_interval_s=float(interval) if isinstance(interval, (int, float)) else None)
    return _execute(header, list(plan.todo), list(plan.kept), recorder, catalog, options,
                    bool(header.get("fail_on_warn")), progress, list(plan.hosts))


def rebuild_reports(run_dir: Path) -> ValidateOutcome:
    """``nvdeploy report RUN_DIR``: re-render from results.json, or from results.jsonl after a crash."""
    import json

    from nvdeploy.results import exit_code_for

    final = run_dir / "results.json"
    journal = run_dir / "results.jsonl"
    if final.is_file():
        run = RunResult.from_dict(json.loads(final.read_text(encoding="utf-8")))
    elif journal.is_file():
        header, nodes, _ = read_journal(journal)
        if header is None:
            raise FileNotFoundError(f"{journal} has no run header")
        hosts = list(header.get("hosts", []))
        done = {n.name for n in nodes}
        missing = [h for h in hosts if h not in done]
        from nvdeploy.runner.engine import error_node

        nodes += [error_node(Host(name, {}), "system.reachable", "no result recorded: the run ended before this "
                             "node finished", ErrorReason.INTERRUPTED) for name in missing]
        run = finish_run(header, nodes, hosts, bool(missing), 0.0, bool(header.get("fail_on_warn")))
    else:
        raise FileNotFoundError(f"neither results.json nor results.jsonl in {run_dir}")
    reports = write_reports(run, run_dir)
    return ValidateOutcome(run, run_dir, reports, int(exit_code_for(run.outcome)))
