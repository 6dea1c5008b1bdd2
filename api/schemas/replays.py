"""Trace, replay and sweep bodies."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import Field, field_validator

from api.schemas.common import INT32_MAX, WHOLE, PolicyName, Public, Strict, example_config
from controller.placement import PLACERS
from controller.sim.config import MAX_ROUND_INTERVAL_S, MIN_ROUND_INTERVAL_S


def _known_placements(schema: dict[str, Any]) -> None:
    """The placers' names, declared; the route refuses any other with a 422."""
    schema["enum"] = sorted(PLACERS)


# A cluster is a preset (optionally :N nodes) or NODESxGPUS; never a server path.
CLUSTER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,40}(:[0-9]{1,4})?$"
ClusterName = Annotated[
    str, Field(pattern=CLUSTER_PATTERN, max_length=46, examples=["16x4", "dgx-a100:8"])
]


class TracePublic(Public):
    id: int
    tenant: str
    name: str
    fmt: str
    jobs: int
    skipped: int
    span_s: float
    created_at: datetime


class TracesPublic(Public):
    data: list[TracePublic]
    count: int


class TraceCheck(Public):
    name: str
    fmt: str
    jobs: int
    skipped: int
    gpus_max: int
    span_s: float


class ReplayOptions(Strict):
    placement: str = Field(
        default="consolidated", max_length=32, json_schema_extra=_known_placements
    )
    # 0 (a round at every change) or MIN_ROUND_INTERVAL_S..MAX_ROUND_INTERVAL_S; strict:
    # `false` is not 0.
    interval_s: float = Field(
        default=60.0,
        ge=0,
        le=MAX_ROUND_INTERVAL_S,
        strict=True,
        json_schema_extra={"anyOf": [{"const": 0}, {"minimum": MIN_ROUND_INTERVAL_S}]},
    )
    seed: Annotated[int, Field(ge=0, le=INT32_MAX, strict=True), WHOLE] = 0  # `false` is no seed
    max_time_s: float | None = Field(default=None, gt=0, le=1e10, strict=True)

    @field_validator("interval_s")
    @classmethod
    def _a_round_interval(cls, value: float) -> float:
        if 0 < value < MIN_ROUND_INTERVAL_S:
            raise ValueError(f"must be 0 or at least {MIN_ROUND_INTERVAL_S:g} s")
        return value


class ReplayCreate(ReplayOptions):
    model_config = example_config({"trace_id": 1, "policy": "srtf", "cluster": "16x4"})

    trace_id: Annotated[int, Field(ge=1, le=INT32_MAX, strict=True), WHOLE]
    policy: PolicyName
    cluster: ClusterName


class SweepCreate(ReplayOptions):
    model_config = example_config(
        {"trace_ids": [1], "policies": ["fifo", "srtf"], "clusters": ["8x4"]}
    )

    trace_ids: list[Annotated[int, Field(ge=1, le=INT32_MAX, strict=True), WHOLE]] = Field(
        min_length=1, max_length=20
    )
    policies: list[PolicyName] = Field(min_length=1, max_length=20)
    clusters: list[ClusterName] = Field(min_length=1, max_length=20)


class ReplayPublic(Public):
    id: int
    tenant: str
    trace_id: int
    sweep_id: int | None
    policy: str
    cluster: str
    placement: str
    interval_s: float
    seed: int
    max_time_s: float | None
    status: str = Field(examples=["running"])
    progress: float
    error: str | None
    plots: list[str] = Field(description="names for GET /replays/{id}/plots/{name}")
    created_at: datetime
    finished_at: datetime | None


class ReplaysPublic(Public):
    data: list[ReplayPublic]
    count: int


class ReplayResults(Public):
    id: int
    status: str
    headline: dict[str, Any] | None
    summary: dict[str, Any] | None


class SweepPublic(Public):
    id: int
    status: str
    progress: float
    replays: list[ReplayPublic]


class ReplayTimeline(Public):
    """The cluster after each scheduling round (controller.records.TimelineSample)."""

    t_s: list[float]
    gpus_total: list[float] = Field(description="GPUs on nodes that are up")
    gpus_allocated: list[float] = Field(description="held by running jobs (shares by fraction)")
    gpus_busy: list[float] = Field(description="GPUs' worth of compute in use")
    queued: list[float] = Field(description="active jobs not running: the queue's length")
    running: list[float]


class ReplayFairness(Public):
    """The summary's fairness figures and the per-job Themis finish-time fairness rho."""

    ftf_jobs: int | None = Field(description="jobs with a defined rho")
    jain_index: float | None
    avg_ftf_rho: float | None
    max_ftf_rho: float | None
    frac_ftf_rho_gt_1: float | None
    ftf_rho: list[float] = Field(description="sorted (thinned to quantiles past 2,000)")
    ftf_fraction: list[float] = Field(description="fraction of jobs at or below each rho")


class ReplaySeries(Public):
    """What the dashboard charts of one succeeded replay (api.replays.series)."""

    id: int
    policy: str
    cluster: str
    jobs: int
    jct_s: list[float] = Field(description="finished jobs' JCTs, sorted (thinned past 2,000)")
    jct_fraction: list[float] = Field(description="fraction of finished jobs at or below each")
    timeline: ReplayTimeline
    fairness: ReplayFairness
