"""The real Slurm 22.05 cluster of the e2e tests: munged, slurmctld and N slurmd "nodes" on this one machine,
started once per session by tests/slurm/start-slurm.sh and stopped by PID at the end (tests/slurm/stop-slurm.sh).

Each slurmd "node" gets the simulated NVIDIA tools of the SSH tests (nvdeploy/sim/fake_tool.py) with its own
scenario: Slurm's TaskProlog puts ``<dir>/nodes/<node>/bin`` first on the task's PATH by ``$SLURMD_NODENAME``, and
the HealthCheckProgram wrapper finds its node from the slurmd that started it (all slurmd run on one host).
Skipped only when the Slurm packages cannot be installed (not root, no apt); CI sets NVDEPLOY_REQUIRE_SLURM=1.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from nvdeploy.testing.faults import default_sigint

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = ROOT / "tests" / "slurm"
# Per test session, so that two sessions on one machine never share daemons: a short folder (munge's and
# slurmstepd's unix socket paths must stay under ~107 characters) and ports 200 apart (slurmd use PORT+101..),
# below Linux's ephemeral range (32768-60999), where an outgoing connection could hold a slurmd's port.
DIR = Path(os.environ.get("NVDEPLOY_SLURM_TEST_DIR", f"/tmp/nvdsl-{os.getpid()}"))


def _port_slot() -> int:
    """0-59: which 200-port block this process's cluster uses. xdist workers of one session share a parent and
    differ by worker number (gw0, gw1, ...): never the same block while fewer than 60 run, whatever their pids."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and worker[2:].isdigit():
        return (os.getppid() + int(worker[2:])) % 60
    return os.getpid() % 60


PORT = int(os.environ.get("NVDEPLOY_SLURM_TEST_PORT", str(20000 + _port_slot() * 200)))
NODES = 4
PROFILE = "h100-sxm-8x"

TASK_PROLOG = """#!/bin/sh
# Slurm TaskProlog: "export NAME=value" lines set the task's environment. Per node: its own fake tools.
d={dir}/nodes/$SLURMD_NODENAME
[ -d "$d" ] || exit 0
echo "export PATH=$d/bin:/usr/local/bin:/usr/bin:/bin"
echo "export NVD_SCENARIO_FILE=$d/scenario.json"
echo "export NVDEPLOY_LOCK_DIR=$d/lock"
"""

HEALTH = """#!/bin/sh
# Slurm HealthCheckProgram (no arguments). Every slurmd of this test cluster runs on one host: the node is the
# -N argument of the slurmd that started us (a real node would just use its host name or SLURMD_NODENAME).
n=${{SLURMD_NODENAME:-}}
[ -n "$n" ] || n=$(tr '\\0' '\\n' </proc/$PPID/cmdline | sed -n '/^-N$/{{n;p;}}')
d={dir}/nodes/$n
[ -n "$n" ] && [ -f "$d/health.on" ] || exit 0
export PATH=$d/bin:/usr/local/bin:/usr/bin:/bin NVD_SCENARIO_FILE=$d/scenario.json NVDEPLOY_LOCK_DIR=$d/lock
export SLURM_CONF={dir}/etc/slurm.conf
{python} -m nvdeploy node-check --profile {profile} --node "$n" --drain --resume >>"$d/health.log" 2>&1
"""


def _run(argv: Sequence[str], timeout: float = 30, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=env,
                          stdin=subprocess.DEVNULL)


@dataclass
class SlurmTestCluster:
    dir: Path
    nodes: list[str]
    env: dict = field(default_factory=dict)
    faults: dict = field(default_factory=dict)

    def cmd(self, *argv: str, timeout: float = 20) -> subprocess.CompletedProcess:
        return _run(argv, timeout, self.env)

    def node_dir(self, node: str) -> Path:
        return self.dir / "nodes" / node

    def set_faults(self, node: str, faults: Sequence[str] = ()) -> None:
        """The node's faults; every node's scenario lists the others' as peers (the simulated multi-node
        all_reduce_perf of a Slurm step computes the job's bandwidth from all of them)."""
        from nvdeploy.config.profiles import ProfileCatalog
        from nvdeploy.sim.scenario import NodeScenario

        self.faults[node] = tuple(faults)
        hardware = ProfileCatalog().get(PROFILE)
        for name, own in self.faults.items():
            if not self.node_dir(name).is_dir():
                continue
            peers = tuple((n, f) for n, f in self.faults.items() if n != name)
            text = NodeScenario(name, hardware, own, peers=peers).to_json()
            path = self.node_dir(name) / "scenario.json"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)

    def reasons(self) -> dict[str, str]:
        """sinfo -R: node -> reason."""
        out = self.cmd("sinfo", "-R", "-h", "-N", "-o", "%N|%E").stdout
        return {line.split("|", 1)[0]: line.split("|", 1)[1] for line in out.splitlines() if "|" in line}

    def states(self, responding: bool = False) -> dict[str, str]:
        """sinfo's state per node. "idle*" is not responding, as a node is after a resume until slurmctld's next
        ping; the state is still idle, and with ``responding`` the "*" is kept."""
        out = self.cmd("sinfo", "-h", "-N", "-o", "%N %t").stdout
        return {n: s if responding else s.rstrip("*")
                for n, s in (line.split() for line in out.splitlines() if line.strip())}

    def jobs(self) -> list[str]:
        return [line for line in self.cmd("squeue", "-h", "-o", "%i %j %T").stdout.splitlines() if line.strip()]

    def wait_for(self, what: Callable[[], bool], timeout: float = 30, step: float = 0.3) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if what():
                return True
            time.sleep(step)
        return what()

    def reset(self) -> None:
        """Every node healthy, idle, no reason, no reservation, no job, no health check."""
        self.cmd("scancel", "--full", "-u", "root")
        self.wait_for(lambda: not self.jobs(), 20)
        out = self.cmd("scontrol", "-o", "show", "reservation").stdout
        for line in out.splitlines():
            if line.startswith("ReservationName="):
                self.cmd("scontrol", "delete", "reservationname=" + line.split()[0].split("=", 1)[1])
        for node in self.nodes:
            (self.node_dir(node) / "health.on").unlink(missing_ok=True)
        # A health check slurmd started before the switch went off still runs (and holds its node's lock, and may
        # drain or resume): the next test must not meet it.
        assert self.wait_for(lambda: not self.health_checks_running(), 60), "a health check did not end"
        for node in self.nodes:
            self.set_faults(node)
            if self.states().get(node, "idle") != "idle":
                self.cmd("scontrol", "update", f"nodename={node}", "state=resume")
        # Idle AND responding: each test starts from the same state (test_resumed_nodes_... covers "idle*").
        assert self.wait_for(lambda: set(self.states(responding=True).values()) == {"idle"}, 60), self.states(True)

    def health_checks_running(self) -> bool:
        """Whether a HealthCheckProgram run of this cluster is alive (the sh waits for its node-check)."""
        script = str(self.dir / "health.sh").encode()
        for proc in Path("/proc").iterdir():
            try:
                if proc.name.isdigit() and script in (proc / "cmdline").read_bytes():
                    return True
            except OSError:
                continue
        return False

    def nvdeploy(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
        return _run([sys.executable, "-m", "nvdeploy", *args], timeout, self.env)

    def popen(self, *args: str) -> subprocess.Popen:
        # SIGINT at its default in the child: a suite started as a background job inherits it ignored, and the
        # Ctrl-C test would then send a signal nvdeploy never sees.
        return subprocess.Popen([sys.executable, "-m", "nvdeploy", *args], env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                                preexec_fn=default_sigint)

    def start(self) -> subprocess.CompletedProcess:
        extra = "\n".join([f"TaskProlog={self.dir}/taskprolog.sh", f"HealthCheckProgram={self.dir}/health.sh",
                           "HealthCheckInterval=2", "HealthCheckNodeState=ANY"])
        env = dict(self.env, SLURM_TEST_DIR=str(self.dir), SLURM_TEST_NODES=str(len(self.nodes)),
                   SLURM_TEST_PORT=str(PORT), SLURM_TEST_EXTRA_CONF=extra, SLURM_TEST_RETURN_TO_SERVICE="1")
        return _run(["bash", str(SCRIPTS / "start-slurm.sh")], 300, env)

    def stop(self) -> None:
        _run(["bash", str(SCRIPTS / "stop-slurm.sh")], 60, dict(self.env, SLURM_TEST_DIR=str(self.dir)))


def prepare(cluster: SlurmTestCluster) -> None:
    from nvdeploy.sim.fake_tool import install_fake_tools

    for node in cluster.nodes:
        base = cluster.node_dir(node)
        (base / "lock").mkdir(parents=True, exist_ok=True)
        install_fake_tools(base / "bin")
        cluster.set_faults(node)
    for name, text in (("taskprolog.sh", TASK_PROLOG), ("health.sh", HEALTH)):
        path = cluster.dir / name
        path.write_text(text.format(dir=cluster.dir, python=shlex.quote(sys.executable), profile=PROFILE))
        path.chmod(0o755)


# How long a cancelled job may stay COMPLETING: slurmd's KillWait (30 s by default: SIGTERM, then SIGKILL after
# it) with room for a loaded machine.
KILL_WAIT_MARGIN_S = 120
