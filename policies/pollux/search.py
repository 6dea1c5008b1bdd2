"""PolluxSched's cluster-wide search: a genetic algorithm over allocation matrices.

Called by `policies.pollux` once a round. An individual is a jobs x nodes matrix of GPU
counts (Qiao et al., OSDI 2021, §4.2, Fig. 4); the whole population is one
(individuals, jobs, nodes) float32 array holding small integers, so that sums over
nodes or jobs are matrix products and a generation costs a few dozen array
operations whatever the population's size.

Each generation: binary tournaments pick two parents per child; two-point crossover
takes a run of job rows from the second parent; mutation resets rows to the current
allocation, zeroes rows, sets random cells to random counts (within what the job may
hold on the node) and moves a job's row to other nodes; repair then makes every child
feasible, in this order: no cell above what its job may hold on its node
(`Problem.cell_cap`, the GPU-choice filter's per-job node mask: gpuflow's, the paper
has none), no job above its maximum GPUs, at most one distributed job on a node
(interference avoidance; the job earlier in the priority order keeps its GPUs there),
no node over-allocated (jobs earlier in the priority order keep theirs), no quota
bound passed (`Problem.quota`, gpuflow's: jobs earlier in the priority order keep
theirs), and no job below its minimum (it gets nothing). The best of parents and
children survive (elitism), so the best fitness never drops below that of the seeds,
which include the current allocation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

States = npt.NDArray[np.float32]
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# A job with zero speedup counts as this much in the power mean, so that p <= 0 stays
# finite and starving one job is very costly but comparable (the OSDI'21 artifact's
# simulator/pollux.py adds the same 1e-3 to every speedup).
SPEEDUP_EPS = 1e-3

# Mutation: the chance that a child's row is reset to the current allocation or
# zeroed, and how many random cells and row moves each child gets. gpuflow's choices
# (the artifact resets rows with probability 0.1 and grows cells into free capacity),
# checked on the hand-built and 100-job cases of tests/policies/test_pollux.py and
# bench/pollux.py.
RESET_ROW_P = 0.05
ZERO_ROW_P = 0.03
CELLS_PER_CHILD = 2
MOVES_PER_CHILD = 1


@dataclass(frozen=True)
class QuotaBounds:
    """C linear upper bounds on what groups of jobs hold on groups of nodes after the
    round (`policies.pollux.limits` builds them from the round's quota figures).

    Bound c counts, for each job j with `members[c, j]`, its GPUs on the nodes with
    `nodes[c, n]`: all of them, or (`gains[c]`) only those beyond what it holds there
    now (`base`); their sum may not pass `bound[c]`. Repair cuts the jobs latest in
    the priority order first."""

    members: States  # (C, jobs) 1 where job j counts in bound c
    nodes: States  # (C, nodes) 1 on the nodes bound c counts
    bound: States  # (C,)
    gains: npt.NDArray[np.bool_]  # (C,) count gains beyond `base` (else every GPU)

    @property
    def size(self) -> int:
        return int(self.bound.shape[0])

    def usage(self, states: States, base: States) -> States:
        """(population, C) what each state counts against each bound."""
        counted = np.matmul(states, self.nodes.T)  # (population, jobs, C)
        counted -= np.where(self.gains, base @ self.nodes.T, 0.0).astype(np.float32)
        np.maximum(counted, 0.0, out=counted)
        used: States = (counted.transpose(0, 2, 1) * self.members).sum(axis=2)
        return used


@dataclass(frozen=True)
class Problem:
    """One round's search: jobs (rows, in priority order) over nodes (columns).

    `speedup` is flat: job j on n nodes and k GPUs is `speedup[j * ndim * kdim +
    n * kdim + k]`. `restart_factor[j]` multiplies job j's speedup when its row differs
    from `base` (the current allocation).

    On a cluster searched by GPU type (`type_onehot` given: `policies.pollux.types`),
    each job has T + 1 such tables, `speedup[((j * (T + 1) + t) * ndim + n) * kdim +
    k]`: table t for a row whose GPUs are all of type t, table T for a row spanning
    types, scaled by the least `type_factor[j, t]` of the types it holds.
    """

    capacity: States  # (nodes,) GPUs per node, 0 when down
    base: States  # (jobs, nodes)
    lo: States  # (jobs,) fewest GPUs when running
    hi: States  # (jobs,) most GPUs
    speedup: FloatArray
    ndim: int
    kdim: int
    restart_factor: FloatArray  # (jobs,)
    p: float
    avoid_interference: bool
    type_onehot: States | None = None  # (nodes, types); None: one type, or blind to them
    type_factor: FloatArray | None = None  # (jobs, types)
    cell_cap: States | None = None  # (jobs, nodes) most GPUs a job may hold on a node
    quota: QuotaBounds | None = None  # upper bounds on groups of jobs' GPUs (quotas)

    @property
    def num_jobs(self) -> int:
        return int(self.base.shape[0])

    @property
    def num_nodes(self) -> int:
        return int(self.base.shape[1])


def fitness(problem: Problem, states: States) -> FloatArray:
    """FITNESS_p of each state (§4.2): the power mean of the jobs' speedups."""
    return power_mean(job_speedups(problem, states), problem.p)


def power_mean(speedups: FloatArray, p: float) -> FloatArray:
    """(Σ_j (s_j + eps)^p / J)^(1/p) per row; the geometric mean when p = 0."""
    jobs = speedups.shape[1]
    if p == 0.0:
        result: FloatArray = np.exp(np.log(speedups + SPEEDUP_EPS).sum(axis=1) / jobs)
        return result
    powered: FloatArray = (((speedups + SPEEDUP_EPS) ** p).sum(axis=1) / jobs) ** (1.0 / p)
    return powered


def job_speedups(problem: Problem, states: States, gpus: States | None = None) -> FloatArray:
    """(population, jobs) speedups, restart penalty applied; `gpus` (the row sums) if
    the caller has them."""
    ones = np.ones(problem.num_nodes, dtype=np.float32)
    if gpus is None:
        gpus = states @ ones
    nodes = np.minimum(states, 1.0) @ ones
    flat = (nodes * problem.kdim + gpus).astype(np.int64)
    if problem.type_onehot is None:
        flat += np.arange(problem.num_jobs, dtype=np.int64) * (problem.ndim * problem.kdim)
        speedups = problem.speedup[flat]
    else:
        speedups = _typed_speedups(problem, states, flat)
    moved = states - problem.base
    changed = (moved * moved) @ ones > 0.5
    penalised: FloatArray = np.where(changed, speedups * problem.restart_factor, speedups)
    return penalised


def _typed_speedups(problem: Problem, states: States, flat: npt.NDArray[np.int64]) -> FloatArray:
    """(population, jobs) speedups read from each row's own type's table, or from the
    spanning table times the least factor of the types a row holds."""
    assert problem.type_onehot is not None and problem.type_factor is not None
    types = problem.type_onehot.shape[1]
    table = problem.ndim * problem.kdim
    flat = flat + np.arange(problem.num_jobs, dtype=np.int64) * ((types + 1) * table)
    held = np.matmul(np.minimum(states, 1.0), problem.type_onehot) > 0.5  # (pop, jobs, T)
    per_type = np.stack([problem.speedup[flat + t * table] for t in range(types)], axis=-1)
    alone = np.where(held, per_type, 0.0).sum(axis=-1)
    slowest = np.where(held, problem.type_factor[None], np.inf).min(axis=-1)
    spanning = problem.speedup[flat + types * table] * np.where(np.isfinite(slowest), slowest, 0.0)
    result: FloatArray = np.where(held.sum(axis=-1) > 1, spanning, alone)
    return result


def repair(problem: Problem, states: States) -> tuple[States, States]:
    """Make every state feasible, in place (see the module docstring for the order);
    returns the states and their GPU counts per job."""
    ones = np.ones(problem.num_nodes, dtype=np.float32)
    if problem.cell_cap is not None:
        np.minimum(states, problem.cell_cap, out=states)
    over = (states @ ones > problem.hi).nonzero()
    if over[0].size:
        states[over] = _capped_diff(states[over], problem.hi[over[1]])
    if problem.avoid_interference:
        present = np.minimum(states, 1.0)
        distributed = (present @ ones > 1.5).astype(np.float32)
        sharing = np.matmul(distributed[:, None, :], present)
        who, _, node = (sharing > 1.5).nonzero()
        if who.size:
            mask = (states[who, :, node] > 0) & (distributed[who] > 0)
            pick, job = (mask & (mask.cumsum(axis=1) > 1)).nonzero()
            states[who[pick], job, node[pick]] = 0.0
    used = np.matmul(np.ones(problem.num_jobs, dtype=np.float32), states)
    who, node = (used > problem.capacity).nonzero()
    if who.size:
        states[who, :, node] = _capped_diff(states[who, :, node], problem.capacity[node])
    if problem.quota is not None:
        _cut_to_bounds(problem.quota, states, problem.base)
    gpus = states @ ones
    short = (gpus < problem.lo).nonzero()
    if short[0].size:
        states[short] = 0.0
        gpus[short] = 0.0
    return states, gpus


def _cut_to_bounds(quota: QuotaBounds, states: States, base: States) -> None:
    """Cut, in place, each state's jobs so that no bound of `quota` is passed: along
    the priority order each job keeps what the bound has left after the jobs before
    it, on the bound's nodes (its earlier cells first). One check of every bound over
    the whole population, then a loop over the bounds some state passes."""
    over = quota.usage(states, base) > quota.bound + 0.5  # (population, C)
    for c in np.flatnonzero(over.any(axis=0)).tolist():
        who = np.flatnonzero(over[:, c])
        jobs = np.flatnonzero(quota.members[c])
        cols = np.flatnonzero(quota.nodes[c])
        every = cols.size == states.shape[2]  # one pool of every node: no column pick
        if every:
            cells = states[who[:, None], jobs[None, :]]
        else:
            cells = states[who[:, None, None], jobs[None, :, None], cols[None, None, :]]
        pooled = cells.sum(axis=2)  # (states over, members)
        held = base[jobs][:, cols].sum(axis=1)
        counted = np.maximum(pooled - held, 0.0) if quota.gains[c] else pooled
        before = counted.cumsum(axis=1) - counted
        allowed = np.clip(quota.bound[c] - before, 0.0, counted)
        pick, row = (allowed < counted - 0.5).nonzero()
        keep = allowed[pick, row] + (held[row] if quota.gains[c] else 0.0)
        cut = _capped_diff(cells[pick, row], keep)
        if every:
            states[who[pick], jobs[row]] = cut
        else:
            states[who[pick][:, None], jobs[row][:, None], cols[None, :]] = cut


def _capped_diff(rows: States, cap: States) -> States:
    """Each row cut so that its running sum stays within its cap (earlier cells kept)."""
    held: States = np.minimum(rows.cumsum(axis=1), cap[:, None])
    held[:, 1:] -= held[:, :-1].copy()
    return held


@dataclass(frozen=True)
class SearchResult:
    best: States  # (jobs, nodes)
    best_fitness: float
    population: States  # (population, jobs, nodes), best first
    generations: int  # run before the search stopped


def search(
    problem: Problem,
    seeds: States,
    *,
    population_size: int,
    generations: int,
    patience: int,
    rng: np.random.Generator,
) -> SearchResult:
    """Run the genetic algorithm from `seeds` (each repaired first), for `generations`
    or until the best fitness has not improved for `patience` generations (0: never)."""
    seeds, _ = repair(problem, np.minimum(seeds, problem.capacity).astype(np.float32))
    fill = population_size - len(seeds)
    if fill > 0:
        copies = seeds[rng.integers(len(seeds), size=fill)]
        grown, _ = repair(problem, mutate(problem, copies, rng.random((fill, _draws(problem)))))
        seeds = np.concatenate([seeds, grown])
    scores = fitness(problem, seeds)
    order = np.argsort(-scores, kind="stable")[:population_size]
    population, scores = seeds[order], scores[order]
    size = len(population)
    best, stale, done = scores.max(), 0, 0
    while done < generations and problem.num_jobs > 0 and (patience <= 0 or stale < patience):
        draws = rng.random((size, 4 + _draws(problem)))
        children = crossover(population, scores, draws[:, :4], rng.random(2))
        children, gpus = repair(problem, mutate(problem, children, draws[:, 4:]))
        child_scores = power_mean(job_speedups(problem, children, gpus), problem.p)
        merged = np.concatenate([scores, child_scores])
        keep = np.argsort(-merged, kind="stable")[:size]
        from_parent = keep < size
        survivors = np.empty_like(population)
        survivors[from_parent] = population[keep[from_parent]]
        survivors[~from_parent] = children[keep[~from_parent] - size]
        population, scores = survivors, merged[keep]
        done += 1
        stale = stale + 1 if scores[0] <= best * (1.0 + 1e-9) else 0
        best = max(best, scores[0])
    return SearchResult(population[0], float(scores[0]), population, done)


def _draws(problem: Problem) -> int:
    """Uniform draws per child that `mutate` uses."""
    return problem.num_jobs + 3 * CELLS_PER_CHILD + 2 * MOVES_PER_CHILD


def crossover(
    population: States, scores: FloatArray, draws: FloatArray, points: FloatArray
) -> States:
    """One child per individual: parents by binary tournament (4 draws each); the
    child is the first parent with a run of job rows, shared by the generation and
    set by the two `points`, from the second."""
    size, jobs, _ = population.shape
    picks = (draws * size).astype(np.int64)
    first = np.where(scores[picks[:, 0]] >= scores[picks[:, 1]], picks[:, 0], picks[:, 1])
    second = np.where(scores[picks[:, 2]] >= scores[picks[:, 3]], picks[:, 2], picks[:, 3])
    start, stop = np.sort((points * (jobs + 1)).astype(np.int64))
    children: States = population[first]
    children[:, start:stop] = population[second, start:stop]
    return children


def mutate(problem: Problem, states: States, draws: FloatArray) -> States:
    """Reset or zero random rows, set random cells, move random rows to other nodes,
    from `_draws(problem)` uniform draws per state."""
    size, jobs, nodes = states.shape
    rows = draws[:, :jobs]
    reset = (rows < RESET_ROW_P).nonzero()
    states[reset] = problem.base[reset[1]]
    states[((rows >= RESET_ROW_P) & (rows < RESET_ROW_P + ZERO_ROW_P)).nonzero()] = 0.0
    cells = draws[:, jobs : jobs + 3 * CELLS_PER_CHILD].reshape(-1, 3)
    who = np.repeat(np.arange(size), CELLS_PER_CHILD)
    job = (cells[:, 0] * jobs).astype(np.int64)
    node = (cells[:, 1] * nodes).astype(np.int64)
    room = problem.capacity[node] if problem.cell_cap is None else problem.cell_cap[job, node]
    top = np.minimum(room, problem.hi[job])
    states[who, job, node] = np.floor(cells[:, 2] * (top + 1))
    if nodes > 1:
        moves = draws[:, jobs + 3 * CELLS_PER_CHILD :].reshape(-1, 2)
        who = np.repeat(np.arange(size), MOVES_PER_CHILD)
        job = (moves[:, 0] * jobs).astype(np.int64)
        shift = 1 + (moves[:, 1] * (nodes - 1)).astype(np.int64)
        columns = (np.arange(nodes)[None, :] - shift[:, None]) % nodes
        states[who, job] = states[who[:, None], job[:, None], columns]
        if problem.cell_cap is not None:  # a row moved onto nodes the job may not use
            states[who, job] = np.minimum(states[who, job], problem.cell_cap[job])
    return states


def greedy_seed(problem: Problem) -> States:
    """The current allocation, plus each idle job (priority order) started on its
    minimum on the fullest node that holds it (on the emptiest nodes if none does), then
    idle GPUs given to the jobs already on their node up to their maximum."""
    state = problem.base.copy()
    free = problem.capacity.astype(np.int64) - state.sum(axis=0)
    for row in range(problem.num_jobs):
        if state[row].any():
            continue
        need = int(problem.lo[row])
        open_ = free if problem.cell_cap is None else np.minimum(free, problem.cell_cap[row])
        fits = np.flatnonzero(open_ >= need)
        if fits.size:
            node = int(fits[np.argmin(open_[fits])])
            state[row, node] = need
            free[node] -= need
        elif open_.sum() >= need:
            # A gang larger than any node's free GPUs: the emptiest nodes, in turn.
            for node in np.argsort(-open_, kind="stable").tolist():
                take = min(need, int(open_[node]))
                state[row, node] = take
                free[node] -= take
                need -= take
                if need == 0:
                    break
    for row in range(problem.num_jobs):
        room = int(problem.hi[row]) - int(state[row].sum())
        nodes = np.flatnonzero(state[row])
        if room <= 0 or nodes.size != 1:
            continue
        node = int(nodes[0])
        extra = min(room, int(free[node]))
        if problem.cell_cap is not None:
            extra = min(extra, int(problem.cell_cap[row, node] - state[row, node]))
        state[row, node] += extra
        free[node] -= extra
    return state
