"""Power: each node's GPU power at idle and at the enforced limits, rolled up per rack and cluster against the
inventory's rack power budgets, with DCGM diag's power tests (Targeted Power, Pulse) cross-referenced. The per-GPU
limit against the profile stays in clocks.power_limit."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any, Mapping, Optional, Sequence

from nvdeploy.checks.common import SMI, smi_gate, split_gpus
from nvdeploy.checks.dcgm import test_key
from nvdeploy.checks.registry import CLUSTER_CHECKS, NodeContext, register
from nvdeploy.config.hostrange import fold
from nvdeploy.results import ErrorReason, Finding, NodeResult, Remediation, Verdict

NODE_CHECK = "power.node"
BUDGET_CHECK = "power.budget"
CLUSTER_CHECK = "power.cluster"
NO_RACK = "(no rack)"
_READINGS = re.compile(r"<(gpu_power_readings|power_readings)>(.*?)</\1>", re.S)
# Drivers up to 565 print <power_draw>; 570+ (DTD v13) print <instant_power_draw> and <average_power_draw> instead.
_DRAW_TAGS = ("power_draw", "instant_power_draw", "average_power_draw")
_DRAW_RES = tuple(re.compile(rf"<{tag}>\s*([0-9.]+)\s*W\s*</{tag}>") for tag in _DRAW_TAGS)

CLUSTER_CHECKS[BUDGET_CHECK] = (
    "Rolls up the power.node findings by the host var ``rack``: FAIL (TUNE) when a rack's summed GPU power "
    "limits exceed its ``rack_power_budget_w`` (a group var), PASS otherwise. See ``nvdeploy checks show power.node``.")
CLUSTER_CHECKS[CLUSTER_CHECK] = (
    "The cluster's GPU power at idle and at the enforced limits, in kW, per rack and in total, and every GPU whose "
    "DCGM power test (Targeted Power, Pulse) did not pass, named with the dcgm.diag_rN finding that judges it "
    "(always PASS: a record for the report; the FAIL is dcgm.diag_rN's). See ``nvdeploy checks show power.node``.")
# DCGM diag's power tests (normalised names, checks/dcgm.py test_key): Targeted Power at r3/r4, Pulse at r4.
POWER_TESTS = frozenset({"targeted_power", "pulse_test"})
# DCGM_FR_TARGET_POWER_MSG: "Max power of %.1f did not reach desired power minimum %s of %.1f for GPU %u".
_MAX_POWER = re.compile(r"Max power of ([0-9.]+) did not reach desired power minimum \S+ of ([0-9.]+)")


def idle_draw_w(xml_text: str) -> list[float]:
    """Each GPU's current board power draw from ``nvidia-smi -q -x`` (``gpu_power_readings`` on drivers >= 535,
    ``power_readings`` before; the module and memory readings are not the GPU's). A GPU whose draw reads N/A is
    left out, so the caller can tell the sum is incomplete."""
    draws = []
    for _, body in _READINGS.findall(xml_text):
        for draw_re in _DRAW_RES:
            match = draw_re.search(body)
            if match:
                draws.append(float(match.group(1)))
                break
    return draws


def dcgm_power_results(facts: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each GPU result of a DCGM power test in the node's diag runs, lowest level first: level, test, GPU,
    verdict (PASS/FAIL/WARN/SKIP), the check that judges it, and from a Targeted Power failure the power reached
    and the target (watts). Empty when no diag with a power test ran (quick and standard levels)."""
    out: list[dict[str, Any]] = []
    diag = facts.get("dcgm_diag") or {}
    for level, run in sorted(diag.items()):
        for test in getattr(run, "tests", ()):
            if test_key(test.name) not in POWER_TESTS:
                continue
            for res in test.results:
                entry: dict[str, Any] = {"level": level, "test": test.name, "gpu": res.gpu, "verdict": res.verdict,
                                         "check": f"dcgm.diag_r{level}"}
                match = _MAX_POWER.search(" ".join(res.messages or test.messages))
                if match:
                    entry["reached_w"], entry["target_w"] = float(match.group(1)), float(match.group(2))
                out.append(entry)
    return out


def describe_power_result(entry: Mapping[str, Any]) -> str:
    """'GPU2: r3 Targeted Power FAIL, 411.2 W of 630 W (dcgm.diag_r3)'."""
    where = f"GPU{entry['gpu']}: " if entry.get("gpu") is not None else ""
    watts = f", {entry['reached_w']:g} W of {entry['target_w']:g} W" if "reached_w" in entry else ""
    return f"{where}r{entry['level']} {entry['test']} {entry['verdict']}{watts} ({entry['check']})"


def _kw(watts: float) -> str:
    return f"{watts / 1000:.1f} kW"


@register(NODE_CHECK, collectors=(SMI,))
def power_node(ctx: NodeContext) -> list[Finding]:
    """Sums the node's GPU power from ``nvidia-smi -q -x``: the enforced power limits (the most the GPUs may
    draw) and the current draw (idle, when nothing runs). PASS records ``{gpus, limit_w, draw_w, rack,
    rack_budget_w}`` for the cluster stage; the per-GPU limit against the profile is ``clocks.power_limit``.

    DCGM power tests: when a ``dcgmi diag`` run with a power test (Targeted Power at r3/r4, Pulse at r4) is in the
    node's results, the summary and ``observed.dcgm_power`` list every GPU result that did not pass (with the power
    reached and the target from DCGM's "Max power of X did not reach desired power minimum ... of Y"), naming the
    ``dcgm.diag_rN`` finding that judges it. power.node does not FAIL for it: that GPU's FAIL is dcgm.diag_rN's,
    so it counts once in the verdict counts and the exit status; power.node shows it beside the node's power.

    Cluster stage: ``power.budget`` sums the limits of the nodes of each ``rack`` (host var) and FAILs (TUNE:
    lower the power limits, ``nvidia-smi -pl``, or move nodes) a rack whose sum exceeds its
    ``rack_power_budget_w`` (inventory var, usually on the rack's group); ``power.cluster`` records kW per rack
    and for the cluster at idle and at the limits (the report shows it with the cluster findings). ERROR naming a
    GPU whose limit could not be read (never counted as 0 W); FAIL (ISOLATE) for a lost GPU. SKIP when no GPU
    reports a power limit.
    """
    gated = smi_gate(ctx, NODE_CHECK)
    if gated:
        return gated
    split = split_gpus(ctx, NODE_CHECK, "power limit", ("power_limit_w",), required=False)
    if split.findings:
        return split.findings
    if not split.known:
        return [ctx.finding(NODE_CHECK, Verdict.SKIP, "GPUs do not report a power limit", collector=SMI)]
    limit = sum(g.power_limit_w for g in split.known)
    result = ctx.results.get(SMI)
    draws = idle_draw_w(result.text) if result is not None and result.ok else []
    draw: Optional[float] = round(sum(draws), 2) if len(draws) == len(split.known) else None
    rack = ctx.host_vars.get("rack")
    budget = ctx.host_vars.get("rack_power_budget_w")
    observed = {"gpus": len(split.known), "limit_w": round(limit, 2), "draw_w": draw,
                "rack": str(rack) if rack is not None else None,
                "rack_budget_w": float(budget) if budget is not None else None}
    now = f", drawing {draw:g} W now" if draw is not None else ", draw not reported"
    where = f" (rack {rack})" if rack is not None else ""
    tests = dcgm_power_results(ctx.facts)
    dcgm = ""
    if tests:
        # Cross-reference, not a second verdict: the failing GPU is dcgm.diag_rN's FAIL (one FAIL per cause, so
        # verdict counts and the exit status count it once); here it sits next to the node's power figures.
        bad = [t for t in tests if t["verdict"] != "PASS"]
        observed["dcgm_power"] = bad
        observed["dcgm_power_passed"] = len(tests) - len(bad)
        dcgm = ("; DCGM power tests: " + "; ".join(describe_power_result(t) for t in bad)) if bad else \
            f"; DCGM power tests passed ({len(tests)} GPU results)"
    return [ctx.finding(NODE_CHECK, Verdict.PASS,
                        f"{len(split.known)} GPUs: power limits {limit:g} W in total{now}{where}{dcgm}",
                        observed=observed, unit="W", collector=SMI)]


def _node_power(node: NodeResult) -> Optional[dict[str, Any]]:
    for finding in node.findings:
        if finding.check == NODE_CHECK and finding.verdict is Verdict.PASS and isinstance(finding.observed, dict):
            return finding.observed
    return None


def evaluate_power(nodes: Sequence[NodeResult],
                   racks_of: Optional[Mapping[str, Sequence[Any]]] = None) -> list[Finding]:
    """The cluster-stage findings (power.budget per rack with a budget, power.cluster); none without power.node.

    ``racks_of`` (host -> [rack, budget W or None], from the inventory's vars) names the rack's members that gave
    no power figure (unreachable, hung, interrupted): a sum without them proves nothing within budget, so such a
    rack is FAIL when its measured nodes alone exceed the budget and ERROR ``incomplete`` otherwise, never PASS."""
    racks: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    unmeasured: dict[str, list[str]] = defaultdict(list)
    declared: dict[str, set[float]] = defaultdict(set)  # budgets the inventory gives the unmeasured nodes
    for node in nodes:
        power = _node_power(node)
        if power is not None:
            racks[power.get("rack") or NO_RACK].append((node.name, power))
        elif racks_of and racks_of.get(node.name) and racks_of[node.name][0]:
            rack, budget = racks_of[node.name][0], racks_of[node.name][1]
            unmeasured[rack].append(node.name)
            if budget is not None:
                declared[rack].add(float(budget))
    if not racks and not any(declared.values()):
        return []
    findings: list[Finding] = []
    per_rack: dict[str, dict[str, Any]] = {}
    for rack in sorted(set(racks) | {r for r, b in declared.items() if b}):
        members = racks.get(rack, [])
        limit = sum(p["limit_w"] for _, p in members)
        draws = [p["draw_w"] for _, p in members]
        draw = sum(draws) if all(d is not None for d in draws) else None
        names = fold([n for n, _ in members]) or "no node measured"
        if members:
            per_rack[rack] = {"nodes": len(members), "gpus": sum(p["gpus"] for _, p in members),
                              "limit_w": round(limit, 2), "draw_w": round(draw, 2) if draw is not None else None}
        budgets = sorted({p["rack_budget_w"] for _, p in members if p.get("rack_budget_w") is not None}
                         | declared.get(rack, set()))
        if not budgets or rack == NO_RACK:
            continue
        budget = budgets[0]  # differing budgets on one rack: the smallest binds
        note = f" (budgets differ: {', '.join(f'{b:g}' for b in budgets)} W; the smallest applies)" \
            if len(budgets) > 1 else ""
        text = (f"rack {rack} ({names}): GPU power limits {_kw(limit)} against a budget of {_kw(budget)}"
                + (f", {_kw(draw)} at idle" if draw is not None else "") + note)
        missing = unmeasured.get(rack, [])
        if missing:
            text += f"; not measured: {fold(missing)} ({len(missing)} of {len(missing) + len(members)} nodes)"
        if limit > budget:
            over = limit - budget
            findings.append(Finding(BUDGET_CHECK, Verdict.FAIL, f"{text}: {over:g} W over; lower the GPU power limits "
                                    "(nvidia-smi -pl) or move nodes", observed=round(limit, 2),
                                    expected=f"<= {budget:g}", unit="W", remediation=Remediation.TUNE))
        elif missing:
            findings.append(Finding(BUDGET_CHECK, Verdict.ERROR, f"{text}: the rack's total is not known, so it is "
                                    "not proven within budget; re-validate the nodes not measured",
                                    observed=round(limit, 2), expected=f"<= {budget:g}", unit="W",
                                    reason=ErrorReason.INCOMPLETE))
        else:
            findings.append(Finding(BUDGET_CHECK, Verdict.PASS, text, observed=round(limit, 2),
                                    expected=f"<= {budget:g}", unit="W"))
    if not per_rack:
        return findings
    total_limit = sum(r["limit_w"] for r in per_rack.values())
    draws = [r["draw_w"] for r in per_rack.values()]
    total_draw = sum(draws) if all(d is not None for d in draws) else None
    parts = "; ".join(f"{rack}: {_kw(r['limit_w'])} at the limits"
                      + (f", {_kw(r['draw_w'])} idle" if r["draw_w"] is not None else "")
                      for rack, r in per_rack.items())
    tested = [(name, p) for members in racks.values() for name, p in members if "dcgm_power" in p]
    failures = [f"{name} {describe_power_result(t)}" for name, p in sorted(tested) for t in p["dcgm_power"]]
    dcgm = ""
    if tested:
        dcgm = (f"; DCGM power tests not passed: {'; '.join(failures)}" if failures else
                f"; DCGM power tests passed on {fold([name for name, _ in tested])}")
    observed: dict[str, Any] = {"limit_w": round(total_limit, 2),
                                "draw_w": round(total_draw, 2) if total_draw is not None else None, "racks": per_rack}
    if tested:
        observed["dcgm_power"] = failures
    findings.append(Finding(CLUSTER_CHECK, Verdict.PASS,
                            f"cluster GPU power: {_kw(total_limit)} at the limits"
                            + (f", {_kw(total_draw)} at idle" if total_draw is not None else "")
                            + f" ({sum(r['gpus'] for r in per_rack.values())} GPUs; {parts}){dcgm}",
                            observed=observed, unit="W"))
    return findings
