"""``nvdeploy run``: install, validate, optimize (with its re-validation) in one run folder and one report.

``playbooks/run.yaml`` names the install and optimize playbooks (paths relative to it) and the validate level.
Every plan is rendered before any connection. The gate: when the validation after install is not READY, the run
stops before optimize (the optimize phase is reported ``not_run`` with the reason) unless ``continue_on_fail``,
which tunes the nodes whose install did not fail. Nodes that failed install are not tuned.

``results.json``: ``phase: run``; ``nodes`` and ``cluster_findings`` are the latest validation of each node (after
tuning where it ran), plus the install/optimize steps that failed or did not run, so the verdict and exit code
cover every phase; ``phases`` holds install, validate, optimize (changes before -> after, comparison) and
validate-after in the order they ran. Evidence: ``evidence/<node>/<phase>/``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from nvdeploy.config.inventory import Inventory
from nvdeploy.config.levels import LEVELS
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.config.yamlfile import ConfigError, line_of, load_yaml_file
from nvdeploy.phases.install import PhaseOutcome, open_run, phase_run_result
from nvdeploy.phases.optimize import final_nodes, merge_steps, tune, validate_hosts, validation_phase
from nvdeploy.phases.plan_text import write_plan
from nvdeploy.phases.playbook import Playbook, load_playbook, plan_hosts
from nvdeploy.phases.rollout import PhaseOptions, PhaseRecorder, PhaseResult, run_phase
from nvdeploy.report import write_reports
from nvdeploy.results import ClusterVerdict, NodeResult, cluster_verdict, exit_code_for

_RUN_KEYS = {"name", "version", "description", "install", "validate", "optimize"}


@dataclass(frozen=True)
class RunPlaybook:
    path: str
    install: Playbook
    level: str
    optimize: Playbook


def load_run_playbook(path: Path) -> RunPlaybook:
    file = str(path)
    data = load_yaml_file(path)
    if not isinstance(data, dict):
        raise ConfigError("a run playbook must be a mapping with install, validate and optimize", file, line_of(data))
    for key in data:
        if key not in _RUN_KEYS:
            raise ConfigError(f"unknown top-level key (allowed: {', '.join(sorted(_RUN_KEYS))})", file,
                              line_of(data, key), str(key))
    for key in ("install", "optimize"):
        if not isinstance(data.get(key), str):
            raise ConfigError("must name a playbook file (relative to this one)", file, line_of(data, key) or
                              line_of(data), key)
    validate = data.get("validate")
    if not isinstance(validate, dict) or set(validate) != {"level"} or validate["level"] not in LEVELS:
        raise ConfigError(f"must be {{level: {'|'.join(LEVELS)}}}", file, line_of(data, "validate") or line_of(data),
                          "validate")
    base = Path(file).parent
    return RunPlaybook(file, load_playbook(base / data["install"]), validate["level"],
                       load_playbook(base / data["optimize"]))


def run_all(inventory: Inventory, catalog: ProfileCatalog, options: PhaseOptions, out_base: Path, run_path: Path,
            continue_on_fail: bool = False, progress: Optional[Callable[[NodeResult], None]] = None,
            announce: Optional[Callable[[str], None]] = None,
            finished: Optional[Callable[[Mapping[str, Any], Optional[PhaseResult]], None]] = None) -> PhaseOutcome:
    """install, validate, optimize, validate-after. ``announce``: called with each phase's name as it starts;
    ``finished``: with each phase's results.json entry (and its PhaseResult, for install and optimize) as it
    ends, so that a terminal shows each phase's details under its own heading, in order."""
    chain = load_run_playbook(run_path)
    install_plans = plan_hosts(chain.install, inventory.hosts, catalog, options.tags, options.skip_tags,
                               inventory.every_host)
    optimize_plans = plan_hosts(chain.optimize, inventory.hosts, catalog, options.tags, options.skip_tags)
    say = announce or (lambda _text: None)
    ended = finished or (lambda _entry, _result: None)
    started = time.monotonic()
    recorder, header = open_run(inventory, catalog, out_base, "run",
                                {"playbook": chain.path, "dry_run": options.dry_run, "level": chain.level,
                                 "continue_on_fail": continue_on_fail})
    phases: list[dict[str, Any]] = []
    results: list[PhaseResult] = []
    interrupted: Optional[int] = None
    hosts = list(inventory.hosts)
    try:
        say("install")
        installed = run_phase("install", chain.install, install_plans, hosts, catalog, options,
                              PhaseRecorder(recorder, "install"), progress)
        results.append(installed)
        phases.append(installed.to_dict())
        ended(phases[-1], installed)
        nodes = installed.nodes
        cluster: tuple = ()
        if installed.interrupted:
            interrupted = installed.interrupt_code
        else:
            say("validate")
            validated, cluster, interrupted = validate_hosts(hosts, catalog, options.engine,
                                                             PhaseRecorder(recorder, "validate"), chain.level, progress)
            phases.append(validation_phase("validate", chain.level, validated, cluster))
            ended(phases[-1], None)
            nodes = merge_steps(validated, installed)
            gate = cluster_verdict([n.verdict for n in nodes] + [f.verdict for f in cluster])
            if interrupted is None:
                if gate is not ClusterVerdict.READY and not continue_on_fail:
                    phases.append({"phase": "optimize", "status": "not_run", "summary": "optimize: not run: the "
                                   f"validation after install is {gate.value} (--continue-on-fail tunes anyway)"})
                    ended(phases[-1], None)
                elif not [h for h in hosts if h.name not in installed.failed_nodes]:
                    phases.append({"phase": "optimize", "status": "not_run",
                                   "summary": "optimize: not run: every node failed install"})
                    ended(phases[-1], None)
                else:
                    tunable = [h for h in hosts if h.name not in installed.failed_nodes]
                    say("optimize")
                    tuning, after, after_cluster, interrupted = tune(
                        tunable, catalog, options, recorder, chain.optimize,
                        {h.name: optimize_plans[h.name] for h in tunable},
                        tuple(n for n in validated if n.name in {h.name for h in tunable}), progress)
                    results.append(tuning)
                    phases.append(tuning.to_dict())
                    ended(phases[-1], tuning)
                    if after is not None:
                        say("validate-after")
                        phases.append(validation_phase("validate-after", chain.level, after, after_cluster))
                        ended(phases[-1], None)
                        cluster = after_cluster if len(tunable) == len(hosts) else cluster
                    nodes = merge_steps(merge_steps(final_nodes(validated, after, tuning), installed), tuning)
    finally:
        recorder.close()
    for result in results:
        write_plan(result, recorder.run_dir)
    run = phase_run_result(header, nodes, phases, time.monotonic() - started, level=chain.level,
                           interrupted=interrupted is not None, cluster_findings=tuple(cluster))
    reports = write_reports(run, recorder.run_dir)
    code = exit_code_for(run.outcome, interrupted is not None, interrupted or 130)
    return PhaseOutcome(run, recorder.run_dir, reports, int(code), tuple(results))
