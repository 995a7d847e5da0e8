"""Cluster-level checks: facts compared across nodes (after every node has reported)."""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping, Optional, Sequence

from nvdeploy.hostrange import fold
from nvdeploy.results import Finding, NodeResult, Remediation, Verdict

# (node fact, check id, what): the stack versions that must be the same on every node.
VERSION_CONSISTENCY = (
    ("driver_version", "driver.consistency", "driver"),
    ("cuda_version", "cuda.consistency", "CUDA"),
    ("dcgm_version", "dcgm.consistency", "DCGM"),
    ("nccl_version", "nccl.consistency", "NCCL"),
    ("ofed_version", "ofed.consistency", "OFED"),
    ("fabricmanager_version", "fabric.consistency", "fabric manager"),
)


def version_consistency(nodes: Sequence[NodeResult], key: str, check_id: str,
                        what: str) -> tuple[list[NodeResult], list[Finding]]:
    """Every node that reports ``facts[key]`` reports the same value. Without a declared target the majority
    version is the reference: the minority nodes FAIL (REINSTALL; on a tie every node does) and the cluster finding
    shows the folded histogram (``gpu[001-127]: 550.54.15 | gpu128: 535.104.05``). Nodes that do not report it are
    left to their own checks.
    """
    versions = {n.name: str(n.facts[key]) for n in nodes if n.facts.get(key)}
    if len(versions) < 2:
        return list(nodes), []
    counts = Counter(versions.values())
    histogram = " | ".join(f"{fold([n for n, v in versions.items() if v == version])}: {version}"
                           for version, _ in counts.most_common())
    if len(counts) == 1:
        only = next(iter(counts))
        return list(nodes), [Finding(check_id, Verdict.PASS, f"all {len(versions)} nodes run {what} {only}",
                                     observed=histogram)]
    (majority, top), *rest = counts.most_common()
    tie = bool(rest) and rest[0][1] == top
    expected = majority if not tie else "one version cluster-wide"
    updated = []
    for node in nodes:
        version = versions.get(node.name)
        if version is None or (version == majority and not tie):
            updated.append(node)
            continue
        updated.append(node.with_findings([Finding(
            check_id, Verdict.FAIL, f"{what} {version} differs from the rest of the cluster ({histogram})",
            node=node.name, observed=version, expected=expected, remediation=Remediation.REINSTALL,
            profile=node.profile)]))
    cluster = Finding(check_id, Verdict.FAIL, f"{len(counts)} {what} versions in the cluster: {histogram}",
                      observed=histogram, expected="one version cluster-wide", remediation=Remediation.REINSTALL)
    return updated, [cluster]


def evaluate_cluster(nodes: Sequence[NodeResult], racks_of: Optional[Mapping[str, Sequence[Any]]] = None
                     ) -> tuple[list[NodeResult], list[Finding]]:
    """Cluster-stage findings. ``racks_of``: host -> [rack, rack budget W], from the run's header, so a rack's
    unmeasured nodes are known to the power budget."""
    updated, findings = list(nodes), []
    for key, check_id, what in VERSION_CONSISTENCY:
        updated, more = version_consistency(updated, key, check_id, what)
        findings.extend(more)
    # Power per rack and cluster, from the power.node findings (nvdeploy/checks/power.py).
    from nvdeploy.checks.power import evaluate_power

    findings.extend(evaluate_power(updated, racks_of))
    return updated, findings
