"""CASSINI's time-shifts: jobs on a shared link take turns instead of colliding.

CASSINI (Rajasekaran, Ghobadi, Akella, NSDI 2024) places each job's iteration on a
circle whose perimeter is the iteration time (§3, the geometric abstraction): the
communication phase is an arc, and rotating the circles of jobs that share a link
so that their arcs overlap least is a time-shift per job. Jobs and links form a
bipartite affinity graph (§4.2); a traversal from one job gives every reached job a
shift relative to the jobs already shifted, which is consistent as long as the
graph is a tree (CASSINI's placement keeps it loop-free; §4.2, Algorithm 2).

`time_shifts` is called by `controller.network.phases.jobs` each time the set of
running multi-node jobs changes, so that shifts are recomputed when jobs come and
go (§4.3 re-aligns on arrivals and departures); `compatibility` scores a group of
jobs on one link (§3.2's score: 1 - the excess of demand over capacity, averaged
over the circle).

Deviations: circles of unequal perimeter are compared over a window of a few of the
longest iterations instead of their least common multiple (CASSINI rounds iteration
times so that the LCM stays small); the rotation of each job is searched on a grid
of `SHIFT_STEPS` points of its period, greedily in traversal order, minimising the
time its burst overlaps the bursts already placed on its links (CASSINI solves an
optimisation per link and combines the links' answers through the graph); a loop
in the graph is not broken: a job reached twice keeps its first shift.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Mapping, Sequence

from controller.network.phases import PhaseJob

# Candidate rotations per job: 1/24 of a period is finer than the spread of the
# bursts of the bench's models (a burst is 10-60 % of an iteration).
SHIFT_STEPS = 24
# Periods of the longest job over which overlaps of unequal circles are measured.
WINDOW_PERIODS = 4


def _bursts(
    job: PhaseJob, offset_s: float, period_s: float, until_s: float
) -> list[tuple[float, float]]:
    """The job's burst intervals, alone, in [0, until_s)."""
    burst_s = period_s - job.compute_s
    out = []
    start = offset_s + job.compute_s - period_s  # the burst before the first, wrapped
    while start < until_s:
        if start + burst_s > 0:
            out.append((max(start, 0.0), min(start + burst_s, until_s)))
        start += period_s
    return out


def _overlap_s(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def time_shifts(jobs: Sequence[PhaseJob], periods_s: Mapping[str, float]) -> dict[str, float]:
    """A start offset in [0, period) per job, from the affinity graph (module docstring).

    `periods_s` is each job's iteration time alone (compute plus its burst at its own
    links' rate). The traversal starts from the job with the longest burst (then the
    smallest id) of each connected part, and visits links in order of first sight.
    """
    by_link: dict[Hashable, list[PhaseJob]] = {}
    for job in jobs:
        for link in job.links:
            by_link.setdefault(link, []).append(job)
    window = WINDOW_PERIODS * max(periods_s.values(), default=0.0)
    shifts: dict[str, float] = {}
    placed_bursts: dict[str, list[tuple[float, float]]] = {}
    order = sorted(jobs, key=lambda j: (-(periods_s[j.job_id] - j.compute_s), j.job_id))
    for root in order:
        if root.job_id in shifts:
            continue
        queue = deque([root])
        while queue:
            job = queue.popleft()
            if job.job_id in shifts:
                continue
            neighbours = sorted(
                {k.job_id for link in job.links for k in by_link[link]} & set(shifts)
            )
            period = periods_s[job.job_id]
            best, best_overlap = 0.0, float("inf")
            for step in range(SHIFT_STEPS):
                offset = period * step / SHIFT_STEPS
                mine = _bursts(job, offset, period, window)
                overlap = sum(_overlap_s(mine, placed_bursts[k]) for k in neighbours)
                if overlap < best_overlap - 1e-12:
                    best, best_overlap = offset, overlap
                if not neighbours or overlap <= 0.0:
                    break
            shifts[job.job_id] = best
            placed_bursts[job.job_id] = _bursts(job, best, period, window)
            for link in job.links:
                queue.extend(k for k in by_link[link] if k.job_id not in shifts)
    return shifts


def compatibility(
    jobs: Sequence[PhaseJob], periods_s: Mapping[str, float], capacity_gbps: float
) -> float:
    """CASSINI's score of jobs on one link, with their current shifts (`offset_s`):
    1 - mean over the window of max(0, demand - capacity) / capacity, where a job
    demands its rate alone (its bytes over its burst time) while in burst. 1: the
    bursts fit; lower: they collide."""
    window = WINDOW_PERIODS * max(periods_s[j.job_id] for j in jobs)
    edges: list[tuple[float, float]] = []
    for job in jobs:
        period = periods_s[job.job_id]
        burst_s = period - job.compute_s
        if burst_s <= 0:
            continue
        rate = job.comm_mb / 125.0 / burst_s
        for lo, hi in _bursts(job, job.offset_s, period, window):
            edges.append((lo, rate))
            edges.append((hi, -rate))
    edges.sort()
    excess, demand, last = 0.0, 0.0, 0.0
    for t, delta in edges:
        excess += max(0.0, demand - capacity_gbps) * (t - last)
        demand += delta
        last = t
    return 1.0 - excess / capacity_gbps / window if window > 0 else 1.0
