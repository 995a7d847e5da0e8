"""The cluster stage of the gpu_operator.* checks: ``kubectl get ... -o json`` run on the controller.

Hosts are grouped by (kubectl, kubeconfig, namespace): one cluster's API objects are read once, whatever the
hosts' ``connection``. kubectl runs as an argv list (no shell), with ``--request-timeout`` and a hard timeout that
kills its process group; its raw output is kept as evidence under ``evidence/_cluster/``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import replace
from typing import Callable, Optional, Sequence

from nvdeploy.checks import gpu_operator as op
from nvdeploy.config.inventory import Host
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.parsers.k8s import Parsed, parse_cluster_policies, parse_nodes, parse_nvidia_drivers, parse_validator_pods
from nvdeploy.results import CommandResult, ErrorReason, Finding, NodeResult

DEFAULT_TIMEOUT_S = 30.0
MAX_OUTPUT = 64 * 1024 * 1024


def wanted(host: Host) -> bool:
    return bool(host.get("kubeconfig")) or host.get("gpu_operator") is True


def kubectl(argv: Sequence[str], name: str, timeout_s: float) -> CommandResult:
    """Run one kubectl call; missing binary, hang and non-zero exit are data, never an exception."""
    display = " ".join(argv)
    started = time.monotonic()
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        return CommandResult(name=name, command=display, rc=127, error=ErrorReason.TOOL_MISSING,
                             error_detail=f"{argv[0]}: {exc.strerror or exc}")
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # kubectl may have children (exec credential plugins)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        return CommandResult(name=name, command=display, rc=None, stdout=out[:MAX_OUTPUT], stderr=err[:MAX_OUTPUT],
                             duration_s=time.monotonic() - started, timed_out=True, error=ErrorReason.TIMEOUT,
                             error_detail=f"no answer within {timeout_s:g} s")
    return CommandResult(name=name, command=display, rc=proc.returncode, stdout=out[:MAX_OUTPUT],
                         stderr=err[:MAX_OUTPUT], duration_s=time.monotonic() - started,
                         truncated=len(out) > MAX_OUTPUT, stdout_total=len(out), stderr_total=len(err))


def _base(host: Host, timeout_s: float) -> list[str]:
    argv = [str(host.get("kubectl") or "kubectl")]
    if host.get("kubeconfig"):
        argv += ["--kubeconfig", str(host.get("kubeconfig"))]
    return argv + [f"--request-timeout={max(1, int(timeout_s))}s"]


def _expected(host: Host, catalog: ProfileCatalog, node: Optional[NodeResult]) -> op.OperatorHost:
    try:
        gpus: Optional[int] = catalog.get(host.profile or "").gpu.count
    except Exception:  # noqa: BLE001 - an unknown profile was reported by the node's own checks already
        gpus = None
    driver = host.get("driver_version") or (node.facts.get("driver_version") if node is not None else None)
    return op.OperatorHost(host.name, str(host.get("k8s_node") or host.name), gpus, str(driver) if driver else None)


def run_gpu_operator(nodes: Sequence[NodeResult], hosts: Sequence[Host], catalog: ProfileCatalog, recorder,
                     checks: Sequence[str], deadline_at: Optional[float] = None
                     ) -> tuple[list[NodeResult], list[Finding]]:
    """Each kubeconfig's hosts: three kubectl calls (four with the NVIDIADriver list), then the selected
    gpu_operator.* findings."""
    selected = [c for c in op.CHECK_IDS if c in checks]
    scoped = [h for h in hosts if wanted(h)]
    if not selected or not scoped:
        return list(nodes), []
    by_name = {n.name: n for n in nodes}
    groups: dict[tuple[str, str, str], list[Host]] = {}
    for host in scoped:
        key = (str(host.get("kubectl") or "kubectl"), str(host.get("kubeconfig") or ""),
               str(host.get("gpu_operator_namespace") or op.DEFAULT_NAMESPACE))
        groups.setdefault(key, []).append(host)
    per_node: dict[str, list[Finding]] = {}
    cluster: list[Finding] = []
    for index, ((_, _, namespace), members) in enumerate(groups.items(), 1):
        first = members[0]
        timeout = float(first.get("kubectl_timeout", DEFAULT_TIMEOUT_S))
        calls = {op.POLICY: ("clusterpolicies", ["get", "clusterpolicies.nvidia.com", "-o", "json"]),
                 op.VALIDATOR: ("validator_pods", ["get", "pods", "-n", namespace, "-l",
                                                   "app=nvidia-operator-validator", "-o", "json"]),
                 op.ALLOCATABLE: ("nodes", ["get", "nodes", "-o", "json"])}
        results: dict[str, CommandResult] = {}
        evidence: dict[str, str] = {}
        for check, (label, args) in calls.items():
            remaining = None if deadline_at is None else deadline_at - time.monotonic()
            name = f"kubectl_{index:02d}_{label}"
            if remaining is not None and remaining <= 1:
                results[check] = CommandResult(name=name, command="kubectl " + " ".join(args), rc=None,
                                               error=ErrorReason.NOT_RUN,
                                               error_detail="not started: the global --deadline passed")
                continue
            budget = timeout if remaining is None else min(timeout, remaining)
            results[check] = kubectl(_base(first, budget) + args, name, budget)
            if recorder is not None:
                evidence[check] = recorder.write_evidence("_cluster", [replace(results[check], name=name)])[0].path
        evidence[op.DRIVER] = evidence.get(op.ALLOCATABLE, "")
        # NVIDIADriver objects (GPU Operator v23.9+), only once the API server has answered: a cluster that did not
        # answer is reported by the calls above, and must not cost another timeout.
        drivers: Optional[CommandResult] = None
        policy = results[op.POLICY]
        remaining = None if deadline_at is None else deadline_at - time.monotonic()
        if op.DRIVER in selected and policy.error is None and policy.rc == 0 and (remaining is None or remaining > 1):
            budget = timeout if remaining is None else min(timeout, remaining)
            name = f"kubectl_{index:02d}_nvidiadrivers"
            drivers = kubectl(_base(first, budget) + ["get", "nvidiadrivers.nvidia.com", "-o", "json"], name, budget)
            if recorder is not None:
                evidence[op.DRIVERS_EVIDENCE] = recorder.write_evidence("_cluster",
                                                                     [replace(drivers, name=name)])[0].path
        expected = [_expected(h, catalog, by_name.get(h.name)) for h in members]
        outcome = evaluate_results(expected, results[op.POLICY], results[op.VALIDATOR], results[op.ALLOCATABLE],
                                   selected, evidence, drivers)
        cluster += outcome.cluster
        for name, findings in outcome.per_node.items():
            per_node.setdefault(name, []).extend(findings)
    updated = [n.with_findings(per_node[n.name]) if n.name in per_node else n for n in nodes]
    return updated, cluster


def answer(result: CommandResult, parse: Callable[[str], Parsed]) -> op.KubectlAnswer:
    """A kubectl call and its JSON, parsed here (the parse stage) when it answered with exit 0."""
    ok = result.error is None and result.rc == 0
    return op.KubectlAnswer(result, parse(result.stdout.decode("utf-8", "replace")) if ok else None)


def evaluate_results(hosts: Sequence[op.OperatorHost], policies: CommandResult, pods: CommandResult,
                     nodes: CommandResult, selected: Sequence[str] = op.CHECK_IDS,
                     evidence: Optional[dict[str, str]] = None,
                     drivers: Optional[CommandResult] = None) -> op.OperatorOutcome:
    """The gpu_operator.* findings from kubectl's raw answers: each parsed, then judged (checks/gpu_operator.py)."""
    return op.evaluate_operator(hosts, answer(policies, parse_cluster_policies), answer(pods, parse_validator_pods),
                                answer(nodes, parse_nodes), selected, evidence,
                                None if drivers is None else answer(drivers, parse_nvidia_drivers))
