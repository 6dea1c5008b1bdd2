"""Minimum satisfactory shares: the fewest GPUs that still finish each deadline job in time.

ElasticFlow (Gu et al., "ElasticFlow: An Elastic Serverless Training Platform for
Distributed Deep Learning", ASPLOS 2023, §4.1 "admission control") plans the cluster in
time slots: jobs in the order of their deadlines, each given the smallest share x that,
with at most x GPUs in every slot (fewer where the jobs before it left fewer), completes
its remaining iterations by its deadline; the GPUs it is planned to hold are then taken
out of those slots for the jobs after it. A job for which no share suffices cannot be
guaranteed. `plan_shares` runs that plan; `policies.elasticflow` calls it every round to
admit new jobs and to reserve the admitted ones' shares, and reads from it what a
refused job would have needed.

Deviations: a job's share is one of the sizes it may run at (`allowed_sizes`: powers of
two, as ElasticFlow's buddy allocation places them), and in a slot with fewer GPUs left
than its share it is planned at the largest such size that fits (ElasticFlow's
progressive filling may give it any count). The slots start at the round's time, not
on a fixed grid, and past `MAX_SLOTS` the rest of the horizon is one slot; the restart
a resize costs is not planned for (the simulator
charges it; the plan is redone at every round).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# ElasticFlow's simulator schedules in 60-second slots (its README; gpuflow's replays
# run rounds at the same interval by default, controller.sim.config).
SLOT_S = 60.0
# Slots planned one by one (34 hours of 60 s slots); beyond them the plan has one slot
# to the latest deadline, in which a job holds its share until it finishes.
MAX_SLOTS = 2048


@dataclass(frozen=True, slots=True)
class Curve:
    """A job's speed by GPU count: `ips[i]` iterations of its work per second on
    `sizes[i]` GPUs (sizes ascending)."""

    sizes: tuple[int, ...]
    ips: tuple[float, ...]

    def speed(self, gpus: int) -> float:
        """Iterations per second on `gpus` GPUs (0 when it is not a size of the curve)."""
        for size, ips in zip(self.sizes, self.ips, strict=True):
            if size == gpus:
                return ips
        return 0.0

    def below(self, gpus: int) -> int:
        """The largest size of the curve at most `gpus` (0 if none)."""
        best = 0
        for size in self.sizes:
            if size <= gpus:
                best = size
        return best


@dataclass(frozen=True, slots=True)
class Demand:
    """A deadline job to plan: `remaining` iterations to do by `due_s`."""

    job_id: str
    due_s: float
    remaining: float
    curve: Curve


@dataclass(frozen=True, slots=True)
class Share:
    """A job's planned share: at most `gpus` in every slot, `now_gpus` in the first
    one, finishing at `finish_s` (by its deadline)."""

    gpus: int
    now_gpus: int
    finish_s: float


def allowed_sizes(min_gpus: int, max_gpus: int, total_gpus: int) -> tuple[int, ...]:
    """The sizes a job runs at: the powers of two in min..max (at most the cluster's
    GPUs), or its one size when it is not elastic or no power of two is in range."""
    top = min(max_gpus, total_gpus)
    sizes = tuple(1 << i for i in range(top.bit_length()) if min_gpus <= 1 << i <= top)
    if sizes:
        return sizes
    return (min_gpus,) if min_gpus <= total_gpus else ()


def plan_shares(
    now_s: float, capacity: int, demands: Sequence[Demand]
) -> tuple[dict[str, Share], list[str]]:
    """The shares of `demands` planned in their given order (deadline order) on
    `capacity` GPUs from `now_s`, and the ids of those no share completes in time
    (they get none, and take nothing from the later ones)."""
    if not demands:
        return {}, []
    horizon_s = max(d.due_s for d in demands) - now_s
    starts = _slot_starts(horizon_s)
    free = np.full(len(starts), capacity, dtype=np.int64)
    shares: dict[str, Share] = {}
    missed: list[str] = []
    for demand in demands:
        share = _fit(now_s, starts, horizon_s, free, demand)
        if share is None:
            missed.append(demand.job_id)
            continue
        shares[demand.job_id] = share[0]
        free[: len(share[1])] -= share[1]
    return shares, missed


def min_share(now_s: float, capacity: int, demand: Demand) -> Share | None:
    """The share `demand` would need alone on `capacity` GPUs, or None if none is enough."""
    shares, _ = plan_shares(now_s, capacity, [demand])
    return shares.get(demand.job_id)


def _slot_starts(horizon_s: float) -> np.ndarray:
    """The slots' starts, in seconds from now: every SLOT_S up to MAX_SLOTS of them,
    then one slot to the horizon (a deadline months away, which REST and the traces
    allow, plans in a few thousand slots, not millions)."""
    count = max(1, min(MAX_SLOTS, math.ceil(horizon_s / SLOT_S)))
    return np.arange(count, dtype=np.float64) * SLOT_S


def _fit(
    now_s: float, starts: np.ndarray, horizon_s: float, free: np.ndarray, demand: Demand
) -> tuple[Share, np.ndarray] | None:
    """The smallest share that completes `demand` by its deadline in the `free` GPUs of
    each slot, with the GPUs it holds in each slot up to its finish; None if none does."""
    span_s = demand.due_s - now_s
    if span_s <= 0:
        return None
    if demand.remaining <= 0:  # done at this instant: it needs nothing more
        return Share(0, 0, now_s), np.zeros(0, dtype=np.int64)
    n = int(np.searchsorted(starts, span_s, side="left"))
    ends = np.minimum(np.append(starts[1:n], horizon_s), span_s)
    lengths = ends - starts[:n]
    curve = demand.curve
    top = int(max(free[:n].max(), 0))
    # gpus_at[x], ips_at[x]: the largest size of the curve at most x GPUs, and its speed.
    gpus_at = np.array([curve.below(x) for x in range(top + 1)], dtype=np.int64)
    ips_at = np.array([curve.speed(int(g)) for g in gpus_at])
    window = np.clip(free[:n], 0, top)
    for size in curve.sizes:
        if size > top:
            break
        held = gpus_at[np.minimum(window, size)]
        done = np.cumsum(ips_at[held] * lengths)
        if done[-1] < demand.remaining:
            continue
        last = int(np.searchsorted(done, demand.remaining))
        before = float(done[last - 1]) if last > 0 else 0.0
        rate = float(ips_at[held[last]])
        finish_s = now_s + float(starts[last]) + (demand.remaining - before) / rate
        return Share(size, int(held[0]), finish_s), held[: last + 1]
    return None
