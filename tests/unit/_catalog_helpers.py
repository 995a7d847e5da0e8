"""Helpers for the catalog check tests: run a check on raw outputs, from the simulator or from text."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable, Mapping, Optional, Union

from nvdeploy.checks import CHECKS, NodeContext
from nvdeploy.collect.catalog import specs_for
from nvdeploy.config.profiles import Profile, ProfileCatalog
from nvdeploy.parsers.facts import node_facts
from nvdeploy.results import CommandResult, ErrorReason, Finding, Verdict
from nvdeploy.sim.scenario import NodeScenario
from nvdeploy.sim.tools import run_tool

CATALOG = ProfileCatalog()


def result(name: str, stdout: str = "", rc: Optional[int] = 0, stderr: str = "", command: str = "",
           **kwargs: Any) -> CommandResult:
    return CommandResult(name=name, command=command or name, rc=rc, stdout=stdout.encode(), stderr=stderr.encode(),
                         **kwargs)


def timed_out(name: str) -> CommandResult:
    return CommandResult(name=name, command=name, rc=None, timed_out=True, error=ErrorReason.TIMEOUT,
                         error_detail="timed out after 5 s")


def sim_results(scenario: NodeScenario, collectors: Iterable[str],
                host_vars: Optional[Mapping[str, Any]] = None) -> dict[str, CommandResult]:
    """Run the collectors' real command lines against a simulated node (as the sim transport would)."""
    names = list(collectors)
    host_vars = dict(host_vars or {})
    out: dict[str, CommandResult] = {}
    for heavy in (False, True):
        for spec in specs_for(names, host_vars, heavy=heavy, profile=scenario.profile):
            tool = run_tool(scenario, spec.argv)
            if tool.hang:
                out[spec.name] = timed_out(spec.name)
                continue
            out[spec.name] = CommandResult(name=spec.name, command=spec.display, rc=tool.rc, stdout=tool.stdout,
                                           stderr=tool.stderr)
    return out


def profile_with(name: str, **sections: Any) -> Profile:
    """A built-in profile with some catalog sections (nvlink, pcie, nccl, ib, throttle, mig) replaced."""
    base = CATALOG.get(name)
    extra = dict(base.extra)
    for key, value in sections.items():
        if value is None:
            extra.pop(key, None)
        else:
            extra[key] = value
    return replace(base, extra=extra)


def context(results: Mapping[str, CommandResult], profile: Union[str, Profile] = "h100-sxm-8x",
            host_vars: Optional[Mapping[str, Any]] = None, node: str = "node01") -> NodeContext:
    chosen = CATALOG.get(profile) if isinstance(profile, str) else profile
    return NodeContext(node, dict(host_vars or {}), chosen, dict(results), node_facts(results),
                       {name: f"evidence/{node}/{name}.out" for name in results})


def run_check(check_id: str, ctx: NodeContext) -> list[Finding]:
    return CHECKS[check_id](ctx)


def sim_check(check_id: str, *faults: str, profile: Union[str, Profile] = "h100-sxm-8x", sku: Optional[str] = None,
              host_vars: Optional[Mapping[str, Any]] = None) -> list[Finding]:
    """Run one check on a simulated node with ``faults`` (its collectors plus nvidia-smi for the GPU facts);
    the node's hardware is ``sku`` (default: the profile's own, a built-in one when ``profile`` was edited)."""
    chosen = CATALOG.get(profile) if isinstance(profile, str) else profile
    hardware = CATALOG.get(sku) if sku else CATALOG.get(chosen.name)
    scenario = NodeScenario("node01", chosen, tuple(faults), hardware)
    collectors = list(CHECKS[check_id].collectors) + ["nvidia_smi_xml"]
    results = sim_results(scenario, collectors, host_vars)
    return run_check(check_id, context(results, chosen, host_vars))


def verdicts(findings: Iterable[Finding]) -> list[Verdict]:
    return [f.verdict for f in findings]


def worst(findings: Iterable[Finding]) -> Verdict:
    return Verdict.worst(f.verdict for f in findings)
