"""Cluster, node and policy bodies (local mode's LiveCluster as seen over REST)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from api.schemas.common import Strict, example_config

# "down" (failed, NotReady) wins over "draining" (cordoned, its jobs being preempted),
# which wins over "cordoned" (no new work; its jobs run on).
NodeState = Literal["ready", "cordoned", "draining", "down"]


class NodePublic(BaseModel):
    name: str
    rack: int
    gpu_type: str
    gpus: int
    gpus_allocated: float = Field(description="shared GPUs count by fraction")
    jobs: list[str] = Field(description="the caller's jobs on it (an admin's: every job)")
    other_jobs: int = Field(default=0, description="other tenants' jobs on it, not named")
    state: NodeState = Field(
        default="ready",
        description="ready; cordoned (no new work, its jobs run on); draining (cordoned, "
        "its jobs being preempted); down (down wins)",
    )


class NodesPublic(BaseModel):
    data: list[NodePublic]
    count: int


class ClusterPublic(BaseModel):
    name: str
    nodes: int
    gpus: int
    gpus_allocated: float
    running: int
    waiting: int
    finished: int
    policy: str
    now_s: float = Field(description="the simulated clock (wall time x time scale)")
    time_scale: float


class PolicyPublic(BaseModel):
    name: str
    description: str
    active: bool


class PoliciesPublic(BaseModel):
    data: list[PolicyPublic]
    count: int


class PolicySwitch(Strict):
    model_config = example_config({"name": "srtf"})

    name: str = Field(max_length=32)
