"""Kubernetes API objects as ``kubectl get ... -o json`` prints them: the GPU Operator's ClusterPolicy, its
validator pods and the nodes. Pure: text in, typed facts out; odd input gives what could be read plus warnings."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

GPU_RESOURCE = "nvidia.com/gpu"
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
        out.append(ClusterPolicy(_name(item), str(state) if state else None,
                                 enabled is not False, str(version) if version not in (None, "") else None))
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
        out.append(K8sNode(_name(item), str(hostname) if hostname else None, count, _driver(labels)))
    return Parsed(tuple(out), tuple(warnings), ok)
