"""Trace, replay and sweep bodies."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import Field

from api.schemas.common import INT32_MAX, Public, Strict, example_config

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
    placement: str = Field(default="consolidated", max_length=32)
    interval_s: float = Field(default=60.0, ge=0, le=1e6)
    seed: int = Field(default=0, ge=0, le=INT32_MAX)
    max_time_s: float | None = Field(default=None, gt=0, le=1e10)


class ReplayCreate(ReplayOptions):
    model_config = example_config({"trace_id": 1, "policy": "srtf", "cluster": "16x4"})

    trace_id: int = Field(ge=1, le=INT32_MAX)
    policy: str = Field(max_length=32)
    cluster: ClusterName


class SweepCreate(ReplayOptions):
    model_config = example_config(
        {"trace_ids": [1], "policies": ["fifo", "srtf"], "clusters": ["8x4"]}
    )

    trace_ids: list[int] = Field(min_length=1, max_length=20)
    policies: list[str] = Field(min_length=1, max_length=20)
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
