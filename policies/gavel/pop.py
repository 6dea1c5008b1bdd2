"""POP: Gavel's allocation solved as k independent sub-problems of the jobs and GPUs.

Narayanan et al., "Solving Large-Scale Granular Resource Allocation Problems
Efficiently with POP", SOSP 2021, §3-§4: a granular allocation problem (many jobs,
each small beside the cluster) is split into k sub-problems, each with about 1/k of
the clients and 1/k of every resource, solved independently, and the sub-allocations
are put side by side. Gavel's LPs (policies/gavel/allocation.py) grow with jobs x
types, and HiGHS's time on them faster than linearly (`bench/gavel_scale.py
--lp-times`, docs/benchmarks.md: one LAS allocation takes 0.1 s of CPU at 1,000 jobs,
2.5 s at 4,000, 9.8 s at 8,000; in 8 parts of 1,000, 1.5 s), so k sub-problems of
n/k jobs take far less than the one of n.

Here the jobs, in Gavel's arrival order, are dealt round-robin into k parts (row i in
part i mod k), every part gets W_j / k GPUs of each type j (a fraction is fine: X is
a time fraction, and the round-based mechanism places jobs on the whole cluster), and
each part's X is its policy's own problem over its jobs alone (X_equal or X_prop, LAS's
normalisation, FTF's bisection, the makespan all per part). POP draws the partition at
random; a deal in arrival order is as balanced in jobs and in arrival time, and the
same from run to run without a seed. Where the optimum treats the parts alike (each
part's jobs a copy of the others') POP's answer is the full LP's; elsewhere it can
lose (a part's jobs cannot use another part's idle share) and the loss is measured
against k = 1 on Gavel's trace (docs/benchmarks.md). Called by policies/gavel.py for
LAS, FTF and the makespan; FIFO is no LP and is not split.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float64]
Rows = npt.NDArray[np.intp]

# Jobs per sub-problem when the policy is not given k: at 1,000 a LAS allocation takes
# about 0.1 s of CPU (bench/gavel_scale.py --lp-times), and below it (every replay of
# Gavel's 100-job traces, every test) the full LP is solved as before.
JOBS_PER_PART = 1000


def default_k(jobs: int) -> int:
    """k chosen by size: one part per `JOBS_PER_PART` jobs or fewer."""
    return max(1, math.ceil(jobs / JOBS_PER_PART))


def parts(jobs: int, k: int) -> list[Rows]:
    """The rows of each of min(k, jobs) parts, row i in part i mod k."""
    count = max(1, min(k, jobs))
    return [np.arange(p, jobs, count) for p in range(count)]


def partitioned(
    jobs: int, types: int, k: int, workers: Matrix, solve: Callable[[Rows, Matrix], Matrix]
) -> Matrix:
    """X of `jobs` rows: `solve(rows, workers / k)` for each part, side by side."""
    split = parts(jobs, k)
    if len(split) == 1:
        return solve(split[0], workers)
    x = np.zeros((jobs, types))
    share = workers / len(split)
    for rows in split:
        x[rows] = solve(rows, share)
    return x
