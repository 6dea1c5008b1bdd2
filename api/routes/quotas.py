"""The quota tree over REST (issue 18): GET /quotas, /quotas/{name} and /quotas/series
(each quota's GPUs over time, api/quotas/series.py) for everyone (numbers only, no job
named), PUT and DELETE /quotas/{name} for admins; /queues is the old name of the same
routes. Registered in api/routes/__init__.py; the quotas live in the job database in
local mode (api/quotas/tree.py) and as Quota resources in cluster mode
(api/quotas/store.py). The route functions keep their old names (list_queues, ...):
FastAPI makes the OpenAPI document's operationIds from them.

Each quota's state is read from the job database, which local mode's ticker and
cluster mode's follower keep current: GPUs its running jobs hold (an inner quota's
subtree's), how many of them over its guarantee, its waiting jobs by reason, its
finished jobs' mean completion time, and its jobs preempted for a reclaim. A job
belongs to the leaf listing its tenant (the tree's rule, controller.model.quotas).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Annotated, Any, NoReturn

from fastapi import APIRouter, HTTPException, Query, Request, Response, status
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.backends import BackendUnavailable, JobBackend
from api.deps import AdminUser, BackendDep, CurrentUser, SessionDep
from api.field_errors import invalid
from api.quotas.series import quota_series
from api.quotas.store import KubeQuotaStore
from api.quotas.tree import (
    DbQuotaStore,
    Item,
    QuotaStore,
    TreeError,
    checked_tree,
    clean,
    with_change,
)
from api.schemas.quotas import (
    QuotaName,
    QuotaPublic,
    QuotaSeriesPublic,
    QuotaSeriesRow,
    QuotaSpecBody,
    QuotasPublic,
)
from api.store.models import Job, JobEvent
from controller.metrics import jain_index
from controller.model import WAITING, JobStatus
from controller.model.events import EventKind
from controller.model.quotas import QuotaTree
from operators.kube import API_ERRORS

router = APIRouter(tags=["quotas"])
WAITING_VALUES = sorted(s.value for s in WAITING)
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "no quota of that name"}}
# A chart is at most ~1,000 pixel columns wide (as api.replays.series reasons).
MAX_POINTS = 1000


def _store(request: Request, session: Session) -> QuotaStore:
    from api.cluster_mode.backend import ClusterModeBackend

    backend = request.app.state.backend
    if isinstance(backend, ClusterModeBackend):
        return KubeQuotaStore(backend.api)
    return DbQuotaStore(session)


def _items(store: QuotaStore) -> list[Item]:
    try:
        return store.items()
    except API_ERRORS as exc:
        raise BackendUnavailable(f"Kubernetes API: quotas: {exc}") from None


@router.get("", response_model=QuotasPublic)
def list_queues(request: Request, session: SessionDep, user: CurrentUser) -> QuotasPublic:
    store = _store(request, session)
    states = _states(session, store, _items(store))
    shares = [
        s.share_of_guarantee
        for s in states
        if s.leaf and s.share_of_guarantee is not None and (s.allocated_gpus or s.pending_jobs)
    ]
    jain = jain_index(shares) if shares else None
    return QuotasPublic(data=states, count=len(states), fairness_jain=jain)


# Declared before /{name}, which "series" would match.
@router.get("/series", response_model=QuotaSeriesPublic)
def queues_series(
    request: Request,
    session: SessionDep,
    backend: BackendDep,
    user: CurrentUser,
    window_s: Annotated[float, Query(gt=0, le=30 * 86400, description="how far back")] = 3600.0,
    points: Annotated[int, Query(ge=2, le=MAX_POINTS, description="bins in the window")] = 120,
) -> QuotaSeriesPublic:
    """Each quota's GPUs over the last `window_s` of the backend's clock, as the mean
    over each of `points` bins (numbers only, no job named)."""
    store = _store(request, session)
    items = _items(store)
    tree = checked_tree(items, "") if items else None
    now_s = backend.now_s()
    if tree is None:
        return QuotaSeriesPublic(t_s=[], bin_s=window_s / points, now_s=now_s, data=[])
    series = quota_series(session, tree, now_s, window_s, points)
    rows = []
    for name in tree.names():
        node = tree.node(name)
        assert node is not None
        rows.append(
            QuotaSeriesRow(
                name=name,
                leaf=node.leaf,
                guarantee_gpus=node.guarantee.total,
                limit_gpus=None if node.limit is None else node.limit.total,
                gpus=[round(v, 3) for v in series.gpus[name]],
            )
        )
    return QuotaSeriesPublic(t_s=series.t_s, bin_s=series.bin_s, now_s=now_s, data=rows)


@router.get("/{name}", response_model=QuotaPublic, responses=NOT_FOUND)
def get_queue(
    name: QuotaName, request: Request, session: SessionDep, user: CurrentUser
) -> QuotaPublic:
    store = _store(request, session)
    for state in _states(session, store, _items(store)):
        if state.name == name:
            return state
    raise HTTPException(status.HTTP_404_NOT_FOUND, f"quota {name!r} not found")


@router.put("/{name}", response_model=QuotaPublic, responses={201: {}, 403: {}})
def put_queue(
    name: QuotaName,
    body: QuotaSpecBody,
    request: Request,
    response: Response,
    session: SessionDep,
    user: AdminUser,
) -> QuotaPublic:
    """Create or replace a quota (201 when created); the whole tree is checked."""
    store = _store(request, session)
    item = clean({"name": name, **body.model_dump()})
    items = with_change(_items(store), item, name)
    _check(items, name, item)
    _check_fits(request.app.state.backend, item)
    try:
        created = store.put(item)
    except API_ERRORS as exc:
        raise BackendUnavailable(f"Kubernetes API: quota {name}: {exc}") from None
    response.status_code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
    return next(s for s in _states(session, store, items) if s.name == name)


@router.delete("/{name}", status_code=204, responses={**NOT_FOUND, 403: {}})
def delete_queue(name: QuotaName, request: Request, session: SessionDep, user: AdminUser) -> None:
    """Delete a quota; refused (422 naming the child's parent) while it has children."""
    store = _store(request, session)
    items = _items(store)
    if not any(i["name"] == name for i in items):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"quota {name!r} not found")
    _check(with_change(items, None, name), name, None)
    try:
        store.delete(name)
    except API_ERRORS as exc:
        raise BackendUnavailable(f"Kubernetes API: quota {name}: {exc}") from None


def _check(items: list[Item], name: str, item: Item | None) -> None:
    try:
        checked_tree(items, name)
    except TreeError as exc:
        field = exc.field
        loc: tuple[str, ...] = ("body", *field.split(".")) if item is not None else (field,)
        raise invalid(loc, exc.message, item) from None


def _check_fits(backend: JobBackend | None, item: Item) -> None:
    """A quota names only the cluster's GPU models, and a guarantee is at most the
    cluster's GPUs (of its model): a 422 at the field. Not checked before the cluster
    is known (no backend; cluster mode before a GPU node is seen)."""
    nodes = [] if backend is None else backend.describe(gpus=False).nodes
    per_model = Counter[str]()
    for node in nodes:
        per_model[node.gpu_type] += node.gpus
    total = sum(per_model.values())
    if total == 0:
        return
    for field in ("guarantee", "limit"):
        quota = item.get(field)
        if isinstance(quota, int) and field == "guarantee" and quota > total:
            _refuse_field((field,), f"more than the cluster's {total} GPUs", item)
        for model, gpus in quota.items() if isinstance(quota, dict) else ():
            if model not in per_model:
                known = ", ".join(sorted(per_model))
                _refuse_field((field, model), f"no {model!r} GPUs in the cluster ({known})", item)
            if field == "guarantee" and gpus > per_model[model]:
                message = f"more than the cluster's {per_model[model]} {model} GPUs"
                _refuse_field((field, model), message, item)


def _refuse_field(field: tuple[str, ...], message: str, item: Item) -> NoReturn:
    raise invalid(("body", *field), message, item)


def _states(session: Session, store: QuotaStore, items: list[Item]) -> list[QuotaPublic]:
    tree = checked_tree(items, "") if items else None
    if tree is None:
        return []
    operator = store.statuses() if isinstance(store, KubeQuotaStore) else {}
    usage = _usage(session, tree)
    out = []
    for item in items:
        name = item["name"]
        node = tree.node(name)
        assert node is not None
        u = usage[name]
        guarantee = node.guarantee.total
        said: dict[str, Any] = operator.get(name, {})
        out.append(
            QuotaPublic(
                **QuotaSpecBody.model_validate(
                    {k: v for k, v in item.items() if k != "name"}
                ).model_dump(),
                name=name,
                leaf=node.leaf,
                guarantee_gpus=guarantee,
                allocated_gpus=u.allocated,
                borrowed_gpus=max(0, u.allocated - guarantee),
                share_of_guarantee=u.allocated / guarantee if guarantee else None,
                pending_jobs=sum(u.pending.values()),
                pending_by_reason=dict(sorted(u.pending.items())),
                finished_jobs=u.finished,
                avg_jct_s=u.jct_s / u.finished if u.finished else None,
                reclaims=int(said.get("reclaims", u.reclaims)),
                phase=str(said.get("phase", "Active")),
                message=said.get("message"),
            )
        )
    return out


class _Usage:
    def __init__(self) -> None:
        self.allocated = 0
        self.pending: Counter[str] = Counter()
        self.finished = 0
        self.jct_s = 0.0
        self.reclaims = 0


def _usage(session: Session, tree: QuotaTree) -> dict[str, _Usage]:
    """Each quota's figures from the jobs of the tenants its leaves list."""
    usage: dict[str, _Usage] = defaultdict(_Usage)
    live = [JobStatus.RUNNING.value, JobStatus.SUCCEEDED.value, *WAITING_VALUES]
    rows = session.execute(
        select(Job.id, Job.tenant, Job.status, Job.num_gpus, Job.reason_code, Job.submit_s,
               Job.finish_s).where(Job.status.in_(live))
    )  # fmt: skip
    leaf_of_job: dict[str, str] = {}
    for job_id, tenant, status_, gpus, reason, submit_s, finish_s in rows:
        leaf = tree.leaf_for_tenant(tenant)
        if leaf is None:
            continue
        leaf_of_job[job_id] = leaf
        for name in tree.chain(leaf):
            u = usage[name]
            if status_ == JobStatus.RUNNING.value:
                u.allocated += gpus
            elif status_ == JobStatus.SUCCEEDED.value:
                if submit_s is not None and finish_s is not None:
                    u.finished += 1
                    u.jct_s += finish_s - submit_s
            else:
                u.pending[reason or status_] += 1
    reclaimed = session.execute(
        select(JobEvent.job_id, func.count())
        .where(
            JobEvent.kind == EventKind.PREEMPTED, func.lower(JobEvent.detail).contains("reclaim")
        )
        .group_by(JobEvent.job_id)
    )
    for job_id, n in reclaimed:
        if job_id in leaf_of_job:
            for name in tree.chain(leaf_of_job[job_id]):
                usage[name].reclaims += n
    return usage
