"""gpu_operator.allocatable under the MIG strategies (mixed: nvidia.com/mig-<profile> resources; single: MIG devices
as nvidia.com/gpu), and gpu_operator.driver reading NVIDIADriver custom resources (nvidia.com/v1alpha1).

Real inputs: tests/fixtures/real/k8s/node-mig-mixed-h100-all-balanced.json (davidB/kubectl-view-allocations#258),
nvidiadrivers-gold-silver-docs.json (the GPU Operator docs' two-driver manifests); see PROVENANCE.tsv. The single
strategy's labels are the GPU Operator MIG docs' example (NVIDIA-H100-80GB-HBM3-MIG-1g.10gb, gpu.count 7)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from _catalog_helpers import result
from click.testing import CliRunner

from nvdeploy.checks.gpu_operator import ALLOCATABLE, DRIVER, OperatorHost, judge_allocatable
from nvdeploy.cli.app import cli
from nvdeploy.parsers.k8s import parse_cluster_policies, parse_nodes, parse_nvidia_drivers
from nvdeploy.phases.k8s import evaluate_results
from nvdeploy.results import ErrorReason, Remediation, Verdict

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "k8s"
MIXED_NODE = "h100-mig-node"


def real(name: str) -> str:
    return (REAL / name).read_text()


def listed(*items: dict) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(items)})


def mig_node(name: str, labels: dict, allocatable: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                                                      **labels}},
            "status": {"allocatable": {"cpu": "224", **allocatable}}}


def mixed_real(**changes) -> dict:
    node = json.loads(real("node-mig-mixed-h100-all-balanced.json"))["items"][0]
    for key, value in changes.items():
        section, name = key.split("__")
        target = node["metadata"]["labels"] if section == "label" else node["status"]["allocatable"]
        if value is None:
            target.pop(name, None)
        else:
            target[name] = value
    return node


def judged(node: dict, expected: int = 1):
    [parsed] = parse_nodes(listed(node)).items
    return judge_allocatable(expected, parsed)


# --- MIG strategies ------------------------------------------------------------------------------------------------


def test_real_mixed_node_parses_its_mig_resources():
    [node] = parse_nodes(real("node-mig-mixed-h100-all-balanced.json")).items
    assert (node.allocatable_gpus, node.mig_strategy, node.gpu_count_label) == (0, "mixed", 1)
    assert node.mig_devices == (("mig-1g.12gb", 2), ("mig-2g.24gb", 1), ("mig-3g.47gb", 1))
    assert node.mig_total == 4 and sum(n for _, n in node.mig_count_labels) == 4


def test_mixed_strategy_is_not_zero_gpus():
    verdict = judged(mixed_real())
    assert verdict.verdict is Verdict.PASS, verdict.summary
    assert "MIG mixed strategy, allocatable nvidia.com/gpu 0 and mig-1g.12gb 2, mig-2g.24gb 1, mig-3g.47gb 1 on 1 " \
           "GPUs" in verdict.summary
    assert verdict.observed == {"gpus": 0, "mig": {"mig-1g.12gb": 2, "mig-2g.24gb": 1, "mig-3g.47gb": 1},
                                "gpu_count_label": 1}


def test_mixed_strategy_failures_name_the_cause():
    short = judged(mixed_real(**{"allocatable__nvidia.com/mig-1g.12gb": "0"}))
    assert short.verdict is Verdict.FAIL and "2 MIG devices allocatable of the 4" in short.summary
    assert short.remediation is Remediation.INVESTIGATE
    wrong_count = judged(mixed_real(), expected=8)
    assert wrong_count.verdict is Verdict.FAIL and "the profile expects 8 GPUs" in wrong_count.summary
    empty = judged(mixed_real(**{f"allocatable__nvidia.com/{p}": "0" for p in ("mig-1g.12gb", "mig-2g.24gb",
                                                                                "mig-3g.47gb")},
                              **{f"label__nvidia.com/{p}.count": None for p in ("mig-1g.12gb", "mig-2g.24gb",
                                                                                 "mig-3g.47gb")}))
    assert empty.verdict is Verdict.FAIL and "nothing allocatable" in empty.summary
    unlabelled = judged(mixed_real(**{"label__nvidia.com/gpu.count": None}))
    assert (unlabelled.verdict, unlabelled.remediation) == (Verdict.WARN, Remediation.MONITOR)
    failed = judged(mixed_real(**{"label__nvidia.com/mig.config.state": "failed"}))
    assert failed.verdict is Verdict.FAIL and "mig.config.state=failed" in failed.summary


def test_single_strategy_counts_mig_devices_as_gpus():
    labels = {"nvidia.com/gpu.count": "7", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
              "nvidia.com/mig.config.state": "success", "nvidia.com/mig.strategy": "single"}
    ok = judged(mig_node("n", labels, {"nvidia.com/gpu": "7"}))
    assert ok.verdict is Verdict.PASS and "7 MIG devices (NVIDIA-H100-80GB-HBM3-MIG-1g.10gb)" in ok.summary
    short = judged(mig_node("n", labels, {"nvidia.com/gpu": "5"}))
    assert short.verdict is Verdict.FAIL and "GPU feature discovery counts 7" in short.summary
    # MIG strategy single on a GPU not in MIG mode: plain nvidia.com/gpu against the profile, as before.
    plain = judged(mig_node("n", {"nvidia.com/mig.strategy": "single",
                                  "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, {"nvidia.com/gpu": "7"}),
                   expected=8)
    assert plain.verdict is Verdict.FAIL and "allocatable nvidia.com/gpu 7, the profile expects 8" in plain.summary


def test_mixed_node_through_the_check():
    hosts = [OperatorHost("gpu001", MIXED_NODE, 1, None)]
    outcome = evaluate_results(hosts, result("p", "{\"items\": []}"), result("v", listed()),
                                result("n", real("node-mig-mixed-h100-all-balanced.json")), selected=(ALLOCATABLE,))
    [finding] = outcome.per_node["gpu001"]
    assert (finding.verdict, finding.expected) == (Verdict.PASS, 1)
    assert outcome.cluster[0].verdict is Verdict.PASS


# --- NVIDIADriver --------------------------------------------------------------------------------------------------


def labelled(name: str, config: str) -> dict:
    return mig_node(name, {"driver.config": config, "nvidia.com/cuda.driver-version.full": "580.126.20"},
                    {"nvidia.com/gpu": "8"})


def test_real_nvidia_drivers_parse():
    gold, silver = parse_nvidia_drivers(real("nvidiadrivers-gold-silver-docs.json")).items
    assert (gold.name, gold.version, gold.driver_type, gold.state, gold.node_selector) == \
        ("demo-gold", "580.126.20", "gpu", "ready", (("driver.config", "gold"),))
    assert (silver.version, silver.state, silver.precompiled) == ("470.141.10", "notReady", False)


def test_nvidia_drivers_judged_against_the_hosts_they_select():
    hosts = [OperatorHost("gpu001", "gpu001", 8, "580.126.20"), OperatorHost("gpu002", "gpu002", 8, "580.126.20")]
    nodes = listed(labelled("gpu001", "gold"), labelled("gpu002", "silver"))
    outcome = evaluate_results(hosts, result("p", "{\"items\": []}"), result("v", listed()), result("n", nodes),
                                selected=(DRIVER,), drivers=result("d", real("nvidiadrivers-gold-silver-docs.json")))
    by_name = {f.summary.split(" (")[0]: f for f in outcome.cluster if f.check == DRIVER}
    gold, silver = by_name["NVIDIADriver demo-gold"], by_name["NVIDIADriver demo-silver"]
    assert gold.verdict is Verdict.PASS and "for gpu001" in gold.summary
    assert (silver.verdict, silver.remediation) == (Verdict.FAIL, Remediation.REINSTALL)
    assert "state notReady" in silver.summary and "deploys 470.141.10, the inventory expects 580.126.20" in \
        silver.summary and "for gpu002" in silver.summary


def test_precompiled_branch_and_crd_policy():
    precompiled = {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "metadata": {"name": "pre"},
                   "spec": {"driverType": "gpu", "usePrecompiled": True, "version": "580", "nodeSelector": {}},
                   "status": {"state": "ready"}}
    policy = listed({"kind": "ClusterPolicy", "metadata": {"name": "cp"}, "status": {"state": "ready"},
                     "spec": {"driver": {"enabled": True, "useNvidiaDriverCRD": True, "version": "535.104.05"},
                              "mig": {"strategy": "mixed"}}})
    [parsed] = parse_cluster_policies(policy).items
    assert parsed.uses_driver_crd and parsed.mig_strategy == "mixed"
    hosts = [OperatorHost("gpu001", "gpu001", 8, "580.126.20")]
    outcome = evaluate_results(hosts, result("p", policy), result("v", listed()),
                                result("n", listed(labelled("gpu001", "any"))), selected=(DRIVER,),
                                drivers=result("d", listed(precompiled)))
    # The ClusterPolicy's driver.version is not the operator's when useNvidiaDriverCRD is set: no finding for it.
    assert [(f.verdict, f.summary.split(" (")[0]) for f in outcome.cluster] == [(Verdict.PASS, "NVIDIADriver pre")]


def test_no_crd_is_silent_and_a_failed_read_is_error():
    hosts = [OperatorHost("gpu001", "gpu001", 8, "580.126.20")]
    nodes = result("n", listed(labelled("gpu001", "gold")))
    missing = result("d", rc=1, stderr='error: the server doesn\'t have a resource type "nvidiadrivers"\n')
    outcome = evaluate_results(hosts, result("p", "{\"items\": []}"), result("v", listed()), nodes,
                                selected=(DRIVER,), drivers=missing)
    assert not outcome.cluster and outcome.per_node["gpu001"][0].verdict is Verdict.PASS  # the node's label
    refused = result("d", rc=1, stderr="Unable to connect to the server: dial tcp 10.0.0.1:6443: i/o timeout\n")
    outcome = evaluate_results(hosts, result("p", "{\"items\": []}"), result("v", listed()), nodes,
                                selected=(DRIVER,), drivers=refused)
    assert [(f.verdict, f.reason) for f in outcome.cluster] == [(Verdict.ERROR, ErrorReason.UNREACHABLE)]


# --- through `nvdeploy validate` with a fake kubectl ---------------------------------------------------------------

FAKE = """#!{python}
import sys
args = sys.argv[1:]
files = {files!r}
for key, path in files.items():
    if key in args:
        sys.stdout.write(open(path).read())
        sys.exit(0)
sys.stderr.write('error: the server doesn\\'t have a resource type "' + args[-3] + '"\\n')
sys.exit(1)
"""


def test_validate_reads_mixed_mig_and_nvidia_drivers(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    node = mixed_real()
    node["metadata"]["name"] = node["metadata"]["labels"]["kubernetes.io/hostname"] = "gpu001"
    node["metadata"]["labels"].update({"driver.config": "gold", "nvidia.com/cuda.driver-version.full": "580.126.20"})
    (bin_dir / "nodes.json").write_text(listed(node))
    pod = {"kind": "Pod", "metadata": {"name": "nvidia-operator-validator-a"}, "spec": {"nodeName": "gpu001"},
           "status": {"phase": "Running", "containerStatuses": [{"name": "v", "ready": True, "state": {}}]}}
    (bin_dir / "pods.json").write_text(listed(pod))
    files = {"clusterpolicies.nvidia.com": str(REAL / "clusterpolicy-ready-v25.10.1.json"),
             "nvidiadrivers.nvidia.com": str(REAL / "nvidiadrivers-gold-silver-docs.json"),
             "pods": str(bin_dir / "pods.json"), "nodes": str(bin_dir / "nodes.json")}
    script = bin_dir / "kubectl"
    script.write_text(FAKE.format(python=sys.executable, files=files))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("all:\n  vars:\n    cluster: k8s\n    connection: sim\n    profile: h100-sxm-8x\n"
                         "    driver_version: \"580.126.20\"\n    kubeconfig: /dev/null\n  hosts:\n    gpu001: {}\n")
    out = tmp_path / "out"
    CliRunner().invoke(cli, ["validate", "-i", str(inventory), "--out", str(out), "--no-history", "-q"],
                       catch_exceptions=False)
    [run_json] = list(out.glob("*/*/results.json"))
    run = json.loads(run_json.read_text())
    ours = {(f["check"], f["summary"].split(" (")[0]): f for f in run["cluster_findings"]
            if f["check"].startswith("gpu_operator.")}
    gold = ours[(DRIVER, "NVIDIADriver demo-gold")]
    assert gold["verdict"] == "PASS" and gold["evidence"].endswith("nvidiadrivers.out")
    silver = ours[(DRIVER, "NVIDIADriver demo-silver")]
    assert silver["verdict"] == "FAIL" and "for no inventory host" in silver["summary"]
    gpu001 = next(n for n in run["nodes"] if n["name"] == "gpu001")
    [alloc] = [f for f in gpu001["findings"] if f["check"] == ALLOCATABLE]
    # h100-sxm-8x expects 8 GPUs; GFD counts 1: named, not "0 GPUs allocatable".
    assert alloc["verdict"] == "FAIL" and "MIG mixed strategy" in alloc["summary"] and \
        "the profile expects 8 GPUs" in alloc["summary"]
