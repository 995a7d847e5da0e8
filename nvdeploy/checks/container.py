"""The NVIDIA container toolkit: it sees every GPU (CDI), its spec matches the driver, and the runtime uses it."""

from __future__ import annotations

from nvdeploy.checks.common import SMI, smi_gate, version_tuple
from nvdeploy.checks.gating import first_line, raw_gate
from nvdeploy.checks.registry import NodeContext, register
from nvdeploy.collect.stack import CDI_LIST, CONTAINER_FILES, CONTAINER_RUN
from nvdeploy.results import ErrorReason, Finding, Remediation, Verdict

DOCKER_FIX = "nvidia-ctk runtime configure --runtime=docker && systemctl restart docker"
CONTAINERD_FIX = "nvidia-ctk runtime configure --runtime=containerd && systemctl restart containerd"
CDI_FIX = "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"


@register("container.runtime", collectors=(CONTAINER_FILES, CDI_LIST, SMI))
def container_runtime(ctx: NodeContext) -> list[Finding]:
    """Runs one ``find`` that lists /usr/bin/dockerd and /usr/bin/containerd and prints
    /etc/docker/daemon.json, /etc/containerd/config.toml and every CDI spec in /etc/cdi and /var/run/cdi, then
    ``nvidia-ctk cdi list``; the GPU count and driver come from nvidia-smi.

    Applies when docker or containerd is on the node, or the host var ``container_runtime`` names one
    (``none``: SKIP). PASS: the CDI devices ``nvidia.com/gpu=<index>`` are exactly the driver's GPUs, every CDI
    spec was generated for the running driver (its ``libcuda.so.<version>`` mount), docker's daemon.json has the
    ``nvidia`` runtime (or ``features.cdi``), and containerd (when used without docker, or declared) has
    ``runtimes.nvidia`` (or ``enable_cdi = true``) in config.toml or in a drop-in config.toml imports (the find
    also prints /etc/containerd/conf.d and config.d: the container toolkit 1.18+ writes conf.d/99-nvidia.toml
    and an ``imports`` line). FAIL (TUNE) naming each gap with its
    command: ``nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`` for a missing, short or stale spec (a driver
    update leaves the old spec: containers then fail to start), ``nvidia-ctk runtime configure --runtime=docker|
    containerd`` and a restart for an unconfigured runtime. ERROR: find or nvidia-ctk missing (install
    nvidia-container-toolkit), hung or failed; nvidia-smi unusable. SKIP: no container runtime on the node.
    """
    declared = str(ctx.host_vars.get("container_runtime") or "auto")
    if declared == "none":
        return [ctx.finding("container.runtime", Verdict.SKIP,
                            "no container runtime (host var container_runtime: none)")]
    gated = raw_gate(ctx, "container.runtime", CONTAINER_FILES, "find", "install findutils")
    if gated:
        return gated
    listing = ctx.results[CONTAINER_FILES]
    if listing.rc not in (0, 1):
        return [ctx.finding("container.runtime", Verdict.ERROR,
                            f"find exited {listing.rc}: {first_line(ctx, CONTAINER_FILES)}",
                            reason=ErrorReason.UNPARSEABLE, collector=CONTAINER_FILES)]
    setup = ctx.facts["container_setup"]
    docker = setup.docker or declared == "docker"
    containerd = declared == "containerd" or (setup.containerd and not docker)
    if not docker and not containerd:
        return [ctx.finding("container.runtime", Verdict.SKIP, "no docker or containerd on the node",
                            collector=CONTAINER_FILES)]
    gated = raw_gate(ctx, "container.runtime", CDI_LIST, "nvidia-ctk", "install nvidia-container-toolkit")
    if gated:
        return gated
    cdi_result = ctx.results[CDI_LIST]
    if cdi_result.rc != 0:
        return [ctx.finding("container.runtime", Verdict.ERROR,
                            f"nvidia-ctk cdi list exited {cdi_result.rc}: {first_line(ctx, CDI_LIST)}",
                            reason=ErrorReason.UNPARSEABLE, remediation=Remediation.INVESTIGATE, collector=CDI_LIST)]
    gated = smi_gate(ctx, "container.runtime")
    if gated:
        return gated
    smi = ctx.facts["smi"]
    want = sorted(g.index for g in smi.gpus if g.index is not None)
    cdi = ctx.facts["cdi"]
    problems: list[str] = []
    seen = list(cdi.gpu_indices)
    if not seen:
        problems.append(f"no CDI device for the {len(want)} GPUs (no spec in /etc/cdi or /var/run/cdi): {CDI_FIX}")
    elif seen != want:
        missing = sorted(set(want) - set(seen))
        extra = sorted(set(seen) - set(want))
        detail = ", ".join(x for x in (f"missing GPU {missing}" if missing else "",
                                       f"no such GPU {extra}" if extra else "") if x)
        problems.append(f"CDI lists {len(seen)} GPUs, the driver {len(want)} ({detail}): {CDI_FIX}")
    for path, generated in setup.cdi_spec_drivers:
        if generated and smi.driver_version and version_tuple(generated) != version_tuple(smi.driver_version):
            problems.append(f"{path} was generated for driver {generated}, the node runs {smi.driver_version} "
                            f"(stale after a driver update): {CDI_FIX}")
    configured: list[str] = []
    if docker:
        ok, how = setup.docker_runtime or (False, "no /etc/docker/daemon.json")
        if ok:
            configured.append(f"docker ({how})")
        else:
            problems.append(f"docker not set up for NVIDIA GPUs ({how}): {DOCKER_FIX}")
    if containerd:
        ok, how = setup.containerd_runtime
        if ok:
            configured.append(f"containerd ({how})")
        else:
            problems.append(f"containerd not set up for NVIDIA GPUs ({how}): {CONTAINERD_FIX}")
    observed = {"cdi_gpus": len(seen), "driver_gpus": len(want), "runtimes": configured}
    expected = f"{len(want)} CDI GPUs, runtime configured for NVIDIA"
    if problems:
        return [ctx.finding("container.runtime", Verdict.FAIL, "; ".join(problems), observed=observed,
                            expected=expected, remediation=Remediation.TUNE, collector=CDI_LIST)]
    return [ctx.finding("container.runtime", Verdict.PASS,
                        f"container toolkit sees all {len(want)} GPUs (CDI); {', '.join(configured)}",
                        observed=observed, expected=expected, collector=CDI_LIST)]


@register("container.gpu_run", collectors=(CONTAINER_RUN, SMI))
def container_gpu_run(ctx: NodeContext) -> list[Finding]:
    """On hosts with ``container_image`` (an image already on the node), runs ``docker run --rm --pull=never --gpus
    all IMAGE nvidia-smi -L`` in the node's batch under its own timeout, 300 s (host var ``container_timeout``);
    level ``standard``.

    PASS: the container lists every GPU the driver has, by UUID. FAIL (TUNE) when docker cannot hand GPUs to the
    container (``could not select device driver "" with capabilities: [[gpu]]``: the NVIDIA container toolkit is
    missing or docker was not restarted after ``nvidia-ctk runtime configure``), when the container sees fewer or
    other GPUs, or when docker fails otherwise (the first error line; INVESTIGATE when the image is not on the node
    or the daemon is down). ERROR: docker missing (exit 127), the run hung (killed at the timeout), or output that
    is not ``nvidia-smi -L``. SKIP: no ``container_image`` for this host.
    """
    image = ctx.host_vars.get("container_image")
    if not image:
        return [ctx.finding("container.gpu_run", Verdict.SKIP, "no container image to test (host var container_image)")]
    gated = raw_gate(ctx, "container.gpu_run", CONTAINER_RUN, "docker", "install docker (and nvidia-container-toolkit)")
    if gated:
        return gated
    result = ctx.results[CONTAINER_RUN]
    gated = smi_gate(ctx, "container.gpu_run")
    if gated:
        return gated
    want = {g.uuid: g.index for g in ctx.facts["smi"].gpus if getattr(g, "uuid", None)}
    seen = ctx.facts.get("container_run_gpus") or {}
    if result.rc != 0:
        text = (result.err_text + "\n" + result.text).strip()
        first = next((line.strip() for line in text.splitlines() if "Error" in line or "error" in line),
                     (text.splitlines() or [f"exit {result.rc}"])[0])[:240]
        if "could not select device driver" in text:
            why = (f"docker cannot give the container GPUs ({first}): install nvidia-container-toolkit, run "
                   "nvidia-ctk runtime configure --runtime=docker and restart docker")
            return [ctx.finding("container.gpu_run", Verdict.FAIL, why, observed=first, expected="every GPU",
                                remediation=Remediation.TUNE, collector=CONTAINER_RUN)]
        remedy = Remediation.INVESTIGATE
        return [ctx.finding("container.gpu_run", Verdict.FAIL, f"docker run {image} failed (exit {result.rc}): {first}",
                            observed=first, expected="every GPU", remediation=remedy, collector=CONTAINER_RUN)]
    if not seen:
        return [ctx.finding("container.gpu_run", Verdict.ERROR,
                            f"the container printed no GPU list: {first_line(ctx, CONTAINER_RUN) or 'no output'}",
                            reason=ErrorReason.UNPARSEABLE, collector=CONTAINER_RUN)]
    missing = sorted(want[u] for u in set(want) - set(seen))
    extra = sorted(set(seen) - set(want))
    if missing or extra:
        detail = ", ".join(x for x in (f"missing GPU {missing}" if missing else "",
                                       f"unknown UUID {extra}" if extra else "") if x)
        return [ctx.finding("container.gpu_run", Verdict.FAIL,
                            f"the container sees {len(seen)} of the driver's {len(want)} GPUs ({detail})",
                            observed=len(seen), expected=len(want), remediation=Remediation.TUNE,
                            collector=CONTAINER_RUN)]
    return [ctx.finding("container.gpu_run", Verdict.PASS,
                        f"docker run --gpus all {image}: nvidia-smi -L lists all {len(want)} GPUs",
                        observed=len(seen), expected=len(want), collector=CONTAINER_RUN)]
