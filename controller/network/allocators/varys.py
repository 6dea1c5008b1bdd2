"""Varys: Smallest Effective Bottleneck First with MADD (Chowdhury, Zhong & Stoica,
"Efficient Coflow Scheduling with Varys", SIGCOMM 2014, §5.1-5.3, Pseudocode 1).

For coflow c and link l let d(c, l) be the MB c still has to move across l. Its
effective bottleneck on an idle fabric is Γ(c) = max_l d(c, l) / cap(l) (§5.1).
SEBF serves coflows in increasing Γ; for each in turn MADD recomputes Γ on the
bandwidth left by those before it and gives every flow f of c the rate
remaining(f) / Γ, so all its flows finish together and it takes no more than it
needs (§5.2). A coflow with bytes on a link that has nothing left gets nothing in
this pass. Leftover bandwidth is then handed out (§5.3, work conservation).

Deviations: the backfill here is max-min fair among all flows on the leftover
bandwidth (Varys leaves the policy open; coflowsim backfills greedily flow by flow
in arrival order). Γ is computed on remaining bytes at every call, as in the paper;
coflowsim orders by the static Γ computed at arrival.
"""

from __future__ import annotations

import numpy as np

from controller.network.allocators.problem import FloatArray, FlowArrays, IntArray
from controller.network.allocators.waterfill import link_usage, max_min_by_path

NAME = "sebf"


def effective_bottleneck_s(link_mb: FloatArray, capacity: FloatArray) -> FloatArray:
    """Γ per coflow (seconds) for a (C, L) demand matrix on `capacity` (Gbit/s)."""
    mb_per_s = capacity * 125.0
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(link_mb > 0, link_mb / mb_per_s, 0.0)
    gamma: FloatArray = t.max(axis=1) if t.size else np.zeros(link_mb.shape[0])
    return gamma


def sebf_order(arrays: FlowArrays, link_mb: FloatArray) -> IntArray:
    """Coflow indices, smallest effective bottleneck first; ties by FIFO order."""
    gamma = effective_bottleneck_s(link_mb, arrays.capacity_gbps)
    order: IntArray = np.lexsort((np.arange(arrays.n_coflows), gamma))
    return order


def madd_in_order(
    arrays: FlowArrays, order: IntArray, link_mb: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """MADD rates for coflows taken in `order`, and the capacity left over (Gbit/s)."""
    free = arrays.capacity_gbps.astype(np.float64).copy()
    full = 1e-9 * np.maximum(free, 1e-12)
    inv_gamma = np.zeros(arrays.n_coflows)  # 1/Γ per coflow, in MB/s per MB
    for c in order:
        demand = link_mb[c]
        links = np.flatnonzero(demand > 0)
        if links.size == 0 or (free[links] <= full[links]).any():
            continue
        gamma = float((demand[links] / (free[links] * 125.0)).max())
        inv_gamma[c] = 1.0 / gamma
        free[links] = np.maximum(free[links] - demand[links] / gamma / 125.0, 0.0)
    rates: FloatArray = arrays.remaining_mb * inv_gamma[arrays.coflow] / 125.0
    return rates, free


def backfill(arrays: FlowArrays, rates: FloatArray) -> FloatArray:
    """Add a max-min fair share of whatever `rates` leave unused (work conservation)."""
    free = np.maximum(arrays.capacity_gbps - link_usage(arrays, rates), 0.0)
    extra = max_min_by_path(arrays, free)
    total: FloatArray = rates + extra
    return total


def sebf_rates(arrays: FlowArrays) -> FloatArray:
    """SEBF + MADD + backfill rate (Gbit/s) of every flow."""
    if arrays.n_flows == 0:
        return np.zeros(0)
    link_mb = arrays.coflow_link_mb()
    rates, _ = madd_in_order(arrays, sebf_order(arrays, link_mb), link_mb)
    return backfill(arrays, rates)
