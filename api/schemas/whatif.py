"""What-if bodies: POST /api/v1/whatif (api/routes/whatif.py)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from api.schemas.cluster import Clock
from api.schemas.common import PolicyName, Strict, example_config

MAX_POLICIES = 32  # far more than are registered; bounds the request's cost


class WhatIfRequest(Strict):
    model_config = example_config({"policies": ["fifo", "tiresias", "srtf"]})

    policies: list[PolicyName] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_POLICIES,
        description="registered policy names (GET /policies); default: every one",
    )


class PolicyForecast(BaseModel):
    avg_jct_s: float | None = Field(
        description="mean completion time from each job's submit, over the jobs that finished"
    )
    median_jct_s: float | None
    p95_jct_s: float | None
    makespan_s: float | None = Field(
        description="seconds from now until the last job finishes; null if any does not"
    )
    wall_s: float = Field(description="wall seconds the simulation took")
    unfinished: int = Field(description="jobs with no predicted finish")
    stopped: str | None = Field(
        description='null (ran to the end), "horizon" (simulated-time cap) or "wall-time"'
    )


class WhatIfJob(BaseModel):
    id: str
    name: str
    tenant: str
    status: str
    predicted_finish_s: dict[str, float | None] = Field(
        description="by policy: seconds from now (null: not within the simulation)"
    )
    not_started: dict[str, str] = Field(
        default_factory=dict,
        description="by policy, for those under which the job never starts: why (it can "
        "never start on this cluster, or it still waits when the simulation stops)",
    )


class WhatIfPublic(BaseModel):
    now_s: float = Field(description="the backend's clock when the state was read")
    clock: Clock = Field(description='now_s\'s clock: "wall" (cluster mode) or "simulated"')
    active_policy: str
    cluster: str
    policies: dict[str, PolicyForecast]
    jobs: list[WhatIfJob] = Field(description="the caller's tenant's jobs (an admin's: all)")
    other_tenants_jobs: int = Field(description="other tenants' jobs in the replay, not named")
    approximations: list[str]
