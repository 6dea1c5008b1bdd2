"""A job's timeline (GET /jobs/{id}/timeline): its states over time from its recorded
events (api.jobs.timeline). Registered in api/app.py; in a timeline, a job that took the
GPUs of the caller's job is named only if the caller may see it.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status
from sqlalchemy import select

from api.deps import CurrentUser, MaybeBackendDep, SessionDep, can_see
from api.http.security import JOB_ID
from api.jobs.redaction import job_refs, redact_texts
from api.jobs.timeline import Event, intervals
from api.schemas.timeline import IntervalPublic, PlacedPublic, TimelinePublic
from api.store.models import Job, JobEvent

router = APIRouter(tags=["jobs"])


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
