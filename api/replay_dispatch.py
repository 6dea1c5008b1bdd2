"""The replay dispatcher: which queued replays start next, fairly across tenants.

Called through api.tasks.start_next as a replay is submitted (api.routes.replays), as
one ends (in a Celery worker or in-process) and by the periodic reconciler (api.app).
Queued replays wait in the database, not in the broker or a thread pool's FIFO: at
most `capacity` (settings.replay_concurrency) are running or sent to a runner at
once, so the runner never holds a backlog in arrival order. Each free slot goes to
the tenant with the fewest replays in flight, a tie to the tenant served least
recently (round robin), then to that tenant's oldest replay: one tenant's ten large
replays and another's small one alternate instead of running ten first.

A replay sent is stamped (`dispatched_at`, `dispatches`): one sent and never started
lost its task, which api.replay_reconcile finds. Two dispatchers never fill one slot
twice: one at a time per process (a lock), and on PostgreSQL one at a time per
database (a transaction-scoped advisory lock), so several API processes and workers
can share a database.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from sqlalchemy import func, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from api.models import Replay, utcnow

Sender = Callable[[list[int]], None]
ACTIVE = ("queued", "running")
# pg_advisory_xact_lock's key for "dispatching replays": any constant that no other
# advisory lock on this database uses (api.server_lock takes its own).
PG_LOCK_KEY = 2_028_001
_lock = threading.Lock()


def pump(sessions: sessionmaker[Session], capacity: int, send: Sender) -> list[int]:
    """Send the replays that the free slots go to (`choose`); their ids.

    They are stamped as sent before `send` is called; if it raises (a broker down),
    the stamps are taken back, so that the next pump sends them, and the error raised."""
    with _lock, sessions() as session:
        if session.get_bind().dialect.name == "postgresql":
            session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_LOCK_KEY})
        active = session.scalars(
            select(Replay).where(Replay.status.in_(ACTIVE)).order_by(Replay.id)
        ).all()
        picks = choose(active, _last_served(session, {r.tenant for r in active}), capacity)
        if not picks:
            return []
        now = utcnow()
        for row in picks:
            row.dispatched_at = now
            row.dispatches += 1
        ids = [row.id for row in picks]
        session.commit()
    try:
        send(ids)
    except BaseException:
        with sessions() as session:
            session.execute(
                update(Replay)
                .where(Replay.id.in_(ids), Replay.status == "queued")
                .values(dispatched_at=None, dispatches=Replay.dispatches - 1)
            )
            session.commit()
        raise
    return ids


def choose(
    active: Sequence[Replay], last_served: Mapping[str, datetime], capacity: int
) -> list[Replay]:
    """The waiting replays (queued, not sent) that the free slots of `capacity` go to,
    in order: each to the tenant with the fewest in flight (running or sent), a tie to
    the one whose last replay was sent longest ago (never: first), then by replay id."""
    in_flight = Counter(r.tenant for r in active if r.status == "running" or r.dispatched_at)
    free = capacity - sum(in_flight.values())
    waiting: dict[str, deque[Replay]] = {}
    for row in sorted(active, key=lambda r: r.id):
        if row.status == "queued" and row.dispatched_at is None:
            waiting.setdefault(row.tenant, deque()).append(row)
    never = datetime.min.replace(tzinfo=utcnow().tzinfo)
    by_turn = sorted(waiting, key=lambda t: (last_served.get(t) or never, waiting[t][0].id))
    turn = {tenant: i for i, tenant in enumerate(by_turn)}
    picks: list[Replay] = []
    while free > 0 and waiting:
        tenant = min(waiting, key=lambda t: (in_flight[t], turn[t]))
        picks.append(waiting[tenant].popleft())
        if not waiting[tenant]:
            del waiting[tenant]
        in_flight[tenant] += 1
        turn[tenant] = len(turn) + len(picks)  # served now: last in turn
        free -= 1
    return picks


def _last_served(session: Session, tenants: set[str]) -> dict[str, datetime]:
    """When each tenant's last replay was sent to a runner."""
    if not tenants:
        return {}
    rows = session.execute(
        select(Replay.tenant, func.max(Replay.dispatched_at))
        .where(Replay.tenant.in_(tenants), Replay.dispatched_at.is_not(None))
        .group_by(Replay.tenant)
    )
    return {tenant: at for tenant, at in rows if at is not None}
