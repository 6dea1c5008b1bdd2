"""Replays shared by quota weight (api.replays.dispatch): a tenant whose leaf queue
weighs 3 gets three replays sent for another's one while both wait, counted over a
whole backlog, in the dispatcher's choice alone and through its database reads."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from api.app import create_app
from api.quotas.tree import DbQuotaStore
from api.replays.dispatch import _window_start, choose, pump
from api.settings import Settings
from api.store.db import make_engine, make_sessionmaker
from api.store.models import Replay, utcnow
from tests.api.builders import auth, upload_trace

T0 = datetime(2026, 11, 28, 12, 0, tzinfo=utcnow().tzinfo)


def _queued(replay_id: int, tenant: str, created_s: float = 0.0) -> Replay:
    created = T0 + timedelta(seconds=created_s)
    return Replay(id=replay_id, tenant=tenant, status="queued", created_at=created)


def _serve(active: list[Replay], weights: dict[str, float], capacity: int, sends: int) -> list[str]:
    """Send `sends` replays through `capacity` slots, the oldest in flight ending
    whenever none is free; the tenants in the order they were served."""
    ended: Counter[str] = Counter()
    last: dict[str, datetime] = {}
    in_flight: list[Replay] = []
    served: list[str] = []
    clock = T0 + timedelta(hours=1)
    while len(served) < sends:
        picks = choose(active, last, capacity, ended=ended, weights=weights)
        if not picks:
            done = in_flight.pop(0)
            active.remove(done)
            ended[done.tenant] += 1
            continue
        for row in picks:
            clock += timedelta(seconds=1)
            row.dispatched_at = last[row.tenant] = clock
            in_flight.append(row)
            served.append(row.tenant)
    return served


@pytest.mark.parametrize("capacity", [1, 2, 4])
def test_slots_go_in_proportion_to_the_weights(capacity: int) -> None:
    active = [_queued(i, "a") for i in range(1, 101)] + [_queued(i, "b") for i in range(101, 201)]
    served = _serve(active, {"a": 3.0, "b": 1.0}, capacity, sends=40)
    assert Counter(served) == {"a": 30, "b": 10}
    # Throughout, not only in the end: every prefix within a replay of 3:1.
    for n in range(1, len(served) + 1):
        assert abs(served[:n].count("a") - 0.75 * n) <= 1.0 + capacity / 4, served[:n]


def test_equal_weights_alternate_and_a_missing_weight_is_1() -> None:
    active = [_queued(i, "a") for i in range(1, 11)] + [_queued(i, "b") for i in range(11, 21)]
    assert _serve(active, {"a": 1.0}, 1, sends=6) == ["a", "b", "a", "b", "a", "b"]


def test_a_tenant_is_not_owed_for_a_time_it_had_nothing_queued() -> None:
    # Service is counted from when every waiting tenant has been waiting: b's oldest
    # replay came at 600 s, so what a was sent before then does not count against a.
    active = [
        _queued(1, "a", 0.0),
        _queued(2, "a", 30.0),
        _queued(3, "b", 900.0),
        _queued(4, "b", 600.0),
        _queued(5, "c", 1200.0),
    ]
    active[0].status = "running"
    active[4].dispatched_at = T0  # c has nothing waiting: not in the window
    assert _window_start(active) == T0 + timedelta(seconds=600)
    assert _window_start([_queued(1, "a")]) == T0
    assert _window_start([]) is None


def test_pump_reads_the_weights_from_the_queues_and_the_ended_replays(
    pg_settings: Settings, trace_file: Path
) -> None:
    with TestClient(create_app(pg_settings.model_copy(update={"live": False}))) as client:
        alice = auth(client, "alice", "vision")
        trace = upload_trace(client, alice, trace_file)["id"]
        user_id = client.get("/api/v1/users/me", headers=alice).json()["id"]
    engine = make_engine(pg_settings)
    sessions = make_sessionmaker(engine)
    try:
        with sessions() as session:
            store = DbQuotaStore(session)
            store.put({"name": "vision", "weight": 3.0, "tenants": ["vision"]})
            store.put({"name": "speech", "weight": 1.0, "tenants": ["speech"]})
            session.add_all(
                Replay(
                    tenant=tenant,
                    user_id=user_id,
                    trace_id=trace,
                    policy="fifo",
                    cluster="2x4",
                    placement="consolidated",
                    interval_s=60.0,
                    seed=0,
                    status="queued",
                )
                for _ in range(20)
                for tenant in ("speech", "vision")
            )
            session.commit()
        tenants: list[str] = []

        def run_at_once(ids: list[int]) -> None:
            """A runner that ends each replay as it is sent."""
            with sessions() as session:
                for row in session.query(Replay).where(Replay.id.in_(ids)):
                    tenants.append(row.tenant)
                session.execute(
                    update(Replay)
                    .where(Replay.id.in_(ids))
                    .values(status="succeeded", finished_at=utcnow())
                )
                session.commit()

        for _ in range(16):
            pump(sessions, 1, run_at_once)
        assert Counter(tenants) == {"vision": 12, "speech": 4}, tenants
    finally:
        engine.dispose()
