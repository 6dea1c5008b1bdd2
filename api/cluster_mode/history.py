"""Job history from DLJob statuses (cluster mode): the events a new version implies.

The follower (api.cluster_mode.follower) calls `record(prev, obj)` with what it last recorded of a
job (`Job.dljob_state`, stored with the events in one transaction) and the DLJob as
the API server returned it. Pure, so tested on its own.

Transitions are read from the conditions, not only from the phase: one condition per
type, whose `status` and `lastTransitionTime` say when it last flipped. A condition
that differs from the recorded one has flipped since, so versions the follower never
saw (a 410 Gone relist, the service down for a while) still yield their events: a
condition now True that was not, or True since another time, became True; one now
False that was missing, or False since another time, was True in between. Each
transition yields at most one event per diff, so several preemptions missed
together show as one (the row's `restarts` stays exact).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from api.local_mode.history import EventRecord
from controller.model.events import EventKind
from operators.dljobs.resources import (
    ADMITTED,
    BACKOFF,
    DEFAULT_DURATION_S,
    FAILED,
    PREEMPTED,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    SUSPENDED,
    WAITING_PHASES,
)
from operators.kube import Obj
from operators.kube.times import parse_time

# Condition type -> event kind, in lifecycle order (ties in time are broken by it).
EVENTS = {
    ADMITTED: EventKind.ADMITTED,
    RUNNING: EventKind.STARTED,
    PREEMPTED: EventKind.PREEMPTED,
    BACKOFF: EventKind.PREEMPTED,  # stopped by a failure, to restart: the timeline's stop
    SUSPENDED: EventKind.SUSPENDED,
    SUCCEEDED: EventKind.FINISHED,
    FAILED: EventKind.FAILED,
}
ORDER = {ctype: i for i, ctype in enumerate(EVENTS)}
STARTED_BY = (ADMITTED, RUNNING)  # a restart shows as these


@dataclass(frozen=True)
class Change:
    """What one DLJob version adds to its job's history and row."""

    events: list[EventRecord]
    values: dict[str, Any]  # Job columns to set
    state: dict[str, Any]  # the new Job.dljob_state
    started_s: float | None = None  # earliest start among the events
    finished_s: float | None = None


def state_of(obj: Obj) -> dict[str, Any]:
    """What is kept of a DLJob's status to diff the next version against."""
    status = obj.get("status") or {}
    conditions = {
        str(c["type"]): [str(c.get("status", "")), str(c.get("lastTransitionTime", ""))]
        for c in status.get("conditions") or []
        if "type" in c
    }
    return {
        "phase": str(status.get("phase") or ""),
        "restarts": int(status.get("restarts") or 0),
        "conditions": conditions,
    }


def record(prev: dict[str, Any] | None, obj: Obj) -> Change:
    """The events between `prev` (None: nothing recorded yet) and `obj`, in order."""
    status = obj.get("status") or {}
    new = state_of(obj)
    old_conds: dict[str, list[str]] = (prev or {}).get("conditions") or {}
    by_type = {str(c["type"]): c for c in status.get("conditions") or [] if "type" in c}
    found: list[tuple[float, bool, int, str]] = []  # (time, true now, order, type)
    for ctype in EVENTS:
        now = new["conditions"].get(ctype)
        if now is None:
            continue
        was = old_conds.get(ctype)
        if was == now:
            continue
        now_true, was_true = now[0] == "True", was is not None and was[0] == "True"
        if was_true and not now_true:
            continue  # it only went False
        when = _time(now[1])
        if not now_true and ctype in STARTED_BY and status.get("startTime"):
            when = _time(str(status["startTime"]))  # True at the start, False since
        found.append((when, now_true, ORDER[ctype], ctype))
    restarted = new["restarts"] > int((prev or {}).get("restarts") or 0)
    if restarted and not any(f[3] in STARTED_BY for f in found):
        # Stopped and started again within one second: the times did not move.
        phase = new["phase"]
        if phase in STARTED_BY:
            start = _time(str(status.get("startTime") or ""))
            found.append((start, True, ORDER[phase], phase))
    found.sort()
    events = [_event(c, t, by_type.get(c, {}), status) for t, _, _, c in found]
    started = [e.sim_s for e in events if e.kind == EventKind.STARTED and e.sim_s is not None]
    done = [e.sim_s for e in events if e.kind in (EventKind.FINISHED, EventKind.FAILED)]
    return Change(
        events=events,
        values=row_values(obj),
        state=new,
        started_s=min(started) if started else None,
        finished_s=done[-1] if done else None,
    )


def row_values(obj: Obj) -> dict[str, Any]:
    """The Job columns a DLJob's status sets."""
    status = obj.get("status") or {}
    spec = obj.get("spec") or {}
    phase = str(status.get("phase") or QUEUED)
    expected = float(spec.get("expectedDurationSeconds") or DEFAULT_DURATION_S)
    executed = float(status.get("executedSeconds") or 0.0)
    progress = 1.0 if phase == SUCCEEDED else min(1.0, executed / expected)
    return {
        "status": phase,
        "reason_code": status.get("reason") or None,
        "reason_message": status.get("message") or None,
        "progress": progress,
        "attained_gpu_s": float(status.get("attainedGpuSeconds") or 0.0),
        "restarts": int(status.get("restarts") or 0),
        "nodes": str(status.get("nodes") or ""),
        "queue_position": status.get("queuePosition") if phase in WAITING_PHASES else None,
    }


def _event(ctype: str, at_s: float, cond: Obj, status: Obj) -> EventRecord:
    """One condition's flip as an event: a stop names the jobs that took its GPUs
    (status.preemptedBy, operators/queue_status.py), a start where it runs."""
    by: tuple[str, ...] = ()
    where = None
    if ctype in (PREEMPTED, SUSPENDED):
        by = tuple(str(j) for j in status.get("preemptedBy") or ())
    elif ctype == RUNNING:
        where = _placement(status.get("allocation") or {})
    return EventRecord(EVENTS[ctype], at_s, _detail(ctype, cond, status), by, where)


def _placement(allocation: Obj) -> list[dict[str, Any]] | None:
    """status.allocation's shares as the events keep them: [{"node", "gpus"}]."""
    by_node: dict[str, set[int]] = {}
    for share in allocation.get("shares") or []:
        by_node.setdefault(str(share.get("node")), set()).add(int(share.get("gpu") or 0))
    return [{"node": n, "gpus": sorted(g)} for n, g in sorted(by_node.items())] or None


def _detail(ctype: str, cond: Obj, status: Obj) -> str:
    if ctype == RUNNING:
        nodes = status.get("nodes") or ""
        return f"attempt {status.get('attempt') or 1}" + (f" on {nodes}" if nodes else "")
    reason, message = str(cond.get("reason") or ""), str(cond.get("message") or "")
    if ctype in (ADMITTED, SUCCEEDED):
        return message
    return f"{reason}: {message}" if message else reason


def _time(text: str) -> float:
    try:
        return parse_time(text)
    except ValueError:
        return 0.0
