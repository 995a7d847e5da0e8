#!/usr/bin/env python3
"""Benchmark of ``nvdeploy validate`` at scale: the scale figures against their goals, each with MET/MISSED.

    python3 bench/bench_validate.py                        # every row (sim 1,000 + 10,000; SSH 128)  ~5-10 min
    python3 bench/bench_validate.py --only sim --nodes 1000        # one row                          ~1 min
    python3 bench/bench_validate.py --only ssh --ssh-nodes 32      # the SSH rows, smaller            ~1-2 min

Rows (``--only sim,ssh``):

- ``sim``: ``python -m nvdeploy validate -i INV --out TMP -q`` in a fresh process over N healthy
  ``connection: sim`` nodes (h100-sxm-8x, the playbook's quick level, default forks): wall, peak RSS and CPU of
  that process alone (``os.wait4`` of a minimal launcher). Goals: 1,000 nodes < 20 s; 10,000 nodes < 120 s with a
  peak RSS < 1.5x that of 1,000.
- ``ssh``: N loopback nodes served by real OpenSSH (``nvdeploy.testing.SshCluster``), their tools REPLAYED
  (``nvdeploy.testing.replay``: a shell ``case`` and ``cat`` of recorded outputs, a few ms per call), so the figure
  measures nvdeploy, not the fake tools. Contenders, each in a fresh worker process: nvdeploy's ``run_validate``
  (quick level) and a plain fabric pool of ``--forks`` threads, one connection and ONE ``run()`` per node of the
  very commands nvdeploy sends (the same NVML probe in argv), joined by ``;``; and nvdeploy again with the
  shell batch, as on nodes without a system Python. Goals: wall <= 1.25x, controller CPU <=
  1.5x, and node-side CPU (sshd sessions, shells, tools: what the listeners reaped) <= 1.2x.

A figure is printed only for a run that did the work: every node's verdict is read back, and a run in which nodes
ended in ERROR (or a fabric run in which a node's outputs were not all read) prints ``NOT MEASURED: N nodes ERROR
(reasons)`` instead. The load average is printed next to every figure: on a shared 2-core machine, compare ratios
taken in one run, not figures taken at different loads. Traffic stays on 127.0.0.0/8; every sshd started is
stopped before the script exits. The scale model (bench/scale_model.py) is printed at the end from the measured
per-node costs.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
for _path in (REPO, REPO / "bench"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from scale_model import Costs, report  # noqa: E402

PROFILE = "h100-sxm-8x"
SEP = "__NVD_BENCH_SEP__"
GOALS = {"sim1000_s": 20.0, "sim10000_s": 120.0, "rss_ratio": 1.5, "wall_ratio": 1.25, "cpu_ratio": 1.5,
         "node_cpu_ratio": 1.2}


def load() -> str:
    try:
        return "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def verdict(ok: bool) -> str:
    return "MET" if ok else "MISSED"


# Linux keeps the pre-exec memory high-water mark in a child's ru_maxrss: a child forked from this script would
# report at least this script's RSS. So children are started by a minimal interpreter that forks the real command
# and reports that grandchild's own rusage.
LAUNCHER = """
import json, os, sys
report, argv = sys.argv[1], sys.argv[2:]
pid = os.fork()
if pid == 0:
    try:
        os.execvp(argv[0], argv)
    finally:
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
with open(report, "w") as handle:
    json.dump({"rc": os.waitstatus_to_exitcode(status), "maxrss_kib": ru.ru_maxrss,
               "cpu": ru.ru_utime + ru.ru_stime}, handle)
"""


def group_rss_kib(group: int) -> int:
    """The summed RSS (KiB) of every process in process group ``group`` now."""
    page_kib = os.sysconf("SC_PAGE_SIZE") // 1024
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_bytes()
            if int(stat[stat.rfind(b")") + 2:].split()[2]) != group:
                continue
            total += int(Path(f"/proc/{entry}/statm").read_bytes().split()[1]) * page_kib
        except (OSError, ValueError, IndexError):  # gone between the listing and the read
            continue
    return total


def run_child(argv: list[str], timeout_s: float) -> dict[str, Any]:
    """Run ``argv`` in its own process group; rc, wall, peak RSS (KiB) and CPU of that command alone.

    ``maxrss_kib`` is the high-water mark of its largest process (Linux: the most of its own and its reaped
    children's); ``group_rss_kib`` the highest sum, sampled every 0.1 s, over the command and the processes it
    started (a fleet run's evaluation workers, nvdeploy/runner/evaluate.py)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO), env.get("PYTHONPATH"))))
    with tempfile.TemporaryFile() as log, tempfile.NamedTemporaryFile(suffix=".json") as usage_file:
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", LAUNCHER, usage_file.name, *argv],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env,
                                start_new_session=True)
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the group this call created, by its id
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout_s, kill)
        timer.start()
        peak = [0]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.1):
                peak[0] = max(peak[0], group_rss_kib(proc.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            proc.wait()
        finally:
            timer.cancel()
            done.set()
            sampler.join()
        wall = time.perf_counter() - started
        log.seek(0)
        tail = log.read()[-3000:].decode(errors="replace")
        try:
            usage = json.loads(Path(usage_file.name).read_text())
        except (OSError, ValueError):
            usage = {"rc": proc.returncode, "maxrss_kib": 0, "cpu": 0.0}
    return {**usage, "group_rss_kib": max(peak[0], usage["maxrss_kib"]), "wall": wall, "timed_out": killed.is_set(),
            "tail": tail}


def not_measured(nodes: list[dict[str, Any]], expect: str = "PASS") -> Optional[str]:
    """None when every node has the expected verdict; else why the run's figure must not be printed."""
    bad = [n for n in nodes if n.get("verdict") != expect]
    if not bad:
        return None
    errors = [n for n in bad if n.get("verdict") == "ERROR"]
    reasons: Counter[str] = Counter()
    for node in bad:
        for finding in node.get("findings", []):
            if finding.get("verdict") not in ("PASS", "SKIP"):
                reasons[f"{finding.get('check')}: {finding.get('reason') or finding.get('verdict')}"] += 1
    example = next((f"{n['name']}: {f.get('summary', '')[:100]}" for n in bad for f in n.get("findings", [])
                    if f.get("verdict") not in ("PASS", "SKIP")), "")
    what = f"{len(errors)} nodes ERROR" if errors else f"{len(bad)} nodes not {expect}"
    return f"NOT MEASURED: {what} ({', '.join(f'{k} x{v}' for k, v in reasons.most_common(3))}; e.g. {example})"


# ------------------------------------------------------------------------------------------- simulated nodes


def sim_inventory(n: int) -> str:
    width = max(4, len(str(n)))
    return "\n".join(["all:", "  vars:", "    cluster: bench-sim", "    connection: sim", f"    profile: {PROFILE}",
                      '    driver_version: "550.90.07"', "  hosts:", f"    sim[{1:0{width}d}-{n:0{width}d}]: {{}}", ""])


def create_cost_ms(folder: Path, count: int = 200) -> float:
    """System CPU per file created in ``folder`` (ms): a run writes ~13 evidence files per node, and on a slow
    disk that, not nvdeploy, is what a simulated run's system time is."""
    probe = folder / "create-probe"
    probe.mkdir()
    before = os.times()
    for i in range(count):
        fd = os.open(probe / f"f{i}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, b"x" * 512)
        os.close(fd)
    spent = os.times().system - before.system
    subprocess.run(["rm", "-rf", str(probe)], check=False)
    return spent / count * 1000


def bench_sim(sizes: list[int], tmp: Path, timeout_s: float) -> dict[int, dict[str, Any]]:
    print("\nsimulated nodes: `python -m nvdeploy validate -i INV --out TMP -q`, healthy h100-sxm-8x, quick level, "
          "fresh process per run")
    print(f"  run folders in {tmp} (--out-dir): {create_cost_ms(tmp):.2f} ms of system CPU per file created there; "
          "a run creates ~13 evidence files per node")
    print("  peak RSS: of its largest process (ru_maxrss) / of all its processes, the evaluation workers too (summed, "
          "sampled every 0.1 s)")
    print(f"  {'nodes':>6} {'wall s':>7} {'nodes/s':>8} {'peak RSS MiB':>12} {'CPU s':>6}  {'load 1/5/15 min':<16} "
          "result")
    measured: dict[int, dict[str, Any]] = {}
    for n in sizes:
        inventory = tmp / f"sim-{n}.yaml"
        inventory.write_text(sim_inventory(n))
        out = tmp / f"sim-out-{n}"
        before = load()
        res = run_child([sys.executable, "-m", "nvdeploy", "validate", "-i", str(inventory), "--out", str(out), "-q"],
                        timeout_s)
        found = sorted(out.glob("*/*/results.json"))
        doc = json.loads(found[-1].read_text()) if found else None
        problem = None
        if res["timed_out"]:
            problem = f"NOT MEASURED: killed after {timeout_s:.0f} s"
        elif doc is None:
            problem = f"NOT MEASURED: no results.json (exit {res['rc']}): {res['tail'][-300:]}"
        elif len(doc.get("nodes", [])) != n:
            problem = f"NOT MEASURED: {len(doc.get('nodes', []))} of {n} nodes in results.json"
        else:
            problem = not_measured(doc["nodes"])
        if problem:
            print(f"  {n:>6} {'-':>7} {'-':>8} {'-':>12} {'-':>6}  {before:<16} {problem}")
        else:
            measured[n] = res
            rss = f"{res['maxrss_kib'] / 1024:.0f} / {res['group_rss_kib'] / 1024:.0f}"
            print(f"  {n:>6} {res['wall']:>7.1f} {n / res['wall']:>8.0f} {rss:>12} "
                  f"{res['cpu']:>6.1f}  {before:<16} {n} nodes PASS, exit {res['rc']}")
        subprocess.run(["rm", "-rf", str(out)], check=False)
    return measured


# -------------------------------------------------------------------------------------------- loopback SSH


def node_cpu(cluster: Any) -> float:
    """CPU seconds the fake nodes used so far: the sshd listeners' own and their reaped descendants'."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in cluster.listener_pids:
        try:
            data = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2:].split()
        total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return total / ticks


def quick_commands() -> tuple[tuple[str, ...], list[str]]:
    """(check ids, shell form of the light commands) nvdeploy sends one node at the quick level."""
    from nvdeploy.checks import CHECKS
    from nvdeploy.collect.catalog import light_specs
    from nvdeploy.config.levels import load_levels
    from nvdeploy.config.profiles import ProfileCatalog

    checks = tuple(c for c in load_levels()["quick"] if c in CHECKS)
    needed = [c for check in checks for c in CHECKS[check].collectors]
    specs = light_specs({}, needed, ProfileCatalog().get(PROFILE))
    return checks, [spec.display for spec in specs]


def worker_nvdeploy(spec: dict[str, Any], shell_batch: bool = False) -> dict[str, Any]:
    """nvdeploy's quick run; with ``shell_batch`` as on nodes without a system Python (transport/batch.sh)."""
    from nvdeploy.config.inventory import load_inventory
    from nvdeploy.config.profiles import ProfileCatalog
    from nvdeploy.phases.validate import run_validate
    from nvdeploy.runner.engine import EngineOptions
    from nvdeploy.transport import batch

    if shell_batch:
        batch.SYSTEM_PYTHONS = ("/nonexistent/python3",)

    started, cpu = time.perf_counter(), time.process_time()
    catalog = ProfileCatalog()
    inventory = load_inventory(spec["inventory"], catalog)
    options = EngineOptions(forks=spec["forks"], checks=tuple(spec["checks"]))
    outcome = run_validate(inventory, catalog, options, Path(spec["out"]))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {"wall_inner": wall, "cpu_inner": cpu, "nodes": [n.to_dict() for n in outcome.run.nodes]}


def worker_fabric(spec: dict[str, Any]) -> dict[str, Any]:
    import concurrent.futures as cf

    import paramiko
    from fabric import Config, Connection

    commands = spec["commands"]
    joined = f"; printf '\\n{SEP}\\n'; ".join(commands)

    def one(node: dict[str, str]) -> tuple[bool, float, str]:
        config = Config(overrides={"load_ssh_configs": False, "timeouts": {"connect": 30}})
        conn = Connection(host=node["address"], user=spec["user"], port=spec["port"], config=config,
                          connect_timeout=30, forward_agent=False,
                          connect_kwargs={"key_filename": [spec["key"]], "allow_agent": False, "look_for_keys": False,
                                          "banner_timeout": 30, "auth_timeout": 30})
        try:
            conn.client.load_host_keys(spec["known_hosts"])
            conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
            began = time.perf_counter()
            conn.open()
            connect_s = time.perf_counter() - began
            conn.client.get_transport().sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            outs = conn.run(joined, hide=True, warn=True, in_stream=False, timeout=120).stdout.split(SEP)
            ok = len(outs) == len(commands) and any("</nvidia_smi_log>" in o for o in outs)
            return ok, connect_s, "" if ok else f"{len(outs)} of {len(commands)} outputs"
        except Exception as exc:  # noqa: BLE001 - reported as NOT MEASURED with the error
            return False, 0.0, f"{type(exc).__name__}: {exc}"
        finally:
            conn.close()

    # One connection alone first: its setup time is the model's connect cost (in the pool, setups queue for CPU).
    alone = one(spec["nodes"][0])[1]
    started, cpu = time.perf_counter(), time.process_time()
    with cf.ThreadPoolExecutor(max_workers=max(1, min(spec["forks"], len(spec["nodes"])))) as pool:
        results = list(pool.map(one, spec["nodes"]))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {"wall_inner": wall, "cpu_inner": cpu, "ok": sum(1 for good, _, _ in results if good),
            "errors": [e for good, _, e in results if not good][:3],
            "connect_s": alone, "connect_pool_s": statistics.median([c for good, c, _ in results if good] or [0.0])}


def run_worker(kind: str, spec_file: Path, timeout_s: float) -> dict[str, Any]:
    result_file = spec_file.with_name(f"{kind}-{time.monotonic_ns()}.json")
    res = run_child([sys.executable, str(Path(__file__).resolve()), "--worker", kind, "--spec", str(spec_file),
                     "--result", str(result_file)], timeout_s)
    try:
        res.update(json.loads(result_file.read_text()))
    except (OSError, ValueError):
        res["error"] = "worker wrote no result: " + res["tail"][-600:]
    return res


def bench_ssh(n: int, forks: int, tmp: Path, timeout_s: float) -> Optional[dict[str, Any]]:
    from nvdeploy.config.profiles import ProfileCatalog
    from nvdeploy.sim.scenario import NodeScenario
    from nvdeploy.testing import SshCluster, sshd_available
    from nvdeploy.testing.replay import replay_cluster

    print(f"\nloopback SSH: {n} nodes (real sshd, replayed tools), quick level, {forks} threads each")
    if not sshd_available():
        print("  NOT MEASURED: /usr/sbin/sshd is not installed (apt-get install openssh-server)")
        return None
    checks, commands = quick_commands()
    print(f"  {len(commands)} commands per node, as nvdeploy builds them; fabric runs the same, joined by ';'")
    catalog = ProfileCatalog()
    profile = catalog.get(PROFILE)
    pairs = [(f"node{i:04d}", NodeScenario(f"node{i:04d}", profile, ("sudo_nopasswd",)).to_json())
             for i in range(1, n + 1)]
    with SshCluster(pairs) as cluster:
        replay_cluster(cluster, catalog)
        inventory = tmp / f"ssh-{n}.yaml"
        inventory.write_text(cluster.inventory_yaml(profile=PROFILE))
        spec = {"inventory": str(inventory), "out": str(tmp / f"ssh-out-{n}"), "forks": forks, "checks": list(checks),
                "nodes": [{"name": node.name, "address": node.address} for node in cluster.nodes],
                "port": cluster.port, "user": cluster.user, "key": str(cluster.client_key),
                "known_hosts": str(cluster.known_hosts), "commands": commands}
        spec_file = tmp / f"ssh-{n}.json"
        spec_file.write_text(json.dumps(spec))
        print(f"  cluster up in {cluster.start_seconds:.1f} s")
        print(f"  {'contender':<28} {'wall s':>7} {'CPU s':>6} {'node CPU s':>10} {'peak RSS MiB':>12}  "
              f"{'load 1/5/15 min':<16} result")
        rows: dict[str, dict[str, Any]] = {}
        # interleaved, best of two each; nvdeploy-shell: the shell batch (nodes without a system Python)
        for kind in ("fabric", "nvdeploy", "nvdeploy-shell") * 2:
            before_load, before_cpu = load(), node_cpu(cluster)
            res = run_worker(kind, spec_file, timeout_s)
            time.sleep(0.5)  # let the listeners reap the last sessions
            res["node_cpu"] = node_cpu(cluster) - before_cpu
            label = {"nvdeploy": "nvdeploy validate (quick)", "nvdeploy-shell": "  same, shell batch",
                     "fabric": "fabric, 1 run() per node"}[kind]
            if "error" in res:
                problem: Optional[str] = f"NOT MEASURED: {res['error']}"
            elif kind != "fabric":
                problem = not_measured(res["nodes"])
            else:
                problem = None if res["ok"] == n else (f"NOT MEASURED: {n - res['ok']} nodes without all outputs "
                                                       f"({'; '.join(res['errors'])})")
            if problem:
                print(f"  {label:<28} {'-':>7} {'-':>6} {'-':>10} {'-':>12}  {before_load:<16} {problem}")
                continue
            wall = res["wall_inner"]
            print(f"  {label:<28} {wall:>7.2f} {res['cpu_inner']:>6.2f} {res['node_cpu']:>10.2f} "
                  f"{res['maxrss_kib'] / 1024:>12.0f}  {before_load:<16} all {n} nodes done")
            best = rows.get(kind)
            if best is None or wall < best["wall_inner"]:
                rows[kind] = res
        print(f"  cluster stopping (every sshd and session killed); load {load()}")
    if "nvdeploy" not in rows or "fabric" not in rows:
        print("  ratios NOT MEASURED: a contender has no complete run")
        return None
    mine, theirs = rows["nvdeploy"], rows["fabric"]
    ratios = {"wall": mine["wall_inner"] / theirs["wall_inner"], "cpu": mine["cpu_inner"] / theirs["cpu_inner"],
              "node": mine["node_cpu"] / theirs["node_cpu"] if theirs["node_cpu"] else float("inf")}
    print(f"  wall ratio nvdeploy/fabric {ratios['wall']:.2f}x (goal <= {GOALS['wall_ratio']}x: "
          f"{verdict(ratios['wall'] <= GOALS['wall_ratio'])}); controller CPU {mine['cpu_inner']:.2f} vs "
          f"{theirs['cpu_inner']:.2f} s "
          f"= {ratios['cpu']:.2f}x (goal <= {GOALS['cpu_ratio']}x: {verdict(ratios['cpu'] <= GOALS['cpu_ratio'])})")
    print(f"  node-side CPU (batch wrapper vs commands joined by ';'): {mine['node_cpu'] / n * 1000:.0f} vs "
          f"{theirs['node_cpu'] / n * 1000:.0f} ms per node = {ratios['node']:.2f}x (goal <= "
          f"{GOALS['node_cpu_ratio']}x: {verdict(ratios['node'] <= GOALS['node_cpu_ratio'])})")
    shell = rows.get("nvdeploy-shell")
    if shell is not None:
        print(f"  with the shell batch (nodes without a system Python): wall "
              f"{shell['wall_inner'] / theirs['wall_inner']:.2f}x, node-side CPU {shell['node_cpu'] / n * 1000:.0f} "
              f"ms per node = {shell['node_cpu'] / theirs['node_cpu'] if theirs['node_cpu'] else float('inf'):.2f}x")
    return {"n": n, "nvdeploy": mine, "fabric": theirs, "ratios": ratios, "load": load()}


# --------------------------------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="sim,ssh", help="rows to run: sim, ssh (comma-separated; default both)")
    parser.add_argument("--nodes", default="1000,10000", help="simulated sizes (default 1000,10000)")
    parser.add_argument("--ssh-nodes", type=int, default=128, help="loopback SSH nodes (default 128)")
    parser.add_argument("--forks", type=int, default=64, help="nvdeploy --forks and the fabric pool size (64)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds at most per run (600)")
    parser.add_argument("--out-dir", help="where the simulated runs write their run folders (default: TMPDIR); "
                        "/dev/shm takes the disk's file-creation cost out of the figure")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        spec = json.loads(Path(args.spec).read_text())
        result = (worker_fabric(spec) if args.worker == "fabric"
                  else worker_nvdeploy(spec, shell_batch=args.worker == "nvdeploy-shell"))
        Path(args.result).write_text(json.dumps(result))
        return 0
    only = {part.strip() for part in args.only.split(",") if part.strip()}
    sizes = [int(x) for x in args.nodes.split(",") if x.strip()]
    print(f"nvdeploy bench: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, load {load()}")
    started = time.monotonic()
    sim: dict[int, dict[str, Any]] = {}
    ssh = None
    with tempfile.TemporaryDirectory(prefix="nvd-bench-") as tmp_name:
        tmp = Path(tmp_name)
        if "sim" in only and sizes:
            sim_dir = Path(tempfile.mkdtemp(prefix="nvd-bench-sim-", dir=args.out_dir)) if args.out_dir else tmp
            try:
                sim = bench_sim(sizes, sim_dir, args.timeout)
            finally:
                if args.out_dir:
                    subprocess.run(["rm", "-rf", str(sim_dir)], check=False)
        if "ssh" in only and args.ssh_nodes > 0:
            ssh = bench_ssh(args.ssh_nodes, args.forks, tmp, args.timeout)
    print("\nscale goals")
    if 1000 in sim:
        wall = sim[1000]["wall"]
        print(f"  1,000 simulated nodes: {wall:.1f} s (goal < {GOALS['sim1000_s']:.0f} s): "
              f"{verdict(wall < GOALS['sim1000_s'])}")
    if 10000 in sim:
        wall = sim[10000]["wall"]
        print(f"  10,000 simulated nodes: {wall:.1f} s (goal < {GOALS['sim10000_s']:.0f} s): "
              f"{verdict(wall < GOALS['sim10000_s'])}")
        if 1000 in sim:
            ratio = sim[10000]["group_rss_kib"] / sim[1000]["group_rss_kib"]
            own = sim[10000]["maxrss_kib"] / sim[1000]["maxrss_kib"]
            print(f"  peak RSS 10,000 / 1,000, with the evaluation workers: {ratio:.2f}x (the largest process alone: "
                  f"{own:.2f}x; goal < {GOALS['rss_ratio']}x): {verdict(ratio < GOALS['rss_ratio'])}")
    if ssh is not None:
        r = ssh["ratios"]
        print(f"  SSH {ssh['n']} nodes vs fabric: wall {r['wall']:.2f}x {verdict(r['wall'] <= GOALS['wall_ratio'])}, "
              f"controller CPU {r['cpu']:.2f}x {verdict(r['cpu'] <= GOALS['cpu_ratio'])}, node CPU {r['node']:.2f}x "
              f"{verdict(r['node'] <= GOALS['node_cpu_ratio'])}")
        mine = ssh["nvdeploy"]
        costs = Costs(cpu_s=mine["cpu_inner"] / ssh["n"], connect_s=ssh["fabric"]["connect_s"], rtt_s=0.0005,
                      round_trips=4, node_s=3.0, cores=1.0)
        print("\n" + "\n".join(report(costs)))
        print("  (controller CPU and connection setup measured above; RTT 0.5 ms and 3 s per real node assumed: "
              "bench/scale_model.py --help)")
    print(f"\ntotal bench time {time.monotonic() - started:.0f} s; load {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
