"""Jobs: submit, list, get, cancel, events, why it waits, metrics from running jobs.

A job of another tenant is answered exactly like a job that does not exist (404).
"""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Query, status
from fastapi.exceptions import RequestValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.deps import BackendDep, CurrentUser, MaybeBackendDep, SessionDep, can_see
from api.models import Job, JobEvent, JobMetric, User, utcnow
from api.redaction import redact_texts
from api.schemas.common import Limit, Name, Responses, Skip
from api.schemas.jobs import (
    JobCreate,
    JobCreated,
    JobEventPublic,
    JobEventsPublic,
    JobMetricPublic,
    JobMetricsCreate,
    JobMetricsPublic,
    JobPublic,
    JobsPublic,
    WaitReason,
)
from api.security import JOB_ID, hash_token, new_token, token_matches
from controller.model import JobStatus
from operators.resources import INVALID, UNSCHEDULABLE

router = APIRouter(prefix="/jobs", tags=["jobs"])
NOT_FOUND: Responses = {404: {"description": "no such job (or another tenant's)"}}
# Statuses of a job that waits with a reason; the last two only in cluster mode, where
# a job's status is its DLJob's phase.
WAITING = {s.value for s in (JobStatus.QUEUED, JobStatus.PREEMPTED, JobStatus.SUSPENDED)} | {
    UNSCHEDULABLE,
    INVALID,
}
CONTAINER_FIELDS = {"image", "command", "env"}  # cluster mode: the DLJob's container


def visible_job(session: Session, user: User, job_id: str) -> Job:
    job = session.get(Job, job_id) if JOB_ID.fullmatch(job_id) else None
    if job is None or not can_see(user, job.tenant):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"job {job_id!r} not found")
    return job


@router.post("", status_code=201, response_model=JobCreated, responses={503: {}})
async def submit_job(body: JobCreate, user: CurrentUser, backend: BackendDep) -> JobCreated:
    """Submit a job; it is stored before the scheduler sees it. Returns its metrics token.

    Runs on the event loop: the job is committed together with the other submissions
    waiting (api.group_commit) and acknowledged once that commit returned.
    """
    capacity = backend.gpu_capacity()
    if capacity is not None and body.num_gpus > capacity:
        raise RequestValidationError(
            [
                {
                    "loc": ("body", "num_gpus"),
                    "type": "value_error",
                    "msg": f"more GPUs than the cluster has ({capacity})",
                    "input": body.num_gpus,
                }
            ]
        )
    secret = new_token()
    spec = body.model_dump(exclude=CONTAINER_FIELDS)  # the DLJob keeps those
    spec["min_gpus"] = spec["min_gpus"] or body.num_gpus
    spec["max_gpus"] = spec["max_gpus"] or body.num_gpus
    now = utcnow()
    job = {
        "id": uuid.uuid4().hex,
        "tenant": user.tenant,
        "user_id": user.id,
        "metrics_token_hash": hash_token(secret),
        "status": JobStatus.QUEUED.value,
        "reason_code": None,
        "reason_message": None,
        "progress": 0.0,
        "attained_gpu_s": 0.0,
        "restarts": 0,
        "nodes": "",
        "submit_s": backend.now_s(),
        "first_start_s": None,
        "finish_s": None,
        "created_at": now,
        "updated_at": now,
        **spec,
    }
    event = {
        "job_id": job["id"],
        "kind": "submitted",
        "sim_s": job["submit_s"],
        "detail": "",
        "at": now,
    }
    await backend.submit(job, event, body, secret)  # BackendUnavailable: 503 (api.errors)
    return JobCreated.model_validate({**job, "metrics_token": secret})


@router.get("", response_model=JobsPublic)
def list_jobs(
    session: SessionDep,
    user: CurrentUser,
    skip: Annotated[Skip, Query()] = 0,
    limit: Annotated[Limit, Query()] = 100,
    status_: Annotated[str | None, Query(alias="status", max_length=16)] = None,
    tenant: Annotated[Name | None, Query(description="admins only; others see theirs")] = None,
    user_id: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
) -> JobsPublic:
    """Jobs newest first, filtered by status, tenant, user; paginated by skip/limit."""
    query = select(Job)
    if user.role != "admin":
        query = query.where(Job.tenant == user.tenant)
    elif tenant is not None:
        query = query.where(Job.tenant == tenant)
    if status_ is not None:
        query = query.where(Job.status == status_)
    if user_id is not None:
        query = query.where(Job.user_id == user_id)
    count = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.scalars(query.order_by(Job.created_at.desc(), Job.id).offset(skip).limit(limit))
    return JobsPublic(data=public_jobs(session, user, list(rows)), count=count)


def public_jobs(session: Session, user: User, rows: list[Job]) -> list[JobPublic]:
    """Jobs as `user` may see them: other tenants' job ids redacted from reasons."""
    jobs = [JobPublic.model_validate(j) for j in rows]
    messages = redact_texts(session, user, [j.reason_message for j in jobs])
    return [j.model_copy(update={"reason_message": m}) for j, m in zip(jobs, messages, strict=True)]


@router.get("/{job_id}", response_model=JobPublic, responses=NOT_FOUND)
def get_job(job_id: str, session: SessionDep, user: CurrentUser) -> JobPublic:
    return public_jobs(session, user, [visible_job(session, user, job_id)])[0]


@router.post("/{job_id}/cancel", response_model=JobPublic, responses={**NOT_FOUND, 409: {}})
def cancel_job(
    job_id: str, session: SessionDep, user: CurrentUser, backend: BackendDep
) -> JobPublic:
    job = visible_job(session, user, job_id)
    if not backend.cancel(session, job):
        raise HTTPException(status.HTTP_409_CONFLICT, f"job {job_id!r} is already {job.status}")
    session.commit()
    return public_jobs(session, user, [job])[0]


@router.get("/{job_id}/events", response_model=JobEventsPublic, responses=NOT_FOUND)
def job_events(job_id: str, session: SessionDep, user: CurrentUser) -> JobEventsPublic:
    """The job's history: submitted, started, preempted, finished, cancelled."""
    job = visible_job(session, user, job_id)
    rows = session.scalars(select(JobEvent).where(JobEvent.job_id == job.id).order_by(JobEvent.id))
    events = [JobEventPublic.model_validate(e) for e in rows]
    details = redact_texts(session, user, [e.detail for e in events])
    data = [e.model_copy(update={"detail": d}) for e, d in zip(events, details, strict=True)]
    return JobEventsPublic(data=data, count=len(data))


@router.get("/{job_id}/reason", response_model=WaitReason, responses=NOT_FOUND)
def why_waiting(job_id: str, session: SessionDep, user: CurrentUser) -> WaitReason:
    """Why the job is not running, as the scheduler's last round said."""
    job = visible_job(session, user, job_id)
    return WaitReason(
        job_id=job.id,
        status=job.status,
        waiting=job.status in WAITING,
        code=job.reason_code,
        message=redact_texts(session, user, [job.reason_message])[0],
    )


@router.post(
    "/{job_id}/metrics", status_code=201, response_model=JobMetricsPublic, responses=NOT_FOUND
)
def report_metrics(
    job_id: str,
    body: JobMetricsCreate,
    session: SessionDep,
    backend: MaybeBackendDep,
    x_job_token: Annotated[str, Header(description="the job's metrics_token")],
) -> JobMetricsPublic:
    """A running job reports figures with its own token (not a user token).

    Answered once the rows are committed; in cluster mode the backend then writes the
    job's summary into its DLJob's status.train, later and throttled (api.train_status)."""
    job = session.get(Job, job_id) if JOB_ID.fullmatch(job_id) else None
    if job is None or not token_matches(x_job_token, job.metrics_token_hash):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"job {job_id!r} not found")
    rows = [JobMetric(job_id=job.id, **m.model_dump()) for m in body.metrics]
    session.add_all(rows)
    session.commit()
    if backend is not None:
        backend.metrics_reported(job.id)
    data = [JobMetricPublic.model_validate(r) for r in rows]
    return JobMetricsPublic(data=data, count=len(data))


@router.get("/{job_id}/metrics", response_model=JobMetricsPublic, responses=NOT_FOUND)
def job_metrics(
    job_id: str,
    session: SessionDep,
    user: CurrentUser,
    skip: Annotated[Skip, Query()] = 0,
    limit: Annotated[Limit, Query()] = 1000,
) -> JobMetricsPublic:
    job = visible_job(session, user, job_id)
    query = select(JobMetric).where(JobMetric.job_id == job.id)
    count = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.scalars(query.order_by(JobMetric.id).offset(skip).limit(limit))
    return JobMetricsPublic(data=[JobMetricPublic.model_validate(r) for r in rows], count=count)
