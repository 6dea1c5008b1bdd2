"""Job history from backend state changes: which events a transition implies.

Local mode's ticker (api.local) polls LiveCluster and calls `transition_events`
with what it last saw of a job and what it sees now; pure, so tested on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.live import JobState
from controller.model import WAITING, JobStatus


@dataclass(frozen=True)
class Seen:
    """What the ticker last recorded of a job."""

    status: JobStatus
    restarts: int


@dataclass(frozen=True)
class EventRecord:
    kind: str  # submitted | started | preempted | finished | cancelled | failed
    sim_s: float | None
    detail: str = ""


def transition_events(prev: Seen | None, now_s: float, state: JobState) -> list[EventRecord]:
    """The events between `prev` (None: only submitted) and `state`, in order."""
    before = prev.status if prev is not None else JobStatus.QUEUED
    restarted = state.restarts > (prev.restarts if prev is not None else 0)
    status = state.status
    stopped = status in WAITING and status is not JobStatus.QUEUED
    out: list[EventRecord] = []
    if before is JobStatus.QUEUED and state.first_start_s is not None:
        out.append(EventRecord("started", state.first_start_s))
        if stopped:  # started and stopped again between two polls
            out.append(EventRecord("preempted", now_s, status.value))
    elif before is JobStatus.RUNNING and (stopped or restarted):
        out.append(EventRecord("preempted", now_s, status.value))
    resumed = before in WAITING and before is not JobStatus.QUEUED
    if status is JobStatus.RUNNING and (resumed or (before is JobStatus.RUNNING and restarted)):
        out.append(EventRecord("started", now_s, f"restart {state.restarts}"))
    if status is not before:
        if status is JobStatus.SUCCEEDED:
            out.append(EventRecord("finished", state.finish_s))
        elif status is JobStatus.CANCELLED:
            why = "never fits the cluster" if state.first_start_s is None else ""
            out.append(EventRecord("cancelled", now_s, why))
        elif status is JobStatus.FAILED:
            out.append(EventRecord("failed", now_s))
    return out


def row_values(state: JobState, node_names: list[str]) -> dict[str, object]:
    """The Job columns a state sets (for a bulk UPDATE by primary key)."""
    alloc = state.allocation
    nodes = "" if alloc is None else ",".join(node_names[n] for n in alloc.nodes)
    reason = state.reason
    return {
        "id": state.job_id,
        "status": state.status.value,
        "reason_code": None if reason is None else reason.code,
        "reason_message": None if reason is None else reason.message,
        "progress": state.progress,
        "attained_gpu_s": state.attained_gpu_s,
        "restarts": state.restarts,
        "nodes": nodes,
        "submit_s": state.submit_s,
        "first_start_s": state.first_start_s,
        "finish_s": state.finish_s,
    }
