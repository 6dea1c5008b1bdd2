"""A job's timeline: TimelinePublic (GET /jobs/{id}/timeline), built by api.routes.timeline."""

from __future__ import annotations

from pydantic import BaseModel, Field


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
