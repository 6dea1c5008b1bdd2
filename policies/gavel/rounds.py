"""Gavel's round-based mechanism: time fractions into each round's placements.

Narayanan et al., OSDI 2020, §5 ("Scheduling Mechanism"), as scheduler/scheduler.py
does it in simulation: each round (360 s) the jobs run whose priority on a GPU type
is highest, priority = X[m][j] / f[m][j], f[m][j] the share of the time that type's
jobs have run since the last reset that job m has had (X[m][j] * 1e9 while it has had
none: a new allocation's jobs start by their fractions); ties go to the larger deficit
(the time X promised since the last reset less the time received), then the larger
X. Walking (job, type) entries by priority, a job takes z_m GPUs of a type while
enough are left and it runs nowhere else this round; entries of priority 0 take the
GPUs left over, except under FIFO (Gavel: "for FIFO jobs, don't schedule jobs with 0
priority"). A job given the type it runs on
keeps its GPUs (Gavel extends its lease); the others are placed on that type's free
GPUs, the largest gangs first, each on the one server that fits it most tightly, or
else over the servers with the most free GPUs, among the servers the GPU-choice
filter leaves the job (controller.model.gpu_choice.candidates.GpuFilter: no cordoned server, a
GPU model it accepts, CPU and memory for its pods), and where its queue allows the
GPUs (quotas).

Time counters and deficits are reset, and X recomputed, when the job set has changed
and at least `reset_interval_s` has passed since the last reset (Gavel's
minimum_time_between_allocation_resets, 1,920 s by default): a job that arrives in
between has no allocation yet and the lowest priority. A reset starts every job's time
on every type at half a round (Gavel's guard against dividing by zero).

Deviations: a job's time on a type is counted from the round's length (or the time
since the last round, where the backend calls sooner) rather than from its workers'
reports; placement is gpuflow's own within a type (Gavel's assigns worker ids by
server the same way). Called by policies/gavel/__init__.py; pure: the state goes in and out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from controller.model import Allocation, Cluster, GpuPool, GpuShare, JobView, Snapshot
from controller.model.gpu_choice.candidates import GpuFilter

# Gavel's priority for a job with an allocation but no time received yet: X * 1e9
# ("don't use inf so 2*new_priority > new_priority").
UNSERVED_PRIORITY = 1e9


@dataclass(frozen=True)
class Counters:
    """Time received per (job, type) since the last reset, per type summed over its
    jobs, and each (job, type)'s deficit: Gavel's _job_time_so_far,
    _worker_time_so_far and _deficits."""

    job_s: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    type_s: tuple[float, ...] = ()
    deficit_s: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    def ran(self, ran_on: Mapping[str, int], elapsed_s: float, types: int) -> Counters:
        """The counters after each job in `ran_on` ran `elapsed_s` on its type."""
        job_s = dict(self.job_s)
        type_s = list(self.type_s or (0.0,) * types)
        for job_id, column in ran_on.items():
            times = list(job_s.get(job_id, (0.0,) * types))
            times[column] += elapsed_s
            job_s[job_id] = tuple(times)
            type_s[column] += elapsed_s
        return Counters(job_s, tuple(type_s), self.deficit_s)

    def reset(
        self,
        jobs: Sequence[str],
        allocation: Mapping[str, tuple[float, ...]],
        since_reset_s: float,
        round_s: float,
        types: int,
    ) -> Counters:
        """Gavel's _reset_time_run_so_far: deficits take what each job was promised
        less what it got; every job's time starts again at half a round."""
        start = round_s / 2.0
        deficit_s: dict[str, tuple[float, ...]] = {}
        for job_id in jobs:
            got = self.job_s.get(job_id)
            promised = allocation.get(job_id, (0.0,) * types)
            old = self.deficit_s.get(job_id, (0.0,) * types)
            deficit_s[job_id] = tuple(
                old[t] + promised[t] * since_reset_s - ((got[t] - start) if got else 0.0)
                for t in range(types)
            )
        job_s = {job_id: (start,) * types for job_id in jobs}
        return Counters(job_s, (start * len(jobs),) * types, deficit_s)


def priorities(
    allocation: Mapping[str, tuple[float, ...]],
    rates: Mapping[str, tuple[float, ...]],
    counters: Counters,
    job_ids: Sequence[str],
    types: int,
) -> list[tuple[float, float, float, int, int]]:
    """(priority, deficit, X, -job index, -type) per (job, type), highest first."""
    entries = []
    for index, job_id in enumerate(job_ids):
        x = allocation.get(job_id)
        times = counters.job_s.get(job_id)
        deficit = counters.deficit_s.get(job_id, (0.0,) * types)
        for t in range(types):
            share = x[t] if x is not None else 0.0
            priority = 0.0
            if share > 0.0 and rates[job_id][t] > 0.0:
                received = times[t] / counters.type_s[t] if times and counters.type_s[t] else 0
                priority = share / received if received > 0 else share * UNSERVED_PRIORITY
            entries.append((priority, deficit[t], share, -index, -t))
    entries.sort(reverse=True)
    return entries


def assign(
    entries: Sequence[tuple[float, float, float, int, int]],
    job_ids: Sequence[str],
    scale: Mapping[str, int],
    rates: Mapping[str, tuple[float, ...]],
    capacity: Sequence[int],
    *,
    allocated_only: bool = False,
    members: Mapping[str, tuple[str, ...]] | None = None,
    spans: Mapping[str, Sequence[int]] | None = None,
) -> dict[str, int]:
    """Each job's GPU type this round (Gavel's _schedule_jobs_on_workers_helper):
    entries of priority 0 (no time fraction there, or none computed yet) take GPUs
    left over, except where `allocated_only` (Gavel's FIFO policies). With `members`
    (space sharing, policies/gavel/colocation.py) an id may be a pair of jobs: it is
    skipped where either job is already taken, and taking it takes both. A job over
    several types (`spans`: its GPUs of each, policies/gavel/across.py) runs at its
    first entry where every part fits what is left; its type is that entry's."""
    left = list(capacity)
    chosen: dict[str, int] = {}
    taken: set[str] = set()
    for priority, _, _, minus_index, minus_type in entries:
        job_id, t = job_ids[-minus_index], -minus_type
        jobs = members.get(job_id, (job_id,)) if members else (job_id,)
        if any(j in taken for j in jobs) or rates[job_id][t] <= 0.0:
            continue
        if allocated_only and priority <= 0.0:
            continue
        parts = spans.get(job_id) if spans else None
        if parts:
            if any(d > left[j] for j, d in enumerate(parts)):
                continue
            for j, d in enumerate(parts):
                left[j] -= d
        elif scale[job_id] > left[t]:
            continue
        else:
            left[t] -= scale[job_id]
        chosen[job_id] = t
        taken.update(jobs)
    return chosen


def free_by_type(pool: GpuPool, nodes_of: Sequence[Sequence[int]]) -> list[dict[int, list[int]]]:
    """Each type's servers with free whole GPUs, cordoned ones left out: what
    `place_on_type` chooses from, built once a round (not once a job: a round of
    thousands of jobs on hundreds of servers a type walked them all for each job) and
    kept current by `take_on_type`."""
    cordoned = pool.cordoned
    return [
        {n: g for n in nodes if n not in cordoned and (g := pool.free_gpus(n))}
        for nodes in nodes_of
    ]


def place_on_type(free: Mapping[int, Sequence[int]], gpus: int) -> Allocation | None:
    """`gpus` of one type's free whole GPUs `free` (server -> its free GPUs): the one
    server that fits them most tightly, else over the servers with the most free
    (module docstring); None where the servers have too few."""
    fitting = [n for n, g in free.items() if len(g) >= gpus]
    if fitting:
        node = min(fitting, key=lambda n: (len(free[n]), n))
        return Allocation.whole((node, g) for g in free[node][:gpus])
    taken: list[tuple[int, int]] = []
    for node in sorted(free, key=lambda n: (-len(free[n]), n)):
        taken.extend((node, g) for g in free[node][: gpus - len(taken)])
        if len(taken) == gpus:
            return Allocation.whole(taken)
    return None


def take_on_type(
    pool: GpuPool, free: dict[int, list[int]], alloc: Allocation, mem_mib: int | None
) -> None:
    """Take `alloc` from `pool` and from its type's `free`."""
    pool.take(alloc, mem_mib)
    for node in alloc.nodes:
        left = pool.free_gpus(node)
        if left:
            free[node] = left
        else:
            free.pop(node, None)


def place_units(
    snapshot: Snapshot,
    jobs: Sequence[JobView],
    types: Sequence[str],
    chosen: Mapping[str, int],
    *,
    members: Mapping[str, tuple[str, ...]] | None = None,
    spans: Mapping[str, Sequence[int]] | None = None,
    pair_share: float = 0.5,
) -> tuple[dict[str, Allocation], dict[str, int]]:
    """GPUs for the round's units (`chosen`: each unit's GPU type) and the type each
    ran on. A unit is a job, or under space sharing a pair of jobs (`members`,
    policies/gavel/colocation.py) whose jobs share the same GPUs, `pair_share` of each;
    a job over several types (`spans`: its GPUs of each, policies/gavel/across.py)
    takes its part on each.

    A running unit given what it runs on keeps its GPUs (Gavel's lease extension).
    The others are placed, the largest first, then in arrival order (a pair at its
    first job's), on their types' free GPUs among the servers the GPU-choice filter
    leaves every job of the unit, and only where each job's quota allows the GPUs
    (a pair's second job sees the room after its first's; where it is refused the
    first's grant stays counted for the round: the plan never breaches the
    controller's check, it may start one job fewer)."""
    members, spans = members or {}, spans or {}
    cluster = snapshot.cluster
    nodes_of = [[i for i, n in enumerate(cluster.nodes) if n.gpu_type.name == t] for t in types]
    pool = snapshot.free_pool()
    views = {j.job_id: j for j in jobs}
    parts_of = {u: members.get(u, (u,)) for u in chosen}
    unit_of = {job_id: u for u, ids in parts_of.items() for job_id in ids}
    kept = {
        u
        for u, column in chosen.items()
        if _keeps(
            cluster,
            [views[j].allocation for j in parts_of[u]],
            (types, column, spans.get(u)),
            pair_share,
        )
    }
    run: dict[str, Allocation] = {}
    ran_on: dict[str, int] = {}
    for job in snapshot.running():
        alloc = job.allocation
        if alloc is None:
            continue
        unit = unit_of.get(job.job_id)
        if unit in kept:
            run[job.job_id] = alloc
            ran_on[unit] = chosen[unit]
        else:
            pool.release(alloc, job.spec.gpu_mem_mib)
    order = {j.job_id: i for i, j in enumerate(jobs)}
    scale = {u: views[ids[0]].spec.num_gpus for u, ids in parts_of.items()}
    first = {u: min(order[j] for j in ids) for u, ids in parts_of.items()}
    rest = sorted((u for u in chosen if u not in kept), key=lambda u: (-scale[u], first[u]))
    free = free_by_type(pool, nodes_of)
    chooser = GpuFilter(snapshot)
    for job in snapshot.running():
        if job.job_id not in run and unit_of.get(job.job_id) not in chosen:
            chooser.release(job)
    for unit in rest:
        column, group = chosen[unit], [views[j] for j in parts_of[unit]]
        fit = pool
        for job in group:
            fit = chooser.pool_for(fit, job.spec)
        parts = spans.get(unit) or [scale[unit] if t == column else 0 for t in range(len(types))]
        # A job whose pods some node refuses chooses among the servers the filter
        # leaves it; the round's shared table serves every other job.
        offers = {
            t: free[t] if fit is pool else free_by_type(fit, [nodes_of[t]])[0]
            for t, d in enumerate(parts)
            if d
        }
        taken = [place_on_type(offers[t], parts[t]) for t in offers]
        gpus = [gpu for alloc in taken if alloc is not None for gpu in alloc.gpus()]
        if len(gpus) != scale[unit]:
            continue
        given = _given(group, gpus, pair_share)
        if len(group) == 1 and not pool.fits(given[0], group[0].spec.gpu_mem_mib):
            continue
        if not _granted(chooser, group, given):
            continue  # its quota allows no more this round
        if not _take_all(
            pool, [(a, j.spec.gpu_mem_mib) for j, a in zip(group, given, strict=True)]
        ):
            continue
        for t, alloc in zip(offers, taken, strict=True):
            assert alloc is not None
            for node in alloc.nodes:
                left = pool.free_gpus(node)
                if left:
                    free[t][node] = left
                else:
                    free[t].pop(node, None)
        run.update((j.job_id, a) for j, a in zip(group, given, strict=True))
        ran_on[unit] = column
    return run, ran_on


def _keeps(
    cluster: Cluster,
    allocs: Sequence[Allocation | None],
    given: tuple[Sequence[str], int, Sequence[int] | None],
    pair_share: float,
) -> bool:
    """Whether a running unit's GPUs are what this round gives it (`given`: the types,
    the unit's type and, for a job over several types, its parts on each): a job's
    whole GPUs all of its type, or its parts; a pair's shares of the same GPUs, all of
    its type."""
    types, column, parts = given
    if any(a is None for a in allocs):
        return False
    held = [a for a in allocs if a is not None]
    if len(held) == 1:
        return not held[0].shared and _holds(cluster, held[0], types, column, parts)
    gpus = held[0].gpus()
    return (
        all(abs(s.fraction - pair_share) < 1e-9 for a in held for s in a.shares)
        and all(a.gpus() == gpus for a in held)
        and {cluster.nodes[n].gpu_type.name for n in held[0].nodes} == {types[column]}
    )


def _holds(
    cluster: Cluster,
    alloc: Allocation,
    types: Sequence[str],
    column: int,
    parts: Sequence[int] | None,
) -> bool:
    """Whether a job's GPUs are all of the type `column`, or, for a job over several
    types, its parts on each."""
    counts = [0] * len(types)
    index = {t: i for i, t in enumerate(types)}
    for node, n in alloc.per_node:
        counts[index[cluster.nodes[node].gpu_type.name]] += n
    if parts:
        return counts == list(parts)
    return counts[column] == alloc.num_gpus


def _given(
    group: Sequence[JobView], gpus: Sequence[tuple[int, int]], pair_share: float
) -> list[Allocation]:
    """Each job's allocation of `gpus`: a lone job's whole GPUs, a pair's shares of
    them; with its pods' CPU and memory."""
    if len(group) == 1:
        return [Allocation.whole(gpus).with_host(group[0].spec.host)]
    shares = tuple(GpuShare(n, g, pair_share) for n, g in gpus)
    return [Allocation(shares).with_host(j.spec.host) for j in group]


def _granted(chooser: GpuFilter, group: Sequence[JobView], given: Sequence[Allocation]) -> bool:
    """Whether each job's quota allows its allocation, each granted in turn."""
    for job, alloc in zip(group, given, strict=True):
        if chooser.quota_refusal(job, alloc) is not None:
            return False
        chooser.grant(job, alloc)
    return True


def _take_all(pool: GpuPool, allocs: Sequence[tuple[Allocation, int | None]]) -> bool:
    """Take every allocation from `pool`, or none where one does not fit."""
    taken: list[tuple[Allocation, int | None]] = []
    for alloc, mem_mib in allocs:
        if not pool.fits(alloc, mem_mib):
            for back, back_mem in taken:
                pool.release(back, back_mem)
            return False
        pool.take(alloc, mem_mib)
        taken.append((alloc, mem_mib))
    return True
