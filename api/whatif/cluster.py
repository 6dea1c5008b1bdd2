"""What if in cluster mode: the live state read from the DLJobs and Nodes the API follows.

Called by api.whatif.forecast.observe when the backend is
api.cluster_mode.backend.ClusterModeBackend. The follower's informer caches
(api.cluster_mode.follower.Follower) hold every DLJob and Node; `live_state` (pure) turns them into
controller.whatif's LiveState the way the operator's views do (operators/views.py), with what the
API cannot see approximated and said so:

- the API does not follow pods, so a running job's GPUs are its status.allocation,
  and it has run since status.startTime (its pods' creation, not the moment its
  whole gang ran);
- a running job that reported its steps within the last minute (status.train, which
  the API writes from its reports) is as far along as the operator sees it
  (operators/views.py job_view): its last step over the steps it makes in
  spec.expectedDurationSeconds at its measured rate, so jobs measured slower or faster
  than the model are further or less far along; any other job's progress is its run
  time (status.executedSeconds plus the current attempt) over
  spec.expectedDurationSeconds (the operator's default when absent);
- the operator's round interval and placement are its defaults.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from api.settings import Settings
from api.whatif.observed import Observed
from controller.model import Allocation, GpuShare, JobSpec, JobStatus
from controller.sim import ResumedJob
from controller.whatif import LiveState
from operators.dljobs.resources import (
    ADMITTED,
    BACKOFF,
    PREEMPTED,
    RUNNING,
    SUSPENDED,
    TERMINAL_PHASES,
    database_id,
    job_spec,
    phase_of,
)
from operators.kube import Obj
from operators.kube.times import parse_time
from operators.nodes import ClusterView, build_cluster
from operators.operator import OperatorConfig
from operators.views import MEASURED_FRESH_S, measured_of, sustained_samples_per_s

STATUS_OF_WAITING_PHASE = {
    PREEMPTED: JobStatus.PREEMPTED,
    SUSPENDED: JobStatus.SUSPENDED,
    BACKOFF: JobStatus.PREEMPTED,  # ran and stopped, as operators/views.py sees it
}
OPERATOR_DEFAULTS = OperatorConfig(identity="")


def observe_cluster(backend: object, settings: Settings, active_policy: str | None) -> Observed:
    from api.cluster_mode.backend import ClusterModeBackend

    assert isinstance(backend, ClusterModeBackend)
    follower = backend.follower
    return live_state(
        follower.dljobs.items(), follower.nodes.items(), backend.now_s(), active_policy
    )


def live_state(
    dljobs: Iterable[Obj], nodes: Iterable[Obj], now_s: float, active_policy: str | None
) -> Observed:
    """The state of the DLJobs that are not finished, on the cluster the Nodes make."""
    view = build_cluster(list(nodes))
    jobs: list[ResumedJob] = []
    statuses: dict[str, str] = {}
    skipped = guessed = unplaced = measured = 0
    for obj in dljobs:
        if obj["metadata"].get("deletionTimestamp") or phase_of(obj) in TERMINAL_PHASES:
            continue
        try:
            spec = job_spec(obj)
        except (ValueError, KeyError):
            skipped += 1
            continue
        if not (obj.get("spec") or {}).get("expectedDurationSeconds"):
            guessed += 1
        job, placed, from_steps = _resumed(obj, spec, view, now_s)
        unplaced += not placed
        measured += from_steps
        jobs.append(job)
        statuses[job.spec.job_id] = phase_of(obj) or "Queued"
    notes = [
        f"cluster mode: {measured} running job(s) are as far along as their reported steps"
        " at their measured rate say; the others' progress is run time over"
        " spec.expectedDurationSeconds; a running job has run since status.startTime",
        f"cluster mode: the operator's round interval ({OPERATOR_DEFAULTS.interval_s:g} s)"
        f" and placement ({OPERATOR_DEFAULTS.placement}) are assumed",
    ]
    if guessed:
        notes.append(
            f"{guessed} job(s) give no spec.expectedDurationSeconds: the operator's"
            " default duration is assumed"
        )
    if unplaced:
        notes.append(f"{unplaced} running job(s) with no allocation in their status wait instead")
    if skipped:
        notes.append(f"{skipped} job(s) with a spec the operator refuses are left out")
    state = LiveState(
        now_s=now_s,
        cluster=view.cluster,
        jobs=tuple(jobs),
        down_nodes=frozenset(view.down_nodes),
        cordoned_nodes=view.cordoned_nodes,
        draining_nodes=frozenset(view.draining),
        round_interval_s=OPERATOR_DEFAULTS.interval_s,
        placement=OPERATOR_DEFAULTS.placement,
    )
    return Observed(
        state=state,
        active_policy=active_policy or "unknown",
        cluster=view.cluster.name,
        statuses=statuses,
        approximations=tuple(notes),
        clock="wall",
    )


def _resumed(
    obj: Obj, spec: JobSpec, view: ClusterView, now_s: float
) -> tuple[ResumedJob, bool, bool]:
    """The job as the simulator resumes it, whether a running one has its GPUs, and
    whether its progress is its reported steps'."""
    status = obj.get("status") or {}
    arrival = _time(status.get("arrivalTime")) or spec.submit_s
    spec = replace(spec, job_id=database_id(obj), submit_s=min(arrival, now_s))
    executed = float(status.get("executedSeconds") or 0.0)
    attained = float(status.get("attainedGpuSeconds") or 0.0)
    phase = phase_of(obj)
    alloc = _allocation(status, view) if phase in (ADMITTED, RUNNING) else None
    started = _time(status.get("startTime"))
    if alloc is not None and started is not None:
        ran = max(0.0, now_s - started)
        executed += ran
        attained += alloc.gpu_weight * ran
    duration = spec.duration_s or 0.0
    done = min(1.0, executed / duration) if duration > 0 else 0.0
    stepped = _measured_fraction(status, duration, now_s) if alloc is not None else None
    if stepped is not None:
        done = stepped
    first = _time(status.get("firstStartTime"))
    since = _time(status.get("waitingSince"))
    waiting = STATUS_OF_WAITING_PHASE.get(phase, JobStatus.QUEUED)
    job = ResumedJob(
        spec=spec,
        status=JobStatus.RUNNING if alloc is not None else waiting,
        done_fraction=done,
        attained_gpu_s=attained,
        executed_s=executed,
        restarts=int(status.get("restarts") or 0),
        first_start_s=min(first, now_s) if first is not None else None,
        waiting_since_s=min(since, now_s) if since is not None else None,
        allocation=alloc,
        batch_size=status.get("batchSize") or spec.batch_size,
    )
    placed = alloc is not None or phase not in (ADMITTED, RUNNING)
    return job, placed, stepped is not None


def _measured_fraction(status: Obj, duration_s: float, now_s: float) -> float | None:
    """The fraction done by the job's reported steps (status.train), as the operator
    counts it: its last step over the steps its measured rate makes in its expected
    duration; None without a report in the last MEASURED_FRESH_S or a rate."""
    measured = measured_of(status.get("train"))
    if measured is None or not measured.batch_size or duration_s <= 0:
        return None
    if now_s - measured.reported_s > MEASURED_FRESH_S:
        return None
    steps_per_s = sustained_samples_per_s(measured) / measured.batch_size
    if steps_per_s <= 0:
        return None
    return min(1.0, measured.step / (steps_per_s * duration_s))


def _allocation(status: Obj, view: ClusterView) -> Allocation | None:
    """status.allocation's shares on the cluster's indices (by GPU UUID, else by node
    name and index); None if any is on a node that left or is down."""
    index = view.uuid_index()
    shares = []
    for share in (status.get("allocation") or {}).get("shares") or []:
        where = index.get(str(share.get("uuid")))
        if where is None:
            try:
                where = (view.cluster.node_index(str(share.get("node"))), int(share.get("gpu")))
            except (KeyError, TypeError, ValueError):
                return None
        if where[0] in view.down_nodes:
            return None
        shares.append(GpuShare(where[0], where[1], float(share.get("fraction") or 1.0)))
    return Allocation(tuple(shares)) if shares else None


def _time(text: object) -> float | None:
    if not text:
        return None
    try:
        return parse_time(str(text))
    except ValueError:
        return None
