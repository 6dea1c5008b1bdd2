"""A job's lifecycle: the kinds of event in its history, and one table of what each does.

The history the API records (api.local_mode.history from the simulator's states,
api.cluster_mode.history from DLJob conditions, the routes for submissions and
cancellations) writes these kinds; the timeline (api.jobs.timeline), the quotas'
series (api.quotas.series) and the event stream read them back through `LIFECYCLE`, and
the operator's Kubernetes Events name a stop by the same words (operators/applier.py).
Adding a kind is one member and one row here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from controller.model.job import JobStatus
from controller.model.snapshot import Action


class EventKind(StrEnum):
    SUBMITTED = "submitted"
    ADMITTED = "admitted"  # quotas let it in (cluster mode's Admitted condition)
    STARTED = "started"
    PREEMPTED = "preempted"
    SUSPENDED = "suspended"
    RESIZED = "resized"
    MIGRATED = "migrated"
    RESHARED = "reshared"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class Transition:
    """What one event does to its job: the status afterwards (None: unchanged), the
    decision that began it as a timeline shows it (None: no new interval, or the end),
    and whether the job holds GPUs afterwards (None: unchanged)."""

    status: JobStatus | None
    decision: str | None
    holds_gpus: bool | None


# The lifecycle, one row per kind. A start, and a move of a running job in one go
# (resize, migrate, reshare), leave it Running on GPUs; a stop leaves it waiting without
# them; the three ends close its history. An admission changes nothing it holds.
LIFECYCLE: Mapping[EventKind, Transition] = {
    EventKind.SUBMITTED: Transition(JobStatus.QUEUED, "submit", None),
    EventKind.ADMITTED: Transition(None, None, None),
    EventKind.STARTED: Transition(JobStatus.RUNNING, Action.START.value, True),
    EventKind.PREEMPTED: Transition(JobStatus.PREEMPTED, Action.PREEMPT.value, False),
    EventKind.SUSPENDED: Transition(JobStatus.SUSPENDED, Action.SUSPEND.value, False),
    EventKind.RESIZED: Transition(JobStatus.RUNNING, Action.RESIZE.value, True),
    EventKind.MIGRATED: Transition(JobStatus.RUNNING, Action.MIGRATE.value, True),
    EventKind.RESHARED: Transition(JobStatus.RUNNING, Action.RESHARE.value, True),
    EventKind.FINISHED: Transition(JobStatus.SUCCEEDED, None, False),
    EventKind.FAILED: Transition(JobStatus.FAILED, None, False),
    EventKind.CANCELLED: Transition(JobStatus.CANCELLED, None, False),
}
_ENDED = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED}
ENDING_KINDS = frozenset(k for k, t in LIFECYCLE.items() if t.status in _ENDED)

# The plan's actions that are one event each (a stop, or a move of a running job in one
# go, not a stop and a start); a start and a resume are `STARTED`.
EVENT_OF_ACTION: Mapping[Action, EventKind] = {
    Action.PREEMPT: EventKind.PREEMPTED,
    Action.SUSPEND: EventKind.SUSPENDED,
    Action.RESIZE: EventKind.RESIZED,
    Action.MIGRATE: EventKind.MIGRATED,
    Action.RESHARE: EventKind.RESHARED,
}
MOVES: Mapping[Action, EventKind] = {
    a: k for a, k in EVENT_OF_ACTION.items() if LIFECYCLE[k].status is JobStatus.RUNNING
}
