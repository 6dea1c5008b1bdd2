"""A job's worker logs: GET /jobs/{id}/logs.

Scoped as the job itself is (api/routes/jobs.py `visible_job`: another tenant's job
is a 404, as one that does not exist); the lines come from the backend (cluster mode:
the worker pod's log through the Kubernetes API; local mode: none, with a note). A plain
function: FastAPI runs it in a worker thread, where the database and Kubernetes calls
may block.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status

from api.backends import UnknownWorker
from api.deps import BackendDep, CurrentUser, SessionDep
from api.routes.jobs import NOT_FOUND, visible_job
from api.schemas.job_logs import DEFAULT_TAIL_LINES, MAX_TAIL_LINES, JobLogsPublic

router = APIRouter(prefix="/jobs", tags=["jobs"])
MAX_WORKERS = 4096  # a job's most GPUs (api/schemas/jobs.py Gpus): never more workers


@router.get(
    "/{job_id}/logs",
    response_model=JobLogsPublic,
    responses={**NOT_FOUND, 503: {"description": "the Kubernetes API cannot be reached"}},
)
def job_logs(
    job_id: str,
    session: SessionDep,
    user: CurrentUser,
    backend: BackendDep,
    worker: Annotated[
        int, Query(ge=0, lt=MAX_WORKERS, description="the worker's rank (0: the first)")
    ] = 0,
    tail_lines: Annotated[
        int, Query(ge=1, le=MAX_TAIL_LINES, description="how many of the last lines")
    ] = DEFAULT_TAIL_LINES,
) -> JobLogsPublic:
    """The last lines of one worker's stdout and stderr in the job's latest attempt."""
    job = visible_job(session, user, job_id)
    try:
        return backend.worker_logs(job, worker, tail_lines)
    except UnknownWorker as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
