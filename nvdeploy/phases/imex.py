"""The cluster stage of ``imex.domain``: one ``nvidia-imex-ctl -N -j`` per IMEX domain, judged with the node-list
hashes every tray reported in its light batch (nvdeploy/checks/imex.py judges; this module only asks).

A domain is the trays that run IMEX on the host (``nvdeploy.collect.stack_commands.imex_mode``) with the same host var
``imex_domain``, else the same ``rack`` (a domain per rack, as NVL72 racks are cabled). The first tray in inventory
order whose imex.daemon passed is asked; when its view is not clean a second tray (the last one that passed) is
asked too and the view with fewer trays not READY is judged: a tray cut off from the others sees every other tray
as gone, and must not be the one that names them. Domains are asked side by side (``--forks``); each query has its
own timeout (host var ``imex_timeout``, default 30 s), none starts after the global ``--deadline``, and every raw
answer is kept as evidence under ``evidence/_cluster/``.
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from dataclasses import replace
from typing import Optional, Sequence

from nvdeploy.checks.imex import DAEMON_CHECK, DOMAIN_CHECK, Tray, dra_managed, judge_domain, not_asked
from nvdeploy.collect.stack_commands import IMEX_DOMAIN_ARGV, IMEX_DRA, IMEX_HOST, imex_address, imex_domains, imex_mode
from nvdeploy.config.inventory import Host
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.parsers.imex import ImexDomainView, parse_imex_domain_json
from nvdeploy.results import CommandResult, ErrorReason, Finding, NodeResult, Verdict
from nvdeploy.runner.engine import EngineOptions, make_transport
from nvdeploy.runner.record import RunRecorder, safe_name
from nvdeploy.transport.base import CommandSpec, TransportError

DEFAULT_TIMEOUT_S = 30.0


def _domains(hosts: Sequence[Host], catalog: ProfileCatalog) -> dict[str, list[Host]]:
    return imex_domains(hosts, lambda h: catalog.get(h.profile or ""))


def wanted(hosts: Sequence[Host], catalog: ProfileCatalog) -> bool:
    """Whether any host runs IMEX itself or through Kubernetes (the stage has something to say)."""
    return any(imex_mode(h.vars, catalog.get(h.profile or ""))[0] in (IMEX_HOST, IMEX_DRA) for h in hosts)


def _daemon(node: Optional[NodeResult]) -> Optional[Verdict]:
    if node is None:
        return None
    verdicts = [f.verdict for f in node.findings if f.check == DAEMON_CHECK]
    if not verdicts:
        return None
    return Verdict.PASS if all(v is Verdict.PASS for v in verdicts) else verdicts[0]


class _Asker:
    def __init__(self, catalog: ProfileCatalog, options: EngineOptions, recorder: RunRecorder,
                 deadline_at: Optional[float]) -> None:
        self.catalog, self.options, self.recorder, self.deadline_at = catalog, options, recorder, deadline_at

    def ask(self, host: Host, domain_hosts: Sequence[Host], domain: str) -> tuple[CommandResult, Optional[str]]:
        remaining = None if self.deadline_at is None else self.deadline_at - time.monotonic()
        timeout = float(host.get("imex_timeout", DEFAULT_TIMEOUT_S))
        spec = CommandSpec("imex_domain", IMEX_DOMAIN_ARGV, timeout if remaining is None else
                           max(1.0, min(timeout, remaining)))
        # The domain's other trays are the peers a simulated daemon reports on; a real one ignores them.
        transport = make_transport(host, self.catalog, self.options, peers=domain_hosts)
        try:
            transport.connect()
            result = transport.run_batch([spec], remaining)[0]
        except TransportError as exc:
            result = CommandResult(spec.name, spec.display, None, error=exc.reason,
                                   error_detail=f"{host.name} unreachable: {exc.detail}")
        finally:
            transport.close()
        name = f"imex_domain_{safe_name(domain)}_{safe_name(host.name)}"
        path = self.recorder.write_evidence("_cluster", [replace(result, name=name)])[0].path
        return result, path


def _view(result: CommandResult) -> Optional[ImexDomainView]:
    if result.error is not None or result.rc is None or result.timed_out:
        return None
    return parse_imex_domain_json(result.text)


def _why(result: CommandResult, host: Host) -> str:
    if result.error is not None or result.rc is None:
        return f"{host.name}: {result.error_detail or (result.error.value if result.error else 'no answer')}"
    said = (result.err_text or result.text).strip().splitlines()
    return f"{host.name}: nvidia-imex-ctl -N -j exited {result.rc}" + (f" ({said[0][:120]})" if said else "")


def judge_one(domain: str, members: Sequence[Host], nodes: dict[str, NodeResult],
              asker: _Asker) -> tuple[dict[str, list[Finding]], list[Finding]]:
    """Ask the domain's trays (see the module doc) and judge the view."""
    # A tray whose IMEX Kubernetes runs (its imex.daemon SKIPped, or the DRA driver's plugin is on it) is not one
    # of the host's domain.
    trays_hosts = [h for h in members if _daemon(nodes.get(h.name)) is not Verdict.SKIP and not dra_managed(
        h.vars, bool(nodes[h.name].facts.get("imex_dra_plugin")) if h.name in nodes else False)]
    if not trays_hosts:
        return {}, [Finding(DOMAIN_CHECK, Verdict.SKIP, f"IMEX domain {domain}: IMEX is managed by Kubernetes on every "
                            "tray (DRA ComputeDomains): judge the ComputeDomains with kubectl")]
    trays = [Tray(h.name, imex_address(h), (nodes[h.name].facts.get("imex_config_sha256")
                                            if h.name in nodes else None)) for h in trays_hosts]
    # A tray whose imex.daemon did not run (a check list without it) may be asked too: its answer decides.
    ready = [h for h in trays_hosts if _daemon(nodes.get(h.name)) in (Verdict.PASS, None) and h.name in nodes]
    if not ready:
        return {}, [not_asked(domain, trays, "no tray's imex.daemon passed, so no daemon could be asked for the "
                              "domain (see each tray's imex.daemon)", ErrorReason.NOT_RUN)]
    if asker.deadline_at is not None and time.monotonic() >= asker.deadline_at:
        return {}, [not_asked(domain, trays, "not asked: the global --deadline passed", ErrorReason.NOT_RUN)]
    tried: list[str] = []
    views: list[tuple[ImexDomainView, Host, Optional[str]]] = []
    candidates = [ready[0]] + ([ready[-1]] if len(ready) > 1 else [])
    for extra in ready[1:-1]:
        candidates.append(extra)
    for host in candidates:
        result, evidence = asker.ask(host, trays_hosts, domain)
        view = _view(result)
        if view is None:
            tried.append(_why(result, host))
            continue
        views.append((view, host, evidence))
        if (not view.not_ready() and not view.broken()) or len(views) == 2:
            break
    if not views:
        return {}, [not_asked(domain, trays, "no tray answered with the domain's status: " + "; ".join(tried[:3]),
                              ErrorReason.UNPARSEABLE)]
    view, host, evidence = min(views, key=lambda v: (len(v[0].not_ready()), len(v[0].broken())))
    queried = host.name if len(views) == 1 else f"{host.name} (of {', '.join(v[1].name for v in views)})"
    return judge_domain(domain, trays, view, queried, evidence)


def run_imex_domain(nodes: Sequence[NodeResult], hosts: Sequence[Host], catalog: ProfileCatalog,
                    options: EngineOptions, recorder: RunRecorder,
                    deadline_at: Optional[float] = None) -> tuple[list[NodeResult], list[Finding]]:
    """Every IMEX domain of the inventory, judged; the named trays get their findings, the cluster one per domain.
    Hosts that Kubernetes runs IMEX for (``imex: dra``) get one SKIP for the cluster."""
    by_name = {n.name: n for n in nodes}
    domains = _domains(hosts, catalog)
    cluster: list[Finding] = []
    dra = [h.name for h in hosts if imex_mode(h.vars, catalog.get(h.profile or ""))[0] == IMEX_DRA]
    if dra:
        cluster.append(Finding(DOMAIN_CHECK, Verdict.SKIP, f"IMEX is managed by Kubernetes (host var imex: dra) on "
                               f"{len(dra)} node(s): judge their ComputeDomains with kubectl"))
    if not domains:
        return list(nodes), cluster
    asker = _Asker(catalog, options, recorder, deadline_at)
    per_node: dict[str, list[Finding]] = {}
    with cf.ThreadPoolExecutor(max_workers=max(1, min(len(domains), options.forks))) as pool:
        futures = [pool.submit(judge_one, domain, members, by_name, asker) for domain, members in domains.items()]
        for future in futures:
            trays, findings = future.result()
            for name, more in trays.items():
                per_node.setdefault(name, []).extend(more)
            cluster.extend(findings)
    updated = [n.with_findings(per_node[n.name]) if n.name in per_node else n for n in nodes]
    return updated, cluster
