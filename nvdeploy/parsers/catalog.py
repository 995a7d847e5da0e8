"""Typed facts from the catalog collectors (NVLink, topology, fabric manager, InfiniBand, modules, versions, DCGM,
nccl-tests); pure, called by :func:`nvdeploy.parsers.facts.node_facts`.

A collector that did not run, did not finish, or whose tool is missing (exit 127) gives None: the checks read the
raw result to say why. Output that completed is parsed whatever the exit status (``dcgmi diag`` exits 226 when a
test failed; ``all_reduce_perf`` exits 1 when the data check or the bandwidth gate failed).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

from nvdeploy.parsers.compute_apps import parse_compute_apps
from nvdeploy.parsers.container import docker_run_gpus, parse_cdi_list, parse_container_setup
from nvdeploy.parsers.cuda_install import parse_cuda_install
from nvdeploy.parsers.dcgm import parse_dcgm_diag, parse_dcgm_discovery
from nvdeploy.parsers.dcgm_health import parse_dcgm_health
from nvdeploy.parsers.firmware import node_firmware, parse_dmi
from nvdeploy.parsers.ibstat import parse_ibstat
from nvdeploy.parsers.imex import parse_imex_files, parse_imex_query
from nvdeploy.parsers.mig import parse_mig
from nvdeploy.parsers.nccl_tests import parse_nccl_tests
from nvdeploy.parsers.nvbandwidth import parse_nvbandwidth
from nvdeploy.parsers.nvlink import parse_nvlink
from nvdeploy.parsers.stack import (
    parse_dcgmi_version,
    parse_fabricmanager_version,
    parse_kernel_driver,
    parse_lsmod,
    parse_ofed_version,
    parse_systemctl_state,
    parse_unit_file_state,
)
from nvdeploy.parsers.topo import RailMap, parse_topo, rail_map
from nvdeploy.results import CommandResult

DCGM_LEVELS = (1, 2, 3, 4)
IMEX_DRA_PLUGIN = "/var/lib/kubelet/plugins/compute-domain.nvidia.com"  # nvdeploy/collect/stack_commands.py


def _completed(result: Optional[CommandResult]) -> bool:
    return result is not None and result.error is None and result.rc is not None and result.rc != 127


def _parse(results: Mapping[str, CommandResult], name: str, parser: Callable[[str], Any],
           need_rc0: bool = False) -> Any:
    result = results.get(name)
    if not _completed(result):
        return None
    assert result is not None
    if need_rc0 and result.rc != 0:
        return None
    return parser(result.text)


def _imex_ran(results: Mapping[str, CommandResult], name: str) -> Mapping[str, CommandResult]:
    """``results`` without ``name`` when its collector stood in ``true`` (a node that does not run IMEX itself):
    no IMEX fact, rather than the facts of an empty answer."""
    result = results.get(name)
    return {} if result is None or result.command == "true" else results


def _imex_unit(result: Optional[CommandResult]) -> Optional[str]:
    if result is None or result.command == "true" or not _completed(result):
        return None
    return parse_unit_file_state(result.text or result.err_text)


def _kernel_driver(result: Optional[CommandResult]) -> Any:
    """/proc/driver/nvidia/version and the kernel release (nvdeploy/collect/stack.py, one ``find``), whatever its
    exit status: find exits 1 when a file is missing, and a missing version file (no nvidia module) is the fact."""
    return parse_kernel_driver(result.text) if result is not None and result.error is None else None


def _container_setup(result: Optional[CommandResult]) -> Any:
    if result is None or not _completed(result) or result.rc not in (0, 1):
        return None
    return parse_container_setup(result.text)


def _cdi(result: Optional[CommandResult]) -> Any:
    if result is None or not _completed(result) or result.rc != 0:
        return None
    return parse_cdi_list(result.text, result.err_text)


def _rails(topo: Any, ib: Any) -> Optional[RailMap]:
    """Each GPU's nearest compute NIC (rdma.rails, the GPUDirect stage). The compute NICs are ibstat's InfiniBand
    ones that are not bonds (the rule of checks/ib.py is_ib_port: mlx5_bond_0 is RoCE for storage or management);
    without ibstat, every NIC column of the matrix but bonds."""
    if ib is None:
        return rail_map(topo)
    compute: list[str] = []
    states: dict[str, tuple[int, str]] = {}
    for device in ib.devices:
        ports = [p for p in device.ports if (p.link_layer or "InfiniBand").strip().lower() == "infiniband"]
        if "bond" in device.name.lower() or not ports:
            continue
        compute.append(device.name)
        states[device.name] = (ports[0].port, ports[0].state or "unknown")
    return rail_map(topo, compute, states)


def catalog_facts(results: Mapping[str, CommandResult]) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "nvlink": _parse(results, "nvidia_smi_nvlink", parse_nvlink, need_rc0=True),
        "topo": _parse(results, "nvidia_smi_topo", parse_topo, need_rc0=True),
        # systemctl is-active exits 3 for inactive/failed: the state word is the fact.
        "fabricmanager_state": _parse(results, "fabricmanager", parse_systemctl_state),
        "fabricmanager_version": _parse(results, "fabricmanager_version", parse_fabricmanager_version, True),
        "lsmod": _parse(results, "lsmod", parse_lsmod, need_rc0=True),
        "ib": _parse(results, "ibstat", parse_ibstat, need_rc0=True),
        "ofed_version": _parse(results, "ofed_info", parse_ofed_version, need_rc0=True),
        "dcgm_version": _parse(results, "dcgm_version", parse_dcgmi_version, need_rc0=True),
        "dcgm_discovery": _parse(results, "dcgm_discovery", parse_dcgm_discovery),
        # dcgmi exits non-zero when the watches could not be set or read; its "Error:" line is the fact.
        "dcgm_health": _parse(results, "dcgm_health", parse_dcgm_health),
        "dcgm_health_after": _parse(results, "dcgm_health_after", parse_dcgm_health),
        "dcgm_diag": {},
        # The Diagnostic (GEMM) plugin alone (collect/datacenter.py DCGM_DIAG_GEMM): the standard level's gigaflops.
        "dcgm_gemm": _parse(results, "dcgm_diag_gemm", parse_dcgm_diag),
        "nccl": _parse(results, "nccl_all_reduce", parse_nccl_tests),
        # nvbandwidth exits non-zero when a testcase failed; what it printed is still the fact.
        "nvbandwidth": _parse(results, "nvbandwidth", parse_nvbandwidth),
        "kernel_driver": _kernel_driver(results.get("kernel_driver")),
        # The CUDA toolkits under /usr/local (one find; exit 1 when a listed path is missing, still the listing).
        "cuda_install": _parse(results, "cuda_toolkits", parse_cuda_install),
        # IMEX (checks/imex.py): systemctl exits 3 when inactive; -q exits non-zero when the daemon is not ready;
        # find exits 1 when a listed path is missing, which is the fact.
        "imex_service": _parse(_imex_ran(results, "imex_service"), "imex_service", parse_systemctl_state),
        # is-enabled exits 1 for disabled or masked (the fact), and says a missing unit on stderr.
        "imex_unit": _imex_unit(results.get("imex_unit")),
        "imex_query": _parse(_imex_ran(results, "imex_query"), "imex_query", parse_imex_query),
        "imex_files": _parse(_imex_ran(results, "imex_files"), "imex_files", parse_imex_files),
        # The container stack (checks/container.py): find exits 1 when a listed path is missing, still the listing;
        # nvidia-ctk's list counts only on success; the GPUs a container listed, whatever docker's exit status
        # (the check reads the status for why).
        "container_setup": _container_setup(results.get("container_files")),
        "cdi": _cdi(results.get("cdi_list")),
        "container_run_gpus": _parse(results, "container_run", docker_run_gpus),
        # The busy guard's process list (checks/heavy_gate.py), read only from a clean exit.
        "compute_apps": _parse(results, "compute_apps", parse_compute_apps, need_rc0=True),
        # MIG instances (gpu.mig, where a layout is named): "No GPU instances found" with a non-zero exit is a fact.
        "mig_lgi": _parse(results, "mig_lgi", parse_mig),
        "mig_lci": _parse(results, "mig_lci", parse_mig),
    }
    facts["rails"] = _rails(facts["topo"], facts["ib"])
    # firmware.*: the GPUs' part from the same -q -x, whatever the probe supplied; DMI read whatever find's exit
    # status (1 when a file is absent, the others still printed).
    smi = results.get("nvidia_smi_xml")
    dmi = results.get("dmi_firmware")
    facts["firmware"] = node_firmware(smi.text if _completed(smi) and smi is not None and smi.rc == 0 else None,
                                      facts["ib"], parse_dmi(dmi.text) if _completed(dmi) and dmi else None)
    for level in DCGM_LEVELS:
        diag = _parse(results, f"dcgm_diag_r{level}", parse_dcgm_diag)
        if diag is not None:
            facts["dcgm_diag"][level] = diag
            if facts["dcgm_version"] is None and diag.dcgm_version:
                facts["dcgm_version"] = diag.dcgm_version
    return facts


def catalog_summary(facts: Mapping[str, Any]) -> dict[str, Any]:
    """Facts kept in results.json for the cross-node version checks, reports and diffs."""
    out: dict[str, Any] = {}
    for key in ("dcgm_version", "ofed_version", "fabricmanager_version"):
        if facts.get(key):
            out[key] = facts[key]
    files = facts.get("imex_files")
    if files is not None:
        # The cluster stage compares the domain's node lists by hash (nvdeploy/phases/imex.py).
        out["imex_config_sha256"] = files.config_sha256 or "absent"
        if files.kind(IMEX_DRA_PLUGIN) is not None:
            out["imex_dra_plugin"] = True
    firmware = facts.get("firmware")
    if firmware is not None and firmware.items:
        # {component: {unit: version}}: firmware.consistency, diff and history read it (results.version_facts).
        out["firmware"] = firmware.by_component()
    nccl = facts.get("nccl")
    if nccl is not None:
        if nccl.nccl_version:
            out["nccl_version"] = nccl.nccl_version
        largest = max(nccl.rows, key=lambda r: r.size_bytes) if nccl.rows else None
        if largest is not None:
            values = [v for v in (largest.busbw_oop, largest.busbw_ip) if v is not None]
            if values:
                out["nccl_all_reduce_busbw_gbps"] = max(values)
                out["nccl_all_reduce_size_bytes"] = largest.size_bytes
    return out
