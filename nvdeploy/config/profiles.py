"""Per-SKU hardware profiles: the expected values and thresholds a node is judged against.

Profiles are data (``checks/profiles/*.yaml``); this module reads them strictly and never invents a default
for a value the profile does not state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from nvdeploy.config.builtin import data_dir
from nvdeploy.config.yamlfile import ConfigError, LocDict, line_of, load_yaml_file, require_str

_TOP_KEYS = {"name", "version", "description", "sources", "gpu", "driver", "nvlink", "pcie", "sim", "nccl", "ib",
             "throttle", "mig", "datasheet", "cuda", "nvlink_domain", "fleet",
             "nvbandwidth", "firmware"}
_GPU_KEYS = {"count", "model", "memory_mib", "memory_tolerance_pct", "pci_device_id", "ecc_required", "nvswitch",
             "power_limit_w", "max_temperature_c", "nvlsm"}
_DRIVER_KEYS = {"version", "min_version", "flavour"}
FLAVOURS = ("open", "proprietary")
_SIM_KEYS = {"driver_version", "cuda_version", "vbios_version"}


@dataclass(frozen=True)
class GpuExpectation:
    count: int
    model: str
    memory_mib: int
    pci_device_id: str
    memory_tolerance_pct: float = 2.0
    ecc_required: bool = True
    nvswitch: bool = False
    nvlsm: bool = False  # NVLink 5 HGX (B200/B300): the fabric manager needs the NVLink Subnet Manager and ib_umad
    power_limit_w: Optional[float] = None
    max_temperature_c: Optional[float] = None


@dataclass(frozen=True)
class NvlinkDomain:
    """One multi-node NVLink domain (an NVL72 rack): how many nodes (compute trays) and GPUs it holds when whole.

    A profile with one describes a node that is a tray of a rack-scale system: its GPUs register with an NVLink
    fabric managed outside the node, and the domain, not the node, is the unit of health."""

    trays: int
    gpus: int
    # nccl.domain's reference: all_reduce busbw (GB/s, 8 GiB) over the whole domain with multi-node NVLink, and
    # the floor as a percentage of it; None: no citable figure, the check SKIPs (never PASS without a floor).
    all_reduce_busbw_gbps: Optional[float] = None
    floor_pct: float = 95.0
    # The ranks of the run the figure was measured on, with NCCL's default algorithm: the floor holds for runs of
    # that size only (a pair of trays, or a domain short of trays, has no sourced figure). None: the whole domain.
    all_reduce_ranks: Optional[int] = None
    source: str = ""

    @property
    def floor_ranks(self) -> int:
        return self.all_reduce_ranks or self.gpus


@dataclass(frozen=True)
class Profile:
    """The expected hardware and software of one kind of node."""

    name: str
    version: str
    description: str
    gpu: GpuExpectation
    driver_version: Optional[str] = None
    driver_min_version: Optional[str] = None
    driver_flavour: Optional[str] = None  # open | proprietary kernel modules; None: not stated
    nvlink_domain: Optional[NvlinkDomain] = None  # None: the node is its own NVLink world (HGX, PCIe)
    sim: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    path: str = ""

    @property
    def stamp(self) -> str:
        return f"{self.name}@{self.version}"


def _check_keys(section: Any, allowed: set[str], file: str, where: str) -> None:
    if not isinstance(section, dict):
        raise ConfigError(f"{where} must be a mapping", file, line_of(section))
    for key in section:
        if key not in allowed:
            raise ConfigError(f"unknown key in {where} (allowed: {', '.join(sorted(allowed))})", file,
                              line_of(section, key), str(key))


def _typed(section: LocDict, key: str, kind: Union[type, tuple[type, ...]], file: str, required: bool = True) -> Any:
    if key not in section:
        if required:
            raise ConfigError("missing required key", file, line_of(section), key)
        return None
    value = section[key]
    if isinstance(value, bool) and kind is not bool and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise ConfigError(f"must be {getattr(kind, '__name__', kind)}, got a boolean", file, line_of(section, key), key)
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ConfigError(f"must be {names}, got {type(value).__name__} {value!r}", file, line_of(section, key), key)
    return value


def _flavour(driver: Any, file: str) -> Optional[str]:
    if "flavour" not in driver:
        return None
    value = require_str(driver, "flavour", file)
    if value not in FLAVOURS:
        raise ConfigError(f"must be one of {', '.join(FLAVOURS)}, got {value!r}", file, line_of(driver, "flavour"),
                          "driver.flavour")
    return value


def _nvlink_domain(data: Any, gpus_per_node: int, file: str) -> Optional[NvlinkDomain]:
    """The ``nvlink_domain`` section (keys validated by the schema); its GPUs must be whole trays of this profile."""
    if "nvlink_domain" not in data:
        return None
    body = data["nvlink_domain"]
    busbw = body.get("all_reduce_busbw_gbps")
    domain = NvlinkDomain(trays=int(body["trays"]), gpus=int(body["gpus"]),
                          all_reduce_busbw_gbps=float(busbw) if busbw is not None else None,
                          floor_pct=float(body.get("floor_pct", 95)),
                          all_reduce_ranks=int(body["all_reduce_ranks"]) if "all_reduce_ranks" in body else None,
                          source=str(body.get("source") or ""))
    if domain.gpus != domain.trays * gpus_per_node:
        raise ConfigError(f"must be trays x gpu.count = {domain.trays} x {gpus_per_node} = "
                          f"{domain.trays * gpus_per_node}, got {domain.gpus}", file, line_of(body, "gpus"),
                          "nvlink_domain.gpus")
    return domain


def load_profile_file(path: Union[str, Path]) -> Profile:
    file = str(path)
    data = load_yaml_file(path)
    _check_keys(data, _TOP_KEYS, file, "profile")
    gpu = data.get("gpu")
    if gpu is None:
        raise ConfigError("missing required key", file, line_of(data), "gpu")
    _check_keys(gpu, _GPU_KEYS, file, "gpu")
    driver = data.get("driver", LocDict())
    if driver:
        _check_keys(driver, _DRIVER_KEYS, file, "driver")
    sim = data.get("sim", LocDict())
    if sim:
        _check_keys(sim, _SIM_KEYS, file, "sim")
    from nvdeploy.config.profile_schema import check_sections

    check_sections(data, file)
    expectation = GpuExpectation(
        count=_typed(gpu, "count", int, file),
        model=require_str(gpu, "model", file) if "model" in gpu else _typed(gpu, "model", str, file),
        memory_mib=_typed(gpu, "memory_mib", int, file),
        pci_device_id=require_str(gpu, "pci_device_id", file) if "pci_device_id" in gpu else
        _typed(gpu, "pci_device_id", str, file),
        memory_tolerance_pct=float(_typed(gpu, "memory_tolerance_pct", (int, float), file, False) or 2.0),
        ecc_required=bool(_typed(gpu, "ecc_required", bool, file, False) if "ecc_required" in gpu else True),
        nvswitch=bool(_typed(gpu, "nvswitch", bool, file, False) or False),
        nvlsm=bool(_typed(gpu, "nvlsm", bool, file, False) or False),
        power_limit_w=_typed(gpu, "power_limit_w", (int, float), file, False),
        max_temperature_c=_typed(gpu, "max_temperature_c", (int, float), file, False),
    )
    return Profile(
        name=require_str(data, "name", file) if "name" in data else _typed(data, "name", str, file),
        version=require_str(data, "version", file) if "version" in data else _typed(data, "version", str, file),
        description=str(data.get("description", "")),
        gpu=expectation,
        driver_version=require_str(driver, "version", file) if "version" in driver else None,
        driver_min_version=require_str(driver, "min_version", file) if "min_version" in driver else None,
        driver_flavour=_flavour(driver, file),
        nvlink_domain=_nvlink_domain(data, expectation.count, file),
        sim={k: require_str(sim, k, file) for k in sim},
        extra={k: data[k] for k in ("nvlink", "pcie", "nccl", "sources", "ib", "throttle", "mig", "datasheet", "cuda",
                                    "fleet", "nvbandwidth", "firmware") if k in data},
        path=file,
    )


class ProfileCatalog:
    """All profiles from the built-in folder and any extra folders, by name."""

    def __init__(self, folders: Optional[list[Path]] = None) -> None:
        self.folders = folders if folders is not None else [data_dir("checks") / "profiles"]
        self._cache: dict[str, Profile] = {}

    def names(self) -> list[str]:
        found = set()
        for folder in self.folders:
            found.update(p.stem for p in folder.glob("*.yaml"))
        return sorted(found)

    def get(self, name: str) -> Profile:
        if name not in self._cache:
            for folder in self.folders:
                candidate = folder / f"{name}.yaml"
                if candidate.is_file():
                    profile = load_profile_file(candidate)
                    if profile.name != name:
                        raise ConfigError(f"profile file declares name {profile.name!r}, expected {name!r}",
                                          candidate, None, "name")
                    self._cache[name] = profile
                    break
            else:
                raise KeyError(name)
        return self._cache[name]
