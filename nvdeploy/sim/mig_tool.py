"""MIG on stateful simulated nodes: ``nvidia-smi mig`` (``-lgip``, ``-lgi``, ``-lci``, ``-cgi LIST [-C]``, ``-cci``,
``-dci``, ``-dgi``, each with ``-i GPU[,GPU]``), the MIG mode change per GPU with its pending state, and the GPU reset
that activates it (``nvidia-smi -i N -r``).

What is modelled, and from where:

- Instance profiles per GPU model from NVIDIA's MIG User Guide ("Supported MIG Profiles"): A100-SXM4-40GB,
  A100-80GB, H100 80GB, H200 and B200 have the same geometry (7 compute slices, 8 memory slices), only the names'
  memory differs: profile 19 ``1g`` x7, 20 ``1g+me`` x1, 15 ``1g`` with two memory slices x4, 14 ``2g`` x3,
  9 ``3g`` x2, 5 ``4g`` x1, 0 ``7g`` x1. Other MIG-capable models get that geometry with names computed from their
  memory (illustrative, not from the guide).
- Placement: a GPU instance takes a run of memory slices at one of its profile's start positions (1g: 0-6, two
  slices: 0/2/4(/6), 3g: 4/0, 4g and 7g: 0: ``-lgipp`` of a real H100) and its compute slices; the first free
  start wins. A combination that
  does not fit is refused as the real tool refuses it: ``Unable to create a GPU instance on GPU 0 using profile
  9: Insufficient Resources`` (what was created before it stays). ``-C`` adds each new instance's full-size
  compute instance (CI profile 0/1/2/3/4 for 1g/2g/3g/4g/7g, as real ``-lci`` captures list them).
- The MIG mode (``-mig``): NVML's nvmlDeviceSetMigMode activates a change only when it can reset the GPU itself;
  on A100 (Ampere) the simulated node's nvidia-persistenced and DCGM hold the GPU, so the change stays *pending*
  until ``nvidia-smi -i N -r`` (or a reboot), as the MIG User Guide's A100 examples show; from Hopper on it takes
  effect at once. Disabling MIG on a GPU that still has instances is refused ("In use by another client").
- ``vm_passthrough``: the node is a VM with its GPUs passed through (``systemd-detect-virt --vm`` prints ``kvm``):
  a GPU reset is not exposed, a pending mode change needs a reboot of the VM (nvmlDeviceSetMigMode's note).
- Every change is root only (``Insufficient Permissions``, exit 4); the listings are not (the driver's MIG monitor
  capability is readable by every user by default). A GPU with compute processes (``gpu_busy``: GPU 0) refuses
  changes ("In use by another client"). A reset or reboot destroys every instance; the mode survives a reboot.
- ``mig_drift:<GPU>``: one GPU instance of that GPU (its last, with its compute instance) is destroyed out of band
  after every change nvdeploy makes there, as another MIG manager or a person would: the listings show one less.

State per GPU lives in :class:`nvdeploy.sim.state.NodeState` ``mig_gpus`` (kept across commands and runs).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Optional

from nvdeploy.sim import state as st
from nvdeploy.sim.scenario import NodeScenario, SimGpu, node_facts, register_fault
from nvdeploy.sim.tools import ToolOutput, register_tool

DRIFT_FAULT = re.compile(r"mig_drift:(\d{1,3})")
register_fault("mig_drift:<GPU>", "one MIG GPU instance of that GPU (its last) is destroyed out of band after every "
               "change nvdeploy makes there: nvidia-smi mig -lgi / -lci list one less", DRIFT_FAULT.pattern)
register_fault("vm_passthrough", "the node is a VM with passed-through GPUs (systemd-detect-virt: kvm): no GPU reset, "
               "a pending MIG mode change needs a reboot")

# profile id -> (compute slices, memory slices, how many fit, start positions, index into the memory names, suffix)
GEOMETRY: dict[int, tuple[int, int, int, tuple[int, ...], int, str]] = {
    19: (1, 1, 7, (0, 1, 2, 3, 4, 5, 6), 0, ""),
    20: (1, 1, 1, (0, 1, 2, 3, 4, 5, 6), 0, "+me"),
    15: (1, 2, 4, (0, 2, 4, 6), 1, ""),
    14: (2, 2, 3, (0, 2, 4), 1, ""),
    9: (3, 4, 2, (4, 0), 2, ""),  # the first 3g goes to 4:4 (real -lgi: tests/fixtures/real/nvidia-smi-mig)
    5: (4, 4, 1, (0,), 2, ""),
    0: (7, 8, 1, (0,), 3, ""),
}
# PCI device -> the memory (GB) of a GPU instance with 1, 2, 4 and 8 memory slices, from the guide's tables.
MEMORY_NAMES = {"20b0": (5, 10, 20, 40), "20b2": (10, 20, 40, 80), "20b5": (10, 20, 40, 80),
                "2330": (10, 20, 40, 80), "2331": (10, 20, 40, 80), "2335": (18, 35, 71, 141),
                "2901": (23, 45, 90, 180)}
CI_PROFILE = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}  # the full-size compute instance of a GPU instance of N slices
MEMORY_SLICES = 8
COMPUTE_SLICES = 7


def _names(gpu: SimGpu) -> tuple[int, ...]:
    known = MEMORY_NAMES.get(gpu.pci_device_id.lower())
    if known:
        return known
    total = gpu.memory_mib / 1024
    return tuple(max(1, round(total * n / MEMORY_SLICES)) for n in (1, 2, 4, 8))


def profile_name(gpu: SimGpu, profile_id: int) -> str:
    g, _, _, _, mem, suffix = GEOMETRY[profile_id]
    return f"{g}g.{_names(gpu)[mem]}gb{suffix}"


def _profile_id(gpu: SimGpu, word: str) -> Optional[int]:
    if word.isdigit():
        return int(word) if int(word) in GEOMETRY else None
    name = word[4:] if word.startswith("MIG ") else word
    return next((pid for pid in GEOMETRY if profile_name(gpu, pid) == name), None)


# ---------------------------------------------------------------------------------------------------------------
# State per GPU: {"current": bool, "pending": bool, "gis": [[gi id, profile id, start, size]], "cis": [[gi id, ci]]}


def gpu_state(state: st.NodeState, gpu: SimGpu) -> dict[str, Any]:
    found = state.mig_gpus.get(str(gpu.index))
    if found is not None:
        return found
    mode = gpu.mig_enabled if state.mig_enabled is None else state.mig_enabled
    return {"current": bool(mode and gpu.mig_capable), "pending": bool(mode and gpu.mig_capable), "gis": [],
            "cis": []}


def drift_gpus(scenario: NodeScenario) -> set[int]:
    return {int(m.group(1)) for f in scenario.faults if (m := DRIFT_FAULT.fullmatch(f))}


def _drifted(scenario: NodeScenario, gpu: SimGpu, entry: dict[str, Any]) -> None:
    """mig_drift: the GPU's last instance is destroyed out of band after a change nvdeploy made."""
    count = len(node_facts(scenario).gpus)
    if entry["gis"] and min(gpu.index, count - 1) in {min(i, count - 1) for i in drift_gpus(scenario)}:
        lost = entry["gis"].pop()
        entry["cis"] = [c for c in entry["cis"] if c[0] != lost[0]]


def _text(stdout: str = "", rc: int = 0) -> ToolOutput:
    return ToolOutput(stdout.encode(), b"", rc)


def _select(gpus: list[SimGpu], wanted: Optional[str]) -> Optional[list[SimGpu]]:
    if wanted is None:
        return gpus
    chosen = []
    for word in wanted.split(","):
        if not word.strip().isdigit() or int(word) >= len(gpus):
            return None
        chosen.append(gpus[int(word)])
    return chosen


def busy(state: st.NodeState, gpu: SimGpu) -> bool:
    return bool(state.gpu_processes) and gpu.index == 0  # gpu_busy: the processes run on GPU 0


# ---------------------------------------------------------------------------------------------------------------
# Listings


def _frame(title: str, header: list[str], rows: list[str], width: int) -> str:
    rule = "+" + "-" * width + "+"
    out = [rule, f"| {title:<{width - 1}}|"] + [f"|{h:<{width}}|" for h in header] + ["|" + "=" * width + "|"]
    for row in rows:
        out += [f"|{row:<{width}}|", rule]
    return "\n".join(out) + "\n"


def list_profiles(state: st.NodeState, gpus: list[SimGpu]) -> ToolOutput:
    rows = []
    for gpu in gpus:
        entry = gpu_state(state, gpu)
        if not entry["current"]:
            continue
        for pid in GEOMETRY:
            g, mem, total, _, _, suffix = GEOMETRY[pid]
            free = len(_free_starts(entry, pid)) if total > 1 else int(bool(_free_starts(entry, pid)))
            free = min(free, total - sum(1 for gi in entry["gis"] if gi[1] == pid))
            gib = round(gpu.memory_mib / 1024 * mem / MEMORY_SLICES * 0.97, 2)
            sm = (14 if gpu.architecture == "Ampere" else 16) * g
            name = "MIG " + profile_name(gpu, pid)
            rows.append(f"  {gpu.index:>2}  {name:<16} {pid:>2}     {max(free, 0)}/{total}        {gib:<9.2f}  No     "
                        f"{sm:>3}     {g - 1 if g > 1 else 0}     0   ")
            rows.append(" " * 61 + f"{g:>2}     {1 if suffix else 0}     {1 if suffix or g == 7 else 0}   ")
    if not rows:
        return _text("No MIG-enabled devices found.\n", rc=6)
    rule = "+" + "-" * 77 + "+"
    head = ["| GPU instance profiles:" + " " * 54 + "|",
            "| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |",
            "|                              Free/Total   GiB              CE    JPEG  OFA  |", "|" + "=" * 77 + "|"]
    body = []
    for first, second in zip(rows[0::2], rows[1::2]):
        body += [f"|{first:<77}|", f"|{second:<77}|", rule]
    return _text("\n".join([rule, *head, *body]) + "\n")


def list_instances(scenario: NodeScenario, state: st.NodeState, gpus: list[SimGpu]) -> ToolOutput:
    enabled = [g for g in gpus if gpu_state(state, g)["current"]]
    if not enabled:
        return _text("No MIG-enabled devices found.\n", rc=6)
    rows = []
    for gpu in enabled:
        for gi, pid, start, size in gpu_state(state, gpu)["gis"]:
            name = "MIG " + profile_name(gpu, pid)
            rows.append(f"  {gpu.index:>2}  {name:<16} {pid:>4}     {gi:>4}      {f'{start}:{size}':>5}     ")
    if not rows:
        return _text("No GPU instances found: Not Found\n", rc=6)
    return _text(_frame("GPU instances:", [" GPU   Name             Profile  Instance   Placement  ",
                                            "                           ID       ID       Start:Size "], rows, 58))


def list_compute(scenario: NodeScenario, state: st.NodeState, gpus: list[SimGpu]) -> ToolOutput:
    enabled = [g for g in gpus if gpu_state(state, g)["current"]]
    if not enabled:
        return _text("No MIG-enabled devices found.\n", rc=6)
    rows = []
    for gpu in enabled:
        entry = gpu_state(state, gpu)
        by_id = {gi[0]: gi for gi in entry["gis"]}
        for gi, ci in entry["cis"]:
            pid = by_id[gi][1]
            g = GEOMETRY[pid][0]
            name = "MIG " + profile_name(gpu, pid)
            rows.append(f"  {gpu.index:>2}     {gi:>2}       {name:<16} {CI_PROFILE[g]:>2}         {ci}          "
                        f"0:{g}     ")
    if not rows:
        return _text("No compute instances found: Not Found\n", rc=6)
    return _text(_frame("Compute instances:", [" GPU     GPU       Name             Profile   Instance   Placement  ",
                                                "       Instance                       ID        ID       Start:Size ",
                                                "         ID                                                         "],
                        rows, 68))


# ---------------------------------------------------------------------------------------------------------------
# Changes


def _free_starts(entry: dict[str, Any], pid: int) -> list[int]:
    g, size, _, starts, _, _ = GEOMETRY[pid]
    used = {s for _, _, start, n in entry["gis"] for s in range(start, start + n)}
    compute = sum(GEOMETRY[p][0] for _, p, _, _ in entry["gis"])
    if compute + g > COMPUTE_SLICES:
        return []
    return [s for s in starts if not used & set(range(s, s + size)) and s + size <= MEMORY_SLICES]


def _create(gpu: SimGpu, entry: dict[str, Any], words: list[str], with_ci: bool) -> tuple[list[str], Optional[str]]:
    lines: list[str] = []
    for word in words:
        pid = _profile_id(gpu, word.strip())
        if pid is None:
            return lines, (f"Unable to create a GPU instance on GPU {gpu.index:2d} using profile {word}: "
                           "Invalid Argument")
        limit = GEOMETRY[pid][2]
        starts = _free_starts(entry, pid)
        if not starts or sum(1 for gi in entry["gis"] if gi[1] == pid) >= limit:
            return lines, f"Unable to create a GPU instance on GPU {gpu.index:2d} using profile {pid}: " \
                          "Insufficient Resources"
        gi_id = next(i for i in range(1, 15) if i not in {gi[0] for gi in entry["gis"]})
        entry["gis"].append([gi_id, pid, starts[0], GEOMETRY[pid][1]])
        name = "MIG " + profile_name(gpu, pid)
        lines.append(f"Successfully created GPU instance ID {gi_id:2d} on GPU {gpu.index:2d} using profile {name} "
                     f"(ID {pid:2d})")
        if with_ci:
            entry["cis"].append([gi_id, 0])
            lines.append(f"Successfully created compute instance ID  0 on GPU {gpu.index:2d} GPU instance ID "
                         f"{gi_id:2d} using profile {name} (ID {CI_PROFILE[GEOMETRY[pid][0]]:2d})")
    return lines, None


def _options(args: Sequence[str]) -> Optional[dict[str, str]]:
    flags = {"-lgip": "lgip", "--list-gpu-instance-profiles": "lgip", "-lgi": "lgi", "--list-gpu-instances": "lgi",
             "-lci": "lci", "--list-compute-instances": "lci", "-dci": "dci", "--destroy-compute-instance": "dci",
             "-dgi": "dgi", "--destroy-gpu-instance": "dgi", "-C": "C", "--default-compute-instance": "C",
             "-cci": "cci", "--create-compute-instance": "cci"}
    valued = {"-i": "i", "--id": "i", "-gi": "gi", "--gpu-instance-id": "gi", "-ci": "ci",
              "--compute-instance-id": "ci", "-cgi": "cgi", "--create-gpu-instance": "cgi"}
    out: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in flags:
            out[flags[arg]] = "1"
        elif arg in valued and i + 1 < len(args):
            out[valued[arg]] = args[i + 1]
            i += 1
        else:
            return None
        i += 1
    return out


def mig_command(scenario: NodeScenario, args: Sequence[str], root: bool) -> tuple[ToolOutput, bool]:
    """``nvidia-smi mig ...``: (output, whether the node changed)."""
    opts = _options(args)
    actions = {"lgip", "lgi", "lci", "cgi", "cci", "dci", "dgi"} & set(opts or {})
    if opts is None or len(actions) != 1:
        return _text("Invalid combination of input arguments. Please run 'nvidia-smi mig -h' for help.\n", 2), False
    (action,) = actions
    state = st.current(scenario)
    all_gpus = list(node_facts(scenario).gpus)
    gpus = _select(all_gpus, opts.get("i"))
    if gpus is None:
        return _text(f"No GPU found with the given ID {opts.get('i')}.\n", 6), False
    if action == "lgip":
        return list_profiles(state, gpus), False
    if action == "lgi":
        return list_instances(scenario, state, gpus), False
    if action == "lci":
        return list_compute(scenario, state, gpus), False
    verb = {"cgi": "create a GPU instance", "cci": "create a compute instance", "dci": "destroy compute instances",
            "dgi": "destroy GPU instances"}[action]
    enabled = [g for g in gpus if gpu_state(state, g)["current"]]
    if not enabled:
        return _text("No MIG-enabled devices found.\n", 6), False
    if not root:
        return _text(f"Unable to {verb} on GPU {enabled[0].index:2d}: Insufficient Permissions\n", 4), False
    lines: list[str] = []
    problem: Optional[str] = None
    changed = False
    with st.mutate(scenario) as new:
        for gpu in enabled:
            entry = gpu_state(new, gpu)
            if busy(new, gpu):
                problem = f"Unable to {verb} on GPU {gpu.index:2d}: In use by another client"
                break
            if action == "cgi":
                made, problem = _create(gpu, entry, opts["cgi"].split(","), "C" in opts)
                lines += made
                changed = changed or bool(made)
            elif action == "cci":
                have = {c[0] for c in entry["cis"]}
                for gi in entry["gis"]:
                    if gi[0] not in have and (opts.get("gi") is None or str(gi[0]) == opts["gi"]):
                        entry["cis"].append([gi[0], 0])
                        changed = True
                        lines.append(f"Successfully created compute instance ID  0 on GPU {gpu.index:2d} GPU "
                                     f"instance ID {gi[0]:2d} using profile MIG {profile_name(gpu, gi[1])} "
                                     f"(ID {CI_PROFILE[GEOMETRY[gi[1]][0]]:2d})")
            elif action == "dci":
                keep = [c for c in entry["cis"] if opts.get("gi") is not None and str(c[0]) != opts["gi"]]
                for gi, ci in entry["cis"]:
                    if [gi, ci] not in keep:
                        lines.append(f"Successfully destroyed compute instance ID {ci:2d} from GPU {gpu.index:2d} "
                                     f"GPU instance ID {gi:2d}")
                changed = changed or len(keep) != len(entry["cis"])
                entry["cis"] = keep
            else:
                held = {c[0] for c in entry["cis"]}
                for gi in list(entry["gis"]):
                    if opts.get("gi") is not None and str(gi[0]) != opts["gi"]:
                        continue
                    if gi[0] in held:
                        problem = (f"Unable to destroy GPU instance ID {gi[0]:2d} from GPU {gpu.index:2d}: In use by "
                                   "another client")
                        break
                    entry["gis"].remove(gi)
                    changed = True
                    lines.append(f"Successfully destroyed GPU instance ID {gi[0]:2d} from GPU {gpu.index:2d}")
            if action == "cgi" and changed:
                _drifted(scenario, gpu, entry)
            new.mig_gpus[str(gpu.index)] = entry
            if problem:
                break
    if not lines and problem is None and action in ("dci", "dgi"):
        what = "compute" if action == "dci" else "GPU"
        return _text(f"No {what} instances found: Not Found\n", 6), False
    text = "".join(line + "\n" for line in lines)
    if problem:
        return _text(text + problem + "\n", 2 if "Resources" in problem or "Argument" in problem else 255), changed
    return _text(text), changed


def set_mode(scenario: NodeScenario, gpus: list[SimGpu], on: bool) -> tuple[list[str], Optional[str], bool]:
    """``nvidia-smi [-i N] -mig 0|1`` as root: (lines, error, changed)."""
    state = st.current(scenario)
    for gpu in gpus:
        entry = gpu_state(state, gpu)
        if not on and entry["gis"]:
            return [], f"Unable to disable MIG Mode for GPU {gpu.bus_id}: In use by another client", False
    lines = []
    changed = False
    with st.mutate(scenario) as new:
        for gpu in gpus:
            entry = gpu_state(new, gpu)
            if entry["pending"] != on or entry["current"] != on:
                changed = True
            entry["pending"] = on
            word = "Enabled" if on else "Disabled"
            if gpu.architecture == "Ampere" and entry["current"] != on:
                lines.append(f"Warning: MIG mode is in pending {'enable' if on else 'disable'} state for GPU "
                             f"{gpu.bus_id}:In use by another client")
                lines.append(f"{gpu.bus_id} is currently being used by one or more other processes (e.g. CUDA "
                             "application or a monitoring application such as another instance of nvidia-smi). "
                             "Please first kill all processes using the device and retry the command or reboot the "
                             "system to make MIG mode effective.")
            else:
                entry["current"] = on
                lines.append(f"{word} MIG Mode for GPU {gpu.bus_id}")
            new.mig_gpus[str(gpu.index)] = entry
    return lines, None, changed


def reset(scenario: NodeScenario, gpus: list[SimGpu]) -> tuple[str, int, bool]:
    """``nvidia-smi -i N -r`` as root: (output, rc, changed). A reset destroys the GPU's instances."""
    state = st.current(scenario)
    if scenario.has("vm_passthrough"):
        return (f"GPU Reset couldn't run because GPU {gpus[0].bus_id} does not support it in this environment.\n"
                "Terminating early due to previous errors.\n", 3, False)
    for gpu in gpus:
        if busy(state, gpu):
            return (f"GPU {gpu.bus_id} is currently in use by another process.\n\n1 device is currently being used "
                    "by one or more other processes (e.g., Fabric Manager, CUDA application, graphics application such "
                    "as an X server, or a monitoring application such as another instance of nvidia-smi). Please "
                    "first kill all processes using this device and all compute applications running in the system."
                    "\n", 255, False)
    with st.mutate(scenario) as new:
        for gpu in gpus:
            entry = gpu_state(new, gpu)
            entry.update(current=entry["pending"], gis=[], cis=[])
            new.mig_gpus[str(gpu.index)] = entry
    return "".join(f"GPU {g.bus_id} was successfully reset.\n" for g in gpus) + "All done.\n", 0, True


def at_boot(state: st.NodeState) -> None:
    """A reboot: every pending MIG mode becomes current; instances are gone."""
    for entry in state.mig_gpus.values():
        entry.update(current=entry["pending"], gis=[], cis=[])


def detect_virt(scenario: NodeScenario, args: Sequence[str]) -> ToolOutput:
    """``systemd-detect-virt [--vm]``: ``none`` and exit 1 on bare metal, as systemd's tool does."""
    if scenario.has("vm_passthrough"):
        return _text("kvm\n")
    return _text("none\n", 1)


register_tool("systemd-detect-virt")(detect_virt)
