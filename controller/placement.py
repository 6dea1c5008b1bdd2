"""Placement: turning "job J on n GPUs" into a GPU set taken from a free pool.

Policies call a placer through `Snapshot.placer`; the simulator and the Kubernetes
backend choose which one with `make_placer`. The strategies here keep gangs whole
and never touch the pool they are given.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from controller.model import Allocation, Cluster, GpuPool, JobView, Placer


class ConsolidatedPlacer:
    """Fewest nodes, fewest racks, best fit.

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
        sticky = _sticky(pool, job, num_gpus)
        if sticky is not None:
            return sticky
        for free_count in range(num_gpus, len(pool.buckets)):
            bucket = pool.buckets[free_count]
            if bucket:
                node = min(bucket)
                return Allocation.whole((node, g) for g in pool.free_gpus(node)[:num_gpus])
        return self._spread(pool, num_gpus)

    def _spread(self, pool: GpuPool, num_gpus: int) -> Allocation | None:
        best_rack: tuple[int, int] | None = None  # (free GPUs, rack)
        for rack, nodes in enumerate(self._rack_nodes):
            free = sum(len(pool.free_gpus(n)) for n in nodes)
            if free >= num_gpus and (best_rack is None or free < best_rack[0]):
                best_rack = (free, rack)
        if best_rack is not None:
            candidates = self._rack_nodes[best_rack[1]]
        else:
            candidates = list(range(len(self.cluster.nodes)))
        return _take_emptiest(pool, candidates, num_gpus)


class FirstFitPlacer:
    """The lowest-numbered free GPUs, node by node: no topology, no packing."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def place(self, pool: GpuPool, job: JobView, num_gpus: int) -> Allocation | None:
        if pool.total_free < num_gpus:
            return None
        sticky = _sticky(pool, job, num_gpus)
        if sticky is not None:
            return sticky
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


def _sticky(pool: GpuPool, job: JobView, num_gpus: int) -> Allocation | None:
    """The job's current GPUs if it keeps its size and they are free in `pool`."""
    alloc = job.allocation
    if alloc is None or alloc.num_gpus != num_gpus or alloc.shared:
        return None
    return alloc if pool.fits(alloc, job.spec.gpu_mem_mib) else None


def _take_emptiest(pool: GpuPool, nodes: list[int], num_gpus: int) -> Allocation | None:
    order = sorted(nodes, key=lambda n: (-len(pool.free_gpus(n)), n))
    gpus: list[tuple[int, int]] = []
    for node in order:
        for g in pool.free_gpus(node):
            gpus.append((node, g))
            if len(gpus) == num_gpus:
                return Allocation.whole(gpus)
    return None


def packed_allocation(cluster: Cluster, num_gpus: int) -> Allocation | None:
    """The best-case placement of `num_gpus` on an empty cluster (fewest nodes).

    The simulator runs each job's nominal speed on it, to turn a traced duration
    into work and to estimate remaining time for oracle policies.
    """
    pool = GpuPool(cluster.gpus_per_node, (n.gpu_type.mem_mib for n in cluster.nodes))
    placer = ConsolidatedPlacer(cluster)
    return (
        placer._spread(pool, num_gpus)
        if num_gpus > cluster.max_gpus_per_node
        else (Allocation.whole((_biggest_node(cluster), g) for g in range(num_gpus)))
    )


def _biggest_node(cluster: Cluster) -> int:
    sizes = cluster.gpus_per_node
    return sizes.index(max(sizes))


PLACERS: dict[str, Callable[[Cluster, int], Placer]] = {
    "consolidated": lambda cluster, seed: ConsolidatedPlacer(cluster),
    "first-fit": lambda cluster, seed: FirstFitPlacer(cluster),
    "random": lambda cluster, seed: RandomPlacer(cluster, seed),
}


class UnknownPlacerError(ValueError):
    pass


def make_placer(name: str, cluster: Cluster, seed: int = 0) -> Placer:
    try:
        factory = PLACERS[name]
    except KeyError:
        known = ", ".join(sorted(PLACERS))
        raise UnknownPlacerError(f"unknown placement {name!r} (known: {known})") from None
    return factory(cluster, seed)
