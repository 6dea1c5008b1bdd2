"""The replay dispatcher's choice (api.replays.dispatch.choose): free slots, tenants in
turn; and a replay whose task was lost is sent again or failed (api.replays.reconcile)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.replays.dispatch import choose
from api.replays.reconcile import LOST_ERROR, reconcile_lost
from api.settings import Settings
from api.store.db import make_engine, make_sessionmaker
from api.store.models import Replay, utcnow
from tests.api.builders import auth, upload_trace

T0 = datetime(2026, 11, 28, 12, 0, tzinfo=utcnow().tzinfo)


def _replay(replay_id: int, tenant: str, status: str = "queued", sent: bool = False) -> Replay:
    return Replay(id=replay_id, tenant=tenant, status=status, dispatched_at=T0 if sent else None)


def _ids(rows: list[Replay]) -> list[int]:
    return [r.id for r in rows]


@pytest.mark.parametrize(
    ("active", "last_served", "capacity", "chosen"),
    [
        # Nothing waits, or no slot is free.
        ([], {}, 2, []),
        ([_replay(1, "a", "running"), _replay(2, "a")], {}, 1, []),
        ([_replay(1, "a", sent=True), _replay(2, "b")], {}, 1, []),
        # The tenant with fewer in flight first, whatever the arrival order.
        ([_replay(1, "a", "running"), _replay(2, "a"), _replay(3, "b")], {}, 2, [3]),
        # A tie goes to the tenant served longest ago (never: first), then round robin.
        (
            [_replay(i, "a") for i in range(1, 5)] + [_replay(5, "b"), _replay(6, "b")],
            {"a": T0},
            4,
            [5, 1, 6, 2],
        ),
        (
            [_replay(1, "a"), _replay(2, "b"), _replay(3, "c")],
            {"a": T0, "b": T0 - timedelta(seconds=1)},
            3,
            [3, 2, 1],
        ),
        # Served at the same time: the tenant whose oldest replay is older first.
        ([_replay(4, "a"), _replay(2, "b")], {}, 1, [2]),
        # A tenant's own replays in order of submission.
        ([_replay(9, "a"), _replay(7, "a")], {}, 1, [7]),
    ],
)
def test_free_slots_go_to_tenants_in_turn(
    active: list[Replay], last_served: dict[str, datetime], capacity: int, chosen: list[int]
) -> None:
    assert _ids(choose(active, last_served, capacity)) == chosen


def _stored(settings: Settings, trace_file: Path, *rows: tuple[float, int]) -> list[int]:
    """A queued replay per (seconds since it was sent, times sent)."""
    with TestClient(create_app(settings.model_copy(update={"live": False}))) as client:
        alice = auth(client, "alice", "vision")
        trace = upload_trace(client, alice, trace_file)["id"]
        user_id = client.get("/api/v1/users/me", headers=alice).json()["id"]
        with client.app.state.sessions() as session:  # type: ignore[attr-defined]
            replays = [
                Replay(
                    tenant="vision",
                    user_id=user_id,
                    trace_id=trace,
                    policy="fifo",
                    cluster="2x4",
                    placement="consolidated",
                    interval_s=60.0,
                    seed=0,
                    status="queued",
                    dispatched_at=utcnow() - timedelta(seconds=sent_s_ago),
                    dispatches=times,
                )
                for sent_s_ago, times in rows
            ]
            session.add_all(replays)
            session.commit()
            return [r.id for r in replays]


def test_a_replay_sent_and_not_started_is_sent_again_then_failed_with_a_reason(
    pg_settings: Settings, trace_file: Path
) -> None:
    waiting, lost, last_try = _stored(pg_settings, trace_file, (5.0, 1), (60.0, 1), (60.0, 3))
    engine = make_engine(pg_settings)
    sessions = make_sessionmaker(engine)
    try:
        done = reconcile_lost(sessions, start_timeout_s=30.0, max_dispatches=3)
        assert done.requeued == [lost] and done.failed == [last_try]
        with sessions() as session:
            rows = {i: session.get(Replay, i) for i in (waiting, lost, last_try)}
            assert rows[waiting].status == "queued" and rows[waiting].dispatched_at
            assert rows[lost].status == "queued" and rows[lost].dispatched_at is None
            assert rows[last_try].status == "failed" and rows[last_try].finished_at
            assert rows[last_try].error == LOST_ERROR.format(n=3, s=30.0)
            assert rows[lost].dispatches == 1  # counted when it is sent again
    finally:
        engine.dispose()
