"""Gavel's space sharing: the allocation over job combinations, a job alone or a pair
of jobs sharing the same GPUs.

Narayanan et al., OSDI 2020, §3.1 ("space sharing"), as its code states it
(stanford-futuredata/gavel at c4fa400: scheduler/policies/policy.py
`PolicyWithPacking`, max_min_fairness.py, finish_time_fairness.py,
min_total_duration.py and fifo.py, the `*_packed` policies). The rows of X become
combinations k, each a single job or a pair, and T^m_kj is job m's throughput in
combination k on type j (a pair's entry in the matrix: each job's steps per second
while the two share z GPUs of the type). With C_m the combinations holding job m:

    throughput(m, X) = sum_{k in C_m} sum_j T^m_kj X_kj                     (effective)
    sum_{k in C_m} sum_j X_kj <= 1          for every job m (its time, alone or paired)
    sum_k z_k X_kj <= W_j                   for every type j (a pair holds its z GPUs once)
    0 <= X_kj <= 1,  X_kj = 0 where a job of k cannot run on j or the pair was not measured

Pairs are the jobs of one scale factor z whose pair entry exists for some type (Gavel
forms every pair and gives those of two scale factors a zero rate; its matrix measures
pairs on one GPU, so in practice only 1-GPU jobs pair). The policies, each over these
constraints, solved with SciPy's HiGHS as policies/gavel/allocation.py's:

- LAS (`max_min_fairness_packed`): maximise min_m z_m throughput(m, X) /
  (w_m throughput(m, X_prop)), X_prop Gavel's proportional share as the unpacked LAS
  normalises (allocation.proportional_throughput), then the most summed normalised
  throughput at that minimum (allocation.py's second LP);
- makespan (`min_total_duration_packed`): maximise 1/M subject to
  throughput(m, X) >= r_m / M, M >= 100 s;
- FTF (`finish_time_fairness_packed`): minimise max_m rho_m by bisection on R, each
  step a feasibility LP (allocation.py's);
- FIFO (`fifo_packed`, no LP): FIFO's whole types (allocation.fifo), then each job
  left in the queue, in order, pairs with the allocated single job of its scale factor
  whose pair on that job's type gives the most summed normalised throughput
  (pair rate over the rate alone on that type, summed over the two) above
  `FIFO_PACKING_THRESHOLD`; the first queued job that finds none stops the rest.

Deviations: LAS normalises by the throughput under X_prop and FTF by that under
X_equal (the equal time share), as the unpacked policies here do, where Gavel's packed
code divides each job's rates by their sum over types; the normalisation makes no
difference to which combinations pay, only to how fairness weighs jobs. Called by
policies/gavel/colocation.py when a Gavel policy runs with `packed=true`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import csr_matrix, hstack, vstack

from policies.gavel import allocation as gavel_allocation
from policies.gavel.allocation import FRACTION_EPS, FTF_TOLERANCE, MIN_MAKESPAN_S, Matrix

# Gavel's FIFOPolicy(mode="packing", packing_threshold=1.5): a queued job packs only
# where the pair's summed normalised throughput is above this.
FIFO_PACKING_THRESHOLD = 1.5


@dataclass(frozen=True)
class Combinations:
    """The jobs (rows of `throughputs`, columns the types) and the pairs among them:
    `pairs[p]` the rows (a, b), `pair_rates[p, j]` the steps per second of a and of b
    sharing the GPUs of type j (0 where not measured)."""

    throughputs: Matrix
    scale: Matrix
    pairs: tuple[tuple[int, int], ...]
    pair_rates: Matrix  # shape (pairs, types, 2)

    @property
    def jobs(self) -> int:
        return int(self.throughputs.shape[0])

    @property
    def types(self) -> int:
        return int(self.throughputs.shape[1])

    def subset(self, rows: Sequence[int]) -> Combinations:
        """The combinations of `rows` alone: their singles and the pairs within them
        (a POP part, policies/gavel/pop.py)."""
        index = {int(r): i for i, r in enumerate(rows)}
        kept = [p for p, (a, b) in enumerate(self.pairs) if a in index and b in index]
        return Combinations(
            self.throughputs[list(rows)],
            self.scale[list(rows)],
            tuple((index[self.pairs[p][0]], index[self.pairs[p][1]]) for p in kept),
            self.pair_rates[kept] if kept else np.zeros((0, self.types, 2)),
        )


@dataclass(frozen=True)
class Packed:
    """X over combinations: `singles` a row per job, `pairs` a row per pair of
    `Combinations.pairs`, columns the types."""

    singles: Matrix
    pairs: Matrix


def max_min_fairness(combos: Combinations, weights: Matrix, workers: Matrix) -> Packed:
    """LAS with space sharing (module docstring)."""
    lp = _Lp(combos, workers)
    coeff = combos.scale / (
        weights * gavel_allocation.proportional_throughput(combos.throughputs, workers)
    )
    runnable = (combos.throughputs > 0.0).any(axis=1)
    gain = lp.gain(coeff)
    n = lp.variables
    # First: z <= sum coeff * throughput for every runnable job; maximise z.
    epigraph = csr_matrix(runnable.astype(float)[:, None])
    a_ub = vstack([hstack([lp.base, csr_matrix((lp.base.shape[0], 1))]), hstack([-gain, epigraph])])
    cost = np.zeros(n + 1)
    cost[-1] = -1.0
    first = _solve(
        cost,
        a_ub.tocsr(),
        np.concatenate([lp.bound, np.zeros(combos.jobs)]),
        [*lp.bounds, (0.0, None)],
    )
    floor = first[-1] * (1.0 - 1e-6)
    # Then: the most summed normalised throughput with every job at the floor or above.
    a_ub = vstack([lp.base, -gain[runnable]]).tocsr()
    b_ub = np.concatenate([lp.bound, np.full(int(runnable.sum()), -floor)])
    second = _solve(-np.asarray(gain.sum(axis=0)).ravel(), a_ub, b_ub, lp.bounds)
    return lp.unflatten(second)


def min_makespan(combos: Combinations, workers: Matrix, remaining: Matrix) -> Packed:
    """The makespan with space sharing: maximise 1/M (module docstring)."""
    lp = _Lp(combos, workers)
    n = lp.variables
    cost = np.zeros(n + 1)
    cost[-1] = -1.0
    need = hstack([-lp.gain(np.ones(combos.jobs)), csr_matrix(remaining[:, None])])
    a_ub = vstack([hstack([lp.base, csr_matrix((lp.base.shape[0], 1))]), need]).tocsr()
    b_ub = np.concatenate([lp.bound, np.zeros(combos.jobs)])
    x = _solve(cost, a_ub, b_ub, [*lp.bounds, (0.0, 1.0 / MIN_MAKESPAN_S)])
    return lp.unflatten(x[:n])


def finish_time_fairness(
    combos: Combinations, workers: Matrix, since_start_s: Matrix, remaining: Matrix
) -> Packed:
    """FTF with space sharing: the least R with every rho_m <= R (module docstring)."""
    lp = _Lp(combos, workers)
    equal, isolated = _isolated(combos, workers)
    c = since_start_s + remaining / isolated
    low, high = float(np.max(since_start_s / c)), 1.0
    # R = 1 is X_equal's own (every rho_m = 1), kept where HiGHS finds no better.
    best = _ftf_feasible(lp, combos, since_start_s, c, remaining, 1.0) or Packed(
        equal, np.zeros((len(combos.pairs), combos.types))
    )
    while high - low > FTF_TOLERANCE * high:
        mid = 0.5 * (low + high)
        x = _ftf_feasible(lp, combos, since_start_s, c, remaining, mid)
        if x is None:
            low = mid
        else:
            high, best = mid, x
    return best


def fifo(combos: Combinations, workers: Matrix) -> Packed:
    """FIFO with space sharing (module docstring); rows in arrival order."""
    t = combos.throughputs
    singles = gavel_allocation.fifo(t, combos.scale, workers)
    pairs = np.zeros((len(combos.pairs), combos.types))
    placed = [r for r in range(combos.jobs) if singles[r].any()]
    queue = [r for r in range(combos.jobs) if r not in placed]
    by_rows = {frozenset(p): i for i, p in enumerate(combos.pairs)}
    paired: set[int] = set()
    for row in queue:
        best, best_gain = None, FIFO_PACKING_THRESHOLD
        for other in placed:
            p = by_rows.get(frozenset((row, other)))
            if other in paired or p is None:
                continue
            column = int(np.argmax(singles[other]))
            rates = combos.pair_rates[p, column]
            own = dict(zip(combos.pairs[p], rates, strict=True))
            gain = sum(own[r] / t[r, column] for r in (row, other) if t[r, column] > 0.0)
            if gain > best_gain:
                best, best_gain = (p, other, column), gain
        if best is None:
            break  # FIFO: no job jumps the one that could not be placed
        p, other, column = best
        singles[other, column] = 0.0
        pairs[p, column] = 1.0
        paired |= {row, other}
    return Packed(singles, pairs)


class _Lp:
    """The shared constraints over X flattened by combination (singles, then pairs)
    then type, and each job's throughput as a row of coefficients over it."""

    def __init__(self, combos: Combinations, workers: Matrix) -> None:
        self.combos = combos
        jobs, types, pairs = combos.jobs, combos.types, len(combos.pairs)
        self.variables = (jobs + pairs) * types
        t, pr = combos.throughputs, combos.pair_rates
        # Each combination's (member row, its rate) per type.
        job_rows, job_cols, job_rates = [], [], []
        for m in range(jobs):
            for j in range(types):
                job_rows.append(m)
                job_cols.append(m * types + j)
                job_rates.append(t[m, j])
        for p, (a, b) in enumerate(combos.pairs):
            for j in range(types):
                column = (jobs + p) * types + j
                for member, rate in ((a, pr[p, j, 0]), (b, pr[p, j, 1])):
                    job_rows.append(member)
                    job_cols.append(column)
                    job_rates.append(rate)
        shape = (jobs, self.variables)
        self._rows = np.array(job_rows, dtype=int)
        self._cols = np.array(job_cols, dtype=int)
        self._rates = np.array(job_rates, dtype=float)
        per_job = csr_matrix((np.ones(len(self._rows)), (self._rows, self._cols)), shape=shape)
        combo_scale = np.concatenate([combos.scale, combos.scale[[a for a, _ in combos.pairs]]])
        columns = np.arange(self.variables)
        per_type = csr_matrix(
            (np.repeat(combo_scale, types), (columns % types, columns)),
            shape=(types, self.variables),
        )
        self.base = vstack([per_type, per_job]).tocsr()
        self.bound = np.concatenate([workers.astype(float), np.ones(jobs)])
        runs = np.concatenate(
            [t > 0.0, (pr > 0.0).all(axis=2) if pairs else np.zeros((0, types), dtype=bool)]
        ).ravel()
        self.bounds: list[tuple[float, float | None]] = [(0.0, 1.0 if r else 0.0) for r in runs]

    def gain(self, coeff: Matrix) -> csr_matrix:
        """Row m: coeff[m] times job m's throughput per variable."""
        values = self._rates * coeff[self._rows]
        return csr_matrix(
            (values, (self._rows, self._cols)), shape=(self.combos.jobs, self.variables)
        )

    def unflatten(self, flat: Matrix) -> Packed:
        jobs, types = self.combos.jobs, self.combos.types
        x = np.clip(flat.reshape(-1, types), 0.0, 1.0)
        x[x < FRACTION_EPS] = 0.0
        return Packed(x[:jobs], x[jobs:])


def _isolated(combos: Combinations, workers: Matrix) -> tuple[Matrix, Matrix]:
    """X_equal (allocation.py's blind LAS, weights one) and each job's throughput
    under it."""
    t = combos.throughputs
    equal = gavel_allocation.max_min_fairness(
        t, combos.scale, np.ones(combos.jobs), workers, aware=False
    )
    isolated: Matrix = np.maximum((t * equal).sum(axis=1), 1e-12)
    return equal, isolated


def _ftf_feasible(
    lp: _Lp,
    combos: Combinations,
    since_start_s: Matrix,
    c: Matrix,
    remaining: Matrix,
    ratio: float,
) -> Packed | None:
    """X with every rho_m <= ratio and the most throughput normalised by each job's
    summed rates alone, or None where there is none."""
    slack = ratio * c - since_start_s
    if np.any(slack <= 0.0):
        return None
    speed = lp.gain(np.ones(combos.jobs))
    a_ub = vstack([lp.base, -speed]).tocsr()
    b_ub = np.concatenate([lp.bound, -remaining / slack])
    norm = 1.0 / np.maximum(combos.throughputs.sum(axis=1), 1e-12)
    cost = -np.asarray(lp.gain(norm).sum(axis=0)).ravel()
    result = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=lp.bounds, method="highs")
    if result.status != 0:
        return None
    return lp.unflatten(np.asarray(result.x, dtype=float))


def _solve(
    cost: Matrix, a_ub: csr_matrix, b_ub: Matrix, bounds: Sequence[tuple[float, float | None]]
) -> Matrix:
    result = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
    if result.status != 0:
        raise RuntimeError(f"Gavel's packed allocation LP: HiGHS says {result.message}")
    return np.asarray(result.x, dtype=float)
