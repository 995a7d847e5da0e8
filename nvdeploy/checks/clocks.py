"""Clocks and thermals (throttle reasons, temperature, power limit) and MIG mode, from the GPU facts of
``nvidia-smi -q -x`` (no extra command), and the MIG layout where one is named (checks/mig_layout.py)."""

from __future__ import annotations

from nvdeploy.checks.common import SMI, gpu_label, smi_gate, split_gpus
from nvdeploy.checks.gating import section
from nvdeploy.checks.mig_layout import layout_findings
from nvdeploy.checks.registry import NodeContext, register
from nvdeploy.collect.mig_commands import MIG_LCI, MIG_LGI
from nvdeploy.results import ErrorReason, Finding, Remediation, Verdict

POWER_TOLERANCE_W = 1.0


@register("clocks.throttle", collectors=(SMI,))
def clocks_throttle(ctx: NodeContext) -> list[Finding]:
    """Reads each GPU's active clock-event (throttle) reasons from ``nvidia-smi -q -x``.

    PASS: no reason listed in the profile's ``throttle`` section is active. FAIL for an active reason listed in
    ``throttle.fail`` (by default hw_slowdown, hw_thermal_slowdown, hw_power_brake_slowdown: the GPU protects
    itself from heat or a power event), WARN for one in ``throttle.warn`` (sw_thermal_slowdown). Reasons in
    neither list (gpu_idle, sw_power_cap, applications_clocks_setting...) are normal operation.

    Remediation: INVESTIGATE cooling (fans, airflow, inlet temperature) and power delivery (PSU, BMC power
    brake); ISOLATE the node if it persists. SKIP when the profile has no ``throttle`` section. ERROR naming a GPU
    whose throttle reasons could not be read; FAIL (ISOLATE) for a lost GPU.
    """
    policy = section(ctx, "throttle")
    if not policy:
        return [ctx.finding("clocks.throttle", Verdict.SKIP, "the profile states no throttle policy")]
    gated = smi_gate(ctx, "clocks.throttle")
    if gated:
        return gated
    fail = set(policy.get("fail") or ())
    warn = set(policy.get("warn") or ())
    findings = []
    split = split_gpus(ctx, "clocks.throttle", "clock throttle reasons", (), required=False,
                       error_fields=("clocks_event_reasons_active",))
    for gpu in split.known:
        active = list(gpu.clocks_event_reasons_active)
        bad = [r for r in active if r in fail]
        soft = [r for r in active if r in warn and r not in fail]
        if bad or soft:
            verdict = Verdict.FAIL if bad else Verdict.WARN
            findings.append(ctx.finding(
                "clocks.throttle", verdict,
                f"{gpu_label(gpu)}: clocks throttled by {', '.join(bad + soft)}"
                + (f" at {gpu.temperature_c:g} C" if gpu.temperature_c is not None else ""),
                observed=", ".join(bad + soft), expected="no " + "/".join(sorted(fail | warn)), gpu=gpu.index,
                remediation=Remediation.INVESTIGATE if bad else Remediation.MONITOR, collector=SMI))
    findings.extend(split.findings)
    if findings:
        return findings
    return [ctx.finding("clocks.throttle", Verdict.PASS, "no GPU is throttled by a hardware or thermal slowdown",
                        observed="none", collector=SMI)]


@register("clocks.temperature", collectors=(SMI,))
def clocks_temperature(ctx: NodeContext) -> list[Finding]:
    """Reads each GPU's core temperature from ``nvidia-smi -q -x``.

    PASS: every GPU is at or below the profile's ``gpu.max_temperature_c``. FAIL (INVESTIGATE cooling) for a
    GPU above it. ERROR naming each GPU that did not report a temperature (FAIL, ISOLATE for a lost GPU); SKIP
    when the profile states no maximum.
    """
    limit = ctx.profile.gpu.max_temperature_c
    if limit is None:
        return [ctx.finding("clocks.temperature", Verdict.SKIP, "the profile states no maximum temperature")]
    gated = smi_gate(ctx, "clocks.temperature")
    if gated:
        return gated
    split = split_gpus(ctx, "clocks.temperature", "temperature", ("temperature_c",), required=True)
    findings = [ctx.finding("clocks.temperature", Verdict.FAIL,
                            f"{gpu_label(g)} at {g.temperature_c:g} C, above the {limit:g} C limit: check cooling",
                            observed=g.temperature_c, expected=f"<= {limit:g}", unit="C", gpu=g.index,
                            remediation=Remediation.INVESTIGATE, collector=SMI)
                for g in split.known if g.temperature_c > limit]
    findings.extend(split.findings)
    if findings:
        return findings
    known = [g.temperature_c for g in split.known]
    if not known:
        return [ctx.finding("clocks.temperature", Verdict.ERROR, "no GPU reported its temperature",
                            reason=ErrorReason.UNPARSEABLE, collector=SMI)]
    return [ctx.finding("clocks.temperature", Verdict.PASS, f"hottest GPU at {max(known):g} C (limit {limit:g} C)",
                        observed=max(known), expected=f"<= {limit:g}", unit="C", collector=SMI)]


@register("clocks.power_limit", collectors=(SMI,))
def clocks_power_limit(ctx: NodeContext) -> list[Finding]:
    """Reads each GPU's enforced power limit from ``nvidia-smi -q -x``.

    PASS: every GPU's power limit equals the profile's ``gpu.power_limit_w`` (within 1 W). WARN (TUNE:
    ``nvidia-smi -pl``, or ``nvdeploy optimize``) for a GPU capped lower or set higher: its throughput differs
    from its peers'. SKIP when the profile states no power limit or no GPU reports one; ERROR naming a GPU whose
    power limit could not be read or reads N/A while its peers report one; FAIL (ISOLATE) for a lost GPU.
    """
    expected = ctx.profile.gpu.power_limit_w
    if expected is None:
        return [ctx.finding("clocks.power_limit", Verdict.SKIP, "the profile states no power limit")]
    gated = smi_gate(ctx, "clocks.power_limit")
    if gated:
        return gated
    split = split_gpus(ctx, "clocks.power_limit", "power limit", ("power_limit_w",), required=False)
    findings = [ctx.finding("clocks.power_limit", Verdict.WARN,
                            f"{gpu_label(g)}: power limit {g.power_limit_w:g} W, expected {expected:g} W",
                            observed=g.power_limit_w, expected=expected, unit="W", gpu=g.index,
                            remediation=Remediation.TUNE, collector=SMI)
                for g in split.known if abs(g.power_limit_w - expected) > POWER_TOLERANCE_W]
    findings.extend(split.findings)
    if findings:
        return findings
    if not split.known:
        return [ctx.finding("clocks.power_limit", Verdict.SKIP, "GPUs do not report a power limit")]
    return [ctx.finding("clocks.power_limit", Verdict.PASS, f"every GPU's power limit is {expected:g} W",
                        observed=expected, expected=expected, unit="W", collector=SMI)]


@register("gpu.mig", collectors=(SMI, MIG_LGI, MIG_LCI), optional=(MIG_LGI, MIG_LCI))
def gpu_mig(ctx: NodeContext) -> list[Finding]:
    """Reads each GPU's current MIG mode from ``nvidia-smi -q -x``; where the host var ``mig_config`` names a MIG
    layout (mig-parted format, from ``mig_config_file``), also its GPU and compute instances
    (``nvidia-smi mig -lgi`` / ``-lci``, collected only on such hosts).

    Without a layout: PASS when every MIG-capable GPU is in the MIG mode the host var ``mig_enabled`` or else the
    profile's ``mig.enabled`` states (default: disabled, whole GPUs for training). FAIL (TUNE:
    ``nvidia-smi -i N -mig 0|1`` then a GPU reset) for a GPU in the other mode: NCCL and DCGM diagnostics do not
    run across MIG instances. SKIP when no GPU supports MIG and none is expected. ERROR naming a GPU whose MIG mode
    could not be read, or reads N/A while its peers report one; FAIL (ISOLATE) for a lost GPU.

    With a layout: PASS when every GPU the layout selects has its MIG mode and exactly its GPU instance profiles
    and counts, each instance with a compute instance. FAIL (TUNE: ``nvdeploy optimize --tags mig`` applies the
    layout) per GPU that differs, naming the GPU and what differs (mode, expected vs found profiles and counts, an
    instance without a compute instance). ERROR when a listing did not run, failed or needs root (``sudo: true``),
    or a GPU's PCI device ID is unknown where the layout filters on it. GPUs the layout does not select are not
    judged (mig-parted leaves them alone too).
    """
    # The host var mig_enabled overrides the profile, as it does for optimize's mig step.
    override = ctx.host_vars.get("mig_enabled")
    want = override if isinstance(override, bool) else bool(section(ctx, "mig").get("enabled", False))
    gated = smi_gate(ctx, "gpu.mig")
    if gated:
        return gated
    if ctx.host_vars.get("mig_config"):
        return layout_findings(ctx)
    gpus = ctx.facts["smi"].gpus
    split = split_gpus(ctx, "gpu.mig", "MIG mode", ("mig_mode",), required=False)
    capable = split.known
    word = "Enabled" if want else "Disabled"
    if not capable and split.findings:
        return split.findings
    if not capable:
        if want:
            return [ctx.finding("gpu.mig", Verdict.FAIL, "the profile expects MIG enabled but no GPU supports MIG",
                                observed="N/A", expected=word, remediation=Remediation.ISOLATE, collector=SMI)]
        return [ctx.finding("gpu.mig", Verdict.SKIP, "GPUs do not support MIG")]
    wrong = [g for g in capable if g.mig_mode is not want]
    if wrong:
        labels = ", ".join(gpu_label(g) for g in wrong) if len(wrong) <= 3 else "all" if len(wrong) == len(gpus) \
            else ", ".join(f"GPU{g.index}" for g in wrong)
        actual = "Enabled" if not want else "Disabled"
        return [ctx.finding("gpu.mig", Verdict.FAIL,
                            f"MIG mode {actual} on {len(wrong)} of {len(gpus)} GPUs ({labels}); expected {word}",
                            observed=actual, expected=word, gpu=wrong[0].index if len(wrong) == 1 else None,
                            remediation=Remediation.TUNE, collector=SMI), *split.findings]
    if split.findings:
        return split.findings
    return [ctx.finding("gpu.mig", Verdict.PASS, f"MIG mode {word} on every GPU", observed=word, expected=word,
                        collector=SMI)]
