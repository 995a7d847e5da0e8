"""Format detection: every real capture under tests/fixtures/real/*/ is recognised as its folder's format (pasted
fragments under fragments/ as the format their file name starts with)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from nvdeploy.parsers.detect import FORMATS, detect_format

REAL = Path(__file__).parent.parent / "fixtures" / "real"
FOLDER_FORMAT = {
    "nvidia-smi-xml": "nvidia-smi-xml", "nvidia-smi-text": "nvidia-smi-text", "nvidia-smi-csv": "nvidia-smi-csv",
    "nvidia-smi-topo": "nvidia-smi-topo", "nvidia-smi-nvlink": "nvidia-smi-nvlink", "dcgmi-diag-json": "dcgmi-diag",
    "dcgmi-diag-text": "dcgmi-diag", "nvvs": "dcgmi-diag", "dcgmi-discovery": "dcgmi-discovery",
    "dcgmi-health": "dcgmi-health", "nccl-tests": "nccl-tests", "ibstat": "ibstat", "xid-logs": "kmsg",
    "nvbandwidth": "nvbandwidth", "perftest": "perftest", "nvidia-smi-mig": "nvidia-smi-mig",
    "dcgmi-mndiag": "dcgmi-mndiag", "nvloom": "nvloom", "imex": "nvidia-imex-ctl",
}
FRAGMENTS = "fragments"  # pieces of outputs pasted into tickets: named "<format>-..."
# Other folders hold captures of collectors that `nvdeploy parse` does not read (cuda-toolkits, container...).
FILES = sorted(p for p in REAL.glob("*/*") if p.is_file() and p.parent.name in {*FOLDER_FORMAT, FRAGMENTS})


def _format_of(path: Path) -> str:
    if path.parent.name == FRAGMENTS:
        return max((f for f in FORMATS if path.name.startswith(f + "-")), key=len)
    return FOLDER_FORMAT[path.parent.name]


def test_every_format_has_real_captures() -> None:
    folders = {p.name for p in REAL.iterdir() if p.is_dir()}
    assert set(FOLDER_FORMAT) | {FRAGMENTS} <= folders
    assert set(FOLDER_FORMAT.values()) == set(FORMATS)
    assert set(FORMATS) == {"nvidia-smi-xml", "nvidia-smi-text", "nvidia-smi-csv", "nvidia-smi-topo",
                            "nvidia-smi-nvlink", "dcgmi-diag", "dcgmi-discovery", "dcgmi-health", "nccl-tests",
                            "ibstat", "kmsg", "nvbandwidth", "perftest", "nvidia-smi-mig", "dcgmi-mndiag", "nvloom",
                            "nvidia-imex-ctl"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_fixture_is_detected_and_parses(path: Path) -> None:
    text = path.read_text(encoding="utf-8", errors="replace")
    detected = detect_format(text)
    assert detected == _format_of(path)
    facts = FORMATS[detected](text)
    assert isinstance(facts.to_dict(), dict)


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_detection_survives_crlf_and_bytes(path: Path) -> None:
    raw = path.read_bytes()
    assert detect_format(raw.replace(b"\n", b"\r\n").decode("utf-8", errors="replace")) == _format_of(path)
    assert detect_format(raw) == _format_of(path)  # type: ignore[arg-type]


@pytest.mark.parametrize("text, expected", [
    ("", None), ("   \n\n", None), ("\x00\x00", None), ("hello world\n", None), ("a,b,c\n1,2,3\n", None),
    ("GPU 0: NVIDIA L40S (UUID: GPU-1)\n", None),  # nvidia-smi -L, not an nvlink report
    ("GPU 0: NVIDIA L40S (UUID: GPU-1)\n\t Link 0: <inactive>\n", "nvidia-smi-nvlink"),
    ("[  12.3] NVRM: loading NVIDIA UNIX x86_64 Kernel Module 550.54\n", "kmsg"),
    ("Error: unable to establish a connection to the specified host: localhost\n", None),
    ("index, name, pci.bus_id\n0, NVIDIA H100, 00000000:18:00.0\n", "nvidia-smi-csv"),
    ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0-1\n", "nvidia-smi-topo"),
    # pasted pieces of dcgmi diag output, without the header
    ("|                           | Fail - GPU: 0                                  |\n", "dcgmi-diag"),
    ("| GPU Memory                | Pass                                           |\n", "dcgmi-diag"),
    ("|                           | GPU1: Fail                                     |\n", "dcgmi-diag"),
    ("+-----  Hardware  ----------+------------------------------------------------+\n", "dcgmi-diag"),
    ('"results" : [\n {"entity_group" : "GPU", "entity_id" : 3, "status" : "Fail"},\n', "dcgmi-diag"),
    ('{"gpu_ids" : "0,1", "status" : "Pass"}', "dcgmi-diag"),
    ('{"status": "ok", "entity_id": 4}', None),  # some other tool's JSON
    ("| Name | Pass |\n", None),
    # a default-table GPU row without the table's title: read as a fragment (no GPU count taken from it)
    ("|   0  NVIDIA A100-SXM4-80GB          On  | 00000000:07:00.0 Off |                    0 |\n", "nvidia-smi-text"),
    # nccl-tests result rows without the header; XML without its root
    ("  1073741824     268435456     float     sum      -1   8109.1  132.41  231.72      0   8109.7  132.40  231.70"
     "      0\n", "nccl-tests"),
    ("<ecc_errors>\n<volatile>\n<dram_uncorrectable>2</dram_uncorrectable>\n</volatile>\n", "nvidia-smi-xml"),
])
def test_synthetic_inputs(text: str, expected: str | None) -> None:
    assert detect_format(text) == expected


def test_random_bytes_never_raise() -> None:
    rng = random.Random(1)
    for _ in range(300):
        blob = bytes(rng.randrange(256) for _ in range(rng.randrange(400)))
        result = detect_format(blob.decode("utf-8", errors="replace"))
        assert result is None or result in FORMATS
