"""IMEX, the daemon that lets CUDA share GPU memory across the trays of a multi-node NVLink domain (GB200/GB300
NVL72): each tray's daemon (``imex.daemon``) and the domain as a whole (``imex.domain``, cluster stage, run by
nvdeploy/phases/imex.py). Remediations follow NVIDIA's "IMEX Service for NVLink Networks" guide
(docs.nvidia.com/multi-node-nvlink-systems/imex-guide).

Which nodes run IMEX on the host: ``collect.stack_commands.imex_mode`` (host var ``imex``, else a profile with an
NVLink domain). Where Kubernetes runs it (declared with the host var ``imex: dra``, or seen on the node as the NVIDIA
DRA driver's compute-domain kubelet plugin folder): in the driver's default mode its ComputeDomains start an IMEX
daemon per domain in pods, and the host ``nvidia-imex.service`` must be disabled and masked (k8s-dra-driver-gpu
docs/prerequisites.md: ``systemctl disable --now nvidia-imex.service && systemctl mask nvidia-imex.service``): a
running host daemon takes the IMEX session the ComputeDomain daemons need. So a host service that is active FAILs,
one that is off but not masked WARNs, and off and masked (or not installed) is SKIP, the daemons being Kubernetes'.
The exception is the DRA driver's host-managed mode (``resources.computeDomains.imex.mode=hostManaged``, feature
gate HostManagedIMEXDaemon, DRA driver 0.5.0), where the host service is the domain's daemon: declare it with
``imex: host`` and the host daemon is judged as on any tray.
"""

from __future__ import annotations

import inspect
from collections import Counter
from dataclasses import dataclass
from typing import Optional, Sequence

from nvdeploy.checks.gating import first_line, raw_gate
from nvdeploy.checks.registry import CLUSTER_CHECKS, NodeContext, register
from nvdeploy.collect.stack_commands import (
    IMEX_CHANNEL0,
    IMEX_DRA,
    IMEX_DRA_PLUGIN_DIR,
    IMEX_HOST,
    IMEX_NODES_CONFIG,
    imex_mode,
)
from nvdeploy.config.hostrange import fold
from nvdeploy.parsers.imex import DOMAIN_UP, NO_NODE_CONFIG, READY, ImexDomainView, ImexFiles
from nvdeploy.results import ErrorReason, Finding, Remediation, Verdict

DAEMON_CHECK = "imex.daemon"
DOMAIN_CHECK = "imex.domain"
SERVICE = "imex_service"  # nvdeploy/collect/stack.py
UNIT = "imex_unit"
QUERY = "imex_query"
FILES = "imex_files"
GUIDE = "NVIDIA IMEX guide"
DRA_SKIP = ("IMEX is managed by Kubernetes ({why}): the host nvidia-imex service is {state} and {unit}, as the DRA "
            "driver needs; the ComputeDomain's own IMEX daemons serve it (judge them with kubectl get computedomains)")
DRA_DOC = ("k8s-dra-driver-gpu docs/prerequisites.md: systemctl disable --now nvidia-imex.service && systemctl mask "
           "nvidia-imex.service")
HOST_MANAGED = ("if this cluster runs the DRA driver's host-managed IMEX (resources.computeDomains.imex.mode="
                "hostManaged), declare the host var imex: host and the host daemon is judged instead")
_RUNNING = ("active", "activating", "reloading", "refreshing", "deactivating")


def dra_managed(host_vars: object, dra_plugin_seen: bool) -> bool:
    """Whether Kubernetes runs this node's IMEX daemons: declared (``imex: dra``), or the DRA driver's
    compute-domain kubelet plugin seen on a node not declared host-managed (``imex: true`` / ``host``)."""
    declared = host_vars.get("imex") if hasattr(host_vars, "get") else None
    if declared == IMEX_DRA:
        return True
    return dra_plugin_seen and declared not in (True, IMEX_HOST)

CLUSTER_CHECKS[DOMAIN_CHECK] = inspect.cleandoc(f"""Runs ``nvidia-imex-ctl -N -j`` (timeout 30 s, host var
    ``imex_timeout``) on one tray per IMEX domain, the first in inventory order whose imex.daemon passed (the next one
    if it does not answer; a second one when its view is not clean, as a tray cut off from the others sees every
    other tray gone, and the view with fewer trays not READY is judged), and compares the sha256 of
    ``{IMEX_NODES_CONFIG}`` that every tray reported in its light batch. A domain is the trays with the same host
    var ``imex_domain``, else the same ``rack``; a tray's address is its host var ``imex_address``, else its
    inventory address. PASS: the domain status is UP, every node of the view
    is READY and every connection CONNECTED, every tray of the domain is in the view, and all trays hold the same
    node list. FAIL names the trays: not READY, not connected (the From/To pairs), missing from the node list, or
    holding a node list that differs from the domain's majority (on a tie every tray). WARN: the view lists addresses
    no tray of the domain has. ERROR when no tray could be asked (none passed imex.daemon, every query failed or
    printed no JSON). SKIP where IMEX is managed by Kubernetes (DRA); nothing is run, and nothing said, on clusters
    without NVLink domain trays.
    Remediation ({GUIDE}, "Getting Started" and "Connections, Quorum, and Clean up"): the same nodes_config.cfg, the
    domain's tray addresses in one order, on every tray (``nvdeploy install`` writes it), then ``systemctl restart
    nvidia-imex`` on every tray (the list is read only at start); a tray that stays unreachable: check its
    management network and port 50000 between the trays, and ``journalctl -u nvidia-imex``.""")


@register(DAEMON_CHECK, collectors=(SERVICE, UNIT, QUERY, FILES), optional=(UNIT,))
def imex_daemon(ctx: NodeContext) -> list[Finding]:
    """Runs ``systemctl is-active nvidia-imex``, ``systemctl is-enabled nvidia-imex``, ``nvidia-imex-ctl -q`` and
    one ``find`` over the IMEX channel device, ``/etc/nvidia-imex/nodes_config.cfg`` (its sha256 goes to
    imex.domain) and the DRA driver's compute-domain kubelet plugin folder, 20 s each, on trays of a multi-node
    NVLink domain (profile ``nvlink_domain``) or hosts with ``imex: true`` (all but the query with ``imex: dra``).

    PASS: the service is active, the daemon answers READY and ``/dev/nvidia-caps-imex-channels/channel0`` exists as
    a character device. FAIL: the service is not active (``systemctl enable --now nvidia-imex``; REINSTALL when it
    ``failed``: an IMEX package not of the driver's version aborts at start), the daemon is in another state (it
    waits for its peers: see imex.domain) or has no node list (write ``nodes_config.cfg``), or the channel is missing
    (load the nvidia module with ``NVreg_CreateImexChannel0=1``, or ``mknod`` it with the major of
    ``nvidia-caps-imex-channels`` in /proc/devices). NVIDIA IMEX guide: "Getting Started with IMEX" and "IMEX
    Channels". ERROR: a tool missing, hung or answering something else. No finding at all on a node that is not an
    NVLink domain tray (HGX, PCIe) and has no host var ``imex``.

    Where Kubernetes runs IMEX (host var ``imex: dra``, or the DRA driver's compute-domain kubelet plugin on a node
    not declared ``imex: host``), the host service must be off and masked (k8s-dra-driver-gpu
    docs/prerequisites.md): FAIL (TUNE) when it is active, as it takes the IMEX session the ComputeDomain daemons
    need (``systemctl disable --now nvidia-imex.service && systemctl mask nvidia-imex.service``); WARN when it is
    off but not masked (enabled, it starts at the next boot); SKIP when off and masked or not installed. The DRA
    driver's host-managed mode (``resources.computeDomains.imex.mode=hostManaged``) is the exception: declared
    ``imex: host``, the host daemon is judged as above.
    """
    mode, _ = imex_mode(ctx.host_vars, ctx.profile)
    if mode not in (IMEX_HOST, IMEX_DRA):
        return []  # not an NVLink domain tray (an HGX or PCIe node): IMEX does not apply, so nothing is said
    gated = raw_gate(ctx, DAEMON_CHECK, SERVICE, "systemctl", "not a systemd host; check the nvidia-imex daemon by "
                     "hand", Remediation.INVESTIGATE)
    if gated:
        return gated
    state = ctx.facts.get("imex_service")
    if state is None:
        return [ctx.finding(DAEMON_CHECK, Verdict.ERROR, f"systemctl is-active nvidia-imex answered "
                            f"{first_line(ctx, SERVICE)!r}", reason=ErrorReason.UNPARSEABLE, collector=SERVICE)]
    files = ctx.facts.get("imex_files")
    seen = files is not None and files.kind(IMEX_DRA_PLUGIN_DIR) is not None
    if dra_managed(ctx.host_vars, seen):
        said = "host var imex: dra" if mode == IMEX_DRA else "the DRA driver's compute-domain kubelet plugin is here"
        return [_dra(ctx, state, said)]
    findings: list[Finding] = []
    if state != "active":
        findings.append(ctx.finding(
            DAEMON_CHECK, Verdict.FAIL, f"nvidia-imex is {state}: CUDA cannot import or export memory across the "
            "trays of the NVLink domain (systemctl enable --now nvidia-imex; journalctl -u nvidia-imex says why it "
            f"stopped; {GUIDE}, Getting Started)", observed=state, expected="active",
            remediation=Remediation.REINSTALL if state == "failed" else Remediation.REBOOT, collector=SERVICE))
    else:
        findings.extend(_query(ctx))
    findings.extend(_channel(ctx, files))
    if findings:
        return findings
    return [ctx.finding(DAEMON_CHECK, Verdict.PASS, f"nvidia-imex active, daemon READY, {IMEX_CHANNEL0} present",
                        observed=READY, expected=READY, collector=QUERY)]


def _dra(ctx: NodeContext, state: str, why: str) -> Finding:
    """The host service of a node whose IMEX daemons the DRA driver runs: off and masked."""
    unit = ctx.facts.get("imex_unit")
    if state in _RUNNING:
        return ctx.finding(DAEMON_CHECK, Verdict.FAIL, f"IMEX is managed by Kubernetes ({why}) but the host "
                           f"nvidia-imex service is {state}: it takes the IMEX session the ComputeDomain's daemons "
                           f"need, so multi-node NVLink memory in pods fails ({DRA_DOC}); {HOST_MANAGED}",
                           observed=f"{state}, {unit or 'unit state unknown'}", expected="inactive, masked",
                           remediation=Remediation.TUNE, collector=SERVICE)
    if unit in ("masked", "masked-runtime", "not-found"):
        return ctx.finding(DAEMON_CHECK, Verdict.SKIP, DRA_SKIP.format(why=why, state=state, unit="masked" if
                                                                       unit != "not-found" else "not installed"),
                           collector=UNIT)
    what = ("enabled: it starts again at the next boot" if unit and unit.startswith("enabled") else
            f"{unit}, not masked: a package upgrade or another unit can start it" if unit else
            "its unit state unknown (systemctl is-enabled not read)")
    return ctx.finding(DAEMON_CHECK, Verdict.WARN, f"IMEX is managed by Kubernetes ({why}); the host nvidia-imex "
                       f"service is {state} but {what}, and a running host daemon takes the session the "
                       f"ComputeDomain's daemons need ({DRA_DOC})", observed=f"{state}, {unit or 'unknown'}",
                       expected="inactive, masked", remediation=Remediation.TUNE, collector=UNIT)


def _query(ctx: NodeContext) -> list[Finding]:
    gated = raw_gate(ctx, DAEMON_CHECK, QUERY, "nvidia-imex-ctl", "install the nvidia-imex package of the driver's "
                     "branch (nvidia-imex from R580, nvidia-imex-<branch> before)")
    if gated:
        return gated
    answer = ctx.facts.get("imex_query")
    if answer == READY:
        return []
    said = first_line(ctx, QUERY)
    if answer is None and NO_NODE_CONFIG.lower() in ctx.results[QUERY].text.lower() + \
            ctx.results[QUERY].err_text.lower():
        return [ctx.finding(DAEMON_CHECK, Verdict.FAIL, f"the IMEX daemon has no node list ({said}): write "
                            f"{IMEX_NODES_CONFIG} with the domain's tray addresses and restart nvidia-imex "
                            f"({GUIDE}, Getting Started)", observed=said, expected=READY,
                            remediation=Remediation.REINSTALL, collector=QUERY)]
    if answer is None:
        return [ctx.finding(DAEMON_CHECK, Verdict.ERROR, f"nvidia-imex-ctl -q exited {ctx.results[QUERY].rc} and "
                            f"answered {said!r}, not a daemon state (is the command service on: IMEX_CMD_ENABLED=1 "
                            "in /etc/nvidia-imex/config.cfg?)", observed=said, reason=ErrorReason.UNPARSEABLE,
                            remediation=Remediation.INVESTIGATE, collector=QUERY)]
    return [ctx.finding(DAEMON_CHECK, Verdict.FAIL, f"the IMEX daemon is {answer}, not READY: it serves no import or "
                        "export until every tray of its domain is connected (see imex.domain; journalctl -u "
                        f"nvidia-imex; {GUIDE}, Connections, Quorum, and Clean up)", observed=answer, expected=READY,
                        remediation=Remediation.INVESTIGATE, collector=QUERY)]


def _channel(ctx: NodeContext, files: Optional[ImexFiles]) -> list[Finding]:
    gated = raw_gate(ctx, DAEMON_CHECK, FILES, "find", "install findutils")
    if gated:
        return gated
    kind = files.kind(IMEX_CHANNEL0) if files is not None else None
    if kind == "c":
        return []
    what = "missing" if kind is None else f"not a character device (find type {kind})"
    return [ctx.finding(DAEMON_CHECK, Verdict.FAIL, f"{IMEX_CHANNEL0} is {what}: no process can import memory "
                        "exported from another tray (load the nvidia module with NVreg_CreateImexChannel0=1, or mknod "
                        "it: major of nvidia-caps-imex-channels in /proc/devices, minor 0; "
                        f"{GUIDE}, IMEX Channels)", observed=what, expected="character device",
                        remediation=Remediation.TUNE, collector=FILES)]


@dataclass(frozen=True)
class Tray:
    """One tray of an IMEX domain as the inventory and its light batch know it."""

    name: str
    address: str
    config_sha256: Optional[str] = None  # None: the tray gave none (unreachable, not checked)


def judge_domain(domain: str, trays: Sequence[Tray], view: ImexDomainView, queried: str,
                 evidence: Optional[str] = None) -> tuple[dict[str, list[Finding]], list[Finding]]:
    """Per-tray findings and the domain's finding from one tray's ``nvidia-imex-ctl -N -j`` view and the trays'
    node-list hashes (pure)."""
    per_tray: dict[str, list[Finding]] = {}
    problems: list[str] = []
    by_address = {t.address: t for t in trays}
    label = {n.index: by_address[n.host].name if n.host in by_address else n.host for n in view.nodes}

    def blame(tray: str, summary: str, remediation: Remediation = Remediation.INVESTIGATE) -> None:
        per_tray.setdefault(tray, []).append(Finding(DOMAIN_CHECK, Verdict.FAIL, summary, node=tray,
                                                     remediation=remediation, evidence=evidence))

    if view.status != DOMAIN_UP:
        problems.append(f"domain status {view.status or 'missing'}")
    for node in view.not_ready():
        name = label[node.index]
        problems.append(f"{name} {node.status or 'no status'}")
        if name in {t.name for t in trays}:
            blame(name, f"IMEX domain {domain}: this tray's daemon is {node.status or 'without a status'} in "
                  f"{queried}'s view (systemctl status nvidia-imex on it; {GUIDE})")
    broken = [(label[a.index], label.get(c.peer, c.host or c.peer), c.status) for a, c in view.broken()]
    if broken:
        pairs = ", ".join(f"{a}->{b} {s or '?'}" for a, b, s in broken[:12])
        more = f" and {len(broken) - 12} more" if len(broken) > 12 else ""
        problems.append(f"not connected: {pairs}{more}")
        # A tray every other tray cannot reach is the one to look at; else every tray named in a broken pair.
        unreachable = Counter(b for _, b, _ in broken)
        worst = [t for t, n in unreachable.items() if n >= max(1, len(view.nodes) - 1)] or sorted(unreachable)
        for name in worst:
            if name in {t.name for t in trays} and name not in per_tray:
                blame(name, f"IMEX domain {domain}: the other trays' daemons are not connected to this one "
                      f"({pairs}{more}): check its management network, port 50000 between the trays, and "
                      "journalctl -u nvidia-imex")
    listed = set(view.hosts())
    missing = [t for t in trays if t.address not in listed]
    for tray in missing:
        blame(tray.name, f"IMEX domain {domain}: this tray ({tray.address}) is not in the domain's node list "
              f"({queried}'s {IMEX_NODES_CONFIG}): it cannot share memory with the others (write the list from the "
              "inventory: nvdeploy install)", Remediation.REINSTALL)
    if missing:
        problems.append(f"not in the node list: {fold([t.name for t in missing])}")
    hashes = {t.name: t.config_sha256 for t in trays if t.config_sha256 is not None}
    counts = Counter(hashes.values())
    if len(counts) > 1 or "absent" in counts:
        (major, top), *rest = counts.most_common()
        tie = bool(rest) and rest[0][1] == top
        odd = [n for n, h in hashes.items() if h == "absent" or tie or h != major]
        for name in odd:
            what = "has no" if hashes[name] == "absent" else "holds a different"
            blame(name, f"IMEX domain {domain}: this tray {what} {IMEX_NODES_CONFIG} than the domain's other trays "
                  f"({len(counts)} versions across {fold(sorted(hashes))}): every tray must list the same "
                  "addresses in one order (nvdeploy install writes it; then systemctl restart nvidia-imex)",
                  Remediation.REINSTALL)
        problems.append(f"node lists differ: {fold(sorted(odd))}")
    extra = sorted(listed - set(by_address))
    observed = f"{view.status}: {len(view.nodes) - len(view.not_ready())}/{len(view.nodes)} READY"
    if problems:
        return per_tray, [Finding(DOMAIN_CHECK, Verdict.FAIL, f"IMEX domain {domain} ({fold([t.name for t in trays])},"
                                  f" asked {queried}): " + "; ".join(problems), observed=observed,
                                  expected=f"UP, {len(trays)} trays READY and connected",
                                  remediation=Remediation.INVESTIGATE, evidence=evidence)]
    if extra:
        return per_tray, [Finding(DOMAIN_CHECK, Verdict.WARN, f"IMEX domain {domain}: UP and connected, but its node "
                                  f"list names addresses no tray of the domain has in the inventory: "
                                  f"{', '.join(extra[:8])}", observed=observed, evidence=evidence)]
    return per_tray, [Finding(DOMAIN_CHECK, Verdict.PASS, f"IMEX domain {domain}: UP, {len(view.nodes)} trays READY "
                              f"and connected, one node list ({fold([t.name for t in trays])}, asked {queried})",
                              observed=observed, evidence=evidence)]


def not_asked(domain: str, trays: Sequence[Tray], why: str, reason: ErrorReason) -> Finding:
    """The domain's ERROR when no tray's view could be read: ERROR is never PASS."""
    return Finding(DOMAIN_CHECK, Verdict.ERROR, f"IMEX domain {domain} ({fold([t.name for t in trays])}) not judged: "
                   f"{why}", reason=reason, remediation=Remediation.INVESTIGATE)


__all__ = ["DAEMON_CHECK", "DOMAIN_CHECK", "IMEX_DRA", "Tray", "dra_managed", "imex_daemon", "judge_domain",
           "not_asked"]
