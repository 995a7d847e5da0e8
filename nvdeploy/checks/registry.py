"""Check declaration, the catalog built from it, and the per-node context every check reads from."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from nvdeploy.config.profiles import Profile
from nvdeploy.results import CommandResult, ErrorReason, Finding, Remediation, Verdict


@dataclass(frozen=True)
class NodeContext:
    """What a check may look at: the node's name and vars, its profile, raw results and parsed facts."""

    node: str
    host_vars: Mapping[str, Any]
    profile: Profile
    results: Mapping[str, CommandResult]
    facts: Mapping[str, Any]
    evidence: Mapping[str, str] = field(default_factory=dict)

    def finding(self, check: str, verdict: Verdict, summary: str, *, observed: Any = None, expected: Any = None,
                unit: str = "", gpu: Optional[int] = None, reason: Optional[ErrorReason] = None,
                remediation: Remediation = Remediation.NONE, collector: Optional[str] = None) -> Finding:
        return Finding(check=check, verdict=verdict, summary=summary, node=self.node, observed=observed,
                       expected=expected, unit=unit, gpu=gpu, reason=reason, remediation=remediation,
                       evidence=self.evidence_for(collector), profile=self.profile.stamp)

    def evidence_for(self, collector: Optional[str]) -> Optional[str]:
        """The evidence file of ``collector``; GPU facts point at whichever source supplied them."""
        if collector == "nvidia_smi_xml":
            collector = self.facts.get("smi_source", collector)
        return self.evidence.get(collector) if collector else None


CheckFunction = Callable[[NodeContext], Sequence[Finding]]


@dataclass(frozen=True)
class Check:
    id: str
    domain: str
    collectors: tuple[str, ...]
    function: CheckFunction
    doc: str
    # Of ``collectors``, those read only to say more (the time since boot), never to judge: a pasted output that
    # lacks them is still judged (``nvdeploy parse``), and the finding says what was not there.
    optional: tuple[str, ...] = ()

    def __call__(self, ctx: NodeContext) -> list[Finding]:
        return list(self.function(ctx))


# The attribute that marks a check function (set by :func:`register`, read by :func:`build_catalog`).
_MARK = "__nvdeploy_check__"


def register(check_id: str, collectors: Sequence[str] = (),
             optional: Sequence[str] = ()) -> Callable[[CheckFunction], CheckFunction]:
    """Declare ``function`` the check ``check_id`` (``domain.name``) reading ``collectors`` (``optional``: those of
    them it judges without). It only marks the function: the catalog is built from an explicit list of modules
    (:func:`build_catalog`), never on import."""
    if not set(optional) <= set(collectors):
        raise ValueError(f"{check_id}: optional collectors {sorted(set(optional) - set(collectors))} not collected")

    def wrap(function: CheckFunction) -> CheckFunction:
        setattr(function, _MARK, Check(check_id, check_id.split(".", 1)[0], tuple(collectors), function,
                                       inspect.cleandoc(function.__doc__ or ""), tuple(optional)))
        return function

    return wrap


def declared_checks(module: ModuleType) -> list[Check]:
    """The checks ``module`` defines, in the order it defines them: its marked functions, and those it keeps in a
    module-level tuple (checks made in a loop). Functions it imports from another module are not its own."""
    out: dict[int, Check] = {}  # by identity: a function kept under two names is one check
    for value in vars(module).values():
        for item in (value if isinstance(value, tuple) else (value,)):
            check = getattr(item, _MARK, None) if callable(item) else None
            if isinstance(check, Check) and getattr(item, "__module__", None) == module.__name__:
                out.setdefault(id(check), check)
    return list(out.values())


def build_catalog(modules: Iterable[ModuleType]) -> dict[str, Check]:
    """The check catalog, by id, from ``modules`` in order; an id defined twice is a programming error."""
    catalog: dict[str, Check] = {}
    for module in modules:
        for check in declared_checks(module):
            if check.id in catalog:
                raise ValueError(f"duplicate check id {check.id!r}")
            catalog[check.id] = check
    return catalog


# Checks that run once over the cluster after every node's own checks (the engine's cluster stage), by id.
# A level may list them like node checks; they have no per-node collectors.
CLUSTER_CHECKS: dict[str, str] = {
    "nccl.multinode": inspect.cleandoc("""Runs nccl-tests ``all_reduce_perf -b 8G -e 8G -g 1 -c 1`` with mpirun from a
        launcher node across every node that passed its own checks (``--nccl-pattern``: ``bisect``, the default, runs
        all nodes at once and splits a low set until the bad node is named; ``all`` runs them at once only;
        ``pairwise`` runs disjoint pairs in parallel rounds). Hosts from the inventory, ``mpirun --timeout``, NCCL
        environment from ``nccl_env``, ``NCCL_ALGO=RING`` for 2-node runs, and ``NCCL_MNNVL_ENABLE=0
        NCCL_NVLS_ENABLE=0`` on trays of a multi-node NVLink domain (NVL72), so the run between trays goes over
        InfiniBand, which this check judges (nccl.domain measures the NVLink side). PASS: busbw at 8 GiB >= the
        profile's ``nccl.multinode_busbw_gbps`` x ``floor_pct``, #wrong 0. FAIL on the localised node(s) and the
        cluster; ERROR (inconclusive) on every participant when a failing set was not localised. No round starts
        after the global ``--deadline`` (ERROR not_run), a round's timeouts end by it, and a bisection it stops
        names nobody. Remediation: ISOLATE the named node and check its InfiniBand ports and cables."""),
    "nccl.domain": inspect.cleandoc("""nccl-tests all_reduce across each multi-node NVLink domain (NVL72 rack), on
        profiles with ``nvlink_domain`` (GB200/GB300 NVL72); nothing elsewhere.
        For each domain (the trays whose GPUs registered with one clusterUuid + cliqueId; named by their ``rack``),
        one mpirun of nccl-tests ``all_reduce_perf -b 8G -e 8G -g 1 -c 1`` over its trays that passed their own
        checks, one rank per GPU, ``NCCL_MNNVL_ENABLE=1 NCCL_NVLS_ENABLE=1`` and NCCL's own algorithm (no
        ``NCCL_ALGO=RING``, not even on two trays); the domains run in parallel, each on its own. PASS: busbw at 8 GiB
        >= the profile's ``nvlink_domain.all_reduce_busbw_gbps`` x ``floor_pct`` (gb200-nvl72: 840 x 95% = 798 GB/s,
        from a published full-rack run at 835-847 GB/s), #wrong 0. The floor holds for a run of the size its figure
        was measured on (``all_reduce_ranks``, default the whole domain: 72 ranks) only, as busbw depends on the
        group size and NCCL's algorithm for it: a domain short of trays or with failed trays runs over the healthy
        ones, says which were left out and is SKIP with its figure. A domain below its floor is localised by
        comparing pairs of its trays with each other: a pair below 90% of the pairs' median is low and each of its
        trays is re-tested with a tray of a good pair; FAIL on the tray low again and the domain, PASS (cleared) on
        its partner and the others, ERROR (inconclusive) on the trays of a low pair the re-tests cleared or when no
        pair is low. With more than one domain, one more all_reduce over one healthy tray per
        domain with ``NCCL_MNNVL_ENABLE=0 NCCL_NVLS_ENABLE=0`` (InfiniBand) against ``nccl.multinode_busbw_gbps``.
        SKIP "no floor in the profile" with the measured figure where the profile states no floor (gb300-nvl72:
        no public figure), never PASS. It groups what nvlink.fabric read: without it (``--checks nccl.domain`` alone)
        it SKIPs, saying so. The global ``--deadline`` holds as for nccl.multinode. Remediation: ISOLATE
        the named tray, check its NVLink cabling and cartridges and the switch trays (NVIDIA GB200 NVL Multi-Node
        Tuning Guide), then reset it.

        Sources: a GB200 NVL72 full rack (72 ranks) at 834.57-846.82 GB/s all_reduce busbw from 4 to 8 GiB
        (coreweave/nccl-tests pull request 43); NCCL_MNNVL_ENABLE and NCCL_NVLS_ENABLE from NCCL's environment
        variables documentation."""),
    "nvloom.domain": inspect.cleandoc("""NVIDIA's nvloom (``nvloom_cli``) across each multi-node NVLink domain (NVL72
        rack), on profiles with ``nvlink_domain``; nothing elsewhere. The domains are nccl.domain's (the trays whose
        GPUs registered with one clusterUuid + cliqueId, those that passed their own checks); per domain one mpirun
        from its first tray, one rank per GPU, of ``nvloom_cli -t bisect_device_to_device_write_sm`` (host var
        ``nvloom_testcases``; ``nvloom_dir`` its folder), timeout ``nvloom_timeout`` (300 s) and the global
        ``--deadline``; domains in parallel. PASS: every testcase done, every rank reported, no GPU without a
        measurement and no row below 90% of the median of its testcase's rows (nvloom states no absolute figure).
        A bisect row ``i->peer`` is a pair (GPU i writes to GPU i + N/2, and the row ``peer->i`` back), so a low
        pair is re-tested with ``nvloom_cli -t gpu_to_rack_device_to_device_unidir_write_sm`` (each GPU against
        random peers, the median kept: nvloom's localising testcase) before a tray is named. FAIL naming the tray
        and GPU low in both (ISOLATE), never its partner, or with no measurement, or the testcase nvloom stopped on;
        ERROR (not localised) on the two trays of a low pair the re-test cleared or could not run. nvloom_cli
        absent (exit 127, mpirun cannot find it): one ERROR not_run of the run saying how to get it, never PASS;
        a run cut off or short of ranks: ERROR.
        Remediation: check the named tray's NVLink cabling and cartridges and the switch trays, then reset it.

        Sources: github.com/NVIDIA/nvloom README (bisect for a quick test, gpu-to-rack for localising, one process
        per GPU) and its print statements (cli/util.cpp, cli/util.h, cli/nvloom_cli.cpp, cli/testcases.cpp at commit
        2e7b742); no public capture of a real run was found."""),
    "dcgm.mndiag": inspect.cleandoc("""DCGM's multi-node diagnostic (``dcgmi mndiag``, DCGM 4.3+, mnubergemm on
        GB200/GB300 NVL) across each multi-node NVLink domain, on profiles with ``nvlink_domain``; nothing elsewhere.
        The domains are nccl.domain's; per domain one ``dcgmi mndiag --hostList '<tray>;<tray>;...' --json`` on its
        first healthy tray (the head node), ``--parameters`` from the host var ``mndiag_parameters``, timeout
        ``mndiag_timeout`` (900 s) and the global ``--deadline``; domains in parallel. PASS: every test Pass and
        every GPU's result Pass, every host asked in the result. FAIL on the tray and GPU DCGM reports Fail, with
        its message (ISOLATE); Warn is WARN; a run DCGM could not complete (runtime_error, an MPI error), Skip/Not
        Run or hosts missing is ERROR. dcgmi or its mndiag absent (exit 127, a DCGM before 4.3): ERROR not_run on
        the domain's trays saying how to get it, never PASS.
        Remediation: drain the named tray, run dcgmi diag -r 3 on it and check its NVLink cabling.

        Sources: DCGM's multi-node diagnostics documentation (dcgmi mndiag, --hostList, DCGM 4.3+, GB200/GB300
        NVL) and the JSON layout of dcgmi/MnDiag.cpp (NVIDIA/DCGM 4.6.0); no public capture of a real run was
        found."""),
}
