"""What nvidia-smi says about a node and each GPU: the frozen facts every nvidia-smi parser returns."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

_Tree = dict[tuple[str, ...], str]


@dataclass(frozen=True)
class GpuFacts:
    """What nvidia-smi said about one GPU. ``index`` is the nvidia-smi index (None when the input is partial)."""

    index: int | None = None
    name: str | None = None
    uuid: str | None = None
    serial: str | None = None
    pci_bus_id: str | None = None
    pci_device_id: str | None = None  # 0x233010DE: device and vendor (MIG layouts' device-filter)
    persistence_mode: bool | None = None
    ecc_mode: bool | None = None
    ecc_uncorrectable_volatile: int | None = None
    ecc_uncorrectable_aggregate: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    remapped_rows_uncorrectable: int | None = None
    retired_pages_pending: bool | None = None
    retired_pages_double_bit: int | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    memory_total_mib: int | None = None
    temperature_c: float | None = None
    power_limit_w: float | None = None
    default_power_limit_w: float | None = None
    mig_mode: bool | None = None
    clocks_event_reasons_active: tuple[str, ...] = ()
    # NVLink fabric registration and health (Hopper and later on NVSwitch systems, DTD v13; N/A elsewhere). The
    # health flags are True/False as the driver reports them, None when it says N/A or Not Supported.
    fabric_state: str | None = None
    fabric_status: str | None = None
    fabric_clique_id: int | None = None
    fabric_cluster_uuid: str | None = None
    fabric_health_summary: str | None = None
    fabric_bandwidth: str | None = None
    fabric_route_recovery_in_progress: bool | None = None
    fabric_route_unhealthy: bool | None = None
    fabric_access_timeout_recovery: bool | None = None
    fabric_incorrect_configuration: str | None = None
    fabric_partition_assigned: bool | None = None
    # What the driver asks for before the GPU is usable again ("None", "Reset", "Reboot", "Drain P2P"...).
    gpu_recovery_action: str | None = None
    # Where the GPU sits in a rack-scale system (Grace-Blackwell platformInfo): chassis, slot, tray, module.
    chassis_serial: str | None = None
    slot_number: int | None = None
    tray_index: int | None = None
    module_id: int | None = None
    c2c_mode: bool | None = None
    # The GPU answered "GPU is lost" (NVML_ERROR_GPU_IS_LOST): it is gone until the node is rebooted.
    lost: bool = False
    # (field, NVML error name) for each field the tool tried and failed to read: UNKNOWN, GPU_IS_LOST,
    # RESET_REQUIRED, NO_PERMISSION... "Not supported" is not an error: the field is just None.
    errors: tuple[tuple[str, str], ...] = ()
    # Of pasted text (-q, the default table, CSV) and fragments: the fields above whose lines, cells, columns or
    # tags the input printed, N/A included. Empty for whole XML: a field it leaves out is one the GPU does not
    # report; a field pasted text leaves out is only not in the text.
    shown: tuple[str, ...] = ()

    def error(self, name: str) -> str | None:
        """NVML's error name for field ``name`` when reading it failed; None when it was read or unsupported."""
        return next((err for field_name, err in self.errors if field_name == name), None)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["clocks_event_reasons_active"] = list(self.clocks_event_reasons_active)
        out["errors"] = {name: err for name, err in self.errors}
        if self.shown:
            out["shown"] = list(self.shown)
        else:
            del out["shown"]
        return out


@dataclass(frozen=True)
class SmiFacts:
    driver_version: str | None = None
    cuda_version: str | None = None
    gpu_count_reported: int | None = None
    gpus: tuple[GpuFacts, ...] = ()
    warnings: tuple[str, ...] = ()
    format: str = "text"
    # A piece of an output, not all of it: XML without its root; -q text without ``Attached GPUs``, with fewer
    # GPU sections than that, or with '[...]' elisions; table rows without the title. What a piece does not show
    # says nothing about the node.
    fragment: bool = False

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(gpus=[g.to_dict() for g in self.gpus], warnings=list(self.warnings))
        return out


# ---------------------------------------------------------------------------------------------- value helpers

