"""Command lines of the GPU-stack collectors (nvdeploy/collect_stack.py), importing only the import-free
nvdeploy/transport/node_paths.py: the simulator's fake tools (nvdeploy/sim/stack_tools.py) run on fake nodes from a
bare copy of the package and recognise them."""

from __future__ import annotations

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


def docker_run_argv(image: str) -> tuple[str, ...]:
    """The container smoke test: the node's own copy of ``image`` (never pulled) lists the GPUs it is given."""
    return ("docker", "run", "--rm", "--pull=never", "--gpus", "all", image, "nvidia-smi", "-L")


def ib_write_bw_argv(hca: str, gpu: int, server: str = "") -> tuple[str, ...]:
    """perftest's RDMA write bandwidth with the buffer in GPU ``gpu`` (GPUDirect RDMA): 5 s at 64 KiB messages,
    Gb/s; the server without an address, the client with the server's."""
    argv = ("ib_write_bw", "-d", hca, f"--use_cuda={gpu}", "-F", "--report_gbits", "-D", "5")
    return argv + ((server,) if server else ())
