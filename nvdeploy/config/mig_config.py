"""MIG layouts in the format of NVIDIA's mig-parted (the GPU Operator's MIG manager): read, checked, resolved per host.

A layout file is mig-parted's own config file (or the GPU Operator's ConfigMap that carries one as ``data``)::

    version: v1
    mig-configs:
      all-1g.10gb:
        - devices: all                      # or a list of GPU indexes: [0, 1, 2, 3]
          device-filter: ["0x233010DE"]      # optional: only GPUs of these PCI device IDs (device + vendor)
          mig-enabled: true
          mig-devices: {"1g.10gb": 7}        # GPU instance profile -> count, each with its full compute instance

The host var ``mig_config`` names the layout, ``mig_config_file`` the file on the controller (relative to the
inventory's folder). Without a file only ``all-disabled`` and ``all-enabled`` (MIG on, no instances) are known,
as in every mig-parted config. A GPU that no entry of the layout selects is left as it is (mig-parted does the
same); where several entries select a GPU, the last one holds. Bad input is a ConfigError naming the file, line and
key (``yaml.safe_load`` semantics, config/yamlfile.py).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Union

from nvdeploy.config.yamlfile import ConfigError, line_of, load_yaml_file, load_yaml_text

VERSION = "v1"
ENTRY_KEYS = ("devices", "device-filter", "mig-enabled", "mig-devices")
# GPU instance profile names as mig-parted and nvidia-smi spell them: 1g.10gb, 1g.5gb+me, 1g.24gb+gfx, 7g.80gb.
PROFILE_NAME = re.compile(r"[1-8]g\.\d{1,4}gb(?:[+-][a-z][a-z.]{0,15})?")
# A PCI device ID as device-filter writes it: 0x233010DE (device 2330, vendor 10de), or the device alone.
DEVICE_ID = re.compile(r"(?:0x)?([0-9a-fA-F]{4})([0-9a-fA-F]{4})?")
MAX_INSTANCES = 8
BUILTIN = ("all-disabled", "all-enabled")


@dataclass(frozen=True)
class MigEntry:
    """One item of a layout's list: the GPUs it selects and what they get."""

    devices: Optional[tuple[int, ...]]  # None: all
    device_filter: tuple[str, ...]  # lower-case 4-digit PCI device IDs; empty: any
    enabled: bool
    instances: tuple[tuple[str, int], ...]  # (profile name, count), in the file's order
    line: int = 0

    def selects(self, index: int, pci_device_id: Optional[str]) -> bool:
        if self.devices is not None and index not in self.devices:
            return False
        if self.device_filter:
            return device_of(pci_device_id or "") in self.device_filter
        return True


@dataclass(frozen=True)
class MigLayout:
    name: str
    entries: tuple[MigEntry, ...]
    file: str = ""  # empty: a built-in layout

    def for_gpu(self, index: int, pci_device_id: Optional[str]) -> Optional[MigEntry]:
        """The entry that holds for this GPU (the last that selects it); None when none does."""
        chosen = None
        for entry in self.entries:
            if entry.selects(index, pci_device_id):
                chosen = entry
        return chosen

    @property
    def source(self) -> str:
        return f"{self.name} ({self.file})" if self.file else f"{self.name} (built in)"


def device_of(pci_device_id: str) -> str:
    """``0x233010DE`` / ``0x2330`` / ``2330`` -> ``2330``; empty when it is no PCI device ID."""
    match = DEVICE_ID.fullmatch(pci_device_id.strip())
    return match.group(1).lower() if match else ""


def builtin_layouts() -> dict[str, MigLayout]:
    return {"all-disabled": MigLayout("all-disabled", (MigEntry(None, (), False, ()),)),
            "all-enabled": MigLayout("all-enabled", (MigEntry(None, (), True, ()),))}


def _entry(item: Any, file: str, config: str, where: Any, index: int, offset: int) -> MigEntry:
    line = (line_of(where, index) or 0) + offset
    if not isinstance(item, dict):
        raise ConfigError("each item of a MIG config is a mapping with devices, mig-enabled and mig-devices", file,
                          line, config)
    for key in item:
        if key not in ENTRY_KEYS:
            raise ConfigError(f"unknown key of a MIG config item (known: {', '.join(ENTRY_KEYS)})", file,
                              (line_of(item, key) or 0) + offset, str(key))

    def at(key: str) -> int:
        return (line_of(item, key) or 0) + offset

    if "devices" not in item:
        raise ConfigError("missing 'devices' (all, or a list of GPU indexes)", file, line, config)
    devices = item["devices"]
    if devices == "all":
        selected: Optional[tuple[int, ...]] = None
    elif isinstance(devices, list) and devices and all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 64
                                                        for d in devices):
        selected = tuple(devices)
    else:
        raise ConfigError(f"must be all or a list of GPU indexes, got {devices!r}", file, at("devices"), "devices")
    filters = item.get("device-filter", [])
    if isinstance(filters, str):
        filters = [filters]
    if not isinstance(filters, list) or not all(isinstance(f, str) and DEVICE_ID.fullmatch(f) for f in filters):
        raise ConfigError(f"must be a PCI device ID or a list of them (\"0x233010DE\"), got {filters!r}", file,
                          at("device-filter"), "device-filter")
    enabled = item.get("mig-enabled")
    if not isinstance(enabled, bool):
        raise ConfigError(f"must be true or false, got {enabled!r}", file, at("mig-enabled") if "mig-enabled" in item
                          else line, "mig-enabled")
    wanted = item.get("mig-devices", {})
    if wanted is None:
        wanted = {}
    if not isinstance(wanted, dict):
        raise ConfigError("must be a mapping of GPU instance profiles to counts ({\"1g.10gb\": 7})", file,
                          at("mig-devices"), "mig-devices")
    instances = []
    for name, count in wanted.items():
        if isinstance(name, str) and re.fullmatch(r"\d+c\." + PROFILE_NAME.pattern, name):
            raise ConfigError("compute instance slices (1c.3g.40gb) are not applied by nvdeploy: give GPU instance "
                              "profiles, each gets its full compute instance", file, (line_of(wanted, name) or 0)
                              + offset, name)
        if not isinstance(name, str) or not PROFILE_NAME.fullmatch(name):
            raise ConfigError("is not a GPU instance profile name (1g.10gb, 3g.40gb, 1g.5gb+me)", file,
                              (line_of(wanted, name) or 0) + offset, str(name))
        if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= MAX_INSTANCES:
            raise ConfigError(f"must be a count of instances 0-{MAX_INSTANCES}, got {count!r}", file,
                              (line_of(wanted, name) or 0) + offset, name)
        if count:
            instances.append((name, count))
    if instances and not enabled:
        raise ConfigError("mig-devices given with mig-enabled: false (instances need MIG mode)", file,
                          at("mig-devices"), "mig-devices")
    return MigEntry(selected, tuple(device_of(f) for f in filters), enabled, tuple(instances), line)


def parse_config(data: Any, file: str, offset: int = 0) -> dict[str, MigLayout]:
    """Every layout of a mig-parted config (already read as YAML); ConfigError on bad input."""
    if isinstance(data, dict) and data.get("kind") == "ConfigMap" and isinstance(data.get("data"), dict):
        texts = [(k, v) for k, v in data["data"].items() if isinstance(v, str)]
        if len(texts) != 1:
            raise ConfigError("a ConfigMap with a MIG config holds exactly one file under data (config.yaml)", file,
                              line_of(data, "data"), "data")
        key, text = texts[0]
        # A block scalar starts on the line after its key: the embedded file's line 1.
        start = line_of(data["data"], key) or 0
        return parse_config(load_yaml_text(text, file), file, start)
    if not isinstance(data, dict):
        raise ConfigError("a MIG config is a mapping with version: v1 and mig-configs", file, line_of(data))
    for key in data:
        if key not in ("version", "mig-configs"):
            raise ConfigError("unknown top-level key of a MIG config (known: version, mig-configs)", file,
                              (line_of(data, key) or 0) + offset, str(key))
    if data.get("version") != VERSION:
        raise ConfigError(f"must be {VERSION}, got {data.get('version')!r}", file,
                          (line_of(data, "version") or 1) + offset, "version")
    configs = data.get("mig-configs")
    if not isinstance(configs, dict) or not configs:
        raise ConfigError("must be a mapping of layout names to lists of items", file,
                          (line_of(data, "mig-configs") or 1) + offset, "mig-configs")
    layouts = {}
    for name, items in configs.items():
        line = (line_of(configs, name) or 0) + offset
        if not isinstance(name, str) or not name:
            raise ConfigError("a layout name is a string", file, line, str(name))
        if not isinstance(items, list) or not items:
            raise ConfigError("a layout is a list of items (devices, mig-enabled, mig-devices)", file, line, name)
        layouts[name] = MigLayout(name, tuple(_entry(item, file, name, items, i, offset) for i, item in
                                              enumerate(items)), file)
    return layouts


_CACHE: dict[tuple[str, int, int], dict[str, MigLayout]] = {}


def load_config(path: Union[str, Path]) -> dict[str, MigLayout]:
    """The layouts of a mig-parted config file (read again only when the file changed)."""
    file = str(path)
    try:
        stat = os.stat(file)
    except OSError as exc:
        raise ConfigError(f"cannot read the MIG config: {exc.strerror}", file) from None
    key = (os.path.abspath(file), stat.st_mtime_ns, stat.st_size)
    if key not in _CACHE:
        _CACHE[key] = parse_config(load_yaml_file(file), file)
    return _CACHE[key]


def config_path(host_vars: Mapping[str, Any], inventory_file: str = "") -> Optional[str]:
    """``mig_config_file`` as a path on the controller: relative to the inventory's folder."""
    value = host_vars.get("mig_config_file")
    if not value:
        return None
    path = Path(str(value)).expanduser()
    if not path.is_absolute() and inventory_file and not inventory_file.startswith("ansible:"):
        path = Path(inventory_file).resolve().parent / path
    return str(path)


def host_layout(host_vars: Mapping[str, Any], inventory_file: str = "") -> Optional[MigLayout]:
    """The layout ``mig_config`` names for a host (from ``mig_config_file`` or the built-ins); None when it names
    none. ConfigError when the file is bad or lacks the name."""
    name = host_vars.get("mig_config")
    if not name:
        return None
    path = config_path(host_vars, inventory_file)
    layouts = load_config(path) if path else builtin_layouts()
    if name not in layouts:
        where = f"in {path}" if path else "built in (set mig_config_file to the mig-parted config that defines it)"
        raise ConfigError(f"unknown MIG layout {name!r} {where}; known: {', '.join(sorted(layouts))}")
    return layouts[name]


def check_hosts(hosts: Any, inventory_file: str) -> list[Any]:
    """The inventory's hosts with ``mig_config_file`` made absolute, every named layout read and checked first (a bad
    file or an unknown name is a ConfigError before any connection)."""
    from dataclasses import replace

    out = []
    for host in hosts:
        named, path = host.vars.get("mig_config"), config_path(host.vars, inventory_file)
        if path and not named:
            raise ConfigError("mig_config_file is set but mig_config names no layout of it", host.file,
                              host.var_lines.get("mig_config_file", host.line), "mig_config_file")
        if named:
            try:
                host_layout({**host.vars, "mig_config_file": path}, "")
            except ConfigError as exc:
                if exc.file is not None:
                    raise
                raise ConfigError(exc.message, host.file, host.var_lines.get("mig_config", host.line),
                                  "mig_config") from None
        if path and path != host.vars.get("mig_config_file"):
            host = replace(host, vars={**host.vars, "mig_config_file": path})
        out.append(host)
    return out
