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
extension), as a single job does; the round's units, single jobs and pairs alike, are
placed by policies/gavel/rounds.py's `place_units`.

A pair is kept in the allocation under `pair_key(a, b)` beside the single jobs' ids,
its jobs in `pairs`. When one of its jobs has left, the pair's time goes to the other
alone (Gavel folds a combination's allocation into the job still active) until the
allocation is next computed. Called by policies/gavel/__init__.py for `packed=true`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from controller.model import Allocation, JobSpec, JobView, Snapshot
from policies.gavel import packing
from policies.gavel import pop as gavel_pop
from policies.gavel.rounds import Counters, assign, place_units, priorities

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
    return place_units(snapshot, jobs, types, chosen, members=members, pair_share=PAIR_SHARE)


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
