"""Cluster-level checks: facts compared across nodes (after every node has reported)."""

from __future__ import annotations

from collections import Counter
from typing import Any, Collection, Mapping, Optional, Sequence

from nvdeploy.checks.firmware_consistency import CHECK as FIRMWARE_CHECK
from nvdeploy.checks.firmware_consistency import evaluate_firmware
from nvdeploy.checks.fleet_drift import evaluate_drift
from nvdeploy.checks.registry import CLUSTER_CHECKS
from nvdeploy.config.hostrange import fold
from nvdeploy.results import Finding, NodeResult, Remediation, RunResult, Verdict

# (node fact, check id, what): the stack versions that must be the same on every node.
VERSION_CONSISTENCY = (
    ("driver_version", "driver.consistency", "driver"),
    ("cuda_version", "cuda.consistency", "CUDA"),
    ("dcgm_version", "dcgm.consistency", "DCGM"),
    ("nccl_version", "nccl.consistency", "NCCL"),
    ("ofed_version", "ofed.consistency", "OFED"),
    ("fabricmanager_version", "fabric.consistency", "fabric manager"),
)
# Which node output each version is read from, for the catalog's text.
_VERSION_FROM = {
    "driver_version": "``nvidia-smi -q -x``, as driver.loaded reads it",
    "cuda_version": "``nvidia-smi -q -x``: the CUDA version the driver supports",
    "dcgm_version": "``dcgmi --version``, as system.versions reads it",
    "nccl_version": "nccl-tests' ``NCCL_DEBUG=VERSION`` line, when nccl.all_reduce ran",
    "ofed_version": "``ofed_info -s``, as system.versions reads it",
    "fabricmanager_version": "``nv-fabricmanager --version`` on NVSwitch SKUs, as fabric.manager reads it",
}


def _consistency_doc(key: str, what: str) -> str:
    return (f"Every node that reports a {what} version reports the same one, read from {_VERSION_FROM[key]}. "
            f"It runs nothing on the nodes: it compares what they reported, after their own checks. "
            f"PASS: one version on every node that reports it. "
            f"FAIL (REINSTALL) on each node whose version differs from the majority (on a tie, on every node), "
            f"with a cluster finding that shows the folded histogram (``gpu[001-127]: 550.54.15 | gpu128: "
            f"535.104.05``). Nodes that do not report it are left to their own checks; fewer than two nodes "
            f"reporting it give no finding. It runs on every validation, at every level.")


# The cluster stage's text in the catalog (nvdeploy checks list/show): these run on every validation.
CLUSTER_CHECKS.update({check_id: _consistency_doc(key, what) for key, check_id, what in VERSION_CONSISTENCY})


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


def evaluate_cluster(nodes: Sequence[NodeResult], racks_of: Optional[Mapping[str, Sequence[Any]]] = None,
                     fleet: Optional[Mapping[str, Mapping[str, Any]]] = None,
                     fleet_baseline: Optional[RunResult] = None,
                     only: Optional[Collection[str]] = None) -> tuple[list[NodeResult], list[Finding]]:
    """Cluster-stage findings. ``racks_of``: host -> [rack, rack budget W], from the run's header, so a rack's
    unmeasured nodes are known to the power budget. ``fleet``: profile stamp -> its ``fleet`` section, from the
    run's header when fleet.performance was selected (None: not run); ``fleet_baseline``: the accepted run whose
    nodes are peers where this run has too few. ``only``: the checks a ``validate --check`` run chose (None: a
    level's run, where every part of the stage runs): a part runs only when it, or the node check it reads, was
    chosen, so that ``--check dcgm.diag_r1`` is not also judged on versions and power it did not collect."""
    updated, findings = list(nodes), []

    def chosen(*ids: str) -> bool:
        return only is None or any(i in only for i in ids)

    for key, check_id, what in VERSION_CONSISTENCY:
        if chosen(check_id):
            updated, more = version_consistency(updated, key, check_id, what)
            findings.extend(more)
    # Firmware per component against the majority of the profile's nodes (nvdeploy/checks/firmware_consistency.py).
    if chosen(FIRMWARE_CHECK, "firmware.minimum"):
        updated, more = evaluate_firmware(updated)
        findings.extend(more)
    # Power per rack and cluster, from the power.node findings (nvdeploy/checks/power.py).
    from nvdeploy.checks.power import BUDGET_CHECK, CLUSTER_CHECK, evaluate_power

    if chosen("power.node", BUDGET_CHECK, CLUSTER_CHECK):
        findings.extend(evaluate_power(updated, racks_of))
    # The trays of each multi-node NVLink domain, from the trays' nvlink_fabric facts (checks/nvlink_domain.py).
    from nvdeploy.checks.nvlink_domain import evaluate_domains

    if chosen("nvlink.domain"):
        updated, more = evaluate_domains(updated, racks_of)
        findings.extend(more)
    if fleet is not None:
        # Each measured figure against the node's peers of the same profile (nvdeploy/checks/fleet.py).
        from nvdeploy.checks.fleet import evaluate_fleet

        updated, more = evaluate_fleet(updated, fleet, fleet_baseline)
        findings.extend(more)
        # And against the node's own figures of the accepted run: a node degrading inside the band
        # (nvdeploy/checks/fleet_drift.py; nothing without a baseline).
        updated, more = evaluate_drift(updated, fleet, fleet_baseline)
        findings.extend(more)
    return updated, findings
