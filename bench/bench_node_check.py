"""How long ``nvdeploy node-check`` (Slurm's HealthCheckProgram) takes, process start to exit, on a healthy node
of simulated NVIDIA tools (nvdeploy.sim: each tool is a Python process, ~0.1 s, slower than the real ones), next
to a typical HealthCheckInterval and slurmd's 60 s limit on the program.

    python3 bench/bench_node_check.py [RUNS]      (default 5)

Prints best, median and worst, and the load average; asserts nothing.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nvdeploy.cli.commands.node_check import NODE_CHECKS
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.sim.fake_tool import install_fake_tools
from nvdeploy.sim.scenario import NodeScenario

PROFILE = "h100-sxm-8x"
INTERVAL_S = 300  # a common HealthCheckInterval (NHC's examples use 300)


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    with tempfile.TemporaryDirectory(prefix="nvd-bench-nc.") as scratch:
        base = Path(scratch)
        install_fake_tools(base / "bin")
        (base / "lock").mkdir()
        scenario = base / "scenario.json"
        scenario.write_text(NodeScenario("gpu1", ProfileCatalog().get(PROFILE), ()).to_json())
        env = dict(os.environ, PATH=f"{base}/bin:/usr/bin:/bin", NVD_SCENARIO_FILE=str(scenario),
                   NVDEPLOY_LOCK_DIR=str(base / "lock"))
        seconds = []
        for _ in range(runs):
            started = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "nvdeploy", "node-check", "--profile", PROFILE, "--node",
                                   "gpu1"], env=env, capture_output=True, text=True, timeout=120)
            seconds.append(time.monotonic() - started)
            if done.returncode != 0:
                print(f"NOT MEASURED: node-check exited {done.returncode}: {done.stdout.strip()} {done.stderr[-300:]}")
                return
    load = os.getloadavg()[0]
    median = statistics.median(seconds)
    print(f"node-check, {len(NODE_CHECKS)} checks, simulated tools, {runs} runs: best {min(seconds):.2f} s, "
          f"median {median:.2f} s, worst {max(seconds):.2f} s (load {load:.1f}); {100 * median / INTERVAL_S:.1f}% "
          f"of a {INTERVAL_S} s HealthCheckInterval, {100 * max(seconds) / 60:.0f}% of slurmd's 60 s limit")


if __name__ == "__main__":
    main()
