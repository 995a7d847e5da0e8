"""GPU tuning actions (optimize): persistence, compute mode, power limit, application clocks, MIG mode.

Every probe is one ``nvidia-smi --query-gpu=... --format=csv,noheader,nounits`` (no root needed); settings go through
``nvidia-smi`` as root, for every GPU of the node. The value before and after is recorded per item; when the GPUs
of a node disagree the item shows each GPU's value (``GPU0=700.00,GPU1=560.00``).
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional

from nvdeploy.actions.base import Action, ActionContext, Cmd, Param, Probe, StepFailed, describe_failure, register
from nvdeploy.results import CommandResult

QUERY_FIELDS = ("index", "persistence_mode", "compute_mode", "power.limit", "power.default_limit", "power.min_limit",
                "power.max_limit", "clocks.applications.memory", "clocks.applications.graphics",
                "clocks.default_applications.memory", "clocks.default_applications.graphics", "mig.mode.current")
COMPUTE_MODES = {"DEFAULT": "Default", "EXCLUSIVE_PROCESS": "Exclusive_Process", "PROHIBITED": "Prohibited"}


SETTINGS_QUERY = ("gpu_settings", ("nvidia-smi", "--query-gpu=" + ",".join(QUERY_FIELDS),
                                   "--format=csv,noheader,nounits"))


def gpu_settings(ctx: ActionContext, result: Optional[CommandResult] = None) -> list[dict[str, str]]:
    """One dict per GPU with QUERY_FIELDS; StepFailed when nvidia-smi cannot answer."""
    result = result if result is not None else ctx.read(*SETTINGS_QUERY)
    if result.rc != 0:
        raise StepFailed(f"nvidia-smi cannot report GPU settings: {describe_failure(result)}", result)
    rows = []
    for line in result.text.splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) == len(QUERY_FIELDS):
            rows.append(dict(zip(QUERY_FIELDS, values)))
    if not rows:
        raise StepFailed("nvidia-smi listed no GPU", result)
    return rows


def summarize(rows: list[dict[str, str]], key: str) -> str:
    """The GPUs' common value, or ``GPU0=..,GPU1=..`` when they differ."""
    values = [r[key] for r in rows]
    if len(set(values)) == 1:
        return values[0]
    return ",".join(f"GPU{r['index']}={r[key]}" for r in rows)


def _label(rows: list[dict[str, str]], what: str) -> str:
    return f"{what} ({len(rows)} GPU{'s' if len(rows) != 1 else ''})"


def _watts(text: str) -> Optional[float]:
    try:
        return float(text)
    except ValueError:
        return None


@register
class Persistence(Action):
    """Persistence mode on every GPU. ``method: daemon`` (default, NVIDIA's recommendation) enables and starts
    nvidia-persistenced, which keeps it on across reboots; ``smi`` runs ``nvidia-smi -pm 1`` (lost at reboot)."""

    name = "gpu.persistence"
    params = (Param("enabled", "bool", default=True), Param("method", "choice", default="daemon",
                                                            choices=("daemon", "smi")))

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        settings, active_r, enabled_r = ctx.read_many([
            SETTINGS_QUERY, ("persistenced", ("systemctl", "is-active", "nvidia-persistenced")),
            ("persistenced_enabled", ("systemctl", "is-enabled", "nvidia-persistenced"))])
        rows = gpu_settings(ctx, settings)
        label = _label(rows, "persistence mode")
        current = {label: summarize(rows, "persistence_mode")}
        desired = {label: "Enabled" if p["enabled"] else "Disabled"}
        if p["method"] == "daemon" and p["enabled"]:
            active, enabled = active_r.text.strip(), enabled_r.text.strip()
            current["nvidia-persistenced"] = f"{enabled or 'not installed'}, {active or 'unknown'}"
            desired["nvidia-persistenced"] = "enabled, active"
        return Probe(current=current, desired=desired)

    def plan(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> list[Cmd]:
        if not p["enabled"]:
            return [Cmd("disable", ("systemctl", "disable", "--now", "nvidia-persistenced"), allow_fail=True),
                    Cmd("pm", ("nvidia-smi", "-pm", "0"))]
        if p["method"] == "daemon":
            return [Cmd("enable", ("systemctl", "enable", "--now", "nvidia-persistenced"))]
        return [Cmd("pm", ("nvidia-smi", "-pm", "1"))]


@register
class ComputeMode(Action):
    """The compute mode of every GPU (``nvidia-smi -c``): DEFAULT, EXCLUSIVE_PROCESS (one process per GPU, the
    usual choice under a scheduler) or PROHIBITED. Resets at reboot."""

    name = "gpu.compute_mode"
    params = (Param("mode", "choice", default="DEFAULT", choices=tuple(COMPUTE_MODES)),)

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        rows = gpu_settings(ctx)
        label = _label(rows, "compute mode")
        return Probe(current={label: summarize(rows, "compute_mode")}, desired={label: COMPUTE_MODES[p["mode"]]})

    def plan(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> list[Cmd]:
        return [Cmd("set", ("nvidia-smi", "-c", p["mode"]))]


@register
class PowerLimit(Action):
    """Every GPU's power limit (``nvidia-smi -pl``), in watts within the GPU's range, or ``default`` (the board's
    default limit: the reset). Resets at reboot."""

    name = "gpu.power_limit"
    params = (Param("watts", default="default", pattern=r"default|\d+(\.\d+)?",
                    doc="watts, or default"),)

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        rows = gpu_settings(ctx)
        label = _label(rows, "power limit W")
        first = rows[0]
        if _watts(first["power.limit"]) is None:
            return Probe(skip="the GPUs do not report a power limit")
        want = _watts(first["power.default_limit"]) if p["watts"] == "default" else float(p["watts"])
        low, high = _watts(first["power.min_limit"]), _watts(first["power.max_limit"])
        if want is None:
            return Probe(skip="the GPUs report no default power limit")
        if low is not None and high is not None and not low <= want <= high:
            return Probe(failure=f"power limit {want:g} W is outside the GPUs' range {low:g}-{high:g} W")
        return Probe(current={label: summarize(rows, "power.limit")}, desired={label: f"{want:.2f}"},
                     facts={"watts": want})

    def plan(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> list[Cmd]:
        return [Cmd("set", ("nvidia-smi", "-pl", f"{probe.facts['watts']:g}"))]


@register
class AppClocks(Action):
    """Application clocks of every GPU (``nvidia-smi -ac MEM,GRAPHICS`` in MHz), or ``default`` (``-rac``: the
    reset). Resets at reboot."""

    name = "gpu.app_clocks"
    params = (Param("clocks", default="default", pattern=r"default|\d+,\d+", doc="MEM,GRAPHICS MHz, or default"),)

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        rows = gpu_settings(ctx)
        if not re.fullmatch(r"\d+", rows[0]["clocks.applications.memory"]):
            return Probe(skip="the GPUs do not support application clocks")
        label = _label(rows, "application clocks MEM,GR MHz")
        for row in rows:
            row["app"] = f"{row['clocks.applications.memory']},{row['clocks.applications.graphics']}"
        default = f"{rows[0]['clocks.default_applications.memory']},{rows[0]['clocks.default_applications.graphics']}"
        return Probe(current={label: summarize(rows, "app")},
                     desired={label: default if p["clocks"] == "default" else p["clocks"]})

    def plan(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> list[Cmd]:
        if p["clocks"] == "default":
            return [Cmd("reset", ("nvidia-smi", "-rac"))]
        return [Cmd("set", ("nvidia-smi", "-ac", p["clocks"]))]


@register
class MigMode(Action):
    """MIG mode of every MIG-capable GPU (``nvidia-smi -mig 1|0``), as the profile's ``mig.enabled`` says. GPUs
    without MIG are skipped. Refused by the driver while processes use the GPU."""

    name = "gpu.mig"
    params = (Param("enabled", "bool", default=False),)

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        rows = [r for r in gpu_settings(ctx) if r["mig.mode.current"] in ("Enabled", "Disabled")]
        if not rows:
            return Probe(skip="no MIG-capable GPU")
        label = _label(rows, "MIG mode")
        return Probe(current={label: summarize(rows, "mig.mode.current")},
                     desired={label: "Enabled" if p["enabled"] else "Disabled"})

    def plan(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> list[Cmd]:
        return [Cmd("set", ("nvidia-smi", "-mig", "1" if p["enabled"] else "0"))]
