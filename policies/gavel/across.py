"""Jobs larger than any one GPU type: Gavel's time fractions for a gang over several types.

Gavel runs a job on GPUs of one type (its scale factor of one worker type, §3.1), so on
a cluster whose every type has fewer GPUs than a job asks the job never runs (its
simulator's rounds skip it for ever; the 48-GPU jobs of the Pollux workloads on 32 T4,
16 V100 and 16 A100, docs/benchmarks.md). Here such a job runs over several types at
its slowest part's speed, the rule issue 31 states for a job on GPUs of several types
(Gavel's "a job's rate on an allocation of several types is bounded by its slowest
GPU"), and the policies give it time like any other job:

- its span: the GPUs it takes of each type, the types fastest for it first, each to
  all its GPUs until the gang is whole (the fastest slowest part there is);
- its rate: its GPUs times the slowest part's rate per GPU there (each part's rate on
  its own GPUs of its type, as the backend's speeds give it), on every type it spans;
- its allocation X[m][j] = X_a d_j / z_m on each spanned type j (d_j its GPUs there,
  X_a the share of time it runs), so that z_m X[m][j] counts d_j X_a GPUs of type j in
  the capacity constraints and sum_j T[m][j] X[m][j] = rate x X_a: an LP holds the
  ratios with the equalities `ties` gives;
- the round mechanism runs it where every part fits the GPUs left
  (policies/gavel/rounds.py `assign`'s `spans`), and counts its time on each type.

A job fitting one type is never spanned (Gavel's rule holds wherever it can). Called
by policies/gavel/__init__.py (spans and rates) and policies/gavel/allocation.py (the
LPs' equalities).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt
from scipy.sparse import csr_matrix

Matrix = npt.NDArray[np.float64]

# A job's rate on n GPUs of a type (None: the type cannot hold them).
RateOf = Callable[[str, int], float | None]


def span(gpus: int, types: Sequence[str], sizes: Sequence[int], rate_of: RateOf) -> tuple[int, ...]:
    """The job's GPUs on each type, its fastest types first (by rate per GPU on as many
    of the type's GPUs as it would take), or () where the types together are too
    few."""
    if gpus > sum(sizes):
        return ()
    per_gpu = {}
    for t, (name, size) in enumerate(zip(types, sizes, strict=True)):
        take = min(gpus, size)
        rate = rate_of(name, take) if take else None
        if rate:
            per_gpu[t] = rate / take
    parts = [0] * len(types)
    left = gpus
    for t in sorted(per_gpu, key=lambda t: (-per_gpu[t], t)):
        parts[t] = min(left, sizes[t])
        left -= parts[t]
        if not left:
            return tuple(parts)
    return ()


def spanned_rate(parts: Sequence[int], types: Sequence[str], rate_of: RateOf) -> float:
    """The job's steps/s over `parts`: its GPUs times its slowest part's rate per GPU."""
    slowest = min((rate_of(types[t], d) or 0.0) / d for t, d in enumerate(parts) if d > 0)
    return float(sum(parts) * slowest)


def ties(spans: Matrix, extra: int = 0) -> tuple[csr_matrix | None, Matrix | None]:
    """Equalities holding each spanned job's X[m][j] in proportion to its GPUs d_j on
    each type j it spans (d_k X[m][j] - d_j X[m][k] = 0 for consecutive spanned types
    j, k), over X flattened by rows and `extra` variables after it; (None, None) where
    no job is spanned. `spans` is jobs x types (0 rows for jobs on one type)."""
    jobs, types = spans.shape
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    count = 0
    for m in range(jobs):
        on = [t for t in range(types) if spans[m, t] > 0]
        for j, k in itertools.pairwise(on):
            rows += [count, count]
            cols += [m * types + j, m * types + k]
            vals += [float(spans[m, k]), -float(spans[m, j])]
            count += 1
    if not count:
        return None, None
    a_eq = csr_matrix((vals, (rows, cols)), shape=(count, jobs * types + extra))
    return a_eq, np.zeros(count)


def fits(parts: Matrix, workers: Matrix) -> bool:
    """Whether every part (GPUs per type) fits the GPUs of its type in `workers`."""
    return bool(np.all(parts <= workers + 1e-9))
