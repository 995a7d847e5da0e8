"""``fleet.performance`` (cluster stage): each measured figure of a node judged against its peers of the same
profile in the run, by the median and the median absolute deviation (MAD), not only against the datasheet floor.

A node at 92% of its peers' bandwidth passes a 90% floor and still holds back every synchronous step of a large
job; the fleet rule names it. :func:`judge` is the pure rule over one figure's samples; :func:`evaluate_fleet`
gathers the samples from the nodes' facts (results.json ``facts``) and turns the judgements into findings.
"""

from __future__ import annotations

import math
import statistics
import textwrap
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional, Sequence

from nvdeploy.checks.registry import CLUSTER_CHECKS
from nvdeploy.config.hostrange import fold
from nvdeploy.results import ErrorReason, Finding, NodeResult, Remediation, RunResult, Verdict

CHECK_ID = "fleet.performance"
# 0.6745 is the 0.75 quantile of the standard normal: with it the MAD-based z of normally spread figures reads like
# a standard z-score (Iglewicz and Hoaglin's modified z-score).
MAD_Z = 0.6745
SHOWN_OUTLIERS = 20  # outliers named in a cluster finding's summary; all of them are in its observed value

SOURCES = (
    "https://github.com/Azure/ai-infrastructure-on-azure/blob/main/skills/slurm/cluster_outlier_detection/SKILL.md",
    "https://github.com/Azure/ai-infrastructure-on-azure/blob/main/skills/slurm/sku_performance_baseline/SKILL.md",
)
# The host var that splits a profile's nodes into groups judged apart (two NIC speeds, two storage tiers).
PEER_GROUP = "peer_group"


@dataclass(frozen=True)
class FleetRule:
    """When a figure is an outlier (profile section ``fleet``, per figure under ``fleet.figures``).

    ``z_min_pct``: a robust z alone counts only when the figure is also at least this far below the median. A fleet
    whose spread is below the tools' own repeatability (nccl-tests at 8 GiB repeats to a fraction of a percent) has
    a tiny MAD, and a z-score over it would name noise; 0 turns the guard off. ``fail_min_pct``: a z alone FAILs
    only this far below the median (nccl-tests and DCGM's GEMM repeat within about 1-2% on one node, fleet_drift.py):
    nearer, a z at ``fail_z`` is WARN, since a re-test could move the node that far."""

    min_nodes: int = 8
    warn_pct: float = 3.5
    fail_pct: float = 7.0
    # Azure's robust z: "< -2.0 Investigate", "< -3.0 Drain" (cluster_outlier_detection, SOURCES[0]).
    warn_z: float = 2.0
    fail_z: float = 3.0
    z_min_pct: float = 1.5
    fail_min_pct: float = 2.0


DEFAULT_RULE = FleetRule()
# Azure's per-SKU bands (sku_performance_baseline, SOURCES[1]), as the percent below the expected figure:
# GPU GEMM (ubergemm, 60 s) Warn < 3.5%, GHR < 7% (H100 ~769 GFlops/GPU, warn < 742, GHR < 715);
# H100 NCCL all_reduce busbw ~450 GB/s, Warn < 400 (11.1%), GHR < 300 (33.3%).
# Azure's NCCL band is against the expected figure, which the profile's busbw floor (nccl.all_reduce) judges; against
# the fleet's median, nvdeploy keeps the tighter band a node's own repeatability allows, and says so.
GEMM_RULE = FleetRule(warn_pct=3.5, fail_pct=7.0)
_GEMM_SOURCE = ("Azure's GPU GEMM band (sku_performance_baseline: Warn < 3.5%, GHR < 7% below the SKU's expected "
                "GFlops per GPU)")
_NCCL_SOURCE = ("nvdeploy's own band, tighter than Azure's H100 NCCL one (sku_performance_baseline: all_reduce busbw "
                "~450 GB/s expected, Warn < 400, GHR < 300 GB/s, i.e. 11.1% and 33.3% below), which is against the "
                "expected figure and so the job of the profile's busbw floor; against the fleet's median it takes "
                "the GEMM band's 3.5% / 7%, above nccl-tests' 1-2% repeatability")
_OWN_SOURCE = ("nvdeploy's own band: no source publishes one for this figure; it takes the GEMM band's 3.5% / 7%, "
               "above the tools' 1-2% repeatability")


_GPU_HINT = "check its clocks and throttling (clocks.throttle), power and cooling, PCIe and NVLink, then re-test"
# Host copies go over the GPU's PCIe link (or NVLink-C2C on Grace) to the CPU's memory.
_HOST_COPY_HINT = ("check the GPU's PCIe link (pcie.link) or NVLink-C2C, the CPU and NUMA placement of the copy, "
                   "IOMMU and ACS settings, then re-test")


@dataclass(frozen=True)
class Figure:
    """A measured figure: the summary fact that holds it (a number, {GPU index: number} for ``per_gpu``, or
    {path: number} for ``per_path``: one figure per path, judged among the nodes that measured that path)."""

    id: str
    fact: str
    what: str
    unit: str
    per_gpu: bool
    source_check: str
    per_path: bool = False
    key: Optional[str] = None  # the path of a per_path figure (set by :func:`expand`)
    hint: str = _GPU_HINT
    # False: lower is better (a temperature): the outliers are those above the median.
    higher_is_better: bool = True
    # How a per_path figure's name reads for one key (:func:`expand`).
    key_format: str = "{what} of {key}"
    # The rule before the profile's fleet section overrides it (rule_for), and where its percentages come from.
    default_rule: FleetRule = DEFAULT_RULE
    source: str = _OWN_SOURCE

    @property
    def worse(self) -> str:
        return "below" if self.higher_is_better else "above"


FIGURES = (
    Figure("nccl_busbw", "nccl_all_reduce_busbw_gbps", "nccl-tests all_reduce busbw (single node, largest size)",
           "GB/s", False, "nccl.all_reduce", source=_NCCL_SOURCE),
    # At standard from the GEMM plugin alone (dcgm.gemm), at full from r3's (dcgm.diag_r3/r4).
    Figure("dcgm_gflops", "dcgm_diag_gflops", "DCGM diag Diagnostic (GEMM) figure", "gigaflops", True,
           "dcgm.gemm, dcgm.diag_r3/r4", default_rule=GEMM_RULE, source=_GEMM_SOURCE),
    # The same plugin under the burn-in's sustained load: each GPU's median over the iterations.
    Figure("burnin_gflops", "burnin_gflops", "DCGM Diagnostic (GEMM) figure under the burn-in (median of its "
           "iterations)", "gigaflops", True, "burnin.load", default_rule=GEMM_RULE, source=_GEMM_SOURCE),
    Figure("storage_read_gbps", "storage_read_gbps", "storage read throughput", "GB/s", False, "storage.throughput",
           per_path=True, hint="check the mount and its client, the storage network's ports and rate, and what "
           "else loads the path, then re-test"),
    Figure("storage_write_gbps", "storage_write_gbps", "storage write throughput", "GB/s", False,
           "storage.throughput", per_path=True, hint="check the mount and its client, the device's health (nvme "
           "smart-log), the storage network, and what else loads the path, then re-test"),
    Figure("nvbandwidth_h2d_gbps", "nvbandwidth_h2d_gbps", "nvbandwidth host-to-device copy bandwidth", "GB/s", True,
           "nvbandwidth.copies", hint=_HOST_COPY_HINT),
    Figure("nvbandwidth_d2h_gbps", "nvbandwidth_d2h_gbps", "nvbandwidth device-to-host copy bandwidth", "GB/s", True,
           "nvbandwidth.copies", hint=_HOST_COPY_HINT),
    Figure("burnin_sm_clock", "burnin_sm_clock_mhz", "SM clock under the burn-in's load (median)", "MHz", True,
           "burnin.stability", hint="check the GPU's cooling (fans, airflow, heatsink), its power limit and power "
           "delivery (nvidia-smi -q -d POWER,PERFORMANCE), then burn it in again"),
    # Set by the GPUDirect stage (phases/gpudirect.py), which runs before this check.
    # Per GPU slot (a per_path figure keyed by GPU index): in an air-cooled chassis the GPUs nearest the exhaust run
    # several degrees hotter than the others by design, so a GPU is compared with the same slot of its peers. Only
    # WARN by default (fail_pct 100: never): what a hot GPU means is for an operator to look at (its fan, heatsink,
    # paste, the rack's inlet), and the throttling it may cause is burnin.stability's FAIL. The warn percent is
    # 5% above the slot's median (about 3-4 C at 65-75 C); z needs 3% as well.
    Figure("burnin_temperature", "burnin_temperature_c", "GPU temperature under the burn-in's load (median)", "C",
           False, "burnin.stability", per_path=True, key_format="{what}, GPU{key}", higher_is_better=False,
           default_rule=FleetRule(warn_pct=5.0, fail_pct=100.0, z_min_pct=3.0),
           source="nvdeploy's own: WARN only, 5% (3-4 C) above the same GPU slot's median",
           hint="check the GPU's cooling (fan, heatsink and its paste, airflow, blanking panels) and the rack's inlet "
           "temperature; it runs hotter than the same GPU slot of its peers under the same load"),
    Figure("rdma_gpudirect", "rdma_gpudirect_gbps", "GPUDirect RDMA write bandwidth (ib_write_bw --use_cuda, the "
           "node's best pair)", "Gb/s", False, "rdma.gpudirect",
           hint="check the node's HCA and GPU placement (nvidia-smi topo -m), nvidia-peermem, the HCA firmware, its "
           "ports, cables and switch ports, then re-test it with another node"),
    # Per rail (GPUk/NIC, the rail map's): a node's rail against the same rail of its peers; a bad port, cable or
    # transceiver slows one rail and every all-reduce with it, while the node's best rail still looks healthy.
    Figure("rdma_gpudirect_rail", "rdma_gpudirect_rail_gbps", "GPUDirect RDMA write bandwidth", "Gb/s", False,
           "rdma.gpudirect", per_path=True, key_format="{what} of rail {key}",
           hint="check that rail's port and cable, its transceiver and switch port (ibstat, ib.ports), the NIC's "
           "firmware and its PCIe path to the GPU (nvidia-smi topo -m), then re-test it with another node"),
    # Set by the multi-node stage (phases/multinode.py), which runs before this check, with --nccl-pattern pairwise.
    Figure("nccl_pair_busbw", "nccl_pair_busbw_gbps", "two-node nccl-tests all_reduce busbw (pairwise, the node's "
           "best pair)", "GB/s", False, "nccl.multinode with --nccl-pattern pairwise",
           source=_NCCL_SOURCE,
           hint="check the node's InfiniBand ports, cables, HCA firmware and switch ports (ibstat, ib.*), then re-test "
           "it with another node"),
)


def expand(figure: Figure, *node_sets: Sequence[NodeResult]) -> list[Figure]:
    """A per_path figure as one figure per path some node measured (sorted); any other figure as itself."""
    if not figure.per_path:
        return [figure]
    keys: set[str] = set()
    for nodes in node_sets:
        for node in nodes:
            value = node.facts.get(figure.fact)
            if isinstance(value, Mapping):
                keys.update(str(k) for k in value)
    ordered = sorted(keys, key=lambda k: (0, int(k), "") if k.isdigit() else (1, 0, k))
    return [replace(figure, key=k, what=figure.key_format.format(what=figure.what, key=k)) for k in ordered]


@dataclass(frozen=True)
class Sample:
    node: str
    value: float
    gpu: Optional[int] = None

    @property
    def label(self) -> str:
        return f"{self.node} GPU{self.gpu}" if self.gpu is not None else self.node


@dataclass(frozen=True)
class Outlier:
    sample: Sample
    verdict: Verdict  # WARN or FAIL
    pct_below: float
    z: Optional[float]  # None when the MAD is 0 (no spread): then only the percent rule applies


@dataclass(frozen=True)
class Judgement:
    """One figure over one profile's nodes. ``verdict`` SKIP: too few nodes (``reason`` says so), never PASS."""

    verdict: Verdict
    nodes: int
    samples: int
    median: Optional[float] = None
    mad: Optional[float] = None
    low: Optional[float] = None
    high: Optional[float] = None
    outliers: tuple[Outlier, ...] = ()
    reason: str = ""
    # Peers taken from the accepted baseline run when this run has too few nodes: how many, and the run's id.
    baseline_nodes: int = 0
    baseline: str = ""
    # Two populations in one profile (:func:`split_of`): (the lower's nodes, its median, the upper's median); each
    # was judged by itself.
    split: Optional[tuple[tuple[str, ...], float, float]] = None


def rule_for(section: Optional[Mapping[str, Any]], figure: str,
             defaults: FleetRule = DEFAULT_RULE) -> Optional[FleetRule]:
    """The rule of ``figure`` from a profile's ``fleet`` section (validated by profile_schema) over ``defaults`` (the
    figure's own); None when the profile turns the figure off (``figures: {<figure>: {enabled: false}}``)."""
    section = section or {}
    keys = FleetRule.__dataclass_fields__
    values: dict[str, Any] = {k: getattr(defaults, k) for k in keys}
    values.update({k: section[k] for k in keys if k in section})
    per_figure = (section.get("figures") or {}).get(figure) or {}
    if per_figure.get("enabled") is False:
        return None
    values.update({k: per_figure[k] for k in keys if k in per_figure})
    return FleetRule(**values)


def fleet_section(profile: Any) -> dict[str, Any]:
    """A profile's ``fleet`` section as plain data, for the run's header ({} when it has none: the defaults)."""
    section = (getattr(profile, "extra", None) or {}).get("fleet") or {}
    return {k: ({f: dict(body) for f, body in v.items()} if k == "figures" else v) for k, v in section.items()}


def robust_z(value: float, median: float, mad: float) -> Optional[float]:
    return MAD_Z * (value - median) / mad if mad > 0 else None


def judge(samples: Sequence[Sample], rule: FleetRule = DEFAULT_RULE, higher_is_better: bool = True) -> Judgement:
    """Judge one figure (higher is better) over ``samples`` of one profile: a sample is FAIL when it is
    ``fail_pct``% or more below the median or its robust z (0.6745 (x - median) / MAD) is <= -``fail_z``, WARN at
    ``warn_pct`` / -``warn_z``; a z counts only ``z_min_pct``% or more below the median. MAD 0 (every node alike):
    the percent rule alone. Fewer than ``min_nodes`` distinct nodes: SKIP, whatever the values. With
    ``higher_is_better`` False the same rule runs above the median (an Outlier's ``pct_below`` is then the percent
    above it, and its z is >= +``warn_z``)."""
    sign = 1.0 if higher_is_better else -1.0
    nodes = len({s.node for s in samples})
    if nodes < rule.min_nodes:
        return Judgement(Verdict.SKIP, nodes, len(samples), reason=(
            f"measured on {nodes} node{'s' if nodes != 1 else ''}, fewer than the {rule.min_nodes} needed to judge a "
            "node against its peers (fleet.min_nodes): not judged; validate --baseline RUN_DIR adds an accepted run's "
            "nodes as peers"))
    values = [s.value for s in samples]
    median = statistics.median(values)
    mad = statistics.median(abs(v - median) for v in values)
    low, high = min(values), max(values)
    if median <= 0:
        return Judgement(Verdict.SKIP, nodes, len(samples), median, mad, low, high,
                         reason=f"the median is {median:g}: no relative rule applies")
    outliers = []
    for sample in samples:
        # Rounded so that a figure exactly at a threshold (3.5% below) is judged at it, not a float's width off.
        pct = round(sign * (median - sample.value) / median * 100, 6)
        z = robust_z(sample.value, median, mad)
        z_counts = z is not None and pct >= rule.z_min_pct
        z_fails = z_counts and z is not None and sign * z <= -rule.fail_z
        if pct >= rule.fail_pct or (z_fails and pct >= rule.fail_min_pct):
            verdict = Verdict.FAIL
        elif pct >= rule.warn_pct or z_fails or (z_counts and z is not None and sign * z <= -rule.warn_z):
            verdict = Verdict.WARN
        else:
            continue
        outliers.append(Outlier(sample, verdict, pct, z))
    outliers.sort(key=lambda o: (-o.verdict.severity, -o.pct_below, o.sample.node, o.sample.gpu or 0))
    verdict = Verdict.worst([o.verdict for o in outliers], default=Verdict.PASS)
    return Judgement(verdict, nodes, len(samples), median, mad, low, high, tuple(outliers))


# The fewest nodes on each side of a split, and how many times the wider side's own spread the gap must be.
SPLIT_MIN_NODES = 3
SPLIT_GAP_MADS = 6.0


def split_of(samples: Sequence[Sample], rule: FleetRule) -> Optional[tuple[list[Sample], list[Sample]]]:
    """(lower, upper) when one profile's samples are two populations (two NIC speeds, two storage tiers): sorted by
    value, the widest gap between neighbours is at least ``warn_pct``% of the median, at least SPLIT_GAP_MADS times
    the MAD of either side, with SPLIT_MIN_NODES nodes or more (and ``min_nodes`` / 4) on each side. A lone slow
    node is no population: it stays an outlier of the one."""
    ordered = sorted(samples, key=lambda s: s.value)
    if len(ordered) < 2:
        return None
    median = statistics.median(s.value for s in ordered)
    if median <= 0:
        return None
    gap, cut = max((ordered[i + 1].value - ordered[i].value, i + 1) for i in range(len(ordered) - 1))
    lower, upper = ordered[:cut], ordered[cut:]
    least = max(SPLIT_MIN_NODES, rule.min_nodes // 4)
    if min(len({s.node for s in lower}), len({s.node for s in upper})) < least:
        return None
    if {s.node for s in lower} & {s.node for s in upper}:
        return None  # a node on both sides (a per-GPU figure): a slow GPU, not a population
    if gap / median * 100 < rule.warn_pct:
        return None
    spread = max(_mad([s.value for s in lower]), _mad([s.value for s in upper]))
    return (lower, upper) if gap >= SPLIT_GAP_MADS * spread else None


def _mad(values: Sequence[float]) -> float:
    median = statistics.median(values)
    return statistics.median(abs(v - median) for v in values)


def judge_split(samples: Sequence[Sample], rule: FleetRule = DEFAULT_RULE, higher_is_better: bool = True) -> Judgement:
    """:func:`judge`, but a profile whose samples are two populations (:func:`split_of`) is judged as two: each side
    among itself, and the judgement WARNs of the split (the cluster finding names both)."""
    whole = judge(samples, rule, higher_is_better)
    parts = split_of(samples, rule) if whole.median is not None else None
    if parts is None:
        return whole
    lower, upper = parts
    low_part = judge(lower, replace(rule, min_nodes=2), higher_is_better)
    high_part = judge(upper, replace(rule, min_nodes=2), higher_is_better)
    outliers = tuple(sorted(low_part.outliers + high_part.outliers,
                            key=lambda o: (-o.verdict.severity, -o.pct_below, o.sample.node, o.sample.gpu or 0)))
    verdict = Verdict.worst([Verdict.WARN, *(o.verdict for o in outliers)])
    lower_nodes = tuple(sorted({s.node for s in lower}))
    return replace(whole, verdict=verdict, outliers=outliers,
                   split=(lower_nodes, float(statistics.median(s.value for s in lower)),
                          float(statistics.median(s.value for s in upper))))


def _number(value: Any) -> Optional[float]:
    """A finite number, else None (NaN and infinities are no measurement: :func:`non_finite` names them)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def non_finite(figure: Figure, nodes: Sequence[NodeResult]) -> list[tuple[str, str, Optional[int], Any]]:
    """(profile, node, GPU, value) of each NaN or infinite value of the figure: a tool that printed ``nan`` or
    ``inf`` measured nothing, and a NaN compares false with every threshold (it would pass them all)."""
    out: list[tuple[str, str, Optional[int], Any]] = []
    for node in nodes:
        value = node.facts.get(figure.fact) if node.profile else None
        if figure.per_path:
            value = value.get(figure.key) if isinstance(value, Mapping) else None
        items = value.items() if figure.per_gpu and isinstance(value, Mapping) else [(None, value)]
        for gpu, number in items:
            if isinstance(number, float) and not math.isfinite(number):
                out.append((node.profile, node.name, int(gpu) if str(gpu).isdigit() else None, number))
    return out


def peer_groups(figure: Figure, nodes: Sequence[NodeResult]) -> dict[tuple[str, str], list[Sample]]:
    """:func:`samples_of` by (profile stamp, peer group): the host var ``peer_group`` (kept in the node's facts)
    splits a profile's nodes into groups judged apart; "" without one."""
    group = {n.name: str(n.facts.get(PEER_GROUP) or "") for n in nodes}
    out: dict[tuple[str, str], list[Sample]] = defaultdict(list)
    for profile, samples in samples_of(figure, nodes).items():
        for sample in samples:
            out[(profile, group.get(sample.node, ""))].append(sample)
    return out


def samples_of(figure: Figure, nodes: Sequence[NodeResult]) -> dict[str, list[Sample]]:
    """The figure's samples by profile stamp, from each node's facts; nodes without the figure are left out."""
    out: dict[str, list[Sample]] = defaultdict(list)
    for node in nodes:
        value = node.facts.get(figure.fact) if node.profile else None
        if figure.per_path:
            value = value.get(figure.key) if isinstance(value, Mapping) else None
        if value is None:
            continue
        if figure.per_gpu and isinstance(value, Mapping):
            for gpu, number in sorted(value.items(), key=lambda kv: int(kv[0]) if str(kv[0]).isdigit() else -1):
                figure_value = _number(number)
                if figure_value is not None and str(gpu).isdigit():
                    out[node.profile].append(Sample(node.name, figure_value, int(gpu)))
        elif not figure.per_gpu:
            figure_value = _number(value)
            if figure_value is not None:
                out[node.profile].append(Sample(node.name, figure_value))
    return out


def _z_text(z: Optional[float]) -> str:
    return f"robust z {z:.1f}" if z is not None else "robust z n/a: no spread (MAD 0)"


def _short(outlier: Outlier, unit: str, higher_is_better: bool = True) -> str:
    z = f", z {outlier.z:.1f}" if outlier.z is not None else ""
    deviation = f"{'-' if higher_is_better else '+'}{outlier.pct_below:.1f}%{z}"
    return f"{outlier.sample.label} {outlier.sample.value:g} {unit} ({deviation}) {outlier.verdict.value}"


def _stamp(label: str) -> str:
    """The profile stamp of a group's label (``<stamp> peer_group <group>``)."""
    return label.split(" ", 1)[0]


def _population(judgement: Judgement, figure: Figure, profile: str) -> str:
    gpus = f", {judgement.samples} GPUs" if figure.per_gpu else ""
    peers = (f" ({judgement.baseline_nodes} of them from baseline run {judgement.baseline})"
             if judgement.baseline_nodes else "")
    return f"{judgement.nodes} {profile} nodes{gpus}{peers}"


def _cluster_finding(figure: Figure, profile: str, judgement: Judgement, rule: FleetRule,
                     samples: Sequence[Sample]) -> Finding:
    head = f"{figure.what} on {_population(judgement, figure, profile)}"
    observed: dict[str, Any] = {"figure": figure.id, "profile": _stamp(profile), "nodes": judgement.nodes,
                                "samples": judgement.samples}
    if profile != _stamp(profile):
        observed[PEER_GROUP] = profile.split(f" {PEER_GROUP} ", 1)[-1]
    if figure.key is not None:
        observed["path"] = figure.key
    if judgement.verdict is Verdict.SKIP:
        return Finding(CHECK_ID, Verdict.SKIP, f"{figure.what} on {profile}: {judgement.reason}", observed=observed,
                       unit=figure.unit, profile=_stamp(profile))
    assert judgement.median is not None and judgement.mad is not None
    # Each node's figure, its slowest GPU's for a per-GPU figure (one bad GPU holds the node back): one number per
    # node keeps a 10,000-node run's finding small; the outliers below name every GPU.
    worst = min if figure.higher_is_better else max
    values: dict[str, float] = {}
    for sample in samples:
        values[sample.node] = worst(sample.value, values.get(sample.node, sample.value))
    observed.update(median=round(judgement.median, 3), mad=round(judgement.mad, 3), min=judgement.low,
                    max=judgement.high, values=values,
                    outliers=[{"node": o.sample.node, "gpu": o.sample.gpu, "value": o.sample.value,
                               "pct_below": round(o.pct_below, 2), "z": round(o.z, 2) if o.z is not None else None,
                               "verdict": o.verdict.value} for o in judgement.outliers])
    mad_pct = judgement.mad / judgement.median * 100
    stats = (f"median {judgement.median:g} {figure.unit}, MAD {judgement.mad:.3g} ({mad_pct:.2g}%), "
             f"lowest {judgement.low:g}, highest {judgement.high:g}")
    z_bound = f"> -{rule.warn_z:g}" if figure.higher_is_better else f"< +{rule.warn_z:g}"
    z_out = f"<= -{rule.warn_z:g}" if figure.higher_is_better else f">= +{rule.warn_z:g}"
    expected = f"within {rule.warn_pct:g}% of the median and robust z {z_bound}"
    if judgement.split is not None:
        lower_nodes, lower_median, upper_median = judgement.split
        observed["split"] = {"lower": list(lower_nodes), "lower_median": round(lower_median, 3),
                             "upper_median": round(upper_median, 3)}
        shown = "; ".join(_short(o, figure.unit, figure.higher_is_better) for o in judgement.outliers[:SHOWN_OUTLIERS])
        return Finding(CHECK_ID, judgement.verdict, f"{head}: two populations, not one: {len(lower_nodes)} node(s) "
                       f"({fold(list(lower_nodes))}) at a median of {lower_median:g} {figure.unit} and the others at "
                       f"{upper_median:g}; each judged among itself"
                       + (f", outliers: {shown}" if shown else ", no outlier in either") + ". If the two differ by "
                       f"design (NIC speed, storage tier), give each its host var {PEER_GROUP} (or its own profile); "
                       "else the lower population is what to look at", observed=observed, expected=expected,
                       unit=figure.unit, remediation=Remediation.INVESTIGATE, profile=_stamp(profile))
    if not judgement.outliers:
        return Finding(CHECK_ID, Verdict.PASS, f"{head}: {stats}; none {rule.warn_pct:g}% {figure.worse} the median "
                       f"or at robust z {z_out}", observed=observed, expected=expected, unit=figure.unit,
                       profile=_stamp(profile))
    shown = "; ".join(_short(o, figure.unit, figure.higher_is_better) for o in judgement.outliers[:SHOWN_OUTLIERS])
    more = len(judgement.outliers) - SHOWN_OUTLIERS
    named = fold(sorted({o.sample.node for o in judgement.outliers}))
    peers = "below their peers" if figure.higher_is_better else "above their peers"
    return Finding(CHECK_ID, judgement.verdict, f"{head}: {stats}; {len(judgement.outliers)} {peers} "
                   f"({named}): {shown}" + (f"; and {more} more" if more > 0 else ""), observed=observed,
                   expected=expected, unit=figure.unit, remediation=Remediation.INVESTIGATE, profile=_stamp(profile))


def _node_finding(figure: Figure, profile: str, judgement: Judgement, rule: FleetRule, outlier: Outlier) -> Finding:
    # observed/expected are text with the unit, not a number with ``unit``: the figure itself is the measuring
    # check's (nccl.all_reduce, dcgm.diag_rN); as a number here it would count twice in charts, diffs and metrics.
    assert judgement.median is not None
    if not figure.higher_is_better:
        return _hot_finding(figure, profile, judgement, rule, outlier)
    sample = outlier.sample
    if sample.gpu is None and figure.id == "rdma_gpudirect_rail" and figure.key and figure.key.startswith("GPU"):
        # A rail's key is GPUk/NIC: the finding carries the GPU, its text names the NIC.
        gpu = figure.key[3:].split("/", 1)[0]
        sample = replace(sample, gpu=int(gpu)) if gpu.isdigit() else sample
    where = f"GPU{sample.gpu}: " if sample.gpu is not None and figure.id != "rdma_gpudirect_rail" else ""
    threshold = (f"FAIL at {rule.fail_pct:g}% below, or robust z <= -{rule.fail_z:g} with {rule.fail_min_pct:g}% below"
                 if outlier.verdict is Verdict.FAIL else
                 f"WARN at {rule.warn_pct:g}% below, or robust z <= -{rule.warn_z:g} with {rule.z_min_pct:g}% below")
    floor = round(judgement.median * (1 - rule.warn_pct / 100), 3)
    return Finding(
        CHECK_ID, outlier.verdict,
        f"{where}{figure.what} {sample.value:g} {figure.unit} is {outlier.pct_below:.1f}% below the median of "
        f"{_population(judgement, figure, profile)} ({judgement.median:g} {figure.unit}; {_z_text(outlier.z)}): "
        f"{threshold}. It may still meet the profile's floor ({figure.source_check}); a straggler holds back every "
        f"synchronous step of a job: {figure.hint}", node=sample.node, observed=f"{sample.value:g} {figure.unit}",
        expected=f">= {floor:g} {figure.unit}, robust z > -{rule.warn_z:g}", gpu=sample.gpu,
        remediation=Remediation.INVESTIGATE, profile=_stamp(profile))


def _hot_finding(figure: Figure, profile: str, judgement: Judgement, rule: FleetRule, outlier: Outlier) -> Finding:
    """A figure where lower is better (a temperature), above its peers'."""
    assert judgement.median is not None
    sample = outlier.sample
    gpu = int(figure.key) if figure.key is not None and figure.key.isdigit() else sample.gpu
    threshold = (f"FAIL at {rule.fail_pct:g}% above or robust z >= +{rule.fail_z:g}" if outlier.verdict is Verdict.FAIL
                 else f"WARN at {rule.warn_pct:g}% above or robust z >= +{rule.warn_z:g}")
    ceiling = round(judgement.median * (1 + rule.warn_pct / 100), 3)
    return Finding(
        CHECK_ID, outlier.verdict,
        f"{figure.what} {sample.value:g} {figure.unit} is {outlier.pct_below:.1f}% above the median of "
        f"{_population(judgement, figure, profile)} ({judgement.median:g} {figure.unit}; {_z_text(outlier.z)}): "
        f"{threshold}: {figure.hint}", node=sample.node, observed=f"{sample.value:g} {figure.unit}",
        expected=f"<= {ceiling:g} {figure.unit}, robust z < +{rule.warn_z:g}", gpu=gpu,
        remediation=Remediation.INVESTIGATE, profile=_stamp(profile))


def judge_with_baseline(samples: Sequence[Sample], peers: Sequence[Sample], rule: FleetRule,
                        baseline: str, higher_is_better: bool = True) -> Judgement:
    """This run's ``samples`` judged among the baseline run's ``peers`` of the same profile (those of nodes not in
    this run): median and MAD over both, outliers named among this run's nodes only. Still SKIP when both together
    have fewer than ``min_nodes`` nodes."""
    here = {s.node for s in samples}
    pooled = list(samples) + [p for p in peers if p.node not in here]
    judgement = judge(pooled, rule, higher_is_better)
    if judgement.median is None:
        return judge(samples, rule, higher_is_better)
    outliers = tuple(o for o in judgement.outliers if o.sample.node in here)
    extra = len({s.node for s in pooled}) - len(here)
    return replace(judgement, outliers=outliers, verdict=Verdict.worst([o.verdict for o in outliers],
                                                                       default=Verdict.PASS),
                   baseline_nodes=extra, baseline=baseline)


def evaluate_fleet(nodes: Sequence[NodeResult], rules: Optional[Mapping[str, Mapping[str, Any]]] = None,
                   baseline: Optional[RunResult] = None) -> tuple[list[NodeResult], list[Finding]]:
    """The fleet.performance findings: one cluster finding per figure and profile that some node measured (SKIP
    below ``min_nodes``), and a WARN/FAIL on each outlier node (by GPU for per-GPU figures). ``rules``: profile
    stamp -> that profile's ``fleet`` section (the run's header keeps it, so a resumed run judges alike).
    ``baseline``: the accepted run (``validate --baseline``) whose nodes of the same profile are the peers of a
    profile this run has too few nodes of."""
    rules = rules or {}
    per_node: dict[str, list[Finding]] = defaultdict(list)
    cluster: list[Finding] = []
    base_nodes = list(baseline.nodes) if baseline is not None else []
    for figure in (f for template in FIGURES for f in expand(template, nodes)):
        peers = samples_of(figure, base_nodes) if baseline is not None else {}
        for profile, node, gpu, value in non_finite(figure, nodes):
            if rule_for(rules.get(profile), figure.id, figure.default_rule) is not None:
                per_node[node].append(Finding(
                    CHECK_ID, Verdict.ERROR, f"{f'GPU{gpu}: ' if gpu is not None else ''}{figure.what} is {value}: "
                    f"not a measurement, not judged against its peers ({figure.source_check} printed it)",
                    node=node, gpu=gpu, observed=str(value), reason=ErrorReason.UNPARSEABLE,
                    remediation=Remediation.INVESTIGATE, profile=profile))
        for (profile, group), samples in sorted(peer_groups(figure, nodes).items()):
            rule = rule_for(rules.get(profile), figure.id, figure.default_rule)
            if rule is None:
                continue
            judgement = judge_split(samples, rule, figure.higher_is_better)
            if judgement.median is None and peers.get(profile) and baseline is not None and not group:
                judgement = judge_with_baseline(samples, peers[profile], rule, baseline.run_id,
                                                figure.higher_is_better)
            label = f"{profile} {PEER_GROUP} {group}" if group else profile
            cluster.append(_cluster_finding(figure, label, judgement, rule, samples))
            for outlier in judgement.outliers:
                per_node[outlier.sample.node].append(_node_finding(figure, label, judgement, rule, outlier))
    updated = [n.with_findings(per_node[n.name]) if n.name in per_node else n for n in nodes]
    return updated, cluster


def _doc() -> str:
    """The ``checks show fleet.performance`` text, from the figures and their default rules above."""
    rule = DEFAULT_RULE

    def scope(figure: Figure) -> str:
        if figure.per_path and figure.id == "rdma_gpudirect_rail":
            return ", per rail: each GPU's rail (GPUk/NIC) among the same rail of the other nodes"
        if figure.per_path and figure.key_format != Figure.key_format:
            return ", per GPU slot: each GPU among the same GPU of the other nodes"
        if figure.per_path:
            return ", per path: each path among the nodes that measured it"
        return ", per GPU" if figure.per_gpu else ""

    def bands(figure: Figure) -> str:
        r = figure.default_rule
        if not figure.higher_is_better:
            fail = "never FAIL" if r.fail_pct >= 100 else f"FAIL at {r.fail_pct:g}%"
            return (f"lower is better: WARN at {r.warn_pct:g}% above the median or z >= +{r.warn_z:g} (with "
                    f"{r.z_min_pct:g}% above), {fail}")
        return f"WARN at {r.warn_pct:g}%, FAIL at {r.fail_pct:g}% below the median"

    figures = "; ".join(f"``{f.id}`` {f.what} ({f.unit}, from {f.source_check}{scope(f)}): {bands(f)}, from "
                        f"{f.source}" for f in FIGURES)
    paragraphs = (
        "Judges each measured figure of a node against its peers: the nodes of the same profile in this run (and of "
        f"the same host var ``{PEER_GROUP}`` where nodes set one). Figures, each with its default percentages and "
        f"where they come from: {figures}. Each figure is judged at every level that measured it: ``dcgm_gflops`` "
        "at standard from DCGM's GEMM plugin run alone (dcgm.gemm, 60 s), at full from r3.",
        "Rule (higher is better): with the median and the MAD (median absolute deviation) of the figure over the "
        "profile's nodes (over their GPUs for a per-GPU figure), a value is FAIL when it is ``fail_pct`` or more "
        "below the median, or when its robust z = 0.6745 (x - median) / MAD is <= -``fail_z`` (default "
        f"{rule.fail_z:g}) and it is also ``fail_min_pct`` ({rule.fail_min_pct:g}%) or more below the median; WARN "
        f"at ``warn_pct``, or at z <= -``warn_z`` ({rule.warn_z:g}), or at z <= -``fail_z`` nearer than "
        f"``fail_min_pct``. A z counts only when the value is also ``z_min_pct`` ({rule.z_min_pct:g}%) or more below "
        "the median. The two guards are nvdeploy's own: nccl-tests at 8 GiB and DCGM's GEMM repeat within about "
        "1-2% on one node, so in a fleet spread tighter than that a z names noise, and a FAIL needs a deviation a "
        "re-test would not undo. MAD 0 (every node alike): the percent rule alone. NaN or infinite values are "
        "ERROR (UNPARSEABLE) on their node, never judged. Fewer than ``min_nodes`` "
        f"({rule.min_nodes}) nodes: judged among the nodes of the same profile in the accepted run that ``validate "
        "--baseline RUN_DIR`` names, when together they are enough; else SKIP, saying so, never PASS.",
        "Two populations: when a profile's values fall in two groups (sorted, the widest gap between neighbours "
        f"is at least ``warn_pct`` of the median and {SPLIT_GAP_MADS:g} times either group's MAD, with at least "
        f"{SPLIT_MIN_NODES} nodes in each), the cluster finding is WARN naming both, and each group is judged "
        f"among itself. Nodes that differ by design (two NIC speeds, two storage tiers) get host var "
        f"``{PEER_GROUP}: <name>`` (or a profile each); each group is then judged apart.",
        "Findings: per figure and profile (and peer group) a cluster finding (median, MAD, lowest and highest, each "
        "node's value in ``observed``, its slowest GPU's for a per-GPU figure) naming every outlier; on each outlier "
        "node a WARN or FAIL (INVESTIGATE) with its figure, the median, and the deviation in % and in z, by GPU for "
        "a per-GPU figure. A figure below the profile's floor is also its own check's FAIL.",
        "Thresholds: the profile's ``fleet`` section, over each figure's defaults, e.g. ``fleet: {min_nodes: 10, "
        "warn_z: 2, figures: {dcgm_gflops: {warn_pct: 3.5, fail_pct: 7}, nccl_busbw: {enabled: false}}}``.",
        "Sources: Azure's cluster_outlier_detection (" + SOURCES[0] + ") flags a node by its z-score, or the "
        "robust variant 0.6745 (x - median) / MAD, \"< -1.5 Monitor, < -2.0 Investigate, < -3.0 Drain\", with ten "
        "or more nodes; nvdeploy's WARN (INVESTIGATE) is its Investigate and its FAIL its Drain (Monitor is not a "
        "finding), with the two guards above, which Azure does not have. Azure's sku_performance_baseline ("
        + SOURCES[1] + ") gives per-SKU bands below the expected figure: GPU GEMM (ubergemm, 60 s) Warn < 3.5%, "
        "GHR < 7% (H100 ~769 GFlops/GPU, < 742, < 715); H100 NCCL all_reduce busbw (16 G) ~450 GB/s, Warn < 400, "
        "GHR < 300. Here the percentages are taken from the fleet's median rather than the expected figure (the "
        "profile's floors judge that).",
    )
    return "\n\n".join(textwrap.fill(p, 116, break_long_words=False, break_on_hyphens=False) for p in paragraphs)


CLUSTER_CHECKS[CHECK_ID] = _doc()
