"""DCGM checks: ``dcgmi discovery -l`` GPU count, ``dcgmi diag -r 1|2|3|4`` per-GPU per-test verdicts, and
``dcgmi health`` (the background health watches) per GPU and system.

DCGM not installed (``dcgmi`` exit 127) or nv-hostengine not running is ERROR with that reason, never FAIL and
never PASS. The diag level is chosen by the check: ``dcgm.diag_r2`` reads collector ``dcgm_diag_r2`` and so on.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from nvdeploy.checks.gating import first_line, raw_gate
from nvdeploy.checks.registry import CheckFunction, NodeContext, register
from nvdeploy.collect.datacenter import DCGM_GEMM, DCGM_TIMEOUTS, dcgm_diag_collector
from nvdeploy.results import ErrorReason, Finding, Remediation, Verdict

DISCOVERY = "dcgm_discovery"
HEALTH = "dcgm_health"
HEALTH_AFTER = "dcgm_health_after"
NOT_INSTALLED = "DCGM is not installed (install datacenter-gpu-manager and enable nvidia-dcgm/nv-hostengine)"
HOSTENGINE_DOWN = ("nv-hostengine is not running: dcgmi cannot reach it (systemctl enable --now nvidia-dcgm, or "
                   "start nv-hostengine)")
# The tests each level must run, by normalised name (DCGM 3.x display names and DCGM 4.x plugin names both map
# here). A required test that was skipped, or is missing from the output, is ERROR: it was not proven to pass.
REQUIRED_TESTS: dict[int, frozenset[str]] = {
    1: frozenset(),
    2: frozenset({"pcie", "memory"}),
    3: frozenset({"pcie", "memory", "diagnostic", "targeted_stress", "targeted_power", "memory_bandwidth"}),
    4: frozenset({"pcie", "memory", "diagnostic", "targeted_stress", "targeted_power", "memory_bandwidth",
                  "memtest", "pulse_test"}),
}
_ALIASES = {"gpu_memory": "memory", "pcie_bandwidth": "pcie", "sm_stress": "targeted_stress", "pulse": "pulse_test",
            "memory_test": "memtest", "diagnostics": "diagnostic"}
# dcgmi's exit status when a test failed (a negative DCGM status as an unsigned byte).
DIAG_FAILED_RC = 226


def test_key(name: str) -> str:
    """'GPU Memory' -> 'memory', 'Targeted Stress' -> 'targeted_stress', 'pcie' -> 'pcie'."""
    key = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    return _ALIASES.get(key, key)


def _dcgm_gate(ctx: NodeContext, check_id: str, collector: str, tool: str) -> Optional[list[Finding]]:
    gated = raw_gate(ctx, check_id, collector, tool, NOT_INSTALLED)
    if gated:
        return gated
    result = ctx.results[collector]
    text = result.text + "\n" + result.err_text
    facts: Any = ctx.facts.get(collector) if collector in (DISCOVERY, HEALTH) else ctx.facts.get("dcgm_gemm") \
        if collector == DCGM_GEMM else ctx.facts.get("dcgm_diag", {}).get(int(collector[-1]))
    unreachable = result.rc not in (0, DIAG_FAILED_RC) and re.search(
        r"unable to (?:establish a connection|connect to)|host ?engine", text, re.IGNORECASE)
    if (facts is not None and facts.hostengine_unreachable) or unreachable:
        return [ctx.finding(check_id, Verdict.ERROR, HOSTENGINE_DOWN, reason=ErrorReason.TOOL_MISSING,
                            remediation=Remediation.REINSTALL, collector=collector)]
    return None


@register("dcgm.discovery", collectors=(DISCOVERY,))
def dcgm_discovery(ctx: NodeContext) -> list[Finding]:
    """Runs ``dcgmi discovery -l``: DCGM sees every GPU of the profile.

    PASS: DCGM (nv-hostengine) sees the profile's ``gpu.count`` GPUs. FAIL (ISOLATE) when it sees fewer: a GPU
    DCGM cannot see is not diagnosed or monitored. ERROR when DCGM is not installed or nv-hostengine is not
    running (REINSTALL / start the service), or the output cannot be read.
    """
    gated = _dcgm_gate(ctx, "dcgm.discovery", DISCOVERY, "dcgmi discovery")
    if gated:
        return gated
    facts = ctx.facts.get("dcgm_discovery")
    result = ctx.results[DISCOVERY]
    if facts is None or result.rc != 0 or (not facts.gpus and facts.gpus_found is None):
        return [ctx.finding("dcgm.discovery", Verdict.ERROR,
                            f"dcgmi discovery -l exited {result.rc}: {first_line(ctx, DISCOVERY) or 'no output'}",
                            reason=ErrorReason.UNPARSEABLE, collector=DISCOVERY)]
    seen = len(facts.gpus) if facts.gpus else int(facts.gpus_found or 0)
    expected = ctx.profile.gpu.count
    switches = len(facts.nvswitches) or int(facts.nvswitches_found or 0)
    extra = f", {switches} NVSwitches" if switches else ""
    if seen < expected:
        return [ctx.finding("dcgm.discovery", Verdict.FAIL, f"DCGM sees {seen} of {expected} GPUs{extra}",
                            observed=seen, expected=expected, remediation=Remediation.ISOLATE, collector=DISCOVERY)]
    return [ctx.finding("dcgm.discovery", Verdict.PASS, f"DCGM sees {seen} GPUs{extra}", observed=seen,
                        expected=expected, collector=DISCOVERY)]


# What to do about a health Failure, by DCGM's system name (its own next steps, nvdeploy's actions): memory (double-bit
# ECC, row remap failure) and driver (Xid) faults clear with a GPU reset, PCIe/NVLink/ConnectX ones are the board's
# or cable's (drain and reseat), thermal/power/InfoROM ones need a look at the machine first.
_HEALTH_ACTIONS = {"memory system": Remediation.RESET_GPU, "driver": Remediation.RESET_GPU,
                   "pcie system": Remediation.ISOLATE, "nvlink system": Remediation.ISOLATE,
                   "connectx system": Remediation.ISOLATE, "thermal system": Remediation.INVESTIGATE,
                   "power system": Remediation.INVESTIGATE, "inforom system": Remediation.INVESTIGATE}
_HEALTH_VERDICTS = {"Failure": Verdict.FAIL, "Warning": Verdict.WARN}


def _where(entity: Any) -> str:
    ident = entity.entity_id if entity.entity_id is not None else (entity.label or "?")
    return f"GPU{ident}" if entity.group.upper() == "GPU" else f"{entity.group} {ident}"


@register("dcgm.health", collectors=(HEALTH,))
def dcgm_health(ctx: NodeContext) -> list[Finding]:
    """Runs ``dcgmi health -g 0 -s a`` then ``dcgmi health -g 0 -c -j`` (one command, 60 s): DCGM's health watches
    (driver, memory, NVLink, PCIe, thermal, power, InfoROM, NvSwitch, ConnectX where DCGM has it) on the default
    group of all GPUs. Setting the watches changes the host engine's state: they stay on for the group.

    PASS: Overall Health ``Healthy`` (DCGM lists no incident on any GPU). Per GPU and system: ``Failure`` is FAIL
    naming the GPU, the system and DCGM's message (RESET_GPU for memory and driver faults, ISOLATE for PCIe, NVLink
    and ConnectX, INVESTIGATE for thermal, power and InfoROM); ``Warning`` is WARN (MONITOR). ERROR: DCGM not
    installed or nv-hostengine not running (as the other DCGM checks), the watches could not be set or are not
    enabled, a report cut off or not understood (what it shows still FAILs or WARNs), or an exit status the report
    does not explain. Watches that
    were just set have little history yet: the memory, NVLink, PCIe and thermal/power watches sample for about 60 s.
    So a node that runs heavy tests (standard, full, a burn-in) has its watches read again after them and the
    burn-in (``dcgmi health -g 0 -c -j``): an incident only that read shows is named "after the heavy tests", with
    the same verdicts; that read failing is ERROR.

    Sources: NVIDIA/DCGM dcgmi/CommandLineParser.cpp (the ``-s`` watch letters, ``a`` = all) and dcgmi/Health.cpp
    (the report, Healthy/Warning/Failure per entity and system); the DCGM User Guide, "Groups" (the default group of
    all GPUs) and "Health and Diagnostics" (https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/).
    """
    check_id = "dcgm.health"
    gated = _dcgm_gate(ctx, check_id, HEALTH, "dcgmi health")
    if gated:
        return gated
    result = ctx.results[HEALTH]
    facts = ctx.facts.get("dcgm_health")
    if facts is None or facts.format is None:
        said = (facts.errors[0] if facts is not None and facts.errors else first_line(ctx, HEALTH)) or "no output"
        if facts is not None and facts.watches_not_enabled:
            return [ctx.finding(check_id, Verdict.ERROR, f"DCGM health watches are not enabled: {said}",
                                reason=ErrorReason.NOT_RUN, remediation=Remediation.INVESTIGATE, collector=HEALTH)]
        if facts is not None and facts.errors:
            return [ctx.finding(check_id, Verdict.ERROR, f"dcgmi health exited {result.rc}: {said}",
                                reason=ErrorReason.NOT_RUN, remediation=Remediation.INVESTIGATE, collector=HEALTH)]
        return [ctx.finding(check_id, Verdict.ERROR, f"dcgmi health exited {result.rc} with no health report: {said}",
                            reason=ErrorReason.UNPARSEABLE, collector=HEALTH)]
    findings: list[Finding] = []
    for entity in facts.entities:
        gpu = entity.entity_id if entity.group.upper() == "GPU" else None
        where = _where(entity)
        for incident in entity.incidents:
            verdict = _HEALTH_VERDICTS.get(incident.health)
            detail = f": {incident.message[:400]}" if incident.message else ""
            if verdict is Verdict.FAIL:
                findings.append(ctx.finding(
                    check_id, Verdict.FAIL, f"{where}: {incident.system} Failure{detail}", observed="Failure",
                    expected="Healthy", gpu=gpu, collector=HEALTH,
                    remediation=_HEALTH_ACTIONS.get(incident.system.lower(), Remediation.ISOLATE)))
            elif verdict is Verdict.WARN:
                findings.append(ctx.finding(check_id, Verdict.WARN, f"{where}: {incident.system} Warning{detail}",
                                            observed="Warning", expected="Healthy", gpu=gpu,
                                            remediation=Remediation.MONITOR, collector=HEALTH))
            else:
                findings.append(ctx.finding(check_id, Verdict.ERROR,
                                            f"{where}: {incident.system} health {incident.health!r} not understood"
                                            f"{detail}", reason=ErrorReason.UNPARSEABLE, gpu=gpu, collector=HEALTH))
        if not entity.incidents and entity.health != "Healthy":
            findings.append(ctx.finding(check_id, Verdict.ERROR,
                                        f"{where}: health {entity.health!r} without an incident named",
                                        reason=ErrorReason.UNPARSEABLE, gpu=gpu, collector=HEALTH))
    if not facts.complete:
        # A cut-off report (or a pasted piece of one) still FAILs and WARNs what it shows; the rest is not proven.
        shown = [f for f in findings if f.verdict in (Verdict.FAIL, Verdict.WARN)]
        return shown + [ctx.finding(check_id, Verdict.ERROR,
                                    "dcgmi health report is cut off or not understood: "
                                    f"{'; '.join(facts.warnings[:2]) or 'no Overall Health'}",
                                    reason=ErrorReason.INCOMPLETE, collector=HEALTH)]
    if facts.overall not in ("Healthy", "Warning", "Failure"):
        findings.append(ctx.finding(check_id, Verdict.ERROR, f"Overall Health {facts.overall!r} not understood",
                                    reason=ErrorReason.UNPARSEABLE, collector=HEALTH))
    elif facts.overall != "Healthy" and not findings:
        findings.append(ctx.finding(check_id, Verdict.ERROR,
                                    f"Overall Health {facts.overall} but no GPU or system is named",
                                    reason=ErrorReason.UNPARSEABLE, collector=HEALTH))
    if result.rc != 0 and not any(f.verdict is Verdict.FAIL for f in findings):
        findings.append(ctx.finding(check_id, Verdict.ERROR, f"dcgmi health exited {result.rc}: "
                                    f"{first_line(ctx, HEALTH) or 'no output'}",
                                    reason=ErrorReason.UNPARSEABLE, collector=HEALTH))
    later = _health_after(ctx, check_id, {_incident_key(e, i) for e in facts.entities for i in e.incidents})
    findings += later
    if findings:
        return findings
    again = " (read again after the heavy tests: Healthy)" if HEALTH_AFTER in ctx.results else ""
    return [ctx.finding(check_id, Verdict.PASS, "DCGM health watches: Overall Health Healthy, no incident on any GPU"
                        + again, observed="Healthy", expected="Healthy", collector=HEALTH)]


def _incident_key(entity: Any, incident: Any) -> tuple[str, str, str, str]:
    return (entity.group.upper(), str(entity.entity_id), incident.system.lower(), incident.health)


def _health_after(ctx: NodeContext, check_id: str, seen: set[tuple[str, str, str, str]]) -> list[Finding]:
    """The watches read again after the heavy tests and the burn-in (collect/datacenter.py DCGM_HEALTH_AFTER): the
    incidents the first read, made seconds after the watches were set, could not show yet (PCIe replays, NVLink,
    thermal and power need about a minute of samples). Nothing when the node ran no heavy test."""
    result = ctx.results.get(HEALTH_AFTER)
    if result is None:
        return []
    facts = ctx.facts.get(HEALTH_AFTER)
    if result.error is not None or facts is None or facts.format is None or not facts.complete:
        why = result.error_detail or (facts.errors[0] if facts is not None and facts.errors else
                                      first_line(ctx, HEALTH_AFTER)) or f"exit {result.rc}"
        return [ctx.finding(check_id, Verdict.ERROR, f"dcgmi health read after the heavy tests: not read: {why}",
                            reason=result.error or ErrorReason.UNPARSEABLE, remediation=Remediation.INVESTIGATE,
                            collector=HEALTH_AFTER)]
    out = []
    for entity in facts.entities:
        gpu = entity.entity_id if entity.group.upper() == "GPU" else None
        for incident in entity.incidents:
            if _incident_key(entity, incident) in seen:
                continue  # the first read named it already
            verdict = _HEALTH_VERDICTS.get(incident.health, Verdict.ERROR)
            detail = f": {incident.message[:400]}" if incident.message else ""
            remediation = (_HEALTH_ACTIONS.get(incident.system.lower(), Remediation.ISOLATE)
                           if verdict is Verdict.FAIL else Remediation.MONITOR if verdict is Verdict.WARN
                           else Remediation.INVESTIGATE)
            out.append(ctx.finding(
                check_id, verdict, f"after the heavy tests: {_where(entity)}: {incident.system} {incident.health}"
                f"{detail}", observed=incident.health, expected="Healthy", gpu=gpu, collector=HEALTH_AFTER,
                remediation=remediation, reason=ErrorReason.UNPARSEABLE if verdict is Verdict.ERROR else None))
    return out


def _remediation(category: Optional[str], key: str) -> Remediation:
    if (category or "").lower() == "deployment" or key == "software":
        return Remediation.INVESTIGATE  # the message says what to fix (persistence, driver, permissions...)
    return Remediation.ISOLATE


def evaluate_diag(ctx: NodeContext, level: int, gemm: bool = False) -> list[Finding]:
    """One diag run's findings: ``dcgmi diag -r LEVEL``, or with ``gemm`` the Diagnostic plugin alone
    (``dcgm.gemm``: its one required test is ``diagnostic``)."""
    check_id = "dcgm.gemm" if gemm else f"dcgm.diag_r{level}"
    collector = DCGM_GEMM if gemm else dcgm_diag_collector(level)
    run = "diagnostic" if gemm else str(level)
    gated = _dcgm_gate(ctx, check_id, collector, f"dcgmi diag -r {run}")
    if gated:
        return gated
    result = ctx.results[collector]
    facts = ctx.facts.get("dcgm_gemm") if gemm else ctx.facts.get("dcgm_diag", {}).get(level)
    all_required = frozenset({"diagnostic"}) if gemm else REQUIRED_TESTS.get(level, frozenset())
    if facts is None or (not facts.tests and not facts.runtime_error):
        return [ctx.finding(check_id, Verdict.ERROR,
                            f"dcgmi diag -r {run} exited {result.rc} with no test result: "
                            f"{first_line(ctx, collector) or 'no output'}",
                            reason=ErrorReason.INCOMPLETE if result.text.strip() else ErrorReason.UNPARSEABLE,
                            collector=collector)]
    if not facts.tests:
        return [ctx.finding(check_id, Verdict.ERROR, f"dcgmi diag -r {run} did not run: {facts.runtime_error}",
                            reason=ErrorReason.NOT_RUN, remediation=Remediation.INVESTIGATE, collector=collector)]
    findings: list[Finding] = []
    required = set(all_required)
    seen: dict[str, str] = {}
    for test in facts.tests:
        key = test_key(test.name)
        verdicts = [r.verdict for r in test.results] or ([test.verdict] if test.verdict else [])
        seen[test.name] = test.verdict or "?"
        if key in required and any(v == "PASS" for v in verdicts):
            required.discard(key)
        for res in test.results:
            where = f"GPU{res.gpu}: " if res.gpu is not None else ""
            message = "; ".join(res.messages or test.messages)[:400]
            detail = f": {message}" if message else ""
            if res.verdict == "FAIL":
                findings.append(ctx.finding(check_id, Verdict.FAIL, f"{where}{test.name} failed{detail}",
                                            observed="Fail", expected="Pass", gpu=res.gpu,
                                            remediation=_remediation(test.category, key), collector=collector))
            elif res.verdict == "WARN":
                findings.append(ctx.finding(check_id, Verdict.WARN, f"{where}{test.name} warned{detail}",
                                            observed="Warn", expected="Pass", gpu=res.gpu,
                                            remediation=Remediation.MONITOR, collector=collector))
            elif res.verdict == "SKIP" and key in all_required:
                findings.append(ctx.finding(check_id, Verdict.ERROR,
                                            f"{where}required test {test.name} was skipped{detail}",
                                            observed="Skip", expected="Pass", gpu=res.gpu,
                                            reason=ErrorReason.NOT_RUN, collector=collector))
            elif res.verdict not in ("PASS", "SKIP", "FAIL", "WARN"):
                findings.append(ctx.finding(check_id, Verdict.ERROR,
                                            f"{where}{test.name}: verdict {res.verdict!r} not understood",
                                            reason=ErrorReason.UNPARSEABLE, gpu=res.gpu, collector=collector))
    skipped = {test_key(t.name) for t in facts.tests}
    for key in sorted(required - skipped):
        findings.append(ctx.finding(check_id, Verdict.ERROR, f"required test {key} is missing from the results",
                                    observed="missing", expected="Pass", reason=ErrorReason.NOT_RUN,
                                    collector=collector))
    if not facts.complete:
        cut = ("is a fragment (a pasted piece): the tests and GPUs outside it, and the run's end, cannot be judged"
               if getattr(facts, "fragment", False) else "is cut off (incomplete JSON): results not trusted")
        findings.append(ctx.finding(check_id, Verdict.ERROR, f"dcgmi diag -r {run} output {cut}",
                                    reason=ErrorReason.INCOMPLETE, collector=collector))
    failed = any(f.verdict is Verdict.FAIL for f in findings)
    if result.rc not in (0, DIAG_FAILED_RC) and not failed:
        findings.append(ctx.finding(check_id, Verdict.ERROR, f"dcgmi diag -r {run} exited {result.rc}",
                                    reason=ErrorReason.UNPARSEABLE, collector=collector))
    elif result.rc == DIAG_FAILED_RC and not failed:
        findings.append(ctx.finding(check_id, Verdict.ERROR,
                                    f"dcgmi diag -r {run} reported a failure (exit {DIAG_FAILED_RC}) that its "
                                    "output does not show", reason=ErrorReason.UNPARSEABLE, collector=collector))
    if findings:
        return findings
    version = f", DCGM {facts.dcgm_version}" if facts.dcgm_version else ""
    return [ctx.finding(check_id, Verdict.PASS,
                        f"dcgmi diag -r {run}: {len(facts.tests)} tests passed or not applicable{version}",
                        observed=seen, expected="Pass", collector=collector)]


def _make(level: int) -> CheckFunction:
    timeout = DCGM_TIMEOUTS[level]

    def check(ctx: NodeContext) -> list[Finding]:
        return evaluate_diag(ctx, level)

    check.__doc__ = f"""Runs ``dcgmi diag -r {level} -j`` (hard timeout {timeout:g} s; host var ``dcgm_timeout``).

    PASS: every test passed (or was skipped where not required). Per GPU and test: a Fail is FAIL (ISOLATE;
    INVESTIGATE for deployment/software tests, whose message says what to fix), a Warn is WARN (MONITOR).
    ERROR: a required test ({', '.join(sorted(REQUIRED_TESTS[level])) or 'none at this level'}) skipped or missing,
    output cut off (incomplete JSON), the diag hung past its timeout, DCGM not installed or nv-hostengine not
    running, or an exit status the output does not explain (226 means a test failed). Reads the JSON of DCGM
    3.x (``DCGM GPU Diagnostic``, ``gpu_id``) and 4.x (``DCGM Diagnostic``, ``entity_id``), text as fallback.
    """
    check.__name__ = f"dcgm_diag_r{level}"
    return register(f"dcgm.diag_r{level}", collectors=(dcgm_diag_collector(level),))(check)


@register("dcgm.gemm", collectors=(DCGM_GEMM,))
def dcgm_gemm(ctx: NodeContext) -> list[Finding]:
    """Runs ``dcgmi diag -r diagnostic -p diagnostic.test_duration=60 -j`` (hard timeout 300 s;
    host vars ``dcgm_gemm_duration``, ``dcgm_gemm_timeout``): DCGM's Diagnostic plugin alone, a GEMM load on every
    GPU that prints each GPU's gigaflops. The standard level's per-GPU compute figure: level 2 runs no GEMM, and a
    GPU slow at compute (power or clock capped, a bad SM) passes its PCIe and memory tests and the host copies;
    ``fleet.performance`` judges the gigaflops (figure ``dcgm_gflops``) against the GPU's peers. The full level's
    r3 runs the same plugin, so full drops this check.

    PASS: the Diagnostic test passed on every GPU. FAIL (ISOLATE) on a GPU whose test failed (GEMM errors, a
    health watch under load); WARN for a Warn. ERROR: the test skipped or missing, the output cut off, DCGM not
    installed or nv-hostengine not running, or an exit status the output does not explain.

    Sources: the DCGM reference, "dcgmi diag" (a canonical test name runs that test alone; ``-p test.parameter=
    value``) and "Diagnostic Plugin" (``test_duration``, default 180 s):
    https://docs.nvidia.com/datacenter/dcgm/latest/reference/diagnostics/plugins/diagnostic.html"""
    return evaluate_diag(ctx, 3, gemm=True)


# Kept in a module-level tuple: the catalog (nvdeploy/checks/__init__.py) finds this module's checks there.
DIAG_CHECKS = tuple(_make(level) for level in sorted(DCGM_TIMEOUTS))
