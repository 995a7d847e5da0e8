"""Kubernetes GPU Operator (a cluster-stage check run on the controller by nvdeploy/phases/k8s.py): how the
operator's ClusterPolicy, validator pods and nodes, read with ``kubectl get ... -o json``, are judged (pure)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Optional, Sequence

from nvdeploy.checks.registry import CLUSTER_CHECKS
from nvdeploy.config.hostrange import fold
from nvdeploy.parsers.k8s import K8sNode, NvidiaDriver, Parsed
from nvdeploy.results import CommandResult, ErrorReason, Finding, Remediation, Verdict

POLICY = "gpu_operator.policy"
VALIDATOR = "gpu_operator.validator"
ALLOCATABLE = "gpu_operator.allocatable"
DRIVER = "gpu_operator.driver"
CHECK_IDS = (POLICY, VALIDATOR, ALLOCATABLE, DRIVER)
DEFAULT_NAMESPACE = "gpu-operator"
# The evidence key of the NVIDIADriver list (its findings are gpu_operator.driver's, their evidence this file).
DRIVERS_EVIDENCE = "nvidiadrivers"

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
    lower, higher, or not advertised at all. MIG (GPU feature discovery's label ``nvidia.com/mig.strategy``):
    under ``mixed`` the device plugin advertises each MIG profile as ``nvidia.com/mig-<profile>`` and only the GPUs
    not in MIG mode as ``nvidia.com/gpu``, so the node PASSes when GFD's ``nvidia.com/gpu.count`` (physical GPUs)
    equals the profile, something is allocatable, and no fewer MIG devices are allocatable than GFD's
    ``nvidia.com/mig-<profile>.count`` labels count (WARN when no ``gpu.count`` label lets the GPUs be counted);
    under ``single`` (``nvidia.com/gpu.product`` ending ``-MIG-<profile>``) ``nvidia.com/gpu`` counts MIG devices:
    PASS when it equals ``nvidia.com/gpu.count`` and is at least the profile's GPU count. FAIL when
    ``nvidia.com/mig.config.state`` is ``failed`` (MIG manager could not apply the layout). An inventory host that
    is not a Kubernetes node is SKIP. {_COMMON}""")
CLUSTER_CHECKS[DRIVER] = inspect.cleandoc(f"""The driver the operator deployed: the ClusterPolicy's
    ``spec.driver.version`` (when the operator installs the driver and ``spec.driver.useNvidiaDriverCRD`` is not
    set), every NVIDIADriver custom resource (``kubectl get nvidiadrivers.nvidia.com -o json``, nvidia.com/v1alpha1,
    GPU Operator v23.9+; read only when the API server answered for the ClusterPolicy, and its absence, an operator
    without the CRD, is not a finding), and each node's driver as GPU feature discovery labels it
    (``nvidia.com/cuda.driver-version.full``, or ``nvidia.com/cuda.driver.major/minor/rev``), against the
    inventory's ``driver_version`` (or the driver the node reported to nvdeploy). An NVIDIADriver is compared with
    the hosts its ``spec.nodeSelector`` picks (all when empty); a precompiled one names a branch (``580``), which
    matches any 580.x. FAIL (REINSTALL: set ``driver.version`` in the ClusterPolicy, ``spec.version`` of the
    NVIDIADriver, or the inventory) naming the node, ClusterPolicy or NVIDIADriver that differs; FAIL
    (INVESTIGATE: ``kubectl describe nvidiadriver NAME`` and its driver pods) for an NVIDIADriver whose
    ``status.state`` is not ``ready``; ERROR when the NVIDIADriver list could not be read. SKIP when neither the
    labels nor an expectation exist. {_COMMON}""")


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


@dataclass(frozen=True)
class KubectlAnswer:
    """One kubectl call of the cluster stage: its result (for why it failed) and its JSON as the parse stage read
    it (nvdeploy/phases/k8s.py); ``parsed`` is None when the call did not answer with exit 0."""

    result: CommandResult
    parsed: Optional[Parsed] = None


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


def _parsed(check: str, answer: KubectlAnswer, what: str) -> tuple[Optional[Parsed], Optional[Finding]]:
    error = command_error(check, answer.result, what)
    if error is not None:
        return None, error
    parsed = answer.parsed
    if parsed is None or not parsed.ok:
        warnings = "; ".join(parsed.warnings) if parsed is not None else "not parsed"
        return None, Finding(check, Verdict.ERROR, f"{what}: not the API's JSON ({warnings})",
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


@dataclass(frozen=True)
class Allocation:
    verdict: Verdict
    summary: str
    observed: object
    remediation: Remediation = Remediation.NONE


def judge_allocatable(expected: int, node: K8sNode) -> Allocation:
    """One node's advertised GPUs against the profile's count, MIG strategies included (see the check's text)."""
    full = node.allocatable_gpus
    if node.mig_config_state == "failed":
        return Allocation(Verdict.FAIL, f"node {node.name}: MIG manager failed to apply the node's MIG layout "
                          "(label nvidia.com/mig.config.state=failed; kubectl logs -n <ns> -l app=nvidia-mig-manager)",
                          "mig.config.state=failed", Remediation.INVESTIGATE)
    if node.mig_devices and node.mig_strategy != "single":
        profiles = ", ".join(f"{name} {count}" for name, count in node.mig_devices)
        advertised = (full or 0) + node.mig_total
        physical = node.gpu_count_label
        labelled = sum(count for _, count in node.mig_count_labels)
        observed = {"gpus": full or 0, "mig": dict(node.mig_devices), "gpu_count_label": physical}
        what = (f"node {node.name}: MIG mixed strategy, allocatable nvidia.com/gpu {full or 0} and {profiles}"
                + (f" on {physical} GPUs (label nvidia.com/gpu.count)" if physical is not None else ""))
        problems = []
        if advertised == 0:
            problems.append("nothing allocatable")
        if physical is not None and physical != expected:
            problems.append(f"the profile expects {expected} GPUs")
        if (full or 0) > expected:
            problems.append(f"more whole GPUs than the profile's {expected}")
        if node.mig_count_labels and node.mig_total < labelled:
            problems.append(f"{node.mig_total} MIG devices allocatable of the {labelled} GPU feature discovery "
                            "counts (nvidia.com/mig-<profile>.count)")
        if problems:
            return Allocation(Verdict.FAIL, f"{what}: {'; '.join(problems)} (check the device plugin pod and the "
                              "GPUs on that node)", observed, Remediation.INVESTIGATE)
        if physical is None:
            return Allocation(Verdict.WARN, f"{what}: the physical GPUs cannot be counted against the profile's "
                              f"{expected} (no nvidia.com/gpu.count label: is GPU feature discovery running?)",
                              observed, Remediation.MONITOR)
        return Allocation(Verdict.PASS, what, observed)
    if node.mig_strategy == "single" and node.product and "-MIG-" in node.product:
        label = node.gpu_count_label
        what = (f"node {node.name}: MIG single strategy, allocatable nvidia.com/gpu "
                f"{'not advertised' if full is None else full} MIG devices ({node.product})")
        if full is None or full < expected or (label is not None and full != label):
            why = (f"GPU feature discovery counts {label}" if label is not None and full != label
                   else f"fewer than the profile's {expected} GPUs")
            return Allocation(Verdict.FAIL, f"{what}: {why} (check the device plugin pod and the MIG layout on that "
                              "node)", full, Remediation.INVESTIGATE)
        return Allocation(Verdict.PASS, what, full)
    if full == expected:
        return Allocation(Verdict.PASS, f"node {node.name}: allocatable nvidia.com/gpu {full}", full)
    seen = "not advertised" if full is None else str(full)
    return Allocation(Verdict.FAIL, f"node {node.name}: allocatable nvidia.com/gpu {seen}, the profile expects "
                      f"{expected} (check the device plugin pod and the GPUs on that node)", full,
                      Remediation.INVESTIGATE)


def _driver_matches(declared: str, expected: str, precompiled: bool = False) -> bool:
    """``550.90.07`` vs ``550.90.07`` (or a distro suffix ``550.90.07-1``); a precompiled NVIDIADriver names only
    the branch (``580``), which every 580.x matches."""
    declared = _short(declared)
    return declared == expected or declared.startswith(expected + "-") or \
        ((precompiled or "." not in declared) and expected.startswith(declared + "."))


def _missing_crd(result: CommandResult) -> bool:
    stderr = result.stderr.decode("utf-8", "replace")
    return result.error is None and result.rc not in (0, None) and "doesn't have a resource type" in stderr


def evaluate_operator(hosts: Sequence[OperatorHost], policies: KubectlAnswer, pods: KubectlAnswer,
                      nodes: KubectlAnswer, selected: Sequence[str] = CHECK_IDS,
                      evidence: Optional[dict[str, str]] = None,
                      drivers: Optional[KubectlAnswer] = None) -> OperatorOutcome:
    """The findings of the selected gpu_operator.* checks for the hosts of one kubeconfig (``drivers``: the
    NVIDIADriver list, None when it was not read)."""
    evidence = evidence or {}
    per_node: dict[str, list[Finding]] = {}
    cluster: list[Finding] = []
    names = fold([h.name for h in hosts])

    def node_finding(check: str, host: OperatorHost, verdict: Verdict, summary: str, **kw) -> None:
        per_node.setdefault(host.name, []).append(Finding(check, verdict, summary, node=host.name,
                                                          evidence=evidence.get(check), **kw))

    def add(finding: Finding, evidence_key: Optional[str] = None) -> None:
        cluster.append(Finding(finding.check, finding.verdict, finding.summary, observed=finding.observed,
                               expected=finding.expected, reason=finding.reason, remediation=finding.remediation,
                               evidence=evidence.get(evidence_key or finding.check)))

    policy_list, policy_error = _parsed(POLICY, policies, "ClusterPolicy")
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

    node_list, node_error = _parsed(ALLOCATABLE, nodes, "nodes")
    matched = {h.name: _match(h, node_list.items) for h in hosts} if node_list is not None else {}

    if VALIDATOR in selected:
        pod_list, pod_error = _parsed(VALIDATOR, pods, "validator pods")
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
                    continue
                judged = judge_allocatable(host.gpus, node)
                if judged.verdict is Verdict.FAIL:
                    bad.append(host.name)
                node_finding(ALLOCATABLE, host, judged.verdict, judged.summary, observed=judged.observed,
                             expected=host.gpus, remediation=judged.remediation)
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
                if not (policy.driver_enabled and policy.driver_version and expected) or policy.uses_driver_crd:
                    continue  # with useNvidiaDriverCRD the NVIDIADriver objects below own the version
                if any(_short(policy.driver_version) == e or policy.driver_version.startswith(e + "-")
                       for e in expected):
                    add(Finding(DRIVER, Verdict.PASS, f"ClusterPolicy {policy.name} deploys driver "
                                f"{policy.driver_version}", observed=policy.driver_version, expected=expected[0]))
                else:
                    add(Finding(DRIVER, Verdict.FAIL, f"ClusterPolicy {policy.name} deploys driver "
                                f"{policy.driver_version}, the inventory expects {' or '.join(expected)}",
                                observed=policy.driver_version, expected=" or ".join(expected),
                                remediation=Remediation.REINSTALL))
        if drivers is not None and not _missing_crd(drivers.result):
            driver_list, driver_error = _parsed(DRIVER, drivers, "NVIDIADriver")
            if driver_error is not None:
                add(driver_error, DRIVERS_EVIDENCE)
            else:
                for nvd in driver_list.items:
                    add(_judge_nvidia_driver(nvd, hosts, matched if node_list is not None else None),
                        DRIVERS_EVIDENCE)
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


def _judge_nvidia_driver(nvd: NvidiaDriver, hosts: Sequence[OperatorHost],
                         matched: Optional[dict[str, Optional[K8sNode]]]) -> Finding:
    """One NVIDIADriver: ready, and its version what the inventory expects of the hosts its nodeSelector picks."""
    if matched is None:  # no node list: every host may be the driver's
        picked = list(hosts)
    else:
        picked = [h for h in hosts if (node := matched.get(h.name)) is not None and nvd.selects(dict(node.labels))]
    names = fold([h.name for h in picked]) if picked else "no inventory host"
    expected = sorted({h.driver for h in picked if h.driver})
    what = f"NVIDIADriver {nvd.name} ({nvd.driver_type}, {nvd.version or 'no version'}" + \
        (", precompiled" if nvd.precompiled else "") + f", for {names})"
    problems: list[str] = []
    remediation = Remediation.NONE
    if nvd.state != "ready":
        problems.append(f"state {nvd.state or 'not reconciled'} (kubectl describe nvidiadriver {nvd.name} and its "
                        "driver pods)")
        remediation = Remediation.INVESTIGATE
    if nvd.version and expected and not any(_driver_matches(nvd.version, e, nvd.precompiled) for e in expected):
        problems.append(f"deploys {nvd.version}, the inventory expects {' or '.join(expected)} (set spec.version)")
        remediation = Remediation.REINSTALL
    if problems:
        return Finding(DRIVER, Verdict.FAIL, f"{what}: {'; '.join(problems)}", observed=nvd.version,
                       expected=" or ".join(expected) or None, remediation=remediation)
    return Finding(DRIVER, Verdict.PASS, f"{what} is ready", observed=nvd.version,
                   expected=" or ".join(expected) or None)
