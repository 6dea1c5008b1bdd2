"""Whole GPUs on the fewest servers: best fit on one server, else the emptiest first.

The one copy of the rule that controller.placement.basic.ConsolidatedPlacer (which
spreads within the tightest rack before across racks) and the policies that place on
the fewest servers themselves (Optimus §4.2 and ElasticFlow's buddy allocation, over
the pool the GPU-choice filter leaves a job) apply; here, below both, since policies
may not import controller.placement. Every function leaves the pool as it is.
"""

from __future__ import annotations

from collections.abc import Iterable

from controller.model.allocation import Allocation
from controller.model.pool import GpuPool


def best_fit_node(pool: GpuPool, num_gpus: int) -> Allocation | None:
    """`num_gpus` whole GPUs of the one server with the fewest free that holds them
    (lowest index among equals), its lowest-numbered free GPUs; None if none does."""
    for free_count in range(num_gpus, len(pool.buckets)):
        bucket = pool.buckets[free_count]
        if bucket:
            node = min(bucket)
            return Allocation.whole((node, g) for g in pool.free_gpus(node)[:num_gpus])
    return None


def emptiest_first(pool: GpuPool, nodes: Iterable[int], num_gpus: int) -> Allocation | None:
    """`num_gpus` whole GPUs from `nodes` (ascending), the servers with the most free
    first, the lowest index first among equals; None if they hold too few."""
    free_gpus = pool.free_gpus
    order = sorted(nodes, key=lambda n: -len(free_gpus(n)))  # stable: lowest index first
    gpus: list[tuple[int, int]] = []
    for node in order:
        for g in free_gpus(node):
            gpus.append((node, g))
            if len(gpus) == num_gpus:
                return Allocation.whole(gpus)
    return None


def fewest_servers(pool: GpuPool, num_gpus: int) -> Allocation | None:
    """`num_gpus` whole GPUs on the fewest servers: the server that fits them best,
    else the emptiest servers of the whole pool first."""
    if pool.total_free < num_gpus:
        return None
    alloc = best_fit_node(pool, num_gpus)
    if alloc is not None:
        return alloc
    return emptiest_first(pool, range(pool.num_nodes), num_gpus)
