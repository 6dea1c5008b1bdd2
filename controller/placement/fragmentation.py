"""Fragmentation-aware placement (FGD) and the fragmentation measures of a pool.

Registered as `fragmentation-aware`; the simulator calls `fragmentation` and
`unallocatable_idle_gpus` after each round to record them.

Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
Fragmentation Gradient Descent" (USENIX ATC 2023), §3. A workload mix M gives each
request m (a whole number of GPUs, or a share of one GPU) a probability p_m. With
R_g the unallocated part of GPU g of node n (1 free, 0 < R_g < 1 shared, 0 full),
the fragment of n for m is

    F_n(m) = sum_g R_g                        if m cannot run on n at all
           = sum_{g : R_g < min(d_m, 1)} R_g  otherwise

(the idle capacity that m cannot use), and F_n(M) = sum_m p_m F_n(m): the expected
number of the node's idle GPUs that a request drawn from the mix cannot use. The
cluster's fragmentation is the sum over nodes. A request places where the increase
of its node's F_n(M) (the fragmentation gradient) is smallest; ties go to the
shortest predicted iteration time, then best fit, then the lowest node
(`topology.TopologyAwarePlacer`'s scoring), and within the node to the best ring.

Deviations from FGD, which places single-node pods of a CPU/GPU cluster:

- Only GPUs are resources (no CPU or host memory dimension); GPU memory is checked
  for every share (`GpuPool.share_fits`) but not counted in F.
- A request of k whole GPUs needs min(k, G_n) free GPUs of a node of G_n GPUs: a
  gang larger than a node counts as wanting whole nodes. A gang that no single node
  holds is placed as the topology-aware placer places it (fewest nodes, one rack).
- The share a GPU-sharing job takes (a job with `gpu_mem_mib` set, placed on one
  GPU) is its dominant share of the GPU: max(gpu_mem_mib / GPU memory, the job's
  GPU utilisation (its own, else its model's: catalog.gpu_util_of)), rounded up to
  whole percent (MPS active-thread percentages are whole percent); at 1 or more it
  takes a whole GPU. Taking at least its utilisation bounds the MPS cap's slowdown
  (controller.model.sharing: at f = u, under 5 % for u >= 0.9, 32 % at u = 0.3);
  taking at least its memory share keeps F honest about memory-bound GPUs.
- The mix: pinned by the `mix` argument, or else learned from the requests the
  placer is asked for: the last `MIX_WINDOW_JOBS` distinct jobs, re-read every
  `MIX_REFRESH_JOBS` new jobs (the snapshot is not passed to a placer).
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from controller.model import Allocation, Cluster, GpuPool, GpuShare, GpuType, JobView
from controller.model.allocation import SHARE_EPS
from controller.model.catalog import gpu_util_of
from controller.model.job import MILLI_PER_GPU
from controller.placement.topology import Candidate, JobScorer, TopologyAwarePlacer

# CUDA MPS takes CUDA_MPS_ACTIVE_THREAD_PERCENTAGE in whole percent.
SHARE_QUANTUM = 0.01
# The learned mix: about the active jobs of a busy cluster (hundreds), refreshed
# often enough to follow a changing workload and rarely enough to cost nothing.
MIX_WINDOW_JOBS = 512
MIX_REFRESH_JOBS = 32
# Bound on the cached node fragments of one mix (whole free GPUs x shared leftovers).
_MIX_CACHE_ENTRIES = 1 << 16


@dataclass(frozen=True)
class WorkloadMix:
    """Requests and their probabilities: (GPUs, p) with GPUs a whole number >= 1 or a
    share in (0, 1); probabilities sum to 1. Build with `of`."""

    demands: tuple[tuple[float, float], ...]
    _cache: dict[tuple[int, int, tuple[float, ...]], float] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if not self.demands:
            raise ValueError("a workload mix needs at least one request")
        for gpus, p in self.demands:
            if not (0.0 < gpus < 1.0 or (gpus >= 1.0 and gpus == int(gpus))):
                raise ValueError(f"a request is a share in (0, 1) or whole GPUs, got {gpus}")
            if p < 0.0:
                raise ValueError(f"probabilities must be >= 0, got {p}")
        if not math.isclose(sum(p for _, p in self.demands), 1.0, rel_tol=1e-9):
            raise ValueError("probabilities must sum to 1")

    @classmethod
    def of(cls, weights: Mapping[float, float]) -> WorkloadMix:
        """A mix from request -> weight (counts or shares), normalised."""
        total = sum(weights.values())
        if total <= 0.0:
            raise ValueError("a workload mix needs a positive weight")
        return cls(tuple(sorted((float(g), w / total) for g, w in weights.items() if w > 0)))

    def node_fragmentation(self, size: int, free: int, leftovers: tuple[float, ...] = ()) -> float:
        """F_n(M) of a node of `size` GPUs with `free` whole free GPUs and shared GPUs
        whose unallocated parts are `leftovers`."""
        if len(leftovers) > 1:
            leftovers = tuple(sorted(leftovers))
        key = (size, free, leftovers)
        hit = self._cache.get(key)
        if hit is None:
            if len(self._cache) >= _MIX_CACHE_ENTRIES:
                self._cache.clear()
            hit = self._cache[key] = self._fragment(size, free, leftovers)
        return hit

    def _fragment(self, size: int, free: int, leftovers: tuple[float, ...]) -> float:
        idle = free + sum(leftovers)
        total = 0.0
        for gpus, p in self.demands:
            if gpus < 1.0:
                if free > 0 or any(left >= gpus - SHARE_EPS for left in leftovers):
                    frag = sum(left for left in leftovers if left < gpus - SHARE_EPS)
                else:
                    frag = idle
            else:
                frag = idle - free if free >= min(int(gpus), size) else idle
            total += p * frag
        return total


def request(job: JobView, num_gpus: int, gpu: GpuType) -> float:
    """What `job` asks of a node with `gpu`s: its share of one GPU, or whole GPUs."""
    share = share_fraction(job, num_gpus, gpu)
    return float(num_gpus) if share is None else share


def share_fraction(job: JobView, num_gpus: int, gpu: GpuType) -> float | None:
    """The GPU share a GPU-sharing job takes on a `gpu` (module docstring), or None
    when it takes whole GPUs."""
    spec = job.spec
    mem = spec.gpu_mem_mib
    if num_gpus != 1 or (mem is None and not spec.is_share):
        return None
    if mem is None:  # a share asked in milli-GPUs, taken as asked
        return spec.gpu_milli / MILLI_PER_GPU
    need = max(mem / gpu.mem_mib, gpu_util_of(spec), spec.gpu_milli / MILLI_PER_GPU)
    share = math.ceil(need / SHARE_QUANTUM - 1e-9) * SHARE_QUANTUM
    return round(share, 6) if share < 1.0 - SHARE_EPS else None


def reference_gpu(cluster: Cluster) -> GpuType:
    """The cluster's most common GPU type (the first node's among equals)."""
    counts = Counter(node.gpu_type for node in cluster.nodes)
    return max(counts, key=lambda gpu: counts[gpu])


def fragmentation(pool: GpuPool, cluster: Cluster, mix: WorkloadMix) -> float:
    """The cluster's F(M): expected idle GPUs that a request drawn from `mix` cannot
    use, summed over the nodes that are up. O(nodes), less on a homogeneous cluster."""
    leftovers = _leftovers(pool)
    sizes = cluster.gpus_per_node
    homogeneous = min(sizes) == max(sizes)
    total = 0.0
    in_bucket = Counter(len(pool.free_gpus(node)) for node in leftovers)
    for node, shared in leftovers.items():
        total += mix.node_fragmentation(
            sizes[node], len(pool.free_gpus(node)), tuple(left for _, left in shared)
        )
    for free in range(1, len(pool.buckets)):
        bucket = pool.buckets[free]
        if not bucket:
            continue
        if homogeneous:
            plain = len(bucket) - in_bucket[free]
            total += plain * mix.node_fragmentation(sizes[0], free)
        else:
            for node in bucket:
                if node not in leftovers:
                    total += mix.node_fragmentation(sizes[node], free)
    return total


def unallocatable_idle_gpus(pool: GpuPool, cluster: Cluster, pending_sizes: Iterable[int]) -> int:
    """Whole idle GPUs that none of the waiting jobs' sizes could use: a node's free
    GPUs count when they are fewer than min(k, node size) for every waiting size k
    (a gang larger than a node wants whole nodes). 0 when nothing waits, and on a
    cluster with no node yet (cluster mode before any agent has published one)."""
    smallest = min(pending_sizes, default=0)
    sizes = cluster.gpus_per_node
    if smallest <= 0 or not sizes:
        return 0
    homogeneous = min(sizes) == max(sizes)
    total = 0
    for free in range(1, min(smallest, len(pool.buckets))):
        bucket = pool.buckets[free]
        if homogeneous:
            total += free * len(bucket) if free < sizes[0] else 0
        else:
            total += sum(free for node in bucket if free < sizes[node])
    return total


class FragmentationAwarePlacer:
    """FGD: the placement that raises the cluster's fragmentation least (module docstring)."""

    def __init__(self, cluster: Cluster, mix: WorkloadMix | None = None) -> None:
        self.cluster = cluster
        self.topology = TopologyAwarePlacer(cluster)
        self.kinds = self.topology.kinds
        self.mix = mix if mix is not None else WorkloadMix.of({1.0: 1.0})
        self._pinned = mix is not None
        self._gpu = reference_gpu(cluster)
        self._sizes = cluster.gpus_per_node
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._counts: Counter[float] = Counter()
        self._new_jobs = 0
        self._gradients: dict[tuple[int, int, int], float] = {}  # for self.mix

    def place(self, pool: GpuPool, job: JobView, num_gpus: int) -> Allocation | None:
        self._observe(job, request(job, num_gpus, self._gpu))
        if share_fraction(job, num_gpus, self._gpu) is not None:
            return self._place_share(pool, job)
        if pool.total_free < num_gpus:
            return None
        scorer = self.topology.scorer(job)
        best = self._best_node(pool, num_gpus, scorer)
        if best is None:
            best = self.topology.best_gang(pool, num_gpus, scorer)
        return None if best is None else best.allocation()

    def _observe(self, job: JobView, demand: float) -> None:
        if self._pinned or job.job_id in self._seen:
            return
        self._seen[job.job_id] = demand
        self._counts[demand] += 1
        if len(self._seen) > MIX_WINDOW_JOBS:
            _, old = self._seen.popitem(last=False)
            self._counts[old] -= 1
        self._new_jobs += 1
        if self._new_jobs >= MIX_REFRESH_JOBS or len(self._seen) <= MIX_REFRESH_JOBS:
            self.mix = WorkloadMix.of(self._counts)
            self._gradients.clear()
            self._new_jobs = 0

    def _best_node(self, pool: GpuPool, n: int, scorer: JobScorer) -> Candidate | None:
        """The node whose fragmentation grows least when it takes n whole GPUs.

        Taking whole GPUs leaves a node's shared GPUs as they are, and the gradient
        does not depend on them: for a whole-GPU request they are fragments before
        and after; for a share, those too small for it are fragments before and
        after (with or without whole free GPUs beside them). So the gradient is a
        function of (node size, free GPUs, n): one per bucket on a homogeneous cluster.
        """
        single = self.kinds.single
        # (gradient, free GPUs, node; -1 for all the nodes of a bucket)
        options: list[tuple[float, int, int]] = []
        for free in range(n, len(pool.buckets)):
            bucket = pool.buckets[free]
            if not bucket:
                continue
            if single is not None:
                options.append((self._gradient(single.size, free, n), free, -1))
            else:
                for node in bucket:
                    options.append((self._gradient(self._sizes[node], free, n), free, node))
        if not options:
            return None
        least = min(g for g, _, _ in options)
        best: Candidate | None = None
        for gradient, free, node in options:
            if gradient > least:
                continue
            if node < 0:
                found = self.topology.best_on_one_node(pool, n, scorer, range(free, free + 1))
            else:
                kind = self.kinds.of[node]
                choice = kind.best(tuple(pool.free_gpus(node)), n)
                step = scorer.single_node(kind, n, choice.ring_gbps)
                found = Candidate((step, 1, 1, free - n, node), ((node, choice.gpus),))
            if found is not None and (best is None or found.key < best.key):
                best = found
        return best

    def _gradient(self, size: int, free: int, n: int) -> float:
        key = (size, free, n)
        hit = self._gradients.get(key)
        if hit is None:
            before = self.mix.node_fragmentation(size, free)
            hit = round(self.mix.node_fragmentation(size, free - n) - before, 9)
            self._gradients[key] = hit
        return hit

    def _place_share(self, pool: GpuPool, job: JobView) -> Allocation | None:
        """A GPU-sharing job: a partly used GPU or a free one, least gradient first,
        then an already shared GPU before a free one, then fewer free GPUs, node, GPU."""
        mem = job.spec.gpu_mem_mib or 0
        leftovers = _leftovers(pool)
        mix = self.mix
        best: tuple[float, int, int, int, int, float] | None = None
        for node, shared in leftovers.items():
            share = share_fraction(job, 1, self.cluster.nodes[node].gpu_type)
            if share is None:
                continue
            free = len(pool.free_gpus(node))
            lefts = tuple(left for _, left in shared)
            before = mix.node_fragmentation(self._sizes[node], free, lefts)
            for i, (gpu, left) in enumerate(shared):
                if not pool.share_fits(node, gpu, share, mem):
                    continue
                after_left = left - share
                after = lefts[:i] + lefts[i + 1 :]
                if after_left > SHARE_EPS:
                    after += (after_left,)
                gradient = mix.node_fragmentation(self._sizes[node], free, after) - before
                key = (round(gradient, 9), 0, free, node, gpu, share)
                if best is None or key < best:
                    best = key
        for free in range(1, len(pool.buckets)):
            bucket = pool.buckets[free]
            if not bucket:
                continue
            plain = bucket - leftovers.keys()
            nodes = sorted(bucket & leftovers.keys())
            if plain:
                nodes.append(min(plain))  # nodes without shares in one bucket are alike
            for node in nodes:
                key_new = self._new_share(pool, job, node, free, leftovers.get(node, ()), mem)
                if key_new is not None and (best is None or key_new < best):
                    best = key_new
        if best is None:
            return None
        _, _, _, node, gpu, share = best
        return Allocation((GpuShare(node, gpu, share),))

    def _new_share(
        self,
        pool: GpuPool,
        job: JobView,
        node: int,
        free: int,
        shared: tuple[tuple[int, float], ...],
        mem: int,
    ) -> tuple[float, int, int, int, int, float] | None:
        gpu_type = self.cluster.nodes[node].gpu_type
        share = share_fraction(job, 1, gpu_type)
        fraction = 1.0 if share is None else share
        gpu = self.kinds.of[node].best(tuple(pool.free_gpus(node)), 1).gpus[0]
        if fraction < 1.0 and not pool.share_fits(node, gpu, fraction, mem):
            return None
        lefts = tuple(left for _, left in shared)
        before = self.mix.node_fragmentation(self._sizes[node], free, lefts)
        after = lefts + ((1.0 - fraction,) if fraction < 1.0 else ())
        gradient = self.mix.node_fragmentation(self._sizes[node], free - 1, after) - before
        return (round(gradient, 9), 1, free, node, gpu, fraction)


def _leftovers(pool: GpuPool) -> dict[int, tuple[tuple[int, float], ...]]:
    """Shared GPUs by node: (GPU, unallocated part), by GPU."""
    by_node: dict[int, list[tuple[int, float]]] = {}
    for (node, gpu), used in pool.shared_gpus().items():
        by_node.setdefault(node, []).append((gpu, 1.0 - used))
    return {node: tuple(sorted(by_node[node])) for node in sorted(by_node)}
