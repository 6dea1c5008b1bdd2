"""The cluster-wide event stream: every job's events, newest first, filterable by kind,
job, tenant and node (GET /api/v1/events), for the dashboard's Events page.

The events are the job database's (api.store.models.JobEvent: what local mode's scheduler
and cluster mode's follower record), so both modes answer alike. A user sees their
tenant's jobs' events, an admin every tenant's; a job named as a preemptor that the
caller may not see is a JobRef with neither id nor name (api.jobs.redaction).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from sqlalchemy import String, cast, select

from api.deps import TENANT_FILTER_FORBIDDEN, CurrentUser, SessionDep, visible_jobs
from api.jobs.redaction import job_refs, redact_texts
from api.schemas.common import INT32_MAX, Limit, Name
from api.schemas.events import EventPublic, EventsPublic
from api.schemas.timeline import PlacedPublic
from api.store.models import Job, JobEvent

router = APIRouter(prefix="/events", tags=["events"])
KIND_PATTERN = r"^[a-z]{1,16}$"  # api.store.models.JobEvent.kind: submitted, started, ...
JOB_ID_PATTERN = r"^[0-9a-f]{32}$"  # api.http.security.JOB_ID
# A Kubernetes node name (RFC 1123 subdomain) or a local-mode one: no LIKE wildcard.
NODE_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$"


@router.get(
    "",
    response_model=EventsPublic,
    responses=TENANT_FILTER_FORBIDDEN,
)
def list_events(
    session: SessionDep,
    user: CurrentUser,
    kind: Annotated[str | None, Query(pattern=KIND_PATTERN)] = None,
    job: Annotated[str | None, Query(pattern=JOB_ID_PATTERN, description="a job id")] = None,
    tenant: Annotated[Name | None, Query(description="admins: any; users: their own")] = None,
    node: Annotated[
        str | None, Query(pattern=NODE_PATTERN, description="events of jobs started there")
    ] = None,
    before_id: Annotated[
        int | None, Query(ge=1, le=INT32_MAX, description="older than this event")
    ] = None,
    limit: Annotated[Limit, Query()] = 200,
) -> EventsPublic:
    """Events of every job the caller may see, newest first: kind, job, tenant, where a
    start placed it, who a stop gave its GPUs to, and the recorded detail."""
    joined = select(JobEvent, Job.tenant).join(Job, Job.id == JobEvent.job_id)
    query = visible_jobs(joined, user, tenant)
    if kind is not None:
        query = query.where(JobEvent.kind == kind)
    if job is not None:
        query = query.where(JobEvent.job_id == job)
    if node is not None:
        # The allocation JSON as SQLAlchemy wrote it (json.dumps: `"node": "<name>"`).
        query = query.where(cast(JobEvent.allocation, String).like(f'%"node": "{node}"%'))
    if before_id is not None:
        query = query.where(JobEvent.id < before_id)
    rows = session.execute(query.order_by(JobEvent.id.desc()).limit(limit)).all()
    events = [r.JobEvent for r in rows]
    ids = {e.job_id for e in events} | {b for e in events for b in e.by_jobs or ()}
    refs = job_refs(session, user, ids)
    details = redact_texts(session, user, [e.detail for e in events])
    data = [
        EventPublic(
            id=e.id,
            at=e.at,
            time_s=e.sim_s,
            kind=e.kind,
            job=refs[e.job_id],
            tenant=tenant_of,
            nodes=[PlacedPublic(node=p["node"], gpus=p["gpus"]) for p in e.allocation or ()],
            by=[refs[b] for b in e.by_jobs or ()],
            detail=text or "",
        )
        for (e, tenant_of), text in zip(rows, details, strict=True)
    ]
    return EventsPublic(data=data, count=len(data))
