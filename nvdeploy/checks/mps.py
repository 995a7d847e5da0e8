"""CUDA MPS: when a host asks for it (host var ``mps: true``), the control daemon runs and answers."""

from __future__ import annotations

import re
import shlex
from typing import Any, Mapping

from nvdeploy.checks.gating import first_line, raw_gate
from nvdeploy.checks.registry import NodeContext, register
from nvdeploy.collect.stack import MPS_CONTROL, mps_dirs
from nvdeploy.collect.stack_commands import MPS_UNSAFE_PREFIX, MPS_UNSAFE_RC
from nvdeploy.results import ErrorReason, Finding, Remediation, Verdict

# What nvidia-cuda-mps-control prints (exit 1) when no control daemon listens on the pipe folder.
NO_DAEMON = "Cannot find MPS control daemon process"
_PID = re.compile(r"^\d+$")


def wants_mps(host_vars: Mapping[str, Any]) -> bool:
    value = host_vars.get("mps", False)
    return value is True or str(value).strip().lower() in ("true", "yes", "1", "on")


@register("gpu.mps", collectors=(MPS_CONTROL,))
def gpu_mps(ctx: NodeContext) -> list[Finding]:
    """Runs ``echo get_server_list | nvidia-cuda-mps-control`` with ``CUDA_MPS_PIPE_DIRECTORY`` and
    ``CUDA_MPS_LOG_DIRECTORY`` from the host vars ``mps_pipe_dir`` / ``mps_log_dir`` (defaults /tmp/nvidia-mps and
    /var/log/nvidia-mps), only on hosts with ``mps: true``.

    PASS: the control daemon answered (exit 0): the MPS server PIDs it lists (none until a client connected) are
    recorded. FAIL (TUNE: start it with ``nvidia-cuda-mps-control -d`` under the same pipe/log folders, usually
    with compute mode EXCLUSIVE_PROCESS) when it prints "Cannot find MPS control daemon process": nothing listens
    on the pipe folder. ERROR: the control tool is missing (exit 127; it ships with the driver), hung, or answered
    something else; ERROR ``lock`` when the pipe folder exists but is a link, another user's, or writable by
    others (the client is then not run: it would talk to whatever that user planted). SKIP: the host does not ask
    for MPS.
    """
    if not wants_mps(ctx.host_vars):
        return [ctx.finding("gpu.mps", Verdict.SKIP, "MPS not requested for this host (host var mps)")]
    pipe, log = mps_dirs(ctx.host_vars)
    where = f"pipe folder {pipe}, log folder {log}"
    raw = ctx.results.get(MPS_CONTROL)
    if raw is not None and raw.rc == 127 and "nvidia-cuda-mps-control" not in raw.err_text:
        # The pipe's shell itself is missing, not the control tool.
        return [ctx.finding("gpu.mps", Verdict.ERROR, f"bash not found on the node: {first_line(ctx, MPS_CONTROL)}",
                            reason=ErrorReason.TOOL_MISSING, remediation=Remediation.REINSTALL,
                            collector=MPS_CONTROL)]
    if raw is not None and raw.rc == MPS_UNSAFE_RC and MPS_UNSAFE_PREFIX in raw.err_text:
        said = raw.err_text[raw.err_text.index(MPS_UNSAFE_PREFIX) + len(MPS_UNSAFE_PREFIX):].splitlines()[0][:300]
        return [ctx.finding("gpu.mps", Verdict.ERROR,
                            f"MPS pipe folder not safe to talk through, client not run: {said}; make it root's (or "
                            "this user's) and not writable by others, or set the host var mps_pipe_dir",
                            reason=ErrorReason.LOCK, remediation=Remediation.INVESTIGATE, collector=MPS_CONTROL)]
    gated = raw_gate(ctx, "gpu.mps", MPS_CONTROL, "nvidia-cuda-mps-control",
                     "it ships with the NVIDIA driver (nvidia-compute-utils / nvidia-driver-cuda)")
    if gated:
        return gated
    result = ctx.results[MPS_CONTROL]
    text = (result.text + "\n" + result.err_text).strip()
    if NO_DAEMON in text:
        return [ctx.finding("gpu.mps", Verdict.FAIL,
                            f"MPS control daemon not running ({where}): start it with "
                            f"CUDA_MPS_PIPE_DIRECTORY={shlex.quote(pipe)} CUDA_MPS_LOG_DIRECTORY={shlex.quote(log)} "
                            "nvidia-cuda-mps-control -d",
                            observed="no control daemon", expected="control daemon answering",
                            remediation=Remediation.TUNE, collector=MPS_CONTROL)]
    lines = [line.strip() for line in result.text.splitlines() if line.strip()]
    if result.rc != 0 or not all(_PID.match(line) for line in lines):
        first = (text.splitlines() or [f"exit {result.rc}"])[0][:200]
        return [ctx.finding("gpu.mps", Verdict.ERROR,
                            f"nvidia-cuda-mps-control gave no server list (exit {result.rc}): {first}",
                            reason=ErrorReason.UNPARSEABLE, remediation=Remediation.INVESTIGATE,
                            collector=MPS_CONTROL)]
    servers = f"{len(lines)} MPS server(s): PID {', '.join(lines)}" if lines else "no MPS server started yet"
    return [ctx.finding("gpu.mps", Verdict.PASS, f"MPS control daemon answers ({where}); {servers}",
                        observed=lines, expected="control daemon answering", collector=MPS_CONTROL)]
