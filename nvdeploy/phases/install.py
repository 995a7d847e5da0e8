"""The install phase: ``playbooks/install.yaml`` on every node, in rolling batches; one run folder and report.

Plans are rendered for every host before any connection (a playbook or template problem is exit 2). The run folder
is the validate phase's: ``results.jsonl`` (a ``phase`` record, one ``step`` record per node and step as it ends,
then the node), ``results.json`` (``phase: install``, one finding ``install.<step>`` per node and step, and a
``phases`` section with every step's status, changes before -> after and commands), ``report.html``,
``junit.xml``, ``install-plan.txt`` and ``evidence/<node>/install/``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from nvdeploy import __version__
from nvdeploy.config.inventory import Inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.plan_text import write_plan
from nvdeploy.phases.playbook import Playbook, load_playbook, plan_hosts
from nvdeploy.phases.rollout import PhaseOptions, PhaseRecorder, PhaseResult, run_phase
from nvdeploy.phases.validate import _now, _user, new_run_id
from nvdeploy.report import write_reports
from nvdeploy.results import NodeResult, RunResult, exit_code_for
from nvdeploy.runner.record import RunRecorder, safe_name


@dataclass(frozen=True)
class PhaseOutcome:
    run: RunResult
    run_dir: Path
    reports: dict[str, Path]
    exit_code: int
    phases: tuple[PhaseResult, ...] = ()


def open_run(inventory: Inventory, catalog: ProfileCatalog, out_base: Path, phase: str,
             extra: dict[str, Any]) -> tuple[RunRecorder, dict[str, Any]]:
    run_id = new_run_id()
    recorder = RunRecorder(out_base / safe_name(inventory.cluster) / run_id)
    profiles = {name: catalog.get(name).stamp for name in sorted({h.profile for h in inventory.hosts if h.profile})}
    header = {"type": "run", "run_id": run_id, "cluster": inventory.cluster, "phase": phase, "started_at": _now(),
              "profiles": profiles, "nvdeploy_version": __version__, "inventory": inventory.path, "user": _user(),
              "hosts": [h.name for h in inventory.hosts], **extra}
    recorder.journal(header)
    return recorder, header


def phase_run_result(header: dict[str, Any], nodes: tuple[NodeResult, ...], phases: Sequence[dict[str, Any]],
                     duration_s: float, level: str = "-", interrupted: bool = False,
                     cluster_findings: tuple = ()) -> RunResult:
    """The run's RunResult: the nodes (their latest findings) and the ``phases`` section, in the order run."""
    data = [dict(p) for p in phases]
    return RunResult(run_id=header["run_id"], cluster=header["cluster"], phase=header["phase"], nodes=nodes,
                     cluster_findings=cluster_findings, started_at=header["started_at"], finished_at=_now(),
                     duration_s=duration_s, level=level, profiles=header["profiles"], interrupted=interrupted,
                     nvdeploy_version=__version__, inventory=header["inventory"], user=header["user"],
                     phases=tuple(data), plan=bool(header.get("dry_run")))


def run_playbook_phase(phase: str, inventory: Inventory, catalog: ProfileCatalog, options: PhaseOptions,
                       out_base: Path, playbook: Playbook,
                       progress: Optional[Callable[[NodeResult], None]] = None) -> PhaseOutcome:
    """Plan (exit 2 on a problem, before connecting), run the phase, write the run folder and reports."""
    plans = plan_hosts(playbook, inventory.hosts, catalog, options.tags, options.skip_tags, inventory.every_host)
    started = time.monotonic()
    recorder, header = open_run(inventory, catalog, out_base, phase,
                                {"playbook": playbook.path, "dry_run": options.dry_run, "serial": options.serial,
                                 "max_fail_percent": options.max_fail_percent})
    try:
        result = run_phase(phase, playbook, plans, inventory.hosts, catalog, options, PhaseRecorder(recorder, phase),
                           progress)
    finally:
        recorder.close()
    write_plan(result, recorder.run_dir)
    run = phase_run_result(header, result.nodes, [result.to_dict()], time.monotonic() - started,
                           interrupted=result.interrupted)
    reports = write_reports(run, recorder.run_dir)
    code = exit_code_for(run.outcome, result.interrupted, result.interrupt_code)
    return PhaseOutcome(run, recorder.run_dir, reports, int(code), (result,))


def run_install(inventory: Inventory, catalog: ProfileCatalog, options: PhaseOptions, out_base: Path,
                playbook_path: Path, progress: Optional[Callable[[NodeResult], None]] = None) -> PhaseOutcome:
    return run_playbook_phase("install", inventory, catalog, options, out_base, load_playbook(playbook_path), progress)
