"""Gavel's space sharing in the round: pairs of jobs as units of the allocation, and a
chosen pair placed on one set of GPUs that both jobs share for the round.

Narayanan et al., OSDI 2020, §3.1 and §5, as scheduler/scheduler.py does it in
simulation: with a packed policy the job combinations (a job alone, or a pair) are
what the mechanism ranks, each with its own time counters and priority X_kj / f_kj
(policies/gavel/rounds.py); a pair taken for a type holds z GPUs of it and marks both
its jobs scheduled, and it is skipped where either already is. A pair's jobs run on
the same GPUs, each given half of each (a `GpuShare` of 0.5: the model's vocabulary
for a shared GPU, which both backends carry out as they do Gandiva's packs: the
simulator at the matrix's pair rates, controller/sim/speed.py; the operator as MPS
clients). A pair whose jobs ran together on one type keeps its GPUs (Gavel's lease
extension), as a single job does.

A pair is kept in the allocation under `pair_key(a, b)` beside the single jobs' ids,
its jobs in `pairs`. When one of its jobs has left, the pair's time goes to the other
alone (Gavel folds a combination's allocation into the job still active) until the
allocation is next computed. Called by policies/gavel/__init__.py for `packed=true`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from controller.model import Allocation, Cluster, GpuPool, GpuShare, JobSpec, JobView, Snapshot
from controller.model.gpu_choice.candidates import GpuFilter
from policies.gavel import packing
from policies.gavel import pop as gavel_pop
from policies.gavel.rounds import Counters, assign, free_by_type, place_on_type, priorities

# Each job's share of a GPU it shares with its pair partner.
PAIR_SHARE = 0.5


@runtime_checkable
class PairRates(Protocol):
    """What a backend's `Snapshot.type_rates` tells of space sharing: the two jobs'
    steps per second on `num_gpus` GPUs of type `gpu` that they share, or None where
    the pair was not measured (controller.rates.RateModel, from the matrix)."""

    def type_pair_ips(
        self, spec: JobSpec, other: JobSpec, gpu: str, num_gpus: int
    ) -> tuple[float, float] | None: ...


def pair_key(a: str, b: str) -> str:
    """The allocation's key for the pair of jobs `a` and `b` (in that order)."""
    return f"{a} & {b}"


def live_units(
    job_ids: Sequence[str], pairs: Mapping[str, tuple[str, str]], active: frozenset[str]
) -> list[str]:
    """The active jobs and the pairs both of whose jobs are active."""
    return [*job_ids, *(k for k, (a, b) in pairs.items() if a in active and b in active)]


def allocation(
    objective: str,
    jobs: Sequence[JobView],
    rates: Mapping[str, tuple[float, ...]],
    capacity: Sequence[int],
    types: Sequence[str],
    source: object,
    now: float,
    pop_k: int | None,
) -> tuple[dict[str, tuple[float, ...]], dict[str, tuple[str, str]]]:
    """X over the jobs and their pairs (policies/gavel/packing.py), keyed by job id and
    `pair_key`, and each pair's jobs. Without pair rates (`source` is no `PairRates`)
    there are no pairs and X is the singles' alone."""
    runnable = [j for j in jobs if any(rates[j.job_id])]
    if not runnable:
        return {}, {}
    combos = _combinations(runnable, rates, types, source)
    workers = np.array(capacity, dtype=float)
    weights = np.array([max(1.0, float(j.spec.priority)) for j in runnable])
    remaining = np.array([max(j.remaining_iters_at(now), 1e-9) for j in runnable])
    since = np.array([max(0.0, now - j.spec.submit_s) for j in runnable])
    ids = [j.job_id for j in runnable]
    k = gavel_pop.default_k(len(runnable)) if pop_k is None else pop_k
    singles = np.zeros((len(runnable), len(types)))
    pair_x = np.zeros((len(combos.pairs), len(types)))
    parts = gavel_pop.parts(len(runnable), k if objective != "fifo" else 1)
    share = workers / len(parts)
    index = {p: i for i, p in enumerate(combos.pairs)}
    for rows in parts:
        part = combos.subset(rows.tolist())
        if objective == "las":
            x = packing.max_min_fairness(part, weights[rows], share)
        elif objective == "ftf":
            x = packing.finish_time_fairness(part, share, since[rows], remaining[rows])
        elif objective == "makespan":
            x = packing.min_makespan(part, share, remaining[rows])
        else:
            x = packing.fifo(part, share)
        singles[rows] = x.singles
        for p, (a, b) in enumerate(part.pairs):
            pair_x[index[int(rows[a]), int(rows[b])]] = x.pairs[p]
    result = {ids[r]: tuple(float(v) for v in singles[r]) for r in range(len(runnable))}
    members: dict[str, tuple[str, str]] = {}
    for p, (a, b) in enumerate(combos.pairs):
        if pair_x[p].any():
            key = pair_key(ids[a], ids[b])
            result[key] = tuple(float(v) for v in pair_x[p])
            members[key] = (ids[a], ids[b])
    return result, members


def round_placements(
    snapshot: Snapshot,
    jobs: Sequence[JobView],
    types: Sequence[str],
    allocation: Mapping[str, tuple[float, ...]],
    pairs: Mapping[str, tuple[str, str]],
    counters: Counters,
    rates: Mapping[str, tuple[float, ...]],
    capacity: Sequence[int],
    *,
    allocated_only: bool,
) -> tuple[dict[str, Allocation], dict[str, int]]:
    """The round's placements and the type each unit (job or pair) ran on: priorities
    over the jobs and their live pairs, a pair skipped where either job is taken."""
    active = frozenset(j.job_id for j in jobs)
    job_ids = [j.job_id for j in jobs]
    units = live_units(job_ids, pairs, active)
    shares = _folded(allocation, pairs, active, len(types))
    scale = {j.job_id: j.spec.num_gpus for j in jobs}
    unit_rates = dict(rates)
    members: dict[str, tuple[str, ...]] = {}
    for key in units[len(job_ids) :]:
        a, b = pairs[key]
        members[key] = (a, b)
        scale[key] = scale[a]
        # Runnable where X gave the pair time (the LP's bounds: both measured there).
        unit_rates[key] = tuple(1.0 if x > 0.0 else 0.0 for x in shares[key])
    entries = priorities(shares, unit_rates, counters, units, len(types))
    chosen = assign(
        entries, units, scale, unit_rates, capacity, allocated_only=allocated_only, members=members
    )
    return _placements(snapshot, jobs, types, chosen, members)


def _folded(
    allocation: Mapping[str, tuple[float, ...]],
    pairs: Mapping[str, tuple[str, str]],
    active: frozenset[str],
    types: int,
) -> dict[str, tuple[float, ...]]:
    """X with each pair that lost a job folded into the other job's own time."""
    shares = {k: v for k, v in allocation.items() if k not in pairs}
    for key, (a, b) in pairs.items():
        x = allocation[key]
        if a in active and b in active:
            shares[key] = x
            continue
        for job_id in (a, b):
            if job_id in active:
                own = shares.get(job_id, (0.0,) * types)
                shares[job_id] = tuple(min(1.0, o + v) for o, v in zip(own, x, strict=True))
    return shares


def _combinations(
    jobs: Sequence[JobView],
    rates: Mapping[str, tuple[float, ...]],
    types: Sequence[str],
    source: object,
) -> packing.Combinations:
    """The jobs' rates and their pairs: two jobs of one scale factor with a pair rate
    on some type both can run on (module docstring of policies/gavel/packing.py)."""
    t = np.array([rates[j.job_id] for j in jobs], dtype=float)
    scale = np.array([j.spec.num_gpus for j in jobs], dtype=float)
    found: list[tuple[int, int]] = []
    found_rates: list[list[tuple[float, float]]] = []
    if isinstance(source, PairRates):
        for a in range(len(jobs)):
            for b in range(a + 1, len(jobs)):
                if scale[a] != scale[b]:
                    continue
                row = [
                    _pair(source, jobs[a].spec, jobs[b].spec, gpu)
                    if t[a, j] > 0.0 and t[b, j] > 0.0
                    else (0.0, 0.0)
                    for j, gpu in enumerate(types)
                ]
                if any(r[0] > 0.0 for r in row):
                    found.append((a, b))
                    found_rates.append(row)
    pair_rates = (
        np.array(found_rates, dtype=float) if found else np.zeros((0, len(types), 2), dtype=float)
    )
    return packing.Combinations(t, scale, tuple(found), pair_rates)


def _pair(source: PairRates, a: JobSpec, b: JobSpec, gpu: str) -> tuple[float, float]:
    rates = source.type_pair_ips(a, b, gpu, a.num_gpus)
    if rates is None or rates[0] <= 0.0 or rates[1] <= 0.0:
        return (0.0, 0.0)
    return rates


def _placements(
    snapshot: Snapshot,
    jobs: Sequence[JobView],
    types: Sequence[str],
    chosen: Mapping[str, int],
    members: Mapping[str, tuple[str, ...]],
) -> tuple[dict[str, Allocation], dict[str, int]]:
    """GPUs for the round's units: a running job or pair given the type it runs on keeps
    its GPUs; the others are placed on their type's free GPUs as policies/gavel/__init__.py
    places single jobs, largest first (then in the round's priority order, where it takes
    arrival order), a pair's two jobs on the same GPUs. Each job of a unit is asked of
    the GPU-choice filter (controller.model.gpu_choice.candidates) where its GPUs are chosen; a
    pair whose second job the filter refuses does not start, and its first job's grant
    stays counted against its quota for the round (conservative: the plan then never
    breaches the controller's check, it may start one job fewer)."""
    cluster = snapshot.cluster
    nodes_of = [[i for i, n in enumerate(cluster.nodes) if n.gpu_type.name == t] for t in types]
    pool = snapshot.free_pool()
    views = {j.job_id: j for j in jobs}
    run: dict[str, Allocation] = {}
    ran_on: dict[str, int] = {}
    for unit, column in chosen.items():
        parts = members.get(unit, (unit,))
        allocs = [views[p].allocation for p in parts]
        if all(a is not None and _runs_as(a, len(parts)) for a in allocs) and _together(
            cluster, allocs, types[column]
        ):
            run.update({p: a for p, a in zip(parts, allocs, strict=True) if a is not None})
            ran_on[unit] = column
    chooser = GpuFilter(snapshot)
    for job in snapshot.running():
        if job.job_id not in run and job.allocation is not None:
            pool.release(job.allocation, job.spec.gpu_mem_mib)
            chooser.release(job)
    order = {u: i for i, u in enumerate(chosen)}
    scale = {u: views[members.get(u, (u,))[0]].spec.num_gpus for u in chosen}
    rest = sorted((u for u in chosen if u not in ran_on), key=lambda u: (-scale[u], order[u]))
    free = free_by_type(pool, nodes_of)
    for unit in rest:
        column = chosen[unit]
        parts = members.get(unit, (unit,))
        fit = pool
        for p in parts:
            fit = chooser.pool_for(fit, views[p].spec)
        offer = free[column] if fit is pool else free_by_type(fit, [nodes_of[column]])[0]
        placed = place_on_type(offer, scale[unit])
        if placed is None:
            continue
        shares = placed.shares
        if len(parts) > 1:
            shares = tuple(GpuShare(n, g, PAIR_SHARE) for n, g in placed.gpus())
        given = [Allocation(shares).with_host(views[p].spec.host) for p in parts]
        if not _granted(chooser, pool, [views[p] for p in parts], given):
            continue
        if not _take_all(
            pool, [(a, views[p].spec.gpu_mem_mib) for p, a in zip(parts, given, strict=True)]
        ):
            continue
        run.update(zip(parts, given, strict=True))
        for node in placed.nodes:
            left = pool.free_gpus(node)
            if left:
                free[column][node] = left
            else:
                free[column].pop(node, None)
        ran_on[unit] = column
    return run, ran_on


def _granted(
    chooser: GpuFilter, pool: GpuPool, jobs: Sequence[JobView], given: Sequence[Allocation]
) -> bool:
    """Whether the filter lets each job have its allocation, each granted in turn (so a
    pair's second job sees its quota's room after the first's)."""
    for job, alloc in zip(jobs, given, strict=True):
        if chooser.refusal(pool, job, alloc) is not None:
            return False
        chooser.grant(job, alloc)
    return True


def _runs_as(alloc: Allocation, jobs: int) -> bool:
    """Whether an allocation is a lone job's whole GPUs (jobs 1) or a pair's halves."""
    if jobs == 1:
        return not alloc.shared
    return all(abs(s.fraction - PAIR_SHARE) < 1e-9 for s in alloc.shares)


def _together(cluster: Cluster, allocs: Sequence[Allocation | None], gpu_type: str) -> bool:
    """Whether the allocations are on the same GPUs, all of type `gpu_type`."""
    first = allocs[0]
    assert first is not None
    if {cluster.nodes[n].gpu_type.name for n in first.nodes} != {gpu_type}:
        return False
    return all(a is not None and a.gpus() == first.gpus() for a in allocs)


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
