"""What each DLJob is doing now, read from the DLJob and its pods alone.

The backend classifies every DLJob each round (`classify`): level-triggered, so the
same answer comes after an operator restart as before it. The current attempt is the
highest `gpuflow.dev/attempt` among the job's pods; its pods say whether the job
runs (every rank there and alive), is finished, failed, or lost part of its gang.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from controller.model import JobSpec
from operators import crd
from operators.kube import Obj
from operators.pods import (
    ShareRecord,
    decode_shares,
    finished,
    pod_attempt,
    pod_phase,
    terminating,
)
from operators.resources import TERMINAL, job_id, job_spec, parse_time, phase_of


class State(Enum):
    WAITING = "waiting"  # no pods of a live attempt: queued, preempted or suspended
    RUNNING = "running"  # every rank of the attempt exists and is alive (or done)
    SUCCEEDED = "succeeded"  # every rank of the attempt succeeded
    WORKER_FAILED = "worker-failed"  # a rank of the attempt failed
    BROKEN = "broken"  # ranks missing or terminating while others live
    FINISHED = "finished"  # status already Succeeded or Failed
    DELETING = "deleting"  # the DLJob is being deleted
    INVALID = "invalid"  # the spec cannot be scheduled


@dataclass
class JobRecord:
    obj: Obj
    state: State
    pods: list[Obj]
    attempt: int  # the current (highest) attempt, 0 if never started
    spec: JobSpec | None = None
    error: str = ""
    shares: tuple[ShareRecord, ...] = ()
    started_s: float | None = None
    live: list[Obj] = field(default_factory=list)

    @property
    def key(self) -> str:
        return job_id(self.obj)

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.obj["metadata"]["namespace"])

    def unfinished_pods(self) -> list[Obj]:
        return [p for p in self.pods if not finished(p)]


def pods_by_job(pods: Iterable[Obj]) -> dict[tuple[str, str], list[Obj]]:
    out: dict[tuple[str, str], list[Obj]] = defaultdict(list)
    for pod in pods:
        meta = pod["metadata"]
        name = (meta.get("labels") or {}).get(crd.LABEL_JOB)
        if name:
            out[(meta.get("namespace") or "", name)].append(pod)
    return out


def classify(obj: Obj, pods: list[Obj]) -> JobRecord:
    status_attempt = int((obj.get("status") or {}).get("attempt") or 0)
    attempt = max([status_attempt, *(pod_attempt(p) for p in pods)])
    rec = JobRecord(obj, State.WAITING, pods, attempt)
    if obj["metadata"].get("deletionTimestamp"):
        rec.state = State.DELETING
        return rec
    if phase_of(obj) in TERMINAL:
        rec.state = State.FINISHED
        return rec
    try:
        rec.spec = job_spec(obj)
    except ValueError as exc:
        rec.state, rec.error = State.INVALID, str(exc)
        return rec
    current = [p for p in pods if pod_attempt(p) == attempt]
    if not current:
        return rec
    ann = current[0]["metadata"].get("annotations") or {}
    world = int(ann.get(crd.ANN_WORLD_SIZE) or 0)
    rec.shares = tuple(decode_shares(ann.get(crd.ANN_ALLOCATION) or "[]"))
    if ann.get(crd.ANN_STARTED_AT):
        rec.started_s = parse_time(ann[crd.ANN_STARTED_AT])
    phases = [pod_phase(p) for p in current]
    rec.live = [p for p in current if not finished(p) and not terminating(p)]
    ranks = {p["metadata"]["annotations"].get(crd.ANN_RANK) for p in current}
    if "Failed" in phases:
        rec.state = State.WORKER_FAILED
    elif len(current) == world and phases.count("Succeeded") == world:
        rec.state = State.SUCCEEDED
    elif not rec.live:
        rec.state = State.WAITING
    elif len(ranks) == world and all(finished(p) or not terminating(p) for p in current):
        rec.state = State.RUNNING
    else:
        rec.state = State.BROKEN
    return rec
