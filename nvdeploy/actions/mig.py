"""The MIG layout (optimize): every GPU partitioned as a mig-parted layout says, as the GPU Operator's MIG manager does.

``gpu.mig_layout`` reads the layout the host var ``mig_config`` names (from ``mig_config_file``, a mig-parted config
on the controller; nvdeploy/config/mig_config.py) and, per GPU the layout selects:

1. probe: MIG mode current and pending (``--query-gpu``), GPU instances (``nvidia-smi mig -lgi``) and compute
   instances (``-lci``), compute processes; one item per GPU (``GPU3 MIG: Enabled, 1g.10gb x7``), so a dry-run
   shows the change per GPU and a second run finds nothing to do;
2. refused on a busy node (compute processes run: named), as the MIG manager waits for an idle node: a
   reconfiguration destroys the instances jobs run in;
3. per GPU that differs: ``nvidia-smi mig -i N -dci`` and ``-dgi`` (only where instances exist), the MIG mode
   (``nvidia-smi -i N -mig 1|0``) followed by a GPU reset (``nvidia-smi -i N -r``), with the node's own GPU clients
   (nvidia-persistenced, DCGM) stopped around it as the MIG manager's hooks do, that activates a change the driver
   left pending (NVML activates one only where it can reset the GPU itself; A100 with nvidia-persistenced running
   cannot): a dry-run must say what runs, so every mode change is followed by its reset. In a VM with
   passed-through GPUs (``systemd-detect-virt --vm``) no reset is exposed (nvmlDeviceSetMigMode's note): the change
   needs a reboot, refused without ``--allow-reboot`` before anything changes;
4. ``nvidia-smi mig -i N -cgi <profiles> -C``: the GPU instances, largest first (so that the first free placement
   leaves room for the rest), each with its full-size compute instance;
5. verify: the probe again; a GPU whose instances still differ FAILs the step, named.

GPUs the layout does not select are left as they are.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from nvdeploy.actions.base import (
    ACTIONS,
    Action,
    ActionContext,
    Cmd,
    Param,
    Probe,
    StepFailed,
    describe_failure,
    literal,
    register,
)
from nvdeploy.config.mig_config import MigEntry, MigLayout, host_layout
from nvdeploy.config.yamlfile import ConfigError
from nvdeploy.parsers.compute_apps import parse_compute_apps
from nvdeploy.parsers.mig import MigFacts, parse_mig
from nvdeploy.results import CommandResult, ErrorReason

MODE_QUERY = ("mig_mode", ("nvidia-smi", "--query-gpu=index,pci.device_id,mig.mode.current,mig.mode.pending",
                           "--format=csv,noheader"))
LGI = ("mig_lgi", ("nvidia-smi", "mig", "-lgi"))
LCI = ("mig_lci", ("nvidia-smi", "mig", "-lci"))
APPS = ("compute_apps", ("nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"))
VIRT = ("virt", ("systemd-detect-virt", "--vm"))
# The node's own GPU clients that hold a GPU open and keep a reset from running; mig-parted's MIG manager stops
# such services around a mode change and starts them again (its hooks).
GPU_CLIENTS = ("nvidia-persistenced", "nvidia-dcgm")
CLIENTS = ("gpu_clients", ("systemctl", "is-active", *GPU_CLIENTS))
RESET_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class GpuMig:
    """One GPU as found: MIG mode now and after the next reset, its MIG devices (compute instances, by the name
    ``-lci`` gives them: ``1g.10gb`` for a GPU instance's full one, ``1c.3g.40gb`` for a slice), its GPU instances
    without a compute instance (no CUDA device: unusable)."""

    index: int
    device_id: str
    current: Optional[bool]  # None: the GPU has no MIG
    pending: Optional[bool]
    profiles: tuple[str, ...] = ()
    bare: tuple[str, ...] = ()
    gis: int = 0

    @property
    def cis(self) -> int:
        return len(self.profiles)


def _mode(text: str) -> Optional[bool]:
    return {"Enabled": True, "Disabled": False}.get(text.strip())


def read_modes(result: CommandResult) -> list[tuple[int, str, Optional[bool], Optional[bool]]]:
    if result.rc != 0:
        raise StepFailed(f"nvidia-smi cannot report the MIG mode: {describe_failure(result)}", result)
    rows = []
    for line in result.text.splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) == 4 and values[0].isdigit():
            rows.append((int(values[0]), values[1], _mode(values[2]), _mode(values[3])))
    if not rows:
        raise StepFailed("nvidia-smi listed no GPU", result)
    return rows


def _listing(result: CommandResult, what: str) -> MigFacts:
    facts = parse_mig(result.text + "\n" + result.err_text)
    if result.rc == 0 or facts.message and facts.message.startswith(("No MIG-enabled", "No GPU instance",
                                                                      "No compute instance")):
        return facts
    raise StepFailed(f"nvidia-smi mig {what} failed: {describe_failure(result)}", result)


def gpu_view(modes: list[tuple[int, str, Optional[bool], Optional[bool]]], gis: MigFacts,
             cis: MigFacts) -> list[GpuMig]:
    out = []
    for index, device, current, pending in modes:
        mine = [i for i in gis.instances if i.gpu == index]
        devices = [c for c in cis.compute_instances if c.gpu == index]
        with_ci = {c.gpu_instance_id for c in devices}
        out.append(GpuMig(index, device, current, pending, tuple(sorted(c.name.removeprefix("MIG ") for c in devices)),
                          tuple(sorted(i.name.removeprefix("MIG ") for i in mine if i.instance_id not in with_ci)),
                          len(mine)))
    return out


def counts_text(profiles: Any) -> str:
    """``{"1g.10gb": 7}`` or a list of names -> ``1g.10gb x7`` (largest profile first), ``no instances``."""
    counted = Counter(profiles) if not isinstance(profiles, Mapping) else Counter(dict(profiles))
    if not counted:
        return "no instances"
    return ", ".join(f"{name} x{n}" for name, n in sorted(counted.items(), key=lambda kv: (-_size(kv[0]), kv[0])))


def _size(name: str) -> int:
    return int(name.split("g", 1)[0]) if name[:1].isdigit() else 0


def describe_found(gpu: GpuMig) -> str:
    if gpu.current is None:
        return "not supported"
    text = "Enabled, " + counts_text(gpu.profiles) if gpu.current else "Disabled"
    if gpu.bare:
        text += f" (and GPU instances without a compute instance: {counts_text(gpu.bare)})"
    if gpu.pending is not None and gpu.pending != gpu.current:
        text += f" (pending {'Enabled' if gpu.pending else 'Disabled'})"
    return text


def describe_wanted(entry: MigEntry) -> str:
    return "Enabled, " + counts_text(dict(entry.instances)) if entry.enabled else "Disabled"


def creation_order(entry: MigEntry) -> list[str]:
    """The profiles to create, largest first (first-fit placement leaves room for the smaller ones)."""
    names = [name for name, n in entry.instances for _ in range(n)]
    return sorted(names, key=lambda n: (-_size(n), names.index(n)))


@register
class MigLayoutAction(Action):
    """Every GPU the MIG layout ``layout`` (the host var ``mig_config``: a name of the mig-parted config in
    ``mig_config_file``, or all-disabled / all-enabled) selects gets its MIG mode and GPU instances (each with its
    full compute instance), only on an idle node; a mode change is followed by a GPU reset (a reboot in a VM,
    only with --allow-reboot). Nothing happens where the GPUs already are as the layout says."""

    name = "gpu.mig_layout"
    params = (Param("layout", required=True, pattern=r"[A-Za-z0-9][A-Za-z0-9._+-]*",
                    doc="a layout name of mig_config_file (mig_config)"),)

    def _layout(self, ctx: ActionContext, p: Mapping[str, Any]) -> MigLayout:
        try:
            layout = host_layout({**ctx.host.vars, "mig_config": p["layout"]}, ctx.host.file)
        except ConfigError as exc:
            raise StepFailed(f"MIG layout: {exc}") from None
        if layout is None:
            raise StepFailed("no MIG layout named")
        return layout

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        layout = self._layout(ctx, p)
        modes_r, lgi_r, lci_r, apps_r = ctx.read_many([MODE_QUERY, LGI, LCI, APPS])
        modes = read_modes(modes_r)
        gis, cis = _listing(lgi_r, "-lgi"), _listing(lci_r, "-lci")
        if any("Insufficient Permissions" in (f.message or "") for f in (gis, cis)):
            lgi_r, lci_r = ctx.read_many([LGI, LCI], sudo=True)
            gis, cis = _listing(lgi_r, "-lgi"), _listing(lci_r, "-lci")
        gpus = gpu_view(modes, gis, cis)
        current: dict[str, str] = {}
        desired: dict[str, str] = {}
        plans: dict[int, MigEntry] = {}
        for gpu in gpus:
            entry = layout.for_gpu(gpu.index, gpu.device_id)
            if entry is None:
                continue
            item = f"GPU{gpu.index} MIG"
            current[item] = describe_found(gpu)
            if gpu.current is None:
                if entry.enabled:
                    return Probe(failure=f"GPU{gpu.index} does not support MIG but layout {layout.source} "
                                 "enables it")
                continue
            desired[item] = literal(describe_wanted(entry))
            if current[item] != describe_wanted(entry):
                plans[gpu.index] = entry
        if not current:
            return Probe(skip=f"layout {layout.source} selects no GPU of this node")
        facts: dict[str, Any] = {"plans": plans, "gpus": {g.index: g for g in gpus}, "layout": layout.source}
        probe = Probe(current=current, desired=desired, facts=facts, note=f"layout {layout.source}")
        if not plans:
            return probe
        apps = parse_compute_apps(apps_r.text) if apps_r.rc == 0 else None
        if apps is None or apps.busy:
            shown = ", ".join(proc.label() for proc in apps.processes[:4]) if apps else \
                f"the compute process list could not be read ({describe_failure(apps_r)})"
            more = f" and {len(apps.processes) - 4} more" if apps and len(apps.processes) > 4 else ""
            return Probe(current=current, desired=desired,
                         failure=f"the node is busy: GPU compute processes run ({shown}{more}); a MIG layout change "
                         "destroys the instances they run in: drain the node first", reason=ErrorReason.BUSY)
        switching = [i for i, entry in plans.items() if facts["gpus"][i].current != entry.enabled
                     or facts["gpus"][i].pending != entry.enabled]
        facts["switching"] = switching
        facts["reboot"] = False
        if switching:
            virt = ctx.read(*VIRT)
            vm = virt.rc == 0 and virt.text.strip() not in ("", "none")
            if vm:
                why = (f"the MIG mode change of GPU {', '.join(map(str, switching))} needs a reboot: this node is a "
                       f"VM ({virt.text.strip()}) whose GPUs cannot be reset")
                if not ctx.allow_reboot:
                    return Probe(current=current, desired=desired, reason=ErrorReason.REBOOT_REQUIRED,
                                 failure=f"{why}; rerun with --allow-reboot (or set allow_reboot: true for the host)")
                facts["reboot"] = True
            else:
                states = ctx.read(*CLIENTS).text.splitlines()
                facts["clients"] = [unit for unit, word in zip(GPU_CLIENTS, states) if word.strip() == "active"]
        return probe

    def plan(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> list[Cmd]:
        plans: dict[int, MigEntry] = probe.facts["plans"]
        gpus: dict[int, GpuMig] = probe.facts["gpus"]
        cmds: list[Cmd] = []
        for index in sorted(plans):
            gpu = gpus[index]
            if gpu.cis:
                cmds.append(Cmd(f"gpu{index}_dci", ("nvidia-smi", "mig", "-i", str(index), "-dci"), timeout_s=120))
            if gpu.gis:
                cmds.append(Cmd(f"gpu{index}_dgi", ("nvidia-smi", "mig", "-i", str(index), "-dgi"), timeout_s=120))
        switching = probe.facts.get("switching", [])
        clients = probe.facts.get("clients", [])
        if switching and clients:
            cmds.append(Cmd("stop_gpu_clients", ("systemctl", "stop", *clients), timeout_s=120))
        for on in (True, False):
            chosen = [i for i in switching if plans[i].enabled is on]
            if chosen:
                ids = ",".join(map(str, chosen))
                cmds.append(Cmd(f"mig_{'on' if on else 'off'}", ("nvidia-smi", "-i", ids, "-mig", "1" if on else "0"),
                                timeout_s=120))
        if switching:
            ids = ",".join(map(str, sorted(switching)))
            if probe.facts.get("reboot"):
                cmds.append(Cmd("reboot", ("reboot",), timeout_s=60))
            else:
                cmds.append(Cmd("reset", ("nvidia-smi", "-i", ids, "-r"), timeout_s=RESET_TIMEOUT_S))
                if clients:
                    cmds.append(Cmd("start_gpu_clients", ("systemctl", "start", *clients), timeout_s=120))
        for index in sorted(plans):
            order = creation_order(plans[index])
            if order:
                cmds.append(Cmd(f"gpu{index}_cgi", ("nvidia-smi", "mig", "-i", str(index), "-cgi", ",".join(order),
                                                    "-C"), timeout_s=120))
        return cmds

    def apply(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> None:
        cmds = self.plan(ctx, p, probe)
        restart = next((c for c in cmds if c.name == "start_gpu_clients"), None)
        try:
            self._run(ctx, cmds, probe)
        except StepFailed:
            stopped = any(r.name.endswith("stop_gpu_clients") for r in ctx.records)
            started = any(r.name.endswith("start_gpu_clients") for r in ctx.records)
            if restart is not None and stopped and not started:  # never leave the node without its daemons
                ctx.execute(restart.name, restart.argv, sudo=True, mutates=True, timeout_s=restart.timeout_s)
            raise

    def _run(self, ctx: ActionContext, cmds: list[Cmd], probe: Probe) -> None:
        for cmd in cmds:
            if cmd.name == "reboot":
                reboot = ACTIONS["node.reboot"]
                defaults = {param.name: param.default for param in reboot.params}
                timeout = ctx.host.vars.get("reboot_timeout")
                reboot.apply(ctx, {**defaults, **({"timeout_s": float(timeout)} if timeout else {})}, probe)
                continue
            ctx.run_cmd(cmd)

    def verify(self, ctx: ActionContext, p: Mapping[str, Any], before: Probe) -> Probe:
        after = self.probe(ctx, p)
        if after.reason is ErrorReason.BUSY:  # a job that started meanwhile does not make the layout wrong
            return Probe(current=after.current, desired=after.desired)
        return after
