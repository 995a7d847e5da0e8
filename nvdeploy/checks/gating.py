"""Gating on a catalog collector's raw result: what to say when a tool did not run, hung, is not installed or
printed nothing usable, before any fact is read. ERROR is never PASS: each of these cases is an ERROR with its
reason."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from nvdeploy.checks.registry import NodeContext
from nvdeploy.results import ErrorReason, Finding, Remediation, Verdict


def raw_gate(ctx: NodeContext, check_id: str, collector: str, tool: str, missing: str,
             missing_remediation: Remediation = Remediation.REINSTALL) -> Optional[list[Finding]]:
    """Findings to return instead of evaluating when ``collector`` produced nothing usable; None when it did.

    ``tool`` names the command in messages; ``missing`` says what to install when it is not found (exit 127).
    A non-zero exit status is NOT handled here: for many tools it is data (systemctl, dcgmi diag, nccl-tests).
    """
    result = ctx.results.get(collector)
    if result is None:
        return [ctx.finding(check_id, Verdict.ERROR, f"not evaluated: {tool} was not run", reason=ErrorReason.NOT_RUN,
                            collector=collector)]
    if result.timed_out or result.error is ErrorReason.TIMEOUT:
        return [ctx.finding(check_id, Verdict.ERROR,
                            f"{tool} did not finish: {result.error_detail or 'timed out'} (killed on the node)",
                            reason=ErrorReason.TIMEOUT, remediation=Remediation.INVESTIGATE, collector=collector)]
    if result.error is not None:
        return [ctx.finding(check_id, Verdict.ERROR,
                            f"{tool} result unusable: {result.error_detail or result.error.value}",
                            reason=result.error, collector=collector)]
    if result.rc == 127:
        return [ctx.finding(check_id, Verdict.ERROR, f"{tool} not found on the node: {missing}",
                            reason=ErrorReason.TOOL_MISSING, remediation=missing_remediation, collector=collector)]
    if result.truncated:
        return [ctx.finding(check_id, Verdict.ERROR, f"{tool} output exceeded the capture limit",
                            reason=ErrorReason.INCOMPLETE, collector=collector)]
    return None


def first_line(ctx: NodeContext, collector: str) -> str:
    """The first non-empty line the tool printed (stdout, then stderr), for messages."""
    result = ctx.results.get(collector)
    if result is None:
        return ""
    for text in (result.text, result.err_text):
        for line in text.splitlines():
            if line.strip():
                return line.strip()[:200]
    return ""


def section(ctx: NodeContext, name: str) -> Mapping[str, Any]:
    """A profile section (``nvlink``, ``pcie``, ``nccl``, ``ib``, ``throttle``, ``mig``); empty when absent."""
    value = ctx.profile.extra.get(name)
    return value if isinstance(value, Mapping) else {}
