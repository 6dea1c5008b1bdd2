"""PolluxSched's search split into sub-clusters at scale, as POP partitions a problem.

Called by `policies.pollux` once a round. Narayanan, Kazhamiaka, Abuzaid, Kraft,
Agrawal, Kandula, Boyd and Zaharia, "Solving Large-Scale Granular Resource Allocation
Problems Efficiently with POP", SOSP 2021: a granular allocation problem (many jobs,
each asking a small part of the cluster) is split into k sub-problems, each with 1/k of
the resources and of the clients, solved independently; the union of their answers is
the allocation (§3). Here the sub-problems are the genetic search of
`policies.pollux.search` on a block of nodes with the jobs assigned to it.

The search's cost per generation is proportional to its population's size, jobs x
nodes, so k blocks cut a round's search k-fold (k sub-problems of (J/k) x (N/k)). k is
the smallest power of two that brings a block's cells within `CELLS_PER_PART`
(k = 1, no split, below it: the Pollux paper's 160-job workloads on 16 nodes are
searched whole), and no larger than leaves every block room for the largest job's
minimum. Powers of two nest, so that a block of one round lies inside a block of the
next when k changes by a factor of two.

Deviations from POP:
- The nodes are split into contiguous blocks of node indices (POP draws them at
  random): the consolidated placements of multi-node jobs stay inside one block.
- Jobs are not drawn at random either: a running job goes to the block that holds most
  of its GPUs, so that keeping its allocation stays possible, and the others, in the
  priority order, each to the block with the most GPUs left free (neither held by its
  running jobs nor asked as a minimum by its other jobs) among those that hold their
  minimum (ties: fewer jobs, then the lower block). Balancing the jobs' count instead
  (POP's 1/k of the clients) left ~7 % of 1,000 jobs with nothing on 256x8, where
  consolidated placement fills the first blocks with running jobs: a block's search
  seldom shrinks its running jobs far enough to start all its newcomers.
- A running job whose GPUs are not all in its block must move: its current allocation
  is not offered to its block's search as a row to keep.
- Quota bounds (`policies.pollux.limits`) span blocks: each block, searched in turn,
  gets what the others leave of them (`part_bounds`), the blocks not searched yet
  counted as they hold now.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from policies.pollux.search import Problem, States

IntArray = npt.NDArray[np.int64]

# A sub-problem's jobs x nodes cells above which the search is split further: 4,096
# cells keep one generation of a 100-individual population at ~0.4 M cells (a few
# milliseconds of array operations); 1,000 jobs on 256 nodes (256 K cells) make 8 blocks.
# The Pollux paper's workloads (at most 160 jobs on 16 nodes, 2,560 cells) stay whole.
CELLS_PER_PART = 4096


@dataclass(frozen=True)
class Part:
    """One sub-problem: rows (jobs, ascending: the priority order kept) and a block of
    nodes (columns) of the whole problem."""

    rows: IntArray
    nodes: IntArray


@dataclass(frozen=True)
class PartPopulation:
    """A block's final population, carried to the next round in `PolluxState`."""

    job_ids: tuple[str, ...]  # rows of `population`, in order
    nodes: tuple[int, ...]  # columns of `population`: the block's nodes
    population: States  # (population, jobs, nodes), best first


def part_count(problem: Problem, cells_per_part: int = CELLS_PER_PART) -> int:
    """The number of blocks k: the smallest power of two with (J/k)·(N/k) within
    `cells_per_part`, halved while some block could not hold the largest minimum."""
    cells = problem.num_jobs * problem.num_nodes
    k = 1
    while cells > cells_per_part * k * k and 2 * k <= problem.num_nodes:
        k *= 2
    biggest = float(problem.lo.max()) if problem.num_jobs else 0.0
    while k > 1 and min(float(b.sum()) for b in _blocks(problem.capacity, k)) < biggest:
        k //= 2
    return k


def split(problem: Problem, k: int) -> list[Part]:
    """The jobs and nodes of each of k blocks (see the module docstring)."""
    blocks = [np.arange(b.start, b.stop) for b in _block_ranges(problem.num_nodes, k)]
    block_of_node = np.zeros(problem.num_nodes, dtype=np.int64)
    room = np.zeros(k)
    for i, nodes in enumerate(blocks):
        block_of_node[nodes] = i
        room[i] = problem.capacity[nodes].sum()
    rows: list[list[int]] = [[] for _ in range(k)]
    free = room.copy()  # GPUs not held by the block's running jobs nor asked by its others
    held = problem.base.sum(axis=1)
    for row in np.flatnonzero(held > 0).tolist():
        per_block = np.bincount(block_of_node, weights=problem.base[row], minlength=k)
        home = int(np.argmax(per_block))
        if room[home] < problem.lo[row]:
            home = int(np.argmax(room))
        rows[home].append(row)
        whole = per_block[home] >= held[row]  # else it moves: its minimum is what it asks
        free[home] -= float(held[row]) if whole else float(problem.lo[row])
    for row in np.flatnonzero(held == 0).tolist():
        fits = [i for i in range(k) if room[i] >= problem.lo[row]]
        home = min(fits, key=lambda i: (-free[i], len(rows[i]), i))
        rows[home].append(row)
        free[home] -= problem.lo[row]
    return [
        Part(np.array(sorted(r), dtype=np.int64), nodes)
        for r, nodes in zip(rows, blocks, strict=True)
    ]


def sub_problem(problem: Problem, part: Part) -> Problem:
    """The search of one block: its jobs' rows over its nodes. A job whose current GPUs
    lie partly outside the block has no row to keep (its base is empty: any allocation
    here is a change, and the restart penalty applies)."""
    rows, nodes = part.rows, part.nodes
    base = problem.base[rows][:, nodes]
    whole = base.sum(axis=1) >= problem.base[rows].sum(axis=1)
    base[~whole] = 0.0
    per_job = problem.ndim * problem.kdim
    onehot, factor = problem.type_onehot, problem.type_factor
    if onehot is not None and factor is not None:
        per_job *= onehot.shape[1] + 1  # a table per GPU type and one spanning them
        onehot, factor = onehot[nodes], factor[rows]
    speedup = problem.speedup.reshape(problem.num_jobs, per_job)[rows].ravel()
    cell_cap = problem.cell_cap
    if cell_cap is not None:
        cell_cap = np.ascontiguousarray(cell_cap[rows][:, nodes])
    quota = problem.quota
    if quota is not None:
        quota = replace(
            quota,
            members=np.ascontiguousarray(quota.members[:, rows]),
            nodes=np.ascontiguousarray(quota.nodes[:, nodes]),
        )
    return replace(
        problem,
        capacity=problem.capacity[nodes],
        base=np.ascontiguousarray(base),
        lo=problem.lo[rows],
        hi=problem.hi[rows],
        speedup=speedup,
        restart_factor=problem.restart_factor[rows],
        type_onehot=onehot,
        type_factor=factor,
        cell_cap=cell_cap,
        quota=quota,
    )


def part_bounds(problem: Problem, sub: Problem, part: Part, whole: States) -> Problem:
    """`sub` (the block `part` of `problem`) with its quota bounds lowered by what the
    other blocks' jobs count against them in `whole` (the blocks searched so far at
    their best, the others as they hold now), so that the blocks, searched in turn,
    keep the whole problem's bounds together."""
    if problem.quota is None or sub.quota is None:
        return sub
    others = whole.copy()
    others[part.rows] = 0.0
    used = problem.quota.usage(others[None], problem.base)[0]
    bound = np.maximum(problem.quota.bound - used, 0.0).astype(np.float32)
    return replace(sub, quota=replace(sub.quota, bound=bound))


def stitch(num_jobs: int, num_nodes: int, parts: list[Part], bests: list[States]) -> States:
    """The whole allocation from the blocks' best states."""
    whole = np.zeros((num_jobs, num_nodes), dtype=np.float32)
    for part, best in zip(parts, bests, strict=True):
        whole[part.rows[:, None], part.nodes[None, :]] = best
    return whole


def adapt(
    previous: tuple[PartPopulation, ...], job_ids: list[str], nodes: IntArray
) -> States | None:
    """The previous round's population of the same block of nodes, with rows for this
    round's jobs of the block (zeros for the jobs new to it); None if no block matches."""
    key = tuple(int(n) for n in nodes)
    for prev in previous:
        if prev.nodes != key or prev.population.ndim != 3 or not prev.job_ids:
            continue
        where = {job_id: i for i, job_id in enumerate(prev.job_ids)}
        src = [where[j] for j in job_ids if j in where]
        dst = [i for i, j in enumerate(job_ids) if j in where]
        size = prev.population.shape[0]
        adapted = np.zeros((size, len(job_ids), len(key)), dtype=np.float32)
        adapted[:, dst] = prev.population[:, src]
        return adapted
    return None


def _block_ranges(num_nodes: int, k: int) -> list[range]:
    """k contiguous blocks of node indices, as equal as they divide."""
    bounds = [num_nodes * i // k for i in range(k + 1)]
    return [range(bounds[i], bounds[i + 1]) for i in range(k)]


def _blocks(capacity: States, k: int) -> list[States]:
    return [capacity[r.start : r.stop] for r in _block_ranges(len(capacity), k)]
