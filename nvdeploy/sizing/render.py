"""The readable table of ``nvdeploy size``: one row per SKU, then each SKU's notes."""

from __future__ import annotations

from typing import Any, Optional

from nvdeploy.sizing.solve import Estimate


def _fmt(value: Optional[float], style: str = "g") -> str:
    if value is None:
        return "-"
    if style == "int":
        return f"{value:,.0f}"
    if style == "1":
        return f"{value:,.1f}"
    return f"{value:.3g}"


def render_table(inputs: dict[str, Any], estimates: list[Estimate]) -> str:
    head = ["profile", "GPUs", "nodes", "fits", "min GPUs", "GB/GPU", "usable", "GPU-hours", "days", "cost USD", "MWh",
            "all-reduce s"]
    rows = []
    for e in estimates:
        rows.append([e.profile, _fmt(e.gpus, "int"), _fmt(e.extra.get("nodes"), "int"),
                     {True: "yes", False: "NO", None: "-"}[e.fits],
                     _fmt(e.min_gpus, "int"), _fmt(e.memory_gb_per_gpu, "1"),
                     _fmt(e.extra.get("usable_gb_per_gpu"), "1"), _fmt(e.gpu_hours, "int"), _fmt(e.days, "1"),
                     _fmt(e.cost_usd, "int"), _fmt(e.energy_mwh, "1"), _fmt(e.allreduce_s_per_step)])
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    lines = [_summary(inputs), ""]
    for row in [head, *rows]:
        lines.append("  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in
                               enumerate(zip(row, widths))).rstrip())
    for e in estimates:
        if e.notes:
            lines.append("")
            lines.append(f"{e.profile}:")
            lines.extend(f"  - {note}" for note in e.notes)
    return "\n".join(lines) + "\n"


def human(count: float) -> str:
    """70.55e9 -> '70.55B', 15e12 -> '15T': counts the way the options take them."""
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if count >= scale:
            return f"{count / scale:.4g}{suffix}"
    return f"{count:g}"


def _summary(inputs: dict[str, Any]) -> str:
    model = inputs.get("model") or "model"
    params = human(inputs["params"])
    if inputs.get("inference"):
        return (f"{model} ({params} parameters), inference at {inputs['precision']}, context "
                f"{inputs['context']}, batch {inputs['batch']}")
    return (f"{model} ({params} parameters), training on {human(inputs['tokens'])} tokens at "
            f"{inputs['precision']}, MFU {inputs['mfu']:g}, {inputs['optimizer']}, sharding {inputs['sharding']}, "
            f"seq {inputs['seq_len']} x micro-batch {inputs['micro_batch']}"
            f"{', activation checkpointing' if inputs['activation_checkpointing'] else ''}"
            + (", eager attention (scores stored)" if inputs.get("attention") == "eager" else
               ", memory-efficient attention (FlashAttention; --attention eager to store the scores)")
            + (f"; measured figures from run {inputs['run']['run_id']}" if inputs.get("run") else ""))
