#!/usr/bin/env python3
"""How long one controller needs for 1,000 / 10,000 real nodes at --forks 64/256/1024: a model, from measured costs.

    python3 bench/scale_model.py                            # the defaults below (measured on the 2-core machine)
    python3 bench/scale_model.py --cpu-ms 40 --connect-ms 60 --node-s 3 --rtt-ms 0.5 --cores 1

A node costs the controller ``cpu`` seconds of CPU (SSH crypto, reading, parsing, checks, records: measured by
bench_validate.py as controller CPU / nodes) and lasts ``connect + round_trips * rtt + node`` seconds of wall time
(connection setup measured on loopback, the network round trips of one batch, and the time the node itself takes
to run its commands, which on a real 8-GPU node is set by its slowest tool: ``nvidia-smi -q -x`` takes 1-3 s).
With ``forks`` nodes in flight the run takes the longer of the two bounds:

- latency bound: ``ceil(N / forks) * per_node_wall`` (waves of ``forks`` nodes);
- CPU bound: ``N * cpu / cores``. ``cores`` is what the controller can use: the SSH sessions, journal and reports
  of all threads share one core (the GIL; OpenSSL's ciphers release it, so a little more); from 200 nodes up the
  parsing and checks, about half of ``cpu``, run in worker processes on the other cores (runner/evaluate.py), so
  ``--cores 1.5`` to ``2`` is fair for a controller with 2 cores or more. The default (1) is the bound without them.

and whatever the three limits below allow of ``forks``:

- file descriptors: each node in flight holds a socket plus its channel's pipes; ``ulimit -n`` (often 1024) must
  exceed about 4 x forks, or connections fail with EMFILE (ERROR unreachable, not a slow run);
- a bastion (``ssh_jump``): OpenSSH's ``MaxStartups 10:30:100`` drops 30% of new unauthenticated connections once
  10 are pending and all beyond 100; with more forks than that, connections fail in bursts;
- the controller's cores: past the CPU bound, more forks only add memory (about 1 MiB of outputs per node in flight).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

SIZES = (1_000, 10_000)
FORKS = (64, 256, 1024)
# Bastion sshd default (sshd_config(5) MaxStartups 10:30:100): random drops start at 10 pending connections.
MAX_STARTUPS = (10, 30, 100)


@dataclass(frozen=True)
class Costs:
    cpu_s: float  # controller CPU per node
    connect_s: float  # TCP + SSH handshake + auth, one node
    rtt_s: float  # one network round trip controller <-> node
    round_trips: int  # round trips of one node's batch after the connection (exec request, reply, close)
    node_s: float  # what the node itself takes to run its commands (its slowest tool, side by side)
    cores: float  # cores the controller's work can use

    @property
    def per_node_wall(self) -> float:
        return self.connect_s + self.round_trips * self.rtt_s + self.node_s


def predict(costs: Costs, nodes: int, forks: int) -> tuple[float, str]:
    """(predicted wall seconds, the bound that sets it) for ``nodes`` nodes at ``forks``."""
    latency = math.ceil(nodes / forks) * costs.per_node_wall
    cpu = nodes * costs.cpu_s / costs.cores
    return (latency, "latency") if latency >= cpu else (cpu, "CPU")


def fds_needed(forks: int) -> int:
    return 4 * forks + 64  # a socket and a channel's pipes per node in flight, plus the process's own files


def report(costs: Costs, sizes: tuple[int, ...] = SIZES, forks_list: tuple[int, ...] = FORKS,
           indent: str = "") -> list[str]:
    lines = [f"{indent}scale model: per node {costs.cpu_s * 1000:.0f} ms controller CPU on {costs.cores:g} core(s); "
             f"wall {costs.per_node_wall:.2f} s = connect {costs.connect_s * 1000:.0f} ms + {costs.round_trips} x "
             f"RTT {costs.rtt_s * 1000:.1f} ms + node {costs.node_s:.1f} s"]
    header = f"{indent}  {'nodes':>6} " + " ".join(f"{'--forks ' + str(f):>24}" for f in forks_list)
    lines.append(header)
    for n in sizes:
        cells = []
        for forks in forks_list:
            wall, bound = predict(costs, n, forks)
            cells.append(f"{_duration(wall):>9} ({bound} bound)")
        lines.append(f"{indent}  {n:>6} " + " ".join(f"{c:>24}" for c in cells))
    cpu_floor = costs.cpu_s / costs.cores
    knee = max(1, math.ceil(costs.per_node_wall / cpu_floor)) if cpu_floor > 0 else 0
    lines.append(f"{indent}  forks beyond ~{knee} buy nothing on this controller (the CPU bound: "
                 f"{cpu_floor * 1000:.0f} ms per node); file descriptors needed at 64/256/1024 forks: "
                 + "/".join(str(fds_needed(f)) for f in forks_list) + " (ulimit -n)")
    lines.append(f"{indent}  through a bastion, sshd's MaxStartups {':'.join(map(str, MAX_STARTUPS))} refuses new "
                 f"connections beyond {MAX_STARTUPS[0]} pending: keep --forks <= {MAX_STARTUPS[0]} there, or raise it")
    return lines


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu-ms", type=float, default=45.0, help="controller CPU per node, ms (bench_validate)")
    parser.add_argument("--connect-ms", type=float, default=60.0, help="connection setup per node, ms")
    parser.add_argument("--rtt-ms", type=float, default=0.5, help="network round trip, ms (same datacenter)")
    parser.add_argument("--round-trips", type=int, default=4, help="round trips of one batch after connecting")
    parser.add_argument("--node-s", type=float, default=3.0, help="seconds a real node takes for its commands")
    parser.add_argument("--cores", type=float, default=1.0, help="cores the controller's work can use (GIL: ~1)")
    args = parser.parse_args()
    costs = Costs(args.cpu_ms / 1000, args.connect_ms / 1000, args.rtt_ms / 1000, args.round_trips, args.node_s,
                  args.cores)
    print("\n".join(report(costs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
