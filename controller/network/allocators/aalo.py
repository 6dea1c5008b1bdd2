"""Aalo's D-CLAS (Chowdhury & Stoica, "Efficient Coflow Scheduling Without Prior
Knowledge", SIGCOMM 2015, §4.2-4.3): non-clairvoyant, by attained service.

A coflow's attained service is the MB it has sent so far. Coflows sit in K queues
with exponentially spaced thresholds: queue q holds attained service in
[Q(q-1), Q(q)) with Q(q) = first_mb · E^q (queue 0 starts at 0, the last queue has no
upper limit); paper defaults first_mb = 10 MB, E = 10, K = 10 (§4.3, §7). Within a
queue coflows are served FIFO; across queues the paper shares by weight rather than
by strict priority, to avoid starving long coflows: on each link the queues present
split the capacity in proportion to W(q) = K - q (the paper's W_i = K - i + 1 with
1-based queues). Within a coflow, flows share max-min fairly.

Allocation per call: (1) per link, each queue present gets its weighted slice;
(2) coflows, queue by queue in FIFO order, water-fill their flows within their
queue's remaining slice; (3) what is left anywhere is shared max-min fairly among
all flows (work conservation).

Deviations: `strict=True` gives strict priority across queues (what coflowsim's
CoflowSimulatorDark does) instead of weighted sharing; the backfill rule (3) is
gpuflow's, as the paper leaves the excess policy open. Queue membership is updated
exactly when a threshold is crossed (the replay schedules that as an event), where
coflowsim re-queues only at coflow arrivals and departures.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from controller.network.allocators.problem import FloatArray, FlowArrays, IntArray
from controller.network.allocators.varys import backfill
from controller.network.allocators.waterfill import max_min_levels

NAME = "aalo"


@dataclass(frozen=True)
class AaloConfig:
    first_mb: float = 10.0  # Aalo §7: Q_1^hi = 10 MB
    multiplier: float = 10.0  # Aalo §7: E = 10
    queues: int = 10  # Aalo §7: K = 10
    strict: bool = False  # True: strict priority across queues (coflowsim's variant)


DEFAULT = AaloConfig()


def queue_of(attained_mb: FloatArray, cfg: AaloConfig = DEFAULT) -> IntArray:
    """Queue index (0 = highest priority) of each attained service."""
    thresholds = cfg.first_mb * cfg.multiplier ** np.arange(cfg.queues - 1)
    q: IntArray = np.searchsorted(thresholds, attained_mb, side="right").astype(np.int64)
    return q


def next_threshold_mb(attained_mb: FloatArray, cfg: AaloConfig = DEFAULT) -> FloatArray:
    """Attained service at which each coflow moves down a queue (inf in the last)."""
    q = queue_of(attained_mb, cfg)
    nxt = cfg.first_mb * cfg.multiplier ** q.astype(np.float64)
    out: FloatArray = np.where(q < cfg.queues - 1, nxt, np.inf)
    return out


def aalo_rates(arrays: FlowArrays, cfg: AaloConfig = DEFAULT) -> FloatArray:
    """D-CLAS rate (Gbit/s) of every flow."""
    if arrays.n_flows == 0:
        return np.zeros(0)
    n_links = arrays.n_links
    queue = queue_of(arrays.attained_mb, cfg)
    slices = _queue_slices(arrays, queue, cfg)  # (K, L) or (1, L) when strict
    # Serve coflows by (queue, FIFO index): the FIFO index is the coflow index.
    order = np.lexsort((np.arange(arrays.n_coflows), queue))
    by_coflow = np.argsort(arrays.coflow[arrays.entry_flow], kind="stable")
    entry_bounds = np.searchsorted(
        arrays.coflow[arrays.entry_flow][by_coflow], np.arange(arrays.n_coflows + 1)
    )
    flow_bounds = arrays.coflow_bounds()
    rates = np.zeros(arrays.n_flows)
    for c in order:
        ents = by_coflow[entry_bounds[c] : entry_bounds[c + 1]]
        if ents.size == 0:
            continue
        lo, hi = int(flow_bounds[c]), int(flow_bounds[c + 1])
        row = 0 if cfg.strict else int(queue[c])
        ef = arrays.entry_flow[ents] - lo
        el = arrays.entry_link[ents]
        level = max_min_levels(slices[row], ef, el, hi - lo)
        rates[lo:hi] = level
        used = np.bincount(el, weights=level[ef], minlength=n_links)
        slices[row] = np.maximum(slices[row] - used, 0.0)
    return backfill(arrays, rates)


def _queue_slices(arrays: FlowArrays, queue: IntArray, cfg: AaloConfig) -> FloatArray:
    cap = arrays.capacity_gbps.astype(np.float64)
    if cfg.strict:
        strict: FloatArray = cap.reshape(1, -1).copy()
        return strict
    n_links = arrays.n_links
    q_entry = queue[arrays.coflow[arrays.entry_flow]]
    present = np.zeros(cfg.queues * n_links, dtype=bool)
    present[q_entry * n_links + arrays.entry_link] = True
    weights = (cfg.queues - np.arange(cfg.queues, dtype=np.float64)).reshape(-1, 1)
    w = present.reshape(cfg.queues, n_links) * weights
    total = w.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(total > 0, w / total, 0.0)
    slices: FloatArray = share * cap
    return slices
