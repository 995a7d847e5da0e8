"""Fan-out of one node batch to N nodes: one srun step over N slurmd "nodes" vs N SSH connections to N sshd
"nodes", all on this machine (tests/slurm/start-slurm.sh and nvdeploy.testing.sshd). The batch is the same
(transport/batch.py) with two trivial commands, so the figure is the transport's cost, not the tools'.

    python3 bench/bench_slurm_fanout.py [N ...]      (default: 4 16; a couple of minutes at most)

Needs root with Slurm installed (or apt-get) and sshd. Prints one line per N and path: best and median of 3.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from nvdeploy.config.inventory import Host
from nvdeploy.slurm.srun import SrunOptions, SrunPool
from nvdeploy.testing.sshd import SshCluster
from nvdeploy.transport.base import CommandSpec
from nvdeploy.transport.ssh import SSHTransport

ROOT = Path(__file__).resolve().parents[1]
SPECS = [CommandSpec("uname", ("uname", "-a"), 20), CommandSpec("date", ("date", "-u"), 20)]
DIR = Path(f"/tmp/nvdsb-{os.getpid()}")


def timed_parallel(work: list) -> float:
    started = time.monotonic()
    threads = [threading.Thread(target=w) for w in work]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - started


def _srun_round(n: int) -> float:
    from nvdeploy.slurm.srun import SrunTransport

    pool = SrunPool([Host(f"node{i}", {}) for i in range(1, n + 1)], SrunOptions(exclusive=False, immediate_s=20))
    out: dict[str, list] = {}

    def one(name: str) -> None:
        transport = SrunTransport(pool, name)
        transport.connect()
        out[name] = transport.run_batch(SPECS, 60)
        transport.close()

    seconds = timed_parallel([lambda nm=f"node{i}": one(nm) for i in range(1, n + 1)])
    pool.release()
    assert len(out) == n and all(r[0].rc == 0 for r in out.values()), out
    return seconds


def via_srun(n: int) -> list[float]:
    return [_srun_round(n) for _ in range(3)]


def _ssh_round(cluster: SshCluster) -> float:
    ok: list[bool] = []

    def one(node) -> None:
        transport = SSHTransport(node.address, user=cluster.user, port=cluster.port,
                                 key_file=str(cluster.client_key), known_hosts=str(cluster.known_hosts))
        transport.connect()
        ok.append(transport.run_batch(SPECS, 60)[0].rc == 0)
        transport.close()

    seconds = timed_parallel([lambda nd=node: one(nd) for node in cluster.nodes])
    assert len(ok) == len(cluster.nodes) and all(ok)
    return seconds


def via_ssh(n: int) -> list[float]:
    with SshCluster(n, install_tools=False) as cluster:
        return [_ssh_round(cluster) for _ in range(3)]


def main(sizes: list[int]) -> None:
    # Every slurmd "node" is this one host: each gets its own node-lock folder through Slurm's TaskProlog.
    prolog = Path(f"/tmp/nvdsb-prolog-{os.getpid()}.sh")
    prolog.write_text(f"#!/bin/sh\nmkdir -p {DIR}/lock/$SLURMD_NODENAME\n"
                      f"echo export NVDEPLOY_LOCK_DIR={DIR}/lock/$SLURMD_NODENAME\n")
    prolog.chmod(0o755)
    env = dict(os.environ, SLURM_TEST_DIR=str(DIR), SLURM_TEST_PORT=str(21000 + (os.getpid() % 50) * 200),
               SLURM_TEST_GPUS="0", SLURM_TEST_EXTRA_CONF=f"TaskProlog={prolog}")
    for n in sizes:
        env["SLURM_TEST_NODES"] = str(n)
        subprocess.run(["bash", str(ROOT / "tests/slurm/start-slurm.sh")], env=env, check=True,
                       capture_output=True)
        os.environ["SLURM_CONF"] = str(DIR / "etc/slurm.conf")
        try:
            srun = via_srun(n)
        finally:
            subprocess.run(["bash", str(ROOT / "tests/slurm/stop-slurm.sh")], env=env, capture_output=True)
            shutil.rmtree(DIR, ignore_errors=True)
        ssh = via_ssh(n)  # the harness gives each sshd node its own NVDEPLOY_LOCK_DIR
        prolog.unlink(missing_ok=True) if n == sizes[-1] else None
        for name, t in (("srun", srun), ("ssh ", ssh)):
            print(f"N={n:3d} {name}: best {min(t):.2f} s, median {statistics.median(t):.2f} s "
                  f"(load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [4, 16])
