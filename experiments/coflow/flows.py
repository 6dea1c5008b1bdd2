"""The coflow replay's flows as arrays, and the step both of its event loops share.

Called by the replay states (experiments/coflow/states.py): `TraceFlows`
lays out every flow of a trace coflow by coflow, `Advance` moves the flows in flight
to the next event at the rates in force, and `owner_runs` numbers the coflows of the
flows in flight for the allocators. The rules they follow (coflowsim's completion
and epoch model) are in experiments/coflow/replay.py's docstring.
"""

from __future__ import annotations

import math

import numpy as np

from controller.network.allocators import NetworkPolicy
from controller.network.allocators.problem import FloatArray, IntArray
from experiments.coflow.trace import MB_PER_MIB, TraceCoflow

# A flow whose finish time is within this fraction of the step is done in it.
SAME_TIME = 1e-9


class TraceFlows:
    """All flows of the trace as arrays, laid out coflow by coflow in FIFO order."""

    def __init__(self, coflows: list[TraceCoflow], ports: int) -> None:
        src, dst, size, owner = [], [], [], []
        for g, c in enumerate(coflows):
            m, r = len(c.mappers), len(c.reducers)
            src.append(np.repeat(np.array(c.mappers, dtype=np.int64), r))
            dst.append(np.tile(np.array(c.reducers, dtype=np.int64), m))
            size.append(np.tile(np.array(c.reducer_flow_mib, dtype=np.float64), m))
            owner.append(np.full(m * r, g, dtype=np.int64))
        self.src = np.concatenate(src) if src else np.zeros(0, dtype=np.int64)
        self.dst = np.concatenate(dst) if dst else np.zeros(0, dtype=np.int64)
        self.size_mb = (np.concatenate(size) if size else np.zeros(0)) * MB_PER_MIB
        self.coflow = np.concatenate(owner) if owner else np.zeros(0, dtype=np.int64)
        self.ports = ports
        counts = np.array([c.n_flows for c in coflows], dtype=np.int64)
        self.bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


class Advance:
    """One step of the event loop, shared by `PortState` and `ReferenceState`: given
    every in-flight flow's rate, the time to the next event and the progress made by
    then.

    With `per_flow` the next event is the first flow completion, an Aalo threshold
    crossing or `horizon_s`; without, it is the first coflow completion (its last
    flow's) or `horizon_s`: flows that finish earlier just stop, as in coflowsim.
    `coflow` (the flows' coflow index) must be non-decreasing.
    """

    def __init__(
        self,
        policy: NetworkPolicy,
        mb_s: FloatArray,
        remaining: FloatArray,
        size: FloatArray,
        coflow: IntArray,
        attained: FloatArray,
        horizon_s: float,
        per_flow: bool,
    ) -> None:
        with np.errstate(divide="ignore"):
            t_flow = np.where(mb_s > 0, remaining / mb_s, np.inf)
        thresholds = policy.thresholds if per_flow else None
        if per_flow:
            dt = min(float(t_flow.min()), horizon_s)
        else:
            starts = np.flatnonzero(np.diff(coflow, prepend=-1))
            dt = min(float(np.maximum.reduceat(t_flow, starts).min()), horizon_s)
        coflow_mb_s = np.bincount(coflow, weights=mb_s, minlength=attained.size)
        t_cross = np.full(attained.size, np.inf)
        threshold = t_cross
        if thresholds is not None:
            threshold = thresholds(attained)
            with np.errstate(divide="ignore", invalid="ignore"):
                t_cross = np.where(coflow_mb_s > 0, (threshold - attained) / coflow_mb_s, np.inf)
            dt = min(dt, float(t_cross.min()))
        if not math.isfinite(dt):
            raise RuntimeError(f"policy {policy.name!r} gives no flow a rate: replay stuck")
        limit = dt * (1 + SAME_TIME)
        moved = np.minimum(mb_s * dt, remaining)
        new_attained = attained + np.bincount(coflow, weights=moved, minlength=attained.size)
        if thresholds is not None:
            crossed = t_cross <= limit
            new_attained[crossed] = np.maximum(new_attained[crossed], threshold[crossed])
        new_rem = remaining - moved
        done = (t_flow <= limit) | (new_rem <= SAME_TIME * size)
        new_rem[done] = 0.0
        self.dt = dt
        self.attained = new_attained
        self.remaining = new_rem
        self.done = done


def owner_runs(owner: IntArray) -> tuple[IntArray, IntArray]:
    """For a non-decreasing `owner` per flow: the distinct owners and each flow's
    index among them."""
    change = np.empty(owner.size, dtype=bool)
    change[:1] = True
    np.not_equal(owner[1:], owner[:-1], out=change[1:])
    local: IntArray = (np.cumsum(change) - 1).astype(np.int64)
    owners: IntArray = owner[change].astype(np.int64)
    return owners, local
