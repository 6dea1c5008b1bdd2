"""The performance model: how long one iteration of a job takes on its GPUs.

The simulator converts rates into progress with it, placement scores GPU sets by it,
and policies (Optimus, Pollux) read throughputs from it. All bandwidths are
unidirectional Gbit/s; S is the gradient all-reduced per iteration, in Gbit.

Compute, for a profile without measurements, at global batch B on k GPUs (local batch
m = B/k), speed v of the job's model on its slowest GPU (relative to a V100) and
accumulation steps a = ceil(m / max_local_batch):

    T_comp = (a·overhead_s + per_sample_s·m) / v

The speed is per model (`gpu_speed`): where controller.model.perf.throughputs holds a
measured rate r (steps/s) of the model on the GPU type at the job's precision, at the
measured batch b nearest the profile's local batch, v = T_V100(b)·r, so that the step
at b takes 1/r and other batches scale as the profile's shape says; a rate measured
only at other precisions is taken from the one nearest in datasheet speed and scaled
by the precisions' datasheet ratio (controller.model.precision); with nothing
measured, v is the GPU's scalar speed times that ratio from TF32 (1 for a job in TF32,
the default), times the model's measured speed on the unit V100 where that was
measured (the profile's V100 figures corrected by the measurement; 1 otherwise, and
for the Pollux-measured profiles below, whose figures are measurements already). A job
on several GPU types runs at its slowest GPU's speed for its model.

Communication, a hierarchical ring all-reduce (reduce-scatter inside each node, ring
across nodes, all-gather inside each node), with c_i GPUs on node i, N nodes:

    T_intra = max_i 2(c_i-1)/c_i · S / B_intra,i
    T_inter = 2(N-1)/N · S / B_inter                      (0 when N = 1)
    T_comm  = T_intra + T_inter + ⌈S / bucket⌉ · (2(c_max-1)·lat_intra + 2(N-1)·lat_inter)

B_intra,i is the bottleneck pair bandwidth (`Node.pair_gbps`) of the best ring through
the job's GPUs on node i: on a DGX-1, GPUs {0,1,2,3} close a ring of NVLinks while
{0,1,4,5} need a PCIe/SYS hop. B_inter is `inter_node_gbps` when the network allocator
gives one (it is the job's end-to-end rate, already fair on every link it crosses);
otherwise the slowest NIC of the job's nodes, and, when the job spans racks, no more
than each node's share of its rack's uplink (uplink_gbps / nodes in the rack).

Overlap of all-reduce with the backward pass, as in Pollux (Qiao et al., OSDI'21 §3.2):

    T_iter = (T_comp^gamma + T_comm^gamma)^(1/gamma)

with gamma = profile.gamma (gamma = 1: no overlap; gamma → ∞: perfect overlap).

Profiles with a Pollux measurement use the fitted model instead (see
`controller.model.catalog.measured`, and `controller.model.catalog.profile` for the testbed):
T_comp = T_grad(m)·PROFILED_GPU_SPEED/v (accumulation adds alpha_grad per extra
step; T_grad·PROFILED_GPU_SPEED is T_V100 for `gpu_speed`) and
T_comm = T_sync(N, K) · T_comm(job) / T_comm(testbed),
where T_comm(testbed) is the formula above for the same per-node GPU counts on the
Pollux testbed (PCIe between a node's T4s, 50 Gbit/s between nodes). That is, gpuflow
assumes the measured synchronisation time scales with the analytic all-reduce time;
gamma is the fitted one.

Sharing: `gpu_load` is the summed utilisation of the other jobs on this job's most
loaded GPU. T_comp is multiplied by `controller.model.sharing.slowdown` for the sharing
mode of the job's nodes (time-slicing if any of them time-slices), the job's own
utilisation (`gpu_util`) and its smallest GPU share (an MPS client's cap of the SMs).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from functools import cache
from typing import NamedTuple

from controller.model.allocation import Allocation
from controller.model.catalog import measured_profile
from controller.model.catalog.profile import (
    PROFILED_GPU_SPEED,
    PROFILED_INTRA_GBPS,
    PROFILED_NIC_GBPS,
    ModelProfile,
)
from controller.model.cluster import Cluster, GpuType, Node
from controller.model.gpus import GPU_CATALOG
from controller.model.perf.throughputs import shipped_throughputs
from controller.model.precision import DEFAULT_PRECISION, Precision, precision_ratio
from controller.model.sharing import SharingMode, slowdown

MIB_GBIT = 2**20 * 8 / 1e9

# PyTorch DDP's default gradient bucket (bucket_cap_mb=25; Li et al., VLDB'20 §3.2.3):
# each bucket is one all-reduce, paying the per-step latencies below.
BUCKET_MIB = 25.0
# Per ring step latency: gpuflow's assumptions, of the order of NCCL's intra-node
# (NVLink/PCIe, a few µs) and TCP inter-node (tens of µs) small-message latencies.
INTRA_LATENCY_S = 5e-6
INTER_LATENCY_S = 30e-6

# Above this many GPUs on one node the best ring is not searched exhaustively.
_EXACT_RING_MAX_GPUS = 9


class PlacementSignature(NamedTuple):
    """What of a placement the iteration time depends on; equal signatures, equal times.

    `nodes` holds (GPUs, best intra-node ring Gbit/s) per node, sorted; `nic_gbps` the
    slowest NIC; `uplink_gbps` the smallest per-node rack-uplink share when the job
    spans racks (inf otherwise); `speed` the slowest GPU's scalar speed; `min_fraction`
    the smallest GPU share held; `sharing` how its GPUs are shared (time-slicing if
    any of its nodes time-slices); `gpu_types` the GPU types held (sorted by name), from
    which a model's speed follows (`gpu_speed`; empty: `speed` for every model).
    """

    nodes: tuple[tuple[int, float], ...]
    nic_gbps: float
    uplink_gbps: float
    speed: float
    min_fraction: float
    sharing: SharingMode = SharingMode.MPS
    gpu_types: tuple[GpuType, ...] = ()

    @property
    def num_gpus(self) -> int:
        return sum(c for c, _ in self.nodes)


def iteration_time_s(
    profile: ModelProfile,
    cluster: Cluster,
    alloc: Allocation,
    *,
    batch_size: int | None = None,
    inter_node_gbps: float | None = None,
    gpu_load: float = 0.0,
    precision: Precision = DEFAULT_PRECISION,
) -> float:
    """Seconds per iteration of `profile` on `alloc` (see the module docstring).

    `batch_size` is the global batch (default: the profile's); `inter_node_gbps` the
    rate the network allocator gives the job; `gpu_load` the other jobs' utilisation
    on this job's most loaded GPU; `precision` what the job trains in.
    """
    signature = packed_gpu_signature(cluster, alloc)
    return signature_time_s(
        profile,
        signature,
        batch_size=batch_size,
        inter_node_gbps=inter_node_gbps,
        gpu_load=gpu_load,
        precision=precision,
    )


def throughput_ips(
    profile: ModelProfile,
    cluster: Cluster,
    alloc: Allocation,
    *,
    batch_size: int | None = None,
    inter_node_gbps: float | None = None,
    gpu_load: float = 0.0,
    precision: Precision = DEFAULT_PRECISION,
) -> float:
    """Iterations per second: 1 / `iteration_time_s`."""
    return 1.0 / iteration_time_s(
        profile,
        cluster,
        alloc,
        batch_size=batch_size,
        inter_node_gbps=inter_node_gbps,
        gpu_load=gpu_load,
        precision=precision,
    )


def restart_s(profile: ModelProfile) -> float:
    """Checkpoint plus restart cost of the job (see `profile.default_restart_s`)."""
    return profile.restart_s


def signature_time_s(
    profile: ModelProfile,
    signature: PlacementSignature,
    *,
    batch_size: int | None = None,
    inter_node_gbps: float | None = None,
    gpu_load: float = 0.0,
    precision: Precision = DEFAULT_PRECISION,
) -> float:
    """`iteration_time_s` from a placement signature (for callers that cache them)."""
    num_gpus = signature.num_gpus
    local_batch = (batch_size or profile.batch_size) / num_gpus
    if inter_node_gbps is None:
        b_inter = min(signature.nic_gbps, signature.uplink_gbps)
    else:
        b_inter = inter_node_gbps
    comm = allreduce_s(profile.grad_mib, signature.nodes, b_inter)
    measured = measured_profile(profile.measured) if profile.measured else None
    v100_s = v100_compute_s(profile)
    if measured is None:
        gamma = profile.gamma
    else:
        fit = measured.fit
        gamma = fit.gamma
        if comm > 0.0:
            testbed = tuple((c, PROFILED_INTRA_GBPS) for c, _ in signature.nodes)
            reference = allreduce_s(profile.grad_mib, testbed, PROFILED_NIC_GBPS)
            comm *= fit.sync_s(len(signature.nodes), num_gpus) / reference
    speed = signature_speed(profile, signature, precision)
    compute = v100_s(local_batch) / speed
    compute *= slowdown(signature.sharing, profile.gpu_util, gpu_load, signature.min_fraction)
    if comm <= 0.0:
        return compute
    return float((compute**gamma + comm**gamma) ** (1.0 / gamma))


def v100_compute_s(profile: ModelProfile) -> Callable[[float], float]:
    """The profile's compute time of an iteration at local batch m on one V100, with
    gradient accumulation: its own figures, or the Pollux fit's at the testbed's speed."""
    measured = measured_profile(profile.measured) if profile.measured else None
    if measured is None:
        return profile.compute_s
    fit = measured.fit

    def v100_s(m: float) -> float:
        accumulation = max(1, math.ceil(m / profile.max_local_batch - 1e-9))
        return (accumulation * fit.alpha_grad + fit.beta_grad * m) * PROFILED_GPU_SPEED

    return v100_s


def signature_speed(
    profile: ModelProfile,
    signature: PlacementSignature,
    precision: Precision = DEFAULT_PRECISION,
) -> float:
    """The model's speed on the placement's slowest GPU type for it (`gpu_speed`);
    the signature's scalar speed where it names no GPU types."""
    if not signature.gpu_types:
        return signature.speed
    return min(gpu_speed(profile, gpu, precision) for gpu in signature.gpu_types)


@cache
def gpu_speed(
    profile: ModelProfile, gpu: GpuType, precision: Precision = DEFAULT_PRECISION
) -> float:
    """A model's speed on `gpu` relative to the profile's V100 figures (the module
    docstring): measured (controller.model.perf.throughputs) where a rate is, else the
    scalar speed times the datasheet's precision ratio, times the model's measured
    speed on the unit GPU (the V100 the speeds are relative to) where that was
    measured, so that GPUs measured and not keep the scalar speeds' order for the
    model. Not for a profile with a Pollux measurement: its figures are measured
    already, on the Pollux testbed's T4s, which replay at the measured step times. One
    figure per (profile, GPU type, precision), hence cached."""
    measured = _measured_speed(profile, gpu.name, precision)
    if measured is not None:
        return measured
    unit = None
    if profile.measured is None:
        unit = _measured_speed(profile, GPU_CATALOG.unit.name, DEFAULT_PRECISION)
    calibration = unit / GPU_CATALOG.unit.speed if unit is not None else 1.0
    return gpu.speed * precision_ratio(gpu.name, precision) * calibration


def _measured_speed(profile: ModelProfile, gpu: str, precision: Precision) -> float | None:
    """The model's measured speed on `gpu` in `precision`, from a rate in it or, failing
    that, in the other precision nearest it in datasheet speed times the datasheet
    ratio (ties: the first in `Precision`'s order); of the rates measured at several
    batches, the one nearest the profile's local batch, so that a model's speed on a
    GPU is one figure and its step time keeps the profile's shape in the batch
    (Pollux's goodput model fits it with a line)."""
    table = shipped_throughputs()
    hit = table.rate(profile.name, gpu, precision, 1, profile.local_batch)
    scale = 1.0
    if hit is None:
        others = (table.rate(profile.name, gpu, p, 1, profile.local_batch) for p in Precision)
        scales = [
            (precision_ratio(gpu, precision) / precision_ratio(gpu, h.precision), h)
            for h in others
            if h is not None
        ]
        if not scales:
            return None
        scale, hit = min(
            scales, key=lambda s: (abs(math.log(s[0])), list(Precision).index(s[1].precision))
        )
    batch = hit.batch if hit.batch is not None else profile.local_batch
    return v100_compute_s(profile)(batch) * hit.iters_per_s * scale


def allreduce_s(grad_mib: float, nodes: tuple[tuple[int, float], ...], inter_gbps: float) -> float:
    """Hierarchical ring all-reduce time of `grad_mib` over (GPUs, ring Gbit/s) nodes."""
    size_gbit = grad_mib * MIB_GBIT
    intra = 0.0
    widest = 1
    for count, ring_gbps in nodes:
        if count > 1:
            intra = max(intra, 2.0 * (count - 1) / count * size_gbit / ring_gbps)
            widest = max(widest, count)
    n = len(nodes)
    inter = 2.0 * (n - 1) / n * size_gbit / inter_gbps if n > 1 else 0.0
    if intra == 0.0 and inter == 0.0:
        return 0.0
    buckets = max(1, math.ceil(grad_mib / BUCKET_MIB))
    latency = buckets * (2 * (widest - 1) * INTRA_LATENCY_S + 2 * (n - 1) * INTER_LATENCY_S)
    return intra + inter + latency


def packed_gpu_signature(cluster: Cluster, alloc: Allocation) -> PlacementSignature:
    """The hashable summary of `alloc` on `cluster` that fixes its iteration time."""
    per_node: dict[int, list[int]] = {}
    min_fraction = 1.0
    for share in alloc.shares:
        per_node.setdefault(share.node, []).append(share.gpu)
        min_fraction = min(min_fraction, share.fraction)
    nodes: list[tuple[int, float]] = []
    nic = math.inf
    speed = math.inf
    racks: set[int] = set()
    sharing = SharingMode.MPS
    types: set[GpuType] = set()
    for index, gpus in per_node.items():
        node = cluster.nodes[index]
        nodes.append((len(gpus), best_ring_gbps(node, tuple(gpus))))
        nic = min(nic, node.nic_gbps)
        speed = min(speed, node.gpu_type.speed)
        types.add(node.gpu_type)
        racks.add(node.rack)
        if node.sharing is SharingMode.TIME_SLICING:
            sharing = SharingMode.TIME_SLICING
    uplink = math.inf
    if len(racks) > 1:
        per_rack = _nodes_per_rack(cluster)
        uplink = min(cluster.racks[r].uplink_gbps / per_rack[r] for r in racks)
    return PlacementSignature(
        tuple(sorted(nodes)),
        nic,
        uplink,
        speed,
        min_fraction,
        sharing,
        tuple(sorted(types, key=lambda t: t.name)),
    )


# Caches keyed by object id; the object is kept with its entry so the id is not reused.
_ring_cache: dict[tuple[int, int], tuple[Node, dict[tuple[int, ...], float]]] = {}
_rack_cache: dict[int, tuple[Cluster, tuple[int, ...]]] = {}


def best_ring_gbps(node: Node, gpus: tuple[int, ...]) -> float:
    """Bottleneck bandwidth of the best ring through `gpus` of `node` (inf for one GPU).

    Exact (all rings searched) up to 9 GPUs; above that the slowest pair, a lower
    bound that is exact for the uniform NVSwitch nodes such sizes come in.
    """
    # Nodes of one type share their link matrix and GPU type objects, so keying by
    # those shares the searches among all nodes of a type.
    key = (id(node.links), id(node.gpu_type))
    entry = _ring_cache.get(key)
    if entry is None or entry[0].links is not node.links or entry[0].gpu_type is not node.gpu_type:
        entry = (node, {})
        _ring_cache[key] = entry
    cached = entry[1].get(gpus)
    if cached is None:
        cached = _search_ring(node, gpus)
        entry[1][gpus] = cached
    return cached


def _search_ring(node: Node, gpus: tuple[int, ...]) -> float:
    if len(gpus) < 2:
        return math.inf
    bw = {(i, j): node.pair_gbps(i, j) for i in gpus for j in gpus if i != j}
    if len(gpus) == 2:
        return bw[gpus[0], gpus[1]]
    if len(gpus) > _EXACT_RING_MAX_GPUS:
        return min(bw.values())
    # Each GPU's ring has two neighbours, so no ring beats any GPU's second-best link.
    ceiling = min(sorted((bw[i, j] for j in gpus if j != i), reverse=True)[1] for i in gpus)
    first, rest = gpus[0], gpus[1:]
    best = 0.0
    for order in itertools.permutations(rest):
        if order[0] > order[-1]:  # each ring once, not also reversed
            continue
        bottleneck = min(bw[first, order[0]], bw[order[-1], first])
        for a, b in itertools.pairwise(order):
            bottleneck = min(bottleneck, bw[a, b])
            if bottleneck <= best:
                break
        if bottleneck > best:
            best = bottleneck
            if best >= ceiling:
                break
    return best


def _nodes_per_rack(cluster: Cluster) -> tuple[int, ...]:
    entry = _rack_cache.get(id(cluster))
    if entry is None or entry[0] is not cluster:
        counts = [0] * len(cluster.racks)
        for node in cluster.nodes:
            counts[node.rack] += 1
        entry = (cluster, tuple(counts))
        _rack_cache[id(cluster)] = entry
    return entry[1]
