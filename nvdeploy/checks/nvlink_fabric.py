"""Rack-scale NVLink on the node: each GPU's registration with the multi-node NVLink fabric (NVL72 trays), and
the driver's own recovery verdict for each GPU."""

from __future__ import annotations

import re
from typing import Any, Optional

from nvdeploy.checks.common import LOST_ACTION, SMI, gpu_label, smi_gate, split_gpus
from nvdeploy.checks.nvlink_domain import FABRIC_CHECK
from nvdeploy.checks.registry import NodeContext, register
from nvdeploy.results import ErrorReason, Finding, Remediation, Verdict

FABRIC = FABRIC_CHECK
RECOVERY = "gpu.recovery_action"
UPTIME = "uptime"
ZERO_UUID = re.compile(r"0{8}-0{4}-0{4}-0{4}-0{12}")
# The fabric states NVML names before registration ends (nvmlGpuFabricState_t): not an answer yet.
PENDING_STATES = ("Not Started", "In Progress")
# Health flags that are True when something is wrong, with what nvidia-smi -q calls them.
_BAD_FLAGS = (("fabric_route_recovery_in_progress", "route recovery in progress"),
              ("fabric_route_unhealthy", "route unhealthy"),
              ("fabric_access_timeout_recovery", "access timeout recovery"))
FABRIC_DOC = ("NVIDIA GB200 NVL Multi-Node Tuning Guide and the NVLink chapter of the NVIDIA Mission Control manual "
              "(the GPU's fabric state, the NVLink switch trays' NMX, the tray's NVLink cartridges)")


def uptime_s(ctx: NodeContext) -> Optional[float]:
    """Seconds since boot from ``cat /proc/uptime``; None when it was not read."""
    result = ctx.results.get(UPTIME)
    if result is None or result.rc != 0 or result.error is not None:
        return None
    match = re.match(r"\s*([0-9]+(?:\.[0-9]+)?)\s", result.text + " ")
    return float(match.group(1)) if match else None


def _since_boot(seconds: Optional[float]) -> str:
    if seconds is None:  # the uptime collector failed, or a pasted capture (nvdeploy parse) has none
        return "time since boot unknown: /proc/uptime not read"
    minutes = int(seconds // 60)
    return f"{minutes // 60} h {minutes % 60} min after boot" if minutes >= 60 else f"{seconds:.0f} s after boot"


def _fabric_problems(gpu: Any) -> list[str]:
    """What is wrong with a GPU whose registration ``Completed``: status, identifiers, health."""
    problems = []
    if gpu.fabric_status != "Success":
        problems.append(f"status {gpu.fabric_status or 'not reported'}")
    if not gpu.fabric_clique_id:
        # NVIDIA's DRA driver takes any cliqueId as the partition index; nvdeploy, an acceptance gate, FAILs 0: no
        # registered GPU in a capture has it (GB200 2, GB300 32766), it comes with failed registrations (Azure's
        # image validation, azhpc-images pull request 506, fails it), and a real partition 0 can be waived.
        problems.append("cliqueId " + ("0 (seen only on registrations that failed; waive nvlink.fabric if this "
                                       "NVLink partition is numbered 0)" if gpu.fabric_clique_id == 0
                                       else "not reported"))
    uuid = (gpu.fabric_cluster_uuid or "").strip().lower()
    if not uuid or ZERO_UUID.fullmatch(uuid):
        problems.append(f"clusterUuid {uuid or 'not reported'}" + (" (all zero)" if uuid else ""))
    if gpu.fabric_health_summary not in (None, "Healthy"):
        problems.append(f"health {gpu.fabric_health_summary}")
    if gpu.fabric_bandwidth not in (None, "Full"):
        problems.append(f"bandwidth {gpu.fabric_bandwidth}")
    problems += [what for name, what in _BAD_FLAGS if getattr(gpu, name) is True]
    if gpu.fabric_incorrect_configuration not in (None, "None"):
        problems.append(f"incorrect configuration: {gpu.fabric_incorrect_configuration}")
    return problems


@register(FABRIC, collectors=(SMI, UPTIME), optional=(UPTIME,))
def nvlink_fabric(ctx: NodeContext) -> list[Finding]:
    """Reads each GPU's NVLink fabric block (``nvidia-smi -q -x`` ``<fabric>``, or NVML
    ``nvmlDeviceGetGpuFabricInfoV`` through the probe, whichever supplied the GPU facts) and ``/proc/uptime``, on
    profiles with a multi-node NVLink domain (``nvlink_domain``: GB200/GB300 NVL72 trays).

    PASS: every GPU reports State ``Completed``, Status ``Success``, a cliqueId and a clusterUuid that are not zero,
    health summary ``Healthy`` with ``Full`` bandwidth, and no route recovery, unhealthy route, access-timeout
    recovery or incorrect configuration. A tray whose GPUs did not register runs single-node jobs and fails every
    multi-node NVLink job.

    FAIL (naming the GPU): ``Completed`` with another status or an all-zero clusterUuid or cliqueId 0 (NVIDIA's DRA
    driver accepts 0 as a partition index, but no registered GPU in a capture reports it and a fleet validation,
    Azure's azhpc-images, fails it: waive the check where a partition is numbered 0); an unhealthy
    health block; no fabric state at all (``Not Supported`` / N/A) on a profile that expects a fabric. Remediation
    (ISOLATE the tray from multi-node NVLink jobs): see the NVIDIA GB200 NVL Multi-Node Tuning Guide and the NVLink
    chapter of the NVIDIA Mission Control manual: check the tray's NVLink cartridges and the switch trays' NMX
    (NVLink Management Software) partition, then reset the GPUs or reboot the tray so they register again.
    WARN (MONITOR): registered, but this driver reports no health block (only registration judged).

    ERROR: State ``Not Started`` / ``In Progress`` (registration has not finished; the finding says how long after
    boot); a fabric value the driver could not read. SKIP: a profile without an NVLink domain (an HGX/PCIe node's
    NVLink is judged by nvlink.*, fabric.manager; its GPUs report clique 0 in an all-zero cluster).
    """
    gated = smi_gate(ctx, FABRIC)
    if gated:
        return gated
    if ctx.profile.nvlink_domain is None:
        return [ctx.finding(FABRIC, Verdict.SKIP, f"profile {ctx.profile.name} has no multi-node NVLink domain "
                            "(nvlink_domain): no fabric registration expected", collector=SMI)]
    findings: list[Finding] = []
    passed, unreported_health = [], []
    since = _since_boot(uptime_s(ctx))
    for gpu in ctx.facts["smi"].gpus:
        label = gpu_label(gpu)
        error = gpu.error("fabric_state") or gpu.error("handle")
        if gpu.lost:
            findings.append(ctx.finding(FABRIC, Verdict.FAIL, f"{label} is lost (GPU_IS_LOST): its fabric state "
                                        f"cannot be read; {LOST_ACTION}", observed="GPU is lost", gpu=gpu.index,
                                        remediation=Remediation.ISOLATE, collector=SMI))
        elif error:
            findings.append(ctx.finding(FABRIC, Verdict.ERROR, f"{label}: fabric state unknown, the driver could not "
                                        f"read it ({error})", observed="unknown", gpu=gpu.index,
                                        reason=ErrorReason.UNPARSEABLE, collector=SMI))
        elif gpu.fabric_state is None:
            findings.append(ctx.finding(
                FABRIC, Verdict.FAIL, f"{label}: no NVLink fabric state (Not Supported / N/A) on a profile with an "
                f"NVLink domain of {ctx.profile.nvlink_domain.gpus} GPUs: this GPU is not attached to a multi-node "
                "NVLink fabric (wrong SKU for the profile, or a driver without fabric support)", observed="N/A",
                expected="Completed", gpu=gpu.index, remediation=Remediation.ISOLATE, collector=SMI))
        elif gpu.fabric_state in PENDING_STATES:
            findings.append(ctx.finding(
                FABRIC, Verdict.ERROR, f"{label}: NVLink fabric registration {gpu.fabric_state} ({since}): not "
                "finished, so not judged; if it stays so, the switch trays' NMX has not configured this GPU (see "
                f"the {FABRIC_DOC})", observed=gpu.fabric_state, expected="Completed", gpu=gpu.index,
                reason=ErrorReason.INCOMPLETE, remediation=Remediation.INVESTIGATE, collector=SMI))
        elif gpu.fabric_state != "Completed":
            findings.append(ctx.finding(FABRIC, Verdict.ERROR, f"{label}: unknown fabric state "
                                        f"{gpu.fabric_state!r}", observed=gpu.fabric_state, expected="Completed",
                                        gpu=gpu.index, reason=ErrorReason.UNPARSEABLE, collector=SMI))
        elif _fabric_problems(gpu):
            problems = "; ".join(_fabric_problems(gpu))
            findings.append(ctx.finding(
                FABRIC, Verdict.FAIL, f"{label}: NVLink fabric registration Completed but {problems}: multi-node "
                f"NVLink jobs will fail on this tray (isolate it; see the {FABRIC_DOC}; reset the GPUs or reboot "
                "the tray to register again)", observed=problems, expected="Success, healthy, non-zero IDs",
                gpu=gpu.index, remediation=Remediation.ISOLATE, collector=SMI))
        else:
            passed.append(gpu)
            if gpu.fabric_health_summary is None:
                unreported_health.append(gpu)
    if findings:
        return findings
    ids = sorted({f"clique {g.fabric_clique_id} / cluster {g.fabric_cluster_uuid}" for g in passed})
    if unreported_health:
        return [ctx.finding(FABRIC, Verdict.WARN, f"{len(passed)} GPUs registered ({', '.join(ids)}), but the "
                            f"driver reports no fabric health for {len(unreported_health)} of them: only "
                            "registration judged", observed=", ".join(ids), remediation=Remediation.MONITOR,
                            collector=SMI)]
    return [ctx.finding(FABRIC, Verdict.PASS, f"{len(passed)} GPUs registered, healthy, full bandwidth: "
                        f"{', '.join(ids)}", observed=", ".join(ids), collector=SMI)]


# nvmlGpuRecoveryAction_t by the names NVIDIA's documentation gives them (NVIDIA GPU Memory Error Management,
# "Error Recovery and Response Flags": None, Reset, Reboot, Drain P2P, Drain and Reset) -> (remediation, what to
# do). Only None is in a real capture.
RECOVERY_ACTIONS = {
    "Reset": (Remediation.RESET_GPU, "terminate the GPU's processes and reset it (nvidia-smi -r -i <index>)"),
    "Reboot": (Remediation.REBOOT, "drain the node and reboot it (the fault may have left the OS inconsistent)"),
    "Drain P2P": (Remediation.ISOLATE, "stop the GPU's peer-to-peer (NVLink) traffic: drain its jobs, disable UVM "
                  "persistence mode, then read the recovery action again"),
    "Drain and Reset": (Remediation.RESET_GPU, "drain the node's jobs, then reset the GPU"),
}
RECOVERY_DOC = ("NVML API reference, nvmlGpuRecoveryAction_t (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION), and the NVIDIA "
                "GPU Debug Guidelines / Xid catalog for the Xid that caused it")


@register(RECOVERY, collectors=(SMI,))
def gpu_recovery_action(ctx: NodeContext) -> list[Finding]:
    """Reads each GPU's ``gpu_recovery_action`` (``nvidia-smi -q -x``; NVML field
    ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`` through the probe): the driver's own verdict of what the GPU needs
    before it is usable again, on drivers that report it (the R580 GB200/GB300 captures do).

    PASS: ``None`` on every GPU. FAIL naming the GPU, with that action as the remediation, by the names NVIDIA's
    GPU memory error management guide gives them: ``Reset`` (RESET_GPU), ``Reboot`` (REBOOT), ``Drain P2P``
    (ISOLATE: stop peer-to-peer traffic), ``Drain and Reset`` (RESET_GPU after draining); what to do is in that
    guide ("Error Recovery and Response Flags"), the NVML API reference (nvmlGpuRecoveryAction_t) and,
    for the Xid that caused it, the NVIDIA GPU Debug Guidelines' Xid catalog. This catches a GPU that still needs
    a reset after an Xid the kernel-log scan missed (the log rotated, the message was cut). An action this check
    does not know is FAIL (INVESTIGATE). ERROR: the value could not be read, or one GPU does not report it while
    the others do. SKIP: the driver reports no recovery action for any GPU.
    """
    gated = smi_gate(ctx, RECOVERY)
    if gated:
        return gated
    split = split_gpus(ctx, RECOVERY, "recovery action", ("gpu_recovery_action",), required=False)
    findings = list(split.findings)
    for gpu in split.known:
        action = gpu.gpu_recovery_action
        if action == "None":
            continue
        remediation, todo = RECOVERY_ACTIONS.get(action, (Remediation.INVESTIGATE, "find out what the driver asks for"))
        findings.append(ctx.finding(RECOVERY, Verdict.FAIL, f"{gpu_label(gpu)}: the driver asks for recovery action "
                                    f"{action!r}: {todo} (see the {RECOVERY_DOC})", observed=action, expected="None",
                                    gpu=gpu.index, remediation=remediation, collector=SMI))
    if findings:
        return findings
    if not split.known:
        return [ctx.finding(RECOVERY, Verdict.SKIP, "the driver reports no GPU recovery action (older than the "
                            "drivers that print gpu_recovery_action)", collector=SMI)]
    return [ctx.finding(RECOVERY, Verdict.PASS, f"recovery action None on all {len(split.known)} GPUs",
                        observed="None", expected="None", collector=SMI)]
