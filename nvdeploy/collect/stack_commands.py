"""Command lines of the GPU-stack collectors (nvdeploy/collect/stack.py), importing only the import-free
nvdeploy/transport/node_paths.py: the simulator's fake tools (nvdeploy/sim/stack_tools.py) run on fake nodes from a
bare copy of the package and recognise them."""

from __future__ import annotations

from typing import Any, Optional

from nvdeploy.transport.node_paths import SAFE_DIR_SH

MARKER_FORMAT = "\\n== %p\\n"  # find -printf: a newline first, so a file without a final newline cannot hide it
CUDA_FIND_ARGV = (
    "find", "/usr/local", "-maxdepth", "3",
    # -type f: find never follows a link (-P), and cat is given only plain files, so a planted link to a secret
    # is not printed into the evidence.
    "(", "-path", "/usr/local/cuda*/version.json", "-o", "-path", "/usr/local/cuda*/version.txt", ")", "-type", "f",
    "-printf", MARKER_FORMAT, "-exec", "cat", "{}", ";",
    "-o", "-path", "/usr/local/cuda*/compat/libcuda.so.*", "-printf", MARKER_FORMAT,
    # Every toolkit folder itself (a trailing slash marks it): one without a version file is still seen.
    "-o", "-regex", "/usr/local/cuda[^/]*", "-type", "d", "-printf", "\\n== %p/\\n",
)
MPS_PIPE_DEFAULT = "/tmp/nvidia-mps"
MPS_LOG_DEFAULT = "/var/log/nvidia-mps"
# The helper's exit status and message when the pipe folder is not safe to talk through (another user's, a link,
# writable by others): the client is not run, so nothing is written to a pipe someone else may have planted.
MPS_UNSAFE_RC = 90
MPS_UNSAFE_PREFIX = "nvdeploy: unsafe MPS pipe folder: "
# $0 names the helper (the simulator recognises it); $1/$2 are the pipe and log folders. A pipe folder that does
# not exist is left to the client (it then finds no daemon); the client never writes in the log folder.
MPS_SCRIPT = (SAFE_DIR_SH.strip() + "\n"
              f'if [ -e "$1" ] || [ -L "$1" ]; then nvd_safe "$1" || '
              f'{{ printf \'{MPS_UNSAFE_PREFIX}%s\\n\' "$nvd_unsafe" >&2; exit {MPS_UNSAFE_RC}; }}; fi\n'
              'CUDA_MPS_PIPE_DIRECTORY="$1" CUDA_MPS_LOG_DIRECTORY="$2"; '
              'export CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY; '
              'echo get_server_list | nvidia-cuda-mps-control')
MPS_HELPER = "nvdeploy-mps"
# The pipe needs a shell; bash rather than sh, which runs the batch script itself (tests replace a collector's
# tool by an argv recorder, and must not replace the interpreter of the batch).
MPS_SHELL = "bash"
# The container daemons' binaries (listed only: dockerd reads daemon.json, a docker CLI alone does not) and the
# NVIDIA-relevant configs and CDI specs (listed and printed), with containerd's drop-in folders (the container
# toolkit 1.18+ configures containerd in conf.d/99-nvidia.toml, imported by config.toml; 1.18.0 used config.d).
CONTAINER_FIND_ARGV = (
    "find", "/usr/bin/dockerd", "/usr/bin/containerd", "/etc/docker/daemon.json", "/etc/containerd/config.toml",
    "/etc/containerd/conf.d", "/etc/containerd/config.d", "/etc/cdi", "/var/run/cdi", "-maxdepth", "1", "-type", "f",
    "(", "-name", "dockerd", "-o", "-name", "containerd", ")", "-printf", MARKER_FORMAT,
    "-o", "-type", "f", "(", "-name", "daemon.json", "-o", "-name", "*.toml", "-o", "-name", "*.yaml", "-o",
    "-name", "*.json", ")", "-printf", MARKER_FORMAT, "-exec", "cat", "{}", ";",
)
CDI_LIST_ARGV = ("nvidia-ctk", "cdi", "list")
# GPUDirect RDMA through DMA-BUF (checks/ib.py ib.peermem): the loaded nvidia module's flavour and version, and the
# running kernel, each after a marker line; find, not cat: cat is the batch script's own tool.
KERNEL_DRIVER_FIND_ARGV = (
    "find", "/proc/driver/nvidia/version", "/proc/sys/kernel/osrelease", "-maxdepth", "0",
    "-printf", MARKER_FORMAT, "-exec", "cat", "{}", ";",
)


# IMEX on rack-scale NVLink trays (checks/imex.py): the daemon's service and state, then one find over the default
# channel device, the domain's node list (hashed, so the cluster stage can compare it across the domain's trays
# without printing it) and the NVIDIA DRA driver's compute-domain kubelet plugin folder (IMEX run by Kubernetes
# ComputeDomains instead of the host). Each path after a marker line with its file type (find's %y: c for a
# character device, f for a file, d for a folder); a missing path is named on stderr.
IMEX_SERVICE = "nvidia-imex"
IMEX_CHANNEL0 = "/dev/nvidia-caps-imex-channels/channel0"
IMEX_NODES_CONFIG = "/etc/nvidia-imex/nodes_config.cfg"
IMEX_DRA_PLUGIN_DIR = "/var/lib/kubelet/plugins/compute-domain.nvidia.com"
# Where the IMEX daemon of a node is run (host var ``imex``, else the profile): by the host's nvidia-imex service
# ("host"), by Kubernetes through the NVIDIA DRA driver's ComputeDomains ("dra": the driver starts its own IMEX
# daemons in pods and the host service must stay off), or nowhere ("off": a node that is not a tray of a
# multi-node NVLink domain, such as an HGX H100).
IMEX_HOST, IMEX_DRA, IMEX_OFF = "host", "dra", "off"
IMEX_VAR_VALUES = (True, False, IMEX_HOST, IMEX_DRA)


def imex_mode(host_vars: Any, profile: Any) -> tuple[str, str]:
    """(mode, why) for one node: the host var ``imex`` (true or ``host``, false, ``dra``) decides when set; else a
    profile with an NVLink domain (``nvlink_domain``) runs IMEX on the host and any other profile none."""
    declared = host_vars.get("imex") if hasattr(host_vars, "get") else None
    if declared is True or declared == IMEX_HOST:
        return IMEX_HOST, "host var imex: true"
    if declared == IMEX_DRA:
        return IMEX_DRA, ("IMEX is managed by Kubernetes (host var imex: dra): the NVIDIA DRA driver runs an IMEX "
                          "daemon per ComputeDomain, the host service stays off")
    if declared is False:
        return IMEX_OFF, "host var imex: false"
    domain = getattr(profile, "nvlink_domain", None)
    if domain is not None:
        return IMEX_HOST, f"profile {getattr(profile, 'name', '?')} is a tray of an NVLink domain"
    return IMEX_OFF, (f"not applicable: profile {getattr(profile, 'name', '?')} has no multi-node NVLink domain "
                      "and the host var imex is not set")


IMEX_NO_RACK = "(no rack)"


def imex_domain_of(host: Any) -> str:
    """The IMEX domain of an inventory host: host var ``imex_domain``, else its ``rack`` (a domain per rack)."""
    return str(host.vars.get("imex_domain") or host.vars.get("rack") or IMEX_NO_RACK)


def imex_address(host: Any) -> str:
    """A tray's address in its domain's node list: host var ``imex_address``, else its inventory address."""
    return str(host.vars.get("imex_address") or host.address)


def imex_domains(hosts: Any, profile_of: Any) -> dict[str, list[Any]]:
    """The hosts that run IMEX on the host (``profile_of(host)``: its Profile), by domain, in inventory order: the
    order install writes the node list in, the same on every tray."""
    domains: dict[str, list[Any]] = {}
    for host in hosts:
        if imex_mode(host.vars, profile_of(host))[0] == IMEX_HOST:
            domains.setdefault(imex_domain_of(host), []).append(host)
    return domains


IMEX_SERVICE_ARGV = ("systemctl", "is-active", IMEX_SERVICE)
# The unit file's state (``enabled``, ``disabled``, ``masked``...): under the DRA driver the host unit must be
# disabled and masked (k8s-dra-driver-gpu docs/prerequisites.md), which is-active alone does not tell.
IMEX_UNIT_ARGV = ("systemctl", "is-enabled", IMEX_SERVICE)
IMEX_QUERY_ARGV = ("nvidia-imex-ctl", "-q")
IMEX_DOMAIN_ARGV = ("nvidia-imex-ctl", "-N", "-j")
IMEX_FILES_ARGV = (
    "find", IMEX_CHANNEL0, IMEX_NODES_CONFIG, IMEX_DRA_PLUGIN_DIR, "-maxdepth", "0", "-printf", "\\n== %p %y\\n",
    "-type", "f", "-name", "nodes_config.cfg", "-exec", "sha256sum", "{}", ";",
)

def docker_run_argv(image: str) -> tuple[str, ...]:
    """The container smoke test: the node's own copy of ``image`` (never pulled) lists the GPUs it is given."""
    return ("docker", "run", "--rm", "--pull=never", "--gpus", "all", image, "nvidia-smi", "-L")


def ib_write_bw_argv(hca: str, gpu: int, server: str = "", port: Optional[int] = None) -> tuple[str, ...]:
    """perftest's RDMA write bandwidth with the buffer in GPU ``gpu`` (GPUDirect RDMA): 5 s at 64 KiB messages,
    Gb/s; the server without an address, the client with the server's. ``port``: the TCP port the two sides meet
    on (``-p``; perftest's default is 18515, so servers running side by side on one node each need their own)."""
    argv = ("ib_write_bw", "-d", hca, f"--use_cuda={gpu}") + (("-p", str(port)) if port is not None else ()) + (
        "-F", "--report_gbits", "-D", "5")
    return argv + ((server,) if server else ())
