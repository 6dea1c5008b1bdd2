"""The replay dispatcher: which queued replays start next, fairly across tenants.

Called through api.tasks.start_next as a replay is submitted (api.routes.replays), as
one ends (in a Celery worker or in-process) and by the periodic reconciler (api.app).
Queued replays wait in the database, not in the broker or a thread pool's FIFO: at
most `capacity` (settings.replay_concurrency) are running or sent to a runner at
once, so the runner never holds a backlog in arrival order. Free slots are shared
in proportion to the tenants' quota weights (`_weights`: the weight of the leaf
quota a tenant's jobs go to, 1 without one), counting replays, not their length:
each goes to the tenant with the least service per weight, its service being the
replays it holds in flight and those it had sent that ended since every tenant now
waiting has been waiting (`_window_start`: no tenant is owed for a time it had
nothing queued). A tie goes to the tenant served least recently (round robin), then
to that tenant's oldest replay: one tenant's ten large replays and another's small
one alternate instead of running ten first, and with weights 3 and 1 the first
tenant gets three slots for the other's one. The weights are read from the job
database's table `queues` (local mode's quota tree); cluster mode's Quota resources live in
Kubernetes, which the dispatcher does not read, so there every tenant weighs 1.

A replay sent is stamped (`dispatched_at`, `dispatches`): one sent and never started
lost its task, which api.replays.reconcile finds. Two dispatchers never fill one slot
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

from api.quotas.tree import DbQuotaStore
from api.store.models import Replay, utcnow
from controller.model.quotas import QuotaSpecError
from controller.quotas.spec import quotas_from_data

Sender = Callable[[list[int]], None]
ACTIVE = ("queued", "running")
# pg_advisory_xact_lock's key for "dispatching replays": any constant that no other
# advisory lock on this database uses (api.local_mode.server_lock takes its own).
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
        tenants = {r.tenant for r in active}
        picks = choose(
            active,
            _last_served(session, tenants),
            capacity,
            ended=_ended_since(session, tenants, _window_start(active)),
            weights=_weights(session, tenants),
        )
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
    active: Sequence[Replay],
    last_served: Mapping[str, datetime],
    capacity: int,
    ended: Mapping[str, int] | None = None,
    weights: Mapping[str, float] | None = None,
) -> list[Replay]:
    """The waiting replays (queued, not sent) that the free slots of `capacity` go to,
    in order: each to the tenant whose service after this one, over its weight
    (default 1), is least; its service is what it has in flight (running or sent) and
    `ended` (sent in the window, over since); a tie to the one whose last replay was
    sent longest ago (never: first), then by replay id."""
    ended, weights = ended or {}, weights or {}
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
        tenant = min(
            waiting,
            key=lambda t: ((in_flight[t] + ended.get(t, 0) + 1) / weights.get(t, 1.0), turn[t]),
        )
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


def _window_start(active: Sequence[Replay]) -> datetime | None:
    """Since when every tenant with a replay waiting has had one queued or running:
    the latest of those tenants' oldest active replays (None: nobody waits)."""
    oldest: dict[str, datetime] = {}
    waiting = {r.tenant for r in active if r.status == "queued" and r.dispatched_at is None}
    for row in active:
        if row.tenant in waiting and (
            row.tenant not in oldest or row.created_at < oldest[row.tenant]
        ):
            oldest[row.tenant] = row.created_at
    return max(oldest.values(), default=None)


def _ended_since(session: Session, tenants: set[str], since: datetime | None) -> dict[str, int]:
    """Each tenant's replays sent at or after `since` that are over (ended or failed)."""
    if not tenants or since is None:
        return {}
    rows = session.execute(
        select(Replay.tenant, func.count())
        .where(
            Replay.tenant.in_(tenants),
            Replay.status.not_in(ACTIVE),
            Replay.dispatched_at >= since,
        )
        .group_by(Replay.tenant)
    )
    return {tenant: count for tenant, count in rows}


def _weights(session: Session, tenants: set[str]) -> dict[str, float]:
    """Each tenant's quota weight: its leaf queue's (QuotaTree.leaf_for_tenant) in the
    job database's queues; tenants of no leaf, and all of them when there is no tree
    (or none that holds: the routes refuse one), are left out, weighing 1."""
    items = DbQuotaStore(session).items()
    if not tenants or not items:
        return {}
    try:
        tree = quotas_from_data(sorted(items, key=lambda i: str(i["name"])))
    except QuotaSpecError:
        return {}
    weights: dict[str, float] = {}
    for tenant in tenants:
        leaf = tree.leaf_for_tenant(tenant)
        node = tree.node(leaf) if leaf is not None else None
        if node is not None:
            weights[tenant] = node.weight
    return weights
