"""Pollux's per-job goodput model: throughput x statistical efficiency, best batch size.

Called by `policies.pollux` once a round to turn every active job into a table of
goodput by (nodes, GPUs) and the batch size that reaches it. The equations are those
of Qiao et al., OSDI 2021, §3 (see `policies.pollux` for the citations):

    T_iter(N, K, M) = (T_grad(M/K)^gamma + T_sync(N, K)^gamma)^(1/gamma)            (§3.2)
    T_grad(m)       = a·alpha_grad + beta_grad·m,  a = ⌈m / max local batch⌉   (accumulation)
    EFFICIENCY(M)   = (phi + M_ref) / (phi + M),  phi = r·M_ref                 (§3.1)
    GOODPUT(N, K, M) = M / T_iter · EFFICIENCY(M)   (here in reference-batch iterations/s)

with r = grad_var / grad_sqr, the measured gradient noise ratio at the job's progress.

The throughput parameters are identified on the cluster the job runs on, from the
performance model (`controller.model.perf`), as PolluxAgent fits them from a job's own
step times (§3.2, §4.1): alpha_grad and beta_grad from two one-GPU probes, T_sync(N, K) from one
probe per placement shape, gamma the profile's (the fitted one of a measured profile). For
the six applications with a measured Pollux profile the perf model *is* the fitted
Pollux model (`catalog.PolluxFit`) carried over to this cluster's GPUs and links, so the
goodput here is what the simulator credits. A job without gradient statistics keeps its
batch size (its efficiency is unknown), so only its throughput matters.

A model without a published profile is adaptive once the job reports its own gradient
statistics (gpuflow.train's gradSqr and gradVar, `JobView.measured`), as PolluxAgent
measures them for any job (§3.1, §4.1): EFFICIENCY(M) = (phi + M_0) / (phi + M) above,
with phi = r·M_0 = tr(Sigma) / |G|^2 (§3.1's gradient noise scale) from its own reports
and M_0 its own initial batch; its batches span M_0 to UNPROFILED_BATCH_SPAN x M_0.
Its throughput is the generic model's (the perf model of an unknown model) fitted to
the throughput it reports at each size it ran at (`fit_scales`: T_grad and T_sync of
§3.2 each scaled, as PolluxAgent fits them to the job's own iteration times, §4.1):
rows on one GPU count only fix one scale for both; the model's shape is kept.

Throughput tables are cached in this module per (cluster, application, candidate
batches) and goodput tables per (job kind, progress bucket), least recently used
first out: they are pure functions of those, as `controller.model.perf` caches its
rings; nothing of a round is kept on the policy. `next_bucket_s` tells the policy when a
running job's efficiency moves to its next progress bucket (its next round).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.optimize import least_squares

from controller.model import Allocation, Cluster, JobView
from controller.model.catalog import MeasuredProfile, ModelProfile, measured_profile
from controller.model.perf import packed_gpu_signature, signature_speed, signature_time_s

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# Candidate global batch sizes per application, geometric between M0 and the largest
# batch: AdaptDL's `GoodputFunction.optimize` samples 50; 32 keep the search cheap and
# the chosen batch within ~12% of the best on the grid's span (M0..64·M0 at most).
BATCH_CANDIDATES = 32

# Progress is bucketed to 1/200 for the noise-scale lookup, so that jobs of one
# application at nearly the same progress share one goodput table.
PROGRESS_BUCKETS = 200

# An unprofiled job's largest batch, as a multiple of its own (AdaptDL asks the job for
# `max_batch_size`; gpuflow's default, within the candidate grid's 64x span; the
# policy's `max_batch_sizes` sets it per model).
UNPROFILED_BATCH_SPAN = 16

# Goodput tables kept across rounds (about 20 KB each on 16x4): enough for every job
# of a few hundred at its progress bucket and the next.
GOODPUT_CACHE_ENTRIES = 1024


@dataclass(frozen=True)
class AppKey:
    """What a goodput table depends on besides the cluster."""

    profile: str
    ref_batch: int  # M_ref: the batch the job's work is counted in
    max_batch: int  # largest global batch considered (= ref_batch when not adaptive)
    adaptive: bool  # gradient statistics known: the batch size may change
    # An unprofiled job's throughput fitted to its own reports (`fit_scales`): the
    # performance model's compute and synchronisation times are scaled by these.
    grad_scale: float = 1.0
    sync_scale: float = 1.0


@dataclass(frozen=True)
class TableKey:
    """What a throughput table depends on besides the cluster: the candidate batches."""

    profile: str
    low_batch: int
    max_batch: int
    grad_scale: float = 1.0
    sync_scale: float = 1.0


@dataclass
class ThroughputTable:
    """`rate[n, k, b]`: iterations per second on n nodes, k GPUs, global batch `batches[b]`
    (0 where the local batch would fall below the smallest allowed)."""

    batches: FloatArray  # (B,)
    rate: FloatArray  # (N + 1, K + 1, B)

    @property
    def max_gpus(self) -> int:
        return int(self.rate.shape[1]) - 1


@dataclass
class _ClusterCache:
    cluster: Cluster
    tables: dict[TableKey, ThroughputTable] = field(default_factory=dict)
    sync: dict[tuple[str, int, int], tuple[float, float]] = field(default_factory=dict)
    goodput: OrderedDict[tuple[AppKey, int, float], tuple[FloatArray, IntArray]] = field(
        default_factory=OrderedDict
    )


_caches: dict[int, _ClusterCache] = {}


def app_key(
    profile: ModelProfile,
    ref_batch: int | None,
    max_batches: Mapping[str, int] | None,
    min_gpus: int = 1,
    reports_stats: bool = False,
    model: str = "",
) -> AppKey:
    """The goodput-table key of a job of `profile` whose work counts batches of `ref_batch`.

    A job that runs on at least `min_gpus` GPUs needs a global batch of at least
    `min_gpus` x the smallest local batch: where the profile's largest batch is smaller
    (a rigid 256-GPU BERT against its 384), the largest is raised to that, so that the
    job has an allowed batch at its size (else its goodput is 0 everywhere and it never
    starts) and pays for it in statistical efficiency.

    A model without a measured profile is adaptive once the job reports its gradient
    statistics (`reports_stats`, see `usable_stats`), as AdaptDL adapts any job from
    its own: its batches span `ref_batch` to `max_batches[model]` (the job's model
    name), else UNPROFILED_BATCH_SPAN x `ref_batch`; until it reports it keeps its batch."""
    ref = ref_batch if ref_batch is not None else profile.batch_size
    measured = measured_profile(profile.measured) if profile.measured else None
    if measured is None:
        if not reports_stats:
            return AppKey(profile.name, ref, ref, adaptive=False)
        largest = UNPROFILED_BATCH_SPAN * ref
        if max_batches is not None:
            largest = max_batches.get(model or profile.name, largest)
        return AppKey(profile.name, ref, max(ref, largest, min_gpus), adaptive=True)
    largest = max(measured.validation)
    if max_batches is not None:
        largest = max_batches.get(profile.name, largest)
    largest = max(largest, math.ceil(min_gpus * measured.min_local_bsz))
    return AppKey(profile.name, ref, max(ref, largest), adaptive=True)


@cache
def min_local_batch(profile: ModelProfile) -> float:
    """The smallest per-GPU batch profiled (AdaptDL's atomic batch lower bound)."""
    measured = _measured(profile)
    return 1.0 if measured is None else measured.min_local_bsz


def max_useful_gpus(profile: ModelProfile, key: AppKey) -> int:
    """More GPUs than this would push the local batch below the smallest allowed."""
    return max(1, int(key.max_batch // min_local_batch(profile)))


def noise_ratio(
    profile: ModelProfile, key: AppKey, progress: float, stats_batch: int | None = None
) -> float:
    """r = grad_var / grad_sqr at a progress (0..1), from the measured run at
    `stats_batch` (the batch the job runs at; default its reference batch)."""
    measured = _measured(profile)
    if measured is None:
        return math.inf
    batch = stats_batch if stats_batch is not None else key.ref_batch
    return measured.noise_scale_at(progress * measured.target_progress, batch)


def usable_stats(grad_sqr: float | None, grad_var: float | None) -> bool:
    """Whether reported gradient statistics give a noise ratio: |G|^2 > 0, tr(Sigma) >= 0,
    both finite."""
    if grad_sqr is None or grad_var is None:
        return False
    return grad_sqr > 0.0 and grad_var >= 0.0 and math.isfinite(grad_sqr + grad_var)


def live_ratio(key: AppKey, grad_sqr: float | None, grad_var: float | None) -> float | None:
    """r from a live job's own gradient statistics, reported per sample (gpuflow.train):
    |G|^2 and tr(Sigma). The variance of a gradient averaged over the reference batch
    is tr(Sigma) / M_ref, so r = tr(Sigma) / (M_ref |G|^2) (AdaptDL keeps `var` at the
    initial batch). None when the job is not adaptive or the statistics are unusable."""
    if not key.adaptive or not usable_stats(grad_sqr, grad_var):
        return None
    assert grad_sqr is not None and grad_var is not None
    return grad_var / (key.ref_batch * grad_sqr)


def progress_bucket(progress: float) -> int:
    return min(PROGRESS_BUCKETS, max(0, round(progress * PROGRESS_BUCKETS)))


def goodput_table(
    cluster: Cluster,
    profile: ModelProfile,
    key: AppKey,
    bucket: int,
    max_gpus: int,
    stats_batch: int | None = None,
    ratio: float | None = None,
) -> tuple[FloatArray, IntArray]:
    """(goodput[n, k], best batch[n, k]) at a progress bucket, for k <= `max_gpus` at
    least, with the gradient statistics of the run at `stats_batch` (see
    `noise_ratio`), or with the noise `ratio` r a live job measured (`live_ratio`).
    Goodput is in reference-batch iterations per second; 0 where not allowed."""
    cache = _cache(cluster)
    if stats_batch is None:
        stats_batch = key.ref_batch
    entry_key: tuple[AppKey, int, float] = (key, bucket, float(stats_batch))
    if ratio is not None:
        # Two significant digits: a cached table per ratio seen, not per report.
        ratio = float(f"{ratio:.2g}")
        entry_key = (key, -1, ratio)
    entry = cache.goodput.get(entry_key)
    if entry is not None and entry[0].shape[1] > max_gpus:
        cache.goodput.move_to_end(entry_key)
        return entry
    table = _throughput(cache, profile, key, max_gpus)
    weighted = table.rate * _gain(table, profile, key, bucket, stats_batch, ratio)
    best = np.argmax(weighted, axis=2)
    goodput = np.take_along_axis(weighted, best[:, :, None], axis=2)[:, :, 0]
    entry = (goodput, table.batches.astype(np.int64)[best])
    cache.goodput[entry_key] = entry
    if len(cache.goodput) > GOODPUT_CACHE_ENTRIES:
        cache.goodput.popitem(last=False)
    return entry


def goodput_at_batch(
    cluster: Cluster,
    profile: ModelProfile,
    key: AppKey,
    bucket: int,
    stats_batch: int,
    ratio: float | None,
    where: tuple[int, int],
    batch: int,
) -> float:
    """Goodput on (nodes, GPUs) `where` at the global batch of the table's grid
    nearest `batch` (what a running job's current batch is worth), with the same
    statistics as `goodput_table`; 0 where that batch is not allowed there."""
    nodes, gpus = where
    table = _throughput(_cache(cluster), profile, key, gpus)
    if ratio is not None:
        ratio = float(f"{ratio:.2g}")  # as goodput_table rounds it
    gain = _gain(table, profile, key, bucket, stats_batch, ratio)
    b = int(np.argmin(np.abs(table.batches - batch)))
    return float(table.rate[nodes, gpus, b] * gain[b])


def _gain(
    table: ThroughputTable,
    profile: ModelProfile,
    key: AppKey,
    bucket: int,
    stats_batch: int,
    ratio: float | None,
) -> FloatArray:
    """Reference-batch iterations one step at each of the table's batches is worth:
    M/M_ref times EFFICIENCY(M) for an adaptive job, M/M_ref otherwise."""
    scale: FloatArray = table.batches / key.ref_batch
    if not key.adaptive:
        return scale
    if ratio is None:
        ratio = noise_ratio(profile, key, bucket / PROGRESS_BUCKETS, stats_batch)
    gain: FloatArray = scale * efficiency_at(scale, ratio)
    return gain


def efficiency_at(scale: FloatArray, ratio: float) -> FloatArray:
    """EFFICIENCY(M) = (r + 1) / (r + M/M_ref) (§3.1); 1 for an infinite noise ratio."""
    if not math.isfinite(ratio):
        return np.ones_like(scale)
    result: FloatArray = (ratio + 1.0) / (ratio + scale)
    return result


def _measured(profile: ModelProfile) -> MeasuredProfile | None:
    return measured_profile(profile.measured) if profile.measured else None


def _cache(cluster: Cluster) -> _ClusterCache:
    entry = _caches.get(id(cluster))
    if entry is None or entry.cluster is not cluster:
        entry = _ClusterCache(cluster)
        _caches[id(cluster)] = entry
    return entry


def _throughput(
    cache: _ClusterCache, profile: ModelProfile, key: AppKey, max_gpus: int
) -> ThroughputTable:
    if key.adaptive:
        # M0: the profile's initial batch; an unprofiled job's own (AdaptDL's init_batch_size).
        low = profile.batch_size if profile.measured else key.ref_batch
        table_key = TableKey(profile.name, low, key.max_batch, key.grad_scale, key.sync_scale)
    else:
        table_key = TableKey(profile.name, key.ref_batch, key.ref_batch)
    table = cache.tables.get(table_key)
    if table is None or table.max_gpus < max_gpus:
        # Grown by doubling, so that a replay builds each table a few times at most.
        grown = max(max_gpus, 2 * table.max_gpus if table is not None else 0)
        table = _build(cache, profile, table_key, key.adaptive, min(grown, cache.cluster.num_gpus))
        cache.tables[table_key] = table
    return table


def _build(
    cache: _ClusterCache, profile: ModelProfile, key: TableKey, adaptive: bool, max_gpus: int
) -> ThroughputTable:
    cluster = cache.cluster
    grid = np.geomspace(key.low_batch, key.max_batch, BATCH_CANDIDATES if adaptive else 1)
    batches = np.unique(np.round(grid))
    order = sorted(range(len(cluster.nodes)), key=lambda i: (-cluster.nodes[i].num_gpus, i))
    capacity = np.cumsum([cluster.nodes[i].num_gpus for i in order])
    max_nodes = min(len(order), max_gpus)
    rate = np.zeros((max_nodes + 1, max_gpus + 1, len(batches)))
    alpha, beta, probe_speed = _compute_params(cluster, profile, order[0])
    gamma = _gamma(profile)
    min_local = min_local_batch(profile) if adaptive else 0.0
    for k in range(1, max_gpus + 1):
        local = batches / k
        allowed = local >= min_local - 1e-9
        for n in range(max(1, _min_nodes(capacity, k)), min(k, max_nodes) + 1):
            sync_s, speed = _cached_sync(cache, profile, order, n, k, alpha, beta, probe_speed)
            sync_s *= key.sync_scale
            compute_s = _compute_s(profile, local, alpha, beta, probe_speed / speed)
            compute_s = compute_s * key.grad_scale
            if sync_s > 0.0:
                iter_s = (compute_s**gamma + sync_s**gamma) ** (1.0 / gamma)
            else:
                iter_s = compute_s
            rate[n, k] = np.where(allowed, 1.0 / iter_s, 0.0)
    return ThroughputTable(batches, rate)


def fit_scales(
    cluster: Cluster, profile: ModelProfile, rows: tuple[tuple[int, int, float], ...]
) -> tuple[float, float]:
    """(compute scale, synchronisation scale) that bring `profile`'s throughput model on
    `cluster` closest, in log iteration time, to a job's measured (GPUs, global batch,
    samples/s) rows, each GPU count placed packed on the largest nodes. PolluxAgent
    fits its throughput parameters to the job's own iteration times (§3.2, §4.1); here
    the model's shape stays and its two times are scaled. Rows on one GPU only fix the
    compute scale, which then stands for both; (1, 1) without usable rows. Rounded to
    two significant digits (one goodput table per fit, not per report)."""
    cache = _cache(cluster)
    order = sorted(range(len(cluster.nodes)), key=lambda i: (-cluster.nodes[i].num_gpus, i))
    capacity = np.cumsum([cluster.nodes[i].num_gpus for i in order])
    alpha, beta, probe_speed = _compute_params(cluster, profile, order[0])
    gamma = _gamma(profile)
    observed, compute, sync = [], [], []
    for gpus, batch, samples_per_s in rows:
        if not (0 < gpus <= int(capacity[-1]) and batch > 0 and samples_per_s > 0.0):
            continue
        n = _min_nodes(capacity, gpus)
        sync_s, speed = _cached_sync(cache, profile, order, n, gpus, alpha, beta, probe_speed)
        observed.append(batch / samples_per_s)
        compute.append(float(_compute_s(profile, batch / gpus, alpha, beta, probe_speed / speed)))
        sync.append(sync_s)
    if not observed:
        return 1.0, 1.0
    t, c, y = np.log(observed), np.array(compute), np.array(sync)
    grad = float(np.mean(t - np.log(c)))
    both = (grad, grad)
    if np.any(y > 0.0):

        def residual(x: FloatArray) -> FloatArray:
            u, v = np.exp(x)
            out: FloatArray = np.log((u * c) ** gamma + (v * y) ** gamma) / gamma - t
            return out

        both = tuple(least_squares(residual, [grad, grad], bounds=(-7.0, 7.0)).x)
    return _two_digits(math.exp(both[0])), _two_digits(math.exp(both[1]))


def _two_digits(x: float) -> float:
    return float(f"{x:.2g}")


def _min_nodes(capacity: npt.NDArray[np.int64], k: int) -> int:
    """Fewest nodes (the largest first) that hold k GPUs; len + 1 if none do."""
    return int(np.searchsorted(capacity, k)) + 1


def _gamma(profile: ModelProfile) -> float:
    measured = _measured(profile)
    return measured.fit.gamma if measured is not None else profile.gamma


def _compute_params(
    cluster: Cluster, profile: ModelProfile, node: int
) -> tuple[float, float, float]:
    """(alpha, beta, the model's speed there): one-GPU iteration time alpha + beta·m
    on `node`, one accumulation step."""
    sig = packed_gpu_signature(cluster, Allocation.whole([(node, 0)]))
    high = profile.max_local_batch
    low = max(1, high // 2)
    t_high = signature_time_s(profile, sig, batch_size=high)
    if low == high:
        return 0.0, t_high / high, signature_speed(profile, sig)
    t_low = signature_time_s(profile, sig, batch_size=low)
    beta = (t_high - t_low) / (high - low)
    return t_low - beta * low, beta, signature_speed(profile, sig)


def _cached_sync(
    cache: _ClusterCache,
    profile: ModelProfile,
    order: list[int],
    n: int,
    k: int,
    alpha: float,
    beta: float,
    probe_speed: float,
) -> tuple[float, float]:
    """`_sync` of `k` GPUs on the first `n` nodes of `order`, computed once per cluster."""
    key = (profile.name, n, k)
    got = cache.sync.get(key)
    if got is None:
        got = cache.sync[key] = _sync(
            cache.cluster, profile, order[:n], k, alpha, beta, probe_speed
        )
    return got


def _compute_s(profile: ModelProfile, local: Any, alpha: float, beta: float, speedup: float) -> Any:
    """The compute time of an iteration of `local` samples per GPU (a float or an
    array): gradient-accumulation steps of at most `max_local_batch` samples, each
    alpha + beta x samples on the probe GPU, times the probe's speed over this one's
    (`speedup`)."""
    steps = np.maximum(1.0, np.ceil(local / profile.max_local_batch - 1e-9))
    return (steps * alpha + beta * local) * speedup


def _sync(
    cluster: Cluster,
    profile: ModelProfile,
    nodes: list[int],
    k: int,
    alpha: float,
    beta: float,
    probe_speed: float,
) -> tuple[float, float]:
    """(T_sync, slowest GPU speed) of k GPUs on `nodes`, packed, identified from one probe."""
    counts = [1] * len(nodes)
    left = k - len(nodes)
    for i, node in enumerate(nodes):
        extra = min(left, cluster.nodes[node].num_gpus - 1)
        counts[i] += extra
        left -= extra
    alloc = Allocation.whole(
        (node, g) for node, c in zip(nodes, counts, strict=True) for g in range(c)
    )
    sig = packed_gpu_signature(cluster, alloc)
    local = profile.max_local_batch  # one accumulation step
    # The model's own speed on the slowest GPU (measured where a rate is), so that the
    # compute part is what signature_time_s takes for it.
    speed = signature_speed(profile, sig)
    if k == 1:
        return 0.0, speed
    step_s = signature_time_s(profile, sig, batch_size=local * k)
    compute_s = (alpha + beta * local) * probe_speed / speed
    gamma = _gamma(profile)
    excess = step_s**gamma - compute_s**gamma
    return (excess ** (1.0 / gamma) if excess > 0.0 else 0.0), speed


def next_bucket_s(view: JobView, now: float) -> float:
    """When a running job at its current speed reaches its next progress bucket."""
    if view.rate_ips <= 0.0:
        return now
    progress = view.progress_at(now)
    boundary = (math.floor(progress * PROGRESS_BUCKETS + 0.5) + 0.5) / PROGRESS_BUCKETS
    start = max(now, view.resume_s)
    return start + (boundary - progress) * view.total_iters / view.rate_ips
