"""Strict schema of the profile sections read by the catalog checks (``nvlink``, ``pcie``, ``nccl``, ``ib``,
``throttle``, ``mig``): unknown keys, wrong types and unknown throttle reasons are a ConfigError with file, line
and key. Called by :func:`nvdeploy.config.profiles.load_profile_file`.

```yaml
nvlink:   {links: 18, speed_gbps: 26.562}          # per GPU; absent: the SKU has no NVLink (checks SKIP)
pcie:     {gen: 5, width: 16}                      # the GPU's own link
nccl:     {all_reduce_busbw_gbps: 476, floor_pct: 95, source: "..."}   # single node, >= 1 GiB messages
ib:       {hcas: 8, rate_gbps: 400}                # compute fabric HCAs; absent: no IB expected (SKIP)
throttle: {fail: [hw_slowdown, ...], warn: [sw_thermal_slowdown]}      # active clock-event reasons
mig:      {enabled: false}                         # the MIG mode every MIG-capable GPU must be in
cuda:     {toolkit: "12.4"}                        # the CUDA toolkit installed by default
nvlink_domain: {trays: 18, gpus: 72}            # rack-scale NVLink (NVL72): nodes are trays of one domain
datasheet: {bf16_tflops: 989.4, fp8_tflops: 1978.9, hbm_gb: 80, tdp_w: 700, sources: [...]}  # dense, per GPU
fleet:    {min_nodes: 8, warn_pct: 3.5, fail_pct: 7, warn_z: 3, fail_z: 5, z_min_pct: 1,   # fleet.performance
           figures: {nccl_busbw: {warn_pct: 3}, dcgm_gflops: {enabled: false}}}    # per figure (checks/fleet.py)
nvbandwidth: {host_to_device_gbps: 120, device_to_host_gbps: 120, device_to_device_gbps: 600, sources: [...]}
burnin:   {fail: [hw_slowdown, ...], warn: [sw_power_cap], clock_drop_pct: 10, figure_drop_pct: 5}  # under load
firmware: {must_match: [gpu.vbios], minimum: {nic.firmware[MT4129]: {version: "28.39.1002", source: "..."}}}
```
"""

from __future__ import annotations

import re
from typing import Any, Callable

from nvdeploy.config.yamlfile import ConfigError, line_of

THROTTLE_REASONS = frozenset({
    "gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "hw_thermal_slowdown",
    "hw_power_brake_slowdown", "sync_boost", "sw_thermal_slowdown", "display_clocks_setting",
})


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _pct(value: Any) -> bool:
    return _number(value) and value <= 100


def _nonnegative(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


# The figures fleet.performance judges (nvdeploy/checks/fleet.py FIGURES), by the name a profile gives them.
FLEET_FIGURES = ("nccl_busbw", "dcgm_gflops", "burnin_gflops", "storage_read_gbps", "storage_write_gbps",
                 "nvbandwidth_h2d_gbps", "nvbandwidth_d2h_gbps", "burnin_sm_clock", "burnin_temperature",
                 "rdma_gpudirect", "rdma_gpudirect_rail", "nccl_pair_busbw")
_FLEET_RULE: dict[str, tuple[Callable[[Any], bool], str]] = {
    "min_nodes": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 2, "an integer >= 2"),
    "warn_pct": (_pct, "a percentage (0-100] below the fleet's median"),
    "fail_pct": (_pct, "a percentage (0-100] below the fleet's median"),
    "warn_z": (_number, "a positive number (the robust z at or below minus it is an outlier)"),
    "fail_z": (_number, "a positive number (the robust z at or below minus it is an outlier)"),
    "z_min_pct": (_nonnegative, "a percentage >= 0"),
    "fail_min_pct": (_nonnegative, "a percentage >= 0 (a robust z alone FAILs only this far below the median)"),
    # fleet.drift (checks/fleet_drift.py): the fall since the node's own figure in the accepted run.
    "drift_pct": (_pct, "a percentage (0-100] below the node's figure in the baseline run"),
}


def _fleet_figures(value: Any) -> bool:
    """``{figure: {rule key: value, enabled: bool}}`` with known figures and keys only."""
    if not isinstance(value, dict):
        return False
    for figure, body in value.items():
        if figure not in FLEET_FIGURES or not isinstance(body, dict):
            return False
        for key, item in body.items():
            if key == "enabled":
                if not isinstance(item, bool):
                    return False
            elif key not in _FLEET_RULE or not _FLEET_RULE[key][0](item):
                return False
    return True


# The components firmware.* compares (nvdeploy/parsers/firmware.py); a NIC's may name its CA type,
# ``nic.firmware[MT4129]``, so that a minimum holds one ConnectX model only.
FIRMWARE_COMPONENTS = ("gpu.vbios", "gpu.inforom_image", "gpu.inforom_oem", "gpu.inforom_ecc", "gpu.inforom_pwr",
                       "gpu.gsp", "nic.firmware", "system.bios_version", "system.bios_date", "system.board_name",
                       "system.bmc_firmware")


def _firmware_component(value: Any) -> bool:
    return isinstance(value, str) and value.split("[", 1)[0] in FIRMWARE_COMPONENTS and (
        "[" not in value or bool(re.fullmatch(r"nic\.firmware\[[A-Za-z0-9_.-]+\]", value)))


def _firmware_minimum(value: Any) -> bool:
    """``{component: {version: "...", source: "..."}}``: every minimum says where it comes from."""
    return isinstance(value, dict) and all(
        _firmware_component(k) and isinstance(v, dict) and set(v) == {"version", "source"}
        and all(isinstance(x, str) and x for x in v.values()) for k, v in value.items())


def _reasons(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and v in THROTTLE_REASONS for v in value)


# section -> {key: (validator, description, required)}
SECTIONS: dict[str, dict[str, tuple[Callable[[Any], bool], str, bool]]] = {
    "nvlink": {"links": (_count, "an integer number of links per GPU", True),
               "speed_gbps": (_number, "a positive number (GB/s per link, as nvidia-smi nvlink -s prints)", True)},
    "pcie": {"gen": (_count, "an integer PCIe generation", True),
             "width": (_count, "an integer link width", True)},
    "nccl": {"all_reduce_busbw_gbps": (_number, "a positive number (GB/s)", True),
             "floor_pct": (_pct, "a percentage (0-100] of all_reduce_busbw_gbps", True),
             "source": (lambda v: isinstance(v, str), "a string", False),
             "multinode_busbw_gbps": (_number, "a positive number (GB/s, all_reduce across nodes)", False)},
    "ib": {"hcas": (_count, "an integer number of InfiniBand HCAs", True),
           "rate_gbps": (_number, "a positive number (Gb/s per port, as ibstat's Rate)", True),
           "gpudirect_floor_pct": (_pct, "a percentage (0-100] of rate_gbps (rdma.gpudirect's floor)", False)},
    "throttle": {"fail": (_reasons, "a list of clock-event reasons (" + ", ".join(sorted(THROTTLE_REASONS)) + ")",
                          False),
                 "warn": (_reasons, "a list of clock-event reasons (" + ", ".join(sorted(THROTTLE_REASONS)) + ")",
                          False)},
    "mig": {"enabled": (lambda v: isinstance(v, bool), "true or false", True)},
    # The CUDA toolkit the install phase puts on a node of this profile by default (cuda_toolkit): one the
    # profile's default driver runs in full (a test holds every profile to it).
    "cuda": {"toolkit": (lambda v: isinstance(v, str) and bool(re.fullmatch(r"\d+\.\d+", v)),
                         'a quoted "major.minor" CUDA release, e.g. "12.4"', True)},
    # A multi-node NVLink domain (NVL72 rack): its size when whole, in nodes (compute trays) and GPUs. Absent:
    # the node is an NVLink domain of its own (HGX baseboard, PCIe), and domain checks SKIP.
    "nvlink_domain": {"trays": (lambda v: _count(v) and v > 0, "a positive integer number of trays (nodes)", True),
                      "gpus": (lambda v: _count(v) and v > 0, "a positive integer number of GPUs", True),
                      # nccl.domain: all_reduce across the whole domain over multi-node NVLink (it lives with the
                      # domain, not in nccl:, whose single-node figure a tray profile need not state).
                      "all_reduce_busbw_gbps": (_number, "a positive number (GB/s, all_reduce over the whole "
                                                "domain, 8 GiB)", False),
                      "floor_pct": (_pct, "a percentage (0-100] of all_reduce_busbw_gbps", False),
                      # The ranks of the run the figure comes from: busbw depends on the group size and on the
                      # algorithm NCCL picks for it, so the floor holds for runs of that size only (default: gpus).
                      "all_reduce_ranks": (lambda v: _count(v) and v > 1, "an integer number of ranks (> 1) the "
                                           "figure was measured on", False),
                      "source": (lambda v: isinstance(v, str), "a string", False)},
    # Datasheet figures per GPU for `nvdeploy size`: DENSE Tensor-Core TFLOPS (halve NVIDIA's sparse figures), an
    # absent precision means the SKU has no Tensor-Core path for it. Optional: a user profile may omit it.
    "datasheet": {**{key: (_number, "a positive number (dense TFLOPS per GPU)", False)
                     for key in ("tf32_tflops", "bf16_tflops", "fp16_tflops", "fp8_tflops", "fp4_tflops")},
                  "hbm_gb": (_number, "a positive number (GB of GPU memory)", False),
                  "hbm_tbps": (_number, "a positive number (TB/s memory bandwidth)", False),
                  "nvlink_gbps": (_number, "a positive number (GB/s NVLink per GPU)", False),
                  "tdp_w": (_number, "a positive number (W)", False),
                  "sources": (lambda v: isinstance(v, list) and bool(v) and all(isinstance(s, str) for s in v),
                              "a non-empty list of strings (where each figure comes from)", True)},
    # nvbandwidth.copies: per-GPU copy-engine floors (GB/s) of nvbandwidth's host<->device and peer read copies.
    "nvbandwidth": {"host_to_device_gbps": (_number, "a positive number (GB/s per GPU, the floor)", True),
                    "device_to_host_gbps": (_number, "a positive number (GB/s per GPU, the floor)", True),
                    "device_to_device_gbps": (_number, "a positive number (GB/s per GPU pair, the floor)", False),
                    "sources": (lambda v: isinstance(v, list) and bool(v) and all(isinstance(s, str) for s in v),
                                "a non-empty list of strings (where each floor comes from)", True)},
    # burnin.stability / burnin.load (checks/burnin.py): clock-event reasons that FAIL or WARN under load, the SM
    # clock's allowed fall from the first samples to the last, an iteration's allowed busbw fall below the first.
    "burnin": {"fail": (_reasons, "a list of clock-event reasons (" + ", ".join(sorted(THROTTLE_REASONS)) + ")",
                        False),
               "warn": (_reasons, "a list of clock-event reasons (" + ", ".join(sorted(THROTTLE_REASONS)) + ")",
                        False),
               "clock_drop_pct": (_pct, "a percentage (0-100] below the first samples' SM clock", False),
               "figure_drop_pct": (_pct, "a percentage (0-100] below the first iteration's busbw", False)},
    # firmware.consistency (cluster stage): components whose odd nodes FAIL rather than WARN; firmware.minimum:
    # the oldest version accepted per component, with its source.
    "firmware": {"must_match": (lambda v: isinstance(v, list) and all(_firmware_component(c) for c in v),
                                "a list of firmware components (" + ", ".join(FIRMWARE_COMPONENTS) + ")", False),
                 "minimum": (_firmware_minimum, "a mapping of firmware components to {version: \"...\", source: "
                             "\"...\"}", False)},
    # fleet.performance: when a node's measured figure is an outlier among the profile's nodes (checks/fleet.py).
    "fleet": {**{key: (valid, description, False) for key, (valid, description) in _FLEET_RULE.items()},
              "figures": (_fleet_figures, "a mapping of figures (" + ", ".join(FLEET_FIGURES) + ") to rule keys ("
                          + ", ".join(_FLEET_RULE) + ") and enabled: true/false", False)},
}


def check_sections(data: Any, file: str) -> None:
    """Validate every catalog section present in a profile's top-level mapping."""
    for section, schema in SECTIONS.items():
        if section not in data:
            continue
        body = data[section]
        if not isinstance(body, dict):
            raise ConfigError(f"{section} must be a mapping", file, line_of(data, section), section)
        for key in body:
            if key not in schema:
                raise ConfigError(f"unknown key in {section} (allowed: {', '.join(sorted(schema))})", file,
                                  line_of(body, key), f"{section}.{key}")
        for key, (valid, description, required) in schema.items():
            if key not in body:
                if required:
                    raise ConfigError("missing required key", file, line_of(data, section), f"{section}.{key}")
                continue
            if not valid(body[key]):
                raise ConfigError(f"must be {description}, got {body[key]!r}", file, line_of(body, key),
                                  f"{section}.{key}")
