"""Queue and timeline bodies: QueuePublic (GET /queue) and TimelinePublic
(GET /jobs/{id}/timeline), built by api.routes.queue."""

from __future__ import annotations

from pydantic import BaseModel, Field


class QueueEntryPublic(BaseModel):
    """A waiting job at its place in the active policy's order."""

    position: int | None = Field(
        description="1-based place in the policy's order among every waiting job, all "
        "tenants counted; null until the next scheduling round has placed it"
    )
    id: str
    name: str
    tenant: str
    user_id: int
    status: str = Field(examples=["Queued"])
    num_gpus: int
    priority: int
    submit_s: float | None
    wait_s: float | None = Field(description="seconds waited so far, on the backend's clock")
    reason_code: str | None = Field(examples=["QueuedBehind"])
    reason_message: str | None


class QueuePublic(BaseModel):
    data: list[QueueEntryPublic]
    count: int = Field(description="entries in data (the filters applied)")
    waiting: int = Field(description="jobs waiting in the whole cluster, every tenant")
    others_waiting: int = Field(
        description="of those, jobs the caller may not see (other tenants'): counted, never named"
    )
    now_s: float | None = Field(description="the backend's clock; null without a backend")


class JobRef(BaseModel):
    """A job named in another's history: null id and name for another tenant's job."""

    id: str | None
    name: str | None


class PlacedPublic(BaseModel):
    node: str
    gpus: list[int]


class IntervalPublic(BaseModel):
    """One stretch of a job's life in one state, and the decision that began it."""

    state: str = Field(examples=["Running"])  # Queued, Running, Preempted, Suspended
    from_s: float | None
    to_s: float | None = Field(description="null while the job is still in this state")
    decision: str = Field(examples=["start"])
    # submit, start, preempt, suspend, resize, migrate, reshare
    reason: str = Field(description="why: the plan's reason, the restart, or why it waits")
    preempted_by: list[JobRef] = Field(
        description="preempt, suspend, resize, migrate: the jobs given its GPUs in that round"
    )
    allocation: list[PlacedPublic] | None = Field(
        description="while running: the nodes and GPU indices it holds"
    )


class TimelinePublic(BaseModel):
    job_id: str
    status: str
    now_s: float | None = Field(description="the backend's clock; null without a backend")
    intervals: list[IntervalPublic]
