"""Nodes and the cluster summary, read from local mode's LiveCluster."""

from __future__ import annotations

from collections import defaultdict

from fastapi import APIRouter

from api.deps import CurrentUser, LocalDep
from api.schemas.cluster import ClusterPublic, NodePublic, NodesPublic
from controller.model import WAITING, JobStatus

router = APIRouter(tags=["cluster"])


@router.get("/nodes", response_model=NodesPublic)
def list_nodes(user: CurrentUser, local: LocalDep) -> NodesPublic:
    """Every node: GPUs, GPUs allocated, the jobs on it (ids of any tenant)."""
    allocated: dict[int, float] = defaultdict(float)
    jobs: dict[int, list[str]] = defaultdict(list)
    for state in local.live.jobs():
        if state.status is JobStatus.RUNNING and state.allocation is not None:
            for share in state.allocation:
                allocated[share.node] += share.fraction
            for node in state.allocation.nodes:
                jobs[node].append(state.job_id)
    data = [
        NodePublic(
            name=node.name,
            rack=node.rack,
            gpu_type=node.gpu_type.name,
            gpus=node.num_gpus,
            gpus_allocated=allocated[i],
            jobs=jobs[i],
        )
        for i, node in enumerate(local.live.cluster.nodes)
    ]
    return NodesPublic(data=data, count=len(data))


@router.get("/cluster", response_model=ClusterPublic)
def cluster_summary(user: CurrentUser, local: LocalDep) -> ClusterPublic:
    live = local.live
    states = live.jobs()
    running = [s for s in states if s.status is JobStatus.RUNNING]
    return ClusterPublic(
        name=live.cluster.name,
        nodes=len(live.cluster.nodes),
        gpus=live.cluster.num_gpus,
        gpus_allocated=sum(s.allocation.gpu_weight for s in running if s.allocation),
        running=len(running),
        waiting=sum(1 for s in states if s.status in WAITING),
        finished=sum(1 for s in states if s.status is JobStatus.SUCCEEDED),
        policy=live.policy_name,
        now_s=live.now_s(),
        time_scale=live.time_scale,
    )
