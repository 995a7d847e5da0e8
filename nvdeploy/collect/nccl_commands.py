"""The single-node nccl-tests command line and the busbw expectation it carries, shared by the collector
(nvdeploy/collect/datacenter.py builds ``all_reduce_perf``'s argv with the floor as ``NCCL_TESTS_MIN_BW``) and the
check that judges the run (nvdeploy/checks/nccl.py). Part of the collect layer: it imports no check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

NCCL_TIMEOUT_S = 900.0
NCCL_SIZES = ("-b", "1G", "-e", "8G", "-f", "2")
DEFAULT_GPU_COUNT = 8


@dataclass(frozen=True)
class NcclExpectation:
    """Reference busbw (GB/s) and the floor as a percentage of it; None when the profile states none."""

    busbw_gbps: Optional[float] = None
    floor_pct: Optional[float] = None

    @property
    def floor_gbps(self) -> Optional[float]:
        if self.busbw_gbps is None or self.floor_pct is None:
            return None
        return round(self.busbw_gbps * self.floor_pct / 100.0, 1)


def expectation(profile: Any) -> NcclExpectation:
    """The single-node all_reduce expectation of a profile (``nccl: {all_reduce_busbw_gbps, floor_pct}``)."""
    nccl = profile.extra.get("nccl") if profile is not None else None
    if not isinstance(nccl, Mapping) or "all_reduce_busbw_gbps" not in nccl:
        return NcclExpectation()
    return NcclExpectation(float(nccl["all_reduce_busbw_gbps"]), float(nccl.get("floor_pct", 95)))


def nccl_env_assignments(host_vars: Mapping[str, Any], profile: Any) -> list[str]:
    """``NAME=value`` words for ``env``: NCCL_DEBUG=VERSION (prints the NCCL version), the floor as
    NCCL_TESTS_MIN_BW when the profile states one, then the host's ``nccl_env`` (which wins)."""
    env: dict[str, str] = {"NCCL_DEBUG": "VERSION"}
    floor = expectation(profile).floor_gbps if profile is not None else None
    if floor is not None:
        env["NCCL_TESTS_MIN_BW"] = f"{floor:g}"
    for key, value in dict(host_vars.get("nccl_env") or {}).items():
        env[str(key)] = str(value)
    return [f"{key}={value}" for key, value in env.items()]


def nccl_binary(host_vars: Mapping[str, Any], name: str = "all_reduce_perf") -> str:
    folder = host_vars.get("nccl_tests_dir")
    return f"{str(folder).rstrip('/')}/{name}" if folder else name


def build_nccl_all_reduce(host_vars: Mapping[str, Any], profile: Any) -> tuple[str, ...]:
    count = profile.gpu.count if profile is not None else DEFAULT_GPU_COUNT
    return ("env", *nccl_env_assignments(host_vars, profile), nccl_binary(host_vars), *NCCL_SIZES,
            "-g", str(count), "-c", "1")
