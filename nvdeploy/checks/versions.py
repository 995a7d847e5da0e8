"""The node's GPU software stack versions, recorded for the cross-node consistency checks (checks/cluster.py)."""

from __future__ import annotations

from nvdeploy.checks.registry import NodeContext, register
from nvdeploy.results import Finding, Verdict

COMPONENTS = (("driver", "driver_version"), ("CUDA", "cuda_version"), ("DCGM", "dcgm_version"),
              ("OFED", "ofed_version"), ("fabric manager", "fabricmanager_version"), ("NCCL", "nccl_version"))


@register("system.versions", collectors=("dcgm_version", "ofed_info", "fabricmanager_version"))
def system_versions(ctx: NodeContext) -> list[Finding]:
    """Runs ``dcgmi --version``, ``ofed_info -s`` and ``nv-fabricmanager --version`` (driver and CUDA come from
    nvidia-smi, NCCL from nccl-tests when it ran).

    PASS: records the versions found (a component that is not installed is listed as such; the checks that need
    it say so). Never FAIL here: the cluster-level checks ``cuda.consistency``, ``dcgm.consistency``,
    ``nccl.consistency``, ``ofed.consistency`` and ``fabric.consistency`` FAIL the nodes whose version differs
    from the rest (folded host ranges). SKIP when no version could be read at all.
    """
    smi = ctx.facts.get("smi")
    nccl = ctx.facts.get("nccl")
    found = {
        "driver_version": smi.driver_version if smi is not None else None,
        "cuda_version": smi.cuda_version if smi is not None else None,
        "dcgm_version": ctx.facts.get("dcgm_version"),
        "ofed_version": ctx.facts.get("ofed_version"),
        "fabricmanager_version": ctx.facts.get("fabricmanager_version"),
        "nccl_version": nccl.nccl_version if nccl is not None else None,
    }
    known = {k: v for k, v in found.items() if v}
    if not known:
        return [ctx.finding("system.versions", Verdict.SKIP, "no software version could be read")]
    parts = [f"{label} {found[key]}" for label, key in COMPONENTS if found[key]]
    missing = [label for label, key in COMPONENTS[2:5] if not found[key]]
    summary = ", ".join(parts) + (f" ({', '.join(missing)}: not found)" if missing else "")
    return [ctx.finding("system.versions", Verdict.PASS, summary, observed=known, collector="dcgm_version")]
