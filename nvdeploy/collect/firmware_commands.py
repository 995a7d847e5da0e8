"""The one collector firmware.* adds to the light batch: the system BIOS, the board and the BMC's firmware.

The GPUs' VBIOS, InfoROM and GSP firmware come from ``nvidia-smi -q -x`` and the ConnectX firmware from ``ibstat``,
which the light batch already runs; this adds one ``find`` over world-readable sysfs files, each printed after a
marker line: /sys/class/dmi/id (no root: ``dmidecode`` needs it, and the serial-number files are root-only) and the
BMC's firmware revision as the kernel's IPMI driver read it from the BMC's Get Device ID answer (ipmi_msghandler's
``firmware_revision``, mode 0444: no root, no ``ipmitool``, no daemon; present where ipmi_si is loaded). No shell:
the paths are find's own words. A file the kernel does not provide (no SMBIOS, no IPMI interface) is named on
stderr, exit 1.
"""

from __future__ import annotations

from nvdeploy.collect.collector import Collector
from nvdeploy.collect.stack_commands import MARKER_FORMAT

DMI_FIRMWARE = "dmi_firmware"
# nvdeploy/parsers/firmware.py reads these files by name.
DMI_DIR = "/sys/class/dmi/id"
DMI_FILES = ("bios_version", "bios_date", "board_name")
# The first IPMI interface's BMC device (the ``bmc`` link the IPMI driver makes beside the system interface).
BMC_FIRMWARE_FILE = "/sys/class/ipmi/ipmi0/device/bmc/firmware_revision"
DMI_FIND_ARGV = (
    "find", *(f"{DMI_DIR}/{name}" for name in DMI_FILES), BMC_FIRMWARE_FILE, "-maxdepth", "0",
    "-printf", MARKER_FORMAT, "-exec", "cat", "{}", ";",
)
DMI = Collector(DMI_FIRMWARE, DMI_FIND_ARGV, 20.0,
                description="the system BIOS version and date, the board name (/sys/class/dmi/id) and the BMC's "
                "firmware revision (the IPMI driver's sysfs file), no root")

# This module's part of the catalog, in the order `nvdeploy/collect/catalog.py` lists it.
COLLECTORS: tuple[Collector, ...] = (DMI,)
