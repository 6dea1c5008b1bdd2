"""Local mode's events from state changes (api.local_mode.history.transition_events): who took a
stopped job's GPUs, where a start placed it, and a resize as one event."""

from __future__ import annotations

from dataclasses import replace

from api.local_mode.history import Seen, transition_events
from controller.decisions import Displacement
from controller.live import JobState
from controller.model import Action, Allocation, JobStatus, Reason

NODES = ["node-0", "node-1"]
RUNNING = JobState(
    job_id="a",
    status=JobStatus.RUNNING,
    submit_s=0.0,
    allocation=Allocation.whole([(0, 0), (0, 1), (1, 3)]),
    reason=None,
    progress=0.1,
    attained_gpu_s=10.0,
    restarts=0,
    first_start_s=5.0,
    finish_s=None,
)
SRTF = Reason("ShorterJobsFirst", "jobs with less remaining time hold the GPUs")


def test_a_start_carries_its_nodes_and_gpus() -> None:
    (started,) = transition_events(None, 6.0, RUNNING, node_names=NODES)
    assert (started.kind, started.sim_s) == ("started", 5.0)
    assert started.allocation == [
        {"node": "node-0", "gpus": [0, 1]},
        {"node": "node-1", "gpus": [3]},
    ]


def test_a_preemption_names_the_jobs_that_took_the_gpus() -> None:
    stopped = replace(RUNNING, status=JobStatus.PREEMPTED, allocation=None, reason=SRTF)
    moved = Displacement("a", Action.PREEMPT, ("b", "c"), SRTF, 9.0)
    labels = {"b": "job b (short)", "c": "job c"}  # c: another tenant's, redacted on read
    (event,) = transition_events(
        Seen(JobStatus.RUNNING, 0), 9.0, stopped, moved=moved, labels=labels
    )
    assert (event.kind, event.by_jobs) == ("preempted", ("b", "c"))
    assert event.detail == (
        "ShorterJobsFirst: jobs with less remaining time hold the GPUs; "
        "preempted by job b (short), job c"
    )


def test_a_suspension_is_its_own_kind_and_without_a_record_says_its_status() -> None:
    suspended = replace(RUNNING, status=JobStatus.SUSPENDED, allocation=None)
    (event,) = transition_events(Seen(JobStatus.RUNNING, 0), 9.0, suspended)
    assert (event.kind, event.detail, event.by_jobs) == ("suspended", "Suspended", ())


def test_a_shrink_is_one_resized_event_with_the_new_gpus() -> None:
    shrunk = replace(RUNNING, allocation=Allocation.whole([(0, 0)]), restarts=1)
    moved = Displacement("a", Action.RESIZE, ("b",), None, 9.0)
    events = transition_events(
        Seen(JobStatus.RUNNING, 0), 9.0, shrunk, moved=moved, node_names=NODES
    )
    assert [(e.kind, e.by_jobs) for e in events] == [("resized", ("b",))]
    assert events[0].allocation == [{"node": "node-0", "gpus": [0]}]
    assert events[0].detail == "restart 1; preempted by job b"
