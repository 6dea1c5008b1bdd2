"""The queue in the policy's order (GET /queue) and a job's timeline (GET
/jobs/{id}/timeline). Registered in api/app.py; read the job database, which local
mode's ticker (api.local_mode.backend) and cluster mode's follower (api.cluster_mode.follower) keep
current, and the backend's clock.

Tenants: a user sees their own waiting jobs at their true positions; other tenants'
jobs are counted (`others_waiting`, and in the positions ahead), never named. In a
timeline, a job that took the GPUs of the caller's job is named only if the caller
may see it.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status
from sqlalchemy import func, select

from api.deps import CurrentUser, MaybeBackendDep, SessionDep, can_see
from api.http.security import JOB_ID
from api.jobs.redaction import job_refs, redact_texts
from api.jobs.timeline import Event, intervals
from api.schemas.common import Limit, Name, Skip
from api.schemas.queue import (
    IntervalPublic,
    PlacedPublic,
    QueueEntryPublic,
    QueuePublic,
    TimelinePublic,
)
from api.store.models import Job, JobEvent
from controller.model import WAITING
from operators.dljobs.resources import BACKOFF, INVALID, UNSCHEDULABLE

router = APIRouter(tags=["queue"])
# A waiting job's statuses; the last three only in cluster mode (its DLJob's phase):
# BackOff, a failed job waiting to restart (the policy sees it as preempted), then two
# in which the policy does not consider the job, so it has no position.
WAITING_STATUSES = [*sorted(s.value for s in WAITING), BACKOFF, UNSCHEDULABLE, INVALID]
WAITING_PATTERN = "^(" + "|".join(WAITING_STATUSES) + ")$"


@router.get(
    "/queue",
    response_model=QueuePublic,
    responses={403: {"description": "a user's tenant filter naming another tenant"}},
)
def queue(
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
) -> QueuePublic:
    """Waiting jobs in the active policy's order: position, wait so far, reason, tenant."""
    if tenant is not None and not can_see(user, tenant):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "only admins see another tenant's jobs")
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
    return QueuePublic(
        data=data, count=len(data), waiting=total, others_waiting=total - visible, now_s=now
    )


def _entry(job: Job, message: str | None, now: float | None) -> QueueEntryPublic:
    wait = None if now is None or job.submit_s is None else max(0.0, now - job.submit_s)
    return QueueEntryPublic(
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


@router.get(
    "/jobs/{job_id}/timeline",
    response_model=TimelinePublic,
    responses={404: {"description": "no such job (or another tenant's)"}},
)
def timeline(
    job_id: str, session: SessionDep, user: CurrentUser, backend: MaybeBackendDep
) -> TimelinePublic:
    """The job's states over time, each with the decision and reason that began it, the
    jobs that took its GPUs, and where it ran."""
    job = session.get(Job, job_id) if JOB_ID.fullmatch(job_id) else None
    if job is None or not can_see(user, job.tenant):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"job {job_id!r} not found")
    rows = list(
        session.scalars(select(JobEvent).where(JobEvent.job_id == job.id).order_by(JobEvent.id))
    )
    details: list[str | None] = [e.detail for e in rows]
    texts = redact_texts(session, user, [*details, job.reason_message])
    events = [
        Event(e.kind, e.sim_s, t or "", tuple(e.by_jobs or ()), e.allocation)
        for e, t in zip(rows, texts, strict=False)
    ]
    found = intervals(events, texts[-1])
    refs = job_refs(session, user, {j for i in found for j in i.by_jobs})
    return TimelinePublic(
        job_id=job.id,
        status=job.status,
        now_s=backend.now_s() if backend is not None else None,
        intervals=[
            IntervalPublic(
                state=i.state,
                from_s=i.from_s,
                to_s=i.to_s,
                decision=i.decision,
                reason=i.reason,
                preempted_by=[refs[j] for j in i.by_jobs],
                allocation=None
                if i.allocation is None
                else [PlacedPublic(node=p["node"], gpus=p["gpus"]) for p in i.allocation],
            )
            for i in found
        ],
    )
