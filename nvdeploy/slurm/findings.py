"""Findings from what Slurm says about a node (pure): its GRES GPU count against the profile, and its state."""

from __future__ import annotations

from typing import Optional

from nvdeploy.results import Finding, Remediation, Verdict
from nvdeploy.slurm.nodes import SlurmNode

GRES_CHECK = "slurm.gres"


def gres_finding(node: SlurmNode, expected_gpus: Optional[int], profile_stamp: str = "") -> Finding:
    """``slurm.gres``: Slurm schedules the GPUs its GRES says the node has. A count that disagrees with the
    profile (gpu:7 on an 8-GPU SKU) means jobs get the wrong GPUs, or a node Slurm thinks has none."""
    count = node.gpus
    if expected_gpus is None:
        return Finding(GRES_CHECK, Verdict.SKIP, "no profile GPU count to compare with", node=node.name,
                       observed=node.gres or None)
    if count is None:
        return Finding(GRES_CHECK, Verdict.FAIL, f"Slurm lists no GPU GRES for this node (Gres={node.gres or 'none'})"
                       f"; the profile expects {expected_gpus}", node=node.name, observed=0, expected=expected_gpus,
                       unit="GPUs", remediation=Remediation.INVESTIGATE, profile=profile_stamp)
    if count != expected_gpus:
        return Finding(GRES_CHECK, Verdict.FAIL, f"Slurm's GRES {node.gres} gives {count} GPUs; the profile expects "
                       f"{expected_gpus} (fix gres.conf/slurm.conf, or the node lost GPUs)", node=node.name,
                       observed=count, expected=expected_gpus, unit="GPUs", remediation=Remediation.INVESTIGATE,
                       profile=profile_stamp)
    kind = f" ({node.gpu_type})" if node.gpu_type else ""
    return Finding(GRES_CHECK, Verdict.PASS, f"Slurm's GRES {node.gres}: {count} GPUs{kind}, as the profile expects",
                   node=node.name, observed=count, expected=expected_gpus, unit="GPUs", profile=profile_stamp)
