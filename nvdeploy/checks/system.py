"""Node-level checks: sudo. (Reachability is recorded by the engine when it connects.)"""

from __future__ import annotations

from nvdeploy.checks.registry import NodeContext, register
from nvdeploy.results import ErrorReason, Finding, Remediation, Verdict


@register("system.sudo", collectors=("sudo",))
def sudo_works(ctx: NodeContext) -> list[Finding]:
    """Runs ``sudo -n true`` (or sudo with the password given to nvdeploy) when the host has ``sudo: true``.

    PASS: sudo ran the command. ERROR (reason ``sudo``) when sudo needs a password that was not given, or the
    user may not use sudo: the checks that need root cannot be trusted on this node.
    """
    if not ctx.host_vars.get("sudo"):
        return [ctx.finding("system.sudo", Verdict.SKIP, "sudo not requested for this host (sudo: false)")]
    result = ctx.results.get("sudo")
    if result is None or result.error is not None:
        detail = result.error_detail if result is not None else "not run"
        return [ctx.finding("system.sudo", Verdict.ERROR, f"sudo check did not complete: {detail}",
                            reason=result.error if result is not None and result.error else ErrorReason.NOT_RUN,
                            collector="sudo")]
    if result.rc == 0:
        return [ctx.finding("system.sudo", Verdict.PASS, "sudo works", collector="sudo")]
    message = result.err_text.strip().splitlines()[:1]
    text = message[0] if message else f"exit {result.rc}"
    if "password is required" in result.err_text:
        text = "sudo requires a password and none was given (set NVDEPLOY_SUDO_PASSWORD or --ask-sudo-pass)"
    elif "incorrect password" in result.err_text or "Sorry, try again" in result.err_text:
        text = "sudo refused the password"
    return [ctx.finding("system.sudo", Verdict.ERROR, f"sudo failed: {text}", reason=ErrorReason.SUDO,
                        remediation=Remediation.INVESTIGATE, collector="sudo")]
