"""End to end over real SSH: OpenSSH's sshd on loopback, fake GPU tools on each node's PATH."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.phases.validate import run_validate
from nvdeploy.results import ClusterVerdict, ErrorReason, Verdict
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim.scenario import NodeScenario

CATALOG = ProfileCatalog()
DEFAULT_OPTIONS = EngineOptions()
PROFILE = CATALOG.get("h100-sxm-8x")

pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("requires_sshd")]


def scenario(name: str, *faults: str) -> tuple[str, str]:
    return name, NodeScenario(name, PROFILE, tuple(faults)).to_json()


def validate(cluster, tmp_path: Path, extra_host_vars=None, options: EngineOptions = DEFAULT_OPTIONS,
             text_edit=None):
    text = cluster.inventory_yaml(profile="h100-sxm-8x", extra_host_vars=extra_host_vars, command_timeout=120,
                                  connect_timeout=30)
    if text_edit:
        text = text_edit(text)
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "ssh.yaml"
    path.write_text(text)
    inventory = load_inventory(path, CATALOG)
    return run_validate(inventory, CATALOG, options, tmp_path / "reports")


def by_name(outcome):
    return {n.name: n for n in outcome.run.nodes}


def test_healthy_and_broken_nodes_over_real_ssh(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory([scenario("gpu01"), scenario("gpu02", "xid79", "gpu_missing"),
                                   scenario("gpu03", "row_remap_pending")])
    outcome = validate(cluster, tmp_path)
    nodes = by_name(outcome)
    assert nodes["gpu01"].verdict is Verdict.PASS, nodes["gpu01"].findings
    assert nodes["gpu02"].verdict is Verdict.FAIL
    assert {f.check for f in nodes["gpu02"].findings if f.verdict is Verdict.FAIL} >= {
        "gpu.count", "gpu.pci_visible", "kmsg.xid"}
    assert [f.verdict for f in nodes["gpu03"].findings if f.check == "memory.remapped_rows"] == [Verdict.FAIL]
    assert outcome.run.verdict is ClusterVerdict.NOT_READY
    assert outcome.exit_code == 1
    evidence = outcome.run_dir / "evidence" / "gpu02" / "kmsg.out"
    assert b"Xid" in evidence.read_bytes()


def test_ssh_and_sim_give_the_same_findings_for_the_same_scenario(ssh_cluster_factory, tmp_path):
    faults = [(), ("ecc_uncorrectable",), ("persistence_off", "xid13"), ("driver_missing",)]
    cluster = ssh_cluster_factory([scenario(f"n{i}", *f) for i, f in enumerate(faults)])
    over_ssh = by_name(validate(cluster, tmp_path / "ssh"))
    sim_path = tmp_path / "sim.yaml"
    sim_path.write_text("all:\n  vars: {connection: sim, profile: h100-sxm-8x}\n  hosts:\n" + "".join(
        f"    n{i}: {{sim_faults: {json.dumps(list(f))}}}\n" for i, f in enumerate(faults)))
    over_sim = by_name(run_validate(load_inventory(sim_path, CATALOG), CATALOG, EngineOptions(), tmp_path / "r"))

    def comparable(node):
        return sorted((f.check, f.verdict.value, f.summary, str(f.observed)) for f in node.findings
                      if f.check != "system.reachable")

    for name in over_sim:
        assert comparable(over_ssh[name]) == comparable(over_sim[name]), name


def test_unreachable_node_is_error_and_others_unaffected(ssh_cluster_factory, tmp_path):
    from nvdeploy.testing.sshd import free_port

    cluster = ssh_cluster_factory([scenario("gpu01")])
    closed = free_port()
    text = cluster.inventory_yaml(profile="h100-sxm-8x")
    text += f"    dead:\n      address: \"127.0.0.1\"\n      ssh_port: {closed}\n"
    path = tmp_path / "inv.yaml"
    path.write_text(text)
    outcome = run_validate(load_inventory(path, CATALOG), CATALOG, EngineOptions(connect_timeout_s=30),
                           tmp_path / "r")
    nodes = by_name(outcome)
    assert nodes["gpu01"].verdict is Verdict.PASS
    dead = nodes["dead"].findings[0]
    assert dead.verdict is Verdict.ERROR and dead.reason is ErrorReason.UNREACHABLE
    assert "refused" in dead.summary
    assert outcome.exit_code == 3


def test_unknown_host_key_is_refused_without_opt_in(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory([scenario("gpu01")])
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")

    def swap(text: str) -> str:
        return text.replace(str(cluster.known_hosts), str(empty))

    refused = validate(cluster, tmp_path / "a", text_edit=swap)
    finding = refused.run.nodes[0].findings[0]
    assert finding.reason is ErrorReason.HOST_KEY
    assert "--accept-new-host-keys" in finding.summary
    assert empty.read_text() == ""
    accepted = validate(cluster, tmp_path / "b", text_edit=swap, options=EngineOptions(accept_new_host_keys=True))
    assert accepted.run.nodes[0].verdict is Verdict.PASS
    assert cluster.node("gpu01").address in empty.read_text()


def test_changed_host_key_is_refused_and_nothing_runs(ssh_cluster_factory, tmp_path):
    import paramiko

    cluster = ssh_cluster_factory([scenario("gpu01")])
    node = cluster.node("gpu01")
    forged = tmp_path / "forged_known_hosts"
    key = paramiko.Ed25519Key.from_private_key_file(str(cluster.client_key))  # any other ed25519 key
    forged.write_text(f"[{node.address}]:{cluster.port} ssh-ed25519 {key.get_base64()}\n")
    outcome = validate(cluster, tmp_path, text_edit=lambda t: t.replace(str(cluster.known_hosts), str(forged)))
    finding = outcome.run.nodes[0].findings[0]
    assert finding.reason is ErrorReason.HOST_KEY
    assert "CHANGED" in finding.summary
    assert outcome.run.nodes[0].evidence == ()


def test_wrong_client_key_is_auth_error(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory([scenario("gpu01")])
    other = tmp_path / "other_key"
    import subprocess

    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    outcome = validate(cluster, tmp_path, text_edit=lambda t: t.replace(str(cluster.client_key), str(other)))
    finding = outcome.run.nodes[0].findings[0]
    assert finding.reason is ErrorReason.AUTH
    assert "authentication" in finding.summary


def test_hung_command_times_out_and_other_collectors_report(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory([scenario("gpu01", "hang"), scenario("gpu02")])
    outcome = validate(cluster, tmp_path, extra_host_vars={"gpu01": {"command_timeout": 2}})
    nodes = by_name(outcome)
    hung = nodes["gpu01"]
    assert hung.verdict is Verdict.ERROR
    assert any(f.reason is ErrorReason.TIMEOUT for f in hung.findings)
    assert nodes["gpu02"].verdict is Verdict.PASS
    assert hung.duration_s < 30


def test_probe_supplies_gpu_facts_and_nvidia_smi_is_the_fallback_without_python3(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory([scenario("gpu01"), scenario("gpu02", "no_python")])
    nodes = by_name(validate(cluster, tmp_path))
    assert nodes["gpu01"].facts["gpu_facts_source"] == "nvml_probe"
    assert nodes["gpu02"].facts["gpu_facts_source"] == "nvidia_smi_xml"
    for node in nodes.values():
        assert node.verdict is Verdict.PASS, node.findings
    persistence = next(f for f in nodes["gpu01"].findings if f.check == "gpu.persistence")
    assert persistence.evidence == "evidence/gpu01/nvml_probe.out"


def test_modules_planted_in_the_login_folder_never_run_and_change_no_verdict(ssh_cluster_factory, tmp_path):
    """The SSH session starts in the login user's home; a ``base64.py``/``json.py`` planted there (or in any folder
    the batch might start in) ran in the probe's ``python3 -c`` before it was isolated, and could print healthy GPU
    facts. Planted on one node of two: no marker appears, and both nodes get the same verdicts."""
    cluster = ssh_cluster_factory([scenario("gpu01", "row_remap_pending"), scenario("gpu02", "row_remap_pending")])
    planted = cluster.node("gpu01").home
    marker = planted / "PWNED"
    for name in ("base64", "json", "zlib", "types"):
        (planted / f"{name}.py").write_text(f"open({str(marker)!r}, 'a').write('{name}\\n')\n")
        (planted / f"{name}.py").chmod(0o644)
    nodes = by_name(validate(cluster, tmp_path))
    assert not marker.exists(), marker.read_text()
    assert nodes["gpu01"].facts.get("gpu_facts_source") == "nvml_probe", nodes["gpu01"].findings  # the probe ran
    verdicts = {name: sorted((f.check, f.verdict.value, f.gpu) for f in node.findings) for name, node in nodes.items()}
    assert verdicts["gpu01"] == verdicts["gpu02"] and nodes["gpu01"].verdict is Verdict.FAIL
