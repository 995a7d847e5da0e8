"""dcgmi diag / discovery parsers against real captures (tests/fixtures/real/{dcgmi-diag-json,dcgmi-diag-text,nvvs,
dcgmi-discovery}, and pasted pieces in fragments/, see PROVENANCE.tsv)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from nvdeploy.parsers.dcgm import (
    UNNAMED_TEST,
    DcgmDiagFacts,
    DcgmDiscoveryFacts,
    DcgmGpu,
    DcgmResult,
    parse_dcgm_diag,
    parse_dcgm_discovery,
)

REAL = Path(__file__).parent.parent / "fixtures" / "real"
DIAG_DIRS = ("dcgmi-diag-json", "dcgmi-diag-text", "nvvs")
DISCOVERY_DIR = REAL / "dcgmi-discovery"
DEPLOY_3X = ["Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS Blocks", "Persistence Mode",
             "Environment Variables", "Page Retirement/Row Remap", "Graphics Processes", "Inforom"]

# "dir/file" -> top-level facts, test names in order, {test name: verdict}, {test name: [(gpu, verdict, #msgs)]},
# substrings expected in the messages of a test, and substrings expected in the warnings.
DIAG_EXPECT: dict[str, dict[str, Any]] = {
    "dcgmi-diag-json/fragment-r3-T400-dcgm3x-all-skip-gpu_id-singular-user-elided-deployment.json": {
        "top": {"format": "json", "overall": "SKIP", "complete": False, "dcgm_version": None},
        "names": ["PCIe", "GPU Memory", "Diagnostic", "EUD Test", "Targeted Stress"],
        "results": {"PCIe": [(0, "SKIP", 0)], "Targeted Stress": [(0, "SKIP", 0)]},
        "categories": {"PCIe": "Integration", "EUD Test": "Hardware", "Targeted Stress": "Stress"},
        "warn": ["truncated", "key without a value"],
    },
    "dcgmi-diag-json/r1-GB10-DGX-Spark-dcgm4.2.3-580.82.09-software-fail-persistence-sram-sentinel.json": {
        "top": {"format": "json", "overall": "FAIL", "complete": True, "dcgm_version": "4.2.3",
                "driver_version": "580.82.09"},
        "names": ["software"], "verdicts": {"software": "FAIL"},
        "results": {"software": [(0, "FAIL", 1)]},
        "messages": {"software": ["Persistence mode for GPU 0 is disabled", 'nvidia-smi -i <gpuId> -pm 1 "']},
        "test_messages": {"software": ["Value = 9223372036854775794"]},
        "categories": {"software": "Deployment"},
    },
    "nvvs/nvvs-json-dcgm3.1.0-8gpu-pass-with-nulls-and-warning-prefix.json": {
        "top": {"format": "json", "overall": "PASS", "complete": True, "dcgm_version": "3.1.0"},
        "names": ["Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS-related Blocks",
                  "Persistence Mode", "Environmental Variables", "Page Retirement/Row Remap", "Graphics Processes",
                  "Inforom", "software"],
        "results": {"Denylist": [(g, "PASS", 0) for g in range(8)], "software": [(g, "PASS", 0) for g in range(8)]},
        "categories": {"Inforom": "Deployment", "software": "Custom"},
        "warn": ["WARNING: THIS SHOULD NOT HAPPEN"],
    },
    "dcgmi-diag-text/fragment-deployment-error-gpu3-uncorrectable-row-remap-pending.txt": {
        "top": {"format": "text", "overall": "FAIL", "complete": False},
        "names": ["Error"], "results": {"Error": [(3, "FAIL", 1)]},
        "messages": {"Error": ["GPU 3 has uncorrectable memory errors and row remappings are pending"]},
        "categories": {"Error": "Deployment"},
        "warn": ["without a preceding test row"],
    },
    "dcgmi-diag-text/r1-dcgm1x-deployment-fail-cascade-empty-categories-slurm-prolog.txt": {
        "top": {"format": "text", "overall": "FAIL", "complete": True, "dcgm_version": None},
        "names": ["Blacklist", "NVML Library", "CUDA Main Library", "Permissions and OS Blocks", "Persistence Mode",
                  "Environment Variables", "Page Retirement", "Graphics Processes", "Inforom"],
        "verdicts": {"Blacklist": "PASS", "Permissions and OS Blocks": "PASS", "Persistence Mode": "FAIL",
                     "Environment Variables": "FAIL", "Page Retirement": "FAIL", "Graphics Processes": "FAIL",
                     "Inforom": "FAIL"},
        "results": {"Inforom": [(None, "FAIL", 0)]},
    },
    "dcgmi-diag-text/r3-fail-early-8xH100-dcgm3.3.8-560.35.03-cuinit-system-not-initialized.txt": {
        "top": {"format": "text", "overall": "FAIL", "complete": True, "dcgm_version": "3.3.8",
                "driver_version": "560.35.03"},
        "names": [*DEPLOY_3X, "PCIe", "GPU Memory", "Memory Bandwidth", "EUD Test"],
        "verdicts": {"Persistence Mode": "PASS", "PCIe": "SKIP", "GPU Memory": "FAIL", "Memory Bandwidth": "SKIP",
                     "EUD Test": "SKIP"},
        "results": {"GPU Memory": [(None, "FAIL", 8)], "Persistence Mode": [(None, "PASS", 1)]},
        "messages": {
            "GPU Memory": ["GPU 0 Error using CUDA API cuInit", "Restart DCGM. Rerun diagnostics.",
                           "Unable to initialize CUDA library: 'system not yet initialized'",
                           "Refer to https://github.com/nvidia/cuda-samples", "GPU 7 Error using CUDA API cuInit"],
            "Persistence Mode": ["Persistence mode for GPU 0 is disabled. Enable persistence mode by running",
                                 "as root.,Persistence mode for GPU 1 is disabled.", "GPU 4 is disabled. Enable pers"],
        },
        "categories": {"PCIe": "Integration", "GPU Memory": "Hardware", "EUD Test": "Stress"},
    },
    "dcgmi-diag-text/r3-srun-2xRTXPRO6000-Blackwell-dcgm3.3.9-570.172.08-all-skip-duplicated.txt": {
        "top": {"format": "text", "overall": "PASS", "complete": True, "dcgm_version": "3.3.9",
                "driver_version": "570.172.08"},
        "names": [*DEPLOY_3X, "PCIe", "GPU Memory", "Targeted Stress", "Targeted Power", "Memory Bandwidth",
                  "EUD Test"],
        "verdicts": {"Denylist": "PASS", "PCIe": "SKIP", "GPU Memory": "SKIP", "Targeted Power": "SKIP"},
        "warn": ["printed 2 times"],
    },
    "dcgmi-diag-text/r4-dcgm2x-blacklist-era-all-pass-azure-fairwus3.txt": {
        "top": {"format": "text", "overall": "PASS", "complete": True, "dcgm_version": None},
        "names": ["Blacklist", *DEPLOY_3X[1:], "PCIe", "GPU Memory", "Diagnostic", "Pulse Test", "SM Stress",
                  "Targeted Stress", "Targeted Power", "Memory Bandwidth", "Memtest"],
        "verdicts": {"Memtest": "PASS", "Pulse Test": "PASS"},
        "results": {"Memtest": [(None, "PASS", 0)]},
        "categories": {"Pulse Test": "Hardware", "Memtest": "Stress"},
    },
}

DISCOVERY_EXPECT: dict[str, dict[str, Any]] = {
    "1xT4G-g5g-graviton-dcgm-exporter-4.4.2.txt": {
        "found": (1, None), "switches": (),
        "gpus": {0: DcgmGpu(0, "NVIDIA T4G", "00000000:00:1F.0", "GPU-9ca02968-f496-c0c4-01d9-509cb6c32f5f")},
        "n": 1, "warn": [],
    },
    "4xH100-dcgm3.1.7-name-NULL-trailing-pad-90cols.txt": {
        "found": (4, 0), "switches": (),
        "gpus": {0: DcgmGpu(0, None, "00000000:4C:00.0", "GPU-d6a2c177-4cd8-8d01-0310-79f2720f37de"),
                 3: DcgmGpu(3, None, "00000000:DC:00.0", "GPU-5ea04b20-4cc3-4d84-0bb2-e4143be8e874")},
        "n": 4, "warn": ["<<<NULL>>>"],
    },
    "4xP100-SXM2-ppc64le-dcgm1x-old-layout-nonzero-pci-domains.txt": {
        "found": (4, None), "switches": (),
        "gpus": {1: DcgmGpu(1, "Tesla P100-SXM2-16GB", "0003:01:00.0", "GPU-88098753-f09f-2dd2-c9c7-b6f95e8c99e3")},
        "n": 4, "warn": [],
    },
    "8xA100-SXM4-40GB-dgx-with-6-nvswitches.txt": {
        "found": (8, 6), "switches": ("11", "10", "13", "9", "12", "8"),
        "gpus": {7: DcgmGpu(7, "A100-SXM4-40GB", "00000000:BD:00.0", "GPU-a16e3b98-8be2-6a0c-7fac-9cb024dbc2df")},
        "n": 8, "warn": [],
    },
    "discovery-c-empty-instance-hierarchy-despite-mig-dcgm3.1.7.txt": {
        "found": (None, None), "switches": (), "gpus": {}, "n": 0, "warn": ["no GPU table"],
    },
}

HOSTENGINE_DOWN = [
    "Error: unable to establish a connection to the specified host: localhost\n",
    "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n",
    '{\n\t"DCGM Diagnostic" : {"runtime_error" : "Unable to connect to host engine", "version" : "4.1.1"}\n}\n',
]


def _diag_files() -> list[str]:
    return sorted(f"{d}/{p.name}" for d in DIAG_DIRS for p in (REAL / d).iterdir())


def test_every_fixture_has_expectations() -> None:
    assert _diag_files() == sorted(DIAG_EXPECT)
    assert sorted(p.name for p in DISCOVERY_DIR.iterdir()) == sorted(DISCOVERY_EXPECT)


@pytest.mark.parametrize("name", sorted(DIAG_EXPECT))
def test_real_diag(name: str) -> None:
    expected = DIAG_EXPECT[name]
    facts = parse_dcgm_diag((REAL / name).read_text(encoding="utf-8"))
    for key, value in expected["top"].items():
        assert getattr(facts, key) == value, key
    assert facts.hostengine_unreachable is False and facts.runtime_error is None
    tests = {t.name: t for t in facts.tests}
    assert [t.name for t in facts.tests] == expected["names"]
    for test_name, verdict in expected.get("verdicts", {}).items():
        assert tests[test_name].verdict == verdict, test_name
    for test_name, results in expected.get("results", {}).items():
        assert [(r.gpu, r.verdict, len(r.messages)) for r in tests[test_name].results] == results, test_name
    for test_name, parts in expected.get("messages", {}).items():
        text = " | ".join(m for r in tests[test_name].results for m in r.messages)
        assert all(part in text for part in parts), (test_name, text)
    for test_name, parts in expected.get("test_messages", {}).items():
        assert all(any(part in m for m in tests[test_name].messages) for part in parts)
    for test_name, category in expected.get("categories", {}).items():
        assert tests[test_name].category == category
    assert all(r.verdict in ("PASS", "FAIL", "WARN", "SKIP") for t in facts.tests for r in t.results)
    for part in expected.get("warn", []):
        assert any(part in w for w in facts.warnings), (part, facts.warnings)
    if not expected.get("warn"):
        assert facts.warnings == ()
    assert json.loads(json.dumps(facts.to_dict()))["overall"] == expected["top"]["overall"]


@pytest.mark.parametrize("name", sorted(DISCOVERY_EXPECT))
def test_real_discovery(name: str) -> None:
    expected = DISCOVERY_EXPECT[name]
    facts = parse_dcgm_discovery((DISCOVERY_DIR / name).read_text(encoding="utf-8"))
    assert (facts.gpus_found, facts.nvswitches_found) == expected["found"]
    assert facts.nvswitches == expected["switches"]
    assert [g.id for g in facts.gpus] == list(range(expected["n"]))
    for position, gpu in expected["gpus"].items():
        assert facts.gpus[position] == gpu
    assert all(g.uuid and g.uuid.startswith("GPU-") and g.pci_bus_id for g in facts.gpus)
    assert facts.hostengine_unreachable is False
    for part in expected["warn"]:
        assert any(part in w for w in facts.warnings)
    if not expected["warn"]:
        assert facts.warnings == ()
    assert json.loads(json.dumps(facts.to_dict()))["nvswitches"] == list(expected["switches"])


def test_text_mixed_per_gpu_verdicts_and_messages_go_to_their_gpu() -> None:
    text = """Successfully ran diagnostic for group.
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Deployment  --------+------------------------------------------------|
| Denylist                  | Pass                                           |
+-----  Hardware  ----------+------------------------------------------------+
| GPU Memory                | Pass - GPUs: 0, 1, 3                           |
|                           | Fail - GPU: 2                                  |
| Warning                   | GPU 2 DBE detected                             |
| Diagnostic                | Warn - All                                     |
|                           |   Code: (000000000000)                         |
+-----  Stress  ------------+------------------------------------------------+
| Targeted Power            | GPU0: Fail - power too low                     |
+---------------------------+------------------------------------------------+
"""
    facts = parse_dcgm_diag(text)
    assert facts.complete and facts.overall == "FAIL" and facts.warnings == ()
    memory, diagnostic, power = facts.tests[1:]
    assert memory.results == (DcgmResult(0, "PASS"), DcgmResult(1, "PASS"), DcgmResult(3, "PASS"),
                              DcgmResult(2, "FAIL", ("GPU 2 DBE detected",)))
    assert memory.verdict == "FAIL"
    assert diagnostic.results == (DcgmResult(None, "WARN", ("Code: (000000000000)",)),)
    assert power.results == (DcgmResult(0, "FAIL", ("power too low",)),)


def test_text_without_closing_border_is_incomplete() -> None:
    text = (REAL / "dcgmi-diag-text/r4-dcgm2x-blacklist-era-all-pass-azure-fairwus3.txt").read_text()
    facts = parse_dcgm_diag(text[: text.index("| Targeted Power")])
    assert facts.complete is False
    assert [t.name for t in facts.tests][-1] == "Targeted Stress"


def test_json_dcgm4_entities_overall_and_iterations() -> None:
    doc = {"iterations": [{"DCGM Diagnostic": {"test_categories": [None, {"category": "Hardware", "tests": [
        {"name": "memory", "results": [
            {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 1, "status": "Warn",
             "warnings": [{"warning": "slow", "error_id": 1}], "info": "note"},
            {"entity_group": "CPU", "entity_group_id": 7, "entity_id": 0, "status": "Pass"}]}]}]},
        "metadata": {"version": "4.1.0", "Driver Version Detected": "570.1"}}], "Overall Result": "Fail"}
    facts = parse_dcgm_diag("noise before\n" + json.dumps(doc, indent=2))
    assert facts.format == "json" and facts.complete and facts.overall == "FAIL"
    assert facts.dcgm_version is None  # metadata is per iteration; the top-level document has none
    assert facts.tests[0].results == (DcgmResult(1, "WARN", ("slow", "note")), DcgmResult(None, "PASS"))
    assert facts.tests[0].verdict == "WARN"


@pytest.mark.parametrize("text", HOSTENGINE_DOWN)
def test_hostengine_unreachable(text: str) -> None:
    facts = parse_dcgm_diag(text)
    assert facts.hostengine_unreachable is True
    assert facts.tests == () and facts.overall is None and facts.complete is False or facts.format == "json"
    assert facts.runtime_error
    assert parse_dcgm_discovery(text).hostengine_unreachable is True


def test_truncated_json_at_every_point_never_raises_and_is_incomplete() -> None:
    for name in _diag_files():
        text = (REAL / name).read_text()
        full = parse_dcgm_diag(text)
        for cut in range(0, len(text) - 2, 11):
            facts = parse_dcgm_diag(text[:cut])
            assert isinstance(facts, DcgmDiagFacts)
            if full.format == "json" and cut > text.index("{") + 1:
                assert facts.complete is False and facts.format == "json"
                assert len(facts.tests) <= len(full.tests)


@pytest.mark.parametrize("text", ["", "\x00\x00", "\ufffd\ufffd\ufffd", "{", "[1, 2", "| | |\n+--+\n", "{\"a\": }"])
def test_bad_input_never_raises(text: str) -> None:
    facts = parse_dcgm_diag(text)
    assert facts.tests == () and facts.overall is None
    assert facts.warnings
    assert parse_dcgm_discovery(text).gpus == ()


def test_random_bytes_never_raise() -> None:
    rng = random.Random(11)
    seeds = [(REAL / n).read_text() for n in _diag_files()] + [p.read_text() for p in DISCOVERY_DIR.iterdir()]
    for _ in range(300):
        seed = rng.choice(seeds)
        cut = rng.randrange(len(seed))
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(60))).decode("utf-8", errors="replace")
        text = seed[:cut] + junk + seed[cut + rng.randrange(40):]
        assert isinstance(parse_dcgm_diag(text), DcgmDiagFacts)
        assert isinstance(parse_dcgm_discovery(text), DcgmDiscoveryFacts)
    deep = "{" + '"a": [' * 5000
    assert parse_dcgm_diag(deep).complete is False


DCGM4_TEXT = """Successfully ran diagnostic for group.
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Metadata  ----------+------------------------------------------------|
| DCGM Version              | 4.2.3                                          |
| Driver Version Detected   | 580.82.09                                      |
| GPU Device IDs Detected   | 2330, 2330                                     |
|-----  Deployment  --------+------------------------------------------------|
| software                  | Fail                                           |
|                           | GPU0: Pass                                     |
|                           | GPU1: Fail                                     |
| Warning: GPU1             | Persistence Mode: Persistence mode for GPU 1   |
|                           | is disabled.                                   |
+-----  Hardware  ----------+------------------------------------------------+
| cpu_eud                   | Pass                                           |
|                           | CPU0: Pass                                     |
+---------------------------+------------------------------------------------+
"""


def test_dcgm4_text_entity_rows_and_entity_warnings() -> None:
    facts = parse_dcgm_diag(DCGM4_TEXT)
    assert facts.warnings == () and facts.complete
    assert (facts.dcgm_version, facts.driver_version, facts.overall) == ("4.2.3", "580.82.09", "FAIL")
    software, cpu = facts.tests
    assert software.results == (DcgmResult(None, "FAIL"), DcgmResult(0, "PASS"), DcgmResult(
        1, "FAIL", ("Persistence Mode: Persistence mode for GPU 1 is disabled.",)))
    assert cpu.results == (DcgmResult(None, "PASS"), DcgmResult(None, "PASS", ("CPU0",)))


# ------------------------------------------------------------------------------ pasted fragments
FRAGMENTS = REAL / "fragments"
GB10 = REAL / "dcgmi-diag-json/r1-GB10-DGX-Spark-dcgm4.2.3-580.82.09-software-fail-persistence-sram-sentinel.json"
# file -> top-level facts, [(test name, category, [(gpu, verdict, #messages)])], message parts, warning parts
FRAGMENT_EXPECT: dict[str, dict[str, Any]] = {
    "dcgmi-diag-text-r2-gpu-memory-fail-gpu0-thermal-warning-no-header.txt": {
        "top": {"format": "text", "fragment": True, "complete": False, "overall": "FAIL"},
        "tests": [("GPU Memory", None, [(g, "PASS", 0) for g in range(1, 8)] + [(0, "FAIL", 1)])],
        "messages": ["GPU 0 Thermal violations totaling 13.3 seconds started at 9.7 seconds into the test for GPU 0 "
                     "Verify that the cooling on this machine is functional", "and any other components."],
        "warn": ["fragment"],
    },
    "dcgmi-diag-text-r2-dcgm3.3.1-mid-table-gpu-memory-fail-gpu0-cut-both-ends.txt": {
        "top": {"format": "text", "fragment": True, "complete": False, "overall": "FAIL", "dcgm_version": None},
        "tests": [("GPU Memory", "Hardware", [(1, "PASS", 0), (0, "FAIL", 1)])],
        "messages": ["GPU 0 Error using CUDA API cuCtxCreate", "Unable to create CUDA context: 'CUDA-capable device(s)"
                     " is/are busy or unavailable'."],
        # the Info rows above the first test row belong to a test outside the piece
        "warn": ["fragment", "message row without a test: \"GPU 0 API call cudaStreamCreate failed",
                 "message row without a test: 'GPU 1 GPU to Host bandwidth: 12.33 GB/s"],
    },
    "dcgmi-diag-text-dcgm4.2.3-4x26b9-header-then-cut-at-memory-row.txt": {
        # the header is there: a table cut short (incomplete), not a headerless fragment
        "top": {"format": "text", "fragment": False, "complete": False, "overall": "PASS", "dcgm_version": "4.2.3",
                "driver_version": "570.148.08"},
        "tests": [("software", "Deployment", [(None, "PASS", 0)] + [(g, "PASS", 0) for g in range(4)]),
                  ("memory", "Hardware", [(None, "PASS", 0)])],
        "messages": [], "warn": [],
    },
    "dcgmi-diag-json-dcgm4-r3-8gpu-diagnostic-test-object-trailing-comma.json": {
        # all it shows passes: a fragment proves no overall PASS
        "top": {"format": "json", "fragment": True, "complete": False, "overall": None},
        "tests": [("diagnostic", None, [(0, "PASS", 3), (1, "PASS", 3), (2, "PASS", 2)]
                   + [(g, "PASS", 0) for g in range(3, 8)])],
        "messages": ["GPU 1 calculated at approximately 859.08 gigaflops during this test"],
        "warn": ["fragment of dcgmi diag output (JSON without its root object)"],
    },
}


def test_every_fragment_has_expectations() -> None:
    assert sorted(p.name for p in FRAGMENTS.glob("dcgmi-diag-*")) == sorted(FRAGMENT_EXPECT)


@pytest.mark.parametrize("name", sorted(FRAGMENT_EXPECT))
def test_real_fragment(name: str) -> None:
    expected = FRAGMENT_EXPECT[name]
    facts = parse_dcgm_diag((FRAGMENTS / name).read_text(encoding="utf-8"))
    for key, value in expected["top"].items():
        assert getattr(facts, key) == value, key
    got = [(t.name, t.category, [(r.gpu, r.verdict, len(r.messages)) for r in t.results]) for t in facts.tests]
    assert got == expected["tests"]
    text = " | ".join(m for t in facts.tests for r in t.results for m in r.messages)
    assert all(part in text for part in expected["messages"]), text
    for part in expected["warn"]:
        assert any(part in w for w in facts.warnings), (part, facts.warnings)
    if not expected["warn"]:
        assert facts.warnings == ()
    assert json.loads(json.dumps(facts.to_dict()))["fragment"] is expected["top"]["fragment"]


def test_headerless_rows_starting_at_a_continuation_verdict_row() -> None:
    """'|  | Fail - GPU: 0 |' as the first line: its test's name is above the piece."""
    text = ("|                           | Fail - GPU: 0                                  |\n"
            "| Warning                   | GPU 0 DBE detected                             |\n"
            "| Targeted Power            | Pass - All                                     |\n")
    facts = parse_dcgm_diag(text)
    assert facts.fragment and not facts.complete and facts.overall == "FAIL"
    unnamed, power = facts.tests
    assert unnamed.name == UNNAMED_TEST and unnamed.results == (DcgmResult(0, "FAIL", ("GPU 0 DBE detected",)),)
    assert power.results == (DcgmResult(None, "PASS"),)


def test_headerless_rows_that_only_pass_prove_no_overall_pass() -> None:
    facts = parse_dcgm_diag("| GPU Memory                | Pass - All                                     |\n")
    assert facts.fragment and facts.tests[0].verdict == "PASS" and facts.overall is None


def test_json_entity_list_cut_from_a_real_capture() -> None:
    """The '"results" : [...]' list of the real GB10 capture, pasted alone with its trailing comma."""
    doc = GB10.read_text()
    start = doc.index('"results"')
    piece = doc[start:doc.index("],", start) + 2]
    facts = parse_dcgm_diag(piece)
    assert facts.fragment and facts.format == "json" and not facts.complete and facts.overall == "FAIL"
    (test,) = facts.tests
    assert test.name == UNNAMED_TEST and [(r.gpu, r.verdict) for r in test.results] == [(0, "FAIL")]
    assert "Persistence mode for GPU 0 is disabled" in test.results[0].messages[0]
    assert parse_dcgm_diag(GB10.read_text()).fragment is False  # the whole capture is no fragment


def test_json_piece_starting_mid_list_with_the_test_summary_after_it() -> None:
    """From the second entity of the real DCGM 4 piece on: closers of the cut-off list, then its test_summary."""
    doc = (FRAGMENTS / "dcgmi-diag-json-dcgm4-r3-8gpu-diagnostic-test-object-trailing-comma.json").read_text()
    piece = doc[doc.rindex("{", 0, doc.index('"entity_id" : 1')):]
    facts = parse_dcgm_diag("pasted from the node:\n" + piece)
    (test,) = facts.tests
    assert test.name == UNNAMED_TEST and [r.gpu for r in test.results] == list(range(1, 8))
    assert test.verdict == "PASS" and facts.overall is None and facts.fragment
    assert any("text before the JSON ignored" in w for w in facts.warnings)


def test_json_fragment_with_a_failing_dcgm3_result_and_a_cpu_entity() -> None:
    piece = ('{ "name" : "GPU Memory", "results" : [ {"gpu_ids" : "0,1", "status" : "Pass"},\n'
             '  {"gpu_id" : "2", "status" : "Fail", "warnings" : [{"warning" : "DBE"}]} ] },\n'
             '{ "entity_group" : "CPU", "entity_id" : 0, "status" : "Warn", "info" : ["hot"] }\n')
    facts = parse_dcgm_diag(piece)
    memory, unnamed = facts.tests
    assert [(r.gpu, r.verdict, r.messages) for r in memory.results] == [
        (0, "PASS", ()), (1, "PASS", ()), (2, "FAIL", ("DBE",))]
    assert unnamed.results == (DcgmResult(None, "WARN", ("hot",)),) and facts.overall == "FAIL"


@pytest.mark.parametrize("text", [
    '{"status": "ok", "entity_id": 4}\n',  # someone else's JSON: no DCGM verdict
    '"results" : [\n',
    "| a | b |\n| c | d |\n",
    "+-----  Hardware  ----------+------------------------------------------------+\n",
])
def test_no_verdict_no_fragment(text: str) -> None:
    facts = parse_dcgm_diag(text)
    assert facts.tests == () and facts.overall is None and facts.fragment is False and facts.warnings


def test_fragments_cut_anywhere_never_raise_and_are_never_complete() -> None:
    rng = random.Random(14)
    for path in FRAGMENTS.glob("dcgmi-diag-*"):
        text = path.read_text()
        full = parse_dcgm_diag(text)
        for cut in range(0, len(text), 7):
            for piece in (text[:cut], text[cut:]):
                facts = parse_dcgm_diag(piece)
                assert isinstance(facts, DcgmDiagFacts) and (facts.complete is False or not facts.fragment)
                if facts.fragment:
                    assert facts.overall in (None, "FAIL", "WARN")
                    assert len({(r.gpu, r.verdict) for t in facts.tests for r in t.results}) <= len(
                        {(r.gpu, r.verdict) for t in full.tests for r in t.results}) + 1
        junk = "".join(rng.choice("|+-{}[],:\" \nPassFailGPU0") for _ in range(400))
        assert isinstance(parse_dcgm_diag(text[: len(text) // 2] + junk), DcgmDiagFacts)
