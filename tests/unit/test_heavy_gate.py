"""The decision whether a node's heavy collectors may start (fail fast, busy guard), from its light batch."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from nvdeploy.checks.heavy_gate import (
    DEADLINE_SKIP,
    HeavySkip,
    batch_refused,
    busy_skip,
    compute_processes,
    heavy_skip,
    skip_for,
    unfit_reason,
)
from nvdeploy.parsers.catalog import catalog_facts
from nvdeploy.results import CommandResult, ErrorReason

XML_OK = "<nvidia_smi_log></nvidia_smi_log>\n"


def result(name: str, rc=0, out: str = "", err: str = "", **kw) -> CommandResult:
    return CommandResult(name, name, rc, out.encode(), err.encode(), **kw)


def smi(rc=0, out=XML_OK, err="", **kw) -> dict[str, CommandResult]:
    return {"nvidia_smi_xml": result("nvidia_smi_xml", rc, out, err, **kw)}


def idle() -> dict[str, CommandResult]:
    return {"compute_apps": result("compute_apps", 0, "")}


@pytest.mark.parametrize("results, expected", [
    (smi(rc=None, timed_out=True, error=ErrorReason.TIMEOUT, error_detail="timed out after 60 s"),
     "nvidia-smi hung (timed out after 60 s)"),
    (smi(rc=9, out="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."),
     "driver not loaded (nvidia-smi exit 9)"),
    (smi(rc=0, out="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."),
     "driver not loaded (nvidia-smi could not communicate with the driver)"),
    (smi(rc=15), "a GPU fell off the bus (nvidia-smi exit 15)"),
    (smi(rc=127), "nvidia-smi not found (driver not installed?)"),
    (smi(rc=3), "nvidia-smi exited 3"),
    (smi(rc=None, error=ErrorReason.CONNECTION_LOST, error_detail="channel closed"),
     "nvidia-smi did not complete (channel closed)"),
    (smi(rc=0, err="Unable to determine the device handle for GPU0000:2A:00.0: GPU is lost."),
     "a GPU is lost (nvidia-smi: GPU is lost)"),
    ({**smi(), "nvml_probe": result("nvml_probe", 0, '{"gpus": [{"index": 3, "error": "NVML_ERROR_GPU_IS_LOST"}]}')},
     "a GPU is lost (NVML: GPU_IS_LOST)"),
])
def test_unfit_reasons_from_nvidia_smi(results, expected):
    assert unfit_reason(results, {}) == expected


def test_a_healthy_light_batch_is_fit():
    facts = {"lspci": SimpleNamespace(gpus=[1] * 8), "smi": SimpleNamespace(gpus=[1] * 8),
             "smi_status": SimpleNamespace(usable=True), "kmsg": SimpleNamespace(xid_counts={"13": 2})}
    assert unfit_reason(smi(), facts) is None
    assert heavy_skip({**smi(), **idle()}, {**facts, **catalog_facts(idle())}) is None


def test_more_gpus_on_the_bus_than_in_the_driver_is_a_lost_gpu():
    facts = {"lspci": SimpleNamespace(gpus=[1] * 8), "smi": SimpleNamespace(gpus=[1] * 7),
             "smi_status": SimpleNamespace(usable=True)}
    assert unfit_reason(smi(), facts) == "a GPU is lost (8 NVIDIA GPUs on the PCIe bus, the driver lists 7)"


def test_a_gpu_the_probe_reports_lost_is_named():
    facts = {"smi": SimpleNamespace(gpus=[SimpleNamespace(index=0, lost=False), SimpleNamespace(index=5, lost=True)])}
    assert unfit_reason(smi(), facts) == "a GPU is lost (GPU_IS_LOST: GPU 5)"


def test_xid79_in_the_kernel_log_is_unfit():
    facts = {"kmsg": SimpleNamespace(xid_counts={"79": 1})}
    assert unfit_reason(smi(), facts) == "Xid 79 in the kernel log (a GPU fell off the bus)"


def test_fail_fast_wins_over_busy_and_over_allow_busy():
    results = {**smi(rc=9), "compute_apps": result("compute_apps", 9, "")}
    skip = heavy_skip(results, {}, allow_busy=True)
    assert skip == HeavySkip(ErrorReason.NOT_RUN, "skipped: driver not loaded (nvidia-smi exit 9)")


def test_busy_node_names_its_processes():
    results = {**smi(), "compute_apps": result("compute_apps", 0, "41230, python3, 30512 MiB\n7, /bin/train, [N/A]\n")}
    skip = heavy_skip(results, catalog_facts(results))
    assert skip is not None and skip.reason is ErrorReason.BUSY
    assert "2 GPU compute process(es) run: pid 41230 python3 (30512 MiB), pid 7 /bin/train (memory unknown)" \
        in skip.summary
    assert "--allow-busy" in skip.summary
    assert heavy_skip(results, {}, allow_busy=True) is None


@pytest.mark.parametrize("apps", [
    None,
    result("compute_apps", None, timed_out=True, error=ErrorReason.TIMEOUT, error_detail="timed out after 20 s"),
    result("compute_apps", 2, "", 'Field "used_memory" is not a valid field to query.'),
    result("compute_apps", 0, "garbage line\n"),
    result("compute_apps", 0, "garbage", truncated=True),
])
def test_an_unreadable_process_list_is_never_idle(apps):
    results = {} if apps is None else {"compute_apps": apps}
    skip = busy_skip(results, catalog_facts(results))
    assert skip is not None and skip.reason is ErrorReason.NOT_RUN
    assert skip.summary.startswith("skipped: could not tell whether GPU compute processes run (")


def test_batch_refused_by_another_runs_lock_names_the_holder():
    refused = CommandResult("nvidia_smi_xml", "nvidia-smi", None, error=ErrorReason.BUSY,
                            error_detail="held by alice, run 20261201T0600Z-abc, since 06:00")
    assert batch_refused({"nvidia_smi_xml": refused, "lspci": refused}) == refused.error_detail
    assert batch_refused({"nvidia_smi_xml": refused, **idle()}) is None
    assert batch_refused({}) is None


def test_a_check_inherits_the_skip_of_a_collector_it_reads():
    skipped = {"dcgm_diag_r2": DEADLINE_SKIP}
    assert skip_for(("dcgm_diag_r2",), skipped) is DEADLINE_SKIP
    assert skip_for(("dcgm_discovery",), skipped) is None
    assert DEADLINE_SKIP.summary == "skipped: the global --deadline passed"


def test_compute_processes_are_recorded_only_when_the_list_was_read():
    def processes(results):
        return compute_processes(results, catalog_facts(results))

    assert processes({"compute_apps": result("compute_apps", 0, "9, a.out, 1 MiB\n")}) == ["pid 9 a.out (1 MiB)"]
    assert processes(idle()) == []
    assert processes({"compute_apps": result("compute_apps", 9, "")}) is None
    assert processes({}) is None
