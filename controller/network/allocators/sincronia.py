"""A job-aware coflow order: Sincronia's BSSI with weights from DL job progress.

Agarwal, Rajakrishnan, Narayan, Agarwal, Shmoys & Vahdat, "Sincronia: Near-Optimal
Network Design for Coflows", SIGCOMM 2018, §4 (Algorithm 1, Bottleneck-Select-
Scale-Iterate): repeatedly take the most loaded link b (normalised by capacity),
put last, among the unordered coflows using b, the one with the smallest
weight / d(c, b), lower the weights of the others on b by that coflow's weight
scaled by their share of b, and iterate. Any work-conserving, order-preserving
rate allocation then keeps the order's 4-approximation of weighted CCT (§5).

Job awareness: a coflow's weight is `weight / job_remaining_s` of the DL job whose
iteration it is (see `problem.from_records`), so BSSI minimises completion time
weighted towards jobs that are close to done: the shortest-remaining-processing-time
rule (Schrage 1968) lifted to jobs, which is what average JCT rewards. Without job
information every weight is 1 and this is plain Sincronia.

Deviations: rates follow the order with MADD per coflow (order-preserving: a later
coflow only gets what earlier ones leave), then the max-min backfill shared with
Varys; the paper's prototype uses strict priority queues in the switches instead.
"""

from __future__ import annotations

import numpy as np

from controller.network.allocators.problem import FloatArray, FlowArrays, IntArray
from controller.network.allocators.varys import backfill, madd_in_order

NAME = "sincronia"


def bssi_order(link_mb: FloatArray, capacity: FloatArray, weight: FloatArray) -> IntArray:
    """Coflow indices in BSSI order (first = highest priority)."""
    n = link_mb.shape[0]
    t = link_mb / np.maximum(capacity * 125.0, 1e-12)  # seconds of each link per coflow
    w = weight.astype(np.float64).copy()
    left = np.ones(n, dtype=bool)
    load = t.sum(axis=0)
    order = np.empty(n, dtype=np.int64)
    for pos in range(n - 1, -1, -1):
        b = int(np.argmax(load))
        on_b = left & (t[:, b] > 0)
        if not on_b.any():  # nothing left on any link: the rest keep FIFO order
            rest = np.flatnonzero(left)
            order[: pos + 1] = rest
            break
        cand = np.flatnonzero(on_b)
        ratio = w[cand] / t[cand, b]
        # Ties go last to the later coflow, so FIFO survives among equals.
        k = int(cand[np.lexsort((-cand, ratio))[0]])
        w[cand] -= w[k] * t[cand, b] / t[k, b]
        w[k] = 0.0
        order[pos] = k
        left[k] = False
        load -= t[k]
    return order


def sincronia_rates(arrays: FlowArrays) -> FloatArray:
    """BSSI order + MADD + backfill rate (Gbit/s) of every flow."""
    if arrays.n_flows == 0:
        return np.zeros(0)
    link_mb = arrays.coflow_link_mb()
    order = bssi_order(link_mb, arrays.capacity_gbps, arrays.weight)
    rates, _ = madd_in_order(arrays, order, link_mb)
    return backfill(arrays, rates)
