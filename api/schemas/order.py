"""The wait order's bodies: OrderPublic (GET /order, and its old name GET /queue), built by
api.routes.order."""

from __future__ import annotations

from pydantic import BaseModel, Field


class OrderEntryPublic(BaseModel):
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


class OrderPublic(BaseModel):
    data: list[OrderEntryPublic]
    count: int = Field(description="entries in data (the filters applied)")
    waiting: int = Field(description="jobs waiting in the whole cluster, every tenant")
    others_waiting: int = Field(
        description="of those, jobs the caller may not see (other tenants'): counted, never named"
    )
    now_s: float | None = Field(description="the backend's clock; null without a backend")
