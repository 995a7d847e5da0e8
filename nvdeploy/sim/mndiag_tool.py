"""A simulated ``dcgmi mndiag --hostList 'a;b;...' --json`` on NVLink domain trays (DCGM 4.3+ multi-node diagnostic).

Absent by default, as on a DCGM before 4.3 or a tray without the module: dcgmi refuses the command (exit 255; the
words are the simulator's, no public capture of the real refusal was found). Present where the head tray has the
fault ``mndiag``; a listed tray without it is a host engine the head cannot reach (``runtime_error``). The JSON is
what DCGM 4.6's own print statements build (NVIDIA/DCGM commit 72fa3fe, dcgmi/MnDiag.cpp HelperJsonBuildOutput and
its helpers, keys from nvvs/include/NvvsJsonStrings.h), laid out as jsoncpp's toStyledString prints it
(nvdeploy/sim/jsoncpp.py); no public capture of a real run was found. Every GPU of every host Pass, or with
``mndiag_fail`` on a tray its GPU 1 Fail with an error message; two trays' GPU 1 are two results told apart only by
``host_id``. A run that could not complete prints HelperDisplayFailureMessage's object (the name, ``runtime_error``,
the zeroed response's metadata, no hosts) and a blank line, and exits with the DCGM error; a completed run exits 0,
as RunStartMnDiag returns what HelperDisplayAsJson returns, whatever the GPUs' results.
"""

from __future__ import annotations

from collections.abc import Sequence

from nvdeploy.sim.jsoncpp import styled
from nvdeploy.sim.scenario import NodeScenario, node_facts, register_fault
from nvdeploy.sim.tools import ToolOutput

register_fault("mndiag", "NVLink domain tray: DCGM 4.3+ with the multi-node diagnostic (dcgmi mndiag) is installed "
               "and its host engine reachable (dcgm.mndiag; absent by default)")
register_fault("mndiag_fail", "NVLink domain tray: dcgmi mndiag (mnubergemm) reports GPU 1 of this tray Fail "
               "(dcgm.mndiag FAILs naming it)")
DCGM_MNDIAG_VERSION = "4.6.0"


def mndiag(scenario: NodeScenario, args: Sequence[str]) -> ToolOutput:
    from nvdeploy.sim.mpi_tool import _faults_of

    if not scenario.has("mndiag"):
        return ToolOutput(b"", b"dcgmi: unknown command 'mndiag' (simulated DCGM before 4.3)\n", 255)
    if "--hostList" not in args or args.index("--hostList") + 1 >= len(args):
        return ToolOutput(b"", b"PARSE ERROR: Required argument missing: hostList\n", 255)
    hosts = [h for h in args[args.index("--hostList") + 1].split(";") if h]
    faults = {h: _faults_of(scenario, h) for h in hosts}
    facts = node_facts(scenario)
    out: dict = {"DCGM Diagnostic": "DCGM Multi-Node Diagnostic",
                 "metadata": {"num_hosts": len(hosts), "num_entities": len(hosts) * len(facts.gpus)}}
    down = [h for h, f in faults.items() if f is None or "mndiag" not in f or "unreachable" in f]
    test: dict = {"name": "mnubergemm", "status": "Pass", "test_summary": {"status": "Pass"}, "results": []}
    if down:
        # The response stayed as dcgmi zeroed it: no host, no test (numTests 0), metadata 0.
        out["metadata"] = {"num_hosts": 0, "num_entities": 0}
        out["runtime_error"] = ("Error: Unable to complete multi-node diagnostic on host localhost. Return: "
                                "(Host engine connection invalid/disconnected) -18\n")
        return ToolOutput((styled(out) + "\n").encode(), rc=238)
    out["hosts"] = []
    for host_id, host in enumerate(hosts):
        out["hosts"].append({"host_id": host_id, "hostname": host, "dcgm_version": DCGM_MNDIAG_VERSION,
                             "driver_version": facts.driver_version, "num_entities": len(facts.gpus),
                             "entities": [{"entity_group_id": 1, "entity_group": "GPU", "entity_id": g.index,
                                           "device_id": "2941"} for g in facts.gpus]})
        for gpu in facts.gpus:
            result = {"host_id": host_id, "entity_group_id": 1, "entity_group": "GPU", "entity_id": gpu.index,
                      "status": "Pass"}
            if "mndiag_fail" in (faults[host] or ()) and gpu.index == 1:
                result["status"] = "Fail"
                result["warnings"] = [{"warning": "GPU 1 reported an uncorrectable error during mnubergemm "
                                       "(simulated)", "error_id": 95, "error_category": 1, "error_severity": 2}]
                test.update(status="Fail", test_summary={"status": "Fail"})
            test["results"].append(result)
    out["test_categories"] = [{"category": "Multi-Node Tests", "tests": [test]}]
    return ToolOutput(styled(out).encode())
