"""Tiresias' placement (§3.3): where a job it admits runs.

Called by `policies.tiresias` for each waiting job it starts. A job whose model is
skewed (`catalog.resolve(model).skewed`: VGG, AlexNet, ...) runs only on the fewest
nodes its gang can take (ceil(GPUs / largest node)), else it waits
("AwaitingConsolidation"); other models take what the snapshot's placer gives. On a
heterogeneous cluster `policies.tiresias` has wrapped that placer to choose the job's
fastest GPU type with room (controller.model.gpu_choice.gpu_type), and a skewed job's fewest
nodes are sought within its types in the same order before across them. The
fewest-nodes search runs over the pool the GPU-choice filter leaves the job
(controller.model.gpu_choice.candidates.pool_for: no cordoned node, GPU models it accepts, CPU
and memory for its pods) and returns the allocation with the job's pod request, so
that the pool counts it; the placer's path gets the same filter from its wrapper.
"""

from __future__ import annotations

from functools import cache

from controller.model import Allocation, GpuPool, JobView, Reason, Snapshot
from controller.model.catalog import resolve
from controller.model.gpu_choice.best_fit import best_fit_node
from controller.model.gpu_choice.candidates import pool_for
from controller.model.gpu_choice.gpu_type import FastestTypePlacer, within_type
from controller.model.job import FRAGMENTED, INSUFFICIENT_GPUS, does_not_fit


def place(
    snapshot: Snapshot, pool: GpuPool, job: JobView, need: int, q: int
) -> Allocation | Reason:
    """GPUs from `pool` for `need` GPUs of `job` (of queue `q`), or why none fit."""
    alloc = snapshot.placer.place(pool, job, need)
    if _skewed(job.spec.model):
        fewest = -(-need // snapshot.cluster.max_gpus_per_node)
        if alloc is None or len(alloc.nodes) > fewest:
            alloc = _consolidated_by_type(snapshot, pool, job, need, fewest)
        if alloc is None:
            return Reason(
                "AwaitingConsolidation",
                f"Q{q}: {job.spec.model} is skewed and waits for {need} GPUs on {fewest} node(s)",
            )
    if alloc is None:
        free = pool.total_free
        code = FRAGMENTED if free >= need else INSUFFICIENT_GPUS
        return does_not_fit(need, f"{free} are free, no placement fits", code, where=f"Q{q}: ")
    return alloc


@cache
def _skewed(model: str) -> bool:
    return resolve(model).skewed


def _consolidated_by_type(
    snapshot: Snapshot, pool: GpuPool, job: JobView, need: int, nodes: int
) -> Allocation | None:
    """`_consolidated` within the job's GPU types, fastest first, where the placer
    chooses types (a heterogeneous cluster); else, or where none has room, the pool's;
    over the nodes the filter leaves the job, with its pods' request."""
    placer = snapshot.placer
    pool = pool_for(snapshot, pool, job.spec)
    alloc = None
    if isinstance(placer, FastestTypePlacer) and len(placer.nodes_of) > 1:
        for gpu in placer.ranked(job, need):
            within = within_type(pool, snapshot.cluster, placer.nodes_of[gpu])
            alloc = _consolidated(within, need, nodes)
            if alloc is not None:
                break
    if alloc is None:
        alloc = _consolidated(pool, need, nodes)
    return None if alloc is None else alloc.with_host(job.spec.host)


def _consolidated(pool: GpuPool, need: int, nodes: int) -> Allocation | None:
    """`need` GPUs on `nodes` nodes: best fit on one node, else the emptiest nodes."""
    if nodes == 1:
        return best_fit_node(pool, need)
    free_gpus = pool.free_gpus
    order = sorted(range(pool.num_nodes), key=lambda n: -len(free_gpus(n)))  # stable: n
    gpus = [(n, g) for n in order[:nodes] for g in free_gpus(n)]
    return Allocation.whole(gpus[:need]) if len(gpus) >= need else None
