"""The cluster-wide event stream's bodies: GET /api/v1/events (api/routes/events.py)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from api.schemas.timeline import JobRef, PlacedPublic


class EventPublic(BaseModel):
    """One change of one job's life, with the job, its tenant, where it ran and who
    took its GPUs."""

    id: int = Field(description="increasing: page back with before_id")
    at: datetime = Field(description="when the service recorded it (wall clock)")
    time_s: float | None = Field(description="on the service's clock (GET /cluster's clock)")
    kind: str = Field(examples=["preempted"])
    job: JobRef
    tenant: str
    nodes: list[PlacedPublic] = Field(description="a start: where it runs")
    by: list[JobRef] = Field(
        description="a stop: the jobs given its GPUs (who preempted it); another "
        "tenant's job has neither id nor name"
    )
    detail: str = Field(description="who acted and why, as recorded")


class EventsPublic(BaseModel):
    data: list[EventPublic] = Field(description="newest first")
    count: int
