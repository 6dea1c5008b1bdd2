"""Pollux's allocation as GPUs: what the search's per-node GPU counts mean on the cluster.

The genetic search (`policies.pollux.search`) decides how many GPUs each job gets on
each node; `policies.pollux.Pollux` calls `node_capacity` to pose that problem and
`gpu_ids` to turn the counts it chose into GPU ids, keeping a job's GPUs where it can
(a changed set of GPUs would restart it for nothing), and `filtered` to ask the
GPU-choice filter (controller.model.gpu_choice.candidates) for those GPUs, job by job in the
search's priority order: the search poses per-node counts for all jobs at once, within
the filter's node masks and quota bounds as `policies.pollux.limits` states them,
and the filter itself, the authority, is asked where the counts become GPUs.
"""

from __future__ import annotations

import numpy as np

from controller.model import NO_HOST, Allocation, JobView, Reason, Snapshot
from controller.model.gpu_choice.candidates import GpuFilter, take
from policies.pollux.search import States


def node_capacity(snapshot: Snapshot) -> States:
    """GPUs per node that a plan may use: 0 on a node that is down, and on a cordoned
    one only what its running jobs hold (`Snapshot.usable_gpus`), so that the search
    never plans a start there that the cordon fence would refuse."""
    return np.array(snapshot.usable_gpus(), np.float32)


def gpu_ids(snapshot: Snapshot, views: list[JobView], counts: States) -> list[Allocation | None]:
    """GPU ids for per-node counts: a job keeps its GPUs on a node as far as its count
    there allows, and takes the lowest free ones for the rest; an allocation equal to
    the current one is the very same object."""
    cluster = snapshot.cluster
    taken: set[tuple[int, int]] = set()
    chosen: list[dict[int, list[int]]] = []
    for row, view in enumerate(views):
        mine: dict[int, list[int]] = {}
        if view.allocation is not None and view.running:
            for node, gpu in view.allocation.gpus():
                mine.setdefault(node, []).append(gpu)
        picks: dict[int, list[int]] = {}
        for node in np.flatnonzero(counts[row]).tolist():
            keep = [g for g in mine.get(node, []) if (node, g) not in taken]
            keep = keep[: int(counts[row, node])]
            taken.update((node, g) for g in keep)
            picks[node] = keep
        chosen.append(picks)
    out: list[Allocation | None] = []
    for row, view in enumerate(views):
        picks = chosen[row]
        if not picks:
            out.append(None)
            continue
        for node, keep in picks.items():
            need = int(counts[row, node]) - len(keep)
            for gpu in range(cluster.nodes[node].num_gpus):
                if need == 0:
                    break
                if (node, gpu) not in taken:
                    taken.add((node, gpu))
                    keep.append(gpu)
                    need -= 1
        gpus = sorted((node, g) for node, keep in picks.items() for g in keep)
        current = view.allocation
        if current is not None and view.running and current.gpus() == tuple(gpus):
            out.append(current)
        else:
            out.append(Allocation.whole(gpus))
    return out


def filtered(
    snapshot: Snapshot, views: list[JobView], placed: list[Allocation | None]
) -> list[Allocation | Reason | None]:
    """`placed` (from `gpu_ids`) as the filter leaves it, in row order over the free
    capacity with every searched job's GPUs released: an allocation it refuses is
    replaced by the job's current one where that is still free (it keeps what it
    holds: the very object, so the plan keeps it), else by the filter's reason (the
    job waits, or stops). Each allocation carries its job's pods' request. What the
    plan releases of a queue's jobs (stops, and shrinks to their own GPUs, which
    nothing refuses) counts before its other jobs' gains, whatever their rows, as
    the check counts it and as the search's quota bounds assume."""
    if (
        not snapshot.cordoned_nodes
        and snapshot.quota_room is None
        and all(v.spec.host == NO_HOST and not v.spec.gpu_models for v in views)
    ):
        return list(placed)  # nothing to refuse: most rounds of most replays
    pool = snapshot.free_pool()
    chooser = GpuFilter(snapshot)
    shrunk: set[int] = set()
    for row, (view, alloc) in enumerate(zip(views, placed, strict=True)):
        if view.running and view.allocation is not None:
            pool.release(view.allocation, view.spec.gpu_mem_mib)
            if alloc is None:
                chooser.release(view)
            elif _shrinks(view, alloc):
                chooser.grant(view, alloc.with_host(view.spec.host))
                shrunk.add(row)
    out: list[Allocation | Reason | None] = []
    for row, (view, alloc) in enumerate(zip(views, placed, strict=True)):
        if alloc is None:
            out.append(None)
            continue
        mem = view.spec.gpu_mem_mib
        alloc = alloc.with_host(view.spec.host)
        if row in shrunk:  # its queue was given back its GPUs above
            out.append(take(pool, view, alloc))
            continue
        why = chooser.refusal(pool, view, alloc)
        if why is not None:
            current = view.allocation if view.running else None
            if current is None or not pool.fits(current, mem):
                out.append(why)
                continue
            alloc = current
        if pool.fits(alloc, mem):
            alloc = chooser.take(pool, view, alloc)
        out.append(alloc)
    return out


def _shrinks(view: JobView, alloc: Allocation) -> bool:
    """Whether `alloc` is fewer of the running job's own GPUs, for a job the filter's
    node rules cannot refuse them (no GPU model or pod request of its own): so the
    GPUs it gives back count for its queue's other jobs before them, as the check
    after the policy counts a plan's releases first."""
    current = view.allocation
    return (
        current is not None
        and view.spec.host == NO_HOST
        and not view.spec.gpu_models
        and alloc.num_gpus < current.num_gpus
        and set(alloc.gpus()) <= set(current.gpus())
    )
