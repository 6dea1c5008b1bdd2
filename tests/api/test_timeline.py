"""A job's state intervals from its events (api.jobs.timeline.intervals)."""

from __future__ import annotations

from api.jobs.timeline import Event, intervals

ON = [{"node": "node-0", "gpus": [0]}]


def test_intervals_follow_the_events_and_close_at_the_end() -> None:
    events = [
        Event("submitted", 0.0, ""),
        Event("admitted", 1.0, "cluster mode only: changes nothing"),
        Event("started", 2.0, "", allocation=ON),
        Event("suspended", 5.0, "Suspended: time-sliced out", by_jobs=("b",)),
        Event("started", 7.0, "restart 1", allocation=ON),
        Event("preempted", 8.0, "Preempted"),
        Event("started", 9.0, "restart 2", allocation=ON),
        Event("finished", 12.0, ""),
    ]
    got = [(i.state, i.from_s, i.to_s, i.decision, i.by_jobs) for i in intervals(events, None)]
    assert got == [
        ("Queued", 0.0, 2.0, "submit", ()),
        ("Running", 2.0, 5.0, "start", ()),
        ("Suspended", 5.0, 7.0, "suspend", ("b",)),
        ("Running", 7.0, 8.0, "resume", ()),
        ("Preempted", 8.0, 9.0, "preempt", ()),
        ("Running", 9.0, 12.0, "restart", ()),
    ]


def test_an_open_queued_interval_says_why_it_waits() -> None:
    (queued,) = intervals([Event("submitted", 3.0, "")], "QueuedBehind: waiting behind job x")
    assert (queued.to_s, queued.reason) == (None, "QueuedBehind: waiting behind job x")
    assert intervals([], "anything") == []
