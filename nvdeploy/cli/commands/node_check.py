"""``nvdeploy node-check``: the quick checks on this node (no SSH), one line, an exit status, and optionally
drain/resume of this node in Slurm. Meant for Slurm's ``HealthCheckProgram``, a Prolog/Epilog, or cron.

slurm.conf runs HealthCheckProgram without arguments, so the usual set-up is a two-line wrapper script
(docs/slurm.md). Exit 0 PASS/WARN, 1 FAIL, 3 ERROR (could not determine), 2 bad usage.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import click

PROFILE_ENV = "NVDEPLOY_PROFILE"
# slurm.conf's HealthCheckProgram takes no arguments: the wrapper script may set these instead of the options.
CONFIRM_ENV = "NVDEPLOY_CONFIRM"
SETTLE_ENV = "NVDEPLOY_SETTLE"
# Every light check that decides whether a job can run on the node (a CUDA job fails, or runs crippled, when one
# of them fails): the GPUs and their memory, the kernel's Xid/SXid, the PCIe and NVLink links, the fabric
# manager (on HGX a dead one fails every CUDA job) and the clocks (a throttling GPU holds back the whole job).
# Left out: facts that do not stop a job (versions, the driver flavour, MPS, container runtime, node power).
NODE_CHECKS = ("driver.loaded", "driver.version", "gpu.count", "gpu.model", "gpu.memory", "gpu.pci_visible",
               "gpu.persistence", "gpu.mig", "memory.ecc_mode", "memory.ecc_errors", "memory.remapped_rows",
               "memory.retired_pages", "kmsg.xid", "kmsg.sxid", "pcie.link", "nvlink.links", "nvlink.topology",
               "fabric.manager", "fabric.nvlsm", "clocks.throttle", "clocks.temperature", "clocks.power_limit",
               # NVLink domain trays only (SKIP elsewhere), all read from the nvidia-smi -q -x the batch runs anyway:
               # a tray whose GPUs did not register with the fabric, or that the driver asks to reset or reboot,
               # fails the jobs Slurm would start on it; without IMEX no multi-node NVLink job starts. Not
               # nvlink.domain or imex.domain: they compare trays in the cluster stage, which one node cannot.
               "nvlink.fabric", "gpu.recovery_action", "imex.daemon")
# Seconds each tool may take. The tools run side by side in one batch, so this bounds the whole check; a loaded
# node's nvidia-smi was measured at 13 s, and slurmd gives its HealthCheckProgram 60 s.
DEFAULT_TIMEOUT_S = 30.0


def _node_name(given: Optional[str]) -> str:
    if given:
        return given
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def check_label() -> str:
    return "node-check " + dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%MZ")


def run_node_check(name: str, profile: str, timeout_s: float, checks: tuple[str, ...] = NODE_CHECKS,
                   sudo: bool = False) -> object:
    """The node's result (a NodeResult), judged exactly as ``validate`` judges it, over the local transport."""
    from nvdeploy.config.inventory import Host
    from nvdeploy.config.profiles import ProfileCatalog
    from nvdeploy.runner.engine import EngineOptions, NodeRunner
    from nvdeploy.runner.record import RunRecorder

    catalog = ProfileCatalog()
    catalog.get(profile)  # unknown profile: KeyError before anything runs
    host = Host(name, {"connection": "local", "profile": profile, "command_timeout": timeout_s, "sudo": sudo})
    options = EngineOptions(forks=1, deadline_s=timeout_s + 5, checks=checks)
    with tempfile.TemporaryDirectory(prefix="nvd-check.") as scratch:
        # The folder's name is the run id the node lock's holder info carries: a run that finds the node busy
        # names this health check, not an anonymous "run".
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        recorder = RunRecorder(Path(scratch) / f"node-check-{stamp}")
        try:
            return NodeRunner(catalog, options, recorder, time.monotonic() + timeout_s + 5).run(host)
        finally:
            recorder.close()


@click.command("node-check")
@click.option("--profile", default=None, help=f"The node's profile (or ${PROFILE_ENV}), e.g. h100-sxm-8x.")
@click.option("--node", "node_name", default=None,
              help="This node's Slurm name (default: $SLURMD_NODENAME, else the short host name).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=DEFAULT_TIMEOUT_S, show_default=True,
              help="Seconds each tool may take (a hung nvidia-smi is ERROR timeout, not a hung health check).")
@click.option("--drain", is_flag=True, help="On FAIL, drain this node in Slurm with a reason naming the checks.")
@click.option("--drain-on-error", is_flag=True, help="With --drain: also drain when a check could not run (ERROR).")
@click.option("--resume", is_flag=True, help="On PASS, resume this node, only if nvdeploy drained it.")
@click.option("--sudo", is_flag=True, help="Run the root-only collectors (dmesg) through sudo -n.")
@click.option("--slurm-timeout", "slurm_timeout_s", type=click.FloatRange(min=1), default=10.0, show_default=True)
@click.option("--confirm", "confirm", type=click.IntRange(min=1), default=None,
              help=f"With --drain: drain only when a check failed in this many consecutive checks (or ${CONFIRM_ENV}; "
                   f"default 2). The counts are kept on the node beside the run lock.")
@click.option("--settle", "settle_s", type=click.FloatRange(min=0), default=None,
              help=f"With --drain: within this many seconds of boot a FAIL is reported but never drains "
                   f"(or ${SETTLE_ENV}; default 0).")
def node_check_command(profile: Optional[str], node_name: Optional[str], timeout_s: float, drain: bool,
                       drain_on_error: bool, resume: bool, sudo: bool, slurm_timeout_s: float,
                       confirm: Optional[int], settle_s: Optional[float]) -> None:
    """Quick checks of THIS node in a few seconds; one line; exit 0 PASS/WARN, 1 FAIL, 3 ERROR."""
    from nvdeploy.results import ExitCode, Verdict
    from nvdeploy.slurm.confirm import DEFAULT_CONFIRM

    profile = profile or os.environ.get(PROFILE_ENV)
    if not profile:
        click.echo(f"nvdeploy: error: --profile or ${PROFILE_ENV} is required", err=True)
        raise click.exceptions.Exit(ExitCode.USAGE)
    confirm = confirm if confirm is not None else _env_number(CONFIRM_ENV, int, DEFAULT_CONFIRM, 1)
    settle_s = settle_s if settle_s is not None else _env_number(SETTLE_ENV, float, 0.0, 0)
    name = _node_name(node_name)
    started = time.monotonic()
    try:
        node = run_node_check(name, profile, timeout_s, sudo=sudo)
    except KeyError:
        click.echo(f"nvdeploy: error: unknown profile {profile!r}", err=True)
        raise click.exceptions.Exit(ExitCode.USAGE) from None
    verdict = node.verdict  # type: ignore[attr-defined]
    bad = [f for f in node.findings if f.verdict in (Verdict.FAIL, Verdict.ERROR)]  # type: ignore[attr-defined]
    code = {Verdict.FAIL: ExitCode.NOT_READY, Verdict.ERROR: ExitCode.INCOMPLETE}.get(verdict, ExitCode.READY)
    slurm_note = ""
    flap_note = ""
    if drain:
        drain, flap_note = _confirmed(name, node, drain_on_error, confirm, settle_s)
    if drain or resume:
        slurm_note, failed = _slurm_step(name, node, drain, drain_on_error, resume, slurm_timeout_s)
        if failed and code == ExitCode.READY:
            code = ExitCode.INCOMPLETE
    from nvdeploy.slurm.drain import _part

    detail = ", ".join(dict.fromkeys(_part(f) for f in bad))
    errors = [f for f in bad if f.verdict is Verdict.ERROR and f.summary]
    if verdict is Verdict.ERROR and errors:
        # What could not be checked, and why (a hung tool, the lock another run holds): the one line is all the
        # operator reading slurmd's log gets.
        detail += ": " + errors[0].summary[:200]
    line = f"nvdeploy node-check {name}: {verdict.value}" + (f" {detail}" if detail else "") + \
        f" ({time.monotonic() - started:.2f} s)" + (f"; {flap_note}" if flap_note else "") + \
        (f"; {slurm_note}" if slurm_note else "")
    click.echo(" ".join(line.split()))
    raise click.exceptions.Exit(int(code))


def _env_number(var: str, kind: type, default: float, least: float) -> Any:
    raw = os.environ.get(var, "").strip()
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        value = None
    if value is None or value != value or value < least or value == float("inf"):
        what = "a whole number" if kind is int else "a number"
        click.echo(f"nvdeploy: error: ${var}={raw!r} is not {what} of at least {least:g}", err=True)
        raise click.exceptions.Exit(2)
    return value


def _confirmed(name: str, node: object, drain_on_error: bool, confirm: int, settle_s: float) -> tuple[bool, str]:
    """Whether this check may drain (anti-flap, nvdeploy/slurm/confirm.py), and what the one line says when not.
    Without a safe folder for the counts it drains on first sight, as before, and says so: holding back a drain
    it cannot count would leave a broken node in service."""
    from nvdeploy.cli.commands.node_check_state import StateFile, boot_id, state_dir, uptime_s
    from nvdeploy.slurm.confirm import decide

    findings = node.findings  # type: ignore[attr-defined]
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    common = {"node": name, "boot_id": boot_id(), "confirm": confirm, "drain_on_error": drain_on_error,
              "uptime_s": uptime_s(), "settle_s": settle_s, "now": now}
    folder, why = state_dir()
    if folder is None:
        decision = decide(None, findings, **common)  # type: ignore[arg-type]
        if decision.settling:
            return False, decision.note
        held = bool(decision.pending) and not decision.confirmed
        return True, (f"anti-flap counts not kept ({why}): drained on first sight" if held else "")
    try:
        with StateFile(folder) as store:
            decision = decide(store.read(), findings, **common)  # type: ignore[arg-type]
            if decision.state is not None:
                store.write(decision.state)
    except OSError as exc:
        return True, f"anti-flap counts not kept ({folder}: {exc.strerror}): drained on first sight"
    return decision.may_drain, decision.note


def _slurm_step(name: str, node: object, drain: bool, drain_on_error: bool, resume: bool,
                timeout_s: float) -> tuple[str, bool]:
    from nvdeploy.slurm.client import SlurmClient, SlurmError
    from nvdeploy.slurm.drain import Policy, apply_actions, plan_action

    client = SlurmClient(timeout_s=timeout_s)
    try:
        nodes = {n.name: n for n in client.nodes(name)}
    except SlurmError as exc:
        return f"slurm: {exc.message}", True
    policy = Policy(drain_failed=drain, drain_on_error=drain_on_error, resume_passed=resume,
                    resume_node_check_only=True)
    action = plan_action(name, node.verdict, node.findings, nodes.get(name), policy,  # type: ignore[attr-defined]
                         check_label())
    (done,) = apply_actions([action], client)
    if done.status == "failed":
        return f"slurm {done.action} failed: {done.error}", True
    if done.action in ("drain", "resume"):
        return f"slurm: {done.message}" + (f" ({done.reason})" if done.reason else ""), False
    return (f"slurm: {done.message}" if done.action == "leave" else ""), False


def register(cli: click.Group) -> None:
    cli.add_command(node_check_command)
