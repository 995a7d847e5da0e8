"""nvlink.domain (cluster stage): the trays of each multi-node NVLink domain (NVL72 rack), from their GPUs' fabric
facts. Pure: node results in, findings out. Each tray evaluated with nvlink.fabric carries the summary fact
``nvlink_fabric``: its profile's domain size and the domains its GPUs registered with."""

from __future__ import annotations

import inspect
import re
from collections import Counter, defaultdict
from typing import Any, Mapping, Optional, Sequence

from nvdeploy.checks.registry import CLUSTER_CHECKS
from nvdeploy.config.hostrange import fold
from nvdeploy.results import ErrorReason, Finding, NodeResult, Remediation, Verdict

DOMAIN_CHECK = "nvlink.domain"
FABRIC_CHECK = "nvlink.fabric"  # the node check whose facts this one groups (nvdeploy/checks/nvlink_fabric.py)
FACT = "nvlink_fabric"
_ZERO = re.compile(r"0{8}-0{4}-0{4}-0{4}-0{12}")
DOC = inspect.cleandoc("""Runs nothing on the nodes: after every node's own checks, groups the trays of profiles with an
    NVLink domain (``nvlink_domain``: GB200/GB300 NVL72) by the clusterUuid + cliqueId their GPUs registered with
    (the fabric facts nvlink.fabric reads). PASS per domain: it holds the profile's number of trays and GPUs (18 /
    72), every GPU of each of its trays is in it, and its trays share one ``rack`` (inventory var), which no other
    domain's trays name. FAIL naming the trays (folded): a short domain (a tray missing, unregistered or elsewhere),
    a tray in a domain of its own, a tray whose GPUs are split across domains, a rack whose trays are in more than
    one domain or a domain spanning racks; the misplaced tray also gets a FAIL of its own (ISOLATE). ERROR
    (incomplete) when the domain is short only by trays that gave no fabric facts (unreachable, not evaluated).
    Remediation: the tray's NVLink cabling/cartridges and the switch trays' NMX partition (NVIDIA GB200 NVL
    Multi-Node Tuning Guide; NVIDIA Mission Control manual, NVLink chapter), then reset or reboot the tray so its
    GPUs register again; or correct the inventory's ``rack`` var.""")
# Its catalog text (``nvdeploy checks show nvlink.domain``); this module is imported with nvlink.fabric's.
CLUSTER_CHECKS["nvlink.domain"] = DOC


def registered_domains(smi: Any) -> dict[str, list[int]]:
    """{``clusterUuid/cliqueId``: GPU indices} of the GPUs that completed registration with non-zero identifiers
    (unhealthy ones included: they are members, nvlink.fabric judges their health)."""
    out: dict[str, list[int]] = {}
    for gpu in getattr(smi, "gpus", ()):
        uuid = (gpu.fabric_cluster_uuid or "").strip().lower()
        if gpu.fabric_state != "Completed" or gpu.fabric_status != "Success" or not gpu.fabric_clique_id \
                or not uuid or _ZERO.fullmatch(uuid):
            continue
        out.setdefault(f"{uuid}/{gpu.fabric_clique_id}", []).append(gpu.index if gpu.index is not None else -1)
    return out


def tray_fact(smi: Any, domain: Any) -> dict[str, Any]:
    """The ``nvlink_fabric`` fact of one tray: its profile's domain size (``domain``: a profile's NvlinkDomain) and
    {``clusterUuid/cliqueId``: GPU indices} of its registered GPUs."""
    return {"trays": domain.trays, "gpus": domain.gpus, "domains": registered_domains(smi)}


def _label(key: str) -> str:
    """``clique 32766 of cluster 7fe4076d``: the clusterUuid's first group is enough to tell a run's domains apart
    (findings carry the whole one in ``observed``)."""
    uuid, _, clique = key.rpartition("/")
    return f"clique {clique} of cluster {uuid.split('-')[0]}"


def evaluate_domains(nodes: Sequence[NodeResult], racks_of: Optional[Mapping[str, Sequence[Any]]] = None
                     ) -> tuple[list[NodeResult], list[Finding]]:
    """The nvlink.domain findings; none when no node carries the ``nvlink_fabric`` fact (no tray profile, or
    nvlink.fabric not run). A node of a tray profile without the fact (unreachable, nvidia-smi failed) is a tray
    that gave no fabric facts. ``racks_of``: host -> [rack, ...] from the run's header."""
    domains: dict[str, Mapping[str, int]] = {}
    for node in nodes:
        fact = node.facts.get(FACT)
        if isinstance(fact, Mapping):
            domains.setdefault(node.profile, {"trays": int(fact["trays"]), "gpus": int(fact["gpus"])})
    if not domains:
        return list(nodes), []
    trays = [n for n in nodes if n.profile in domains]
    rack = {t.name: str(racks_of[t.name][0]) for t in trays if racks_of and racks_of.get(t.name)
            and racks_of[t.name][0]}
    placed: dict[str, dict[str, list[int]]] = {t.name: dict((t.facts.get(FACT) or {}).get("domains") or {})
                                               for t in trays}
    evaluated = {t.name for t in trays if FACT in t.facts}
    members: dict[str, list[str]] = defaultdict(list)
    for tray in trays:
        for key in placed[tray.name]:
            members[key].append(tray.name)
    profile_of = {t.name: t.profile for t in trays}
    node_findings: dict[str, list[Finding]] = defaultdict(list)
    findings: list[Finding] = []

    def why_missing(name: str) -> str:
        if placed[name]:
            return "in " + " and ".join(_label(k) for k in placed[name])
        return "no GPU registered (see nvlink.fabric)" if name in evaluated else "no fabric facts (not evaluated)"

    # A tray whose GPUs are in more than one domain.
    for tray in trays:
        if len(placed[tray.name]) > 1:
            parts = "; ".join(f"GPU {', '.join(map(str, sorted(g)))} in {_label(k)}"
                              for k, g in sorted(placed[tray.name].items()))
            node_findings[tray.name].append(Finding(
                DOMAIN_CHECK, Verdict.FAIL, f"the tray's GPUs are split across {len(placed[tray.name])} NVLink "
                f"domains: {parts}", node=tray.name, observed=sorted(placed[tray.name]), expected="one domain",
                remediation=Remediation.ISOLATE, profile=tray.profile))
    # Each rack of the inventory: its trays in one domain (the one most of its GPUs registered with).
    rack_domain: dict[str, str] = {}
    for name_of_rack in sorted(set(rack.values())):
        in_rack = [t for t in rack if rack[t] == name_of_rack]
        weight = Counter({k: len(g) for t in in_rack for k, g in placed[t].items()})
        for t in in_rack:
            weight.update({k: 0 for k in placed[t]})
        if not weight:
            continue
        main, _ = weight.most_common(1)[0]
        rack_domain[name_of_rack] = main
        for t in in_rack:
            stray = [k for k in placed[t] if k != main]
            if stray and len(placed[t]) == 1:
                node_findings[t].append(Finding(
                    DOMAIN_CHECK, Verdict.FAIL, f"the tray registered with {_label(stray[0])}, while rack "
                    f"{name_of_rack}'s other trays are in {_label(main)}: cabling, NVLink cartridge or NMX partition "
                    "fault, or a wrong rack var", node=t, observed=stray[0], expected=main,
                    remediation=Remediation.ISOLATE, profile=profile_of[t]))
    # Each domain: its size, its trays alone or split, its rack.
    named: set[str] = set()  # trays a domain's finding names as missing
    for key in sorted(members, key=lambda k: (sorted(members[k])[0], k)):
        names = members[key]
        size = domains[profile_of[names[0]]]
        gpus = sum(len(placed[n][key]) for n in names)
        racks = sorted({rack[n] for n in names if n in rack})
        where = f"rack {racks[0]}" if len(racks) == 1 else (f"racks {', '.join(racks)}" if racks else "")
        title = f"{where + ': ' if where else ''}{_label(key)}"
        problems = []
        if len(racks) > 1:
            problems.append(f"spans racks {', '.join(racks)} (" + "; ".join(
                f"{r}: {fold([n for n in names if rack.get(n) == r])}" for r in racks) + ")")
        expected_members: list[str] = []
        if len(racks) == 1 and rack_domain.get(racks[0]) == key:
            expected_members = sorted(t for t in rack if rack[t] == racks[0])
        missing = [t for t in expected_members if t not in names]
        named.update(missing)
        incomplete_only = bool(missing) and all(not placed[t] and t not in evaluated for t in missing)
        alone = len(names) == 1 and size["trays"] > 1
        if alone:
            problems.append(f"tray {names[0]} is in an NVLink domain of its own")
            if not any(f.check == DOMAIN_CHECK for f in node_findings[names[0]]):
                node_findings[names[0]].append(Finding(
                    DOMAIN_CHECK, Verdict.FAIL, f"the tray is alone in {_label(key)}: no other tray shares its "
                    "NVLink domain", node=names[0], observed=1, expected=size["trays"],
                    remediation=Remediation.ISOLATE, profile=profile_of[names[0]]))
        elif len(names) != size["trays"] or gpus != size["gpus"]:
            short = "short" if len(names) < size["trays"] or gpus < size["gpus"] else "too large"
            problems.append(f"{short}: {len(names)} of {size['trays']} trays, {gpus} of {size['gpus']} GPUs")
        if missing:
            problems.append("missing " + "; ".join(f"{fold(group)}: {why}" for why, group in _by_reason(
                missing, why_missing)))
        split = [n for n in names if len(placed[n]) > 1]
        if split:
            problems.append(f"tray(s) {fold(split)} split across domains")
        # What the report's NVLink domains table shows of each (nvdeploy/report/templates/report.html.j2).
        observed = {"domain": title, "id": key, "trays": fold(sorted(names)), "tray_count": len(names),
                    "gpus": gpus, "problems": "; ".join(problems)}
        expected = {"trays": size["trays"], "gpus": size["gpus"]}
        if not problems:
            findings.append(Finding(DOMAIN_CHECK, Verdict.PASS, f"{title}: {len(names)} trays, {gpus} GPUs "
                                    f"({fold(sorted(names))})", observed=observed, expected=expected))
        elif incomplete_only and len(problems) <= 2 and not alone and len(racks) <= 1 and not split:
            findings.append(Finding(DOMAIN_CHECK, Verdict.ERROR, f"{title}: {'; '.join(problems)}: not judged "
                                    "while those trays give no fabric facts", observed=observed, expected=expected,
                                    reason=ErrorReason.INCOMPLETE))
        else:
            findings.append(Finding(DOMAIN_CHECK, Verdict.FAIL, f"{title}: {'; '.join(problems)} (trays "
                                    f"{fold(sorted(names))})", observed=observed, expected=expected,
                                    remediation=Remediation.ISOLATE))
    # Trays in no domain that no rack's finding named.
    lost = [t.name for t in trays if not placed[t.name] and t.name not in named]
    if lost:
        grouped = _by_reason(lost, why_missing)
        verdict = Verdict.ERROR if all(t not in evaluated for t in lost) else Verdict.FAIL
        findings.append(Finding(DOMAIN_CHECK, verdict, f"{len(lost)} tray(s) in no NVLink domain: " + "; ".join(
            f"{fold(group)}: {why}" for why, group in grouped), observed=fold(sorted(lost)),
            reason=ErrorReason.INCOMPLETE if verdict is Verdict.ERROR else None,
            remediation=Remediation.ISOLATE if verdict is Verdict.FAIL else Remediation.NONE))
    updated = [n.with_findings(node_findings[n.name]) if node_findings.get(n.name) else n for n in nodes]
    return updated, findings


def _by_reason(names: Sequence[str], why: Any) -> list[tuple[str, list[str]]]:
    groups: dict[str, list[str]] = defaultdict(list)
    for name in names:
        groups[why(name)].append(name)
    return sorted(groups.items(), key=lambda item: sorted(item[1])[0])
