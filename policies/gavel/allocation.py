"""Gavel's allocations: the time fraction X[m][j] each job m spends on each GPU type j.

Narayanan et al., "Heterogeneity-Aware Cluster Scheduling Policies for Deep Learning
Workloads", OSDI 2020, §3-§4, as its code states them (stanford-futuredata/gavel,
scheduler/policies/ at c4fa400). T[m][j] is job m's throughput (steps/s) on its scale
factor z_m of GPUs of type j, W_j the GPUs of type j, w_m the priority weight. Every
policy shares the constraints of §3.1:

    0 <= X[m][j] <= 1,    sum_j X[m][j] <= 1,    sum_m z_m X[m][j] <= W_j

and X[m][j] = 0 where job m cannot run on type j (T[m][j] = 0: too few GPUs of it). A
job that no one type holds runs over several (policies/gavel/across.py): each problem
takes its `spans` and holds its X in proportion to its GPUs on each type (equalities).
The effective throughput is throughput(m, X) = sum_j T[m][j] X[m][j] (§3.1, eq. 1).
Each problem is solved with SciPy's HiGHS (`scipy.optimize.linprog`, method "highs"),
where Gavel used cvxpy with ECOS:

- `max_min_fairness` (LAS, §4.1): maximise min_m z_m throughput(m, X) /
  (w_m throughput(m, X_prop)), X_prop Gavel's code's proportional share
  (ProportionalPolicy, policies/max_min_fairness.py at c4fa400: every job's whole
  time over the types in proportion to their GPUs, X_prop[m][j] = W_j / sum W). The
  paper writes X_equal, the equal time share, whose throughput is X_prop's times the
  job's share of time, z*/z_m: normalising by it counts z_m twice and gave the 1-GPU
  jobs of Gavel's trace more time than Gavel's code does (average JCT 13.7 % under
  its simulator's, makespan 7.6 % over; with X_prop +0.8 % and +2.7 %,
  docs/benchmarks.md). Blind, every T is one and X_prop's throughput 1. One LP with
  an epigraph variable.
- `finish_time_fairness` (Themis, §4.1): minimise max_m rho_m, rho_m =
  (t_m + r_m / throughput(m, X)) / (t_m + r_m / throughput(m, X_equal)), t_m the time
  since the job arrived, r_m its remaining steps. rho <= R is linear for a fixed R
  (throughput(m, X) (R c_m - t_m) >= r_m, c_m the denominator), so R is found by
  bisection on feasibility LPs (Gavel's cvxpy takes the convex form directly).
- `min_makespan` (§4.1, "Makespan"): maximise 1/M subject to throughput(m, X) >= r_m/M,
  one LP in (X, 1/M) (Gavel's min_total_duration), with M >= 100 s: Gavel bisects on
  M from that floor (min_T), and without it the LP is unbounded where every job has
  next to no steps left (a live job past its expected run: HiGHS drops coefficients
  under 1e-9, so 1/M meets no constraint at all).
- `fifo` (§4.1, "FIFO"): not an LP: jobs in arrival order each get the type that runs
  them fastest among those with z_m GPUs left (X = 1 there), the first that fits
  nowhere stopping the rest; its blind version is `fifo_agnostic`, below.

Heterogeneity-blind (`aware=False`), as Gavel's agnostic policies: LAS and FTF with
every T[m][j] = 1, the makespan with every type at the job's fastest rate (Gavel's
`v100` column), FIFO as Gavel's code has it (`fifo_agnostic`: not the type drawn at
random that the paper states, but the last listed by name, past its GPUs). A
blind LP's answer is spread over the types a job can run on, evenly where that fits
them and else in proportion to their GPUs (`_spread`): the types are alike to it, and
the vertex HiGHS returns would otherwise put whole jobs on one type by accident.

Deviations: FTF's X_equal is the unweighted equal share, as the paper's equation has
it (Gavel's code's FTF normalises by its IsolatedPolicy instead, within 10 % of Gavel
on its trace as it is); FTF, as Gavel's, does not use the weights. HiGHS returns a
vertex of the optimal face where ECOS returned an interior point, so among equally
fair allocations LAS and FTF take, in a second LP, the one with the most total
normalised throughput (LAS: sum_m z_m throughput(m, X) /
(w_m throughput(m, X_prop)) with every job at least the optimal minimum; FTF: the sum
of each job's throughput over its summed rates at the bisected R), and a blind LP's
answer is spread over the types (`_spread`). Called by policies/gavel/__init__.py each
time the job set changes.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from scipy.optimize import linprog
from scipy.sparse import csr_matrix, hstack, vstack

from policies.gavel import across as gavel_across

Matrix = npt.NDArray[np.float64]

# Bisection on FTF's R stops within this ratio of the optimum.
FTF_TOLERANCE = 1e-3
# A fraction below this is the solver's rounding, not time on a type.
FRACTION_EPS = 1e-7
# The shortest makespan the makespan LP considers: Gavel's min_T, where its bisection
# on the makespan starts (scheduler/policies/min_total_duration.py).
MIN_MAKESPAN_S = 100.0


def max_min_fairness(
    throughputs: Matrix,
    scale: Matrix,
    weights: Matrix,
    workers: Matrix,
    *,
    aware: bool,
    spans: Matrix | None = None,
) -> Matrix:
    """LAS's X (module docstring); rows are jobs, columns GPU types; `spans` the GPUs
    of each type of the jobs run over several (policies/gavel/across.py)."""
    blind = _blind(throughputs)
    if not aware:
        coeff = (scale / weights)[:, None] * blind
        x = _max_min(blind, coeff, scale, workers, spans)
        return _spread(x, blind, scale, workers, spans)
    proportional = proportional_throughput(throughputs, workers)
    coeff = throughputs * (scale / (weights * proportional))[:, None]
    return _max_min(throughputs, coeff, scale, workers, spans)


def proportional_throughput(throughputs: Matrix, workers: Matrix) -> Matrix:
    """Each job's throughput under Gavel's proportional share, what aware LAS
    normalises by here and in its packed form (policies/gavel/packing.py)."""
    result: Matrix = np.maximum(_effective(throughputs, _proportional(throughputs, workers)), 1e-12)
    return result


def _proportional(throughputs: Matrix, workers: Matrix) -> Matrix:
    """Gavel's ProportionalPolicy: every job's whole time over the types in proportion
    to their GPUs (X[m][j] = W_j / sum W, whatever the jobs' number and sizes)."""
    share = workers / max(float(workers.sum()), 1e-12)
    result: Matrix = np.broadcast_to(share, throughputs.shape).astype(float)
    return result


def finish_time_fairness(
    throughputs: Matrix,
    scale: Matrix,
    weights: Matrix,
    workers: Matrix,
    since_start_s: Matrix,
    remaining: Matrix,
    *,
    aware: bool,
    spans: Matrix | None = None,
) -> Matrix:
    """FTF's X (module docstring)."""
    rates = throughputs if aware else _blind(throughputs)
    blind = _blind(throughputs)
    equal = _max_min(blind, scale[:, None] * blind, scale, workers, spans)
    equal = _spread(equal, blind, scale, workers, spans)
    isolated = np.maximum(_effective(rates, equal), 1e-12)
    c = since_start_s + remaining / isolated
    # R = 1 is feasible (X_equal itself); below max t/c it is not.
    low, high = float(np.max(since_start_s / c)), 1.0
    problem = (rates, throughputs, scale, workers, since_start_s, c, remaining)
    at_one = _ftf_feasible(*problem, 1.0, spans)
    best = equal if at_one is None else at_one
    while high - low > FTF_TOLERANCE * high:
        mid = 0.5 * (low + high)
        x = _ftf_feasible(*problem, mid, spans)
        if x is None:
            low = mid
        else:
            high, best = mid, x
    return best if aware else _spread(best, blind, scale, workers, spans)


def min_makespan(
    throughputs: Matrix,
    scale: Matrix,
    workers: Matrix,
    remaining: Matrix,
    *,
    aware: bool,
    spans: Matrix | None = None,
) -> Matrix:
    """The makespan's X (module docstring)."""
    rates = throughputs
    if not aware:
        fastest = throughputs.max(axis=1, keepdims=True)
        rates = np.where(throughputs > 0.0, fastest, 0.0)
    jobs, types = rates.shape
    n = jobs * types
    # Variables: X flattened by rows, then 1/M; maximise 1/M.
    cost = np.zeros(n + 1)
    cost[-1] = -1.0
    base, bound = _base_constraints(scale, workers, jobs, types)
    # r_m / M - sum_j T[m][j] X[m][j] <= 0
    rows = np.repeat(np.arange(jobs), types)
    speed = csr_matrix((-rates.ravel(), (rows, np.arange(n))), shape=(jobs, n))
    need = hstack([speed, csr_matrix(remaining[:, None])])
    a_ub = vstack([hstack([base, csr_matrix((base.shape[0], 1))]), need]).tocsr()
    b_ub = np.concatenate([bound, np.zeros(jobs)])
    bounds = [(0.0, 1.0 if t > 0.0 else 0.0) for t in rates.ravel()]
    bounds.append((0.0, 1.0 / MIN_MAKESPAN_S))
    x = _fractions(_solve(cost, a_ub, b_ub, bounds, spans, 1)[:n], jobs, types)
    return x if aware else _spread(x, rates, scale, workers, spans)


def fifo(
    throughputs: Matrix, scale: Matrix, workers: Matrix, spans: Matrix | None = None
) -> Matrix:
    """Aware FIFO's X for jobs in arrival order (rows): each the type that runs it
    fastest among those with z_m GPUs left (X = 1 there), the first that fits nowhere
    stopping the rest (Gavel's FIFOPolicy in mode 'perf', which recomputes from
    nothing each time). A job over several types (`spans`) takes its parts where they
    all fit (X = d_j / z_m on each)."""
    jobs, types = throughputs.shape
    x = np.zeros((jobs, types))
    left = workers.astype(float).copy()
    for row in range(jobs):
        if spans is not None and spans[row].any():
            if not gavel_across.fits(spans[row], left):
                break
            x[row] = spans[row] / scale[row]
            left -= spans[row]
            continue
        fits = [j for j in range(types) if left[j] >= scale[row] and throughputs[row, j] > 0]
        if not fits:
            break
        column = max(fits, key=lambda j: (throughputs[row, j], -j))
        x[row, column] = 1.0
        left[column] -= scale[row]
    return x


def fifo_agnostic(
    throughputs: Matrix,
    scale: Matrix,
    workers: Matrix,
    previous: Sequence[tuple[int | None, int]],
    rng: random.Random,
) -> Matrix:
    """Blind FIFO's X as Gavel's code computes it (FIFOPolicy in mode 'base',
    scheduler/policies/fifo.py at c4fa400), which is not the paper's "a random type
    per job". Rows are the active jobs in arrival order; `previous` is the last
    allocation's jobs in arrival order, each (its row, or None where it finished, and
    its type); the types are in the order of their names (Gavel's k80, p100, v100).

    1. A job keeps its type to its end (the allocation persists between calls).
    2. Each finished job, in arrival order, offers its type to the head of the queue
       (the jobs with no type, in arrival order), which takes it if its GPUs fit in
       what the jobs counted so far left of that type and it can run there.
    3. Then, while jobs wait and some type has GPUs left: the head draws a random
       index among the types with room for it (`rng.randrange`, one stream over the
       whole run), stopping the rest if there is none, but takes the *last* type of
       the list of types with any GPU left, whether it has room or not: Gavel's mode
       'base' sets the index and never the type, so the type is what the loop that
       collected the candidates left in its variable. The GPUs are counted off that
       type, and the list loses the type at the drawn index only when the type taken
       reaches exactly 0 free.

    So the type last by name (the V100s on Gavel's clusters) is given to job after
    job, past its GPUs, and Gavel's mechanism shares it over rounds among them (it
    runs no job where X is 0) while the other types wait for a type to drop out of
    the list: what makes Gavel's blind FIFO 5x slower than its aware one on its own
    trace (docs/benchmarks.md).
    """
    jobs, types = throughputs.shape
    x = np.zeros((jobs, types))
    left = workers.astype(float).copy()
    kept = {row for row, _ in previous if row is not None}
    queue = [row for row in range(jobs) if row not in kept]
    for row, column in previous:
        if row is not None:
            x[row, column] = 1.0
            left[column] -= scale[row]
            continue
        if queue:
            head = queue[0]
            if scale[head] <= left[column] and throughputs[head, column] > 0.0:
                queue.pop(0)
                x[head, column] = 1.0
                left[column] -= scale[head]
    listed = [j for j in range(types) if left[j] > 0]
    while queue and listed:
        row = queue.pop(0)
        candidates = [i for i, j in enumerate(listed) if left[j] >= scale[row]]
        if not candidates:
            break
        drawn = rng.randrange(len(candidates))
        column = listed[-1]
        if throughputs[row, column] > 0.0:
            x[row, column] = 1.0
            left[column] -= scale[row]
            if left[column] == 0:
                listed.pop(candidates[drawn])
    return x


def _spread(
    x: Matrix, rates: Matrix, scale: Matrix, workers: Matrix, spans: Matrix | None = None
) -> Matrix:
    """A blind allocation as a blind scheduler means it: each job's time over the
    types it can run on, evenly where that over-fills no type, else in proportion to
    their GPUs (the types are alike to it, and ECOS's interior point splits alike
    columns so); `x` itself where both over-fill a type (jobs that fit only some). A
    job over several types (`spans`) keeps its row: its parts run together."""
    total = x.sum(axis=1, keepdims=True)
    spanned = np.zeros(len(x), dtype=bool) if spans is None else spans.any(axis=1)
    for weight in (np.ones_like(workers), workers):
        can = (rates > 0.0) * weight[None, :]
        spread: Matrix = total * can / np.maximum(can.sum(axis=1, keepdims=True), 1e-12)
        spread[spanned] = x[spanned]
        if np.all((scale[:, None] * spread).sum(axis=0) <= workers * (1.0 + 1e-9)):
            return spread
    return x


def _blind(throughputs: Matrix) -> Matrix:
    return np.where(throughputs > 0.0, 1.0, 0.0)


def _effective(rates: Matrix, x: Matrix) -> Matrix:
    result: Matrix = (rates * x).sum(axis=1)
    return result


def _base_constraints(
    scale: Matrix, workers: Matrix, jobs: int, types: int
) -> tuple[csr_matrix, Matrix]:
    """sum_m z_m X[m][j] <= W_j and sum_j X[m][j] <= 1, over X flattened by rows."""
    n = jobs * types
    columns = np.arange(n)
    per_type = csr_matrix((np.repeat(scale, types), (columns % types, columns)), shape=(types, n))
    per_job = csr_matrix((np.ones(n), (columns // types, columns)), shape=(jobs, n))
    bound = np.concatenate([workers.astype(float), np.ones(jobs)])
    return vstack([per_type, per_job]).tocsr(), bound


def _max_min(
    rates: Matrix, coeff: Matrix, scale: Matrix, workers: Matrix, spans: Matrix | None = None
) -> Matrix:
    """maximise min_m sum_j coeff[m][j] X[m][j], then the sum at that minimum."""
    jobs, types = coeff.shape
    n = jobs * types
    base, bound = _base_constraints(scale, workers, jobs, types)
    rows = np.repeat(np.arange(jobs), types)
    gain = csr_matrix((-coeff.ravel(), (rows, np.arange(n))), shape=(jobs, n))
    bounds = [(0.0, 1.0 if t > 0.0 else 0.0) for t in rates.ravel()]
    # First: z - sum_j coeff X <= 0, maximise z; jobs that can run nowhere are left out.
    runnable = (rates > 0.0).any(axis=1)
    epigraph = csr_matrix(runnable.astype(float)[:, None])
    a_ub = vstack([hstack([base, csr_matrix((base.shape[0], 1))]), hstack([gain, epigraph])])
    cost = np.zeros(n + 1)
    cost[-1] = -1.0
    first = _solve(
        cost,
        a_ub.tocsr(),
        np.concatenate([bound, np.zeros(jobs)]),
        [*bounds, (0, None)],
        spans,
        1,
    )
    floor = first[-1] * (1.0 - 1e-6)
    # Then: the most total at every job's share >= the floor.
    a_ub = vstack([base, gain[runnable]]).tocsr()
    b_ub = np.concatenate([bound, np.full(int(runnable.sum()), -floor)])
    second = _solve(-coeff.ravel(), a_ub, b_ub, bounds, spans)
    return _fractions(second, jobs, types)


def _ftf_feasible(
    rates: Matrix,
    throughputs: Matrix,
    scale: Matrix,
    workers: Matrix,
    since_start_s: Matrix,
    c: Matrix,
    remaining: Matrix,
    ratio: float,
    spans: Matrix | None = None,
) -> Matrix | None:
    """An X with every rho_m <= ratio, the most normalised throughput among them; None
    where there is none."""
    slack = ratio * c - since_start_s
    if np.any(slack <= 0.0):
        return None
    jobs, types = rates.shape
    n = jobs * types
    base, bound = _base_constraints(scale, workers, jobs, types)
    rows = np.repeat(np.arange(jobs), types)
    speed = csr_matrix((-rates.ravel(), (rows, np.arange(n))), shape=(jobs, n))
    a_ub = vstack([base, speed]).tocsr()
    b_ub = np.concatenate([bound, -remaining / slack])
    bounds = [(0.0, 1.0 if t > 0.0 else 0.0) for t in throughputs.ravel()]
    norm = rates / np.maximum(rates.sum(axis=1, keepdims=True), 1e-12)
    a_eq, b_eq = (None, None) if spans is None else gavel_across.ties(spans)
    result = linprog(
        -norm.ravel(), A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq, bounds=bounds, method="highs"
    )
    if result.status != 0:
        return None
    return _fractions(np.asarray(result.x, dtype=float), jobs, types)


def _solve(
    cost: Matrix,
    a_ub: csr_matrix,
    b_ub: Matrix,
    bounds: Sequence[tuple[float, float | None]],
    spans: Matrix | None = None,
    extra: int = 0,
) -> Matrix:
    """HiGHS on the LP, with the spanned jobs' ties over X and `extra` variables after."""
    a_eq, b_eq = (None, None) if spans is None else gavel_across.ties(spans, extra)
    result = linprog(
        cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq, bounds=bounds, method="highs"
    )
    if result.status != 0:
        raise RuntimeError(f"Gavel's allocation LP: HiGHS says {result.message}")
    return np.asarray(result.x, dtype=float)


def _fractions(flat: Matrix, jobs: int, types: int) -> Matrix:
    x = np.clip(flat.reshape(jobs, types), 0.0, 1.0)
    x[x < FRACTION_EPS] = 0.0
    return x
