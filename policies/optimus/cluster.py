"""What Optimus asks of the cluster: a job's speed at each size and its placement.

Peng et al., "Optimus", EuroSys 2018: §3.2 (a new job is profiled at a few sizes and
its speed function f(w) fitted to what is seen) and §4.2 (placement on the fewest
servers: controller.model.gpu_choice.best_fit.fewest_servers, the consolidated placer's rule
without racks). Called by `policies.optimus.Optimus` each round; the fitting itself lives in
`policies.optimus.fit`. Deviations are stated in `policies.optimus`.

On a heterogeneous cluster (`rates` given: controller.model.gpu_choice.gpu_type) a job's
profiled speed at w GPUs is its speed on w GPUs of its fastest type that has w, and a
job is placed within its fastest type with room at the size it gets before across
types, where it would run at its slowest GPU's speed (issue 31, item 3).

Placement asks the GPU-choice filter (controller.model.gpu_choice.candidates.GpuFilter) for
each job: the fewest servers are sought over the pool it leaves the job (no cordoned
node, GPU models it accepts, CPU and memory for its pods), a size its queue does not
allow (quotas) shrinks as one that does not place, and the GPUs are taken with the
job's pod request and from its queue's room, so the next job sees what is left.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from controller.model import (
    Allocation,
    Cluster,
    GpuPool,
    JobView,
    Reason,
    Snapshot,
    TypeRates,
)
from controller.model.catalog import resolve
from controller.model.gpu_choice.best_fit import fewest_servers
from controller.model.gpu_choice.candidates import GpuFilter
from controller.model.gpu_choice.gpu_type import nodes_by_type, ranked_types, within_type
from controller.model.job import FRAGMENTED
from controller.model.perf import throughput_ips
from policies.optimus.fit import fit_speed, predict_speed

Speeds = tuple[tuple[int, float], ...]  # (GPUs, iterations/s), by GPUs


class Profiler:
    """Speeds of new jobs from the performance model at a few sizes (§3.2 profiling),
    placed on the fewest servers of the empty cluster; cached for one round. With
    `rates` (a heterogeneous cluster's speeds per GPU type), the speed on the fastest
    type that has the GPUs (the module docstring)."""

    def __init__(self, cluster: Cluster, rates: TypeRates | None = None) -> None:
        self.cluster = cluster
        self.rates = rates
        self._types = list(nodes_by_type(cluster)) if rates is not None else []
        self._pool: GpuPool | None = None
        self._cache: dict[tuple[str, int | None, int], float] = {}

    def profile(self, job: JobView) -> Speeds:
        spec = job.spec
        top = min(spec.max_gpus, self.cluster.num_gpus)
        per_node = self.cluster.max_gpus_per_node
        # A handful of sizes, as the authors' estimator collects 8 to 10 speed points.
        wanted = {spec.min_gpus, top, spec.num_gpus, per_node}
        wanted.update(1 << i for i in range(top.bit_length()))
        sizes = sorted(w for w in wanted if spec.min_gpus <= w <= top)
        profile = resolve(spec.model)
        batch = job.batch_size if job.batch_size is not None else spec.batch_size
        samples: list[tuple[int, float]] = []
        for w in sizes:
            if self.rates is not None:
                fastest = self._fastest(job, w)
                if fastest is not None:
                    samples.append((w, fastest))
                    continue
            key = (profile.name, batch, w)
            if key not in self._cache:
                alloc = fewest_servers(self._empty(), w)
                if alloc is None:
                    continue
                self._cache[key] = throughput_ips(profile, self.cluster, alloc, batch_size=batch)
            samples.append((w, self._cache[key]))
        return tuple(samples)

    def _fastest(self, job: JobView, num_gpus: int) -> float | None:
        """The job's speed on `num_gpus` GPUs of its fastest type that has them."""
        assert self.rates is not None
        spec = job.spec
        speeds = [self.rates.type_rate_ips(spec, t, num_gpus) for t in self._types]
        return max((s for s in speeds if s), default=None)

    def _empty(self) -> GpuPool:
        if self._pool is None:
            nodes = self.cluster.nodes
            self._pool = GpuPool(self.cluster.gpus_per_node, (n.gpu_type.mem_mib for n in nodes))
        return self._pool


def speed_model(
    job: JobView, speeds: Speeds, cluster: Cluster
) -> tuple[tuple[float, ...] | None, tuple[float, ...]]:
    """θ fitted to `speeds`, and f at each of the job's sizes: the speed seen where a
    size was profiled or measured (as the authors' estimator does), the fitted model
    elsewhere, or without a fit the speed of the nearest size seen."""
    sizes = job_sizes(job, cluster)
    if not speeds:
        return None, (1.0,) * len(sizes)
    per_node = cluster.max_gpus_per_node
    theta = fit_speed(speeds, global_batch(job), per_node)
    sampled = np.array([w for w, _ in speeds])
    values = np.array([v for _, v in speeds])
    if theta is None:
        table = values[np.abs(sizes[:, None] - sampled[None, :]).argmin(axis=1)]
    else:
        table = predict_speed(theta, sizes, global_batch(job), per_node)
        at = np.minimum(np.searchsorted(sampled, sizes), len(sampled) - 1)
        seen = sampled[at] == sizes
        table[seen] = values[at[seen]]
    return theta, tuple(float(v) for v in table)


def global_batch(job: JobView) -> float:
    """M, the global batch of Eq. (3)."""
    batch = job.batch_size or job.spec.batch_size
    return float(batch if batch is not None else resolve(job.spec.model).batch_size)


def job_sizes(job: JobView, cluster: Cluster) -> np.ndarray:
    """The GPU counts a job may get: min_gpus .. max_gpus, at most the cluster's."""
    spec = job.spec
    return np.arange(spec.min_gpus, max(spec.min_gpus, min(spec.max_gpus, cluster.num_gpus)) + 1)


# -- §4.2 placement -----------------------------------------------------------------


def place(
    snapshot: Snapshot,
    sizes: Mapping[str, tuple[int, int]],
    jobs: Sequence[tuple[JobView, int]],
    rates: TypeRates | None = None,
) -> tuple[dict[str, Allocation], dict[str, Reason]]:
    """Allocations for the jobs given `sizes` (job id -> (GPUs, order)); `jobs` pairs
    each job with the fewest GPUs it can run on. A running job that keeps its size
    keeps its GPUs; the others are placed largest first, then in order, shrinking an
    elastic job until it fits; reasons for those that do not. With `rates`, at each
    size within the job's fastest type with room first (the module docstring)."""
    run = snapshot.allocations()
    pool = snapshot.free_pool()
    chooser = GpuFilter(snapshot)
    for job in snapshot.running():
        if job.allocation is not None and sizes.get(job.job_id, (0, 0))[0] != job.num_gpus:
            pool.release(job.allocation, job.spec.gpu_mem_mib)
            del run[job.job_id]
            if job.job_id not in sizes:
                chooser.release(job)
    to_place = sorted(
        ((job, least) for job, least in jobs if job.job_id in sizes and job.job_id not in run),
        key=lambda pair: (-sizes[pair[0].job_id][0], sizes[pair[0].job_id][1]),
    )
    reasons: dict[str, Reason] = {}
    for job, least in to_place:
        want = sizes[job.job_id][0]
        alloc = None
        refused: Reason | None = None
        fit = chooser.pool_for(pool, job.spec)
        for gpus in range(want, least - 1, -1):
            if rates is not None:
                alloc = _pack_by_type(snapshot.cluster, fit, rates, job, gpus)
            else:
                alloc = fewest_servers(fit, gpus)
            if alloc is not None:
                refused = chooser.quota_refusal(job, alloc)
                if refused is None:
                    break
                alloc = None  # its queue allows fewer: shrink
        if alloc is None:
            reasons[job.job_id] = refused or Reason(
                FRAGMENTED,
                f"given {want} GPUs but no placement of {least} fits the free GPUs",
            )
            continue
        run[job.job_id] = chooser.take(pool, job, alloc)
    return run, reasons


def _pack_by_type(
    cluster: Cluster, pool: GpuPool, rates: TypeRates, job: JobView, num_gpus: int
) -> Allocation | None:
    """`fewest_servers` within the job's fastest GPU type with room, else across
    types."""
    if pool.total_free < num_gpus:
        return None
    nodes = nodes_by_type(cluster)
    for gpu in ranked_types(rates, job.spec, list(nodes), num_gpus):
        alloc = fewest_servers(within_type(pool, cluster, nodes[gpu]), num_gpus)
        if alloc is not None:
            return alloc
    return fewest_servers(pool, num_gpus)
