"""Cluster-level checks: facts compared across nodes (after every node has reported)."""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from nvdeploy.hostrange import fold
from nvdeploy.results import Finding, NodeResult, Remediation, Verdict


def driver_consistency(nodes: Sequence[NodeResult]) -> tuple[list[NodeResult], list[Finding]]:
    """Every node runs the same driver. Without a declared target the majority version is the reference and
    each node that differs FAILs as inconsistent; the cluster finding shows the folded histogram
    (``gpu[001-127]: 550.54.15 | gpu128: 535.104.05``).
    """
    versions = {n.name: n.facts.get("driver_version") for n in nodes if n.facts.get("driver_version")}
    if len(versions) < 2:
        return list(nodes), []
    counts = Counter(versions.values())
    histogram = " | ".join(f"{fold([n for n, v in versions.items() if v == version])}: {version}"
                           for version, _ in counts.most_common())
    if len(counts) == 1:
        only = next(iter(counts))
        return list(nodes), [Finding("driver.consistency", Verdict.PASS, f"all {len(versions)} nodes run {only}",
                                     observed=histogram)]
    (majority, top), *rest = counts.most_common()
    tie = rest and rest[0][1] == top
    updated = []
    for node in nodes:
        version = versions.get(node.name)
        if version is None or (version == majority and not tie):
            updated.append(node)
            continue
        updated.append(node.with_findings([Finding(
            "driver.consistency", Verdict.FAIL,
            f"driver {version} differs from the rest of the cluster ({histogram})", node=node.name,
            observed=version, expected=majority if not tie else "one version cluster-wide",
            remediation=Remediation.REINSTALL, profile=node.profile)]))
    cluster = Finding("driver.consistency", Verdict.FAIL, f"{len(counts)} driver versions in the cluster: {histogram}",
                      observed=histogram, expected="one version cluster-wide", remediation=Remediation.REINSTALL)
    return updated, [cluster]


def evaluate_cluster(nodes: Sequence[NodeResult]) -> tuple[list[NodeResult], list[Finding]]:
    updated, findings = driver_consistency(nodes)
    return updated, findings
