"""A job's timeline: the intervals of its states, read from its recorded events.

Called by api.routes.order (GET /jobs/{id}/timeline) with the job's events in the
order they were written (api.local_mode.history in local mode, api.cluster_mode.history in cluster
mode); pure. Each event that changes the job's state closes the interval before it
and opens the next, with the decision it stands for, its detail as the reason, the
jobs that took the job's GPUs, and where it runs afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controller.model.events import ENDING_KINDS, LIFECYCLE

# Event kind -> (state afterwards, decision), from the lifecycle's table. Kinds without
# a decision ("admitted") change nothing; the terminal ones (ENDING_KINDS) close the
# last interval.
STEPS: dict[str, tuple[str, str]] = {
    kind: (t.status.value, t.decision)
    for kind, t in LIFECYCLE.items()
    if t.status is not None and t.decision is not None and kind not in ENDING_KINDS
}


@dataclass(frozen=True)
class Event:
    kind: str
    sim_s: float | None
    detail: str
    by_jobs: tuple[str, ...] = ()
    allocation: list[dict[str, Any]] | None = None


@dataclass
class Interval:
    state: str
    from_s: float | None
    decision: str
    reason: str
    by_jobs: tuple[str, ...] = ()
    allocation: list[dict[str, Any]] | None = None
    to_s: float | None = field(default=None)


def intervals(events: list[Event], waiting_reason: str | None) -> list[Interval]:
    """The job's state intervals in order; the last is open (to_s None) unless the job
    ended. `waiting_reason`: why it waits now, given to an open waiting interval that has
    no reason of its own (a queued job's)."""
    out: list[Interval] = []
    for e in events:
        if e.kind in ENDING_KINDS:
            if out and out[-1].to_s is None:
                out[-1].to_s = e.sim_s if e.sim_s is not None else out[-1].from_s
            break
        step = STEPS.get(e.kind)
        if step is None:
            continue
        state, decision = step
        at = e.sim_s if e.sim_s is not None else (out[-1].from_s if out else None)
        if out:
            out[-1].to_s = at
        if decision == "start" and out and out[-1].state in ("Preempted", "Suspended"):
            decision = "resume" if out[-1].state == "Suspended" else "restart"
        where = e.allocation if state == "Running" else None
        out.append(Interval(state, at, decision, e.detail, e.by_jobs, where))
    last = out[-1] if out else None
    if last is not None and last.to_s is None and last.state != "Running" and not last.reason:
        last.reason = waiting_reason or ""
    return out
