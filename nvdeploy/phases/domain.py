"""nccl.domain: all_reduce across each multi-node NVLink domain (NVL72 rack), and one across the domains.

Cluster stage at level full, for profiles with ``nvlink_domain``. The trays of a domain are those whose GPUs
registered with the same clusterUuid + cliqueId (the ``nvlink_fabric`` fact nvlink.fabric leaves on each tray);
only trays that passed their own checks take part (the rule of the multi-node stage), so a domain short of trays
or with failed trays runs over its healthy ones and says which were left out. Each domain is one mpirun of
all_reduce_perf over its trays with multi-node NVLink on (``NCCL_MNNVL_ENABLE=1``, ``NCCL_NVLS_ENABLE=1``) and
NCCL's own choice of algorithm (never ``NCCL_ALGO=RING``, which the multi-node stage sets for its InfiniBand pairs:
ring busbw is bounded by one GPU's link); the domains run in parallel, each on its own.

The floor (``nvlink_domain.all_reduce_busbw_gbps`` x ``floor_pct``) holds for a run of the size its figure was
measured on (``all_reduce_ranks``, default the whole domain) only: busbw depends on the group size and the
algorithm NCCL picks for it, so a rack short of trays, or a pair, has no sourced floor and its run is reported,
SKIP. A domain below its floor is localised by comparing groups of one size with each other
(``runner/pairing.localise_by_peers``): disjoint pairs of trays, a pair below 90% of the pairs' median is low, and
each of its trays is re-tested with a tray of a good pair, so a slow tray is named and its healthy partner is not.
Without a floor the runs are made and their figure reported, SKIP: never PASS on no floor.

With more than one domain, one more all_reduce over the first healthy tray of each domain, multi-node NVLink and
NVLS off so that the ranks talk over InfiniBand, is judged against the profile's ``nccl.multinode_busbw_gbps``
(SKIP with its figure where the profile states none).
"""

from __future__ import annotations

import concurrent.futures as cf
from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from nvdeploy.checks.nccl import NcclExpectation
from nvdeploy.config.hostrange import fold
from nvdeploy.config.inventory import Host
from nvdeploy.config.profiles import Profile, ProfileCatalog
from nvdeploy.phases.multinode import (
    DEADLINE_TEXT,
    INFINIBAND_ONLY,
    DeadlinePassed,
    GroupRun,
    MultiNodeRunner,
    _fit_to_take_part,
    _is_bandwidth_or_data,
    _started,
    multinode_expectation,
)
from nvdeploy.results import ErrorReason, Finding, NodeResult, Remediation, Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.runner.pairing import localise_by_peers
from nvdeploy.runner.record import RunRecorder

CHECK_ID = "nccl.domain"
FABRIC_FACT = "nvlink_fabric"  # left on each tray by nvlink.fabric (nvdeploy/checks/nvlink_domain.py)
MNNVL_ON = {"NCCL_MNNVL_ENABLE": "1", "NCCL_NVLS_ENABLE": "1"}
MNNVL_OFF = INFINIBAND_ONLY
NO_FLOOR = "no floor in the profile"
DOMAIN_HINT = ("a slow tray sets the pace of the whole domain: check its NVLink cabling/cartridges and the switch "
               "trays (NVIDIA GB200 NVL Multi-Node Tuning Guide)")
PEER_FLOOR_PCT = 90.0  # a pair below this share of the domain's pairs' median is low (as nvloom.domain's rows)
IB_HINT = ("across domains the ranks talk over InfiniBand: check the InfiniBand ports, cables and switches of "
           "these trays")


@dataclass(frozen=True)
class Domain:
    """One NVLink domain of the run: its name (the trays' rack, else the clique), the trays that take part, and
    those of it left out (failed their own checks) or missing from it against the profile's size."""

    name: str
    key: str
    trays: tuple[str, ...]
    left_out: tuple[str, ...]
    expected_trays: int


def domain_expectation(profile: Profile, ranks: Optional[int] = None) -> NcclExpectation:
    """The floor of a run over ``ranks`` ranks (None: the floor's own size): the profile's figure holds for the
    group size it was measured on, with NCCL's default algorithm, and for no other."""
    domain = profile.nvlink_domain
    if domain is None or domain.all_reduce_busbw_gbps is None:
        return NcclExpectation()
    if ranks is not None and ranks != domain.floor_ranks:
        return NcclExpectation()
    return NcclExpectation(domain.all_reduce_busbw_gbps, domain.floor_pct)


def no_floor_said(profile: Profile, ranks: int) -> str:
    """Why a run of ``ranks`` ranks is not judged."""
    domain = profile.nvlink_domain
    if domain is None or domain.all_reduce_busbw_gbps is None:
        return NO_FLOOR
    return (f"{NO_FLOOR} for {ranks} ranks (its {domain.all_reduce_busbw_gbps:g} GB/s is of a {domain.floor_ranks}"
            "-rank run: busbw depends on the group size and NCCL's algorithm for it)")


def group_domains(nodes: Sequence[NodeResult], hosts: Sequence[Host], catalog: ProfileCatalog) -> list[Domain]:
    """The run's NVLink domains, in inventory order of their first tray. A tray belongs to the domain its GPUs
    registered with; a tray with none (not registered, no facts) or split across domains belongs to none here
    (nvlink.domain and nvlink.fabric judge it) and counts as missing."""
    by_name = {n.name: n for n in nodes}
    members: dict[str, list[str]] = {}
    fit: dict[str, bool] = {}
    profile_of: dict[str, str] = {}
    for host in hosts:
        node = by_name.get(host.name)
        if node is None or not host.profile or catalog.get(host.profile).nvlink_domain is None:
            continue
        fact = node.facts.get(FABRIC_FACT)
        keys = list((fact or {}).get("domains") or {}) if isinstance(fact, Mapping) else []
        if len(keys) != 1:
            continue
        members.setdefault(keys[0], []).append(host.name)
        fit[host.name] = _fit_to_take_part(node)
        profile_of[host.name] = host.profile
    rack_of = {h.name: str(h.get("imex_domain") or h.get("rack") or "") for h in hosts}
    named: list[tuple[str, str, list[str]]] = []
    for key, trays in members.items():
        racks = Counter(rack_of[t] for t in trays if rack_of[t])
        uuid, _, clique = key.rpartition("/")
        label = f"clique {clique} of cluster {uuid.split('-')[0]}"
        named.append((f"rack {racks.most_common(1)[0][0]}" if racks else label, label, trays))
    seen = Counter(name for name, _, _ in named)
    out = []
    for name, label, trays in named:
        key = next(k for k, v in members.items() if v is trays)
        size = catalog.get(profile_of[trays[0]]).nvlink_domain
        # A rack split over domains (nvlink.domain FAILs it): each part is told apart by its clique.
        out.append(Domain(f"{name} ({label})" if seen[name] > 1 and name != label else name, key,
                          tuple(t for t in trays if fit[t]), tuple(t for t in trays if not fit[t]),
                          size.trays if size is not None else len(trays)))
    return out


def judge(run: GroupRun, exp: NcclExpectation, no_floor: str = NO_FLOOR) -> tuple[Verdict, str]:
    """The verdict and summary of one run: its worst assessment; a PASS without a floor is SKIP with the figure
    (never PASS on no floor), ``no_floor`` saying why there is none."""
    worst = max(run.assessments, key=lambda a: a.verdict.severity)
    if worst.verdict is Verdict.PASS and exp.floor_gbps is None:
        figure = f"{run.busbw:g} GB/s" if run.busbw is not None else "measured"
        return Verdict.SKIP, f"{no_floor} (all_reduce busbw {figure} on {fold(run.nodes)}, not judged)"
    return worst.verdict, worst.summary


@dataclass(frozen=True)
class DomainOutcome:
    domain: Domain
    runner: MultiNodeRunner
    first: Optional[GroupRun]
    suspects: tuple[str, ...]
    inconclusive: tuple[str, ...]
    stopped: bool
    ranks: int = 0  # of the whole domain's run
    median: Optional[float] = None  # the domain's pairs' median figure, when they were compared


def _figure(run: GroupRun) -> Optional[float]:
    """A pair's figure for comparing it with the others; None when the run failed (corrupted data, a hang)."""
    if any(a.verdict in (Verdict.FAIL, Verdict.ERROR) for a in run.assessments):
        return None
    return run.busbw


def _run_domain(domain: Domain, index: int, hosts: Sequence[Host], catalog: ProfileCatalog, options: EngineOptions,
                recorder: RunRecorder, all_hosts: Sequence[Host], deadline_at: Optional[float]) -> DomainOutcome:
    by_name = {h.name: h for h in hosts}
    group = [by_name[t] for t in domain.trays]
    profile = catalog.get(group[0].profile or "")
    ranks = int(group[0].get("nccl_ranks_per_node") or profile.gpu.count) * len(group)
    runner = MultiNodeRunner(group, catalog, options, recorder, all_hosts, deadline_at, extra_env=MNNVL_ON,
                             low_bw_hint=DOMAIN_HINT, evidence_prefix=f"nccl_domain_{index:02d}",
                             expectation_of=lambda size: domain_expectation(profile, size), force_ring=False)
    if len(domain.trays) < 2:
        return DomainOutcome(domain, runner, None, (), (), False, ranks)
    trays = list(domain.trays)
    whole = runner.run_group(trays)
    suspects: tuple[str, ...] = ()
    inconclusive: tuple[str, ...] = ()
    stopped = False
    median = None
    floor = domain_expectation(profile, ranks).floor_gbps
    if not whole.ok and whole.started and floor is not None and _is_bandwidth_or_data(whole):
        try:
            found = localise_by_peers(trays, lambda pair: _figure(_started(runner.run_group(list(pair)))),
                                      PEER_FLOOR_PCT)
        except DeadlinePassed:
            inconclusive, stopped = tuple(trays), True
        else:
            # No pair low: the domain is slow as a whole (its switch trays, not one tray): not localised.
            suspects, median = found.named, found.median
            inconclusive = found.unresolved if found.named or found.unresolved else tuple(trays)
    elif not whole.ok:
        inconclusive, stopped = tuple(trays), not whole.started
    return DomainOutcome(domain, runner, whole, suspects, inconclusive, stopped, ranks, median)


def run_domains(nodes: Sequence[NodeResult], hosts: Sequence[Host], catalog: ProfileCatalog, options: EngineOptions,
                recorder: RunRecorder, deadline_at: Optional[float] = None
                ) -> tuple[list[NodeResult], list[Finding]]:
    """Run nccl.domain; returns the nodes with their new findings and the cluster findings (none when no host has
    a profile with an NVLink domain)."""
    if not any(h.profile and catalog.get(h.profile).nvlink_domain is not None for h in hosts):
        return list(nodes), []
    domains = group_domains(nodes, hosts, catalog)
    if not domains:
        if not any(FABRIC_FACT in n.facts for n in nodes):
            # The domains are what the GPUs registered with: without nvlink.fabric's facts there is no grouping to
            # trust (a rack var alone would run a half-registered rack as if it were whole).
            why = "no tray carries fabric facts: run nccl.domain with nvlink.fabric (both are in level full)"
        else:
            why = "no tray registered with the fabric (see nvlink.fabric, nvlink.domain)"
        return list(nodes), [Finding(CHECK_ID, Verdict.SKIP, f"no NVLink domain to run: {why}")]
    profile_of = {h.name: catalog.get(h.profile or "") for h in hosts}
    with cf.ThreadPoolExecutor(max_workers=max(1, min(len(domains), options.forks))) as pool:
        outcomes = list(pool.map(lambda pair: _run_domain(pair[1], pair[0], hosts, catalog, options, recorder, hosts,
                                                          deadline_at), enumerate(domains)))
    cluster: list[Finding] = []
    node_extra: dict[str, list[Finding]] = {}
    for outcome in outcomes:
        cluster += _domain_findings(outcome, profile_of, node_extra)
    cluster += _inter_domain(outcomes, hosts, catalog, options, recorder, deadline_at, profile_of)
    updated = [n.with_findings(node_extra[n.name]) if n.name in node_extra else n for n in nodes]
    return updated, cluster


def _domain_findings(outcome: DomainOutcome, profile_of: Mapping[str, Profile],
                     node_extra: dict[str, list[Finding]]) -> list[Finding]:
    domain = outcome.domain
    profile = profile_of[(domain.trays + domain.left_out)[0]]
    stamp = profile.stamp
    exp = domain_expectation(profile, outcome.ranks)
    no_floor = no_floor_said(profile, outcome.ranks)
    short = len(domain.trays) + len(domain.left_out) < domain.expected_trays
    notes = []
    if domain.left_out:
        notes.append(f"{fold(domain.left_out)} left out (failed their own checks)")
    if short:
        notes.append(f"{len(domain.trays) + len(domain.left_out)} of {domain.expected_trays} trays registered "
                     "(see nvlink.domain)")
    if outcome.first is None:
        return [Finding(CHECK_ID, Verdict.SKIP, f"{domain.name}: {len(domain.trays)} healthy tray(s), no multi-node "
                        f"NVLink run [{'; '.join(notes) or 'a domain of one tray'}]", profile=stamp)]
    said = f" [{'; '.join(notes)}: run over the {len(domain.trays)} healthy trays]" if notes else ""
    first = outcome.first
    verdict, summary = judge(first, exp, no_floor)
    worst = max(first.assessments, key=lambda a: a.verdict.severity)
    findings = [Finding(CHECK_ID, verdict, f"{domain.name}: {summary}{said}", observed=first.busbw,
                        expected=worst.expected, unit="GB/s" if first.busbw is not None else "",
                        reason=worst.reason if verdict is Verdict.ERROR else None,
                        remediation=worst.remediation if verdict in (Verdict.FAIL, Verdict.ERROR) else Remediation.NONE,
                        evidence=first.evidence, profile=stamp)]
    runs = outcome.runner.runs
    if outcome.suspects:
        bits = ", ".join(f"{fold(r.nodes)}: {r.busbw:g} GB/s" for r in runs if r.busbw is not None)
        findings.append(Finding(CHECK_ID, Verdict.FAIL, f"{domain.name}: multi-node NVLink all_reduce localised to "
                                f"{fold(outcome.suspects)} by pairs of trays and a re-test with a third tray "
                                f"({len(runs)} mpirun runs; {bits[:600]})",
                                observed=fold(outcome.suspects), remediation=Remediation.ISOLATE, profile=stamp))
    for tray in domain.trays:
        mine: Optional[Finding] = None
        if tray in outcome.suspects:
            worst_run = next((r for r in reversed(runs) if tray in r.nodes and len(r.nodes) == 2), None)
            mine = Finding(CHECK_ID, Verdict.FAIL, f"the {domain.name} all_reduce over multi-node NVLink is below the "
                           f"floor, and this tray's pair and its re-test with a third tray are below "
                           f"{PEER_FLOOR_PCT:g}% of the median {outcome.median or 0:g} GB/s of the domain's pairs "
                           "(localised; its partner cleared): check its NVLink cabling and cartridges, then reset the "
                           "tray" + (f"; last: {worst_run.assessments[0].summary}" if worst_run else ""),
                           node=tray, observed=worst_run.busbw if worst_run else None, unit="GB/s",
                           remediation=Remediation.ISOLATE, evidence=worst_run.evidence if worst_run else None,
                           profile=stamp)
        elif tray in outcome.inconclusive and not first.started:
            mine = Finding(CHECK_ID, Verdict.ERROR, f"the {domain.name} all_reduce not run: {DEADLINE_TEXT}", node=tray,
                           reason=ErrorReason.NOT_RUN, profile=stamp)
        elif tray in outcome.inconclusive:
            why = DEADLINE_TEXT if outcome.stopped else ("the failure is not one a comparison of pairs of trays "
                                                         "localises")
            mine = Finding(CHECK_ID, Verdict.ERROR, f"the {domain.name} all_reduce failed with this tray taking "
                           f"part; not localised to a tray ({why})", node=tray, reason=ErrorReason.INCOMPLETE,
                           remediation=Remediation.INVESTIGATE, profile=stamp)
        elif first.ok:
            verdict, summary = judge(first, exp, no_floor)
            mine = Finding(CHECK_ID, verdict, f"{domain.name}: {summary}", node=tray, observed=first.busbw,
                           unit="GB/s", evidence=first.evidence, profile=stamp)
        else:
            # The domain is below its floor and the comparison named its slow tray(s): this one's pair is within
            # the pairs' spread, so the low figure is not this tray's.
            floor = (outcome.median or 0) * PEER_FLOOR_PCT / 100
            pair = next((r for r in reversed(runs) if tray in r.nodes and len(r.nodes) == 2
                         and (_figure(r) or 0) >= floor), None)
            if pair is not None:
                mine = Finding(CHECK_ID, Verdict.PASS, f"{domain.name}: cleared: {fold(pair.nodes)} ran at "
                               f"{pair.busbw:g} GB/s, within {PEER_FLOOR_PCT:g}% of the median {outcome.median or 0:g}"
                               f" GB/s of the domain's pairs (the domain's low figure is "
                               f"{fold(outcome.suspects)}'s)", node=tray, observed=pair.busbw, unit="GB/s",
                               evidence=pair.evidence, profile=stamp)
        if mine is not None:
            node_extra.setdefault(tray, []).append(mine)
    return findings


def _inter_domain(outcomes: Sequence[DomainOutcome], hosts: Sequence[Host], catalog: ProfileCatalog,
                  options: EngineOptions, recorder: RunRecorder, deadline_at: Optional[float],
                  profile_of: Mapping[str, Profile]) -> list[Finding]:
    """One all_reduce over the first healthy tray of each domain, over InfiniBand (MNNVL and NVLS off)."""
    if len(outcomes) < 2:
        return []
    picks = []
    for outcome in outcomes:
        if outcome.first is None:
            continue  # a domain that did not run (one tray: a rack split, see nvlink.domain) is no fair member
        good = [t for t in outcome.domain.trays if t not in outcome.suspects and t not in outcome.inconclusive]
        if good:
            picks.append(good[0])
    if len(picks) < 2:
        return [Finding(CHECK_ID, Verdict.SKIP, "inter-domain all_reduce not run: fewer than two domains with a "
                        "healthy tray")]
    if len({profile_of[p].name for p in picks}) != 1:
        return [Finding(CHECK_ID, Verdict.SKIP, "inter-domain all_reduce not run: the domains' trays have different "
                        "profiles")]
    profile = profile_of[picks[0]]
    exp = multinode_expectation(profile)
    by_name = {h.name: h for h in hosts}
    runner = MultiNodeRunner([by_name[p] for p in picks], catalog, options, recorder, hosts, deadline_at,
                             extra_env=MNNVL_OFF, expectation=exp, low_bw_hint=IB_HINT,
                             evidence_prefix="nccl_domain_inter")
    run = runner.run_group(picks)
    verdict, summary = judge(run, exp)
    if verdict is Verdict.SKIP:
        summary = summary.replace(NO_FLOOR, f"{NO_FLOOR} (nccl.multinode_busbw_gbps)", 1)
    worst = max(run.assessments, key=lambda a: a.verdict.severity)
    return [Finding(CHECK_ID, verdict, f"inter-domain over InfiniBand ({len(picks)} domains, "
                    f"NCCL_MNNVL_ENABLE=0 NCCL_NVLS_ENABLE=0): {summary}", observed=run.busbw,
                    expected=worst.expected, unit="GB/s" if run.busbw is not None else "",
                    reason=worst.reason if verdict is Verdict.ERROR else None,
                    remediation=worst.remediation if verdict in (Verdict.FAIL, Verdict.ERROR) else Remediation.NONE,
                    evidence=run.evidence, profile=profile.stamp)]
