"""The simple placers (consolidated, first-fit, random) and the reference placement.

`ConsolidatedPlacer` is the default of the CLI; `packed_allocation` gives the
simulator's rate model the best-case GPUs of a job for its nominal speed. Like every
placer these keep gangs whole and never touch the pool they are given.
"""

from __future__ import annotations

import random

from controller.model import Allocation, Cluster, GpuPool, JobView
from controller.model.gpu_choice.best_fit import best_fit_node, emptiest_first
from controller.placement.subsets import cluster_kinds


class ConsolidatedPlacer:
    """Fewest nodes, fewest racks, best fit (controller.model.gpu_choice.best_fit's rule, which
    the policies that place on the fewest servers apply too, with racks).

    A job that fits on one node goes to the node with the fewest free GPUs that can
    hold it (best fit keeps whole nodes free for large gangs); a larger job takes
    the emptiest nodes of the rack that fits it most tightly, and spans racks only
    when no rack can hold it.
    """

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._rack_nodes: list[list[int]] = [[] for _ in cluster.racks]
        for i, node in enumerate(cluster.nodes):
            self._rack_nodes[node.rack].append(i)

    def place(self, pool: GpuPool, job: JobView, num_gpus: int) -> Allocation | None:
        if pool.total_free < num_gpus:
            return None
        alloc = best_fit_node(pool, num_gpus)
        return alloc if alloc is not None else self._spread(pool, num_gpus)

    def _spread(self, pool: GpuPool, num_gpus: int) -> Allocation | None:
        best_rack: tuple[int, int] | None = None  # (free GPUs, rack)
        free_gpus = pool.free_gpus
        for rack, nodes in enumerate(self._rack_nodes):
            free = sum(map(len, map(free_gpus, nodes)))
            if free >= num_gpus and (best_rack is None or free < best_rack[0]):
                best_rack = (free, rack)
        if best_rack is not None:
            candidates = self._rack_nodes[best_rack[1]]
        else:
            candidates = list(range(len(self.cluster.nodes)))
        return emptiest_first(pool, candidates, num_gpus)


class FirstFitPlacer:
    """The lowest-numbered free GPUs, node by node: no topology, no packing."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def place(self, pool: GpuPool, job: JobView, num_gpus: int) -> Allocation | None:
        if pool.total_free < num_gpus:
            return None
        gpus: list[tuple[int, int]] = []
        for node in range(pool.num_nodes):
            for g in pool.free_gpus(node):
                gpus.append((node, g))
                if len(gpus) == num_gpus:
                    return Allocation.whole(gpus)
        return None


class RandomPlacer:
    """Uniformly random free GPUs: the baseline with no locality at all.

    Seeded and deterministic for one sequence of calls.
    """

    def __init__(self, cluster: Cluster, seed: int = 0) -> None:
        self.cluster = cluster
        self._rng = random.Random(seed)

    def place(self, pool: GpuPool, job: JobView, num_gpus: int) -> Allocation | None:
        if pool.total_free < num_gpus:
            return None
        free = [(n, g) for n in range(pool.num_nodes) for g in pool.free_gpus(n)]
        return Allocation.whole(self._rng.sample(free, num_gpus))


def sticky_allocation(pool: GpuPool, job: JobView, num_gpus: int) -> Allocation | None:
    """The job's current GPUs (or GPU shares) if it keeps its size and they fit `pool`."""
    alloc = job.allocation
    if alloc is None or alloc.num_gpus != num_gpus:
        return None
    return alloc if pool.fits(alloc, job.spec.gpu_mem_mib) else None


def packed_allocation(cluster: Cluster, num_gpus: int) -> Allocation | None:
    """The best-case placement of `num_gpus` on an empty cluster (fewest nodes).

    The simulator runs each job's nominal speed on it, to turn a traced duration
    into work and to estimate remaining time for oracle policies. A job that fits
    one node gets the GPUs of the biggest node with the best ring (on a DGX-1, an
    NV2 pair for 2 GPUs, an NVLink quad for 4).
    """
    if num_gpus > cluster.max_gpus_per_node:
        pool = GpuPool(cluster.gpus_per_node, (n.gpu_type.mem_mib for n in cluster.nodes))
        return ConsolidatedPlacer(cluster)._spread(pool, num_gpus)
    node = _biggest_node(cluster)
    kind = cluster_kinds(cluster).of[node]
    return Allocation.whole((node, g) for g in kind.best(kind.all_gpus, num_gpus).gpus)


def _biggest_node(cluster: Cluster) -> int:
    sizes = cluster.gpus_per_node
    return sizes.index(max(sizes))
