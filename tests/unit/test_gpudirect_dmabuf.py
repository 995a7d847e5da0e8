"""ib.peermem accepts GPUDirect RDMA through DMA-BUF (open kernel modules, driver >= R515, kernel >= 5.12) as well as
nvidia_peermem, and says which path it found.

The /proc/driver/nvidia/version lines are real captures (public GitHub text found by exact-string search,
2026-12-01): an open-module 570.195.03 (Ubuntu 22.04 build host), an open-module 555.58.02 on RHEL (Red Hat GCC
14.2.1), and a proprietary 535.216.03; the prerequisites are the table of the NVIDIA GPU Operator docs,
"GPUDirect RDMA and GPUDirect Storage" (docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/
gpu-operator-rdma.html, common prerequisites: DMA-BUF needs an open kernel module driver, CUDA 11.7+, Linux 5.12+).
"""

from __future__ import annotations

from typing import Optional

import pytest
from _catalog_helpers import context, result, run_check, sim_check, timed_out, verdicts

from nvdeploy.checks.ib import dmabuf_blocker
from nvdeploy.parsers.stack import parse_kernel_driver
from nvdeploy.results import ErrorReason, Remediation, Verdict

OPEN_570 = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.195.03  Release Build  "
            "(dvs-builder@U22-I3-H04-03-1)  Sat Sep 20 00:47:16 UTC 2025\n"
            "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n")
OPEN_555_RHEL = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  555.58.02  Release Build  "
                 "(dvs-builder@U16-I3-B03-4-3)  Tue Jun 25 01:26:03 UTC 2024\n"
                 "GCC version:  gcc version 14.2.1 20240801 (Red Hat 14.2.1-1) (GCC) \n")
PROPRIETARY_535 = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.216.03  Thu Apr  3 01:14:19 UTC 2025\n"
LSMOD_NO_PEERMEM = ("Module                  Size  Used by\nnvidia_uvm           4956160  0\n"
                    "nvidia              54722560  12 nvidia_uvm,nvidia_modeset\nmlx5_ib               454656  0\n"
                    "ib_core               434176  2 mlx5_ib,ib_uverbs\n")
LSMOD_PEERMEM = LSMOD_NO_PEERMEM + "nvidia_peermem         16384  0\n"


def found(version: Optional[str], kernel: Optional[str] = "5.15.0-105-generic") -> str:
    """The kernel_driver collector's find output: each file after its marker, a missing file left out."""
    out = f"\n== /proc/driver/nvidia/version\n{version}" if version is not None else ""
    return out + (f"\n== /proc/sys/kernel/osrelease\n{kernel}\n" if kernel is not None else "")


def peermem(lsmod: str, files: Optional[str], rc: int = 0):
    results = {"lsmod": result("lsmod", lsmod)}
    if files is not None:
        results["kernel_driver"] = result("kernel_driver", files, rc=rc)
    return run_check("ib.peermem", context(results))


def test_parser_reads_both_flavours_and_the_kernel():
    facts = parse_kernel_driver(found(OPEN_570))
    assert (facts.open_module, facts.driver_version, facts.kernel_release, facts.kernel_version) == \
        (True, "570.195.03", "5.15.0-105-generic", (5, 15))
    rhel = parse_kernel_driver(found(OPEN_555_RHEL, "5.14.0-427.13.1.el9_4.x86_64"))
    assert (rhel.open_module, rhel.driver_version, rhel.kernel_version) == (True, "555.58.02", (5, 14))
    old = parse_kernel_driver(found(PROPRIETARY_535))
    assert (old.open_module, old.driver_version) == (False, "535.216.03")
    gone = parse_kernel_driver(found(None))
    assert (gone.nvrm_line, gone.open_module, gone.kernel_release) == (None, None, "5.15.0-105-generic")
    assert parse_kernel_driver("garbage\x00\x1b[31m").nvrm_line is None


@pytest.mark.parametrize("files, why", [
    (found(OPEN_570), None),
    (found(OPEN_555_RHEL, "5.14.0-427.13.1.el9_4.x86_64"), None),  # RHEL 9's 5.14 carries the 5.12 dma-buf code
    (found(PROPRIETARY_535), "proprietary nvidia kernel module 535.216.03"),
    (found(OPEN_570, "5.4.0-182-generic"), "kernel 5.4.0-182-generic is older than 5.12"),
    (found(OPEN_570.replace("570.195.03", "510.47.03")), "older than R515"),
    (found(None), "not loaded"),
    (found(OPEN_570, None), "kernel release could not be read"),
])
def test_dmabuf_prerequisites(files, why):
    blocker = dmabuf_blocker(parse_kernel_driver(files))
    assert blocker is None if why is None else why in blocker


def test_dmabuf_without_peermem_passes_and_says_so():
    [finding] = peermem(LSMOD_NO_PEERMEM, found(OPEN_570))
    assert (finding.verdict, finding.observed) == (Verdict.PASS, "dma-buf")
    assert "through DMA-BUF: open kernel module 570.195.03 on kernel 5.15.0-105-generic" in finding.summary


def test_peermem_passes_naming_it_and_proprietary_without_peermem_fails_saying_why():
    [both] = peermem(LSMOD_PEERMEM, found(OPEN_570))
    assert (both.verdict, both.observed) == (Verdict.PASS, "nvidia_peermem") and "DMA-BUF usable too" in both.summary
    [legacy] = peermem(LSMOD_PEERMEM, found(PROPRIETARY_535))
    assert legacy.verdict is Verdict.PASS and "DMA-BUF" not in legacy.summary
    [bad] = peermem(LSMOD_NO_PEERMEM, found(PROPRIETARY_535))
    assert (bad.verdict, bad.remediation) == (Verdict.FAIL, Remediation.TUNE)
    assert "proprietary nvidia kernel module 535.216.03" in bad.summary and "modprobe nvidia_peermem" in bad.summary
    [old_kernel] = peermem(LSMOD_NO_PEERMEM, found(OPEN_570, "5.4.0-182-generic"))
    assert old_kernel.verdict is Verdict.FAIL and "kernel 5.4.0-182-generic" in old_kernel.summary


def test_unreadable_dmabuf_evidence_without_peermem_is_error_never_pass():
    results = {"lsmod": result("lsmod", LSMOD_NO_PEERMEM), "kernel_driver": timed_out("kernel_driver")}
    [finding] = run_check("ib.peermem", context(results))
    assert (finding.verdict, finding.reason) == (Verdict.ERROR, ErrorReason.TIMEOUT)
    [not_run] = peermem(LSMOD_NO_PEERMEM, None)
    assert not_run.verdict is Verdict.ERROR
    # The driver not loaded: find exits 1 and prints the kernel only; a real answer, so FAIL, not ERROR.
    [unloaded] = peermem(LSMOD_NO_PEERMEM, found(None), rc=1)
    assert unloaded.verdict is Verdict.FAIL and "not loaded" in unloaded.summary


def test_simulated_open_modules_fault():
    [dmabuf] = sim_check("ib.peermem", "peermem_missing", "open_modules")
    assert (dmabuf.verdict, dmabuf.observed) == (Verdict.PASS, "dma-buf")
    [proprietary] = sim_check("ib.peermem", "peermem_missing")
    assert proprietary.verdict is Verdict.FAIL and "proprietary" in proprietary.summary
    assert verdicts(sim_check("ib.peermem", "open_modules")) == [Verdict.PASS]
    [no_driver] = sim_check("ib.peermem", "peermem_missing", "driver_missing")
    assert no_driver.verdict is Verdict.FAIL and "not loaded" in no_driver.summary
