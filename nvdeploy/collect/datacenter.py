"""The collectors of the check catalog beyond nvidia-smi/lspci/dmesg: NVLink, topology, fabric manager, InfiniBand,
kernel modules, software versions, DCGM and nccl-tests.

Light collectors answer in seconds and go in the node's one batched round trip. Heavy ones (``dcgmi diag``,
``all_reduce_perf``) run afterwards, one round trip each, under their own hard timeout:

- ``dcgm_diag_r1`` .. ``dcgm_diag_r4``: ``dcgmi diag -r N -j``, timeouts 120 s, 1200 s, 3600 s, 10800 s; the host
  var ``dcgm_timeout`` (seconds) overrides them. The level picks the diag level by picking the check that reads
  the collector (``dcgm.diag_r2`` at standard, ``dcgm.diag_r3`` at full). A waiver with ``dcgm_error_codes``
  adds ``--ignoreErrorCodes`` for the node (config/waivers.py).
- ``dcgm_diag_gemm``: ``dcgmi diag -r diagnostic -p diagnostic.test_duration=60 -j`` (the GEMM plugin alone: the
  standard level's per-GPU compute figure), timeout 300 s (host vars ``dcgm_gemm_duration``, ``dcgm_gemm_timeout``).
- ``nccl_all_reduce``: ``env NCCL_DEBUG=VERSION [NCCL_TESTS_MIN_BW=<floor>] [nccl_env...] <nccl_tests_dir>/
  all_reduce_perf -b 1G -e 8G -f 2 -g <GPU count> -c 1``, timeout 900 s (host var ``nccl_timeout``).
  ``NCCL_TESTS_MIN_BW`` is the profile's busbw floor, so all_reduce_perf's own exit status fails when the
  average bus bandwidth falls below 90% of the floor (nccl-tests' rule) and agrees with the verdict.

- ``nvbandwidth``: ``nvbandwidth -j -t host_to_device_memcpy_ce device_to_host_memcpy_ce
  device_to_device_memcpy_read_ce``, timeout 600 s (host var ``nvbandwidth_timeout``; ``nvbandwidth_path`` names the
  binary).

``dcgm_health`` (light, quick level): ``env sh -c 'dcgmi health -g 0 -s a || exit $?; exec dcgmi health -g 0 -c -j'
dcgm_health``, one timeout (60 s) for both calls: see :data:`DCGM_HEALTH`.

``compute_apps`` (light): ``nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader``,
timeout 20 s; the engine adds it to the light batch whenever heavy collectors are planned (the busy guard).

The module defines them and registers nothing: :data:`COLLECTORS` lists them for the catalog that
collect/catalog.py builds. The nccl-tests command line and its busbw floor live in collect/nccl_commands.py, shared
with the check that judges the run.
"""

from __future__ import annotations

from typing import Any, Mapping

from nvdeploy.collect.collector import Collector
from nvdeploy.collect.nccl_commands import (  # noqa: F401  re-exported: the collector's argv builders
    DEFAULT_GPU_COUNT,
    NCCL_SIZES,
    NCCL_TIMEOUT_S,
    build_nccl_all_reduce,
    nccl_binary,
    nccl_env_assignments,
)

DCGM_TIMEOUTS = {1: 120.0, 2: 1200.0, 3: 3600.0, 4: 10800.0}


def dcgm_diag_collector(level: int) -> str:
    return f"dcgm_diag_r{level}"


NVLINK = Collector(
    "nvidia_smi_nvlink", ("nvidia-smi", "nvlink", "-s"), 30.0,
    description="NVLink state and speed of every link of every GPU")
TOPO = Collector(
    "nvidia_smi_topo", ("nvidia-smi", "topo", "-m"), 30.0,
    description="the GPU/NIC connection matrix (NV# = bonded NVLinks)")
FABRICMANAGER = Collector(
    "fabricmanager", ("systemctl", "is-active", "nvidia-fabricmanager"), 20.0,
    description="whether nvidia-fabricmanager runs (NVSwitch systems)")
FABRICMANAGER_VERSION = Collector(
    "fabricmanager_version", ("nv-fabricmanager", "--version"), 20.0,
    description="the fabric manager's version (must equal the driver's)")
LSMOD = Collector(
    "lsmod", ("lsmod",), 20.0, description="loaded kernel modules (nvidia_peermem for GPUDirect RDMA)")
IBSTAT = Collector(
    "ibstat", ("ibstat",), 30.0, description="InfiniBand HCAs and port state, rate and link layer")
OFED = Collector(
    "ofed_info", ("ofed_info", "-s"), 20.0, description="the MLNX/DOCA OFED version")
DCGM_VERSION = Collector(
    "dcgm_version", ("dcgmi", "--version"), 30.0, description="the DCGM version")
DCGM_DISCOVERY = Collector(
    "dcgm_discovery", ("dcgmi", "discovery", "-l"), 60.0,
    description="GPUs and NVSwitches as DCGM (nv-hostengine) sees them")
# DCGM's background health watches, set then read in one round trip. ``-s a`` turns on every watch this DCGM has
# (dcgmi/CommandLineParser.cpp in NVIDIA/DCGM: a = all; d driver, i InfoROM, m memory, n NVLink, p PCIe,
# t thermal and power, x ConnectX (DCGM 4.5.3 and later); ``a`` covers the NvSwitch watches too and must stand
# alone). It changes the host engine's state: the watches stay set on the group after dcgmi exits (dcgmi/Health.cpp:
# SetHealth persists after disconnect, until ``dcgmi health --clear``), and whatever else reads the group's health
# (dcgm-exporter, a scheduler's checks) sees them on. Group 0 is the default group DCGM creates at start with every
# supported GPU (the DCGM user guide, "Groups"); ConnectX entities are not in it, so ConnectX incidents show only
# where that group holds them.
# The watches marked (*) in dcgmi's help (memory, NVLink, PCIe, thermal/power, ConnectX) need about 60 s of
# samples: on a host engine whose watches were just set, the first check covers what DCGM already had.
# sh under env, not as argv[0]: the batch's own wrapper runs sh, and a tool the collectors name must be free to be
# replaced (the hostile-input test puts an argv echo in place of every collector's tool).
HEALTH_SCRIPT = 'dcgmi health -g 0 -s a || exit $?; exec dcgmi health -g 0 -c -j'
DCGM_HEALTH = Collector(
    "dcgm_health", ("env", "sh", "-c", HEALTH_SCRIPT, "dcgm_health"), 60.0,
    description="DCGM health watches (all systems) set on group 0, then checked (JSON)")
# The same watches read again after the node's heavy tests and burn-in (dcgm.health): the first read comes seconds
# after the watches were set, before they have the minute of samples they need; this one covers the stress. Planned
# by the engine only when the node runs a heavy test (runner/engine.py node_plan), never at the quick level; it
# reads, so it runs on a busy node too.
DCGM_HEALTH_AFTER = Collector(
    "dcgm_health_after", ("dcgmi", "health", "-g", "0", "-c", "-j"), 60.0, heavy=True, loads_gpu=False,
    description="DCGM health watches read again after the heavy tests and the burn-in (JSON)")
# The busy guard (nvdeploy/checks/heavy_gate.py): read before any heavy collector may start; real format, one
# line per process and GPU, nothing when idle.
COMPUTE_APPS = Collector(
    "compute_apps", ("nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"),
    20.0, description="GPU compute processes (busy guard: heavy tests do not start on a busy node)")
# The --ignoreErrorCodes value the run's waivers give this node (config/waivers.py dcgm_ignore_error_codes): set
# by the engine in the host vars it plans with, never read from an inventory.
DCGM_IGNORE_VAR = "_waived_dcgm_error_codes"


def _build_dcgm_diag(level: int) -> Any:
    def build(host_vars: Mapping[str, Any], profile: Any) -> tuple[str, ...]:
        """``dcgmi diag -r LEVEL -j``, with ``--ignoreErrorCodes <value>`` where a waiver names DCGM error codes for
        this node (one argv word: the transport quotes it, the value's ';' stays DCGM's separator)."""
        argv: tuple[str, ...] = ("dcgmi", "diag", "-r", str(level), "-j")
        codes = host_vars.get(DCGM_IGNORE_VAR)
        return (*argv, "--ignoreErrorCodes", str(codes)) if codes else argv
    return build


DCGM_DIAG = {level: Collector(
    dcgm_diag_collector(level), ("dcgmi", "diag", "-r", str(level), "-j"), timeout, heavy=True,
    description=f"DCGM diagnostic level {level} (JSON)", timeout_var="dcgm_timeout", build=_build_dcgm_diag(level))
    for level, timeout in DCGM_TIMEOUTS.items()}
# The standard level's per-GPU compute figure: DCGM's Diagnostic (GEMM) plugin alone, for a short duration. Level 2
# runs no GEMM (its PCIe and GPU Memory plugins do not load the SMs), so without it a GPU 10% slow at compute passes
# standard. ``-r diagnostic`` is the plugin's canonical test name and ``-p diagnostic.test_duration=S`` its duration
# (default 180 s): the DCGM reference, "dcgmi diag" and "Diagnostic Plugin"
# (https://docs.nvidia.com/datacenter/dcgm/latest/reference/diagnostics/plugins/diagnostic.html). 60 s, as the GEMM
# of Azure's per-SKU baseline (ubergemm, 60 s: skills/slurm/sku_performance_baseline/SKILL.md in
# Azure/ai-infrastructure-on-azure); host var ``dcgm_gemm_duration`` sets another.
DCGM_GEMM = "dcgm_diag_gemm"
DCGM_GEMM_DURATION_S = 60
DCGM_GEMM_TIMEOUT_S = 300.0


def gemm_duration(host_vars: Mapping[str, Any]) -> int:
    """The GEMM plugin's duration in seconds: host var ``dcgm_gemm_duration`` (10-3600), else 60."""
    value = host_vars.get("dcgm_gemm_duration", DCGM_GEMM_DURATION_S)
    try:
        seconds = int(value)
    except (TypeError, ValueError):
        return DCGM_GEMM_DURATION_S
    return seconds if 10 <= seconds <= 3600 else DCGM_GEMM_DURATION_S


def build_dcgm_gemm(host_vars: Mapping[str, Any], profile: Any) -> tuple[str, ...]:
    """``dcgmi diag -r diagnostic -p diagnostic.test_duration=S -j`` (and a waiver's ``--ignoreErrorCodes``)."""
    argv: tuple[str, ...] = ("dcgmi", "diag", "-r", "diagnostic", "-p",
                             f"diagnostic.test_duration={gemm_duration(host_vars)}", "-j")
    codes = host_vars.get(DCGM_IGNORE_VAR)
    return (*argv, "--ignoreErrorCodes", str(codes)) if codes else argv


DCGM_DIAG_GEMM = Collector(
    DCGM_GEMM, build_dcgm_gemm({}, None), DCGM_GEMM_TIMEOUT_S, heavy=True,
    description="DCGM Diagnostic (GEMM) plugin alone, 60 s: each GPU's gigaflops (JSON)",
    timeout_var="dcgm_gemm_timeout", build=build_dcgm_gemm,
    # Without its own limit, the host's dcgmi diag limit holds for this dcgmi diag too.
    timeout_for=lambda host_vars: host_vars.get("dcgm_timeout"))
NCCL_ALL_REDUCE = Collector(
    "nccl_all_reduce", ("all_reduce_perf", *NCCL_SIZES, "-g", str(DEFAULT_GPU_COUNT), "-c", "1"), NCCL_TIMEOUT_S,
    heavy=True, description="nccl-tests all_reduce_perf across every GPU of the node, 1-8 GiB, validated",
    timeout_var="nccl_timeout", build=build_nccl_all_reduce)

# nvbandwidth (github.com/NVIDIA/nvbandwidth) with JSON output, three copy-engine testcases: host to device, device
# to host (per GPU) and peer reads (per GPU pair). Heavy: it loads every GPU's copy engines for a minute or two.
NVBANDWIDTH_TESTCASES = ("host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "device_to_device_memcpy_read_ce")
NVBANDWIDTH_TIMEOUT_S = 600.0


def build_nvbandwidth(host_vars: Mapping[str, Any], profile: Any) -> tuple[str, ...]:
    """``<nvbandwidth_path or nvbandwidth> -j -t <testcases>``; the host var ``nvbandwidth_path`` names the binary
    where it is not on the PATH (a build folder)."""
    binary = str(host_vars.get("nvbandwidth_path") or "nvbandwidth")
    return (binary, "-j", "-t", *NVBANDWIDTH_TESTCASES)


NVBANDWIDTH = Collector(
    "nvbandwidth", ("nvbandwidth", "-j", "-t", *NVBANDWIDTH_TESTCASES), NVBANDWIDTH_TIMEOUT_S, heavy=True,
    description="nvbandwidth host->device, device->host and peer read copies (copy engines, JSON)",
    timeout_var="nvbandwidth_timeout", build=build_nvbandwidth)

# How long the node has been up: nvlink.fabric says how long after boot a GPU's registration is still pending.
# awk, not cat: the batch script itself runs cat, head, wc, dd and tail, and a tool it names must be free to be
# replaced (tests put an argv echo in place of every collector's tool).
UPTIME = Collector(
    "uptime", ("awk", "{print $1}", "/proc/uptime"), 10.0, description="seconds since boot (/proc/uptime)")

# This module's part of the catalog, in the order `nvdeploy/collect/catalog.py` lists it.
COLLECTORS: tuple[Collector, ...] = (
    NVLINK, TOPO, FABRICMANAGER, FABRICMANAGER_VERSION, LSMOD, IBSTAT, OFED, DCGM_VERSION, DCGM_DISCOVERY,
    DCGM_HEALTH, COMPUTE_APPS, *DCGM_DIAG.values(), DCGM_DIAG_GEMM, NCCL_ALL_REDUCE, NVBANDWIDTH, UPTIME,
    DCGM_HEALTH_AFTER)
