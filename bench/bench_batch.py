"""The node-side cost of the batch wrapper: processes and CPU per node, against the same commands joined by ``;``.

Runs the light batch a quick run sends one h100-sxm-8x node, on this machine, each command's tool replaced by
``true`` (the tool costs the same in every contender; what differs is the wrapper), three ways:

- ``batch``: the script nvdeploy sends (transport/batch.py), fed on a held-open stdin as the transports do, on a
  node with a system Python: the whole batch (per-command timeout, capping, frames, lock, watcher) in one Python
  process (transport/batch_runner.py);
- ``shell``: the same script on a node without a system Python: the shell batch (transport/batch.sh), two shell
  cappers per stream;
- ``plain``: the same command lines (their ``timeout`` and quoting included, no cappers, lock or frames) joined by
  ``;`` in one ``sh -c``, as a bare fabric loop would send them.

Each run is in a fresh PID namespace (``unshare --pid --fork``, root), as the leader of its own session (``setsid``,
as sshd starts a command, so the batch's sweep of its session runs): the pid the namespace's next process gets,
minus one, is how many processes the run created. CPU is the user+system time the run's process tree used
(``os.wait4`` of ``unshare``). Prints the median of ``--repeat`` runs, interleaved, and the ratio; a run whose
outputs were not all framed prints NOT MEASURED, never a figure.

    python3 bench/bench_batch.py [--repeat 15] [--tool true] [--every-light]
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nvdeploy.checks import CHECKS  # noqa: E402
from nvdeploy.collect.catalog import light_specs  # noqa: E402
from nvdeploy.config.levels import load_levels  # noqa: E402
from nvdeploy.config.profiles import ProfileCatalog  # noqa: E402
from nvdeploy.transport import batch  # noqa: E402

# What the namespace runs after the measured script: its own pid is the count of processes created before it + 1.
_COUNT = 'sh -c \'echo "__NVD_NEXT_PID__ $$"\''
# The Python batch's script ends with an exit: the count is then taken by the shell's EXIT trap.
_COUNT_AT_EXIT = "trap \"$(printf '%s' " + shlex.quote(_COUNT) + ")\" EXIT"


PROFILE = "h100-sxm-8x"


def quick_specs(tool: str, every_light: bool = False) -> list:
    """The light batch a quick run sends an h100-sxm-8x node (as bench_validate.py's), or with ``every_light``
    every light collector of the catalog (what a full level sends in its light batch), each running ``tool``."""
    checks = [c for c in load_levels()["quick"] if c in CHECKS]
    names = None if every_light else list(dict.fromkeys(n for c in checks for n in CHECKS[c].collectors))
    specs = light_specs({"sudo": False}, names, ProfileCatalog().get(PROFILE))
    return [replace(spec, argv=(tool,), sudo=False) for spec in specs]


def plain_script(specs: list) -> str:
    return "; ".join(batch._timeout(spec.timeout_s) + shlex.join(spec.argv) + " </dev/null" for spec in specs)


def measure(script: str, lock_dir: str) -> tuple[int, float, bytes]:
    """(processes created by ``script``, CPU seconds of its tree, its stdout)."""
    wrapper = f"{_COUNT_AT_EXIT}\n{script}\ntrap - EXIT\n{_COUNT}\n"
    env = {**os.environ, "NVDEPLOY_LOCK_DIR": lock_dir, "LC_ALL": "C"}
    # The measured shell reads its script from a file; its stdin stays an open pipe until it is done (the batch's
    # watcher ends everything at EOF, as on a node whose controller went away).
    with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as handle:
        handle.write(wrapper)
    try:
        proc = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "setsid", "sh", handle.name],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        assert proc.stdout is not None
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.stdin is not None:
            proc.stdin.close()
    finally:
        os.unlink(handle.name)
    marker = out.rsplit(b"__NVD_NEXT_PID__ ", 1)
    # The namespace's first process (pid 1) is the measured sh itself; the counter is the last one created.
    created = int(marker[1].split()[0]) - 1 if len(marker) == 2 else -1
    return created, usage.ru_utime + usage.ru_stime, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--tool", default="true", help="what every command runs (default: true)")
    parser.add_argument("--every-light", action="store_true",
                        help="every light collector of the catalog, not only the quick level's")
    args = parser.parse_args()
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        print("NOT MEASURED: needs root and util-linux's unshare (a PID namespace per run)")
        return 2
    specs = quick_specs(args.tool, args.every_light)
    batch_script = batch.build_script(specs, run_id="bench", heartbeat_lost_s=batch.HEARTBEAT_LOST_S)
    shell_script = batch.build_script(specs, run_id="bench", heartbeat_lost_s=batch.HEARTBEAT_LOST_S,
                                      python_runner=False)
    plain = plain_script(specs)
    results: dict[str, list[tuple[int, float]]] = {"batch": [], "shell": [], "plain": []}
    with tempfile.TemporaryDirectory() as lock_dir:
        for _ in range(args.repeat):
            for name, script in (("batch", batch_script), ("shell", shell_script), ("plain", plain)):
                created, cpu, out = measure(script, lock_dir)
                if name != "plain":
                    framed = batch.parse_output(specs, out.split(b"__NVD_NEXT_PID__")[0], 0.0)
                    failed = [r.name for r in framed if r.rc != 0]
                    if failed or batch.END_MARKER not in out:
                        print(f"NOT MEASURED: the batch did not frame every command ({', '.join(failed) or 'no end'})")
                        return 1
                if created < 0:
                    print(f"NOT MEASURED: the {name} run printed no process count")
                    return 1
                results[name].append((created, cpu))
    load = os.getloadavg()[0]
    procs = {k: statistics.median(c for c, _ in v) for k, v in results.items()}
    cpu = {k: statistics.median(t for _, t in v) * 1000 for k, v in results.items()}
    print(f"node-side cost of one {'every-light' if args.every_light else 'quick-level'} batch "
          f"({len(specs)} commands, tool '{args.tool}'), "
          f"median of {args.repeat}, load {load:.1f}")
    for name, what in (("batch", "batch, Python"), ("shell", "batch, shell")):
        print(f"  {what}: processes per node {procs[name]:.0f} vs plain {procs['plain']:.0f} "
              f"({procs[name] / len(specs):.1f} vs {procs['plain'] / len(specs):.1f} per command; "
              f"ratio {procs[name] / procs['plain']:.2f}x); node-side CPU {cpu[name]:.1f} ms vs plain "
              f"{cpu['plain']:.1f} ms (ratio {cpu[name] / cpu['plain']:.2f}x; goal <= 1.3x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
