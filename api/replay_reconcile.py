"""Replays left behind by a runner that died: found at start-up and then every minute.

Called by the API's lifespan (api.app) and by a Celery worker as it starts
(api.tasks). A replay is never left "running" or "queued" forever:

- in-process (no broker), the API process is the only runner, so at its start every
  replay still running was interrupted (failed, with that reason) and every queued
  one lost its place in the thread pool (queued again);
- with a broker, queued replays wait in the broker, and a running replay whose
  heartbeat (api.replay_run) is older than settings.replay_stale_after_s lost its
  worker: failed, with that reason. A replay is not re-run after a crash: it may be
  what crashed its runner.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy import or_, select
from sqlalchemy.orm import Session, sessionmaker

from api.models import Replay, utcnow

log = logging.getLogger(__name__)
INTERRUPTED_ERROR = "interrupted: the service restarted while it ran; submit it again"
ORPHANED_ERROR = "interrupted: its worker stopped answering (no heartbeat for {s:.0f} s)"


@dataclass
class Reconciled:
    failed: list[int] = field(default_factory=list)
    requeued: list[int] = field(default_factory=list)


def reconcile_at_start(sessions: sessionmaker[Session]) -> Reconciled:
    """In-process mode, as the service starts: the replays of the process before."""
    done = Reconciled()
    with sessions() as session:
        rows = session.scalars(
            select(Replay).where(Replay.status.in_(("queued", "running"))).order_by(Replay.id)
        ).all()
        for row in rows:
            if row.status == "running":
                _fail(row, INTERRUPTED_ERROR)
                done.failed.append(row.id)
            else:
                done.requeued.append(row.id)
        session.commit()
    _log(done)
    return done


def reconcile_orphans(sessions: sessionmaker[Session], stale_after_s: float) -> Reconciled:
    """Running replays whose heartbeat is older than `stale_after_s`: failed."""
    done = Reconciled()
    cutoff = utcnow() - timedelta(seconds=stale_after_s)
    with sessions() as session:
        stale = or_(Replay.heartbeat_at.is_(None), Replay.heartbeat_at < cutoff)
        rows = session.scalars(
            select(Replay).where(Replay.status == "running", stale).with_for_update()
        ).all()
        for row in rows:
            _fail(row, ORPHANED_ERROR.format(s=stale_after_s))
            done.failed.append(row.id)
        session.commit()
    _log(done)
    return done


def _fail(row: Replay, reason: str) -> None:
    row.status = "failed"
    row.error = reason
    row.finished_at = utcnow()


def _log(done: Reconciled) -> None:
    if done.failed or done.requeued:
        log.warning(
            "replays failed as interrupted: %s; queued again: %s", done.failed, done.requeued
        )
