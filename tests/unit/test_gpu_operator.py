"""gpu_operator.*: the kubectl JSON parsers on real API objects, the verdicts, kubectl missing/hung, and the
cluster stage through ``nvdeploy validate`` with a fake kubectl on the PATH."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from _catalog_helpers import result, timed_out
from click.testing import CliRunner

from nvdeploy.checks.gpu_operator import (
    ALLOCATABLE,
    DRIVER,
    POLICY,
    VALIDATOR,
    OperatorHost,
    command_error,
)
from nvdeploy.cli.app import cli
from nvdeploy.parsers.k8s import parse_cluster_policies, parse_nodes, parse_validator_pods
from nvdeploy.phases.k8s import evaluate_results, kubectl
from nvdeploy.results import ErrorReason, Remediation, Verdict

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "k8s"


def real(name: str) -> str:
    return (REAL / name).read_text()


def node(name: str, gpus, driver: str = "550.90.07") -> dict:
    major, minor, rev = driver.split(".")
    status = {"allocatable": {"cpu": "224", "nvidia.com/gpu": str(gpus)}} if gpus is not None else {"allocatable": {}}
    return {"apiVersion": "v1", "kind": "Node", "status": status,
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "nvidia.com/cuda.driver.major": major,
                                                  "nvidia.com/cuda.driver.minor": minor,
                                                  "nvidia.com/cuda.driver.rev": rev}}}


def pod(name: str, node_name: str, phase: str = "Running", ready: bool = True) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "nvidia-operator-validator"}}, "spec": {"nodeName": node_name},
            "status": {"phase": phase, "containerStatuses": [{"name": "nvidia-operator-validator", "ready": ready,
                                                              "state": {"running": {}}}]}}


def listed(*items: dict) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(items)})


HOSTS = [OperatorHost("gpu001", "gpu001", 8, "550.90.07"), OperatorHost("gpu002", "gpu002", 8, "550.90.07")]
GOOD_PODS = listed(pod("nvidia-operator-validator-a", "gpu001"), pod("nvidia-operator-validator-b", "gpu002"))
GOOD_NODES = listed(node("gpu001", 8), node("gpu002", 8), node("cpu-only", None))


def by_check(findings, check):
    return [f for f in findings if f.check == check]


# --- parsers on real captures ------------------------------------------------------------------------------------


def test_real_ready_cluster_policy():
    parsed = parse_cluster_policies(real("clusterpolicy-ready-v25.10.1.json"))
    assert parsed.ok and parsed.warnings == ()
    [policy] = parsed.items
    assert (policy.name, policy.state, policy.driver_enabled, policy.driver_version) == \
        ("cluster-policy", "ready", True, None)


def test_real_not_ready_cluster_policy():
    [policy] = parse_cluster_policies(real("clusterpolicy-notready-state-driver-v23.9.1.json")).items
    assert (policy.name, policy.state, policy.driver_enabled) == ("gpu-cluster-policy", "notReady", True)


def test_real_node_allocatable():
    [k8s_node] = parse_nodes(real("node-allocatable-1gpu.json")).items
    assert k8s_node.name == "shoot--kyma-stage--c-xxxxxxxx-gpu-z3-59846-4262c"
    assert k8s_node.allocatable_gpus == 1 and k8s_node.driver_version is None


def test_real_validator_in_init_crashloop():
    [validator] = parse_validator_pods(real("pods-validator-init-crashloop.json")).items
    assert (validator.name, validator.node, validator.phase, validator.ready) == \
        ("nvidia-operator-validator-pjhbf", "rke2-gpu-node", "Pending", False)
    assert validator.reason == "CrashLoopBackOff (driver-validation)"


def test_parsers_never_raise_on_odd_input():
    for parse in (parse_cluster_policies, parse_nodes, parse_validator_pods):
        for text in ("", "not json", "[1, 2]", '{"kind": "Status"}', "{\"items\": [1, {}]}"):
            parsed = parse(text)
            assert parsed.ok is (text == "{\"items\": [1, {}]}")
    assert parse_nodes(listed({"metadata": {"name": "n"}, "status": {"allocatable": {"nvidia.com/gpu": "x"}}})) \
        .warnings == ("n: allocatable nvidia.com/gpu 'x' is not a number",)
    full = node("n", 8)
    full["metadata"]["labels"]["nvidia.com/cuda.driver-version.full"] = "570.86.15"
    assert parse_nodes(listed(full)).items[0].driver_version == "570.86.15"


# --- verdicts ----------------------------------------------------------------------------------------------------


def test_everything_healthy_passes():
    outcome = evaluate_results(HOSTS, result("p", real("clusterpolicy-ready-v25.10.1.json")), result("v", GOOD_PODS),
                                result("n", GOOD_NODES))
    assert {f.check: f.verdict for f in outcome.cluster} == {POLICY: Verdict.PASS, VALIDATOR: Verdict.PASS,
                                                             ALLOCATABLE: Verdict.PASS}
    assert all(f.verdict is Verdict.PASS for fs in outcome.per_node.values() for f in fs)
    assert {f.check for f in outcome.per_node["gpu001"]} == {VALIDATOR, ALLOCATABLE, DRIVER}


def test_not_ready_policy_fails():
    outcome = evaluate_results(HOSTS, result("p", real("clusterpolicy-notready-state-driver-v23.9.1.json")),
                                result("v", GOOD_PODS), result("n", GOOD_NODES))
    [finding] = by_check(outcome.cluster, POLICY)
    assert (finding.verdict, finding.observed, finding.remediation) == \
        (Verdict.FAIL, "notReady", Remediation.INVESTIGATE)
    assert "gpu-cluster-policy is notReady" in finding.summary


def test_validator_in_crashloop_fails_naming_the_node():
    hosts = [OperatorHost("gpu042", "rke2-gpu-node", 1, None)]
    outcome = evaluate_results(hosts, result("p", real("clusterpolicy-ready-v25.10.1.json")),
                                result("v", real("pods-validator-init-crashloop.json")),
                                result("n", listed(node("rke2-gpu-node", 1))))
    [finding] = by_check(outcome.per_node["gpu042"], VALIDATOR)
    assert finding.verdict is Verdict.FAIL and finding.node == "gpu042"
    assert "rke2-gpu-node" in finding.summary and "CrashLoopBackOff (driver-validation)" in finding.summary
    assert by_check(outcome.cluster, VALIDATOR)[0].verdict is Verdict.FAIL


def test_missing_validator_pod_and_unready_pod_fail():
    pods = listed(pod("nvidia-operator-validator-a", "gpu001", ready=False))
    outcome = evaluate_results(HOSTS, result("p", "{\"items\": []}"), result("v", pods), result("n", GOOD_NODES),
                                selected=(VALIDATOR, POLICY))
    assert "not ready" in by_check(outcome.per_node["gpu001"], VALIDATOR)[0].summary
    assert "no nvidia-operator-validator pod on node gpu002" in by_check(outcome.per_node["gpu002"], VALIDATOR)[0] \
        .summary
    assert by_check(outcome.cluster, POLICY)[0].verdict is Verdict.FAIL  # no ClusterPolicy at all


def test_allocatable_short_of_the_profile_fails_naming_the_node():
    nodes = listed(node("gpu001", 8), node("gpu002", 7))
    outcome = evaluate_results(HOSTS, result("p", "{\"items\": []}"), result("v", GOOD_PODS), result("n", nodes),
                                selected=(ALLOCATABLE,))
    [finding] = by_check(outcome.per_node["gpu002"], ALLOCATABLE)
    assert (finding.verdict, finding.observed, finding.expected) == (Verdict.FAIL, 7, 8)
    assert "gpu002" in finding.summary
    assert by_check(outcome.per_node["gpu001"], ALLOCATABLE)[0].verdict is Verdict.PASS
    assert "gpu002" in by_check(outcome.cluster, ALLOCATABLE)[0].summary


def test_real_node_against_a_one_gpu_profile_and_no_driver_labels():
    hosts = [OperatorHost("gpu-z3", "shoot--kyma-stage--c-xxxxxxxx-gpu-z3-59846-4262c", 1, "550.90.07")]
    outcome = evaluate_results(hosts, result("p", real("clusterpolicy-ready-v25.10.1.json")), result("v", listed()),
                                result("n", real("node-allocatable-1gpu.json")), selected=(ALLOCATABLE, DRIVER))
    assert [f.verdict for f in outcome.per_node["gpu-z3"]] == [Verdict.PASS]
    assert by_check(outcome.cluster, DRIVER)[0].verdict is Verdict.SKIP


def test_host_that_is_not_a_k8s_node_is_skipped():
    hosts = HOSTS + [OperatorHost("login01", "login01", 8, None)]
    outcome = evaluate_results(hosts, result("p", "{\"items\": []}"), result("v", GOOD_PODS),
                                result("n", GOOD_NODES), selected=(ALLOCATABLE, VALIDATOR))
    assert [f.verdict for f in outcome.per_node["login01"]] == [Verdict.SKIP]


def test_driver_version_from_labels_and_policy():
    nodes = listed(node("gpu001", 8), node("gpu002", 8, "535.104.05"))
    policy = listed({"kind": "ClusterPolicy", "metadata": {"name": "cp"}, "status": {"state": "ready"},
                     "spec": {"driver": {"enabled": True, "version": "550.54.15"}}})
    outcome = evaluate_results(HOSTS, result("p", policy), result("v", GOOD_PODS), result("n", nodes),
                                selected=(DRIVER,))
    assert by_check(outcome.per_node["gpu001"], DRIVER)[0].verdict is Verdict.PASS
    bad = by_check(outcome.per_node["gpu002"], DRIVER)[0]
    assert (bad.verdict, bad.observed, bad.remediation) == (Verdict.FAIL, "535.104.05", Remediation.REINSTALL)
    [cluster] = outcome.cluster
    assert cluster.verdict is Verdict.FAIL and "550.54.15" in cluster.summary


@pytest.mark.parametrize("res, verdict, reason", [
    (result("p", rc=127, error=ErrorReason.TOOL_MISSING, error_detail="kubectl: No such file"), Verdict.ERROR,
     ErrorReason.TOOL_MISSING),
    (timed_out("p"), Verdict.ERROR, ErrorReason.TIMEOUT),
    (result("p", rc=1, stderr="The connection to the server 10.0.0.1:6443 was refused - did you specify the right "
            "host or port?\n"), Verdict.ERROR, ErrorReason.UNREACHABLE),
    (result("p", rc=1, stderr="error: the server doesn't have a resource type \"clusterpolicies\"\n"), Verdict.FAIL,
     None),
    (result("p", "<html>proxy login</html>"), Verdict.ERROR, ErrorReason.UNPARSEABLE),
])
def test_kubectl_that_did_not_answer_is_never_pass(res, verdict, reason):
    outcome = evaluate_results(HOSTS, res, res, res)
    assert outcome.cluster and all((f.verdict, f.reason) == (verdict, reason) for f in outcome.cluster
                                   if f.check != DRIVER)
    assert not any(f.verdict is Verdict.PASS for fs in outcome.per_node.values() for f in fs)
    assert command_error(POLICY, result("p", "{}"), "ClusterPolicy") is None


def test_kubectl_missing_and_hung(tmp_path):
    missing = kubectl([str(tmp_path / "no-kubectl"), "get", "nodes"], "k", 5)
    assert (missing.rc, missing.error) == (127, ErrorReason.TOOL_MISSING)
    hang = tmp_path / "kubectl"
    hang.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(120)\n")
    hang.chmod(0o755)
    hung = kubectl([str(hang), "get", "nodes"], "k", 1)
    assert hung.timed_out and hung.error is ErrorReason.TIMEOUT and hung.rc is None


# --- the cluster stage through `nvdeploy validate` with a fake kubectl ------------------------------------------------

FAKE = """#!{python}
import sys, time
args = sys.argv[1:]
if {hang}:
    time.sleep(120)
assert "--kubeconfig" in args and args[args.index("--kubeconfig") + 1] == {kubeconfig!r}, args
files = {files!r}
for key, path in files.items():
    if key in args:
        sys.stdout.write(open(path).read())
        sys.exit(0)
if "nvidiadrivers.nvidia.com" in args:  # an operator without the NVIDIADriver CRD, as kubectl reports it
    sys.stderr.write("error: the server doesn't have a resource type \\"nvidiadrivers\\"\\n")
    sys.exit(1)
sys.stderr.write("unexpected: " + " ".join(args))
sys.exit(1)
"""


def fake_kubectl(folder: Path, kubeconfig: str, nodes: str, hang: bool = False) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "nodes.json").write_text(nodes)
    (folder / "pods.json").write_text(listed(pod("nvidia-operator-validator-a", "gpu001"),
                                             pod("nvidia-operator-validator-b", "gpu002")))
    files = {"clusterpolicies.nvidia.com": str(REAL / "clusterpolicy-ready-v25.10.1.json"),
             "pods": str(folder / "pods.json"), "nodes": str(folder / "nodes.json")}
    script = folder / "kubectl"
    script.write_text(FAKE.format(python=sys.executable, hang=hang, kubeconfig=kubeconfig, files=files))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def validate(tmp_path: Path, monkeypatch, nodes: str, hang: bool = False, extra: str = ""):
    kubeconfig = str(tmp_path / "kubeconfig")
    fake_kubectl(tmp_path / "bin", kubeconfig, nodes, hang)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("all:\n  vars:\n    cluster: k8s\n    connection: sim\n    profile: h100-sxm-8x\n"
                         f"    driver_version: \"550.90.07\"\n    kubeconfig: {kubeconfig}\n{extra}"
                         "  hosts:\n    gpu001: {}\n    gpu002: {}\n")
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["validate", "-i", str(inventory), "--out", str(out), "--no-history", "-q"],
                             catch_exceptions=False)
    [run_json] = list(out.glob("*/*/results.json"))
    return res, json.loads(run_json.read_text())


def test_validate_with_fake_kubectl_is_ready_then_names_the_short_node(tmp_path, monkeypatch):
    res, run = validate(tmp_path / "a", monkeypatch, listed(node("gpu001", 8), node("gpu002", 8)))
    ours = [f for f in run["cluster_findings"] if f["check"].startswith("gpu_operator.")]
    assert res.exit_code == 0, res.output
    assert {f["check"]: f["verdict"] for f in ours} == {POLICY: "PASS", VALIDATOR: "PASS", ALLOCATABLE: "PASS"}
    assert all(f["evidence"] for f in ours)
    res, run = validate(tmp_path / "b", monkeypatch, listed(node("gpu001", 8), node("gpu002", 7)))
    assert res.exit_code == 1, res.output
    gpu002 = next(n for n in run["nodes"] if n["name"] == "gpu002")
    [finding] = [f for f in gpu002["findings"] if f["check"] == ALLOCATABLE]
    assert finding["verdict"] == "FAIL" and "allocatable nvidia.com/gpu 7" in finding["summary"]


def test_validate_with_hung_kubectl_is_incomplete(tmp_path, monkeypatch):
    res, run = validate(tmp_path, monkeypatch, listed(), hang=True, extra="    kubectl_timeout: 1\n")
    ours = [f for f in run["cluster_findings"] if f["check"].startswith("gpu_operator.")]
    assert res.exit_code == 3, res.output
    assert ours and {(f["verdict"], f["reason"]) for f in ours if f["check"] != DRIVER} == {("ERROR", "timeout")}


def test_validate_without_kubeconfig_plans_nothing(tmp_path):
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("all:\n  vars: {connection: sim, profile: h100-sxm-8x}\n  hosts:\n    gpu001: {}\n")
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["validate", "-i", str(inventory), "--out", str(out), "--no-history", "-q"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    [run_json] = list(out.glob("*/*/results.json"))
    run = json.loads(run_json.read_text())
    assert not [f for f in run["cluster_findings"] if f["check"].startswith("gpu_operator.")]
