"""Gavel: heterogeneity-aware policies over time fractions per GPU type, in rounds.

Narayanan et al., "Heterogeneity-Aware Cluster Scheduling Policies for Deep Learning
Workloads", OSDI 2020. A policy computes X[m][j], the fraction of time job m should
spend on GPU type j (§3), from each job's throughput on each type
(`Snapshot.type_rates`: the backend's speeds, Gavel's measured matrix where a replay
is given one with `--throughputs`); the round-based mechanism (§5) turns X into each
round's placements. Registered as:

- `gavel-las`: max-min fairness of normalised effective throughput, with priority
  weights (§4.1 "LAS"; Gavel's max_min_fairness_perf);
- `gavel-ftf`: Themis' finish-time fairness (§4.1; finish_time_fairness_perf);
- `gavel-fifo`: FIFO on the fastest type with room (§4.1; fifo_perf);
- `gavel-makespan`: minimise the makespan (§4.1; min_total_duration_perf);

each with `aware=false` for the heterogeneity-blind version Gavel compares against
(max_min_fairness, finish_time_fairness, fifo, min_total_duration). The problems and
their deviations: policies/gavel/allocation.py; the mechanism: policies/gavel/rounds.py.

Options: `round_s` (360 s, Gavel's time_per_iteration; the policy keeps every job where
it is until a round is due, however often the backend asks), `reset_interval_s` (1,920
s; gavel-fifo recomputes at every change of the job set, below), `seed` (the blind
FIFO's random stream, Python's `random.Random(seed)` as Gavel's FIFOPolicy seeds it,
carried between allocations in the state), `packed` (space sharing, Gavel's `*_packed`
policies: X over jobs and pairs of jobs from the matrix's pair rates,
policies/gavel/packing.py, a chosen pair run on GPUs both share,
policies/gavel/colocation.py; aware only; without pair rates from the backend nothing
pairs; a job no one type holds waits, as in Gavel), `pop_k` (LAS, FTF and the makespan:
X solved as k independent sub-problems, POP, policies/gavel/pop.py; 1: the full LP;
unset: one part per 1,000 jobs, so the full LP below that; FIFO is no LP and ignores
it). Deviations here: a job's priority weight is its spec's priority where that is >= 1,
else 1 (gpuflow's traces carry no Gavel weight); jobs are in Gavel's order, by arrival
time then id, numbers in it compared as numbers (`arrival_key`); a job asking more GPUs
than any type has runs over several types at its slowest part's speed
(policies/gavel/across.py; Gavel would leave it waiting for ever), except under the
blind FIFO, and one asking more than the cluster has waits with its own reason; a job's
remaining steps (FTF, makespan) are what the backend knows of its total (Gavel assumes
them known too); gavel-fifo recomputes X, and resets the time counters, whenever the job
set changes, without waiting out `reset_interval_s`: its X is no LP but whole types for
jobs that all fit at once, so priorities never choose among them, and a job that X
leaves out runs in no round (Gavel skips FIFO's 0-priority entries), so a job that
arrived, or that quotas showed it, after the last reset held GPUs idle until the next
one (team-b 4 GPUs under its guarantee for 36 min in issue 18's Show; on Gavel's trace,
average JCT and makespan each 3-4 % nearer Gavel's simulator than with the period,
docs/benchmarks.md).
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from controller.model import JobSpec, JobView, Plan, Reason, Snapshot
from controller.model.job import does_not_fit
from controller.model.perf.matrix import ModelTypeRates
from policies.gavel import across as gavel_across
from policies.gavel import allocation as gavel_allocation
from policies.gavel import colocation
from policies.gavel import pop as gavel_pop
from policies.gavel.rounds import Counters, assign, place_units, priorities

# A round is due this close to its start (float sums of round lengths).
_ROUND_EPS_S = 1e-6

NOT_THIS_ROUND = Reason(
    "NotThisRound",
    "Gavel's round gave the GPUs to jobs further below their time fraction "
    "(priority = time fraction / share of time received)",
)


@dataclass(frozen=True)
class GavelState:
    """What Gavel carries between rounds: the GPU types, the allocation X (per job, a
    fraction per type), the jobs it was computed for, the time counters, when the last
    reset and the last round were, and the type each job ran on in that round."""

    types: tuple[str, ...]
    allocation: Mapping[str, tuple[float, ...]]
    known: frozenset[str]
    counters: Counters
    reset_s: float
    round_s: float
    ran_on: Mapping[str, int] = field(default_factory=dict)
    # Space sharing (`packed`): the pairs in `allocation`, by key (policies/gavel/colocation.py).
    pairs: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    # The blind FIFO's random stream between allocations (random.Random.getstate()).
    draws: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class Gavel:
    aware: bool = True
    round_s: float = 360.0
    reset_interval_s: float = 1920.0
    seed: int = 0
    pop_k: int | None = None
    packed: bool = False
    name: str = "gavel-las"
    objective: ClassVar[str] = "las"

    def __post_init__(self) -> None:
        if not self.round_s > 0.0:
            raise ValueError(f"round_s must be > 0, not {self.round_s}")
        if self.reset_interval_s < 0.0:
            raise ValueError(f"reset_interval_s must be >= 0, not {self.reset_interval_s}")
        if self.pop_k is not None and self.pop_k < 1:
            raise ValueError(f"pop_k must be >= 1, not {self.pop_k}")
        if self.packed and not self.aware:
            raise ValueError("packed=true needs aware=true (Gavel packs by the pair rates)")

    def schedule(self, snapshot: Snapshot, state: Any) -> Plan:
        now = snapshot.now_s
        prev = state if isinstance(state, GavelState) else None
        types = tuple(sorted({node.gpu_type.name for node in snapshot.cluster.nodes}))
        if prev is not None and prev.types != types:
            prev = None
        if prev is not None and now < prev.round_s + self.round_s - _ROUND_EPS_S:
            return Plan(
                run=snapshot.allocations(),
                default_reason=NOT_THIS_ROUND,
                state=prev,
                wake_s=prev.round_s + self.round_s,
            )
        jobs = sorted(snapshot.jobs, key=arrival_key)
        job_ids = [j.job_id for j in jobs]
        # Gavel's code's blind FIFO runs no job over types (it would stop its queue).
        # Nor does its packed LP (policies/gavel/packing.py): such a job waits there.
        over_types = not (self.objective == "fifo" and not self.aware) and not self.packed
        rates, spans = _rates(snapshot, jobs, types, over_types)
        capacity = _capacity(snapshot, types)
        active = frozenset(job_ids)
        pairs = prev.pairs if prev is not None else {}
        units = colocation.live_units(job_ids, pairs, active) if pairs else job_ids
        if prev is None:
            allocation: Mapping[str, tuple[float, ...]] = {}
            counters = Counters().reset(job_ids, {}, 0.0, self.round_s, len(types))
            known: frozenset[str] = frozenset()
            reset_s = now
            rng = random.Random(self.seed)
        else:
            live = frozenset(units) if pairs else active
            ran = {j: t for j, t in prev.ran_on.items() if j in live}
            counters = _ran(prev.counters, ran, spans, now - prev.round_s, len(types))
            allocation, known, reset_s = prev.allocation, prev.known, prev.reset_s
            rng = random.Random()
            if prev.draws is not None:
                rng.setstate(prev.draws)
        # FIFO's X gives whole types to jobs that all fit at once: recomputed at every
        # change of the job set (module docstring).
        due = (
            prev is None or self.objective == "fifo" or now - prev.reset_s >= self.reset_interval_s
        )
        if active != known and due:
            if prev is not None:
                counters = counters.reset(
                    units, allocation, now - reset_s, self.round_s, len(types)
                )
            if self.packed:
                allocation, pairs = colocation.allocation(
                    self.objective,
                    jobs,
                    rates,
                    capacity,
                    types,
                    snapshot.type_rates,
                    now,
                    self.pop_k,
                )
            else:
                allocation = self._allocation(jobs, rates, spans, capacity, allocation, now, rng)
            known, reset_s = active, now
        if self.packed:
            run, ran_on = colocation.round_placements(
                snapshot,
                jobs,
                types,
                allocation,
                pairs,
                counters,
                rates,
                capacity,
                allocated_only=self.objective == "fifo",
            )
        else:
            entries = priorities(allocation, rates, counters, job_ids, len(types))
            scale = {j.job_id: j.spec.num_gpus for j in jobs}
            fifo = self.objective == "fifo"
            chosen = assign(
                entries, job_ids, scale, rates, capacity, allocated_only=fifo, spans=spans
            )
            run, ran_on = place_units(snapshot, jobs, types, chosen, spans=spans)
        reasons = {
            j.job_id: does_not_fit(j.spec.num_gpus, "no GPU type has that many", "NoGpuTypeFits")
            for j in jobs
            if not any(rates[j.job_id])
        }
        draws = rng.getstate() if self.objective == "fifo" and not self.aware else None
        new_state = GavelState(
            types, dict(allocation), known, counters, reset_s, now, ran_on, dict(pairs), draws
        )
        return Plan(
            run=run,
            reasons=reasons,
            default_reason=NOT_THIS_ROUND,
            state=new_state,
            wake_s=now + self.round_s if jobs else None,
        )

    def _allocation(
        self,
        jobs: Sequence[JobView],
        rates: Mapping[str, tuple[float, ...]],
        spans: Mapping[str, tuple[int, ...]],
        capacity: Sequence[int],
        previous: Mapping[str, tuple[float, ...]],
        now: float,
        rng: random.Random,
    ) -> dict[str, tuple[float, ...]]:
        """X for the jobs that can run on some type or over several
        (policies/gavel/allocation.py, policies/gavel/across.py)."""
        runnable = [j for j in jobs if any(rates[j.job_id])]
        if not runnable:
            return {}
        t = np.array([rates[j.job_id] for j in runnable], dtype=float)
        none = (0,) * len(capacity)
        parts = np.array([spans.get(j.job_id, none) for j in runnable], dtype=float)
        scale = np.array([j.spec.num_gpus for j in runnable], dtype=float)
        workers = np.array(capacity, dtype=float)
        weights = np.array([max(1.0, float(j.spec.priority)) for j in runnable])
        remaining = np.array([max(j.remaining_iters_at(now), 1e-9) for j in runnable])
        since = np.array([max(0.0, now - j.spec.submit_s) for j in runnable])
        aware = self.aware
        if self.objective == "fifo" and aware:
            x = gavel_allocation.fifo(t, scale, workers, parts)
        elif self.objective == "fifo":
            return self._fifo_agnostic(runnable, t, scale, workers, previous, rng)
        else:
            problem = _Problem(self.objective, aware, t, scale, weights, since, remaining, parts)
            k = gavel_pop.default_k(len(runnable)) if self.pop_k is None else self.pop_k
            x = gavel_pop.partitioned(len(runnable), len(capacity), k, workers, problem.solve)
        return {j.job_id: tuple(float(v) for v in x[row]) for row, j in enumerate(runnable)}

    def _fifo_agnostic(
        self,
        runnable: Sequence[JobView],
        t: gavel_pop.Matrix,
        scale: gavel_pop.Matrix,
        workers: gavel_pop.Matrix,
        previous: Mapping[str, tuple[float, ...]],
        rng: random.Random,
    ) -> dict[str, tuple[float, ...]]:
        """Blind FIFO's X (allocation.fifo_agnostic): only the jobs given a type, in
        arrival order (the order the next allocation walks them in, finished or not)."""
        row_of = {j.job_id: row for row, j in enumerate(runnable)}
        before = [
            (row_of.get(job_id), int(np.argmax(x)))
            for job_id, x in previous.items()
            if max(x, default=0.0) >= 1.0
        ]
        x = gavel_allocation.fifo_agnostic(t, scale, workers, before, rng)
        return {
            j.job_id: tuple(float(v) for v in x[row])
            for row, j in enumerate(runnable)
            if x[row].any()
        }


@dataclass(frozen=True)
class _Problem:
    """One allocation's inputs, a row per job, as policies/gavel/allocation.py takes
    them; `solve` is one POP part's X (policies/gavel/pop.py)."""

    objective: str
    aware: bool
    throughputs: gavel_pop.Matrix
    scale: gavel_pop.Matrix
    weights: gavel_pop.Matrix
    since_s: gavel_pop.Matrix
    remaining: gavel_pop.Matrix
    spans: gavel_pop.Matrix

    def solve(self, rows: gavel_pop.Rows, workers: gavel_pop.Matrix) -> gavel_pop.Matrix:
        """X of the jobs `rows` on `workers` GPUs of each type (a job over several
        types whose parts do not fit this part's GPUs gets none)."""
        t, scale, aware = self.throughputs[rows].copy(), self.scale[rows], self.aware
        spans = self.spans[rows]
        for row in np.flatnonzero(spans.any(axis=1)):
            if not gavel_across.fits(spans[row], workers):
                t[row] = 0.0
                spans[row] = 0.0
        if self.objective == "las":
            return gavel_allocation.max_min_fairness(
                t, scale, self.weights[rows], workers, aware=aware, spans=spans
            )
        if self.objective == "ftf":
            return gavel_allocation.finish_time_fairness(
                t,
                scale,
                self.weights[rows],
                workers,
                self.since_s[rows],
                self.remaining[rows],
                aware=aware,
                spans=spans,
            )
        return gavel_allocation.min_makespan(
            t, scale, workers, self.remaining[rows], aware=aware, spans=spans
        )


@dataclass(frozen=True)
class GavelLas(Gavel):
    name: str = "gavel-las"
    objective: ClassVar[str] = "las"


@dataclass(frozen=True)
class GavelFtf(Gavel):
    name: str = "gavel-ftf"
    objective: ClassVar[str] = "ftf"


@dataclass(frozen=True)
class GavelFifo(Gavel):
    name: str = "gavel-fifo"
    objective: ClassVar[str] = "fifo"


@dataclass(frozen=True)
class GavelMakespan(Gavel):
    name: str = "gavel-makespan"
    objective: ClassVar[str] = "makespan"


def arrival_key(job: JobView) -> tuple[float, tuple[tuple[int, str], ...]]:
    """Gavel's job order, its job ids' (arrival order): submit time, then the id with
    its numbers compared as numbers (`gavel-2` before `gavel-10`, as a trace lists
    them)."""
    return job.spec.submit_s, _id_key(job.job_id)


# Every round sorts every active job: splitting their ids anew each round took a third
# of the LPs' time in a 10,000-job replay of bench/gavel_scale.py (cProfile). The bound
# is well above the most jobs its 100,000-job replay holds active at once (6,670).
@functools.lru_cache(maxsize=1 << 16)
def _id_key(job_id: str) -> tuple[tuple[int, str], ...]:
    parts = re.split(r"(\d+)", job_id)
    return tuple((int(p), "") if p.isdigit() else (-1, p) for p in parts if p)


def _rates(
    snapshot: Snapshot, jobs: Sequence[JobView], types: Sequence[str], over_types: bool
) -> tuple[dict[str, tuple[float, ...]], dict[str, tuple[int, ...]]]:
    """Each job's steps/s on its GPUs of each type (0: the type has too few), and,
    where `over_types`, the spans of the jobs no one type holds: their GPUs of each
    type and their rate over them on each type they span
    (policies/gavel/across.py)."""
    source = snapshot.type_rates or ModelTypeRates(snapshot.cluster)
    rates = {
        j.job_id: tuple(source.type_rate_ips(j.spec, t, j.spec.num_gpus) or 0.0 for t in types)
        for j in jobs
    }
    spans: dict[str, tuple[int, ...]] = {}
    if not over_types:
        return rates, spans
    sizes = [0] * len(types)
    index = {t: i for i, t in enumerate(types)}
    for node in snapshot.cluster.nodes:
        sizes[index[node.gpu_type.name]] += node.num_gpus
    for j in jobs:
        if any(rates[j.job_id]):
            continue
        spec = j.spec

        def rate_of(gpu: str, n: int, spec: JobSpec = spec) -> float | None:
            return source.type_rate_ips(spec, gpu, n)

        parts = gavel_across.span(spec.num_gpus, types, sizes, rate_of)
        if parts:
            rate = gavel_across.spanned_rate(parts, types, rate_of)
            spans[j.job_id] = parts
            rates[j.job_id] = tuple(rate if d else 0.0 for d in parts)
    return rates, spans


def _ran(
    counters: Counters,
    ran_on: Mapping[str, int],
    spans: Mapping[str, Sequence[int]],
    elapsed_s: float,
    types: int,
) -> Counters:
    """The counters after the last round: a job over several types ran on each."""
    counters = counters.ran(ran_on, elapsed_s, types)
    for column in range(types):
        more = {
            job_id: column
            for job_id, on in ran_on.items()
            if job_id in spans and spans[job_id][column] and column != on
        }
        if more:
            counters = counters.ran(more, elapsed_s, types)
    return counters


def _capacity(snapshot: Snapshot, types: Sequence[str]) -> list[int]:
    """The GPUs of each type a plan may give out (Snapshot.usable_gpus)."""
    usable = snapshot.usable_gpus()
    index = {t: i for i, t in enumerate(types)}
    capacity = [0] * len(types)
    for node, count in zip(snapshot.cluster.nodes, usable, strict=True):
        capacity[index[node.gpu_type.name]] += count
    return capacity
