"""gpu.mig against a MIG layout (the host var ``mig_config``, mig-parted format): each selected GPU's MIG mode, GPU
instance profiles and their compute instances, from ``nvidia-smi -q -x`` and ``nvidia-smi mig -lgi`` / ``-lci``.

Read by :func:`nvdeploy.checks.clocks.gpu_mig` when a layout is named; pure apart from reading the layout file on
the controller (config/mig_config.py, already checked when the inventory was loaded).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Optional

from nvdeploy.checks.common import SMI, gpu_label
from nvdeploy.checks.gating import raw_gate
from nvdeploy.checks.registry import NodeContext
from nvdeploy.collect.mig_commands import MIG_LCI, MIG_LGI
from nvdeploy.config.mig_config import MigEntry, host_layout
from nvdeploy.config.yamlfile import ConfigError
from nvdeploy.results import ErrorReason, Finding, Remediation, Verdict

CHECK = "gpu.mig"
_EMPTY = ("No MIG-enabled devices found", "No GPU instances found", "No compute instances found")


def _counts(counter: Counter) -> str:
    if not counter:
        return "no instances"
    return ", ".join(f"{name} x{n}" for name, n in sorted(counter.items(), key=lambda kv: (-_size(kv[0]), kv[0])))


def _size(name: str) -> int:
    return int(name.split("g", 1)[0]) if name[:1].isdigit() else 0


def _listing(ctx: NodeContext, collector: str, what: str) -> tuple[Any, Optional[list[Finding]]]:
    gated = raw_gate(ctx, CHECK, collector, f"nvidia-smi mig {what}", "it comes with the NVIDIA driver")
    if gated:
        return None, gated
    facts = ctx.facts.get(collector)
    result = ctx.results[collector]
    if facts is None:
        return None, [ctx.finding(CHECK, Verdict.ERROR, f"nvidia-smi mig {what} gave nothing usable",
                                  reason=ErrorReason.UNPARSEABLE, collector=collector)]
    message = facts.message or ""
    if "Insufficient Permissions" in message:
        return None, [ctx.finding(CHECK, Verdict.ERROR, f"nvidia-smi mig {what}: {message} (set sudo: true for the "
                                  "host, or grant the MIG monitor capability)", reason=ErrorReason.SUDO,
                                  collector=collector)]
    if result.rc != 0 and not message.startswith(_EMPTY):
        first = message or (result.text + result.err_text).strip().splitlines()[:1]
        return None, [ctx.finding(CHECK, Verdict.ERROR, f"nvidia-smi mig {what} failed (exit {result.rc}): {first}",
                                  reason=ErrorReason.UNPARSEABLE, collector=collector)]
    if result.rc == 0 and not facts.tables:
        return None, [ctx.finding(CHECK, Verdict.ERROR, f"nvidia-smi mig {what}: no table in its output",
                                  reason=ErrorReason.UNPARSEABLE, collector=collector)]
    return facts, None


def layout_findings(ctx: NodeContext) -> list[Finding]:
    """The findings of gpu.mig for a host whose ``mig_config`` names a layout."""
    try:
        layout = host_layout(ctx.host_vars)
    except ConfigError as exc:
        return [ctx.finding(CHECK, Verdict.ERROR, f"MIG layout unreadable: {exc}", reason=ErrorReason.UNPARSEABLE)]
    assert layout is not None
    gis, gated = _listing(ctx, MIG_LGI, "-lgi")
    if gated:
        return gated
    cis, gated = _listing(ctx, MIG_LCI, "-lci")
    if gated:
        return gated
    findings: list[Finding] = []
    judged = 0
    for gpu in ctx.facts["smi"].gpus:
        if gpu.index is None:
            continue
        entry: Optional[MigEntry] = layout.for_gpu(gpu.index, gpu.pci_device_id)
        if entry is None and gpu.pci_device_id is None and any(e.device_filter for e in layout.entries):
            findings.append(ctx.finding(CHECK, Verdict.ERROR, f"{gpu_label(gpu)}: its PCI device ID is unknown, so "
                                        f"the device-filter of layout {layout.source} cannot be applied",
                                        gpu=gpu.index, reason=ErrorReason.INCOMPLETE, collector=SMI))
            continue
        if entry is None:
            continue
        judged += 1
        # MIG devices are compute instances: a GPU instance's full one carries its name (3g.40gb), a slice its own
        # (1c.3g.40gb), as mig-parted's mig-devices count them.
        found = Counter(c.name.removeprefix("MIG ") for c in cis.compute_instances if c.gpu == gpu.index)
        with_ci = {c.gpu_instance_id for c in cis.compute_instances if c.gpu == gpu.index}
        bare = sorted(i.instance_id for i in gis.instances if i.gpu == gpu.index and i.instance_id not in with_ci)
        want = Counter(dict(entry.instances)) if entry.enabled else Counter()
        problems = []
        if gpu.mig_mode is None:
            if entry.enabled:
                problems.append("MIG mode unknown or not supported, layout enables it")
        elif gpu.mig_mode is not entry.enabled:
            problems.append(f"MIG mode {'Enabled' if gpu.mig_mode else 'Disabled'}, expected "
                            f"{'Enabled' if entry.enabled else 'Disabled'}")
        if found != want:
            missing, extra = want - found, found - want
            detail = "; ".join(part for part in (f"missing {_counts(missing)}" if missing else "",
                                                 f"unexpected {_counts(extra)}" if extra else "") if part)
            problems.append(f"MIG devices: found {_counts(found)}, expected {_counts(want)} ({detail})")
        if bare:
            problems.append(f"GPU instance{'s' if len(bare) > 1 else ''} {', '.join(map(str, bare))} without a "
                            "compute instance (no CUDA device)")
        if problems:
            findings.append(ctx.finding(
                CHECK, Verdict.FAIL, f"{gpu_label(gpu)} differs from MIG layout {layout.source}: "
                + "; ".join(problems), observed=_counts(found) if gpu.mig_mode else "Disabled",
                expected=_counts(want) if entry.enabled else "Disabled", gpu=gpu.index,
                remediation=Remediation.TUNE, collector=MIG_LGI))
    if findings:
        return findings
    if not judged:
        return [ctx.finding(CHECK, Verdict.SKIP, f"MIG layout {layout.source} selects no GPU of this node")]
    return [ctx.finding(CHECK, Verdict.PASS, f"{judged} GPU(s) as MIG layout {layout.source} says",
                        observed=layout.name, expected=layout.name, collector=MIG_LGI)]
