"""Gandiva's migration and grow-shrink (Xiao et al., OSDI 2018, §4.1, §4.2, §6.4).

Called by `policies.gandiva` each round. When jobs wait: `shrink_for` shrinks grown
elastic jobs back toward their minimum and `defragment` moves small running jobs
off a node so that a waiting gang fits there whole (rather than not at all, or
spread over nodes). When nobody waits: `consolidate`
moves multi-node gangs onto a node that has room for the whole gang, and `grow`
lets elastic jobs take the idle GPUs. Every move hands a gang a whole new
allocation at once (the simulator restarts it from a checkpoint), and every
migration counts against the round's budget.

A grow or a consolidation is made for the job's own speed, so it is made only when
it pays its restart (`pays_restart`): the time it saves on the job's remaining work
at its current speed, scaled by the performance model's speed ratio of the two
allocations, must exceed the model's `restart_s` (checkpoint and restore). The paper
(§4.1) grows and migrates a job by checkpoint and restart and measures that cost in
its micro-benchmarks (§6.1), but its policy does not weigh it against the gain;
gpuflow does, as Pollux's re-allocation penalty (§4.2) and Optimus' resize cost do.
The moves made for waiting jobs (shrinks, defragmentation) are not weighed: they let
a job start.
"""

from __future__ import annotations

from collections.abc import Callable

from controller.model import Allocation, JobView
from controller.model.catalog import resolve
from controller.model.perf import throughput_ips
from policies.gandiva.work import Work


def shrink_for(work: Work, gpus_asked: Callable[[], int], smallest_ask: int) -> bool:
    """Shrink elastic jobs toward `min_gpus`, largest first, by as many GPUs as the
    waiting jobs lack (`gpus_asked`: what they ask for together; no further: the rest
    would only grow back); whether any shrank. Not at all when all they could give,
    with the free GPUs, is fewer than the smallest waiting job asks (`smallest_ask`):
    a shrink that starts nobody is two restarts for nothing (the job grows back)."""
    grown = [
        j
        for j in work.snapshot.running()
        if j.spec.elastic and work.settled(j) and j.num_gpus > j.spec.min_gpus and not _shared(j)
    ]
    spare = sum(j.num_gpus - j.spec.min_gpus for j in grown)
    if not grown or work.pool.total_free + spare < smallest_ask:
        return False
    lacking = gpus_asked() - work.pool.total_free
    grown.sort(key=lambda j: (-j.num_gpus, j.job_id))
    shrunk = False
    for job in grown:
        if lacking <= 0:
            break
        shrunk = True
        alloc = _subset(job, max(job.spec.min_gpus, job.num_gpus - lacking))
        lacking -= job.num_gpus - alloc.num_gpus
        work.move(job, alloc)
    return shrunk


def grow(work: Work) -> None:
    """Let elastic jobs, smallest first, take idle GPUs up to `max_gpus`."""
    if work.pool.total_free == 0:
        return
    small = [
        j
        for j in work.snapshot.running()
        if j.spec.elastic and work.settled(j) and j.num_gpus < j.spec.max_gpus and not _shared(j)
    ]
    small.sort(key=lambda j: (j.num_gpus, j.job_id))
    pool, placer = work.pool, work.snapshot.placer
    for job in small:
        if pool.total_free == 0:
            return
        current = job.allocation
        assert current is not None
        target = min(job.spec.max_gpus, current.num_gpus + pool.total_free)
        pool.release(current, job.spec.gpu_mem_mib)
        bigger = None
        for size in range(target, current.num_gpus, -1):
            bigger = placer.place(pool, job, size)
            if bigger is not None:
                break
        pool.take(current, job.spec.gpu_mem_mib)
        if bigger is None or work.chooser.quota_refusal(job, bigger) is not None:
            continue  # no room, or its queue allows no more
        if pays_restart(work, job, bigger):
            work.move(job, bigger)


def defragment(work: Work, job: JobView, movers: dict[int, list[JobView]]) -> bool:
    """Start `job` on one node, cleared by migrating running jobs elsewhere, when it
    would otherwise not fit or span nodes (§4.1 migration: defragmentation); whether
    it was started. `movers` is `movers_by_node(work)`, built once a round."""
    if work.migrations_left <= 0:
        return False
    moved = _make_room(work, job, movers, work.migrations_left)
    if moved is None:
        return False
    work.migrations_left -= moved
    return True


def consolidate(work: Work) -> None:
    """Move multi-node gangs onto one node that can hold them whole (§6.4: migration
    for locality when a server frees up)."""
    largest_node = work.snapshot.cluster.max_gpus_per_node
    pool = work.pool
    for job in work.snapshot.running():
        if work.migrations_left <= 0 or pool.total_free == 0:
            break
        alloc = job.allocation
        if alloc is None or len(alloc.nodes) < 2 or alloc.num_gpus > largest_node:
            continue
        if _shared(job) or not work.settled(job):
            continue
        n = alloc.num_gpus
        best = max(
            ((own, node) for node, own in alloc.per_node if own + len(pool.free_gpus(node)) >= n),
            default=None,
        )
        if best is None:
            continue
        own, node = best
        kept = [(s.node, s.gpu) for s in alloc if s.node == node]
        extra = [(node, g) for g in pool.free_gpus(node)[: n - own]]
        target = Allocation.whole(kept + extra)
        if not pays_restart(work, job, target):
            continue
        work.move(job, target)
        work.migrations_left -= 1


def pays_restart(work: Work, job: JobView, target: Allocation) -> bool:
    """Whether moving running `job` to `target` saves more of its remaining run time
    than the restart costs (its model's `restart_s`)."""
    current = job.allocation
    assert current is not None
    profile = resolve(job.spec.model)
    cluster = work.snapshot.cluster
    now_ips = throughput_ips(profile, cluster, current, batch_size=job.batch_size)
    new_ips = throughput_ips(profile, cluster, target, batch_size=job.batch_size)
    if new_ips <= now_ips:
        return False
    rate = job.rate_ips if job.rate_ips > 0 else job.nominal_rate_ips
    remaining_s = job.remaining_iters_at(work.now) / rate
    return remaining_s * (1.0 - now_ips / new_ips) > profile.restart_s


def _make_room(
    work: Work, job: JobView, movers: dict[int, list[JobView]], budget: int
) -> int | None:
    """Migrate the fewest running jobs off the best node so that `job` fits there;
    the number migrated, or None (and nothing changed) when no node works."""
    pool, cluster = work.pool, work.snapshot.cluster
    n = job.spec.num_gpus
    best: tuple[tuple[int, int, int], list[JobView]] | None = None
    for node, candidates in movers.items():
        if cluster.nodes[node].num_gpus < n:
            continue
        lacking = n - len(pool.free_gpus(node))
        chosen: list[JobView] = []
        for mover in candidates:
            if lacking <= 0 or len(chosen) >= budget:
                break
            if work.settled(mover):
                chosen.append(mover)
                lacking -= mover.num_gpus
        if lacking > 0 or not chosen:
            continue
        key = (len(chosen), -lacking, node)
        if best is None or key < best[0]:
            best = (key, chosen)
    if best is None:
        return None
    return _relocate(work, job, best[0][2], best[1])


def _relocate(work: Work, job: JobView, node: int, chosen: list[JobView]) -> int | None:
    """Re-place `chosen` off `node`, then `job` on what that frees; all or nothing."""
    placer = work.snapshot.placer
    scratch = work.pool.copy()
    free_here = scratch.free_gpus(node)
    reserved = Allocation.whole((node, g) for g in free_here) if free_here else None
    if reserved is not None:
        scratch.take(reserved)  # keeps the movers off this node
    targets: list[tuple[JobView, Allocation]] = []
    for mover in chosen:
        alloc = placer.place(scratch, mover, mover.num_gpus)
        if alloc is None or len(alloc.nodes) > 1:  # a mover keeps its locality
            return None
        scratch.take(alloc, mover.spec.gpu_mem_mib)
        targets.append((mover, alloc))
    if reserved is not None:
        scratch.release(reserved)
    for mover in chosen:
        assert mover.allocation is not None
        scratch.release(mover.allocation, mover.spec.gpu_mem_mib)
    placed = placer.place(scratch, job, job.spec.num_gpus)
    if placed is None or work.chooser.quota_refusal(job, placed) is not None:
        return None
    for mover, alloc in targets:
        work.move(mover, alloc)
    work.start(job, placed)
    return len(chosen)


def movers_by_node(work: Work) -> dict[int, list[JobView]]:
    """Running single-node jobs that may migrate, by node, largest gang first."""
    out: dict[int, list[JobView]] = {}
    for job in work.snapshot.running():
        alloc = job.allocation
        if alloc is None or len(alloc.nodes) != 1 or alloc.shared or not work.settled(job):
            continue
        out.setdefault(alloc.nodes[0], []).append(job)
    for jobs in out.values():
        jobs.sort(key=lambda j: (-j.num_gpus, j.job_id))
    return out


def _shared(job: JobView) -> bool:
    return job.allocation is not None and job.allocation.shared


def _subset(job: JobView, size: int) -> Allocation:
    """`size` of the job's GPUs, from the nodes where it holds the most first."""
    alloc = job.allocation
    assert alloc is not None
    order = {node: (-count, node) for node, count in alloc.per_node}
    shares = sorted(alloc.shares, key=lambda s: (order[s.node], s.gpu))
    return Allocation(tuple(shares[:size]))
