"""Ending a job row exactly once: one atomic UPDATE, then its event.

Cluster mode's two writers of job rows call it: the cancel
(api.cluster_mode.backend.ClusterModeBackend.cancel) and the follower
(api.cluster_mode.follower.Follower) when a DLJob is deleted or found gone. The follower also reads
`rowcount` for its own compare-and-set updates.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, update
from sqlalchemy.orm import Session

from api.store.models import TERMINAL_STATUSES, Job, JobEvent


def close(session: Session, job_id: str, status: str, kind: str, at_s: float, detail: str) -> bool:
    """End a job that has not ended (one atomic UPDATE: of two closers, concurrent or
    not, only the first writes its event); False if it had ended already."""
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status.not_in(TERMINAL_STATUSES))
        .values(
            status=status,
            reason_code=None,
            reason_message=None,
            finish_s=func.coalesce(Job.finish_s, at_s),
        )
        .execution_options(synchronize_session=False)
    )
    if rowcount(result) != 1:
        return False
    session.add(JobEvent(job_id=job_id, kind=kind, sim_s=at_s, detail=detail))
    session.flush()
    return True


def rowcount(result: Any) -> int:
    """The rows an UPDATE matched (`Session.execute` is typed as returning a Result,
    which declares no rowcount)."""
    return int(result.rowcount)
