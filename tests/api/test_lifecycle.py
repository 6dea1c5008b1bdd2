"""The job lifecycle's one table (controller/model/events.py) and what the API derives
from it: every kind has its row, the ends are the three terminal statuses, and the
timeline's steps and the quotas' series read the table as they read their own copies
before (issue 29, item 4)."""

from __future__ import annotations

from api.jobs.timeline import STEPS, Event, intervals
from api.quotas.series import HOLDS, steps_of
from controller.model import Action, JobStatus
from controller.model.events import ENDING_KINDS, EVENT_OF_ACTION, LIFECYCLE, MOVES, EventKind


def test_every_kind_has_one_row_and_the_ends_are_the_terminal_statuses() -> None:
    assert set(LIFECYCLE) == set(EventKind)
    assert {EventKind.FINISHED, EventKind.FAILED, EventKind.CANCELLED} == ENDING_KINDS
    assert {LIFECYCLE[k].status for k in ENDING_KINDS} == {
        JobStatus.SUCCEEDED,
        JobStatus.FAILED,
        JobStatus.CANCELLED,
    }
    assert MOVES == {
        Action.RESIZE: EventKind.RESIZED,
        Action.MIGRATE: EventKind.MIGRATED,
        Action.RESHARE: EventKind.RESHARED,
    }
    # Each action that is one event names the decision that event's row states.
    assert all(LIFECYCLE[k].decision == a.value for a, k in EVENT_OF_ACTION.items())


def test_the_timeline_and_the_quota_series_read_the_table() -> None:
    assert STEPS == {
        "submitted": ("Queued", "submit"),
        "started": ("Running", "start"),
        "preempted": ("Preempted", "preempt"),
        "suspended": ("Suspended", "suspend"),
        "resized": ("Running", "resize"),
        "migrated": ("Running", "migrate"),
        "reshared": ("Running", "reshare"),
    }
    assert {k for k, held in HOLDS.items() if held} == {
        "started",
        "resized",
        "migrated",
        "reshared",
    }
    assert "admitted" not in HOLDS and "submitted" not in HOLDS
    # A job that ran, was preempted, ran again and finished: three intervals after queueing.
    events = [
        Event(EventKind.SUBMITTED, 0.0, ""),
        Event(EventKind.STARTED, 1.0, ""),
        Event(EventKind.PREEMPTED, 5.0, "", ("b",)),
        Event(EventKind.ADMITTED, 6.0, ""),
        Event(EventKind.STARTED, 7.0, ""),
        Event(EventKind.FINISHED, 9.0, ""),
    ]
    found = intervals(events, None)
    assert [(i.state, i.from_s, i.to_s) for i in found] == [
        ("Queued", 0.0, 1.0),
        ("Running", 1.0, 5.0),
        ("Preempted", 5.0, 7.0),
        ("Running", 7.0, 9.0),
    ]
    held = steps_of([(e.kind, e.sim_s, None) for e in events], num_gpus=4)
    assert [(s.t_s, s.gpus) for s in held] == [(1.0, 4.0), (5.0, 0.0), (7.0, 4.0), (9.0, 0.0)]
