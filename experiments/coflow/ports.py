"""The policies on a port fabric, the coflow replay's fast path.

In coflowsim's model every flow crosses exactly two links: the up link of its
mapper's port and the down link of its reducer's port (a non-blocking switch
between P ports). Flows with the same (up, down) pair, a *path*, always get the
same max-min share, so every water-filling here runs on a dense P x P matrix of
flow counts per path; and a link's saturation level is all a path needs, since
a path's max-min rate is the lowest level among its two links. A filling then
costs O(rounds x 2P + P^2) in a compiled loop (`experiments.coflow.filling`), whatever the number of
flows in flight, where `waterfill.max_min_levels` passes over every (flow, link)
entry still unfrozen in each round.

The rules are those of `fair`, `varys`, `aalo` and `sincronia` (read the rules and
the deviations there); the functions here compute the same rates up to float
rounding, which `tests/experiments/coflow/test_ports.py` checks against the
`FlowArrays` allocators on random instances and the replay checks end to end on
prefixes of the Facebook trace. Link ids: the up link of port p is p, its down
link P + p.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from controller.network.allocators.aalo import DEFAULT as AALO_DEFAULT
from controller.network.allocators.aalo import AaloConfig, queue_of
from controller.network.allocators.problem import FloatArray, FlowArrays, IntArray
from controller.network.allocators.sincronia import bssi_order
from controller.network.allocators.varys import effective_bottleneck_s
from controller.network.allocators.waterfill import SATURATED
from experiments.coflow.filling import fill_levels

MB_S_PER_GBPS = 125.0


@dataclass(frozen=True)
class PortArrays:
    """Flows of a P-port fabric, sorted by coflow; coflows 0..C-1 in FIFO order.

    `path_count` (P, P) is the number of flows per (src, dst) path, counting every
    flow given (the replay keeps it up to date instead of recounting per event).
    """

    capacity_gbps: FloatArray  # (2P,): up links 0..P-1, down links P..2P-1
    src: IntArray  # (F,) mapper port
    dst: IntArray  # (F,) reducer port
    coflow: IntArray  # (F,), non-decreasing
    remaining_mb: FloatArray  # (F,), all > 0
    attained_mb: FloatArray  # (C,)
    weight: FloatArray  # (C,)
    path_count: FloatArray  # (P, P)

    @property
    def ports(self) -> int:
        return int(self.path_count.shape[0])

    @property
    def n_flows(self) -> int:
        return int(self.remaining_mb.shape[0])

    @property
    def n_coflows(self) -> int:
        return int(self.attained_mb.shape[0])

    def coflow_link_mb(self) -> FloatArray:
        """(C, 2P): MB each coflow still has to move across each link."""
        return _per_coflow_link(self, self.remaining_mb)

    def coflow_link_flows(self) -> FloatArray:
        """(C, 2P): how many flows of each coflow cross each link."""
        return _per_coflow_link(self, None)

    def to_flow_arrays(self) -> FlowArrays:
        """The same instance as the generic allocators take it."""
        n, p = self.n_flows, self.ports
        return FlowArrays(
            capacity_gbps=self.capacity_gbps,
            entry_flow=np.concatenate([np.arange(n), np.arange(n)]).astype(np.int64),
            entry_link=np.concatenate([self.src, p + self.dst]).astype(np.int64),
            remaining_mb=self.remaining_mb,
            coflow=self.coflow,
            path=(self.src * p + self.dst).astype(np.int64),
            attained_mb=self.attained_mb,
            weight=self.weight,
            n_paths=p * p,
        )


def port_arrays(
    capacity_gbps: FloatArray,
    src: IntArray,
    dst: IntArray,
    coflow: IntArray,
    remaining_mb: FloatArray,
    attained_mb: FloatArray,
    weight: FloatArray | None = None,
) -> PortArrays:
    """`PortArrays` with the path counts computed from the flows."""
    p = capacity_gbps.shape[0] // 2
    count = np.bincount(src * p + dst, minlength=p * p).astype(np.float64).reshape(p, p)
    return PortArrays(
        capacity_gbps=capacity_gbps,
        src=src,
        dst=dst,
        coflow=coflow,
        remaining_mb=remaining_mb,
        attained_mb=attained_mb,
        weight=np.ones(attained_mb.shape[0]) if weight is None else weight,
        path_count=count,
    )


def _per_coflow_link(arrays: PortArrays, values: FloatArray | None) -> FloatArray:
    p, c = arrays.ports, arrays.n_coflows
    base = arrays.coflow * p
    up = np.bincount(base + arrays.src, weights=values, minlength=c * p)
    down = np.bincount(base + arrays.dst, weights=values, minlength=c * p)
    out: FloatArray = np.concatenate(
        [up.reshape(c, p), down.reshape(c, p)], axis=1, dtype=np.float64
    )
    return out


def bipartite_levels(
    count: FloatArray, cap_rows: FloatArray, cap_cols: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Saturation level of every row and column link under max-min filling.

    `count[i, j]` flows cross row link i and column link j. Progressive filling
    (as `waterfill.max_min_levels`): raise every unfrozen flow's rate together
    until a link fills; the flows crossing it freeze at that level. The max-min
    rate of a flow on (i, j) is `min(rows[i], cols[j])`; links that never fill
    (or carry nothing) get inf.
    """
    n_rows = count.shape[0]
    cap = np.concatenate([cap_rows, cap_cols]).astype(np.float64)
    level = fill_levels(np.ascontiguousarray(count, dtype=np.float64), cap, SATURATED)
    return level[:n_rows], level[n_rows:]


def max_min_by_path(arrays: PortArrays, capacity: FloatArray) -> FloatArray:
    """Max-min fair rate (Gbit/s) of every flow on `capacity` (2P,)."""
    p = arrays.ports
    up, down = bipartite_levels(arrays.path_count, capacity[:p], capacity[p:])
    rates: FloatArray = np.minimum(up[arrays.src], down[arrays.dst])
    return rates


def backfill(arrays: PortArrays, rates: FloatArray, usage: FloatArray) -> FloatArray:
    """`rates` plus a max-min share of what they leave (`usage` per link, Gbit/s)."""
    free = np.maximum(arrays.capacity_gbps - usage, 0.0)
    total: FloatArray = rates + max_min_by_path(arrays, free)
    return total


def fair_rates(arrays: PortArrays) -> FloatArray:
    """`fair.fair_rates` on a port fabric."""
    if arrays.n_flows == 0:
        return np.zeros(0)
    return max_min_by_path(arrays, arrays.capacity_gbps)


def madd(
    link_mb: FloatArray, capacity: FloatArray, order: IntArray
) -> tuple[FloatArray, FloatArray]:
    """`varys.madd_in_order` on a (C, L) demand matrix: 1/Γ per coflow (MB/s per MB,
    0 for a coflow served nothing) and the Gbit/s it uses on each link."""
    free = capacity.astype(np.float64).copy()
    full = SATURATED * np.maximum(free, 1e-12)
    inv_gamma = np.zeros(link_mb.shape[0])
    for c in order:
        demand = link_mb[c]
        links = np.flatnonzero(demand > 0)
        if links.size == 0 or (free[links] <= full[links]).any():
            continue
        d = demand[links]
        gamma = float((d / (free[links] * MB_S_PER_GBPS)).max())
        inv_gamma[c] = 1.0 / gamma
        free[links] = np.maximum(free[links] - d / gamma / MB_S_PER_GBPS, 0.0)
    usage: FloatArray = inv_gamma @ link_mb / MB_S_PER_GBPS
    return inv_gamma, usage


def _madd_rates(arrays: PortArrays, link_mb: FloatArray, order: IntArray) -> FloatArray:
    inv_gamma, usage = madd(link_mb, arrays.capacity_gbps, order)
    rates = arrays.remaining_mb * inv_gamma[arrays.coflow] / MB_S_PER_GBPS
    return backfill(arrays, rates, usage)


def sebf_rates(arrays: PortArrays) -> FloatArray:
    """`varys.sebf_rates` on a port fabric."""
    if arrays.n_flows == 0:
        return np.zeros(0)
    link_mb = arrays.coflow_link_mb()
    gamma = effective_bottleneck_s(link_mb, arrays.capacity_gbps)
    order: IntArray = np.lexsort((np.arange(arrays.n_coflows), gamma))
    return _madd_rates(arrays, link_mb, order)


def sincronia_rates(arrays: PortArrays) -> FloatArray:
    """`sincronia.sincronia_rates` on a port fabric."""
    if arrays.n_flows == 0:
        return np.zeros(0)
    link_mb = arrays.coflow_link_mb()
    order = bssi_order(link_mb, arrays.capacity_gbps, arrays.weight)
    return _madd_rates(arrays, link_mb, order)


def aalo_rates(arrays: PortArrays, cfg: AaloConfig = AALO_DEFAULT) -> FloatArray:
    """`aalo.aalo_rates` on a port fabric."""
    if arrays.n_flows == 0:
        return np.zeros(0)
    p, n_coflows = arrays.ports, arrays.n_coflows
    cap = arrays.capacity_gbps.astype(np.float64)
    queue = queue_of(arrays.attained_mb, cfg)
    on_link = arrays.coflow_link_flows() > 0  # (C, 2P)
    if cfg.strict:
        slices = cap.reshape(1, -1).copy()
    else:
        present = np.zeros((cfg.queues, 2 * p), dtype=bool)
        for q in np.unique(queue):
            present[q] = on_link[queue == q].any(axis=0)
        weights = (cfg.queues - np.arange(cfg.queues, dtype=np.float64)).reshape(-1, 1)
        w = present * weights
        total = w.sum(axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            slices = np.where(total > 0, w / total, 0.0) * cap
    bounds = np.searchsorted(arrays.coflow, np.arange(n_coflows + 1))
    rates = np.zeros(arrays.n_flows)
    usage = np.zeros(2 * p)
    for c in np.lexsort((np.arange(n_coflows), queue)):
        lo, hi = int(bounds[c]), int(bounds[c + 1])
        if lo == hi:
            continue
        row = 0 if cfg.strict else int(queue[c])
        links = np.flatnonzero(on_link[c])
        if not (slices[row, links] > 0).any():
            continue  # every link it crosses is spent: its flows get 0 here
        src, dst = arrays.src[lo:hi], arrays.dst[lo:hi]
        level = _coflow_levels(src, dst, slices[row], p)
        rates[lo:hi] = level
        used = np.bincount(src, weights=level, minlength=p)
        used = np.concatenate([used, np.bincount(dst, weights=level, minlength=p)])
        usage += used
        slices[row] = np.maximum(slices[row] - used, 0.0)
    return backfill(arrays, rates, usage)


def _coflow_levels(src: IntArray, dst: IntArray, capacity: FloatArray, p: int) -> FloatArray:
    """Max-min rates of one coflow's flows on `capacity` (2P,)."""
    if src.size == 1:  # alone: the smaller of its two links
        return np.array([min(capacity[src[0]], capacity[p + dst[0]])])
    rows, src_i = _compress(src, p)
    cols, dst_i = _compress(dst, p)
    pairs = np.bincount(src_i * cols.size + dst_i, minlength=rows.size * cols.size)
    count: FloatArray = pairs.astype(np.float64).reshape(rows.size, cols.size)
    up, down = bipartite_levels(count, capacity[rows], capacity[p + cols])
    level: FloatArray = np.minimum(up[src_i], down[dst_i])
    return level


def _compress(port: IntArray, p: int) -> tuple[IntArray, IntArray]:
    """The distinct ports, and each entry's index among them (no sort)."""
    seen = np.bincount(port, minlength=p) > 0
    rank = np.cumsum(seen) - 1
    distinct: IntArray = np.flatnonzero(seen)
    index: IntArray = rank[port]
    return distinct, index


def _aalo_strict(arrays: PortArrays) -> FloatArray:
    return aalo_rates(arrays, AaloConfig(strict=True))


PORT_RATES: dict[str, Callable[[PortArrays], FloatArray]] = {
    "fair": fair_rates,
    "sebf": sebf_rates,
    "aalo": aalo_rates,
    "aalo-strict": _aalo_strict,
    "sincronia": sincronia_rates,
}
