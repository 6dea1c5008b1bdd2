"""Max-min fair rates by progressive filling, vectorised over a flows x links incidence.

Every allocator ends here: the fair baseline directly, Varys and Sincronia for their
work-conserving backfill, Aalo for max-min among the flows of one coflow. Bertsekas
& Gallager, "Data Networks" (2nd ed., §6.5.2), give the algorithm: raise the rate of
every unfrozen flow together until a link fills, freeze the flows crossing it,
repeat. Each round here is a handful of numpy passes over the unfrozen entries, and
there are at most as many rounds as distinct saturation levels.
"""

from __future__ import annotations

import numpy as np

from controller.network.allocators.problem import FloatArray, FlowArrays, IntArray

# A link counts as full when less than this fraction of its capacity is left:
# far below any rate that matters, far above float64 rounding of the sums.
SATURATED = 1e-9


def max_min_levels(
    capacity: FloatArray,
    entry_flow: IntArray,
    entry_link: IntArray,
    n_flows: int,
    weight: FloatArray | None = None,
) -> FloatArray:
    """Per-flow max-min fair rate on `capacity`.

    A flow of weight w stands for w identical flows: it uses w times its rate on
    each of its links, and the returned level is the rate of each of them. Flows
    with no entry get 0.
    """
    level = np.zeros(n_flows, dtype=np.float64)
    if n_flows == 0 or entry_flow.size == 0:
        return level
    n_links = capacity.shape[0]
    residual = np.maximum(capacity.astype(np.float64), 0.0)
    full = SATURATED * np.maximum(residual, 1e-12)
    w_entry = np.ones(entry_flow.size) if weight is None else weight[entry_flow]
    ef, el = entry_flow, entry_link
    fill = 0.0
    frozen = np.zeros(n_flows, dtype=bool)
    while ef.size:
        load = np.bincount(el, weights=w_entry, minlength=n_links)
        used = np.flatnonzero(load > 0)
        headroom = residual[used] / load[used]
        k = int(np.argmin(headroom))
        step = max(float(headroom[k]), 0.0)
        fill += step
        residual -= load * step
        residual[used[k]] = 0.0
        saturated = residual <= full
        newly = np.zeros(n_flows, dtype=bool)
        newly[ef[saturated[el]]] = True
        level[newly] = fill
        frozen |= newly
        keep = ~newly[ef]
        ef, el, w_entry = ef[keep], el[keep], w_entry[keep]
    return level


def max_min_by_path(arrays: FlowArrays, capacity: FloatArray) -> FloatArray:
    """Max-min fair rate of every flow of `arrays` on `capacity`.

    Flows with the same path always get the same max-min share, so the filling
    runs on one weighted group per path: on a trace with 150 ports that bounds the
    work by the 22,500 port pairs however many flows are active.
    """
    if arrays.n_flows == 0:
        return np.zeros(0)
    count = np.bincount(arrays.path, minlength=arrays.n_paths)
    present = np.flatnonzero(count)
    index = np.zeros(arrays.n_paths, dtype=np.int64)
    index[present] = np.arange(present.size)
    group = index[arrays.path]
    # One representative flow per path: the last one written wins, any will do.
    rep = np.zeros(present.size, dtype=np.int64)
    rep[group] = np.arange(arrays.n_flows)
    is_rep = np.zeros(arrays.n_flows, dtype=bool)
    is_rep[rep] = True
    keep = is_rep[arrays.entry_flow]
    levels = max_min_levels(
        capacity,
        group[arrays.entry_flow[keep]],
        arrays.entry_link[keep],
        int(present.size),
        count[present].astype(np.float64),
    )
    rates: FloatArray = levels[group]
    return rates


def link_usage(arrays: FlowArrays, rates: FloatArray) -> FloatArray:
    """Gbit/s used on each link by `rates`."""
    usage: FloatArray = np.bincount(
        arrays.entry_link, weights=rates[arrays.entry_flow], minlength=arrays.n_links
    ).astype(np.float64)
    return usage
