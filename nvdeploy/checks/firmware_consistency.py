"""firmware.consistency (cluster stage): within each profile, the parts whose firmware differs from the majority.

Mixed firmware inside one fleet is a classic cause of faults that only some nodes show, so every component is
compared across all the parts of its kind of the profile's nodes (each GPU's VBIOS against every other GPU's, each
ConnectX CA against the others of its CA type, each node's BIOS against the others'), from the ``firmware`` fact
firmware.minimum records (results.json).
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from nvdeploy.checks.firmware import CONSISTENCY_CHECK as CHECK
from nvdeploy.checks.firmware import label
from nvdeploy.config.hostrange import fold
from nvdeploy.results import Finding, NodeResult, Remediation, Verdict

FACT = "firmware"
# The profile's firmware.must_match, copied into each node's facts by the evaluation (runner/evaluate.py): the
# cluster stage has the nodes' records, not their profiles.
MUST_MATCH_FACT = "fw_must_match"


def _remedy(component: str) -> str:
    kind = component.split(".", 1)[0]
    return {"gpu": "flash the GPUs to the fleet's firmware bundle", "nic": "burn the fleet's ConnectX firmware",
            "system": "update the BIOS to the fleet's release"}.get(kind, "align the firmware")


# The GSP firmware ships inside the driver (it is the driver's version): driver.consistency judges it already, and
# a rolling driver upgrade would otherwise also read as a firmware fault on every node not upgraded yet.
DRIVER_BOUND = frozenset({"gpu.gsp"})


def _must_match(rule_list: Sequence[str], component: str) -> bool:
    base = component.split("[", 1)[0]
    return any(rule == component or rule == base for rule in rule_list)


def evaluate_firmware(nodes: Sequence[NodeResult]) -> tuple[list[NodeResult], list[Finding]]:
    """(nodes with their WARN/FAIL findings added, cluster findings): see the catalog text above."""
    by_profile: dict[str, list[NodeResult]] = {}
    for node in nodes:
        if isinstance(node.facts.get(FACT), dict):
            by_profile.setdefault(node.profile, []).append(node)
    extra: dict[str, list[Finding]] = {}
    findings: list[Finding] = []
    for profile, members in by_profile.items():
        if len(members) < 2:
            continue
        rules = next((list(n.facts.get(MUST_MATCH_FACT) or ()) for n in members), [])
        components = dict.fromkeys(c for n in members for c in n.facts[FACT])
        odd_components = 0
        for component in components:
            if component in DRIVER_BOUND:
                continue
            votes = {(n.name, unit): str(version) for n in members
                     for unit, version in (n.facts[FACT].get(component) or {}).items()}
            counts = Counter(votes.values())
            if len(counts) < 2:
                continue
            odd_components += 1
            (majority, top), *rest = counts.most_common()
            tie = rest[0][1] == top
            verdict = Verdict.FAIL if _must_match(rules, component) else Verdict.WARN
            what = label(component)
            expected = majority if not tie else "one version across the profile's nodes"
            odd = {key: v for key, v in votes.items() if tie or v != majority}
            per_node: dict[str, list[tuple[str, str]]] = {}
            for (host, unit), version in odd.items():
                per_node.setdefault(host, []).append((unit, version))
            # A tie has no majority to name a part against (two nodes, one each): said once, in the cluster finding.
            for host, parts in ([] if tie else per_node.items()):
                shown = ", ".join(f"{unit} {what} {v}" if unit else f"{what} {v}" for unit, v in parts)
                gpu = _gpu(parts[0][0]) if len(parts) == 1 else None
                extra.setdefault(host, []).append(Finding(
                    CHECK, verdict, f"{shown}; " + (f"the majority of {profile}'s parts run {majority} "
                                                    f"({top} of {len(votes)})" if not tie else
                                                    f"no majority among {profile}'s parts ({_histogram(counts)})")
                    + f": {_remedy(component)}",
                    node=host, observed=", ".join(v for _u, v in parts), expected=expected, gpu=gpu,
                    remediation=Remediation.REINSTALL, profile=profile))
            groups: dict[str, list[str]] = {}
            for (host, _unit), version in odd.items():
                hosts = groups.setdefault(version, [])
                if host not in hosts:
                    hosts.append(host)
            folded = " | ".join(f"{fold(hosts)}: {version}" for version, hosts in groups.items())
            findings.append(Finding(
                CHECK, verdict, f"{profile}: {what} differs on {len(per_node)} of {len(members)} nodes ({folded}); "
                                + (f"majority {majority} ({top} of {len(votes)} parts)" if not tie else "no majority"),
                observed=folded, expected=expected, remediation=Remediation.REINSTALL, profile=profile))
        if not odd_components:
            findings.append(Finding(CHECK, Verdict.PASS, f"{profile}: one firmware version per component on all "
                                                         f"{len(members)} nodes ({len(components)} components)",
                                    profile=profile))
    updated = [node.with_findings(extra[node.name]) if node.name in extra else node for node in nodes]
    return updated, findings


def _gpu(unit: str) -> int | None:
    return int(unit[4:]) if unit.startswith("GPU ") and unit[4:].isdigit() else None


def _histogram(counts: Counter) -> str:
    return ", ".join(f"{version} x{count}" for version, count in counts.most_common())
