"""Each quota's GPUs over time, read from the jobs' recorded events.

Called by api.routes.quotas (`GET /quotas/series`) for the dashboard's Quotas
chart. Local mode's ticker (api.local_mode.backend) and cluster mode's follower
(api.cluster_mode.follower) write every job's events in the backend's clock: a start, resize,
migration or re-share gives the job the GPUs of the allocation it records (its `num_gpus` when the
event has none), a preemption, suspension or end takes them away. Each quota's GPUs at a
time are those of its tenants' jobs then (an inner quota's, its subtree's), and a
point of the series is their time-weighted mean over one bin of the window, so a
quota's area under the curve is the GPU-seconds it held, whatever the bin width:
what a replay's per-quota mean share (controller.quotas.ledger) averages too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from api.store.models import TERMINAL_STATUSES, Job, JobEvent
from controller.model.events import LIFECYCLE
from controller.model.quotas import QuotaTree

# Event kind -> whether the job holds GPUs after it (kinds not listed change nothing).
HOLDS: dict[str, bool] = {
    kind: t.holds_gpus for kind, t in LIFECYCLE.items() if t.holds_gpus is not None
}


@dataclass(frozen=True)
class Step:
    """From `t_s` on, the job holds `gpus` GPUs (until its next step)."""

    t_s: float
    gpus: float


@dataclass(frozen=True)
class Series:
    """Bin starts and, by quota, its mean GPUs over each bin."""

    t_s: list[float]
    bin_s: float
    gpus: dict[str, list[float]]


def event_gpus(allocation: list[dict[str, Any]] | None, num_gpus: int) -> float:
    """GPUs of an allocation as events record it ([{"node", "gpus": [...]}])."""
    if not allocation:
        return float(num_gpus)
    return float(sum(len(part.get("gpus") or ()) for part in allocation))


def steps_of(events: Iterable[tuple[str, float | None, Any]], num_gpus: int) -> list[Step]:
    """A job's (kind, time, allocation) events, in order, as the GPUs it holds."""
    out: list[Step] = []
    for kind, t_s, allocation in events:
        holds = HOLDS.get(kind)
        if holds is None or t_s is None:
            continue
        out.append(Step(t_s, event_gpus(allocation, num_gpus) if holds else 0.0))
    return out


def binned(steps: Sequence[Step], start_s: float, bin_s: float, bins: int) -> list[float]:
    """Time-weighted mean of a step function (0 before its first step) over each bin."""
    out = [0.0] * bins
    end_s = start_s + bin_s * bins
    for k, step in enumerate(steps):
        until = steps[k + 1].t_s if k + 1 < len(steps) else end_s
        lo, hi = max(step.t_s, start_s), min(until, end_s)
        if step.gpus == 0 or hi <= lo:
            continue
        first = int((lo - start_s) // bin_s)
        last = min(bins - 1, int((hi - start_s) // bin_s))
        for b in range(first, last + 1):
            b_lo = start_s + b * bin_s
            overlap = min(hi, b_lo + bin_s) - max(lo, b_lo)
            if overlap > 0:
                out[b] += step.gpus * overlap / bin_s
    return out


def quota_series(
    session: Session, tree: QuotaTree, now_s: float, window_s: float, points: int
) -> Series:
    """Every quota's mean GPUs over `points` bins of the `window_s` up to `now_s`.

    Reads the events of the jobs alive in the window: those not finished, and those
    with an event in it (a job that ended before the window held nothing in it)."""
    start_s = now_s - window_s
    bin_s = window_s / points
    recent = select(JobEvent.job_id).where(JobEvent.sim_s >= start_s)
    alive = select(Job.id).where(Job.status.not_in(TERMINAL_STATUSES))
    rows = session.execute(
        select(JobEvent.job_id, JobEvent.kind, JobEvent.sim_s, JobEvent.allocation,
               Job.tenant, Job.num_gpus)
        .join(Job, Job.id == JobEvent.job_id)
        .where(or_(JobEvent.job_id.in_(recent), JobEvent.job_id.in_(alive)))
        .order_by(JobEvent.job_id, JobEvent.id)
    )  # fmt: skip
    per_job: dict[str, tuple[str, int, list[tuple[str, float | None, Any]]]] = {}
    for job_id, kind, sim_s, allocation, tenant, num_gpus in rows:
        per_job.setdefault(job_id, (tenant, num_gpus, []))[2].append((kind, sim_s, allocation))
    gpus = {name: [0.0] * points for name in tree.names()}
    for tenant, num_gpus, events in per_job.values():
        leaf = tree.leaf_for_tenant(tenant)
        if leaf is None:
            continue
        held = binned(steps_of(events, num_gpus), start_s, bin_s, points)
        for name in tree.chain(leaf):
            row = gpus[name]
            for b, v in enumerate(held):
                row[b] += v
    return Series([start_s + b * bin_s for b in range(points)], bin_s, gpus)
