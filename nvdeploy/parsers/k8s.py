"""Kubernetes API objects as ``kubectl get ... -o json`` prints them: the GPU Operator's ClusterPolicy, its
NVIDIADriver custom resources (nvidia.com/v1alpha1), its validator pods and the nodes. Pure: text in,
typed facts out; odd input gives what could be read plus warnings."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

GPU_RESOURCE = "nvidia.com/gpu"
# With the MIG "mixed" strategy the device plugin advertises each MIG profile as its own resource
# (nvidia.com/mig-1g.10gb, ...) next to nvidia.com/gpu for the GPUs not in MIG mode; GPU feature discovery labels
# the strategy, the physical GPU count and each profile's instance count (nvidia.com/mig-<profile>.count).
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
# GPU feature discovery's labels of the driver the node runs (older GFD: cuda.driver.*, newer also
# cuda.driver-version.*); either set names major.minor.rev.
_DRIVER_LABELS = (("nvidia.com/cuda.driver-version.major", "nvidia.com/cuda.driver-version.minor",
                   "nvidia.com/cuda.driver-version.revision"),
                  ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev"))
_DRIVER_FULL_LABEL = "nvidia.com/cuda.driver-version.full"


@dataclass(frozen=True)
class ClusterPolicy:
    name: str
    state: Optional[str]          # status.state: ready / notReady / ignored; None before the first reconcile
    driver_enabled: bool          # spec.driver.enabled (default true): the operator installs the driver
    driver_version: Optional[str]  # spec.driver.version, when set
    uses_driver_crd: bool = False  # spec.driver.useNvidiaDriverCRD: NVIDIADriver objects own the driver instead
    mig_strategy: Optional[str] = None  # spec.mig.strategy: none / single / mixed


@dataclass(frozen=True)
class NvidiaDriver:
    """One NVIDIADriver custom resource (cluster-scoped, GPU Operator v23.9+): the driver for the nodes its
    ``nodeSelector`` picks (all GPU nodes when empty)."""

    name: str
    version: Optional[str]        # spec.version: a full version, or a branch ("580") with usePrecompiled
    driver_type: str              # spec.driverType: gpu / vgpu / vgpu-host-manager
    state: Optional[str]          # status.state: ready / notReady / disabled / ignored; None before reconcile
    node_selector: tuple[tuple[str, str], ...]
    precompiled: bool = False

    def selects(self, labels: dict[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in self.node_selector)


@dataclass(frozen=True)
class ValidatorPod:
    name: str
    node: Optional[str]           # spec.nodeName; None while unscheduled
    phase: str                    # status.phase
    ready: bool                   # every container ready (a Running pod whose validator is not up is not ready)
    reason: Optional[str]         # the first waiting/terminated reason of an init or main container


@dataclass(frozen=True)
class K8sNode:
    name: str
    hostname: Optional[str]       # label kubernetes.io/hostname
    allocatable_gpus: Optional[int]  # status.allocatable["nvidia.com/gpu"]; None when not advertised
    driver_version: Optional[str]  # from GPU feature discovery's labels
    mig_strategy: Optional[str] = None  # label nvidia.com/mig.strategy (none / single / mixed)
    mig_devices: tuple[tuple[str, int], ...] = ()  # allocatable nvidia.com/mig-<profile>, by profile
    gpu_count_label: Optional[int] = None  # label nvidia.com/gpu.count (physical GPUs, MIG devices under single)
    mig_count_labels: tuple[tuple[str, int], ...] = ()  # labels nvidia.com/mig-<profile>.count
    mig_config_state: Optional[str] = None  # label nvidia.com/mig.config.state: success / pending / failed
    product: Optional[str] = None  # label nvidia.com/gpu.product (ends "-MIG-<profile>" under single)
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def mig_total(self) -> int:
        return sum(count for _, count in self.mig_devices)


@dataclass(frozen=True)
class Parsed:
    items: tuple[Any, ...]
    warnings: tuple[str, ...] = ()
    ok: bool = True               # False: not a Kubernetes object or list at all (unparseable)


def _items(text: str, kind: str) -> tuple[list[dict[str, Any]], list[str], bool]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        return [], [f"not JSON: {exc}"], False
    if not isinstance(data, dict):
        return [], ["not a Kubernetes object"], False
    if isinstance(data.get("items"), list):
        raw = data["items"]
    elif data.get("kind") == kind:
        raw = [data]
    else:
        return [], [f"neither a List nor a {kind}"], False
    items = [i for i in raw if isinstance(i, dict)]
    warnings = [f"{len(raw) - len(items)} list entries are not objects"] if len(items) != len(raw) else []
    return items, warnings, True


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _name(obj: dict[str, Any]) -> str:
    return str(_get(obj, "metadata", "name") or "?")


def parse_cluster_policies(text: str) -> Parsed:
    items, warnings, ok = _items(text, "ClusterPolicy")
    out = []
    for item in items:
        enabled = _get(item, "spec", "driver", "enabled")
        version = _get(item, "spec", "driver", "version")
        state = _get(item, "status", "state")
        strategy = _get(item, "spec", "mig", "strategy")
        out.append(ClusterPolicy(_name(item), str(state) if state else None,
                                 enabled is not False, str(version) if version not in (None, "") else None,
                                 _get(item, "spec", "driver", "useNvidiaDriverCRD") is True,
                                 str(strategy) if strategy else None))
    return Parsed(tuple(out), tuple(warnings), ok)


def parse_nvidia_drivers(text: str) -> Parsed:
    """``kubectl get nvidiadrivers.nvidia.com -o json``."""
    items, warnings, ok = _items(text, "NVIDIADriver")
    out = []
    for item in items:
        version = _get(item, "spec", "version")
        selector = _get(item, "spec", "nodeSelector")
        selector = selector if isinstance(selector, dict) else {}
        state = _get(item, "status", "state")
        out.append(NvidiaDriver(_name(item), str(version) if version not in (None, "") else None,
                                str(_get(item, "spec", "driverType") or "gpu"), str(state) if state else None,
                                tuple(sorted((str(k), str(v)) for k, v in selector.items())),
                                _get(item, "spec", "usePrecompiled") is True))
    return Parsed(tuple(out), tuple(warnings), ok)


def _reason(statuses: Any) -> Optional[str]:
    for status in statuses if isinstance(statuses, list) else []:
        for state in ("waiting", "terminated"):
            reason = _get(status, "state", state, "reason")
            if reason and reason != "Completed" and reason != "PodInitializing":
                name = _get(status, "name")
                return f"{reason} ({name})" if name else str(reason)
    return None


def parse_validator_pods(text: str) -> Parsed:
    items, warnings, ok = _items(text, "Pod")
    out = []
    for item in items:
        status = item.get("status") if isinstance(item.get("status"), dict) else {}
        containers = status.get("containerStatuses") if isinstance(status.get("containerStatuses"), list) else []
        ready = bool(containers) and all(_get(c, "ready") is True for c in containers)
        reason = _reason(status.get("initContainerStatuses")) or _reason(containers) or status.get("reason")
        node = _get(item, "spec", "nodeName")
        out.append(ValidatorPod(_name(item), str(node) if node else None, str(status.get("phase") or "Unknown"),
                                ready, str(reason) if reason else None))
    return Parsed(tuple(out), tuple(warnings), ok)


def _int(value: Any) -> Optional[int]:
    try:
        return int(str(value))
    except ValueError:
        return None


def _driver(labels: dict[str, Any]) -> Optional[str]:
    full = labels.get(_DRIVER_FULL_LABEL)
    if full:
        return str(full)
    for major, minor, rev in _DRIVER_LABELS:
        if labels.get(major) and labels.get(minor):
            parts = [str(labels[major]), str(labels[minor])]
            if labels.get(rev) not in (None, ""):
                parts.append(str(labels[rev]))
            return ".".join(parts)
    return None


def _label(labels: dict[str, Any], name: str) -> Optional[str]:
    value = labels.get(name)
    return str(value) if value not in (None, "") else None


def parse_nodes(text: str) -> Parsed:
    items, warnings, ok = _items(text, "Node")
    out = []
    for item in items:
        labels = _get(item, "metadata", "labels")
        labels = labels if isinstance(labels, dict) else {}
        gpus = _get(item, "status", "allocatable", GPU_RESOURCE)
        count = _int(gpus) if gpus is not None else None
        if gpus is not None and count is None:
            warnings.append(f"{_name(item)}: allocatable {GPU_RESOURCE} {gpus!r} is not a number")
        hostname = labels.get("kubernetes.io/hostname")
        allocatable = _get(item, "status", "allocatable")
        mig = []
        for key, value in sorted(allocatable.items()) if isinstance(allocatable, dict) else []:
            if str(key).startswith(MIG_RESOURCE_PREFIX):
                number = _int(value)
                if number is None:
                    warnings.append(f"{_name(item)}: allocatable {key} {value!r} is not a number")
                else:
                    mig.append((str(key)[len("nvidia.com/"):], number))
        mig_labels = tuple((str(k)[len("nvidia.com/"):-len(".count")], n) for k, v in sorted(labels.items())
                           if str(k).startswith(MIG_RESOURCE_PREFIX) and str(k).endswith(".count")
                           and (n := _int(v)) is not None)
        gpu_label = labels.get(GPU_COUNT_LABEL)

        out.append(K8sNode(_name(item), str(hostname) if hostname else None, count, _driver(labels),
                           _label(labels, MIG_STRATEGY_LABEL), tuple(mig),
                           _int(gpu_label) if gpu_label is not None else None,
                           mig_labels, _label(labels, MIG_CONFIG_STATE_LABEL), _label(labels, GPU_PRODUCT_LABEL),
                           tuple(sorted((str(k), str(v)) for k, v in labels.items()))))
    return Parsed(tuple(out), tuple(warnings), ok)
