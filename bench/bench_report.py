"""Report rendering at fleet scale: a synthetic 2,000-node run, rendered to every output; size and time printed.

    python3 bench/bench_report.py [--nodes 2000] [--bad-pct 5] [--keep DIR]

Each node carries the quick-level checks plus NVLink, PCIe, DCGM and single-node NCCL findings (busbw in GB/s
against the H100 floor), four evidence files, and version facts. ``--bad-pct`` of the nodes fail something
(ECC, Xid 79, remapped rows, NCCL below the floor, unreachable); evidence files are written for them so the
excerpts are real. The HTML budget is 15 MB and "usable in a browser"; this prints the numbers to compare.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nvdeploy.report import render_json  # noqa: E402
from nvdeploy.report.compare import compare_runs  # noqa: E402
from nvdeploy.report.html import render_html  # noqa: E402
from nvdeploy.report.junit import render_junit  # noqa: E402
from nvdeploy.report.prometheus import render_prometheus  # noqa: E402
from nvdeploy.results import (  # noqa: E402
    ErrorReason,
    EvidenceRecord,
    Finding,
    NodeResult,
    Remediation,
    RunResult,
    Verdict,
)

PROFILE = "h100-sxm-8x@2026.11.1"
FLOOR = 452.2
PASSING = [
    ("system.reachable", "connected over ssh in 0.04 s", 0.04, None, "s"),
    ("system.sudo", "sudo -n works", None, None, ""),
    ("driver.loaded", "driver 550.90.07 loaded", "550.90.07", None, ""),
    ("driver.version", "driver 550.90.07 as expected", "550.90.07", "550.90.07", ""),
    ("gpu.count", "8 GPUs", 8, 8, ""),
    ("gpu.model", "all GPUs are NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", ""),
    ("gpu.memory", "every GPU has 81559 MiB", 81559, 81559, "MiB"),
    ("gpu.pci_visible", "8 GPUs on the bus, 8 seen by the driver", 8, 8, ""),
    ("gpu.persistence", "persistence mode enabled on every GPU", "Enabled", "Enabled", ""),
    ("memory.ecc_mode", "ECC enabled on every GPU", "Enabled", "Enabled", ""),
    ("memory.ecc_errors", "no uncorrectable ECC errors", 0, 0, ""),
    ("memory.remapped_rows", "no pending or failed row remapping", None, None, ""),
    ("memory.retired_pages", "GPUs do not report page retirement", None, None, ""),
    ("kmsg.xid", "no Xid events", 0, "no critical Xid", ""),
    ("nvlink.links", "8 GPUs x 18 NVLinks up at 26.562 GB/s", "18 x 26.562 GB/s", "18 x 26.562 GB/s", ""),
    ("pcie.link", "every GPU at Gen5 x16", "Gen5 x16", "Gen5 x16", ""),
    ("dcgm.diag", "dcgmi diag -r 2: all tests passed", "pass", "pass", ""),
]
KMSG = (
    "[    0.000000] Linux version 5.15.0-105-generic\n[   18.204519] NVRM: loading NVIDIA UNIX x86_64 Kernel Module"
    "  550.90.07\n[ 1234.567890] NVRM: GPU at PCI:0000:2a:00: GPU-5ec11f1d\n[ 1234.567890] NVRM: Xid "
    "(PCI:0000:2a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
)


def synthetic_run(
    nodes: int = 2000,
    bad_pct: float = 5.0,
    seed: int = 7,
    run_dir: Path | None = None,
    driver: str = "550.90.07",
    run_id: str = "20261130T000000Z-bench",
) -> RunResult:
    """A reproducible fleet run; writes evidence files for the failing nodes when ``run_dir`` is given."""
    rng = random.Random(seed)
    width = len(str(nodes))
    results = []
    for i in range(1, nodes + 1):
        name = f"gpu{i:0{width}d}"
        node_findings = [
            Finding(
                check,
                Verdict.SKIP if check in ("memory.retired_pages",) else Verdict.PASS,
                summary,
                node=name,
                observed=obs,
                expected=exp,
                unit=unit,
                profile=PROFILE,
                evidence=f"evidence/{name}/nvidia_smi_xml.out",
            )
            for check, summary, obs, exp, unit in PASSING
        ]
        busbw = round(rng.gauss(478.0, 2.5), 1)
        fault = rng.random() * 100 < bad_pct
        kind = rng.choice(["ecc", "xid79", "remap", "nccl", "unreachable", "persistence"]) if fault else ""
        if kind == "unreachable":
            node_findings = [
                Finding(
                    "system.reachable",
                    Verdict.ERROR,
                    "connect timed out after 10 s",
                    node=name,
                    reason=ErrorReason.UNREACHABLE,
                )
            ]
        else:
            if kind == "nccl":
                busbw = round(rng.uniform(300, 440), 1)
            verdict = Verdict.FAIL if busbw < FLOOR else Verdict.PASS
            node_findings.append(
                Finding(
                    "nccl.all_reduce",
                    verdict,
                    f"all_reduce busbw {busbw:g} GB/s at 8 GiB"
                    + (f" below the floor {FLOOR:g} GB/s" if verdict is Verdict.FAIL else f" >= floor {FLOOR:g} GB/s"),
                    node=name,
                    observed=busbw,
                    expected=f">= {FLOOR:g}",
                    unit="GB/s",
                    profile=PROFILE,
                    remediation=Remediation.INVESTIGATE if verdict is Verdict.FAIL else Remediation.NONE,
                    evidence=f"evidence/{name}/nccl_all_reduce.out",
                )
            )
            extra = {
                "ecc": Finding(
                    "memory.ecc_errors",
                    Verdict.FAIL,
                    "GPU3 (00000000:5D:00.0): 2 volatile uncorrectable ECC error(s)",
                    node=name,
                    observed=2,
                    expected=0,
                    gpu=3,
                    profile=PROFILE,
                    remediation=Remediation.RESET_GPU,
                    evidence=f"evidence/{name}/nvidia_smi_xml.out",
                ),
                "xid79": Finding(
                    "kmsg.xid",
                    Verdict.FAIL,
                    "Xid 79 x1 on 0000:2a:00: GPU has fallen off the bus",
                    node=name,
                    observed="Xid 79 x1",
                    expected="no critical Xid",
                    profile=PROFILE,
                    remediation=Remediation.ISOLATE,
                    evidence=f"evidence/{name}/kmsg.out",
                ),
                "remap": Finding(
                    "memory.remapped_rows",
                    Verdict.FAIL,
                    "GPU2 (00000000:3A:00.0): row remapping pending: reset the GPU to apply it",
                    node=name,
                    observed="pending",
                    expected="none pending",
                    gpu=2,
                    profile=PROFILE,
                    remediation=Remediation.RESET_GPU,
                    evidence=f"evidence/{name}/nvidia_smi_xml.out",
                ),
                "persistence": Finding(
                    "gpu.persistence",
                    Verdict.FAIL,
                    "persistence mode disabled on 8 of 8 GPUs",
                    node=name,
                    observed="Disabled",
                    expected="Enabled",
                    profile=PROFILE,
                    remediation=Remediation.TUNE,
                    evidence=f"evidence/{name}/nvidia_smi_xml.out",
                ),
            }.get(kind)
            if extra is not None:
                node_findings = [f for f in node_findings if f.check != extra.check] + [extra]
        evidence = tuple(
            EvidenceRecord(c, c, f"evidence/{name}/{c}.out", 0, 4096, False, "0" * 64, 0.1)
            for c in ("nvidia_smi_xml", "lspci", "kmsg", "nccl_all_reduce")
        )
        facts = {
            "driver_version": driver,
            "cuda_version": "12.4",
            "gpu_count": 8,
            "gpu_model": "NVIDIA H100 80GB HBM3",
            "nccl_version": "2.21.5",
            "dcgm_version": "3.3.6",
            "vbios_version": "96.00.74.00.1C",
        }
        if kind == "unreachable":
            facts, evidence = {}, ()
        if run_dir is not None and fault and kind != "unreachable":
            folder = run_dir / "evidence" / name
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "kmsg.out").write_text(KMSG)
            (folder / "nccl_all_reduce.out").write_text(
                "#  size  count type redop root time algbw busbw #wrong\n"
                f"8589934592 2147483648 float sum -1 33480 256.5 {busbw} 0\n"
            )
            gpus = "".join(
                f'<gpu id="00000000:{bus}:00.0"><ecc_errors><volatile><dram_uncorrectable>'
                f"{2 if kind == 'ecc' and bus == '5D' else 0}</dram_uncorrectable></volatile></ecc_errors>"
                "</gpu>\n"
                for bus in ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")
            )
            (folder / "nvidia_smi_xml.out").write_text(
                f"<nvidia_smi_log>\n<driver_version>{driver}</driver_version>"
                f"\n<attached_gpus>8</attached_gpus>\n{gpus}</nvidia_smi_log>\n"
            )
        results.append(
            NodeResult(
                name,
                tuple(node_findings),
                address=f"10.0.{i // 250}.{i % 250}",
                profile=PROFILE,
                connection="ssh",
                duration_s=round(rng.uniform(2, 9), 2),
                evidence=evidence,
                facts=facts,
            )
        )
    return RunResult(
        run_id,
        "fleet",
        "validate",
        tuple(results),
        started_at="2026-11-30T00:00:00+00:00",
        finished_at="2026-11-30T00:04:12+00:00",
        duration_s=252.0,
        level="standard",
        profiles={"h100-sxm-8x": PROFILE},
        nvdeploy_version="0.1.0",
        inventory="inventories/fleet.yaml",
        user="ops",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--bad-pct", type=float, default=5.0)
    parser.add_argument("--keep", type=Path, default=None, help="Write report.html (and evidence) into this folder.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = args.keep or Path(tmp)
        run_dir.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        run = synthetic_run(args.nodes, args.bad_pct, run_dir=run_dir)
        base = synthetic_run(args.nodes, args.bad_pct, seed=3, driver="535.161.08", run_id="20260830T000000Z-bench")
        print(
            f"synthetic runs of {args.nodes} nodes built in {time.perf_counter() - started:.2f} s; "
            f"{run.counts()['FAIL']} FAIL, {run.counts()['ERROR']} ERROR, verdict {run.verdict.value}"
        )
        started = time.perf_counter()
        diff = compare_runs(base, run)
        print(f"compare_runs: {time.perf_counter() - started:.2f} s ({diff.headline()})")
        outputs = [
            ("report.html", lambda: render_html(run, run_dir=run_dir)),
            ("report.html with baseline", lambda: render_html(run, diff=diff, run_dir=run_dir)),
            ("results.json", lambda: render_json(run)),
            ("junit.xml", lambda: render_junit(run)),
            ("nvdeploy.prom", lambda: render_prometheus(run).encode()),
        ]
        for name, render in outputs:
            started = time.perf_counter()
            data = render()
            elapsed = time.perf_counter() - started
            print(f"{name:26} {len(data) / 1e6:7.2f} MB  rendered in {elapsed:5.2f} s")
            if name == "report.html with baseline" and args.keep:
                (run_dir / "report.html").write_bytes(data)
        if args.keep:
            print(f"kept: {run_dir / 'report.html'}")


if __name__ == "__main__":
    main()
