"""IMEX: the parsers on real nvidia-imex-ctl output, imex.daemon per tray (service, READY, channel0), and the domain
judgement of imex.domain (one tray's -N -j view plus every tray's nodes_config.cfg hash). A node that is not an
NVLink domain tray gets no IMEX finding; where Kubernetes runs IMEX (DRA) the host service must be off and masked
(FAIL running, WARN not masked, else SKIP), unless the DRA driver's host-managed mode is declared (imex: host)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from _catalog_helpers import CATALOG, context, result, run_check, sim_results, timed_out, verdicts

from nvdeploy.checks import CHECKS
from nvdeploy.checks.imex import Tray, judge_domain
from nvdeploy.collect.catalog import specs_for
from nvdeploy.collect.stack_commands import IMEX_CHANNEL0, IMEX_DRA_PLUGIN_DIR, IMEX_NODES_CONFIG, imex_mode
from nvdeploy.config.profiles import NvlinkDomain, Profile
from nvdeploy.parsers.imex import parse_imex_domain_json, parse_imex_files, parse_imex_query
from nvdeploy.results import ErrorReason, Remediation, Verdict
from nvdeploy.sim.imex_tool import domain_json
from nvdeploy.sim.scenario import NodeScenario

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "imex"
DAEMON = "imex.daemon"


def tray_profile() -> Profile:
    """A tray of an NVLink domain: the built-in GB200 NVL72 profile when there is one, else an HGX B200 made one."""
    if "gb200-nvl72" in CATALOG.names():
        return CATALOG.get("gb200-nvl72")
    return replace(CATALOG.get("b200-8x"), name="b200-tray", nvlink_domain=NvlinkDomain(trays=2, gpus=16))


def tray_check(*faults: str, host_vars: dict | None = None, profile: Profile | None = None,
               peers: tuple = ()) -> list:
    chosen = profile or tray_profile()
    scenario = NodeScenario("tray01", chosen, tuple(faults), chosen, peers=peers)
    results = sim_results(scenario, CHECKS[DAEMON].collectors, host_vars)
    return run_check(DAEMON, context(results, chosen, host_vars, node="tray01"))


# --- parsers, on real captures --------------------------------------------------------------------------------

def test_real_domain_json_reads_status_nodes_and_connections():
    view = parse_imex_domain_json((REAL / "imex-ctl-N-j-degraded-partial-580.30.json").read_text())
    assert view is not None and view.status == "DEGRADED"
    assert [(n.index, n.host, n.status, n.version) for n in view.nodes] == [
        ("1", "10.76.183.30", "READY", "580.30"), ("3", "10.76.186.255", "READY", "580.30")]
    assert [c.peer for c in view.nodes[1].connections] == ["1", "6"] and not view.broken()


def test_real_query_answer_is_ready_and_other_words_are_not_states():
    assert parse_imex_query((REAL / "imex-ctl-q-ready.txt").read_text()) == "READY"
    assert parse_imex_query("  waiting_for_peers\n") == "WAITING_FOR_PEERS"
    assert parse_imex_query("Failed to read node configuration file /etc/nvidia-imex/nodes_config.cfg") is None
    assert parse_imex_query("") is None


def test_the_text_table_is_not_mistaken_for_the_json_view():
    # `nvidia-imex-ctl -N` without -j (a real 18-tray capture): no JSON, so no view (the stage says ERROR).
    assert parse_imex_domain_json((REAL / "imex-ctl-N-text-18-trays-up-570.172.txt").read_text()) is None
    assert parse_imex_domain_json('{"status": "UP"}') is None and parse_imex_domain_json("{not json") is None


def test_files_listing_reads_types_and_the_node_list_hash():
    files = parse_imex_files(f"\n== {IMEX_CHANNEL0} c\n\n== {IMEX_NODES_CONFIG} f\n{'ab' * 32}  {IMEX_NODES_CONFIG}\n")
    assert files.kind(IMEX_CHANNEL0) == "c" and files.config_sha256 == "ab" * 32
    assert files.kind(IMEX_DRA_PLUGIN_DIR) is None


# --- imex.daemon ------------------------------------------------------------------------------------------------

def test_healthy_tray_passes():
    findings = tray_check()
    assert verdicts(findings) == [Verdict.PASS] and "READY" in findings[0].summary


def test_imex_down_fails_on_the_service_only():
    findings = tray_check("imex_down")
    assert verdicts(findings) == [Verdict.FAIL]
    assert findings[0].observed == "failed" and "systemctl enable --now nvidia-imex" in findings[0].summary
    assert findings[0].remediation is Remediation.REINSTALL


def test_missing_channel_fails_naming_how_to_create_it():
    findings = tray_check("imex_no_channel")
    assert verdicts(findings) == [Verdict.FAIL]
    assert IMEX_CHANNEL0 in findings[0].summary and "NVreg_CreateImexChannel0=1" in findings[0].summary


def _with_query(stdout: str = "", rc: int = 0, stderr: str = "") -> list:
    chosen = tray_profile()
    results = sim_results(NodeScenario("tray01", chosen, (), chosen), CHECKS[DAEMON].collectors)
    results["imex_query"] = result("imex_query", stdout, rc=rc, stderr=stderr, command="nvidia-imex-ctl -q")
    return run_check(DAEMON, context(results, chosen, node="tray01"))


def test_a_daemon_waiting_for_its_peers_fails_with_its_state():
    findings = _with_query("WAITING_FOR_PEERS\n", rc=1)
    assert verdicts(findings) == [Verdict.FAIL] and findings[0].observed == "WAITING_FOR_PEERS"


def test_a_daemon_without_node_list_fails_and_an_odd_answer_is_error():
    findings = _with_query("Failed to read node configuration file /etc/nvidia-imex/nodes_config.cfg\n", rc=255)
    assert verdicts(findings) == [Verdict.FAIL] and IMEX_NODES_CONFIG in findings[0].summary
    odd = _with_query("", rc=1, stderr="connect: Connection refused\n")
    assert verdicts(odd) == [Verdict.ERROR] and odd[0].reason is ErrorReason.UNPARSEABLE


def test_a_hung_query_or_missing_tool_is_error_never_pass():
    chosen = tray_profile()
    results = sim_results(NodeScenario("tray01", chosen, (), chosen), CHECKS[DAEMON].collectors)
    results["imex_query"] = timed_out("imex_query")
    found = run_check(DAEMON, context(results, chosen, node="tray01"))
    assert verdicts(found) == [Verdict.ERROR] and found[0].reason is ErrorReason.TIMEOUT
    missing = _with_query("", rc=127, stderr="sh: 1: nvidia-imex-ctl: not found\n")
    assert missing[0].reason is ErrorReason.TOOL_MISSING and "nvidia-imex from R580" in missing[0].summary


def test_dra_declared_node_asks_the_host_unit_never_the_daemon():
    # Under the DRA driver the host unit must be off and masked, so it is asked; the daemon (nvidia-imex-ctl) is not.
    findings = tray_check("imex_dra", host_vars={"imex": "dra"})
    assert verdicts(findings) == [Verdict.SKIP] and "Kubernetes" in findings[0].summary
    assert "inactive and masked" in findings[0].summary
    specs = specs_for(CHECKS[DAEMON].collectors, {"imex": "dra"}, heavy=False, profile=tray_profile())
    argvs = {s.argv[:2] for s in specs}
    assert ("systemctl", "is-active") in argvs and ("systemctl", "is-enabled") in argvs
    assert not any(s.argv[0] == "nvidia-imex-ctl" for s in specs)


def test_dra_driver_found_on_the_node_skips_instead_of_failing():
    # The DRA driver's kubelet plugin is there and the host service is off and masked: Kubernetes runs IMEX.
    findings = tray_check("imex_dra")
    assert verdicts(findings) == [Verdict.SKIP] and "compute-domain kubelet plugin" in findings[0].summary


@pytest.mark.parametrize("host_vars", [{}, {"imex": "dra"}])
def test_a_running_host_daemon_under_the_dra_driver_fails(host_vars):
    # k8s-dra-driver-gpu docs/prerequisites.md: the host nvidia-imex.service must be disabled and masked; running,
    # it takes the IMEX session the ComputeDomain daemons need (this tray got PASS before).
    findings = tray_check("imex_dra_host_active", host_vars=host_vars)
    assert verdicts(findings) == [Verdict.FAIL] and findings[0].remediation is Remediation.TUNE
    assert "systemctl mask nvidia-imex.service" in findings[0].summary and findings[0].observed == "active, enabled"
    assert "imex: host" in findings[0].summary


def test_an_unmasked_host_unit_under_the_dra_driver_warns():
    findings = tray_check("imex_dra_unmasked")
    assert verdicts(findings) == [Verdict.WARN] and "disabled, not masked" in findings[0].summary


def test_the_dra_drivers_host_managed_mode_judges_the_host_daemon():
    # resources.computeDomains.imex.mode=hostManaged (DRA driver 0.5.0): the host service is the domain's daemon.
    findings = tray_check("imex_dra_host_active", host_vars={"imex": "host"})
    assert verdicts(findings) == [Verdict.PASS] and "READY" in findings[0].summary
    down = tray_check("imex_dra", host_vars={"imex": "host"})
    assert verdicts(down) == [Verdict.FAIL] and down[0].observed == "inactive"


def test_h100_node_gets_no_imex_finding_and_no_imex_command():
    h100 = CATALOG.get("h100-sxm-8x")
    results = sim_results(NodeScenario("node01", h100), CHECKS[DAEMON].collectors)
    assert run_check(DAEMON, context(results, h100)) == []
    assert {s.argv for s in specs_for(CHECKS[DAEMON].collectors, {}, heavy=False, profile=h100)} == {("true",)}
    assert imex_mode({}, h100)[0] == "off" and imex_mode({"imex": False}, tray_profile())[0] == "off"


def test_host_var_imex_true_makes_any_node_a_tray():
    # An H100 node declared to run IMEX that has none: FAIL, not silence.
    findings = tray_check(host_vars={"imex": True}, profile=CATALOG.get("h100-sxm-8x"))
    assert verdicts(findings)[0] is Verdict.FAIL and findings[0].observed == "inactive"


# --- imex.domain judgement ------------------------------------------------------------------------------------

NAMES = ("tray01", "tray02", "tray03")


def _view(asked: str, faults: dict[str, tuple[str, ...]]):
    chosen = tray_profile()
    peers = tuple((n, faults.get(n, ())) for n in NAMES if n != asked)
    return parse_imex_domain_json(domain_json(NodeScenario(asked, chosen, faults.get(asked, ()), chosen,
                                                           peers=peers)))


def _trays(hashes: dict[str, str] | None = None) -> list[Tray]:
    return [Tray(n, n, (hashes or {}).get(n, "aa" * 32)) for n in NAMES]


def test_healthy_domain_passes():
    per_tray, cluster = judge_domain("rack1", _trays(), _view("tray01", {}), "tray01")
    assert per_tray == {} and verdicts(cluster) == [Verdict.PASS] and "3 trays READY" in cluster[0].summary


def test_a_tray_nobody_is_connected_to_is_named_alone():
    view = _view("tray01", {"tray03": ("imex_peer_missing",)})
    per_tray, cluster = judge_domain("rack1", _trays(), view, "tray01")
    assert verdicts(cluster) == [Verdict.FAIL] and "DEGRADED" in cluster[0].summary
    assert sorted(per_tray) == ["tray03"] and verdicts(per_tray["tray03"]) == [Verdict.FAIL]


def test_the_real_degraded_capture_fails_on_the_domain_status():
    view = parse_imex_domain_json((REAL / "imex-ctl-N-j-degraded-partial-580.30.json").read_text())
    trays = [Tray("a", "10.76.183.30", "aa" * 32), Tray("b", "10.76.186.255", "aa" * 32)]
    per_tray, cluster = judge_domain("rack1", trays, view, "a")
    assert verdicts(cluster) == [Verdict.FAIL] and "domain status DEGRADED" in cluster[0].summary and per_tray == {}


def test_a_tray_missing_from_the_node_list_and_a_different_list_are_named():
    view = _view("tray01", {})
    trays = _trays({"tray02": "bb" * 32}) + [Tray("tray04", "tray04", "aa" * 32)]
    per_tray, cluster = judge_domain("rack1", trays, view, "tray01")
    assert sorted(per_tray) == ["tray02", "tray04"]
    assert "not in the domain's node list" in per_tray["tray04"][0].summary
    assert "holds a different" in per_tray["tray02"][0].summary
    assert per_tray["tray04"][0].remediation is Remediation.REINSTALL and verdicts(cluster) == [Verdict.FAIL]


@pytest.mark.parametrize("fault", ["imex_down", "imex_peer_missing"])
def test_the_cut_off_tray_sees_everyone_gone(fault):
    # From the cut-off tray's own view every other tray is unreachable: the stage asks a second tray for that reason.
    view = _view("tray03", {"tray03": (fault,)}) if fault == "imex_peer_missing" else _view("tray01", {"tray03": (
        fault,)})
    assert view is not None
    gone = {n.host for n in view.not_ready()}
    assert gone == ({"tray01", "tray02"} if fault == "imex_peer_missing" else {"tray03"})


# --- imex.domain: when no view can be read --------------------------------------------------------------------

class _Answers:
    """An asker that gives every tray the same answer (the stage's transport, replaced)."""

    deadline_at = None

    def __init__(self, result):
        self.result, self.asked = result, []

    def ask(self, host, domain_hosts, domain):
        self.asked.append(host.name)
        return self.result, None


def _nodes(verdict: Verdict) -> dict:
    from nvdeploy.results import Finding, NodeResult

    return {n: NodeResult(n, (Finding(DAEMON, verdict, "x", node=n),), facts={"imex_config_sha256": "aa" * 32})
            for n in NAMES}


def test_a_domain_whose_trays_answer_no_json_is_error_never_pass():
    from nvdeploy.config.inventory import Host
    from nvdeploy.phases.imex import judge_one

    text = (REAL / "imex-ctl-N-text-18-trays-up-570.172.txt").read_text()  # -N without -j: a table, not JSON
    asker = _Answers(result("imex_domain", text, command="nvidia-imex-ctl -N -j"))
    per_tray, cluster = judge_one("rack1", [Host(n, {"rack": "rack1"}) for n in NAMES], _nodes(Verdict.PASS),
                                  asker)  # type: ignore[arg-type]
    assert per_tray == {} and verdicts(cluster) == [Verdict.ERROR] and cluster[0].reason is ErrorReason.UNPARSEABLE
    assert asker.asked == ["tray01", "tray03", "tray02"]  # every tray tried before giving up


def test_a_domain_where_no_daemon_passed_is_error_not_run_and_asks_nobody():
    from nvdeploy.config.inventory import Host
    from nvdeploy.phases.imex import judge_one

    asker = _Answers(result("imex_domain", "{}"))
    per_tray, cluster = judge_one("rack1", [Host(n, {"rack": "rack1"}) for n in NAMES], _nodes(Verdict.FAIL),
                                  asker)  # type: ignore[arg-type]
    assert verdicts(cluster) == [Verdict.ERROR] and cluster[0].reason is ErrorReason.NOT_RUN and asker.asked == []
