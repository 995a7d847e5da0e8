"""perftest bandwidth output (``ib_write_bw``, ``ib_read_bw``, ``ib_send_bw``), pure.

Real layout (client side; the server prints the same table)::

    initializing CUDA                                  <- only with --use_cuda
    ...
    [pid = 1, dev = 0] device name = [Tesla T4]
    cuMemAlloc() of a 33554432 bytes GPU buffer
    ---------------------------------------------------------------------------------------
                        RDMA_Write BW Test
     Dual-port       : OFF          Device         : mlx5_0
     ...
     Link type       : Ethernet
    ---------------------------------------------------------------------------------------
     #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
     65536      560960           0.00               98.03              0.186974
    ---------------------------------------------------------------------------------------

The dashes after the rows close the table: output without them was cut off (the run is not complete). With
``-D`` (a duration) the peak is not measured and prints 0.00; the average is the figure. ``--report_gbits``
gives Gb/s; without it the header says ``[MB/sec]`` (MiB/s, converted here).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

_HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[(Gb|MB)/sec\]\s+BW average\[(?:Gb|MB)/sec\]")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)(?:\s+([0-9.]+))?\s*$")
_DASHES = re.compile(r"^-{20,}\s*$")
_TEST = re.compile(r"^\s*(\S.* (?:BW|Latency) Test)\s*$")
_DEVICE = re.compile(r"Device\s*:\s*(\S+)")
_LINK = re.compile(r"Link type\s*:\s*(\S+)")
_GPU = re.compile(r"device name = \[(.+)\]")
# Lines perftest prints when it cannot run or connect.
# set_link_layer() in perftest's perftest_resources.c, when the port it was given is not ACTIVE (then " Couldn't set
# the link layer" and exit 1): the local port is down, so this side of the run is the one to blame.
_PORT_STATE = re.compile(r"^\s*Port number (\d+) state is (\S.*?)\s*$")
_ERRORS = re.compile(r"(Couldn't|Unable to|Failed to|failed|ERROR|Error|No IB devices|not supported|Segmentation)",
                     re.I)


@dataclass(frozen=True)
class PerftestRow:
    size_bytes: int
    iterations: int
    peak_gbps: float
    average_gbps: float


@dataclass(frozen=True)
class PerftestResult:
    test: Optional[str] = None
    device: Optional[str] = None
    link_type: Optional[str] = None
    cuda: bool = False
    gpu_name: Optional[str] = None
    rows: tuple[PerftestRow, ...] = ()
    complete: bool = False
    errors: tuple[str, ...] = field(default_factory=tuple)
    # (port, state) from " Port number 1 state is Down": the device's port was not Active, nothing was measured.
    port_state: Optional[tuple[int, str]] = None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "bw_gbps": self.bw_gbps}

    @property
    def bw_gbps(self) -> Optional[float]:
        """The average bandwidth of the largest message size (the figure judged)."""
        if not self.rows:
            return None
        return max(self.rows, key=lambda r: r.size_bytes).average_gbps


def parse_perftest(text: str) -> PerftestResult:
    """Never raises; ``complete`` only when the table was closed by its dashes."""
    test = device = link = gpu = None
    cuda = False
    rows: list[PerftestRow] = []
    errors: list[str] = []
    in_table = False
    complete = False
    scale = 1.0
    port_state: Optional[tuple[int, str]] = None
    for line in text.splitlines():
        match = _PORT_STATE.match(line)
        if match and port_state is None:
            port_state = (int(match.group(1)), match.group(2))
            errors.append(line.strip()[:200])
            continue
        if "initializing CUDA" in line:
            cuda = True
        match = _GPU.search(line)
        if match:
            gpu = match.group(1)
        match = _TEST.match(line)
        if match and test is None:
            test = match.group(1)
        if device is None:
            match = _DEVICE.search(line)
            device = match.group(1) if match else None
        if link is None:
            match = _LINK.search(line)
            link = match.group(1) if match else None
        header = _HEADER.search(line)
        if header:
            in_table = True
            scale = 1.0 if header.group(1) == "Gb" else 8 * 1.048576 / 1000  # MiB/s -> Gb/s
            continue
        if in_table:
            row = _ROW.match(line)
            if row:
                rows.append(PerftestRow(int(row.group(1)), int(row.group(2)), round(float(row.group(3)) * scale, 4),
                                        round(float(row.group(4)) * scale, 4)))
                continue
            if _DASHES.match(line) and rows:
                complete = True
                in_table = False
                continue
        if _ERRORS.search(line) and not line.lstrip().startswith(("WARNING", "#")):
            errors.append(line.strip()[:200])
    return PerftestResult(test, device, link, cuda, gpu, tuple(rows), complete, tuple(errors), port_state)
