"""The one collector firmware.* adds to the light batch: the system BIOS and board from DMI.

The GPUs' VBIOS, InfoROM and GSP firmware come from ``nvidia-smi -q -x`` and the ConnectX firmware from ``ibstat``,
which the light batch already runs; this adds one ``find`` over the world-readable files of /sys/class/dmi/id (no
root: ``dmidecode`` needs it, and the serial-number files are root-only), each printed after a marker line. No
shell: the paths are find's own words. A file the kernel does not provide (no SMBIOS) is named on stderr, exit 1.
"""

from __future__ import annotations

from nvdeploy.collect.collector import Collector
from nvdeploy.collect.stack_commands import MARKER_FORMAT

DMI_FIRMWARE = "dmi_firmware"
# nvdeploy/parsers/firmware.py reads these files by name.
DMI_DIR = "/sys/class/dmi/id"
DMI_FILES = ("bios_version", "bios_date", "board_name")
DMI_FIND_ARGV = (
    "find", *(f"{DMI_DIR}/{name}" for name in DMI_FILES), "-maxdepth", "0",
    "-printf", MARKER_FORMAT, "-exec", "cat", "{}", ";",
)
DMI = Collector(DMI_FIRMWARE, DMI_FIND_ARGV, 20.0,
                description="the system BIOS version and date and the board name (/sys/class/dmi/id, no root)")

# This module's part of the catalog, in the order `nvdeploy/collect/catalog.py` lists it.
COLLECTORS: tuple[Collector, ...] = (DMI,)
