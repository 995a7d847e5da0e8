"""How long a validation run can take at worst, from its own limits: the figure a maintenance reservation must
cover (``--maintenance`` shorter than it is refused before anything changes).

Per node: the connect timeout, the light batch (its longest command), then each heavy command one after the
other (its own limit: ``dcgm_timeout``, ``nccl_timeout``), each batch with the kill grace and the srun step's
start allowance. Nodes run ``forks`` at a time (``--via slurm``: all in one step). Then the cluster stages
(multi-node nccl-tests: a round per bisection step; GPUDirect pairs), and the scheduler steps at the end. With
``--deadline`` the engine stops everything there, so the deadline (plus that end) is the bound instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

# Per batch: timeout(1)'s kill grace, the srun step's slack and its --immediate wait (generous for SSH too).
BATCH_OVERHEAD_S = 45.0
# After validation, inside the reservation: the node states read again, drains/resumes, the reports.
CLOSE_S = 60.0
TIMEOUT_VARS = ("command_timeout", "dcgm_timeout", "nccl_timeout", "container_timeout", "connect_timeout",
                "sudo", "gpudirect_timeout", "burnin_interval")


@dataclass(frozen=True)
class Budget:
    seconds: float
    detail: str


def _node_s(host: Any, catalog: Any, checks: Sequence[str], connect_s: float,
            burn_in_s: Optional[float] = None, burn_in_interval_s: Optional[float] = None) -> tuple[float, str]:
    from nvdeploy.checks import CHECKS
    from nvdeploy.collect.burnin_commands import COLLECTOR_NAMES, burnin_batches, burnin_specs
    from nvdeploy.collect.catalog import light_specs, specs_for

    profile = catalog.get(host.profile) if host.profile else None
    needed = [c for check in checks if check in CHECKS for c in CHECKS[check].collectors]
    light = light_specs(host.vars, needed, profile)
    heavy = [s for s in specs_for(needed, host.vars, heavy=True, profile=profile) if s.name not in COLLECTOR_NAMES]
    # The burn-in's sampler and load run side by side in one batch (runner/engine.py): counted once, at the longer
    # limit, for the run's duration, then its kernel log; without --burn-in they are not run at all.
    if burn_in_s is not None and any(name in COLLECTOR_NAMES for name in needed):
        for batch in burnin_batches(burnin_specs(host.vars, profile, burn_in_s, burn_in_interval_s)):
            heavy.append(max(batch, key=lambda s: s.timeout_s))
    connect = float(host.vars.get("connect_timeout", connect_s))
    total = connect + (max((s.timeout_s for s in light), default=0.0) + BATCH_OVERHEAD_S if light else 0.0)
    total += sum(s.timeout_s + BATCH_OVERHEAD_S for s in heavy)
    parts = [f"{s.name} {s.timeout_s:g} s" for s in sorted(heavy, key=lambda s: -s.timeout_s)[:3]]
    return total, ", ".join(parts) or "light checks only"


def worst_case(hosts: Sequence[Any], catalog: Any, checks: Sequence[str], forks: int, connect_s: float,
               deadline_s: Optional[float], pattern: str = "bisect", via_slurm: bool = False,
               burn_in_s: Optional[float] = None, burn_in_interval_s: Optional[float] = None) -> Budget:
    """The run's worst-case duration in seconds, and what it is made of (for the refusal message); ``burn_in_s``:
    validate --burn-in's duration (its batch is counted per node)."""
    if deadline_s is not None:
        return Budget(deadline_s + BATCH_OVERHEAD_S + CLOSE_S, f"--deadline {deadline_s:g} s")
    per_node: dict[tuple, tuple[float, str]] = {}
    longest, why = 0.0, "no node"
    for host in hosts:
        key = (host.profile, tuple(str(host.vars.get(k)) for k in TIMEOUT_VARS))
        if key not in per_node:
            per_node[key] = _node_s(host, catalog, checks, connect_s, burn_in_s, burn_in_interval_s)
        if per_node[key][0] > longest:
            longest, why = per_node[key]
    waves = 1 if via_slurm else math.ceil(len(hosts) / max(1, forks))
    total = longest * max(1, waves)
    detail = f"per node up to {longest / 60:.0f} min ({why})" + (f" x {waves} waves of --forks" if waves > 1 else "")
    stages = _stages_s(hosts, checks, pattern, catalog)
    if stages:
        total += stages
        detail += f" + cluster stages up to {stages / 60:.0f} min"
    return Budget(total + CLOSE_S, detail)


def _stages_s(hosts: Sequence[Any], checks: Sequence[str], pattern: str, catalog: Any = None) -> float:
    from nvdeploy.collect.stage_limits import MPIRUN_GRACE_S
    from nvdeploy.collect.stage_limits import NCCL_TIMEOUT_S as NCCL_S

    total = 0.0
    n = max(2, len(hosts))
    first = hosts[0].vars if hosts else {}
    if "nccl.multinode" in checks:
        rounds = 1 if pattern == "all" else 1 + 2 * math.ceil(math.log2(n))
        total += rounds * (float(first.get("nccl_timeout", NCCL_S)) + MPIRUN_GRACE_S)
    if "nccl.domain" in checks and _has_nvlink_domain(hosts, catalog):
        # Domains run in parallel: one domain's bisection (trays per domain from the profile) and the inter-domain run.
        trays = max(2, min(n, 18))
        rounds = 1 + 2 * math.ceil(math.log2(trays)) + 1
        total += rounds * (float(first.get("nccl_timeout", NCCL_S)) + MPIRUN_GRACE_S)
    if "nvloom.domain" in checks and _has_nvlink_domain(hosts, catalog):
        from nvdeploy.collect.stage_limits import NVLOOM_TIMEOUT_S as NVLOOM_S

        # One nvloom_cli run per domain, the domains in parallel.
        total += float(first.get("nvloom_timeout", NVLOOM_S)) + MPIRUN_GRACE_S
    if "dcgm.mndiag" in checks and _has_nvlink_domain(hosts, catalog):
        from nvdeploy.collect.stage_limits import MNDIAG_TIMEOUT_S as MNDIAG_S

        total += float(first.get("mndiag_timeout", MNDIAG_S)) + MPIRUN_GRACE_S
    if "rdma.gpudirect" in checks:
        from nvdeploy.collect.stage_limits import GPUDIRECT_SERVER_EXTRA_S as SERVER_EXTRA_S
        from nvdeploy.collect.stage_limits import GPUDIRECT_TIMEOUT_S as RDMA_S

        total += (n - 1) * (float(first.get("gpudirect_timeout", RDMA_S)) + SERVER_EXTRA_S)
    return total


def _has_nvlink_domain(hosts: Sequence[Any], catalog: Any = None) -> bool:
    """Whether some host's profile has an NVLink domain (nccl.domain runs only there); a profile that cannot be
    read counts, so the budget errs long."""
    if catalog is None:
        from nvdeploy.config.profiles import ProfileCatalog

        catalog = ProfileCatalog()
    for host in hosts:
        name = (getattr(host, "vars", None) or {}).get("profile")
        if not name:
            continue
        try:
            if catalog.get(str(name)).nvlink_domain is not None:
                return True
        except Exception:  # noqa: BLE001 - an unknown profile: count the stage rather than under-book
            return True
    return False


def minutes(seconds: float) -> str:
    return f"{math.ceil(seconds / 60)}m"
