"""Per-flow max-min fairness: the baseline every coflow scheduler is compared with.

What TCP-like sharing converges to when every flow is its own connection and
coflows are invisible (the "per-flow fairness" baseline of Varys, SIGCOMM 2014, §7).
"""

from __future__ import annotations

from controller.network.allocators.problem import FloatArray, FlowArrays
from controller.network.allocators.waterfill import max_min_by_path

NAME = "fair"


def fair_rates(arrays: FlowArrays) -> FloatArray:
    """Max-min fair rate (Gbit/s) of every flow; work-conserving by construction."""
    return max_min_by_path(arrays, arrays.capacity_gbps)
