"""Nodes (each GPU's shares and utilisation), the cluster summary and topology: local
mode's LiveCluster or, in cluster mode, the Nodes' published GPU annotations and the
DLJobs' allocations (api.backends); and an admin's cordon, drain and uncordon of a node
(controller.maintenance)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request, Response, status

from api.backends import BackendUnavailable, JobBackend, UnknownNode
from api.deps import AdminUser, BackendDep, CurrentUser, SessionDep
from api.http.errors import unavailable
from api.jobs.redaction import redact_nodes
from api.nodes_answers import NodesAnswers, viewer_of
from api.schemas.cluster import ClusterPublic, NodePublic, NodesPublic, TopologyPublic
from api.store.models import User
from controller.maintenance import NodeAction

router = APIRouter(tags=["cluster"])

ADMIN_RESPONSES: dict[int | str, dict[str, str]] = {
    403: {"description": "not an admin"},
    404: {"description": "no node of that name"},
    503: {"description": "no cluster backend running, or Kubernetes unreachable"},
}


@router.get("/nodes", response_model=NodesPublic)
def list_nodes(
    request: Request, user: CurrentUser, backend: BackendDep, session: SessionDep
) -> Response:
    """Every node: GPUs, GPUs allocated, state, the caller's jobs on it (an admin's: all)
    and how many other tenants' jobs, unnamed."""
    # Built once per state of the nodes and viewer (api.nodes_answers), and serialised
    # by pydantic straight to JSON: FastAPI's validation and dump of a NodesPublic it is
    # handed cost ~0.1 s more at 1,000x8 for the same bytes.
    answers: NodesAnswers = request.app.state.nodes_answers
    viewer = viewer_of(user)
    body = answers.get(backend.nodes_version(), viewer)
    if body is None:
        described = backend.describe()
        data = redact_nodes(session, user, described.nodes)
        body = NodesPublic(data=data, count=len(data)).model_dump_json().encode()
        answers.put(described.version, viewer, body)
    return Response(body, media_type="application/json")


@router.get("/cluster", response_model=ClusterPublic)
def cluster_summary(user: CurrentUser, backend: BackendDep) -> ClusterPublic:
    """Counts, free and fragmented GPUs, and the network allocator's link loads (no job
    ids: every tenant may see it)."""
    return backend.describe(gpus=False).summary


@router.get("/cluster/topology", response_model=TopologyPublic)
def cluster_topology(user: CurrentUser, backend: BackendDep) -> TopologyPublic:
    """Each node type's GPU link matrix (NVLink, PCIe, NUMA) and the racks' nodes."""
    return backend.topology()


@router.post("/nodes/{name}/cordon", response_model=NodePublic, responses=ADMIN_RESPONSES)
def cordon_node(name: str, user: AdminUser, backend: BackendDep) -> NodePublic:
    """No new work on the node; its jobs run on (`kubectl cordon`)."""
    return _maintain(backend, name, NodeAction.CORDON, user)


@router.post("/nodes/{name}/drain", response_model=NodePublic, responses=ADMIN_RESPONSES)
def drain_node(name: str, user: AdminUser, backend: BackendDep) -> NodePublic:
    """Cordon the node and preempt its jobs gracefully (checkpointed): the policy
    places them elsewhere. Each job's events name the node and the admin."""
    return _maintain(backend, name, NodeAction.DRAIN, user)


@router.post("/nodes/{name}/uncordon", response_model=NodePublic, responses=ADMIN_RESPONSES)
def uncordon_node(name: str, user: AdminUser, backend: BackendDep) -> NodePublic:
    """The node takes new work again (ends a cordon or a drain)."""
    return _maintain(backend, name, NodeAction.UNCORDON, user)


def _maintain(backend: JobBackend, name: str, action: NodeAction, user: User) -> NodePublic:
    try:
        return backend.maintain_node(name, action, user.name)
    except UnknownNode:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no node {name!r}") from None
    except BackendUnavailable as exc:
        raise unavailable(str(exc)) from None
