"""The wait order: waiting jobs in the active policy's order (GET /order; GET /queue is its
old name, kept as a deprecated alias for one release). Registered in api/app.py; reads
the job database, which local mode's ticker (api.local_mode.backend) and cluster mode's
follower (api.cluster_mode.follower) keep current, and the backend's clock.

Tenants: a user sees their own waiting jobs at their true positions; other tenants'
jobs are counted (`others_waiting`, and in the positions ahead), never named.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from sqlalchemy import func, select

from api.deps import (
    TENANT_FILTER_FORBIDDEN,
    CurrentUser,
    MaybeBackendDep,
    SessionDep,
    check_tenant_filter,
)
from api.jobs.redaction import redact_texts
from api.schemas.common import Limit, Name, Skip
from api.schemas.order import (
    OrderEntryPublic,
    OrderPublic,
)
from api.store.models import Job
from controller.model import WAITING
from operators.dljobs.resources import BACKOFF, INVALID, UNSCHEDULABLE

router = APIRouter(tags=["order"])
# The statuses of a job that waits with a reason, as the job database has them: the
# model's waiting statuses and, in cluster mode only, three DLJob phases (BackOff, a
# failed job waiting to restart; Unschedulable and Invalid, which no policy considers,
# so they have no position). GET /jobs/{id} says `waiting` for the same (routes/jobs.py).
WAITING_STATUSES = (*sorted(s.value for s in WAITING), BACKOFF, UNSCHEDULABLE, INVALID)
WAITING_PATTERN = "^(" + "|".join(WAITING_STATUSES) + ")$"


@router.get("/order", response_model=OrderPublic, responses=TENANT_FILTER_FORBIDDEN)
@router.get(
    "/queue",
    response_model=OrderPublic,
    responses=TENANT_FILTER_FORBIDDEN,
    deprecated=True,
    summary="The wait order (deprecated: GET /order)",
    operation_id="queue_deprecated",
)
def order(
    session: SessionDep,
    user: CurrentUser,
    backend: MaybeBackendDep,
    tenant: Annotated[Name | None, Query(description="admins: any; users: their own")] = None,
    status_: Annotated[
        str | None,
        Query(alias="status", pattern=WAITING_PATTERN, description="a waiting status"),
    ] = None,
    skip: Annotated[Skip, Query()] = 0,
    limit: Annotated[Limit, Query()] = 1000,
) -> OrderPublic:
    """Waiting jobs in the active policy's order: position, wait so far, reason, tenant."""
    check_tenant_filter(user, tenant)
    waiting = Job.status.in_(WAITING_STATUSES)
    total = session.scalar(select(func.count()).where(waiting)) or 0
    mine = select(func.count()).where(waiting)
    query = select(Job).where(waiting)
    if user.role != "admin":
        mine = mine.where(Job.tenant == user.tenant)
        query = query.where(Job.tenant == user.tenant)
    visible = session.scalar(mine) or 0
    if tenant is not None:
        query = query.where(Job.tenant == tenant)
    if status_ is not None:
        query = query.where(Job.status == status_)
    order = (Job.queue_position.is_(None), Job.queue_position, Job.submit_s, Job.created_at, Job.id)
    rows = list(session.scalars(query.order_by(*order).offset(skip).limit(limit)))
    now = backend.now_s() if backend is not None else None
    messages = redact_texts(session, user, [j.reason_message for j in rows])
    data = [_entry(j, m, now) for j, m in zip(rows, messages, strict=True)]
    return OrderPublic(
        data=data, count=len(data), waiting=total, others_waiting=total - visible, now_s=now
    )


def _entry(job: Job, message: str | None, now: float | None) -> OrderEntryPublic:
    wait = None if now is None or job.submit_s is None else max(0.0, now - job.submit_s)
    return OrderEntryPublic(
        position=job.queue_position,
        id=job.id,
        name=job.name,
        tenant=job.tenant,
        user_id=job.user_id,
        status=job.status,
        num_gpus=job.num_gpus,
        priority=job.priority,
        submit_s=job.submit_s,
        wait_s=wait,
        reason_code=job.reason_code,
        reason_message=message,
    )
