"""Nodes and the cluster summary: local mode's LiveCluster or, in cluster mode, the
Nodes' published GPU annotations and the DLJobs' allocations (api.backends)."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import BackendDep, CurrentUser, SessionDep
from api.redaction import redact_nodes
from api.schemas.cluster import ClusterPublic, NodesPublic

router = APIRouter(tags=["cluster"])


@router.get("/nodes", response_model=NodesPublic)
def list_nodes(user: CurrentUser, backend: BackendDep, session: SessionDep) -> NodesPublic:
    """Every node: GPUs, GPUs allocated, the caller's jobs on it (an admin's: all) and
    how many other tenants' jobs, unnamed."""
    data = redact_nodes(session, user, backend.describe().nodes)
    return NodesPublic(data=data, count=len(data))


@router.get("/cluster", response_model=ClusterPublic)
def cluster_summary(user: CurrentUser, backend: BackendDep) -> ClusterPublic:
    return backend.describe().summary
