"""The best GPU subsets of one node: which n of its free GPUs form the best ring.

Called by the topology- and fragmentation-aware placers and by `packed_allocation`.
Nodes of one type (link matrix and GPU model) share one `NodeKind`, whose searches
are cached per (free GPUs, n): a cluster of 256 DGX-1s fills one small table.

Within a node the choice is, in order: the widest best ring
(`controller.model.perf.best_ring_gbps`, the bottleneck that the hierarchical
all-reduce of the performance model divides the gradient by); then the fastest
slowest pair (a fully NVLink-connected set before an NVLink ring with a PCIe/SYS
chord: NCCL's trees and all-to-all traffic use every pair); then the subset whose
leftover GPUs keep the best rings for later jobs (`leftover_quality`); then the lowest
GPU indices. On a DGX-1 V100 a 4-GPU job on an empty node gets {0,1,2,3} (a ring of
NVLinks) and a 1-GPU job on a node with {1..7} free takes one of 1-3, keeping the
NVLink quad {4,5,6,7} whole.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations
from typing import NamedTuple

from controller.model import Cluster, Node
from controller.model.perf import best_ring_gbps

# Nodes up to this size are searched exhaustively: every subset of every free set is
# at most 3^8 = 6,561 ring evaluations per node type, filled lazily. Larger nodes (and
# nodes whose GPU pairs are all alike) take their lowest free GPUs.
EXHAUSTIVE_MAX_GPUS = 8


class SubsetChoice(NamedTuple):
    """The GPUs chosen on one node and the bottleneck Gbit/s of their best ring."""

    gpus: tuple[int, ...]
    ring_gbps: float


class NodeKind:
    """One node type's subset searches, cached per (free GPUs, n)."""

    def __init__(self, index: int, node: Node) -> None:
        self.index = index
        self.node = node  # the first node of the type: links and GPU model
        self.size = node.num_gpus
        pairs = {node.links[i][j] for i in range(self.size) for j in range(self.size) if i != j}
        # Every subset of a given size has the same ring on a uniform node (NVSwitch,
        # one PCIe switch), so only the count matters there.
        self.uniform = len(pairs) <= 1
        self.exhaustive = not self.uniform and self.size <= EXHAUSTIVE_MAX_GPUS
        self.all_gpus = tuple(range(self.size))
        self._best: dict[tuple[tuple[int, ...], int], SubsetChoice] = {}
        self._max_ring: dict[tuple[tuple[int, ...], int], float] = {}

    def best(self, free: tuple[int, ...], n: int) -> SubsetChoice:
        """The best `n` of the `free` GPUs (sorted, at least n of them)."""
        key = (free, n)
        hit = self._best.get(key)
        if hit is None:
            hit = self._best[key] = self._search(free, n)
        return hit

    def optimum_gbps(self, n: int) -> float:
        """The best ring any `n` GPUs of an empty node of this type form."""
        return self.best(self.all_gpus, n).ring_gbps

    def leftover_quality(self, rest: tuple[int, ...]) -> float:
        """How good the rings left in `rest` are: the sum, over the gang sizes jobs
        mostly ask for (powers of two: Jeon et al., ATC'19, find Philly's jobs on 1, 2,
        4, 8 and more GPUs), of the best ring of that size in `rest` over the best of
        an empty node (1 per size when nothing is lost)."""
        total = 0.0
        k = 2
        while k <= len(rest):
            total += self.max_ring_gbps(rest, k) / self.max_ring_gbps(self.all_gpus, k)
            k *= 2
        return total

    def max_ring_gbps(self, free: tuple[int, ...], k: int) -> float:
        key = (free, k)
        hit = self._max_ring.get(key)
        if hit is None:
            hit = max(best_ring_gbps(self.node, s) for s in combinations(free, k))
            self._max_ring[key] = hit
        return hit

    def _search(self, free: tuple[int, ...], n: int) -> SubsetChoice:
        if n == len(free) or not self.exhaustive:
            gpus = free[:n]
            return SubsetChoice(gpus, best_ring_gbps(self.node, gpus))
        best: tuple[float, float, float] | None = None
        chosen: tuple[int, ...] = free[:n]
        for subset in combinations(free, n):  # lexicographic: the first best wins ties
            ring = best_ring_gbps(self.node, subset)
            if best is not None and ring < best[0]:
                continue
            slowest = min(
                (self.node.pair_gbps(i, j) for i, j in combinations(subset, 2)), default=math.inf
            )
            rest = tuple(g for g in free if g not in subset)
            key = (ring, slowest, self.leftover_quality(rest))
            if best is None or key > best:
                best, chosen = key, subset
        assert best is not None
        return SubsetChoice(chosen, best[0])


@dataclass(frozen=True)
class ClusterKinds:
    """The node types of a cluster: `of[node]` is the node's `NodeKind`."""

    kinds: tuple[NodeKind, ...]
    of: tuple[NodeKind, ...]

    @property
    def single(self) -> NodeKind | None:
        """The one node type when the cluster is homogeneous."""
        return self.kinds[0] if len(self.kinds) == 1 else None


# Keyed by the cluster's id; the cluster is kept with its entry so the id is not reused.
_kinds_cache: dict[int, tuple[Cluster, ClusterKinds]] = {}


def cluster_kinds(cluster: Cluster) -> ClusterKinds:
    """The (cached) node types of `cluster`."""
    entry = _kinds_cache.get(id(cluster))
    if entry is None or entry[0] is not cluster:
        by_key: dict[object, NodeKind] = {}
        of: list[NodeKind] = []
        for node in cluster.nodes:
            key = (node.links, node.gpu_type)
            kind = by_key.get(key)
            if kind is None:
                kind = by_key[key] = NodeKind(len(by_key), node)
            of.append(kind)
        entry = (cluster, ClusterKinds(tuple(by_key.values()), tuple(of)))
        _kinds_cache[id(cluster)] = entry
    return entry[1]
