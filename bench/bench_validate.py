#!/usr/bin/env python3
"""Benchmark of ``nvdeploy validate``: prints figures, asserts nothing (this is not a timed test).

    python3 bench/bench_validate.py            # full: sim N=100,1000; SSH N=64,256   (~10 min on 2 cores)
    python3 bench/bench_validate.py --quick    # quick: sim N=100;     SSH N=64       (~3-5 min)

(a) Simulated nodes: ``python -m nvdeploy validate -i INV --out TMP -q`` in a fresh process per run over an
    inventory of N ``connection: sim`` nodes with a few faults sprinkled in. Wall time, peak RSS and CPU time are
    the whole controller's (interpreter start, imports, inventory, fan-out, reports), read with ``os.wait4``.
(b) Real loopback SSH nodes (``nvdeploy.testing.SshCluster``, healthy h100-sxm-8x scenarios): nvdeploy's
    ``run_validate`` in-process against a plain fabric loop (a 64-thread pool, one Connection per node: known_hosts
    + RejectPolicy + TCP_NODELAY) running the same commands, both as separate ``run()`` calls ("naive") and as one
    ``run()`` of the commands joined with ``;`` ("1rt", one round trip, as nvdeploy does). Every contender runs in
    a fresh worker process of this script, so its peak RSS is its own; wall time is measured inside the worker
    from just before the first connection to the last result (nvdeploy: reports included), without the
    interpreter start.

All traffic stays on 127.0.0.0/8. Every sshd started is stopped (SshCluster.stop) before the script exits.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

PROFILE = "h100-sxm-8x"
SEP = "__NVD_BENCH_SEP__"
# Faults sprinkled over the simulated cluster, spread evenly; what each node's verdict must be.
SIM_FAULTS = (
    ("xid79", "FAIL"),
    ("gpu_missing", "FAIL"),
    ("row_remap_pending", "FAIL"),
    ("ecc_uncorrectable", "FAIL"),
    ("driver_mismatch", "FAIL"),
    ("persistence_off", "FAIL"),
    ("row_remap_failure", "FAIL"),
    ("driver_missing", "FAIL"),
    ("xid48", "FAIL"),
    ("unreachable", "ERROR"),
    ("auth_fail", "ERROR"),
    ("xid13", "WARN"),
)
THREE_COMMANDS = ("nvidia-smi -q -x", "lspci -D -n -d 10de:", "dmesg")
# nvidia-smi output per node in the memory runs (nvdeploy keeps at most 4 MiB of each command's output).
FLOOD_SIZES_MIB = (1, 4, 50)
FLOOD_SIZES_MIB_QUICK = (4,)


# ----------------------------------------------------------------------------------------------- helpers


def mib(kib: float) -> str:
    return f"{kib / 1024:.0f}"


def load() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


# Linux keeps the pre-exec memory high-water mark in a child's ru_maxrss: a child forked from this (large) script
# would report at least this script's RSS. So children are started by a minimal interpreter that forks the
# real command and reports that grandchild's own rusage (whose pre-exec image is the launcher's ~10 MiB).
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


def run_child(argv: list[str], timeout_s: float, env: Optional[dict[str, str]] = None) -> dict[str, Any]:
    """Run ``argv`` in its own process group; return rc, wall, peak RSS (KiB) and CPU of that command alone."""
    with tempfile.TemporaryFile() as log, tempfile.NamedTemporaryFile(suffix=".json") as report:
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", LAUNCHER, report.name, *argv],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=env,
            start_new_session=True,
        )
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the group this call created, by its id
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout_s, kill)
        timer.start()
        try:
            proc.wait()
        finally:
            timer.cancel()
        wall = time.perf_counter() - started
        log.seek(0)
        tail = log.read()[-3000:].decode(errors="replace")
        try:
            usage = json.loads(Path(report.name).read_text())
        except (OSError, ValueError):
            usage = {"rc": proc.returncode, "maxrss_kib": 0, "cpu": 0.0}
    return {**usage, "wall": wall, "timed_out": killed.is_set(), "tail": tail}


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


class Budget:
    def __init__(self, seconds: float) -> None:
        self.until = time.monotonic() + seconds

    def left(self) -> float:
        return self.until - time.monotonic()


# ------------------------------------------------------------------------------------- (a) simulated nodes


def sim_inventory(n: int) -> tuple[str, dict[str, str]]:
    """YAML of N sim nodes with SIM_FAULTS spread evenly; {node: expected verdict} for the faulty ones."""
    width = max(4, len(str(n)))
    names = [f"sim{i:0{width}d}" for i in range(1, n + 1)]
    step = max(1, n // len(SIM_FAULTS))
    expected: dict[str, str] = {}
    lines = [
        "all:",
        "  vars:",
        "    cluster: bench-sim",
        "    connection: sim",
        f"    profile: {PROFILE}",
        '    driver_version: "550.90.07"',
        "  hosts:",
        f"    sim[{1:0{width}d}-{n:0{width}d}]: {{}}",
    ]
    for k, (fault, verdict) in enumerate(SIM_FAULTS):
        index = step // 2 + k * step
        if index >= n:
            break
        lines.append(f"    {names[index]}:")
        lines.append(f"      sim_faults: [{fault}]")
        expected[names[index]] = verdict
    return "\n".join(lines) + "\n", expected


def results_json(out: Path) -> Optional[dict[str, Any]]:
    found = sorted(out.glob("*/*/results.json"))
    return json.loads(found[-1].read_text()) if found else None


def bench_sim(sizes: list[int], budget: Budget, tmp: Path) -> list[dict[str, Any]]:
    print("\n(a) simulated nodes: `python -m nvdeploy validate -i INV --out TMP -q`, one fresh process per run")
    print(f"    {len(SIM_FAULTS)} faulty nodes per run ({', '.join(f for f, _ in SIM_FAULTS)}); forks = default (64)")
    print(f"    {'N':>5} {'wall s':>7} {'nodes/s':>8} {'peak RSS MiB':>12} {'CPU s':>6} {'exit':>4}  load     sanity")
    rows = []
    for n in sizes:
        if budget.left() < 30 + n * 0.05:
            print(f"    {n:>5}  skipped: time budget spent")
            continue
        text, expected = sim_inventory(n)
        inv = tmp / f"sim-{n}.yaml"
        inv.write_text(text)
        out = tmp / f"sim-out-{n}"
        before = load()
        res = run_child(
            [sys.executable, "-m", "nvdeploy", "validate", "-i", str(inv), "--out", str(out), "-q"],
            timeout_s=min(600.0, max(120.0, budget.left() + 60)),
            env=child_env(),
        )
        doc = results_json(out)
        sanity = "no results.json"
        if doc is not None:
            got = {node["name"]: node["verdict"] for node in doc.get("nodes", [])}
            bad = {name: v for name, v in got.items() if v != "PASS" and name not in expected}
            wrong = {name: (got.get(name), v) for name, v in expected.items() if got.get(name) != v}
            sanity = (
                f"ok ({len(got)} nodes, {doc.get('verdict')}, faulty nodes exactly as injected)"
                if len(got) == n and not bad and not wrong
                else f"MISMATCH: {len(got)} nodes, unexpected non-PASS {dict(list(bad.items())[:5])}, "
                f"wrong {dict(list(wrong.items())[:5])}"
            )
        flag = " TIMED OUT" if res["timed_out"] else ""
        print(
            f"    {n:>5} {res['wall']:>7.2f} {n / res['wall']:>8.0f} {mib(res['maxrss_kib']):>12} "
            f"{res['cpu']:>6.1f} {res['rc']:>4}  {before.split()[0]:>5}  {sanity}{flag}"
        )
        if res["rc"] not in (0, 1, 3):
            print("      output tail:\n" + "\n".join("      | " + ln for ln in res["tail"].splitlines()[-15:]))
        rows.append({"n": n, **{k: v for k, v in res.items() if k != "tail"}})
        if n >= 1000:
            verdict = "MET" if res["wall"] < 20 else "MISSED"
            print(
                f"    target: 1,000 simulated nodes validated and reported in < 20 s: {verdict} ({res['wall']:.1f} s)"
            )
    return rows


# ------------------------------------------------------------------------------------ (b) loopback SSH nodes


def check_set(name: str) -> tuple[str, ...]:
    """The checks of (b): ``core`` = the issue-2 core GPU checks (engine.QUICK_CHECKS: nvidia-smi -q -x, lspci,
    dmesg), ``quick`` = the playbook's whole quick level (grows as checks are added)."""
    if name == "core":
        from nvdeploy.engine import QUICK_CHECKS

        return tuple(QUICK_CHECKS)
    from nvdeploy.levels import load_levels

    return tuple(load_levels()[name])


def nvdeploy_commands(checks: tuple[str, ...], host_vars: dict[str, Any]) -> tuple[list[str], str]:
    """The shell form of the light commands nvdeploy sends to one node for ``checks``, as the engine builds them."""
    try:
        from nvdeploy import collect
        from nvdeploy.checks import CHECKS

        needed = [c for check_id in checks for c in CHECKS[check_id].collectors]
        specs = collect.light_specs(host_vars, needed)
        return [spec.display for spec in specs], ""
    except Exception as exc:  # the tree moves: fall back to the three documented commands
        return list(THREE_COMMANDS), f"could not read nvdeploy's collectors ({type(exc).__name__}: {exc})"


def short(cmd: str, limit: int = 60) -> str:
    return cmd if len(cmd) <= limit else f"{cmd[: limit - 20]}... ({len(cmd)} chars)"


def compile_fake_tools(cluster: Any) -> None:
    """Byte-compile the harness's private copy of nvdeploy once, with the interpreter the fake tools run.

    The test user cannot write __pycache__ there, so without this every fake nvidia-smi recompiles nvdeploy's
    modules; it makes the nodes cheaper for every contender alike (the node side is not what is measured).
    """
    wrapper = next(iter(cluster.nodes[0].bin_dir.iterdir()), None)
    python = sys.executable
    if wrapper is not None:
        for word in shlex.split(wrapper.read_text().splitlines()[-1]):
            if "python" in os.path.basename(word):
                python = word
                break
    subprocess.run(
        [python, "-m", "compileall", "-q", str(cluster.workdir / "pylib")],
        check=False,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=120,
    )
    for folder, _dirs, files in os.walk(cluster.workdir / "pylib"):
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)


def warm_up(cluster: Any, commands: list[str]) -> None:
    """Run the commands once on one node so page cache and bytecode are warm for whichever contender is first."""
    cfg = {
        "nodes": [{"name": cluster.nodes[0].name, "address": cluster.nodes[0].address}],
        "port": cluster.port,
        "user": cluster.user,
        "key": str(cluster.client_key),
        "known_hosts": str(cluster.known_hosts),
        "commands": commands,
        "forks": 1,
    }
    fabric_loop(cfg, "1rt")


def flood_fault() -> tuple[Optional[str], str]:
    """The simulator's flood fault as a format string taking a size in MiB, or None and why not."""
    try:
        from nvdeploy.sim import scenario

        if scenario.validate_fault("flood:4") is None:
            return "flood:{}", scenario.EXTRA_FAULTS.get("flood", "")
        return None, "the simulator has a 'flood' fault but not 'flood:<MiB>'"
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"


def node_cpu(cluster: Any) -> float:
    """CPU seconds the fake nodes used so far: the sshd listeners' own and their reaped descendants' (every
    session, shell and fake tool of a finished connection is accounted to its listener's cutime/cstime)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in cluster.listener_pids:
        try:
            data = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2 :].split()
        total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return total / ticks


def run_worker(kind: str, spec_file: Path, timeout_s: float) -> dict[str, Any]:
    result_file = spec_file.with_name(f"{spec_file.stem}-{kind}-{time.monotonic_ns()}.json")
    res = run_child(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            kind,
            "--spec",
            str(spec_file),
            "--result",
            str(result_file),
        ],
        timeout_s=timeout_s,
        env=child_env(),
    )
    try:
        res.update(json.loads(result_file.read_text()))
    except (OSError, ValueError):
        res["error"] = "worker wrote no result: " + res["tail"][-800:]
    return res


def describe(res: dict[str, Any]) -> str:
    if "error" in res:
        return f"ERROR {res['error']}"
    return res.get("summary", "")


def bench_ssh(
    sizes: list[int],
    forks: int,
    repeat: Optional[int],
    checks_name: str,
    flood_sizes: tuple[int, ...],
    budget: Budget,
    tmp: Path,
) -> list[dict[str, Any]]:
    from nvdeploy.profiles import ProfileCatalog
    from nvdeploy.sim.scenario import NodeScenario
    from nvdeploy.testing import SshCluster, sshd_available

    print(f"\n(b) loopback SSH nodes (SshCluster, healthy {PROFILE} scenarios), forks/pool size {forks}")
    if not sshd_available():
        print("    skipped: /usr/sbin/sshd is not installed (apt-get install openssh-server)")
        return []
    checks = check_set(checks_name)
    commands, note = nvdeploy_commands(checks, {})
    print(
        f"    nvdeploy: run_validate() in-process in a fresh worker process, checks {checks_name!r} ({len(checks)}); "
        "wall = inventory load + fan-out + reports"
    )
    print(
        f"    commands per node ({len(commands)}), as nvdeploy's collectors build them (nvdeploy runs them side "
        "by side in one round trip, each under `timeout -k`):"
    )
    for cmd in commands:
        print(f"      {short(cmd)}")
    if note:
        print(f"    note: {note}")
    if commands != list(THREE_COMMANDS):
        print(
            "    note: nvdeploy now sends more/other commands than the three of the brief; the fabric loops run "
            "exactly nvdeploy's list, so the comparison stays like for like"
        )
    profile = ProfileCatalog().get(PROFILE)
    rows: list[dict[str, Any]] = []
    flood, flood_doc = flood_fault()
    for n in sizes:
        passes = repeat or (2 if n <= 64 else 1)  # the default: two passes where they are cheap
        need = 20 + n * 0.25 * (1 + 2 * passes)
        if budget.left() < need:
            print(f"\n    N={n}: skipped, {budget.left():.0f} s left of the time budget, about {need:.0f} s needed")
            continue
        pairs = [(f"node{i:03d}", NodeScenario(f"node{i:03d}", profile).to_json()) for i in range(1, n + 1)]
        print(f"\n    N={n}: starting {n} fake nodes ({(n + 15) // 16} sshd processes) ...", flush=True)
        with SshCluster(pairs) as cluster:
            compile_fake_tools(cluster)
            inventory = tmp / f"ssh-{n}.yaml"
            inventory.write_text(cluster.inventory_yaml(profile=PROFILE))
            spec = {
                "inventory": str(inventory),
                "out": str(tmp / f"ssh-out-{n}"),
                "forks": forks,
                "nodes": [{"name": node.name, "address": node.address} for node in cluster.nodes],
                "port": cluster.port,
                "user": cluster.user,
                "key": str(cluster.client_key),
                "known_hosts": str(cluster.known_hosts),
                "commands": commands,
                "checks": list(checks),
            }
            spec_file = tmp / f"ssh-{n}.json"
            spec_file.write_text(json.dumps(spec))
            warm_up(cluster, commands)
            print(f"    cluster up in {cluster.start_seconds:.1f} s; load {load()}")
            print(
                f"    {'contender':<34} {'wall s':>7} {'nodes/s':>8} {'peak RSS MiB':>12} {'CPU s':>6} "
                f"{'node CPU s':>10}  result"
            )
            timings: dict[str, list[float]] = {"nvdeploy": [], "fabric-1rt": [], "fabric-naive": []}
            cpus: dict[str, list[tuple[float, float]]] = {"nvdeploy": [], "fabric-1rt": [], "fabric-naive": []}
            plan = ["fabric-naive"]
            for r in range(passes):
                plan += ["fabric-1rt", "nvdeploy"] if r % 2 == 0 else ["nvdeploy", "fabric-1rt"]
            labels = {
                "nvdeploy": "nvdeploy run_validate",
                "fabric-1rt": "fabric, 1 run() (cmds joined by ;)",
                "fabric-naive": f"fabric, {len(commands)} run() per node",
            }
            last_nvd: Optional[dict[str, Any]] = None
            for kind in plan:
                if budget.left() < 20:
                    print(f"    {labels[kind]:<34} skipped: time budget spent")
                    continue
                cpu_before = node_cpu(cluster)
                res = run_worker(kind, spec_file, timeout_s=min(600.0, max(120.0, budget.left() + 60)))
                time.sleep(0.5)  # let the listeners reap the last sessions
                res["node_cpu"] = node_cpu(cluster) - cpu_before
                wall = res.get("wall_inner", res["wall"])
                if "error" not in res:
                    timings[kind].append(wall)
                    cpus[kind].append((res["cpu"], res["node_cpu"]))
                if kind == "nvdeploy":
                    last_nvd = res
                print(
                    f"    {labels[kind]:<34} {wall:>7.2f} {n / wall:>8.1f} {mib(res['maxrss_kib']):>12} "
                    f"{res['cpu']:>6.1f} {res['node_cpu']:>10.1f}  {describe(res)}",
                    flush=True,
                )
                rows.append({"n": n, "kind": kind, "wall": wall, "maxrss_kib": res["maxrss_kib"], "cpu": res["cpu"]})
            best = {k: min(v) for k, v in timings.items() if v}
            if "nvdeploy" in best:
                for base in ("fabric-1rt", "fabric-naive"):
                    if base in best:
                        verdict = "MET" if best["nvdeploy"] / best[base] <= 1.3 else "MISSED"
                        print(
                            f"    ratio nvdeploy / {labels[base]:<34} = {best['nvdeploy'] / best[base]:.2f}x "
                            f"(best of {len(timings['nvdeploy'])} vs {len(timings[base])}; target <= 1.3x: "
                            f"{verdict})"
                        )
                for base in ("fabric-1rt",):
                    if cpus["nvdeploy"] and cpus[base]:
                        mine = min(cpus["nvdeploy"], key=sum)
                        theirs = min(cpus[base], key=sum)
                        print(
                            f"    CPU, controller + nodes: nvdeploy {mine[0]:.1f} + {mine[1]:.1f} = {sum(mine):.1f} s, "
                            f"fabric 1 run() {theirs[0]:.1f} + {theirs[1]:.1f} = {sum(theirs):.1f} s: "
                            f"{sum(mine) / sum(theirs):.2f}x (less sensitive to other load than wall time)"
                        )
            if n == min(sizes) and last_nvd is not None and "error" not in last_nvd:
                memory_with_big_outputs(cluster, pairs, spec_file, flood, flood_doc, flood_sizes, last_nvd, budget)
        print(f"    cluster stopped in {cluster.stop_seconds:.2f} s (every sshd and session killed)")
    return rows


def memory_with_big_outputs(
    cluster: Any,
    pairs: list[tuple[str, str]],
    spec_file: Path,
    flood: Optional[str],
    flood_doc: str,
    flood_sizes: tuple[int, ...],
    healthy: dict[str, Any],
    budget: Budget,
) -> None:
    """nvdeploy's peak RSS when every node's nvidia-smi prints 1, 4 and 50 MiB, against the healthy run."""
    n = len(pairs)
    print(f"    memory vs raw output size (nvdeploy only, N={n}, forks {json.loads(spec_file.read_text())['forks']}):")
    if flood is None:
        print(f"      skipped: {flood_doc}")
        return
    print(f"      simulator fault 'flood:<MiB>': {flood_doc}")
    base_rss = healthy["maxrss_kib"]
    print(
        f"      {'nvidia-smi output/node':<24} {'made MiB':>10} {'kept MiB':>9} {'peak RSS MiB':>12} "
        f"{'RSS - healthy':>13} {'wall s':>7}  result"
    )
    print(
        f"      {'healthy (~0.13 MiB)':<24} {healthy.get('raw_bytes', 0) / 2**20:>10.1f} "
        f"{healthy.get('kept_bytes', 0) / 2**20:>9.1f} {mib(base_rss):>12} "
        f"{0:>13} {healthy.get('wall_inner', healthy['wall']):>7.2f}"
    )
    for size in flood_sizes:
        if budget.left() < 60:
            print(f"      {size} MiB: skipped, time budget spent")
            continue
        fault = flood.format(size)
        for name, text in pairs:
            data = json.loads(text)
            data["faults"] = list(data.get("faults") or []) + [fault]
            cluster.set_scenario(name, json.dumps(data))
        try:
            res = run_worker("nvdeploy", spec_file, timeout_s=min(600.0, max(120.0, budget.left() + 60)))
        finally:
            for name, text in pairs:
                cluster.set_scenario(name, text)
        if "error" in res:
            print(f"      {fault:<24} {describe(res)}")
            continue
        print(
            f"      {fault:<24} {res.get('raw_bytes', 0) / 2**20:>10.1f} {res.get('kept_bytes', 0) / 2**20:>9.1f} "
            f"{mib(res['maxrss_kib']):>12} "
            f"{mib(res['maxrss_kib'] - base_rss):>13} {res.get('wall_inner', res['wall']):>7.2f}  "
            f"{res.get('summary', '')[:110]}"
        )


# ------------------------------------------------------------------------------------------------ workers


def worker_nvdeploy(spec: dict[str, Any]) -> dict[str, Any]:
    from nvdeploy.engine import EngineOptions
    from nvdeploy.inventory import load_inventory
    from nvdeploy.phases.validate import run_validate
    from nvdeploy.profiles import ProfileCatalog

    last = [0.0]

    def progress(_node: Any) -> None:
        last[0] = time.perf_counter()

    started = time.perf_counter()
    catalog = ProfileCatalog()
    inventory = load_inventory(spec["inventory"], catalog)
    options = EngineOptions(forks=spec["forks"], checks=tuple(spec["checks"]))
    outcome = run_validate(inventory, catalog, options, Path(spec["out"]), progress=progress)
    wall = time.perf_counter() - started
    counts: dict[str, int] = {}
    raw = kept = 0
    for node in outcome.run.nodes:
        counts[node.verdict.value] = counts.get(node.verdict.value, 0) + 1
        for record in node.evidence:
            raw += int(record.bytes_total or 0)
            path = outcome.run_dir / record.path
            kept += path.stat().st_size if path.is_file() else 0
    summary = (
        f"{outcome.run.verdict.value} {dict(sorted(counts.items()))}, exit {outcome.exit_code}; "
        f"last node at {last[0] - started:.2f} s, reports {wall - (last[0] - started):.2f} s"
    )
    if outcome.run.verdict.value != "READY":
        problems = [
            f"{n.name}: {f.check} {f.verdict.value} {f.summary[:90]}"
            for n in outcome.run.nodes
            for f in n.findings
            if f.verdict.value != "PASS"
        ][:3]
        summary += "; e.g. " + " | ".join(problems)
    return {"wall_inner": wall, "summary": summary, "raw_bytes": raw, "kept_bytes": kept}


def fabric_loop(spec: dict[str, Any], mode: str) -> dict[str, Any]:
    import concurrent.futures as cf

    import paramiko
    from fabric import Config, Connection

    commands = spec["commands"]
    joined = f"; printf '\\n{SEP}\\n'; ".join(commands)

    def one(node: dict[str, str]) -> tuple[bool, int, str]:
        # A Config of its own per Connection (a shared one races in threads), ssh_config not read: as nvdeploy.
        config = Config(overrides={"load_ssh_configs": False, "timeouts": {"connect": 10}})
        conn = Connection(
            host=node["address"],
            user=spec["user"],
            port=spec["port"],
            config=config,
            connect_timeout=10,
            forward_agent=False,
            connect_kwargs={
                "key_filename": [spec["key"]],
                "allow_agent": False,
                "look_for_keys": False,
                "banner_timeout": 10,
                "auth_timeout": 10,
            },
        )
        try:
            conn.client.load_host_keys(spec["known_hosts"])
            conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
            conn.open()
            conn.client.get_transport().sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if mode == "naive":
                outs = [conn.run(cmd, hide=True, warn=True, in_stream=False, timeout=60).stdout for cmd in commands]
            else:
                outs = conn.run(joined, hide=True, warn=True, in_stream=False, timeout=90).stdout.split(SEP)
            ok = len(outs) == len(commands) and any("</nvidia_smi_log>" in o for o in outs)
            return ok, sum(len(o) for o in outs), ""
        except Exception as exc:
            return False, 0, f"{type(exc).__name__}: {exc}"
        finally:
            conn.close()

    started = time.perf_counter()
    with cf.ThreadPoolExecutor(max_workers=max(1, min(spec["forks"], len(spec["nodes"])))) as pool:
        results = list(pool.map(one, spec["nodes"]))
    wall = time.perf_counter() - started
    ok = sum(1 for good, _, _ in results if good)
    errors = [e for _, _, e in results if e]
    summary = f"{ok}/{len(results)} nodes with all outputs read"
    if errors:
        summary += f"; {len(errors)} errors, e.g. {errors[0][:120]}"
    return {"wall_inner": wall, "summary": summary, "raw_bytes": sum(size for _, size, _ in results)}


def worker_main(kind: str, spec_file: str, result_file: str) -> int:
    spec = json.loads(Path(spec_file).read_text())
    if kind == "nvdeploy":
        result = worker_nvdeploy(spec)
    elif kind == "fabric-1rt":
        result = fabric_loop(spec, "1rt")
    elif kind == "fabric-naive":
        result = fabric_loop(spec, "naive")
    else:
        raise SystemExit(f"unknown worker {kind}")
    Path(result_file).write_text(json.dumps(result))
    return 0


# --------------------------------------------------------------------------------------------------- main


def sizes(text: str) -> list[int]:
    """``"64,256"`` -> [64, 256]; ``"0"`` -> [] (skip that part)."""
    return [int(x) for x in text.split(",") if x.strip() and int(x) > 0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="sim N=100 and SSH N=64 only (~5 min at most)")
    parser.add_argument("--sim-sizes", help="comma-separated N for (a); default 100,1000 (quick: 100)")
    parser.add_argument("--ssh-sizes", help="comma-separated N for (b); default 64,256 (quick: 64)")
    parser.add_argument("--forks", type=int, default=64, help="nvdeploy --forks and the fabric pool size (64)")
    parser.add_argument(
        "--repeat",
        type=int,
        help="timed passes of nvdeploy and fabric-1rt in (b); default 2 for N<=64, else 1 (quick: 1)",
    )
    parser.add_argument(
        "--checks",
        default="core",
        help="checks of (b): core (issue 2's GPU checks: nvidia-smi -q -x, lspci, dmesg; default), quick, standard",
    )
    parser.add_argument("--budget", type=float, help="seconds for the whole script; default 600 (quick: 300)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker_main(args.worker, args.spec, args.result)

    sim_sizes = sizes(args.sim_sizes or ("100" if args.quick else "100,1000"))
    ssh_sizes = sizes(args.ssh_sizes or ("64" if args.quick else "64,256"))
    repeat = args.repeat or (1 if args.quick else None)
    budget = Budget(args.budget or (300.0 if args.quick else 600.0))
    started = time.monotonic()
    import fabric
    import paramiko

    print(
        f"nvdeploy bench ({'quick' if args.quick else 'full'}): {os.cpu_count()} CPUs, Python "
        f"{sys.version.split()[0]}, fabric {fabric.__version__}, paramiko {paramiko.__version__}, load {load()}"
    )
    startup = run_child([sys.executable, "-m", "nvdeploy", "--version"], timeout_s=60, env=child_env())
    print(
        f"`python -m nvdeploy --version` (interpreter start + CLI import): {startup['wall']:.2f} s, "
        f"peak RSS {mib(startup['maxrss_kib'])} MiB"
    )
    with tempfile.TemporaryDirectory(prefix="nvd-bench-") as tmp_name:
        tmp = Path(tmp_name)
        if sim_sizes:
            bench_sim(sim_sizes, budget, tmp)
        flood_sizes = FLOOD_SIZES_MIB_QUICK if args.quick else FLOOD_SIZES_MIB
        if ssh_sizes:
            bench_ssh(ssh_sizes, args.forks, repeat, args.checks, flood_sizes, budget, tmp)
    print(f"\ntotal bench time {time.monotonic() - started:.0f} s; load {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
