"""Replays left behind by a runner that died or a task that was lost: found at
start-up and then every settings.replay_reconcile_every_s.

Called through api.tasks (`start_replays`, `reconcile`) by the API's lifespan and its
periodic check (api.app), with or without a broker, and by a Celery worker as it
starts. A replay is never left "running" or "queued" forever, and so never holds a
slot of its tenant's cap (api.routes.replays) for longer than these bounds:

- in-process (no broker), the API process is the only runner, so at its start every
  replay still running was interrupted (failed, with that reason) and every queued
  one sent to the old process is waiting again (the dispatcher sends it anew);
- a running replay whose heartbeat (api.replays.run) is older than
  settings.replay_stale_after_s lost its worker: failed, with that reason. A replay
  is not re-run after a crash: it may be what crashed its runner;
- a queued replay sent to a runner (api.replays.dispatch) more than
  settings.replay_start_timeout_s ago and still not started lost its task (a broker
  restarted empty, a worker killed before it acknowledged): waiting again, so that
  the dispatcher sends it anew, or failed with that reason once it was sent
  settings.replay_max_dispatches times. The dispatcher never sends more replays
  than there are slots, so a task sent is started at once unless it was lost; one
  delivered after all runs once (api.replays.run).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy import or_, select
from sqlalchemy.orm import Session, sessionmaker

from api.store.models import Replay, utcnow

log = logging.getLogger(__name__)
INTERRUPTED_ERROR = "interrupted: the service restarted while it ran; submit it again"
ORPHANED_ERROR = "interrupted: its worker stopped answering (no heartbeat for {s:.0f} s)"
LOST_ERROR = (
    "never started: sent to a runner {n} times, and no runner started it within {s:g} s "
    "of any (a broker that lost its queue, or no worker on it); submit it again"
)


@dataclass
class Reconciled:
    failed: list[int] = field(default_factory=list)
    requeued: list[int] = field(default_factory=list)  # waiting to be sent again


def reconcile_at_start(sessions: sessionmaker[Session]) -> Reconciled:
    """In-process mode, as the service starts: the replays of the process before."""
    done = Reconciled()
    with sessions() as session:
        rows = session.scalars(
            select(Replay).where(Replay.status.in_(("queued", "running"))).order_by(Replay.id)
        ).all()
        for row in rows:
            if row.status == "running":
                _fail(row, INTERRUPTED_ERROR, done)
            else:
                _requeue(row, done)
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
            _fail(row, ORPHANED_ERROR.format(s=stale_after_s), done)
        session.commit()
    _log(done)
    return done


def reconcile_lost(
    sessions: sessionmaker[Session], start_timeout_s: float, max_dispatches: int
) -> Reconciled:
    """Queued replays sent more than `start_timeout_s` ago and not started: waiting
    again, or failed once sent `max_dispatches` times."""
    done = Reconciled()
    cutoff = utcnow() - timedelta(seconds=start_timeout_s)
    with sessions() as session:
        rows = session.scalars(
            select(Replay)
            .where(Replay.status == "queued", Replay.dispatched_at < cutoff)
            .with_for_update()
        ).all()
        for row in rows:
            if row.dispatches >= max_dispatches:
                _fail(row, LOST_ERROR.format(n=row.dispatches, s=start_timeout_s), done)
            else:
                _requeue(row, done)
        session.commit()
    _log(done)
    return done


def _requeue(row: Replay, done: Reconciled) -> None:
    """Waiting again: the dispatcher sends a queued replay with no dispatch time."""
    row.dispatched_at = None
    done.requeued.append(row.id)


def _fail(row: Replay, reason: str, done: Reconciled) -> None:
    done.failed.append(row.id)
    row.status = "failed"
    row.error = reason
    row.finished_at = utcnow()


def _log(done: Reconciled) -> None:
    if done.failed or done.requeued:
        log.warning(
            "replays failed as interrupted or lost: %s; waiting again: %s",
            done.failed,
            done.requeued,
        )
