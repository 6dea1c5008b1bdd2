"""Topology-aware placement: candidate GPU sets scored by the predicted iteration time.

Registered as `topology-aware`; the fragmentation-aware placer reuses its bucket
search and its multi-node gangs. The score of a candidate is the performance model's
iteration time of the job's model on it (`controller.model.perf`: compute plus the
hierarchical ring all-reduce over the candidate's rings, NICs and rack uplinks, with
the model's overlap), quantised to steps of `TIME_TOLERANCE`, then

    (time step, nodes, racks, free GPUs left on the last node, lowest node)

smallest first. Within a node the GPUs come from `subsets.NodeKind.best` (best ring,
then the leftover that keeps the best rings, then the lowest indices).

Candidates, so that a call stays in tens of microseconds on hundreds of nodes:

- one node: the pool's buckets from the tightest that holds the job upwards; in each,
  nodes in index order, stopping at the first that reaches the best time any node
  type could give (a homogeneous cluster of uniform nodes, or a 1-GPU job, takes the
  lowest node of the tightest bucket at once);
- several nodes, when no single node reaches that best time: per rack, its nodes
  with the most free GPUs, as few as hold the job, the remainder on the node that
  fits it most tightly; the tightest rack needing fewest nodes is one candidate, and
  the fewest nodes of the whole cluster (racks with most free GPUs first) another
  when that needs fewer nodes.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from controller.model import Allocation, Cluster, GpuPool, JobView
from controller.model.catalog import ModelProfile, resolve
from controller.model.perf import PlacementSignature, signature_time_s
from controller.model.precision import DEFAULT_PRECISION, Precision
from controller.placement.subsets import NodeKind, cluster_kinds

# Iteration times within 1% count as equal: gpuflow's choice, below what the
# performance model resolves (its all-reduce and overlap are approximations), so that
# a compute-bound job does not break a good ring open for a negligible gain and the
# tie-breakers (fewer nodes, racks, best fit) decide.
TIME_TOLERANCE = 0.01
_LOG_STEP = math.log1p(TIME_TOLERANCE)
_NO_NODE_FITS = -(2**62)


def time_step(time_s: float) -> int:
    """The quantised iteration time: equal steps differ by less than TIME_TOLERANCE."""
    return math.floor(math.log(time_s) / _LOG_STEP)


class Candidate(NamedTuple):
    """A scored placement: `key` (smaller is better) and (node, GPUs) picks."""

    key: tuple[int, ...]
    picks: tuple[tuple[int, tuple[int, ...]], ...]

    def allocation(self) -> Allocation:
        return Allocation.whole((node, g) for node, gpus in self.picks for g in gpus)


class JobScorer:
    """Quantised iteration times of one (model, batch, precision) on candidate
    placements, cached."""

    def __init__(
        self,
        cluster: Cluster,
        kinds: tuple[NodeKind, ...],
        profile: ModelProfile,
        batch: int | None,
        precision: Precision = DEFAULT_PRECISION,
    ) -> None:
        self.cluster = cluster
        self.kinds = kinds
        self.profile = profile
        self.batch = batch
        self.precision = precision
        self._single: dict[tuple[int, int, float], int] = {}
        self._gang: dict[PlacementSignature, int] = {}
        self._optimum: dict[int, int] = {}

    def single_node(self, kind: NodeKind, n: int, ring_gbps: float) -> int:
        key = (kind.index, n, ring_gbps)
        hit = self._single.get(key)
        if hit is None:
            node = kind.node
            signature = PlacementSignature(
                ((n, ring_gbps),),
                node.nic_gbps,
                math.inf,
                node.gpu_type.speed,
                1.0,
                gpu_types=(node.gpu_type,),
            )
            hit = self._single[key] = self._step(signature)
        return hit

    def optimum(self, n: int) -> int:
        """The best step `n` GPUs reach on one node of any type."""
        hit = self._optimum.get(n)
        if hit is None:
            steps = [self.single_node(k, n, k.optimum_gbps(n)) for k in self.kinds if k.size >= n]
            hit = self._optimum[n] = min(steps, default=_NO_NODE_FITS)
        return hit

    def gang(self, signature: PlacementSignature) -> int:
        """The step of a multi-node placement (its signature as `packed_gpu_signature`)."""
        hit = self._gang.get(signature)
        if hit is None:
            hit = self._gang[signature] = self._step(signature)
        return hit

    def _step(self, signature: PlacementSignature) -> int:
        return time_step(
            signature_time_s(
                self.profile, signature, batch_size=self.batch, precision=self.precision
            )
        )


class TopologyAwarePlacer:
    """The GPU set with the shortest predicted iteration time (see the module docstring).

    On a DGX-1 V100 a 4-GPU job gets an NVLink quad and a 2-GPU job an NV2 pair; a
    job that fits a node stays on one node; a larger one takes the fewest nodes,
    one rack before several.
    """

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.kinds = cluster_kinds(cluster)
        self._rack_of = tuple(n.rack for n in cluster.nodes)
        self._rack_sizes = [0] * len(cluster.racks)
        for rack in self._rack_of:
            self._rack_sizes[rack] += 1
        self._profiles: dict[str, ModelProfile] = {}
        self._scorers: dict[tuple[str, int | None, Precision], JobScorer] = {}

    def place(self, pool: GpuPool, job: JobView, num_gpus: int) -> Allocation | None:
        if pool.total_free < num_gpus:
            return None
        scorer = self.scorer(job)
        best = self.best_on_one_node(pool, num_gpus, scorer)
        if best is not None and best.key[0] <= scorer.optimum(num_gpus):
            return best.allocation()
        if num_gpus > 1:
            gang = self.best_gang(pool, num_gpus, scorer)
            if gang is not None and (best is None or gang.key < best.key):
                best = gang
        return None if best is None else best.allocation()

    def scorer(self, job: JobView) -> JobScorer:
        model = job.spec.model
        profile = self._profiles.get(model)
        if profile is None:
            profile = self._profiles[model] = resolve(model)
        batch = job.batch_size if job.batch_size is not None else job.spec.batch_size
        precision = job.spec.precision
        scorer = self._scorers.get((profile.name, batch, precision))
        if scorer is None:
            scorer = JobScorer(self.cluster, self.kinds.kinds, profile, batch, precision)
            self._scorers[profile.name, batch, precision] = scorer
        return scorer

    def best_on_one_node(
        self,
        pool: GpuPool,
        n: int,
        scorer: JobScorer,
        buckets: range | None = None,
        exclude: frozenset[int] = frozenset(),
    ) -> Candidate | None:
        """The best single node among the pool's buckets (default: all that hold n)."""
        target = scorer.optimum(n)
        best: Candidate | None = None
        for free in buckets if buckets is not None else range(n, len(pool.buckets)):
            found = self._best_in_bucket(pool, free, n, scorer, exclude)
            if found is not None and (best is None or found.key < best.key):
                best = found
                if best.key[0] <= target:
                    break
        return best

    def _best_in_bucket(
        self, pool: GpuPool, free: int, n: int, scorer: JobScorer, exclude: frozenset[int]
    ) -> Candidate | None:
        bucket = pool.buckets[free]
        if not bucket:
            return None
        single = self.kinds.single
        if single is not None and (single.uniform or n == 1):
            # Every node of the bucket scores alike: the lowest one.
            nodes = bucket - exclude if exclude else bucket
            if not nodes:
                return None
            node = min(nodes)
            choice = single.best(tuple(pool.free_gpus(node)), n)
            step = scorer.single_node(single, n, choice.ring_gbps)
            return Candidate((step, 1, 1, free - n, node), ((node, choice.gpus),))
        target = scorer.optimum(n)
        best: Candidate | None = None
        for node in sorted(bucket):
            if node in exclude:
                continue
            kind = self.kinds.of[node]
            choice = kind.best(tuple(pool.free_gpus(node)), n)
            step = scorer.single_node(kind, n, choice.ring_gbps)
            if best is None or step < best.key[0]:
                best = Candidate((step, 1, 1, free - n, node), ((node, choice.gpus),))
                if step <= target:
                    break
        return best

    def best_gang(self, pool: GpuPool, n: int, scorer: JobScorer) -> Candidate | None:
        """The best placement over several nodes: fewest nodes, one rack if it can."""
        buckets = pool.buckets
        rack_of = self._rack_of
        by_rack: dict[int, list[tuple[int, int]]] = {}  # rack -> (free, node), most free first
        for free in range(len(buckets) - 1, 0, -1):
            if buckets[free]:
                for node in sorted(buckets[free]):
                    by_rack.setdefault(rack_of[node], []).append((free, node))
        rack_free = {rack: sum(f for f, _ in nodes) for rack, nodes in by_rack.items()}
        best_rack: tuple[int, int, int] | None = None  # (nodes needed, free GPUs, rack)
        for rack, nodes in by_rack.items():
            if rack_free[rack] >= n:
                key = (_nodes_needed(nodes, n), rack_free[rack], rack)
                if best_rack is None or key < best_rack:
                    best_rack = key
        candidates: list[Candidate] = []
        if best_rack is not None:
            candidates.append(self._gang(pool, by_rack[best_rack[2]], n, best_rack[0], scorer))
        fewest = _fewest_nodes(buckets, n)
        if fewest and (best_rack is None or fewest < best_rack[0]):
            everywhere = sorted(
                ((f, node) for nodes in by_rack.values() for f, node in nodes),
                key=lambda fn: (-fn[0], -rack_free[rack_of[fn[1]]], rack_of[fn[1]], fn[1]),
            )
            candidates.append(self._gang(pool, everywhere, n, fewest, scorer))
        return min(candidates, default=None)

    def _gang(
        self, pool: GpuPool, ordered: list[tuple[int, int]], n: int, k: int, scorer: JobScorer
    ) -> Candidate:
        """The first k-1 nodes of `ordered` whole, the remainder best fit among the rest."""
        kinds = self.kinds.of
        chosen = [
            (node, kinds[node].best(tuple(pool.free_gpus(node)), f)) for f, node in ordered[: k - 1]
        ]
        rest = n - sum(f for f, _ in ordered[: k - 1])
        last_free, last = min(fn for fn in ordered[k - 1 :] if fn[0] >= rest)
        chosen.append((last, kinds[last].best(tuple(pool.free_gpus(last)), rest)))
        nodes = [self.cluster.nodes[node] for node, _ in chosen]
        racks = {node.rack for node in nodes}
        uplink = math.inf
        if len(racks) > 1:
            uplink = min(self.cluster.racks[r].uplink_gbps / self._rack_sizes[r] for r in racks)
        signature = PlacementSignature(
            tuple(sorted((len(c.gpus), c.ring_gbps) for _, c in chosen)),
            min(node.nic_gbps for node in nodes),
            uplink,
            min(node.gpu_type.speed for node in nodes),
            1.0,
            gpu_types=tuple(sorted({n.gpu_type for n in nodes}, key=lambda t: t.name)),
        )
        key = (scorer.gang(signature), k, len(racks), last_free - rest, min(n for n, _ in chosen))
        return Candidate(key, tuple((node, c.gpus) for node, c in chosen))


def _nodes_needed(nodes: list[tuple[int, int]], n: int) -> int:
    """How many of `nodes` ((free, node), most free first) hold n GPUs; 0 if all cannot."""
    total = 0
    for count, (free, _) in enumerate(nodes, 1):
        total += free
        if total >= n:
            return count
    return 0


def _fewest_nodes(buckets: list[set[int]], n: int) -> int:
    """How many nodes of the whole pool hold n GPUs, most free first; 0 if all cannot."""
    total = count = 0
    for free in range(len(buckets) - 1, 0, -1):
        nodes = len(buckets[free])
        if total + free * nodes >= n:
            return count - (-(n - total) // free)
        total += free * nodes
        count += nodes
    return 0
