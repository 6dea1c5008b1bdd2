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

from controller.model import Allocation, GpuPool

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
