"""nvidia-smi on stateful simulated nodes: the settings nvdeploy optimize changes, and the queries that read them.

``-pm``, ``-c``, ``-ac``, ``-rac``, ``-pl``, ``-mig``, ``-r`` (root only, like the real tool: ``Insufficient
Permissions``, exit 4), ``--query-compute-apps``, and ``--query-gpu`` with ``compute_mode``, ``clocks.applications.*``,
``clocks.default_applications.*``, ``clocks.max.*``, ``power.*``. A setting applies to every GPU of the node
(``-i`` is accepted and ignored), but for ``-mig`` and ``-r`` (the GPUs ``-i`` names: per-GPU MIG mode and reset)
and the ``nvidia-smi mig`` subcommand, both in nvdeploy/sim/mig_tool.py. Everything else nvidia-smi prints comes
from nvdeploy/sim/tools.py, fed the facts the state implies (scenario.FACT_FILTERS).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Optional

from nvdeploy.sim import mig_tool
from nvdeploy.sim import state as st
from nvdeploy.sim.scenario import NodeScenario, node_facts
from nvdeploy.sim.systools import STATE_TOOLS, _not_found, _root, _text
from nvdeploy.sim.tools import ToolOutput

COMPUTE_MODES = {"0": "Default", "DEFAULT": "Default", "2": "Prohibited", "PROHIBITED": "Prohibited",
                 "3": "Exclusive_Process", "EXCLUSIVE_PROCESS": "Exclusive_Process"}


_SMI_SETTINGS = {"-pm": "pm", "--persistence-mode": "pm", "-c": "c", "--compute-mode": "c", "-ac": "ac",
                 "--applications-clocks": "ac", "-pl": "pl", "--power-limit": "pl", "-mig": "mig",
                 "--multi-instance-gpu": "mig"}
_SMI_FLAGS = {"-rac": "rac", "--reset-applications-clocks": "rac", "-r": "r", "--gpu-reset": "r"}
STATE_FIELDS = {
    "compute_mode", "clocks.applications.graphics", "clocks.applications.gr", "clocks.applications.memory",
    "clocks.applications.mem", "clocks.default_applications.graphics", "clocks.default_applications.gr",
    "clocks.default_applications.memory", "clocks.default_applications.mem", "clocks.max.graphics", "clocks.max.gr",
    "clocks.max.memory", "clocks.max.mem", "power.limit", "power.default_limit", "power.min_limit",
    "power.max_limit", "enforced.power.limit", "mig.mode.pending",
}


def _parse_smi(args: Sequence[str]) -> Optional[dict[str, str]]:
    """The settings/queries this module handles: {'pm': '1', 'i': '0', 'query': ..., 'format': ...}; None if not."""
    parsed: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        key, _, inline = arg.partition("=")
        if key in _SMI_SETTINGS or key in ("-i", "--id"):
            value = inline if inline else (args[i + 1] if i + 1 < len(args) else "")
            parsed[_SMI_SETTINGS.get(key, "i")] = value
            i += 1 if inline else 2
            continue
        if arg in _SMI_FLAGS:
            parsed[_SMI_FLAGS[arg]] = "1"
        elif key in ("--query-gpu", "--query-compute-apps", "--format"):
            parsed[key.lstrip("-")] = inline if inline else (args[i + 1] if i + 1 < len(args) else "")
            if not inline:
                i += 1
        else:
            return None
        i += 1
    settings = {"pm", "c", "ac", "pl", "mig", "rac", "r"} & set(parsed)
    if settings or "query-compute-apps" in parsed:
        return parsed
    query = parsed.get("query-gpu")
    if query and {f.strip().lower() for f in query.split(",")} & STATE_FIELDS:
        parsed["state_query"] = "1"
        return parsed
    return None


def _gpus(scenario: NodeScenario) -> list:
    return list(node_facts(scenario).gpus)


def _default_clocks(gpu: object) -> tuple[int, int]:
    from nvdeploy.sim.smi_xml import _clocks

    graphics, _, mem, _ = _clocks(gpu)  # type: ignore[arg-type]
    return mem, graphics


def _power_range(scenario: NodeScenario) -> tuple[Optional[float], Optional[float]]:
    default = st.default_power(scenario)
    if default is None:
        return None, None
    return (200.0 if default >= 500 else 100.0), default


def _field(scenario: NodeScenario, state: st.NodeState, gpu: object, name: str, units: bool) -> str:
    from nvdeploy.sim.smi_xml import _FIELDS  # the fields the validate collectors read

    name = name.strip().lower()
    mem, graphics = _default_clocks(gpu)
    app = state.app_clocks or [mem, graphics]
    low, high = _power_range(scenario)
    limit = state.power_limit_w if state.power_limit_w is not None else high

    def mhz(value: int) -> str:
        return f"{value} MHz" if units else str(value)

    def watts(value: Optional[float]) -> str:
        if value is None:
            return "[N/A]"
        return f"{value:.2f} W" if units else f"{value:.2f}"

    table = {
        "compute_mode": lambda: state.compute_mode,
        "clocks.applications.graphics": lambda: mhz(app[1]), "clocks.applications.gr": lambda: mhz(app[1]),
        "clocks.applications.memory": lambda: mhz(app[0]), "clocks.applications.mem": lambda: mhz(app[0]),
        "clocks.default_applications.graphics": lambda: mhz(graphics),
        "clocks.default_applications.gr": lambda: mhz(graphics),
        "clocks.default_applications.memory": lambda: mhz(mem), "clocks.default_applications.mem": lambda: mhz(mem),
        "clocks.max.graphics": lambda: mhz(graphics), "clocks.max.gr": lambda: mhz(graphics),
        "clocks.max.memory": lambda: mhz(mem), "clocks.max.mem": lambda: mhz(mem),
        "power.limit": lambda: watts(limit), "enforced.power.limit": lambda: watts(limit),
        "power.default_limit": lambda: watts(high), "power.min_limit": lambda: watts(low),
        "power.max_limit": lambda: watts(high),
        "mig.mode.pending": lambda: ("Enabled" if (gpu.mig_enabled if gpu.mig_pending is None  # type: ignore
                                                   else gpu.mig_pending) else "Disabled")
        if gpu.mig_capable else "[N/A]",  # type: ignore[attr-defined]
    }
    if name in table:
        return table[name]()
    if name in _FIELDS:
        _, unit, value = _FIELDS[name]
        text = value(node_facts(scenario), gpu)  # type: ignore[arg-type]
        return f"{text} {unit}" if unit and units and not text.startswith("[") else text
    raise KeyError(name)


def _header(name: str, units: bool) -> str:
    from nvdeploy.sim.smi_xml import _ALIASES, _FIELDS

    name = name.strip().lower()
    key = _ALIASES.get(name, name)
    if key in _FIELDS:
        header, unit, _ = _FIELDS[key]
    else:
        header = name
        unit = "MHz" if name.startswith("clocks.") else "W" if "power" in name else ""
    return f"{header} [{unit}]" if unit and units else header


def nvidia_smi(scenario: NodeScenario, args: Sequence[str]) -> Optional[tuple[ToolOutput, bool]]:
    """(output, changed) when this module answers the call; None for the normal nvidia-smi."""
    if args[:1] == ["mig"]:
        return _mig(scenario, args[1:])
    parsed = _parse_smi(args)
    involved = st.involved(scenario)
    if parsed is not None and "state_query" in parsed and not involved:
        from nvdeploy.sim.smi_xml import _FIELDS

        if all(f.strip().lower() in _FIELDS for f in parsed["query-gpu"].split(",") if f.strip()):
            parsed = None  # fields the normal nvidia-smi knows, on a node nothing changed: leave it the answer
    if parsed is None and not involved:
        return None
    state = st.current(scenario)
    status = st.driver_status(scenario, state)
    if status == "missing":
        return _not_found("nvidia-smi"), False
    if status == "mismatch":
        return _text("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: "
                     f"{'.'.join(state.installed_driver.split('.')[:2])}\n", rc=18), False  # type: ignore[union-attr]
    if parsed is None:
        return None  # the normal nvidia-smi, fed the facts as the state says (scenario.FACT_FILTERS)
    if status != "ok":
        return None  # the driver is not loaded: the normal nvidia-smi prints exactly that
    gpus = _gpus(scenario)
    if "query-compute-apps" in parsed:
        noheader = "noheader" in parsed.get("format", "")
        rows = [] if noheader else ["pid, process_name, used_gpu_memory [MiB]"]
        rows += [f"{41230 + n}, python3, 30512 MiB" for n in range(state.gpu_processes)]
        return _text("".join(r + "\n" for r in rows)), False
    if "query-gpu" in parsed:
        options = [o.strip() for o in parsed.get("format", "").split(",")]
        fields = [f for f in parsed["query-gpu"].split(",") if f.strip()]
        try:
            lines = [] if "noheader" in options else [", ".join(_header(f, "nounits" not in options) for f in fields)]
            lines += [", ".join(_field(scenario, state, g, f, "nounits" not in options) for f in fields) for g in gpus]
        except KeyError as exc:
            return _text(f'Field "{exc.args[0]}" is not a valid field to query.\n\n', rc=2), False
        return _text("".join(line + "\n" for line in lines)), False
    if not _root():
        names = {"pm": "persistence mode", "c": "compute mode", "ac": "applications clocks",
                 "rac": "applications clocks", "pl": "power limit", "mig": "MIG mode", "r": "GPU reset"}
        what = names[next(k for k in names if k in parsed)]
        return _text(f"Unable to set {what} for GPU {gpus[0].bus_id}: Insufficient Permissions\n"
                     "Terminating early due to previous errors.\n", rc=4), False
    return _smi_set(scenario, state, gpus, parsed)


STATE_TOOLS["nvidia-smi"] = nvidia_smi


def _mig(scenario: NodeScenario, args: Sequence[str]) -> tuple[ToolOutput, bool]:
    """``nvidia-smi mig ...`` (nvdeploy/sim/mig_tool.py), once the driver answers at all."""
    state = st.current(scenario)
    status = st.driver_status(scenario, state)
    if status == "missing":
        return _not_found("nvidia-smi"), False
    if status == "mismatch":
        return _text("Failed to initialize NVML: Driver/library version mismatch\n", rc=18), False
    if status != "ok" or not node_facts(scenario).driver_loaded:
        from nvdeploy.sim.tools import DRIVER_MISSING_MESSAGE

        return _text(DRIVER_MISSING_MESSAGE, rc=9), False
    return mig_tool.mig_command(scenario, args, _root())


def _chosen(gpus: list, parsed: dict[str, str]) -> Optional[list]:
    if "i" not in parsed:
        return gpus
    words = parsed["i"].split(",")
    if not all(w.strip().isdigit() and int(w) < len(gpus) for w in words):
        return None
    return [gpus[int(w)] for w in words]


def _smi_set(scenario: NodeScenario, state: st.NodeState, gpus: list,
             parsed: dict[str, str]) -> tuple[ToolOutput, bool]:
    lines: list[str] = []
    new = state.copy()
    if "pm" in parsed:
        if parsed["pm"] not in ("0", "1", "ENABLED", "DISABLED"):
            return _text("Invalid persistence mode value.\n", rc=2), False
        on = parsed["pm"] in ("1", "ENABLED")
        new.persistence_pm = on
        lines += [f"{'Enabled' if on else 'Disabled'} persistence mode for GPU {g.bus_id}." for g in gpus]
        if not on and st.persistence_on(new):
            lines.append("Warning: persistence mode is still enabled by nvidia-persistenced.")
    if "c" in parsed:
        mode = COMPUTE_MODES.get(parsed["c"].upper())
        if mode is None:
            return _text(f'Invalid compute mode "{parsed["c"]}".\n', rc=2), False
        new.compute_mode = mode
        lines += [f"Set compute mode to {mode.upper()} for GPU {g.bus_id}." for g in gpus]
    if "rac" in parsed:
        new.app_clocks = None
        lines += [f"All applications clocks reset to default for GPU {g.bus_id}." for g in gpus]
    if "ac" in parsed:
        match = re.fullmatch(r"(\d+),(\d+)", parsed["ac"])
        mem, graphics = _default_clocks(gpus[0]) if gpus else (0, 0)
        if not match or int(match.group(1)) != mem or not 345 <= int(match.group(2)) <= graphics:
            return _text(f'Specified clock combination "(MEM {parsed["ac"]})" is not supported for GPU '
                         f"{gpus[0].bus_id}. Run 'nvidia-smi -q -d SUPPORTED_CLOCKS' to see list of supported clock "
                         "combinations\nTerminating early due to previous errors.\n", rc=2), False
        new.app_clocks = [int(match.group(1)), int(match.group(2))]
        lines += [f'Applications clocks set to "(MEM {match.group(1)}, SM {match.group(2)})" for GPU {g.bus_id}'
                  for g in gpus]
    if "pl" in parsed:
        low, high = _power_range(scenario)
        try:
            watts = float(parsed["pl"])
        except ValueError:
            return _text(f'Invalid power limit "{parsed["pl"]}".\n', rc=2), False
        if low is None or high is None or not low <= watts <= high:
            return _text(f"Provided power limit {watts:.2f} W is not a valid power limit which should be between "
                         f"{low or 0:.2f} W and {high or 0:.2f} W for GPU {gpus[0].bus_id}\nTerminating early due to "
                         "previous errors.\n", rc=2), False
        before = state.power_limit_w if state.power_limit_w is not None else high
        new.power_limit_w = None if watts == high else watts
        lines += [f"Power limit for GPU {g.bus_id} was set to {watts:.2f} W from {before:.2f} W." for g in gpus]
    chosen = _chosen(gpus, parsed)
    if chosen is None:
        return _text(f"No GPU found with the given ID {parsed['i']}.\n", rc=6), False
    mig_changed = False
    if "mig" in parsed:
        if parsed["mig"] not in ("0", "1"):
            return _text("Invalid MIG mode value.\n", rc=2), False
        if chosen and not chosen[0].mig_capable:
            return _text(f"Unable to enable MIG Mode for GPU {chosen[0].bus_id}: Not Supported\n", rc=3), False
        if any(mig_tool.busy(state, g) for g in chosen):
            return _text(f"Unable to enable MIG Mode for GPU {chosen[0].bus_id}: In use by another client\n",
                         rc=255), False
        on = parsed["mig"] == "1"
        if "i" not in parsed:
            new.mig_enabled = on
        done, problem, mig_changed = mig_tool.set_mode(scenario, chosen, on)
        if problem:
            return _text(problem + "\n", rc=255), False
        lines += done
    if "r" in parsed:
        text, rc, reset = mig_tool.reset(scenario, chosen)
        return _text(text, rc=rc), reset
    mutated = new.to_json() != state.to_json() or mig_changed
    if mutated:
        with st.mutate(scenario) as changed:
            for key in ("persistence_pm", "compute_mode", "app_clocks", "power_limit_w", "mig_enabled"):
                setattr(changed, key, getattr(new, key))
    return _text("".join(line + "\n" for line in lines) + "All done.\n"), mutated


