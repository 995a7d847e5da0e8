"""The storage throughput command (``storage.throughput``): one ``sh -c`` script that measures each path the host
var ``storage_paths`` names, with fio (JSON) or, where fio is absent, dd with direct I/O. Part of the collect layer:
it imports no check; nvdeploy/parsers/storage.py reads what it prints.

Why it is built this way:

- Paths never become shell text: they are arguments of the script (``"$p"`` inside it), and the batch
  shlex-quotes every argument (nvdeploy/transport/batch.py), so a path holding ``;`` or ``$(...)`` is a name.
- Each path runs under its own ``timeout -k``, so one hung mount costs that path (ERROR timeout), not the others,
  and the node's batch lives on.
- The test file is ``mktemp``'d inside the path (a unique name, never another run's) and removed by the per-path
  script's own EXIT trap, which a TERM (its timeout, the batch's timeout, or the batch watcher that ends every
  process of the session on EOF, Ctrl-C or --deadline) turns into an exit. Only a KILL that comes before the tool
  has ended (a tool stuck in the kernel on a dead mount, where no rm could finish either) leaves the file.
- Bounds: the file size and each direction's run time are capped (standard level: at most 4 GiB and 60 s per
  direction), and the collector's timeout is the sum of the per-path limits plus slack, so the script's own
  per-path timeouts fire first.

Output, per path (``@@`` lines are the script's, everything else the tool's)::

    @@nvd-storage <path>
    @@tool fio|dd
    @@step write
    <fio JSON, or dd's summary on stderr merged in>
    @@rc <exit status>
    @@step read
    ...
    @@status ok | missing | notdir | nowrite <mktemp's message> | timeout <seconds>
    @@end <exit status of the per-path script>

and ``@@done`` after the last path (a cut-off answer has none).
"""

from __future__ import annotations

from typing import Any, Mapping

from nvdeploy.collect.collector import Collector

COLLECTOR = "storage_throughput"
HELPER = "nvdeploy-storage"  # $0 of the outer script: the simulator recognises the command by it
PATH_HELPER = "nvdeploy-storage-path"
FILE_PREFIX = ".nvdeploy-storage."

# Standard-level bounds: defaults and the most a host var may ask for.
DEFAULT_FILE_MIB = 1024
MAX_FILE_MIB = 4096
DEFAULT_RUNTIME_S = 20
MAX_RUNTIME_S = 60
KILL_GRACE_S = 5
# The per-path limit covers fio's two runs, its layout and the final fsync.
PATH_SLACK_S = 30

# The per-path script: $1 file size in MiB, $2 run time per direction in seconds, $3 the path.
PATH_SCRIPT = r"""p=$3
f=
trap 'if [ -n "$f" ]; then rm -f -- "$f"; fi' EXIT
trap 'exit 143' HUP INT TERM
if [ ! -e "$p" ]; then echo '@@status missing'; exit 0; fi
if [ ! -d "$p" ]; then echo '@@status notdir'; exit 0; fi
# Test files a killed run left (a KILL before its trap ran): ours, and older than any run's limit (2 min 30 s).
u=$(id -u 2>/dev/null) && find "$p" -maxdepth 1 -type f -name '.nvdeploy-storage.*' -user "$u" -mmin +30 \
  -exec rm -f -- {} + 2>/dev/null
if ! out=$(mktemp "$p/.nvdeploy-storage.XXXXXXXX" 2>&1); then
  printf '@@status nowrite %s\n' "$out"; exit 0
fi
f=$out
if command -v fio >/dev/null 2>&1; then
  echo '@@tool fio'
  echo '@@step write'
  fio --name=nvdeploy-write --filename="$f" --rw=write --bs=1M --size="$1"M --runtime="$2" --direct=1 \
    --ioengine=libaio --iodepth=16 --end_fsync=1 --output-format=json 2>&1
  echo "@@rc $?"
  echo '@@step read'
  fio --name=nvdeploy-read --filename="$f" --rw=read --bs=1M --runtime="$2" --direct=1 \
    --ioengine=libaio --iodepth=16 --output-format=json 2>&1
  echo "@@rc $?"
else
  echo '@@tool dd'
  echo '@@step write'
  dd if=/dev/zero of="$f" bs=1M count="$1" oflag=direct conv=fsync 2>&1
  echo "@@rc $?"
  echo '@@step read'
  dd if="$f" of=/dev/null bs=1M iflag=direct 2>&1
  echo "@@rc $?"
fi
echo '@@status ok'
"""

# The outer script: $1 size, $2 run time, $3 per-path limit, $4 the per-path script, then the paths.
OUTER_SCRIPT = r"""size=$1 runtime=$2 limit=$3 inner=$4
shift 4
for p in "$@"; do
  printf '@@nvd-storage %s\n' "$p"
  timeout -k 5 "$limit" sh -c "$inner" nvdeploy-storage-path "$size" "$runtime" "$p"
  rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then printf '@@status timeout %s\n' "$limit"; fi
  printf '@@end %s\n' "$rc"
done
echo '@@done'
"""


def _bounded(value: Any, default: int, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return default
    return max(1, min(int(value), most))


def storage_paths(host_vars: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The host's ``storage_paths`` ({path: {read_gbps, write_gbps}}), validated by the inventory schema."""
    paths = host_vars.get("storage_paths")
    return {str(p): (v if isinstance(v, Mapping) else {}) for p, v in paths.items()} if isinstance(paths, Mapping) \
        else {}


# How many nodes measure one shared path (storage_paths: {PATH: {shared: true}}) at once, by default: all of them at
# once would make each node's figure its share of the file system's aggregate, which depends on its peers.
DEFAULT_SHARED_CONCURRENCY = 4


def shared_paths(host_vars: Mapping[str, Any]) -> tuple[str, ...]:
    """The host's storage paths marked ``shared: true`` (a file system its peers mount too), sorted."""
    return tuple(sorted(p for p, spec in storage_paths(host_vars).items() if spec.get("shared") is True))


def shared_concurrency(host_vars: Mapping[str, Any]) -> int:
    value = host_vars.get("storage_concurrency")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 \
        else DEFAULT_SHARED_CONCURRENCY


def bounds(host_vars: Mapping[str, Any]) -> tuple[int, int, int]:
    """(file size MiB, run time per direction s, per-path limit s) for the host, within the level's caps."""
    size = _bounded(host_vars.get("storage_file_mib"), DEFAULT_FILE_MIB, MAX_FILE_MIB)
    runtime = _bounded(host_vars.get("storage_runtime_s"), DEFAULT_RUNTIME_S, MAX_RUNTIME_S)
    limit = _bounded(host_vars.get("storage_timeout"), 2 * runtime + PATH_SLACK_S, 2 * MAX_RUNTIME_S + PATH_SLACK_S)
    return size, runtime, limit


def collector_timeout(host_vars: Mapping[str, Any]) -> float:
    """The whole command's limit: every path's limit and kill grace, plus slack, so per-path timeouts fire first."""
    _size, _runtime, limit = bounds(host_vars)
    return float(max(1, len(storage_paths(host_vars))) * (limit + KILL_GRACE_S + 2) + 15)


def build_storage(host_vars: Mapping[str, Any], profile: Any = None) -> tuple[str, ...]:
    """The argv; empty when the host names no path (the collector is not planned, the check SKIPs)."""
    paths = list(storage_paths(host_vars))
    if not paths:
        return ()
    size, runtime, limit = bounds(host_vars)
    return ("sh", "-c", OUTER_SCRIPT, HELPER, str(size), str(runtime), str(limit), PATH_SCRIPT, *paths)


# Heavy: it loads the file system for up to a minute per path, so it runs alone after the light batch, like the
# stress tests (and under the node lock, like every batch). It loads no GPU, so GPU compute processes do not keep it
# off the node. Its timeout is the host var ``storage_collector_timeout`` or, by default, the per-path sum.
STORAGE = Collector(
    COLLECTOR, ("true",), float(2 * DEFAULT_RUNTIME_S + PATH_SLACK_S + 60), heavy=True, loads_gpu=False,
    description="read and write throughput of each storage_paths path (fio, else dd with direct I/O)",
    timeout_var="storage_collector_timeout", build=build_storage, timeout_for=collector_timeout)

# This module's part of the catalog (nvdeploy/collect/catalog.py).
COLLECTORS: tuple[Collector, ...] = (STORAGE,)
