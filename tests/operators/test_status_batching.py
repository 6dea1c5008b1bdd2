"""Fewer status requests at scale: staged changes ride on a job's next status write
(operators/writer.py `stage`), and queue positions are throttled
(operators/queue_status.py `PositionThrottle`)."""

from __future__ import annotations

from typing import Any

import pytest

from operators.dljobs.resources import QUEUED, Reasoned, fields_mutator, status_mutator
from operators.queue_status import (
    POSITION_EXACT,
    POSITION_REFRESH_BUDGET,
    POSITION_REFRESH_S,
    PositionThrottle,
    position_mutator,
)
from operators.writer import Writer
from tests.operators.builders import dljob_status, make_dljob
from tests.operators.conftest import GpuCluster


class _Cache:
    def __init__(self) -> None:
        self.upserted: list[dict[str, Any]] = []

    def upsert(self, obj: dict[str, Any]) -> None:
        self.upserted.append(obj)


class _Caches:
    def __init__(self) -> None:
        self.dljobs = _Cache()


def _status_puts(cluster: GpuCluster) -> int:
    return sum(
        1 for r in cluster.server.requests if r.method == "PUT" and r.path.endswith("/status")
    )


def test_a_staged_change_goes_out_with_the_next_status_write(fault_cluster: GpuCluster) -> None:
    api = fault_cluster.api
    obj = api.create_dljob("default", make_dljob("j"))
    writer = Writer(api, _Caches(), lambda: True)  # type: ignore[arg-type]
    before = _status_puts(fault_cluster)
    try:
        writer.stage(obj, fields_mutator({"arrivalTime": "2026-01-01T00:00:00.000000Z"}))
        writer.stage(obj, position_mutator(3))
        writer.status(obj, status_mutator(QUEUED, Reasoned("Waiting", "w"), now_s=1.0))
        writer.flush()
    finally:
        writer.close()
    status = dljob_status(api, "j")
    assert status["arrivalTime"] == "2026-01-01T00:00:00.000000Z"
    assert (status["queuePosition"], status["reason"]) == (3, "Waiting")
    assert _status_puts(fault_cluster) - before == 1


def test_a_staged_change_alone_is_written_at_flush(fault_cluster: GpuCluster) -> None:
    api = fault_cluster.api
    obj = api.create_dljob("default", make_dljob("j"))
    writer = Writer(api, _Caches(), lambda: True)  # type: ignore[arg-type]
    try:
        writer.stage(obj, position_mutator(7))
        writer.flush()
    finally:
        writer.close()
    assert dljob_status(api, "j")["queuePosition"] == 7


def test_a_second_write_starts_from_the_first_ones_result(fault_cluster: GpuCluster) -> None:
    """Two status writes of one job in a round: the second is sent with the version the
    first stored, so neither meets a 409 (no re-read)."""
    api = fault_cluster.api
    obj = api.create_dljob("default", make_dljob("j"))
    writer = Writer(api, _Caches(), lambda: True)  # type: ignore[arg-type]
    before = _status_puts(fault_cluster)
    try:
        writer.status(obj, status_mutator(QUEUED, Reasoned("First", "1"), now_s=1.0))
        writer.status(obj, status_mutator(QUEUED, Reasoned("Second", "2"), now_s=2.0))
        writer.flush()
    finally:
        writer.close()
    reads = [
        r
        for r in fault_cluster.server.requests
        if r.method == "GET" and r.path.split("?")[0].endswith("/dljobs/j")
    ]
    assert reads == []
    assert _status_puts(fault_cluster) - before == 2
    assert dljob_status(api, "j")["reason"] == "Second"


def _due(
    throttle: PositionThrottle, new: dict[str, int], old: dict[str, int | None], now: float
) -> dict[str, int]:
    return dict(throttle.due(new, old, now))


@pytest.mark.parametrize(
    ("old", "new", "written"),
    [
        (None, 500, True),  # a first position
        (3, 2, True),  # the head: exact
        (POSITION_EXACT + 1, POSITION_EXACT, True),  # into the head
        (200, 199, False),  # one place of 200: waits for the refresh
        (200, 180, True),  # 10 % of 200
        (200, 200, False),  # unchanged
    ],
)
def test_which_positions_are_written(old: int | None, new: int, written: bool) -> None:
    throttle = PositionThrottle()
    _due(throttle, {"j": old or new}, {"j": None}, 0.0)  # written once, at 0 s
    assert ("j" in _due(throttle, {"j": new}, {"j": old}, 1.0)) is written


def test_a_stale_position_is_refreshed_head_first_within_the_budget() -> None:
    throttle = PositionThrottle()
    n = POSITION_REFRESH_BUDGET + 50
    first = {f"j{i}": 1000 + i for i in range(n)}
    _due(throttle, first, dict.fromkeys(first), 0.0)
    moved = {k: p - 1 for k, p in first.items()}
    assert _due(throttle, moved, dict(first), 1.0) == {}
    later = _due(throttle, moved, dict(first), POSITION_REFRESH_S)
    assert sorted(later.values()) == sorted(moved.values())[:POSITION_REFRESH_BUDGET]
    rest = _due(throttle, moved, {**first, **later}, POSITION_REFRESH_S + 1)
    assert len(rest) == 50
