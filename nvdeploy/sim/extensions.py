"""Imports every module that extends the simulator with tools, faults or output filters.

Each module below registers itself on import (``register_tool``, ``register_fault``, ``OUTPUT_FILTERS``) into
tools.py and scenario.py, which import none of them. The package's ``__init__`` imports this module, so whichever
simulator module a caller imports, every tool and fault is known; no other module imports it (one of those below
would be an import cycle). Add one import line per new module. The order is the registration order: the tool
hooks and output filters run in it.
"""
from nvdeploy.sim import chaos  # noqa: E402,F401  isort: skip
from nvdeploy.sim import fake_nvml  # noqa: E402,F401

# The datacenter tools (NVLink, PCIe, fabric manager, InfiniBand, DCGM, nccl-tests) and their faults.
from nvdeploy.sim import datacenter, dcgm_tool, nccl_tool  # noqa: E402,F401  isort: skip

# Measured figures relative to a healthy node: the fleet's spread, slower:<PCT>, slower_gpu:<GPU>:<PCT>.
from nvdeploy.sim import perf  # noqa: E402,F401  isort: skip

# Stateful nodes: packages, services, modules, GPU settings that install/optimize change, kept across runs; the
# package tools (apt, dnf and the rest of install's) and nvidia-smi's settings build on systools' helpers.
from nvdeploy.sim import state, systools  # noqa: E402,F401  isort: skip
from nvdeploy.sim import apt_tools, dnf_tools, pkgtools, smitools  # noqa: E402,F401  isort: skip
# MIG per GPU (nvidia-smi mig, -mig pending/reset), systemd-detect-virt, the faults mig_drift:<GPU>, vm_passthrough.
from nvdeploy.sim import mig_tool  # noqa: E402,F401  isort: skip

# mpirun across the simulated cluster (multi-node nccl-tests).
from nvdeploy.sim import mpi_tool  # noqa: E402,F401  isort: skip

# nvloom_cli on NVLink domain trays, launched by that mpirun (absent unless the fault nvloom).
from nvdeploy.sim import nvloom_tool  # noqa: E402,F401  isort: skip

# dcgmi mndiag on NVLink domain trays (absent unless the fault mndiag).
from nvdeploy.sim import mndiag_tool  # noqa: E402,F401  isort: skip

# The GPU stack around the driver: CUDA toolkits (find), MPS control.
from nvdeploy.sim import stack_tools  # noqa: E402,F401  isort: skip

# NVL72 trays: each GPU's NVLink fabric registration (one domain per rack), recovery action, C2C, platform info.
from nvdeploy.sim import nvl72  # noqa: E402,F401  isort: skip

# IMEX on NVLink domain trays (nvidia-imex-ctl, the nvidia-imex service, the imex_files listing).
from nvdeploy.sim import imex_tool  # noqa: E402,F401  isort: skip

from nvdeploy.sim import nvbandwidth_tool  # noqa: E402,F401  isort: skip

# The storage throughput script (fio / dd per storage path) and its faults (storage_slow:<PCT>, storage_missing, ...).
from nvdeploy.sim import storage_tool  # noqa: E402,F401  isort: skip

# The burn-in's sampler and load scripts in simulated time, and the fault throttle_after:<MIN>[:<GPU>].
from nvdeploy.sim import burnin_tool  # noqa: E402,F401  isort: skip

# Firmware: the DMI and BMC files (system BIOS, board, BMC) and the faults vbios_mismatch:<GPU>, cx_fw_old,
# bios_mismatch, bmc_fw_old.
from nvdeploy.sim import firmware_tool  # noqa: E402,F401  isort: skip
