"""Jobs: submit, list, get, cancel, events, why it waits, metrics from running jobs.

A job of another tenant is answered exactly like a job that does not exist (404).
"""

from __future__ import annotations

import uuid
from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Header, HTTPException, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from api.backends import JobBackend
from api.deps import (
    TENANT_FILTER_FORBIDDEN,
    BackendDep,
    CurrentUser,
    MaybeBackendDep,
    SessionDep,
    SettingsDep,
    can_see,
    visible_jobs,
)
from api.field_errors import invalid
from api.http.security import JOB_ID, hash_token, new_token, token_matches
from api.jobs.redaction import redact_texts
from api.routes.order import WAITING_STATUSES
from api.routes.policies import active_policy_name
from api.routes.whatif import GATE as WHATIF_GATE
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
from api.store.idempotency import (
    JOBS,
    KeyReused,
    KeyTaken,
    fingerprint,
    first_answer,
    job_claim,
    reused_error,
    update_answer,
)
from api.store.models import (
    IDEMPOTENCY_KEY_LEN,
    Job,
    JobEvent,
    JobMetric,
    User,
    utcnow,
)
from api.whatif.deadline_outlook import Forecasts, needs_forecast, outlook
from controller.model import JobStatus
from controller.model.events import EventKind
from operators.dljobs.resources import ADMITTED, BACKOFF, INVALID, UNSCHEDULABLE

router = APIRouter(prefix="/jobs", tags=["jobs"])
FORECASTS = Forecasts()  # the deadline jobs' predicted finishes, shared by GET /jobs/{id}
NOT_FOUND: Responses = {404: {"description": "no such job (or another tenant's)"}}
CONTAINER_FIELDS = {"image", "command", "env"}  # cluster mode: the DLJob's container
# What a job's status can be: the scheduler's, and in cluster mode its DLJob's phase.
STATUSES = (*(s.value for s in JobStatus), ADMITTED, BACKOFF, UNSCHEDULABLE, INVALID)
STATUS_PATTERN = "^(" + "|".join(STATUSES) + ")$"


def visible_job(session: Session, user: User, job_id: str) -> Job:
    job = session.get(Job, job_id) if JOB_ID.fullmatch(job_id) else None
    if job is None or not can_see(user, job.tenant):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"job {job_id!r} not found")
    return job


IdempotencyKeyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=IDEMPOTENCY_KEY_LEN,
        pattern=r"^[\x21-\x7e]+$",
        description="a retry with the same key (same user, same body, within 24 h) gets "
        "the first answer and creates no second job",
    ),
]


@router.post("", status_code=201, response_model=JobCreated, responses={503: {}})
async def submit_job(
    body: JobCreate,
    user: CurrentUser,
    backend: BackendDep,
    request: Request,
    idempotency_key: IdempotencyKeyHeader = None,
) -> JobCreated:
    """Submit a job; it is stored before the scheduler sees it. Returns its metrics token.

    Runs on the event loop: the job is committed together with the other submissions
    waiting (api.store.group_commit) and acknowledged once that commit returned. With an
    `Idempotency-Key`, a retry of the same request answers as the first (api.store.idempotency).
    """
    capacity = backend.gpu_capacity()
    if capacity is not None and body.num_gpus > capacity:
        msg = f"more GPUs than the cluster has ({capacity})"
        raise invalid(("body", "num_gpus"), msg, body.num_gpus)
    if idempotency_key is not None:
        return await submit_keyed(request, body, user, backend, idempotency_key)
    secret = new_token()
    job, event = new_job(body, user, backend, uuid.uuid4().hex, secret)
    await backend.accept(job, event, body, secret)  # BackendUnavailable: 503 (api.http.errors)
    return created(job, secret)


def new_job(
    body: JobCreate, user: User, backend: JobBackend, job_id: str, secret: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A new job's row (Job column values) and its "submitted" event."""
    spec = body.model_dump(exclude=CONTAINER_FIELDS | {"deadline"})  # the DLJob keeps those
    spec["min_gpus"] = spec["min_gpus"] or body.num_gpus
    spec["max_gpus"] = spec["max_gpus"] or body.num_gpus
    now = utcnow()
    try:
        spec["deadline_s"] = body.deadline_after(now)
    except ValueError as exc:
        msg = f"the deadline must be in the future, within reach: {exc}"
        deadline = body.deadline.isoformat() if body.deadline else None
        raise invalid(("body", "deadline"), msg, deadline) from None
    job = {
        "id": job_id,
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
    event = {"job_id": job_id, "kind": EventKind.SUBMITTED, "sim_s": job["submit_s"], "detail": ""}
    return job, {**event, "at": now}


def created(job: dict[str, Any], secret: str) -> JobCreated:
    return JobCreated.model_validate({**job, "metrics_token": secret})


async def submit_keyed(
    request: Request, body: JobCreate, user: User, backend: JobBackend, key: str
) -> JobCreated:
    """Submit under an idempotency key: a new job if the key is new (the key's claim
    stored with it, in one transaction), else the first request's job and answer;
    never a second job for one key."""
    secret = new_token()
    job, event = new_job(body, user, backend, uuid.uuid4().hex, secret)
    answer = created(job, secret)
    body_fingerprint = fingerprint(body.model_dump_json())
    claim = job_claim(user.id, key, body_fingerprint, answer.model_dump(mode="json"))
    try:
        await backend.accept(job, event, body, secret, claim)
        return answer
    except (KeyTaken, IntegrityError) as exc:
        taken = exc  # the key was claimed first by another request (or another process)
    sessions = request.app.state.sessions
    try:
        earlier = await run_in_threadpool(first_answer, sessions, user.id, key, body_fingerprint)
    except KeyReused as exc:
        raise reused_error(exc, JOBS) from None
    if earlier is None:
        if isinstance(taken, IntegrityError):
            raise taken  # not the key: another constraint refused the row (409)
        # Claimed, then expired in the instant since: the key is new again.
        return await submit_keyed(request, body, user, backend, key)
    first = JobCreated.model_validate(earlier.response)
    if earlier.stored:
        return first
    # A claim stored alone, by a version that claimed keys in a transaction of their
    # own, whose job was not stored: store it now, under the same id and metrics token.
    job, event = new_job(body, user, backend, first.id, first.metrics_token)
    try:
        await backend.accept(job, event, body, first.metrics_token)
    except IntegrityError:  # stored meanwhile by another retry: the first answer stands
        return first
    answer = created(job, first.metrics_token)
    await run_in_threadpool(update_answer, sessions, user.id, key, answer.model_dump(mode="json"))
    return answer


@router.get(
    "",
    response_model=JobsPublic,
    responses=TENANT_FILTER_FORBIDDEN,
)
def list_jobs(
    session: SessionDep,
    user: CurrentUser,
    skip: Annotated[Skip, Query()] = 0,
    limit: Annotated[Limit, Query()] = 100,
    status_: Annotated[
        str | None, Query(alias="status", pattern=STATUS_PATTERN, description="a job status")
    ] = None,
    tenant: Annotated[Name | None, Query(description="admins: any; users: their own")] = None,
    user_id: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
) -> JobsPublic:
    """Jobs newest first, filtered by status, tenant, user; paginated by skip/limit."""
    query = visible_jobs(select(Job), user, tenant)
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
def get_job(
    job_id: str,
    request: Request,
    session: SessionDep,
    user: CurrentUser,
    backend: MaybeBackendDep,
    settings: SettingsDep,
) -> JobPublic:
    """The job, with its speed on each GPU type it has run on; with a deadline, that
    deadline beside its predicted finish."""
    job = visible_job(session, user, job_id)
    public = public_jobs(session, user, [job])[0]
    if backend is not None:
        public.type_throughput = backend.type_throughput(job)
    if job.deadline_s is None:
        return public
    predicted = None
    if backend is not None and needs_forecast(job):
        policy = active_policy_name(request)
        predicted = FORECASTS.predicted(job.id, backend, settings, policy, WHATIF_GATE)
    return public.model_copy(update=asdict(outlook(job, predicted)))


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
        waiting=job.status in WAITING_STATUSES,
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
    job's summary into its DLJob's status.train, later and throttled
    (api.cluster_mode.train_status)."""
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
