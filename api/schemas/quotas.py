"""Bodies of the quota tree's routes (api/routes/quotas.py): QuotaSpecBody to
create or replace a quota, QuotaPublic and QuotasPublic to read them."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from api.schemas.common import WHOLE
from controller.quotas.spec import MAX_WEIGHT
from controller.spec.types import MAX_GPUS

QUOTA_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"  # a DNS label, as a Quota's name
QuotaName = Annotated[str, Field(pattern=QUOTA_NAME_PATTERN, max_length=63, examples=["team-a"])]
# At most the largest cluster's GPUs (the route checks the cluster's own size).
Gpus = Annotated[int, Field(ge=0, le=MAX_GPUS, strict=True), WHOLE]
Quota = Gpus | dict[Annotated[str, Field(min_length=1, max_length=100)], Gpus]


class QuotaSpecBody(BaseModel):
    """A quota as an admin defines it (the Quota resource's spec, docs/quotas.md)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    parent: QuotaName | None = Field(None, description="the parent quota; null for a root")
    guarantee: Quota | None = Field(
        None,
        description="GPUs always given when it has the work: a number of GPUs of any model, "
        "or GPUs per model; null: 0 for a leaf, its children's sum for an inner quota",
        examples=[64, {"A100": 32}],
    )
    limit: Quota | None = Field(None, description="most GPUs, borrowed included; null: none")
    weight: float = Field(
        1.0,
        gt=0,
        le=MAX_WEIGHT,
        strict=True,
        description="its part of what is left over guarantees",
    )
    tenants: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(
        default_factory=list, description="tenants whose jobs go here; default, its name"
    )


class QuotaPublic(QuotaSpecBody):
    name: str
    leaf: bool
    guarantee_gpus: int = Field(description="the guarantee in GPUs, every model together")
    allocated_gpus: int = Field(description="GPUs its running jobs hold (its subtree's)")
    borrowed_gpus: int = Field(description="of those, GPUs over its guarantee")
    share_of_guarantee: float | None = Field(
        description="allocated over guarantee (1.0: exactly its guarantee); null for 0"
    )
    pending_jobs: int
    pending_by_reason: dict[str, int] = Field(examples=[{"QueueAtLimit": 2}])
    finished_jobs: int
    avg_jct_s: float | None = Field(description="mean completion time of its finished jobs")
    reclaims: int = Field(description="its jobs preempted to give another quota its guarantee")
    phase: str = Field(examples=["Active"], description="Invalid: the operator refused it")
    message: str | None = None


class QuotasPublic(BaseModel):
    data: list[QuotaPublic]
    count: int
    fairness_jain: float | None = Field(
        description="Jain's index of the leaves' allocated/guarantee over those with demand "
        "(running or waiting jobs); null when fewer than one leaf has a guarantee and demand"
    )


class QuotaSeriesRow(BaseModel):
    name: str
    leaf: bool
    guarantee_gpus: int
    limit_gpus: int | None
    gpus: list[float] = Field(description="mean GPUs its jobs held over each bin")


class QuotaSeriesPublic(BaseModel):
    """Each quota's GPUs over time (api/quotas/series.py), for the dashboard's chart."""

    t_s: list[float] = Field(description="each bin's start, in the backend's clock")
    bin_s: float
    now_s: float
    data: list[QuotaSeriesRow]
