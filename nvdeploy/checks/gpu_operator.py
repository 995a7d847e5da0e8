"""Kubernetes GPU Operator (a cluster-stage check run on the controller by nvdeploy/phases/k8s.py): how the
operator's ClusterPolicy, validator pods and nodes, read with ``kubectl get ... -o json``, are judged (pure)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from nvdeploy.checks.registry import CLUSTER_CHECKS
from nvdeploy.hostrange import fold
from nvdeploy.parsers.k8s import K8sNode, Parsed, parse_cluster_policies, parse_nodes, parse_validator_pods
from nvdeploy.results import CommandResult, ErrorReason, Finding, Remediation, Verdict

POLICY = "gpu_operator.policy"
VALIDATOR = "gpu_operator.validator"
ALLOCATABLE = "gpu_operator.allocatable"
DRIVER = "gpu_operator.driver"
CHECK_IDS = (POLICY, VALIDATOR, ALLOCATABLE, DRIVER)
DEFAULT_NAMESPACE = "gpu-operator"

_COMMON = """Runs only when the inventory sets ``kubeconfig`` (or ``gpu_operator: true``) on some hosts; the
    controller (not the nodes, whatever their ``connection``) runs the operator's own ``kubectl`` (host var
    ``kubectl``, default ``kubectl`` on the PATH) with ``--kubeconfig`` and ``--request-timeout``, each call under a
    hard timeout (``kubectl_timeout``, default 30 s). An inventory host is matched to the Kubernetes node named
    ``k8s_node`` (default: its inventory name, or the node's ``kubernetes.io/hostname`` label). kubectl missing:
    ERROR tool_missing; hung: ERROR timeout (killed); the API server unreachable or refusing: ERROR unreachable;
    output that is not the API's JSON: ERROR unparseable. Never PASS without an answer from the API server."""
CLUSTER_CHECKS[POLICY] = inspect.cleandoc(f"""``kubectl get clusterpolicies.nvidia.com -o json``: PASS when the
    ClusterPolicy's ``status.state`` is ``ready``. FAIL (INVESTIGATE: ``kubectl describe clusterpolicy`` and the
    operator's log name the state that is not ready) on ``notReady`` or any other state; FAIL (REINSTALL) when the
    ClusterPolicy CRD or object is missing (the operator is not installed). {_COMMON}""")
CLUSTER_CHECKS[VALIDATOR] = inspect.cleandoc(f"""``kubectl get pods -n <gpu_operator_namespace, default
    gpu-operator> -l app=nvidia-operator-validator -o json``: every inventory host that is a Kubernetes node has a
    validator pod that is Succeeded, or Running with its containers ready (the validator's init containers check
    the driver, toolkit, CUDA and device plugin). FAIL naming the node (INVESTIGATE: ``kubectl logs -n NS POD
    -c <init container>``) for a pod in Pending/Failed/CrashLoopBackOff, or no pod on the node. {_COMMON}""")
CLUSTER_CHECKS[ALLOCATABLE] = inspect.cleandoc(f"""``kubectl get nodes -o json``: each node's
    ``status.allocatable["nvidia.com/gpu"]`` equals the profile's GPU count. FAIL naming the node (INVESTIGATE: the
    device plugin pod on that node, then the GPUs themselves: a GPU the driver lost is not advertised) when it is
    lower, higher, or not advertised at all. An inventory host that is not a Kubernetes node is SKIP. {_COMMON}""")
CLUSTER_CHECKS[DRIVER] = inspect.cleandoc(f"""The driver the operator deployed: the ClusterPolicy's
    ``spec.driver.version`` (when the operator installs the driver) and each node's driver as GPU feature discovery
    labels it (``nvidia.com/cuda.driver-version.full``, or ``nvidia.com/cuda.driver.major/minor/rev``), against the
    inventory's ``driver_version`` (or the driver the node reported to nvdeploy). FAIL (REINSTALL: set
    ``driver.version`` in the ClusterPolicy, or the inventory) naming the node or the ClusterPolicy that differs;
    SKIP when neither the labels nor an expectation exist. {_COMMON}""")


@dataclass(frozen=True)
class OperatorHost:
    """One inventory host in the scope of a kubeconfig: what it should look like in Kubernetes."""

    name: str
    k8s_name: str
    gpus: Optional[int]
    driver: Optional[str]   # inventory driver_version, else the driver the node reported


@dataclass(frozen=True)
class OperatorOutcome:
    per_node: dict[str, list[Finding]]
    cluster: list[Finding]


def command_error(check: str, result: CommandResult, what: str) -> Optional[Finding]:
    """ERROR (or FAIL: the CRD is missing) when kubectl did not answer with JSON; None when it did."""
    stderr = result.stderr.decode("utf-8", "replace").strip()
    tail = stderr.splitlines()[-1][:300] if stderr else ""
    if result.error is ErrorReason.TOOL_MISSING or result.rc == 127:
        return Finding(check, Verdict.ERROR, f"{what}: kubectl not found ({result.error_detail or tail or 'rc 127'})",
                       reason=ErrorReason.TOOL_MISSING, remediation=Remediation.REINSTALL)
    if result.timed_out or result.error is ErrorReason.TIMEOUT:
        detail = result.error_detail or "timed out"
        return Finding(check, Verdict.ERROR, f"{what}: kubectl did not answer in time ({detail}; killed)",
                       reason=ErrorReason.TIMEOUT, remediation=Remediation.INVESTIGATE)
    if result.error is not None:
        return Finding(check, Verdict.ERROR, f"{what}: {result.error_detail or result.error.value}",
                       reason=result.error)
    if result.rc != 0:
        if "doesn't have a resource type" in stderr or "NotFound" in stderr:
            return Finding(check, Verdict.FAIL, f"{what}: the GPU Operator is not installed ({tail})",
                           remediation=Remediation.REINSTALL)
        return Finding(check, Verdict.ERROR, f"{what}: kubectl exited {result.rc}: {tail or 'no message'}",
                       reason=ErrorReason.UNREACHABLE, remediation=Remediation.INVESTIGATE)
    return None


def _parsed(check: str, result: CommandResult, what: str,
            parse: Callable[[str], Parsed]) -> tuple[Optional[Parsed], Optional[Finding]]:
    error = command_error(check, result, what)
    if error is not None:
        return None, error
    parsed = parse(result.stdout.decode("utf-8", "replace"))
    if not parsed.ok:
        return None, Finding(check, Verdict.ERROR, f"{what}: not the API's JSON ({'; '.join(parsed.warnings)})",
                             reason=ErrorReason.UNPARSEABLE)
    return parsed, None


def _match(host: OperatorHost, nodes: Sequence[K8sNode]) -> Optional[K8sNode]:
    for node in nodes:
        if host.k8s_name in (node.name, node.hostname):
            return node
    short = host.k8s_name.split(".", 1)[0]
    return next((n for n in nodes if n.name.split(".", 1)[0] == short), None)


def _short(version: str) -> str:
    return version.strip()


def evaluate_operator(hosts: Sequence[OperatorHost], policies: CommandResult, pods: CommandResult,
                      nodes: CommandResult, selected: Sequence[str] = CHECK_IDS,
                      evidence: Optional[dict[str, str]] = None) -> OperatorOutcome:
    """The findings of the selected gpu_operator.* checks for the hosts of one kubeconfig."""
    evidence = evidence or {}
    per_node: dict[str, list[Finding]] = {}
    cluster: list[Finding] = []
    names = fold([h.name for h in hosts])

    def node_finding(check: str, host: OperatorHost, verdict: Verdict, summary: str, **kw) -> None:
        per_node.setdefault(host.name, []).append(Finding(check, verdict, summary, node=host.name,
                                                          evidence=evidence.get(check), **kw))

    def add(finding: Finding) -> None:
        cluster.append(Finding(finding.check, finding.verdict, finding.summary, observed=finding.observed,
                               expected=finding.expected, reason=finding.reason,
                               remediation=finding.remediation, evidence=evidence.get(finding.check)))

    policy_list, policy_error = _parsed(POLICY, policies, "ClusterPolicy", parse_cluster_policies)
    if POLICY in selected:
        if policy_error is not None:
            add(policy_error)
        elif not policy_list.items:
            add(Finding(POLICY, Verdict.FAIL, "no ClusterPolicy: the GPU Operator is not deployed",
                        expected="ready", remediation=Remediation.REINSTALL))
        else:
            for policy in policy_list.items:
                if policy.state == "ready":
                    add(Finding(POLICY, Verdict.PASS, f"ClusterPolicy {policy.name} is ready", observed="ready",
                                expected="ready"))
                else:
                    state = policy.state or "not reconciled"
                    add(Finding(POLICY, Verdict.FAIL, f"ClusterPolicy {policy.name} is {state}"
                                " (kubectl describe clusterpolicy and the operator's log name the state not ready)",
                                observed=policy.state, expected="ready", remediation=Remediation.INVESTIGATE))

    node_list, node_error = _parsed(ALLOCATABLE, nodes, "nodes", parse_nodes)
    matched = {h.name: _match(h, node_list.items) for h in hosts} if node_list is not None else {}

    if VALIDATOR in selected:
        pod_list, pod_error = _parsed(VALIDATOR, pods, "validator pods", parse_validator_pods)
        if pod_error is not None:
            add(pod_error)
        elif node_error is not None:
            add(Finding(VALIDATOR, node_error.verdict, f"cannot tell which hosts are Kubernetes nodes: "
                        f"{node_error.summary}", reason=node_error.reason))
        else:
            bad = []
            for host in hosts:
                node = matched.get(host.name)
                if node is None:
                    continue
                on_node = [p for p in pod_list.items if p.node == node.name]
                good = [p for p in on_node if p.phase == "Succeeded" or (p.phase == "Running" and p.ready)]
                if good:
                    node_finding(VALIDATOR, host, Verdict.PASS, f"validator pod {good[0].name} on {node.name} is "
                                 f"{good[0].phase}", observed=good[0].phase)
                    continue
                bad.append(host.name)
                if not on_node:
                    node_finding(VALIDATOR, host, Verdict.FAIL, f"no nvidia-operator-validator pod on node {node.name}",
                                 expected="Running or Succeeded", remediation=Remediation.INVESTIGATE)
                else:
                    pod = on_node[0]
                    why = f" ({pod.reason})" if pod.reason else (" (not ready)" if pod.phase == "Running" else "")
                    node_finding(VALIDATOR, host, Verdict.FAIL, f"validator pod {pod.name} on node {node.name} is "
                                 f"{pod.phase}{why}: kubectl logs -n <ns> {pod.name} --all-containers",
                                 observed=f"{pod.phase}{why}", expected="Running or Succeeded",
                                 remediation=Remediation.INVESTIGATE)
            checked = [h.name for h in hosts if matched.get(h.name) is not None]
            if bad:
                add(Finding(VALIDATOR, Verdict.FAIL, f"operator validation failed on {fold(bad)}",
                            remediation=Remediation.INVESTIGATE))
            elif checked:
                add(Finding(VALIDATOR, Verdict.PASS, f"operator validation passed on {fold(checked)}"))
            else:
                add(Finding(VALIDATOR, Verdict.SKIP, f"none of {names} is a Kubernetes node"))

    if ALLOCATABLE in selected:
        if node_error is not None:
            add(node_error)
        else:
            bad = []
            for host in hosts:
                node = matched.get(host.name)
                if node is None:
                    node_finding(ALLOCATABLE, host, Verdict.SKIP, f"{host.k8s_name} is not a Kubernetes node")
                    continue
                if host.gpus is None:
                    node_finding(ALLOCATABLE, host, Verdict.SKIP, "the profile names no GPU count")
                elif node.allocatable_gpus == host.gpus:
                    node_finding(ALLOCATABLE, host, Verdict.PASS, f"node {node.name}: allocatable nvidia.com/gpu "
                                 f"{node.allocatable_gpus}", observed=node.allocatable_gpus, expected=host.gpus)
                else:
                    bad.append(host.name)
                    seen = "not advertised" if node.allocatable_gpus is None else str(node.allocatable_gpus)
                    node_finding(ALLOCATABLE, host, Verdict.FAIL, f"node {node.name}: allocatable nvidia.com/gpu "
                                 f"{seen}, the profile expects {host.gpus} (check the device plugin pod and the "
                                 "GPUs on that node)", observed=node.allocatable_gpus, expected=host.gpus,
                                 remediation=Remediation.INVESTIGATE)
            checked = [h.name for h in hosts if matched.get(h.name) is not None]
            if bad:
                add(Finding(ALLOCATABLE, Verdict.FAIL, f"allocatable nvidia.com/gpu short of the profile on "
                            f"{fold(bad)}", remediation=Remediation.INVESTIGATE))
            elif checked:
                add(Finding(ALLOCATABLE, Verdict.PASS, f"allocatable nvidia.com/gpu matches the profile on "
                            f"{fold(checked)}"))

    if DRIVER in selected:
        expected = sorted({h.driver for h in hosts if h.driver})
        if policy_list is not None:
            for policy in policy_list.items:
                if not (policy.driver_enabled and policy.driver_version and expected):
                    continue
                if any(_short(policy.driver_version) == e or policy.driver_version.startswith(e + "-")
                       for e in expected):
                    add(Finding(DRIVER, Verdict.PASS, f"ClusterPolicy {policy.name} deploys driver "
                                f"{policy.driver_version}", observed=policy.driver_version, expected=expected[0]))
                else:
                    add(Finding(DRIVER, Verdict.FAIL, f"ClusterPolicy {policy.name} deploys driver "
                                f"{policy.driver_version}, the inventory expects {' or '.join(expected)}",
                                observed=policy.driver_version, expected=" or ".join(expected),
                                remediation=Remediation.REINSTALL))
        if node_error is not None:
            add(Finding(DRIVER, node_error.verdict, f"node labels: {node_error.summary}", reason=node_error.reason))
        else:
            for host in hosts:
                node = matched.get(host.name)
                if node is None or node.driver_version is None or host.driver is None:
                    continue
                if node.driver_version == host.driver:
                    node_finding(DRIVER, host, Verdict.PASS, f"node {node.name} runs driver {node.driver_version}",
                                 observed=node.driver_version, expected=host.driver)
                else:
                    node_finding(DRIVER, host, Verdict.FAIL, f"node {node.name} runs driver {node.driver_version} "
                                 f"(GPU feature discovery label), expected {host.driver}",
                                 observed=node.driver_version, expected=host.driver,
                                 remediation=Remediation.REINSTALL)
        if not any(f.check == DRIVER for f in cluster) and \
                not any(f.check == DRIVER for fs in per_node.values() for f in fs):
            add(Finding(DRIVER, Verdict.SKIP, "no driver version to compare: no ClusterPolicy driver.version or GPU "
                        "feature discovery driver label, or no driver_version in the inventory"))
    return OperatorOutcome(per_node, cluster)
