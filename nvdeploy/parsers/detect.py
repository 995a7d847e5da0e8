"""Recognise which tool printed a capture, and map format names to their parsers.

``detect_format`` looks only at content (never a file name). Distinctive signatures are tried first (XML root,
DCGM JSON keys, table headers, pasted ``dcgmi diag`` rows and JSON pieces, ibstat device lines, Xid lines), looser
ones last (``Key : value`` lines of ``nvidia-smi -q`` excerpts, CSV headers, bare kernel-log timestamps). Never
raises.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from nvdeploy.parsers import (
    dcgm,
    dcgm_health,
    dcgm_mndiag,
    ibstat,
    imex,
    kmsg,
    mig,
    nccl_tests,
    nvbandwidth,
    nvidia_smi,
    nvlink,
    nvloom,
    perftest,
    topo,
)


def _nvbandwidth(text: str) -> Any:
    """nvbandwidth's run, or an empty one saying why (its parser answers None for text that is neither form)."""
    run = nvbandwidth.parse_nvbandwidth(text)
    return run if run is not None else nvbandwidth.NvbRun("text", error="no nvbandwidth output found")


FORMATS: dict[str, Callable[[str], Any]] = {
    "nvidia-smi-xml": nvidia_smi.parse_xml_pasted,
    "nvidia-smi-text": nvidia_smi.parse_text,
    "nvidia-smi-csv": nvidia_smi.parse_csv,
    "nvidia-smi-topo": topo.parse_topo,
    "nvidia-smi-nvlink": nvlink.parse_nvlink,
    "dcgmi-diag": dcgm.parse_dcgm_diag,
    "dcgmi-discovery": dcgm.parse_dcgm_discovery,
    "dcgmi-health": dcgm_health.parse_dcgm_health,
    "nccl-tests": nccl_tests.parse_nccl_tests,
    "ibstat": ibstat.parse_ibstat,
    "kmsg": kmsg.parse_kmsg,
    "nvbandwidth": _nvbandwidth,
    "perftest": perftest.parse_perftest,
    "nvidia-smi-mig": mig.parse_mig,
    # The NVLink domain tools (GB200/GB300 NVL72): formats of their own, not a node collector's.
    "dcgmi-mndiag": dcgm_mndiag.parse_mndiag,
    "nvloom": nvloom.parse_nvloom,
    "nvidia-imex-ctl": imex.parse_imex_ctl,
}

_M = re.MULTILINE
_I = re.IGNORECASE
# (format, pattern): the first format with a matching pattern wins; order matters.
_SIGNATURES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("nvidia-smi-xml", re.compile(r"<nvidia_smi_log\b")),
    # a pasted piece of -q -x output: a <gpu id=...> element or a GPU-level element, without the root
    ("nvidia-smi-xml", re.compile(r"<(?:gpu\s+id\s*=|product_name>|ecc_errors>|ecc_mode>|fb_memory_usage>|"
                                  r"(?:sram|dram)_(?:un)?correctable>|clocks_(?:event|throttle)_reasons>|"
                                  r"retired_pages>|remapped_rows>|pci_gpu_link_info>|gpu_power_readings>|"
                                  r"attached_gpus>)")),
    # dcgmi health -c [-j], or its -s line / not-enabled error alone
    ("dcgmi-health", re.compile(r"Health Monitor Report|^Health monitor systems set successfully\."
                                r"|^Error: Health watches not enabled"
                                # a pasted piece of the table: a system row of an entity's errors
                                r"|^\|\s{4,12}-> (?:PCIe|NVLINK|Memory|SM|InfoROM|Thermal|Power|ConnectX) system\s+\|"
                                r"\s*(?:Healthy|Warning|Failure)\b", _M)),
    # dcgmi mndiag --json names itself in dcgmi diag's key, and its results carry host_id (two trays' GPU 1 are
    # two GPUs): read as dcgmi diag, they merged.
    ("dcgmi-mndiag", re.compile(r"\"DCGM Diagnostic\"\s*:\s*\"DCGM Multi-Node Diagnostic\"")),
    # nvloom_cli: its banner, a Process line, a testcase error, a bisect row (i->peer)
    ("nvloom", re.compile(r"^nvloom_cli\s+\d|^Process\s+\d+\s+\([^)\n]*\):\s+device\s+-?\d+:.*;\s+rackGuid:"
                          r"|^Error running testcase \S+:|^\d{1,6}->\d{1,6}\t", _M)),
    # nvidia-imex-ctl -N -j (a node's connections), -N (its legend, matrix, domain state)
    ("nvidia-imex-ctl", re.compile(r"\"connections\"\s*:\s*\{\s*\"\d+\"\s*:|^Connectivity Table Legend:"
                                   r"|^\s*Nodes From\\To\b|^Domain State:\s*[A-Z]+\s*$", _M)),
    # nvidia-imex-ctl -q: the daemon's state word, alone
    ("nvidia-imex-ctl", re.compile(r"\A\s*(?:" + "|".join(imex.IMEX_STATES) + r")\s*\Z")),
    ("dcgmi-diag", re.compile(r"\"DCGM (?:GPU )?Diagnostic\"\s*:|\"test_categories\"\s*:")),
    ("dcgmi-diag", re.compile(r"^\s*\|\s*Diagnostic\s*\|\s*Result\s*\||^\s*[|+]-+\s+Deployment\s+-+[+|]"
                              r"|^Successfully ran diagnostic", _M)),
    # a pasted piece of the table: a category divider, a per-GPU verdict cell, a DCGM 4 entity row, a test row
    ("dcgmi-diag", re.compile(r"^\s*[|+]-{3,}\s+(?:Metadata|Integration|Hardware|Stress|Custom|Performance)\s+-{3,}[+|]"
                              r"|^\s*\|[^|\n]*\|\s*(?:Pass|Fail|Warn|Skip)\s+-\s+(?:All\b|GPUs?\s*:\s*\d)"
                              r"|^\s*\|\s*\|\s*(?:GPU|CPU)\s?\d{1,4}\s*:\s*(?:Pass|Fail|Warn|Skip)\b"
                              r"|^\s*\|\s*(?:GPU Memory|PCIe|Targeted Stress|Targeted Power|Memory Bandwidth|Memtest|"
                              r"Pulse Test|EUD Test|SM Stress|Denylist|Blacklist|NVML Library|CUDA Main Library|"
                              r"Persistence Mode|Page Retirement/Row Remap|Graphics Processes|Inforom|software|memory|"
                              r"pcie|diagnostic|targeted_stress|targeted_power|memory_bandwidth|nvbandwidth)\s*\|"
                              r"\s*(?:Pass|Fail|Warn|Skip)\b", _M)),
    ("dcgmi-discovery", re.compile(r"^\s*\d+\s+(?:GPUs?|NvSwitch(?:es)?)\s+found\.|^\s*\|\s*GPU ID\s*\|"
                                   r"|^\s*\|\s*Instance Hierarchy\s*\|"
                                   # a pasted GPU row of the table, without its header
                                   r"|^\s*\|\s*\d{1,4}\s*\|\s*(?:Name|PCI Bus ID|Device UUID)\s*:", _M)),
    # nvbandwidth's banner or a testcase line, text or -j JSON
    ("nvbandwidth", re.compile(r"^nvbandwidth Version:|^Running (?:host|device|all|one)_to_\w{1,60}_(?:ce|sm)\.\s*$"
                               r'|"nvbandwidth"\s*:\s*\{', _M)),
    # perftest (ib_write_bw, ib_read_bw, ib_send_bw): the test banner, the result header, the server's wait
    ("perftest", re.compile(r"^\s*(?:RDMA_(?:Write|Read)|Send) BW Test\s*$|#bytes\s+#iterations\s+BW peak\["
                            r"|^\*\s*Waiting for client to connect\.\.\.\s*\*", _M)),
    ("nccl-tests", re.compile(r"^\W{0,20}#\s*nThread\s+\d|Avg bus bandwidth\s*:|#\s+out-of-place\s+in-place"
                              r"|Test (?:NCCL|CUDA) failure|Collective test starting", _M)),
    # result rows pasted without the header: size, count, a data type, [redop, root,] then time/algbw/busbw/#wrong
    ("nccl-tests", re.compile(r"^(?:\[\d{1,6},\d{1,6}\]<std(?:out|err)>:|\s{0,4}\d{1,6}:)?\s{0,20}\d{1,20}\s{1,20}"
                              r"\d{1,20}\s{1,20}(?:u?int(?:8|32|64)|half|float|double|bfloat16|fp8_e[45]m[23])\s{1,20}"
                              r"(?:[a-z]{3,9}\s{1,20})?(?:-?\d{1,6}\s{1,20})?(?:[\d.]{1,20}\s{1,20}){3}(?:\d{1,20}|N/A)\b",
                              _M)),
    ("ibstat", re.compile(r"^\s*CA\s+'[^']+'\s*$|^\s*hca_id\s*:|^\s*Infiniband device\s+'[^']+'\s+port"
                          # an ibstat port block pasted without its CA line
                          r"|^\s*Port\s+\d{1,3}:\s*\n\s*State:\s*(?:Active|Down|Initializing|Armed)\s*$", _M | _I)),
    ("kmsg", re.compile(r"NVRM: Xid\b|\bXid\s*\(PCI:|\bSXid\s*\(")),
    ("nvidia-smi-text", re.compile(r"=+\s*NVSMI LOG\s*=+|^\s*Attached GPUs\s*:|"
                                   r"NVIDIA-SMI\s+\S+\s+(?:Driver|KMD) Version:", _M)),
    # nvidia-smi mig -lgip / -lgi / -lci: a table title, or a profile / instance row without it
    ("nvidia-smi-mig", re.compile(r"^\|\s*(?:GPU instance(?: profile)?s|Compute instance(?: profile)?s):\s*\|"
                                  r"|^Successfully (?:created|destroyed) (?:GPU|compute) instance ID\s{0,3}\d"
                                  r"|^GPU\s{1,4}\d{1,4}\s+Profile ID\s{1,4}\d{1,4}\s+Placements?\s*:"
                                  r"|^No GPU instances found: |^Unable to (?:create|destroy) (?:a )?(?:GPU|compute) "
                                  r"instance"
                                  r"|^\|\s{0,8}\d{1,4}\s+MIG\s+\S{1,40}\s+\d{1,4}\s+"
                                  r"(?:\d{1,4}/\d{1,4}|\d{1,4}\s+\d{1,4}:\d{1,4})\s"
                                  r"|^\|\s{0,8}\d{1,4}\s+\d{1,4}\s+MIG\s+\S{1,40}\s+\d{1,4}\s+\d{1,4}\s", _M)),
    ("nvidia-smi-text", nvidia_smi.TABLE_ROW_RE),  # default-table rows without the table's title
    ("nvidia-smi-topo", re.compile(r"^\s*GPU0\b.*\b(?:CPU Affinity|NUMA Affinity|GPU\d+)\b"
                                   # matrix rows without the header
                                   r"|^\s*GPU\d{1,4}(?:\s{1,20}(?:X|NV\d{1,3}|SYS|NODE|PHB|PXB|PIX)\b){2}", _M)),
    ("nvidia-smi-nvlink", re.compile(r"^\s*Link\s+\d+\s*:\s*(?:[\d.]+\s*[GMT]?B/s|<inactive>)"
                                     r"|nvlink (?:queries|information)|does not have or support nvlink", _M | _I)),
)
_SMI_KEYS_RE = re.compile(
    r"^\s*(?:Product Name|Product Brand|Driver Version|CUDA Version|GPU UUID|Bus Id|Persistence Mode|VBIOS Version|"
    r"(?:SRAM|DRAM) (?:Un)?[Cc]orrectable(?: Parity| SEC-DED)?|Remapped Rows|Retired Pages|Single Bit ECC|"
    r"Double Bit ECC|Pending Page Blacklist|Correctable Error|Uncorrectable Error|Minor Number|Fan Speed|"
    r"Performance State|Volatile|Aggregate|ECC Errors)\s*(?::|$)",
    _M,
)
_CSV_CELL_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*(?:\s*\[[^\]]*\])?$")
_CSV_KEYS = {"name", "gpu_name", "pci.bus_id", "gpu_bus_id", "uuid", "gpu_uuid", "index", "serial", "gpu_serial",
             "driver_version", "temperature.gpu", "memory.used", "memory.total", "utilization.gpu", "power.draw"}
_DCGM_STATUS_RE = re.compile(r'"status"\s*:\s*"(?:Pass|Fail|Warn|Skip|Error|Not Run)"', _I)
_DCGM_RESULT_KEY_RE = re.compile(r'"(?:entity_id|entity_group|gpu_ids?|test_summary)"\s*:')
_MNDIAG_KEY_RE = re.compile(r'"(?:host_id|mpi_error)"\s*:')  # keys dcgmi mndiag's results have, dcgmi diag's not
_KMSG_WEAK_RE = re.compile(r"^\s*\[\s*\d+\.\d+\]|^\s*\[[A-Z][a-z]{2} [A-Z][a-z]{2}\s+\d+ [\d:]+ \d{4}\]"
                           r"|^\s*[A-Z][a-z]{2}\s+\d+ [\d:]{8} \S+ kernel:|\bNVRM:", _M)


def _dcgm_json_fragment(text: str) -> bool:
    """A pasted piece of ``dcgmi diag -j`` output: a DCGM verdict ``"status"`` next to a DCGM result key (two
    searches: one pattern spanning both would be quadratic on a large input)."""
    return bool(_DCGM_STATUS_RE.search(text) and _DCGM_RESULT_KEY_RE.search(text))


def _csv_header(text: str) -> bool:
    first = next((line for line in text.split("\n") if line.strip()), "")
    cells = [cell.strip() for cell in first.split(",")]
    if len(cells) < 2 or not all(_CSV_CELL_RE.match(cell) for cell in cells):
        return False
    return any(re.sub(r"\s*\[.*$", "", cell).lower() in _CSV_KEYS for cell in cells)


def detect_format(text: str) -> str | None:
    """Name of the format ``text`` is in (a key of ``FORMATS``), or None when nothing fits. Never raises."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    if not isinstance(text, str) or not text.strip():
        return None
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text.replace("\x00", "").replace("\r\n", "\n"))
    for name, pattern in _SIGNATURES:
        if pattern.search(text):
            return name
    if _dcgm_json_fragment(text):
        return "dcgmi-mndiag" if _MNDIAG_KEY_RE.search(text) else "dcgmi-diag"
    if len(_SMI_KEYS_RE.findall(text)) >= 2:
        return "nvidia-smi-text"
    if _csv_header(text):
        return "nvidia-smi-csv"
    if _KMSG_WEAK_RE.search(text):
        return "kmsg"
    return None
