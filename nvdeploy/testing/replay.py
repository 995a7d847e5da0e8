"""Replayed fake tools: cluster-scale SSH tests on a small machine.

A fake node's tools are Python (``nvdeploy.sim.fake_tool``): about a quarter of a second of CPU per call. The
quick level runs a dozen of them per node, so 64 nodes cost minutes of CPU on a 2-core machine, and the
commands time out for lack of CPU rather than for the fault under test. :func:`replay_cluster` records, in
this process, what the simulator prints for every command nvdeploy plans for each node (every registered
collector), and puts in front of each fake tool a ``#!/bin/sh`` wrapper that replays the recording: a ``case``
on the arguments, ``cat`` of the recorded output, ``sleep`` for the ``slow`` and ``hang`` faults, the recorded
exit status; a few milliseconds per call. Any other arguments still go to the simulator (arguments are
matched as ``"$*"``, joined by spaces: planned commands never differ only in where a space falls). The SSH
side stays real: sshd, one session per node, the batch script, ``timeout -k``.

Record again (:func:`replay_node`) after :meth:`SshCluster.set_scenario`: a recording does not follow the
scenario file.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import shutil
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Mapping, Optional

from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.sim.scenario import NodeScenario
from nvdeploy.sim.tools import run_tool
from nvdeploy.testing.sshd import FakeNode, SshCluster

_MARK = "# nvdeploy replayed tool (nvdeploy.testing.replay)"
HANG_S = 2147483647


def replay_key(args: Sequence[str]) -> str:
    """The file name stem of one recorded command's arguments."""
    text = "".join(f"{a}\n" for a in args)
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def planned_argvs(profile: Any, host_vars: Optional[Mapping[str, Any]] = None) -> list[tuple[str, ...]]:
    """The argv of every registered collector (light and heavy) for a node with ``profile`` and ``host_vars``."""
    import nvdeploy.checks  # noqa: F401 - importing the checks registers their collectors
    from nvdeploy.collect.catalog import COLLECTORS, specs_for

    names = list(COLLECTORS)
    specs = [*specs_for(names, host_vars or {}, heavy=False, profile=profile),
             *specs_for(names, host_vars or {}, heavy=True, profile=profile)]
    return list(dict.fromkeys(spec.argv for spec in specs))


def _case(args: Sequence[str], base: Path, out: Any) -> str:
    """One ``case`` branch replaying ``out`` (a ToolOutput) for these arguments."""
    steps = []
    if out.delay_s > 0:
        steps.append(f"sleep {out.delay_s:g}")
    if out.hang:
        steps.append(f"exec sleep {HANG_S}")
    else:
        if out.stdout:
            steps.append(f"cat {shlex.quote(str(base))}.out")
        if out.stderr:
            steps.append(f"cat {shlex.quote(str(base))}.err >&2")
        steps.append(f"exit {out.rc}")
    return f"  {shlex.quote(' '.join(args))}) {'; '.join(steps)} ;;"


def _wrapper(cases: list[str], fallback: str) -> str:
    body = fallback.split("\n", 1)[1] if fallback.startswith("#!") else fallback
    return "\n".join(["#!/bin/sh", _MARK, 'case "$*" in', *cases, "esac", _FALLBACK.rstrip("\n"),
                      body.rstrip("\n"), ""])


_FALLBACK = "# anything not recorded: the simulator\n"


def replay_node(node: FakeNode, scenario: NodeScenario, argvs: Iterable[Sequence[str]]) -> int:
    """Record what ``scenario`` prints for each argv whose tool is one of ``node``'s fake tools; install the
    replaying wrappers. Returns how many commands were recorded."""
    replay_dir = node.bin_dir.parent / "replay"
    shutil.rmtree(replay_dir, ignore_errors=True)
    replay_dir.mkdir(mode=0o755)
    replay_dir.chmod(0o755)
    recorded = 0
    cases: dict[str, list[str]] = {}
    seen: set[tuple[str, str]] = set()
    for argv in _with_inner_commands(argvs):
        tool = argv[0]
        if "/" in tool or not (node.bin_dir / tool).is_file() or (tool, " ".join(argv[1:])) in seen:
            continue
        seen.add((tool, " ".join(argv[1:])))
        out = run_tool(scenario, list(argv))
        base = replay_dir / f"{tool}.{replay_key(argv[1:])}"
        for suffix, data in ((".out", out.stdout), (".err", out.stderr)):
            if data:
                path = base.with_name(base.name + suffix)
                path.write_bytes(data)
                path.chmod(0o644)
        cases.setdefault(tool, []).append(_case(argv[1:], base, out))
        recorded += 1
    for tool, branches in sorted(cases.items()):
        wrapper = node.bin_dir / tool
        text = wrapper.read_text()
        if _MARK in text:  # recorded before: keep the original fallback
            text = text.split(_FALLBACK, 1)[1]
        wrapper.write_text(_wrapper(branches, text))
        wrapper.chmod(0o755)
    return recorded


def _with_inner_commands(argvs: Iterable[Sequence[str]]) -> Iterator[Sequence[str]]:
    """Each argv, and after a ``[env] sh -c SCRIPT`` collector the simple commands of its script (``a || exit $?;
    exec b``): the fake tools the script calls (dcgm_health's two dcgmi calls) are replayed too, not left to the
    Python simulator."""
    for argv in argvs:
        yield argv
        words = list(argv[1:]) if argv and argv[0] == "env" else list(argv)
        if len(words) < 3 or words[0] != "sh" or words[1] != "-c":
            continue
        for piece in re.split(r"\|\||&&|;|\n", words[2]):
            try:
                inner = shlex.split(piece)
            except ValueError:
                continue
            if inner[:1] == ["exec"]:
                inner = inner[1:]
            if inner and inner[0] not in ("exit", "return", ":") and "$" not in " ".join(inner):
                yield inner


def replay_cluster(cluster: SshCluster, catalog: Optional[ProfileCatalog] = None,
                   host_vars: Optional[Mapping[str, Mapping[str, Any]]] = None) -> int:
    """:func:`replay_node` for every node of ``cluster``, from its current scenario file, for the commands of
    every registered collector. ``host_vars``: per node name, the inventory vars that shape commands."""
    catalog = catalog or ProfileCatalog()
    total = 0
    for node in cluster.nodes:
        scenario = NodeScenario.from_json(node.scenario_file.read_text(), catalog)
        argvs = planned_argvs(scenario.profile, (host_vars or {}).get(node.name))
        total += replay_node(node, scenario, argvs)
    return total
