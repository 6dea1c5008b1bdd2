"""What each DLJob is doing now, read from the DLJob and its pods alone.

The backend classifies every DLJob each round (`classify`): level-triggered, so the
same answer comes after an operator restart as before it. The current attempt is the
highest `gpuflow.dev/attempt` among the job's pods; its pods say whether the job
runs (every rank there and alive), is finished, failed, or lost part of its gang.

A failed pod is a failure only if the operator did not delete it (a worker stopped by
the operator may exit with any code) and only until the lifecycle has settled its
attempt (`status.failedAttempt`): the failed pod stays, for its logs, and is never
counted twice. A job whose `status.restartAfter` is set waits out a back-off. A job
whose worker pod the API server refused as malformed stays invalid until its spec is
edited (`status.observedGeneration` below `metadata.generation`). A job
with no live pods and a `status.pendingStart` is starting: the policy gave it GPUs that
leaving pods still hold, and its pods are made once those are gone.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from controller.model import JobSpec
from operators import crd
from operators.dljobs.resources import (
    INVALID,
    INVALID_POD_TEMPLATE,
    PENDING_START,
    TERMINAL_PHASES,
    job_id,
    job_spec,
    phase_of,
)
from operators.kube import Obj
from operators.kube.times import parse_time
from operators.pods import (
    ShareRecord,
    decode_shares,
    finished,
    pod_attempt,
    pod_phase,
    terminating,
)
from operators.pods.failure_policy import Rule, parse_rules
from operators.pods.status import finished_at_s, running_since_s

# How long a started attempt's pods may take to all run (image pulls included) before
# the operator frees their GPUs and requeues the job: spec.startTimeoutSeconds. Five
# minutes covers pulling a multi-GB training image on a cold node.
DEFAULT_START_TIMEOUT_S = 300


class State(Enum):
    WAITING = "waiting"  # no pods of a live attempt: queued, preempted or suspended
    RUNNING = "running"  # every rank of the attempt exists and is alive (or done)
    # Given GPUs (status.pendingStart) that leaving pods still hold; no pods yet.
    STARTING = "starting"
    SUCCEEDED = "succeeded"  # every rank of the attempt succeeded
    WORKER_FAILED = "worker-failed"  # a rank of the attempt failed, not yet settled
    BACKOFF = "backoff"  # waits for status.restartAfter after a failure
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
    error_reason: str = "InvalidSpec"  # INVALID: the reason its status gives
    shares: tuple[ShareRecord, ...] = ()
    started_s: float | None = None  # when the operator created the attempt's pods
    # When the whole gang ran: the latest start of the attempt's worker containers;
    # None until every rank has run. Attained service counts from here.
    running_s: float | None = None
    # When the last worker of the attempt terminated, once all have; else None.
    finished_s: float | None = None
    restart_after_s: float | None = None  # status.restartAfter, the back-off's end
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S
    rules: tuple[Rule, ...] = ()  # spec.podFailurePolicy
    pending_batch: int | None = None  # STARTING: the batch size its pods will get
    # The DLJob's resourceVersion when the operator first saw it (RecordCache), before
    # its own writes: creation order within a second (views.arrival_times).
    first_version: str = ""
    live: list[Obj] = field(default_factory=list)
    failed: list[Obj] = field(default_factory=list)  # failures not yet settled

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


class RecordCache:
    """`classify` for every DLJob, again only for jobs whose DLJob or pods changed.

    KubeBackend.records() asks several times a round (sync, observe, the network
    publisher); with 10,000 DLJobs, classifying each every time dominated a round
    that had nothing to do. The informers replace an object on every change and never
    modify one in place, so a job whose DLJob and pods are the same objects as last
    time has the same record, which nobody modifies either."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], tuple[Obj, list[Obj], JobRecord]] = {}
        self._first: dict[str, str] = {}  # uid -> the resourceVersion first seen

    def records(self, jobs: Iterable[Obj], pods: Iterable[Obj]) -> dict[str, JobRecord]:
        by_job = pods_by_job(pods)
        entries = {}
        first: dict[str, str] = {}
        out = {}
        for obj in jobs:
            meta = obj["metadata"]
            key = (meta["namespace"], meta["name"])
            mine = by_job.get(key, [])
            last = self._entries.get(key)
            if last is not None and last[0] is obj and _same(last[1], mine):
                rec = last[2]
            else:
                rec = classify(obj, mine)
            uid = str(meta.get("uid"))
            first[uid] = self._first.get(uid) or str(meta.get("resourceVersion") or "")
            rec.first_version = first[uid]
            entries[key] = (obj, mine, rec)
            out[rec.key] = rec
        self._entries = entries
        self._first = first
        return out


def _same(a: list[Obj], b: list[Obj]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def classify(obj: Obj, pods: list[Obj]) -> JobRecord:
    status = obj.get("status") or {}
    attempt = max([int(status.get("attempt") or 0), *(pod_attempt(p) for p in pods)])
    rec = JobRecord(obj, State.WAITING, pods, attempt)
    if obj["metadata"].get("deletionTimestamp"):
        rec.state = State.DELETING
        return rec
    if phase_of(obj) in TERMINAL_PHASES:
        rec.state = State.FINISHED
        return rec
    try:
        rec.spec = job_spec(obj)
        rec.rules = parse_rules(obj.get("spec") or {})
        rec.start_timeout_s = start_timeout_s(obj)
    except ValueError as exc:
        rec.state, rec.error = State.INVALID, str(exc)
        return rec
    if status.get("restartAfter"):
        rec.restart_after_s = parse_time(status["restartAfter"])
    current = [p for p in pods if pod_attempt(p) == attempt]
    rec.state = _state(rec, current, settled=int(status.get("failedAttempt") or 0) >= attempt)
    if rec.state is State.WAITING and _pod_refused(obj):
        rec.state, rec.error_reason = State.INVALID, INVALID_POD_TEMPLATE
        rec.error = str(status.get("message") or "")
    elif rec.state is State.WAITING and rec.restart_after_s is not None:
        rec.state = State.BACKOFF
    elif rec.state is State.WAITING and status.get(PENDING_START):
        _pending_start(rec, status[PENDING_START])
    return rec


def _pod_refused(obj: Obj) -> bool:
    """Whether the API server refused this very spec's worker pod as malformed."""
    status = obj.get("status") or {}
    return (
        phase_of(obj) == INVALID
        and status.get("reason") == INVALID_POD_TEMPLATE
        and status.get("observedGeneration") == obj["metadata"].get("generation")
    )


def _pending_start(rec: JobRecord, pending: object) -> None:
    """Mark a waiting job STARTING on the shares `status.pendingStart` reserves; a
    malformed one (never written by the operator) leaves it waiting."""
    if not isinstance(pending, dict):
        return
    try:
        shares = tuple(
            ShareRecord(str(d["node"]), int(d["gpu"]), str(d["uuid"]), float(d["fraction"]))
            for d in pending["shares"]
        )
        since = parse_time(str(pending["since"]))
        batch = pending.get("batchSize")
        rec.pending_batch = None if batch is None else int(batch)
    except (KeyError, TypeError, ValueError):
        return
    if shares:
        rec.state, rec.shares, rec.started_s = State.STARTING, shares, since


def _state(rec: JobRecord, current: list[Obj], settled: bool) -> State:
    """The state of the attempt from its pods; `settled`: its failure was handled."""
    if not current:
        return State.WAITING
    ann = current[0]["metadata"].get("annotations") or {}
    world = int(ann.get(crd.ANN_WORLD_SIZE) or 0)
    rec.shares = tuple(decode_shares(ann.get(crd.ANN_ALLOCATION) or "[]"))
    if ann.get(crd.ANN_STARTED_AT):
        rec.started_s = parse_time(ann[crd.ANN_STARTED_AT])
    starts = [running_since_s(p) for p in current]
    if len(current) == world and all(t is not None for t in starts):
        rec.running_s = max(t for t in starts if t is not None)
    ends = [finished_at_s(p) for p in current]
    if all(finished(p) for p in current) and all(t is not None for t in ends):
        rec.finished_s = max(t for t in ends if t is not None)
    rec.live = [p for p in current if not finished(p) and not terminating(p)]
    if not settled:
        rec.failed = [p for p in current if pod_phase(p) == "Failed" and not terminating(p)]
    ranks = {(p["metadata"].get("annotations") or {}).get(crd.ANN_RANK) for p in current}
    succeeded = [p for p in current if pod_phase(p) == "Succeeded"]
    if rec.failed:
        return State.WORKER_FAILED
    if len(current) == world and len(succeeded) == world:
        return State.SUCCEEDED
    if not rec.live:
        return State.WAITING
    if len(ranks) == world and len(rec.live) + len(succeeded) == len(current):
        return State.RUNNING
    return State.BROKEN


def start_timeout_s(obj: Obj) -> float:
    """spec.startTimeoutSeconds (default DEFAULT_START_TIMEOUT_S); ValueError naming the
    field if it is not a positive integer."""
    value = (obj.get("spec") or {}).get("startTimeoutSeconds", DEFAULT_START_TIMEOUT_S)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"spec.startTimeoutSeconds: must be a positive integer, not {value!r}")
    return float(value)
