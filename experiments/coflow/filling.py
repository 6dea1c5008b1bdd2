"""Compiled progressive filling on a bipartite link graph (numba).

`ports.bipartite_levels` is the public entry; this module holds its inner loop,
compiled with numba because the coflow replay runs it at every event (tens of
thousands of times on the FB trace) and a numpy round costs a dozen calls of
about 2 µs on 300-long vectors, 40 rounds a filling.

The loop is the progressive filling of Bertsekas & Gallager §6.5.2 (the rule of
`waterfill.max_min_levels`), on groups of flows that share a (row link, column
link) pair: raise every unfrozen flow's rate together until a link fills; that
link's flows freeze at the level reached; the loads of the links across from it
drop by the flows that froze. Work per filling: O(rounds x links + pairs).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import numba
import numpy as np

from controller.network.allocators.problem import FloatArray, IntArray


def _fill(count: FloatArray, cap: FloatArray, saturated: float) -> FloatArray:
    """Saturation level of each link (rows first, then columns) of `count` (R, C)
    with capacities `cap` (R + C,); inf if it never fills or carries no flow.
    A link is full once its residual is <= `saturated` x its capacity (at least
    1e-12); a link full from the start (capacity 0) freezes its flows at level 0."""
    n_rows, n_cols = count.shape
    n = n_rows + n_cols
    used = np.zeros(n, dtype=np.bool_)
    for i in range(n_rows):
        for j in range(n_cols):
            if count[i, j] > 0.0:
                used[i] = True
                used[n_rows + j] = True
    level = np.full(n, np.inf)
    residual = np.zeros(n)
    full = np.zeros(n)
    alive = np.zeros(n, dtype=np.bool_)
    for k in range(n):
        if used[k]:
            residual[k] = max(cap[k], 0.0)
            full[k] = saturated * max(residual[k], 1e-12)
            alive[k] = residual[k] > full[k]
            if not alive[k]:
                level[k] = 0.0
    load = np.zeros(n)
    for i in range(n_rows):
        if not alive[i]:
            continue
        for j in range(n_cols):
            c = count[i, j]
            if c > 0.0 and alive[n_rows + j]:
                load[i] += c
                load[n_rows + j] += c
    fill = 0.0
    newly = np.empty(n, dtype=np.int64)
    while True:
        step = np.inf
        first = -1
        for k in range(n):
            if alive[k] and load[k] > 0.0:
                h = residual[k] / load[k]
                if h < step:
                    step = h
                    first = k
        if first < 0:
            break
        fill += step
        m = 0
        for k in range(n):
            if alive[k]:
                residual[k] -= load[k] * step
                if k == first:
                    residual[k] = 0.0
                if residual[k] <= full[k]:
                    newly[m] = k
                    m += 1
        for t in range(m):
            k = newly[t]
            level[k] = fill
            alive[k] = False
        for t in range(m):
            k = newly[t]
            if k < n_rows:
                for j in range(n_cols):
                    c = count[k, j]
                    if c > 0.0 and alive[n_rows + j]:
                        load[n_rows + j] -= c
            else:
                for i in range(n_rows):
                    c = count[i, k - n_rows]
                    if c > 0.0 and alive[i]:
                        load[i] -= c
    return level


_fill_jit = numba.njit(cache=True, nogil=True)(_fill)
fill_levels = cast(Callable[[FloatArray, FloatArray, float], FloatArray], _fill_jit)


def _advance_fair(
    count: FloatArray,
    cap: FloatArray,
    head: FloatArray,
    head_size: FloatArray,
    clock: FloatArray,
    horizon_s: float,
    saturated: float,
    same_time: float,
    mb_s_per_gbps: float,
) -> tuple[float, IntArray, FloatArray, FloatArray]:
    """One event of fair sharing kept per path (`experiments.coflow.states.PathState`).

    Every flow of path k = i * P + j runs at the max-min rate min(level[i],
    level[P + j]); `clock[k]` is the MB each has been served, `head[k]` the
    smallest finish target among them (`head_size[k]` that flow's size). Advance
    to the first head reached or `horizon_s`, move the clocks (in place), and
    return the time advanced, the paths whose head is done by then, their rates
    (MB/s) and their clocks before the step. dt is inf if no flow has a rate."""
    p = count.shape[0]
    level = _fill_jit(count, cap, saturated)
    # The paths that carry flows at a rate, and that rate; then the first head reached.
    busy = np.empty(p * p, dtype=np.int64)
    rate = np.empty(p * p)
    n = 0
    for i in range(p):
        for j in range(p):
            r = min(level[i], level[p + j]) * mb_s_per_gbps
            if count[i, j] > 0.0 and r > 0.0:
                busy[n] = i * p + j
                rate[n] = r
                n += 1
    dt = horizon_s
    for t in range(n):
        k = busy[t]
        dt = min(dt, (head[k] - clock[k]) / rate[t])
    ends = np.empty(n, dtype=np.int64)
    rates = np.empty(n)
    before = np.empty(n)
    m = 0
    if not np.isfinite(dt):
        return dt, ends[:0], rates[:0], before[:0]
    limit = dt * (1.0 + same_time)
    for t in range(n):
        k, r = busy[t], rate[t]
        to_go = head[k] - clock[k]
        if to_go / r <= limit or to_go - r * dt <= same_time * head_size[k]:
            ends[m] = k
            rates[m] = r
            before[m] = clock[k]
            m += 1
        clock[k] += r * dt
    return dt, ends[:m], rates[:m], before[:m]


advance_fair = cast(
    Callable[
        [FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, float, float, float, float],
        tuple[float, IntArray, FloatArray, FloatArray],
    ],
    numba.njit(cache=True, nogil=True)(_advance_fair),
)
