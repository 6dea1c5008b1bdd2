"""Job history from backend state changes: which events a transition implies.

Local mode's ticker (api.local_mode.backend) polls LiveCluster and calls `transition_events`
with what it last saw of a job, what it sees now and the round's record of the job's
last stop (controller.decisions: who took its GPUs and why); pure, so tested on its
own. Events carry what the timeline (api.jobs.timeline) reads: where a start placed the
job, and which jobs took the GPUs of a stopped one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controller.decisions import Displacement
from controller.live import JobState
from controller.model import WAITING, Allocation, JobStatus, Reason
from controller.model.events import MOVES, EventKind


@dataclass(frozen=True)
class Seen:
    """What the ticker last recorded of a job: its state, and the reason it recorded
    with the monotonic time it did (api/local_mode/backend.py rewrites a waiting job's reason)."""

    status: JobStatus
    restarts: int
    reason: Reason | None = None
    reason_at_s: float = 0.0


@dataclass(frozen=True)
class EventRecord:
    kind: EventKind  # every kind but admitted, which cluster mode alone records
    sim_s: float | None
    detail: str = ""
    by_jobs: tuple[str, ...] = ()  # a stop or a move: the jobs given its GPUs
    allocation: list[dict[str, Any]] | None = None  # a start or a move: where it runs


def placement(alloc: Allocation | None, node_names: Sequence[str]) -> list[dict[str, Any]] | None:
    """An allocation as the events keep it: [{"node": name, "gpus": [index, ...]}]."""
    if alloc is None:
        return None
    by_node: dict[int, list[int]] = {}
    for node, gpu in alloc.gpus():
        by_node.setdefault(node, []).append(gpu)
    return [{"node": node_names[n], "gpus": sorted(g)} for n, g in sorted(by_node.items())]


def preempted_by(by_jobs: Sequence[str], labels: Mapping[str, str]) -> str:
    """ "preempted by job <id> (<name>), ..." with each job as `labels` names it (its
    own tenant's jobs with their name, others by id only: the routes redact those)."""
    return "preempted by " + ", ".join(labels.get(j, f"job {j}") for j in by_jobs)


def stop_detail(status: str, moved: Displacement | None, labels: Mapping[str, str]) -> str:
    """Why a job stopped: the plan's reason, and who took its GPUs."""
    parts = [status]
    if moved is not None and moved.reason is not None:
        parts = [f"{moved.reason.code}: {moved.reason.message}"]
    if moved is not None and moved.by:
        parts.append(preempted_by(moved.by, labels))
    return "; ".join(parts)


def transition_events(
    prev: Seen | None,
    now_s: float,
    state: JobState,
    *,
    moved: Displacement | None = None,
    node_names: Sequence[str] = (),
    labels: Mapping[str, str] | None = None,
) -> list[EventRecord]:
    """The events between `prev` (None: only submitted) and `state`, in order.
    `moved`: the job's last stop, shrink or move since `prev`; `labels`: job id ->
    how a stop's detail names the job that took its GPUs."""
    names = labels or {}
    before = prev.status if prev is not None else JobStatus.QUEUED
    restarted = state.restarts > (prev.restarts if prev is not None else 0)
    status = state.status
    where = placement(state.allocation, node_names) if node_names else None
    by = moved.by if moved is not None else ()
    stopped = status in WAITING and status is not JobStatus.QUEUED
    stop_kind = EventKind.SUSPENDED if status is JobStatus.SUSPENDED else EventKind.PREEMPTED
    out: list[EventRecord] = []
    move = MOVES.get(moved.action) if moved is not None else None
    if before is JobStatus.RUNNING and status is JobStatus.RUNNING and restarted and move:
        detail = stop_detail(f"restart {state.restarts}", moved, names)
        return [EventRecord(move, now_s, detail, by, where)]
    if before is JobStatus.QUEUED and state.first_start_s is not None:
        out.append(EventRecord(EventKind.STARTED, state.first_start_s, "", (), where))
        if stopped:  # started and stopped again between two polls
            out.append(EventRecord(stop_kind, now_s, stop_detail(status.value, moved, names), by))
    elif before is JobStatus.RUNNING and (stopped or restarted):
        kind = stop_kind if stopped else EventKind.PREEMPTED
        out.append(EventRecord(kind, now_s, stop_detail(status.value, moved, names), by))
    resumed = before in WAITING and before is not JobStatus.QUEUED
    if status is JobStatus.RUNNING and (resumed or (before is JobStatus.RUNNING and restarted)):
        out.append(EventRecord(EventKind.STARTED, now_s, f"restart {state.restarts}", (), where))
    if status is not before:
        if status is JobStatus.SUCCEEDED:
            out.append(EventRecord(EventKind.FINISHED, state.finish_s))
        elif status is JobStatus.CANCELLED:
            why = "never fits the cluster" if state.first_start_s is None else ""
            out.append(EventRecord(EventKind.CANCELLED, now_s, why))
        elif status is JobStatus.FAILED:
            out.append(EventRecord(EventKind.FAILED, now_s))
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
        "queue_position": state.queue_position,
    }
