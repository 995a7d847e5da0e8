"""Collectors of the GPU software stack around the driver: installed CUDA toolkits, the MPS control
daemon and the container runtime. All are light (seconds) and ride in the node's one batched round trip, each
under its own timeout.

- ``cuda_toolkits``: one ``find /usr/local -maxdepth 3`` that prints a marker line and the contents of every
  ``/usr/local/cuda*/version.json`` (``version.txt`` before CUDA 11.1), and a marker for every forward-compatibility
  library ``/usr/local/cuda*/compat/libcuda.so.*`` (the ``cuda-compat-<major>-<minor>`` package). No shell: the
  patterns are find's own, quoted word by word. Each toolkit folder is listed too (``== /usr/local/cuda-13.0/``),
  so a folder without a version file (a pip or conda layout) is not missed. GNU find (``-printf``). Timeout 20 s
  (a hung NFS /usr/local is ERROR timeout, never PASS).
- ``mps_control``: ``echo get_server_list | nvidia-cuda-mps-control`` through ``bash -c`` (the control client
  reads its commands from stdin; bash, not sh: sh is the batch script's own interpreter), with
  ``CUDA_MPS_PIPE_DIRECTORY`` / ``CUDA_MPS_LOG_DIRECTORY`` set from the host vars ``mps_pipe_dir`` /
  ``mps_log_dir`` (defaults /tmp/nvidia-mps, /var/log/nvidia-mps, the daemon's own). The values travel as
  positional arguments, never spliced into the script. Timeout 20 s.
- ``container_files``: one ``find`` over /usr/bin/dockerd and /usr/bin/containerd (listed only),
  /etc/docker/daemon.json, /etc/containerd/config.toml and the CDI spec folders /etc/cdi, /var/run/cdi
  (listed and printed); missing paths are named on stderr. Timeout 20 s.
- ``cdi_list``: ``nvidia-ctk cdi list``, the CDI devices the container toolkit resolves. Timeout 30 s.
- ``kernel_driver``: one ``find`` printing /proc/driver/nvidia/version (the loaded nvidia module: open or
  proprietary flavour, version) and /proc/sys/kernel/osrelease, each after a marker line; ib.peermem reads it
  to accept GPUDirect RDMA through DMA-BUF. Timeout 20 s.
- ``container_run``: ``docker run --rm --pull=never --gpus all IMAGE nvidia-smi -L`` with the host var
  ``container_image`` (an image already on the node; never pulled), timeout 300 s (host var ``container_timeout``);
  ``true`` on hosts without an image. In the light batch: it takes seconds, runs beside the others, and only lists
  the GPUs (no load on a busy node), so it needs neither the busy guard nor a round trip of its own.
- ``imex_service`` (``systemctl is-active nvidia-imex``), ``imex_unit`` (``systemctl is-enabled nvidia-imex``),
  ``imex_query`` (``nvidia-imex-ctl -q``) and ``imex_files`` (one ``find`` over
  /dev/nvidia-caps-imex-channels/channel0, /etc/nvidia-imex/nodes_config.cfg with its sha256, and the DRA driver's
  /var/lib/kubelet/plugins/compute-domain.nvidia.com), 20 s each: on hosts that run IMEX themselves (a tray of an
  NVLink domain, or host var ``imex: true``), and all but the query where Kubernetes runs it (``imex: dra``: the
  host unit must then be off and masked); ``true`` elsewhere.

The module defines them and registers nothing: :data:`COLLECTORS` lists them for the catalog that
nvdeploy/collect/catalog.py builds.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from nvdeploy.collect.collector import Collector
from nvdeploy.collect.stack_commands import (  # noqa: F401  re-exported for the checks and tests
    CDI_LIST_ARGV,
    CONTAINER_FIND_ARGV,
    CUDA_FIND_ARGV,
    IMEX_DRA,
    IMEX_FILES_ARGV,
    IMEX_HOST,
    IMEX_QUERY_ARGV,
    IMEX_SERVICE_ARGV,
    IMEX_UNIT_ARGV,
    KERNEL_DRIVER_FIND_ARGV,
    MPS_HELPER,
    MPS_LOG_DEFAULT,
    MPS_PIPE_DEFAULT,
    MPS_SCRIPT,
    MPS_SHELL,
    docker_run_argv,
    imex_mode,
)

CUDA_TOOLKITS = "cuda_toolkits"
MPS_CONTROL = "mps_control"
CONTAINER_FILES = "container_files"
CDI_LIST = "cdi_list"
KERNEL_DRIVER = "kernel_driver"
CONTAINER_RUN = "container_run"
CONTAINER_RUN_TIMEOUT_S = 300.0
IMEX_SERVICE = "imex_service"
IMEX_UNIT = "imex_unit"
IMEX_QUERY = "imex_query"
IMEX_FILES = "imex_files"


def mps_dirs(host_vars: Mapping[str, Any]) -> tuple[str, str]:
    """(pipe folder, log folder) the control daemon of this host uses."""
    return (str(host_vars.get("mps_pipe_dir") or MPS_PIPE_DEFAULT),
            str(host_vars.get("mps_log_dir") or MPS_LOG_DEFAULT))


def build_mps(host_vars: Mapping[str, Any], profile: Any) -> tuple[str, ...]:
    pipe, log = mps_dirs(host_vars)
    return (MPS_SHELL, "-c", MPS_SCRIPT, MPS_HELPER, pipe, log)


def build_container_run(host_vars: Mapping[str, Any], profile: Any) -> tuple[str, ...]:
    image = host_vars.get("container_image")
    return docker_run_argv(str(image)) if image else ("true",)


def _imex(argv: tuple[str, ...], modes: tuple[str, ...] = (IMEX_HOST,)
          ) -> Callable[[Mapping[str, Any], Any], tuple[str, ...]]:
    """An argv builder that runs ``argv`` only where IMEX runs in one of ``modes`` (``true`` elsewhere: nothing of
    IMEX is asked of an HGX node, and the daemon is not asked where Kubernetes runs it)."""

    def build(host_vars: Mapping[str, Any], profile: Any) -> tuple[str, ...]:
        return argv if imex_mode(host_vars, profile)[0] in modes else ("true",)

    return build


CUDA = Collector(
    CUDA_TOOLKITS, CUDA_FIND_ARGV, 20.0,
    description="CUDA toolkits under /usr/local (version.json) and forward-compatibility libcuda (cuda-compat)")
MPS = Collector(
    MPS_CONTROL, build_mps({}, None), 20.0, build=build_mps,
    description="the CUDA MPS control daemon answers get_server_list")
CONTAINER = Collector(
    CONTAINER_FILES, CONTAINER_FIND_ARGV, 20.0,
    description="docker/containerd binaries, daemon.json, containerd config.toml and the CDI specs")
CDI = Collector(
    CDI_LIST, CDI_LIST_ARGV, 30.0, description="the CDI devices the NVIDIA container toolkit sees (nvidia-ctk)")
CONTAINER_SMOKE = Collector(
    CONTAINER_RUN, ("true",), CONTAINER_RUN_TIMEOUT_S, build=build_container_run,
    timeout_var="container_timeout",
    description="docker run --gpus all IMAGE nvidia-smi -L (host var container_image)")

KERNEL_DRIVER_FILES = Collector(
    KERNEL_DRIVER, KERNEL_DRIVER_FIND_ARGV, 20.0,
    description="the loaded nvidia module's flavour (open/proprietary) and the kernel release (GPUDirect DMA-BUF)")
IMEX_SERVICE_STATE = Collector(
    IMEX_SERVICE, IMEX_SERVICE_ARGV, 20.0, build=_imex(IMEX_SERVICE_ARGV, (IMEX_HOST, IMEX_DRA)),
    description="whether the nvidia-imex service runs (NVLink domain trays)")
IMEX_UNIT_STATE = Collector(
    IMEX_UNIT, IMEX_UNIT_ARGV, 20.0, build=_imex(IMEX_UNIT_ARGV, (IMEX_HOST, IMEX_DRA)),
    description="whether the nvidia-imex unit is enabled, disabled or masked (the DRA driver needs it masked)")
IMEX_DAEMON_QUERY = Collector(
    IMEX_QUERY, IMEX_QUERY_ARGV, 20.0, build=_imex(IMEX_QUERY_ARGV),
    description="the local IMEX daemon's state (nvidia-imex-ctl -q: READY)")
IMEX_FILE_LIST = Collector(
    IMEX_FILES, IMEX_FILES_ARGV, 20.0, build=_imex(IMEX_FILES_ARGV, (IMEX_HOST, IMEX_DRA)),
    description="IMEX channel0, the sha256 of nodes_config.cfg, the DRA compute-domain kubelet plugin folder")

# This module's part of the catalog, in the order `nvdeploy/collect/catalog.py` lists it.
COLLECTORS: tuple[Collector, ...] = (CUDA, MPS, CONTAINER, CDI, CONTAINER_SMOKE, KERNEL_DRIVER_FILES,
                                     IMEX_SERVICE_STATE, IMEX_UNIT_STATE, IMEX_DAEMON_QUERY, IMEX_FILE_LIST)
