"""What the kubelet reports about a worker pod: its worker container's state, exit
code, and when it started and finished running.

`operators.jobs.classify` reads start and finish times (attained service counts from
when the whole gang ran), `operators.pods.failure_policy` the exit code of a failed pod.
All of it is in `status.containerStatuses[]` of the worker container: the one named
`WORKER_CONTAINER`, else the first (as `operators.dljobs.template.worker_index` picks it).
"""

from __future__ import annotations

from operators.dljobs.template import WORKER_CONTAINER
from operators.kube import Obj
from operators.kube.times import parse_time


def worker_state(pod: Obj) -> Obj:
    """The worker container's `state` ({running: ...}, {terminated: ...}, ...), {} if
    the kubelet has not reported it."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    if not statuses:
        return {}
    chosen = next((s for s in statuses if s.get("name") == WORKER_CONTAINER), statuses[0])
    state: Obj = chosen.get("state") or {}
    return state


def exit_code(pod: Obj) -> int | None:
    """The worker container's exit code, None while it has not terminated."""
    terminated = worker_state(pod).get("terminated")
    if not terminated or terminated.get("exitCode") is None:
        return None
    return int(terminated["exitCode"])


def running_since_s(pod: Obj) -> float | None:
    """When the worker container started running (its running or terminated state's
    `startedAt`), else the pod's `status.startTime` once it left Pending; None if it
    never ran."""
    state = worker_state(pod)
    for key in ("running", "terminated"):
        started = (state.get(key) or {}).get("startedAt")
        if started:
            return parse_time(started)
    status = pod.get("status") or {}
    if status.get("phase") not in (None, "Pending") and status.get("startTime"):
        return parse_time(status["startTime"])
    return None


def finished_at_s(pod: Obj) -> float | None:
    """When the worker container terminated, None if it has not."""
    finished = (worker_state(pod).get("terminated") or {}).get("finishedAt")
    return parse_time(finished) if finished else None


def worker_waiting(pod: Obj) -> Obj:
    """The worker container's `waiting` state ({"reason", "message"}), or {}."""
    return dict(worker_state(pod).get("waiting") or {})


def waiting_reason(pod: Obj) -> str:
    """Why the worker container waits (ImagePullBackOff, ContainerCreating), or ""."""
    return str((worker_state(pod).get("waiting") or {}).get("reason") or "")
