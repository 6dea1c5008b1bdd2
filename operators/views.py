"""What the policies see of live jobs: JobViews built from DLJobs and their pods.

Called by operators.backend.KubeBackend.observe() each round. Everything here is read
from what happened (the DLJob's status, its pods' states), never from the spec's
hints alone: a job's arrival is the time the operator first saw it, its attained
service counts from when its whole gang was Running, its waiting time from when it
last entered the queue. A job whose gang does not run yet (its pods starting, or its
GPUs still held by leaving pods) is shown running on its GPUs but resuming only after
its restart cost, as the simulator shows a job it (re)started: no policy judges it
settled before it ran. A running job's GPU use is what the node agents last reported
of its pods (`gpu_use_of`); a stopped one's, what was measured of it before it stopped
(`status.gpuUse`, which the applier records with the stop: `gpu_use_fields`). Its
utilisation measured alone becomes the view's `spec.gpu_util`, which packing and the
sharing model read in place of the catalogue's (`JobView.util_source` says which).
Pure functions: the backend writes what they decide.

A running job's measured rate is what it reported since its gang started (more than a
second after: the start is known to the second); a report of its previous attempt (a
restart, a migration to another GPU type) gives its steps, and its speed is the
model's on its GPUs by the ratio it measured on their type before
(operators/dljobs/type_throughput.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace

from controller.model import (
    Allocation,
    Cluster,
    GpuShare,
    GpuUse,
    JobSpec,
    JobStatus,
    JobView,
    Measured,
)
from controller.rates import RateModel
from operators.dljobs.resources import BACKOFF, PREEMPTED, SUSPENDED, phase_of
from operators.dljobs.template import pod_requests
from operators.dljobs.type_throughput import measured_ratio, recorded, reported_since
from operators.jobs import JobRecord, State
from operators.kube.times import micro_time, parse_time
from operators.nodes import ClusterView
from operators.pods import ShareRecord

# A job in back-off ran and stopped as a preempted one did: to the policies it is one
# (its attained service and restart cost count the same).
WAITING_STATUS = {
    PREEMPTED: JobStatus.PREEMPTED,
    SUSPENDED: JobStatus.SUSPENDED,
    BACKOFF: JobStatus.PREEMPTED,
}
# The jobs a policy sees: waiting ones, and those holding (or given) GPUs.
SEEN = (State.WAITING, State.RUNNING, State.STARTING)
# Jobs first seen in the same round arrive this far apart, in creation order.
ARRIVAL_TIE_S = 1e-6
# A running job's measured rate counts while its last report is this recent: a few of
# the API's summary intervals (5 s) and of the library's reporting windows.
MEASURED_FRESH_S = 60.0
# The status field of a stopped job's last measured GPU use.
GPU_USE = "gpuUse"


def arrival_times(
    records: Iterable[JobRecord], now: float
) -> tuple[dict[str, float], list[JobRecord]]:
    """Each active job's arrival time, and the jobs seen for the first time (whose
    time the caller records in `status.arrivalTime`).

    A recorded arrival is kept; a new job arrives now (sub-second: creationTimestamp
    has whole seconds). Jobs first seen in one round arrive a microsecond apart, in
    the order of their creation: creationTimestamp, then the resourceVersion the
    operator first saw (the store's revision, which grows with every write: within a
    second the one created first has the lower, unless another writer changed it
    before the operator saw it), then uid."""
    out: dict[str, float] = {}
    new: list[JobRecord] = []
    for rec in records:
        if rec.state not in SEEN or rec.spec is None:
            continue
        recorded = (rec.obj.get("status") or {}).get("arrivalTime")
        if recorded:
            out[rec.key] = parse_time(recorded)
        else:
            new.append(rec)
    new.sort(key=_creation_order)
    # Whole microseconds, as status.arrivalTime keeps them: now + i * 1e-6 in floats
    # could round two neighbours to the same microsecond, a tie broken by name later.
    base_us = math.floor(now / ARRIVAL_TIE_S)
    for i, rec in enumerate(new):
        out[rec.key] = (base_us + i) * ARRIVAL_TIE_S
    return out, new


def _creation_order(rec: JobRecord) -> tuple[float, float, str]:
    version = rec.first_version
    revision = float(version) if version.isdigit() else math.inf  # opaque elsewhere
    return (rec.spec.submit_s if rec.spec else 0.0, revision, str(rec.obj["metadata"]["uid"]))


def never_fits(spec: JobSpec, cluster: Cluster) -> str | None:
    """Why no set of the cluster's nodes, down ones included, could ever hold the job's
    GPUs (None: some could, once free). A job naming GPU models (spec.gpuModels) is
    measured against the nodes of those models only."""
    nodes = [n for n in cluster.nodes if spec.accepts(n.gpu_type.name)]
    if not nodes:
        wanted = ", ".join(sorted(spec.gpu_models))
        have = ", ".join(sorted({n.gpu_type.name for n in cluster.nodes})) or "none"
        return f"accepts GPU models {wanted}; the cluster has {have}"
    total = sum(n.num_gpus for n in nodes)
    if spec.min_gpus > total:
        of = f" of {', '.join(sorted(spec.gpu_models))}" if spec.gpu_models else ""
        return f"needs {spec.min_gpus} GPUs; the cluster has {total}{of} on {len(nodes)} node(s)"
    mem = spec.gpu_mem_mib
    if mem is not None and all(n.gpu_type.mem_mib < mem for n in nodes):
        most = max(n.gpu_type.mem_mib for n in nodes)
        return f"needs {mem} MiB of GPU memory; the largest GPU has {most} MiB"
    return None


def unschedulable_reason(rec: JobRecord, view: ClusterView) -> str | None:
    """Why a waiting job can never run on this cluster (GPUs, GPU memory, or a worker
    pod's CPU and memory against every node's allocatable), or None."""
    assert rec.spec is not None
    never = never_fits(rec.spec, view.cluster)
    models = rec.spec.gpu_models
    if never is None and not view.could_hold(requests := pod_requests(rec.obj), models):
        of = f" of {', '.join(sorted(models))}" if models else ""
        never = (
            f"a worker pod needs {requests.cpu_milli / 1000:g} CPU and "
            f"{requests.mem_mib} MiB of memory; no node{of} up has that much allocatable"
        )
    return never


def job_view(
    rec: JobRecord, view: ClusterView, rates: RateModel, now: float, arrival_s: float
) -> JobView | None:
    """The policy's view of a waiting or running job (None: not the policy's to see,
    or running on a node that left, which the lifecycle settles)."""
    if rec.spec is None or rec.state not in SEEN:
        return None
    status = rec.obj.get("status") or {}
    batch = rec.pending_batch or status.get("batchSize") or rec.spec.batch_size
    use = gpu_use_of(rec, view, now) if rec.state is not State.WAITING else None
    use = _with_recorded(use, status.get(GPU_USE))
    util = rec.spec.gpu_util if use is None or use.util is None else use.util
    spec = replace(rec.spec, submit_s=arrival_s, gpu_util=util)
    try:
        nominal = rates.nominal_rate_ips(spec)
    except ValueError:
        nominal = 1.0  # larger than the cluster now; the policy says why it waits
    alloc = None
    job_status = WAITING_STATUS.get(phase_of(rec.obj), JobStatus.QUEUED)
    mark = now
    rate = 0.0
    resume = now
    if rec.state is not State.WAITING:
        alloc = allocation_of(rec.shares, view)
        if alloc is None:
            return None
        alloc = alloc.with_host(spec.host)  # its pods' CPU and memory on each node
        job_status = JobStatus.RUNNING
        # Service and progress count from when the whole gang ran (pods still starting
        # have given nothing yet).
        mark = min(now, rec.running_s) if rec.running_s is not None else now
        resume = mark if rec.running_s is not None else now + rates.restart_s(spec)
        rate = rates.rate_ips(spec, alloc, batch_size=batch)
    executed = float(status.get("executedSeconds") or 0.0)
    attained = float(status.get("attainedGpuSeconds") or 0.0)
    done = executed * nominal
    measured = measured_of(status.get("train"))
    source = "model"
    if measured is not None and measured.batch_size:
        # The performance model, fitted to the job's reports by one factor: the ratio
        # of its measured steps per second to the model's at the size it ran at.
        # Its progress is then counted in its own steps.
        steps_per_s = sustained_samples_per_s(measured) / measured.batch_size
        fresh = now - measured.reported_s <= MEASURED_FRESH_S
        running_s = rec.running_s if rec.state is State.RUNNING else None
        if alloc is not None and fresh and not reported_since(measured.reported_s, running_s):
            # The previous attempt's report (a restart, a migration): its steps count,
            # its speed was another placement's. The model's here, by the job's
            # measured ratio on this GPU type where it ran on it before.
            record = recorded(status)
            steps_per_s = rate * measured_ratio(record, spec, alloc, view.cluster, rates)
        if alloc is not None and fresh and steps_per_s > 0 and rate > 0:
            nominal *= steps_per_s / rate
            rate, source = steps_per_s, "measured"
            # Quantities at mark_s move with it to the report's time.
            at = min(now, max(mark, measured.reported_s))
            attained += alloc.gpu_weight * (at - mark)
            executed += at - mark
            done, mark = float(measured.step), at
    total = max(done, nominal * (spec.duration_s or 0.0))
    if source == "model" and rate > 0 and total > 0:
        # In work-batch iterations at a batch not the job's own, as the simulator counts.
        rate = rates.work_rate_ips(spec, rate, batch, done / total)
    first = status.get("firstStartTime")
    waiting = status.get("waitingSince")
    return JobView(
        job_id=rec.key,
        spec=spec,
        status=job_status,
        allocation=alloc,
        mark_s=mark,
        attained_gpu_s=attained,
        executed_s=executed,
        done_iters=done,
        total_iters=total,
        rate_ips=rate,
        resume_s=max(resume, mark),
        nominal_rate_ips=nominal,
        first_start_s=parse_time(first) if first else None,
        waiting_since_s=max(arrival_s, parse_time(waiting)) if waiting else arrival_s,
        restarts=int(status.get("restarts") or 0),
        batch_size=batch,
        rate_source=source,
        measured=measured,
        gpu_use=use,
    )


def gpu_use_of(rec: JobRecord, view: ClusterView, now: float) -> GpuUse | None:
    """The job's GPU use from its pods' latest reports (None: no pod reported within
    MEASURED_FRESH_S): the mean of its pods' utilisations alone (None unless every
    reporting pod has one), the most memory any pod takes of one GPU, alone only if
    every pod is, reported when the oldest of them was."""
    figures = []
    for pod in rec.pods:
        meta = pod["metadata"]
        use = view.pod_use.get(f"{meta.get('namespace') or ''}/{meta['name']}")
        if use is not None and now - use.reported_s <= MEASURED_FRESH_S:
            figures.append(use)
    if not figures:
        return None
    utils = [f.util for f in figures if f.util is not None]
    return GpuUse(
        util=sum(utils) / len(utils) if len(utils) == len(figures) else None,
        mem_mib=max(f.mem_mib for f in figures),
        alone=all(f.alone for f in figures),
        reported_s=min(f.reported_s for f in figures),
    )


def gpu_use_fields(job: JobView | None) -> dict[str, object]:
    """The status fields that keep a job's GPU use measured alone past its pods (the
    applier writes them as it stops the job): none if it has no such measurement."""
    use = job.gpu_use if job is not None else None
    if use is None or use.util is None:
        return {}
    return {
        GPU_USE: {
            "utilPct": round(100.0 * use.util, 1),
            "memMib": use.mem_mib,
            "measuredAt": micro_time(use.reported_s),
        }
    }


def _with_recorded(use: GpuUse | None, recorded: object) -> GpuUse | None:
    """`use`, its utilisation alone taken from `status.gpuUse` where it has none (a job
    stopped and restarted, or waiting); a malformed record is none."""
    if (use is not None and use.util is not None) or not isinstance(recorded, dict):
        return use
    try:
        util = float(recorded["utilPct"]) / 100.0
        old = GpuUse(util, int(recorded["memMib"]), False, parse_time(recorded["measuredAt"]))
    except (AttributeError, KeyError, TypeError, ValueError):
        return use
    if not 0.0 < util <= 1.0:
        return use
    return old if use is None else replace(use, util=old.util)


def measured_of(train: object) -> Measured | None:
    """A DLJob's `status.train` summary (written by the API from the job's reports) as
    the model's `Measured`; None when absent or malformed (a job's reports never stop
    a round)."""
    if not isinstance(train, dict) or "step" not in train or "reportedAt" not in train:
        return None
    try:
        return Measured(
            reported_s=parse_time(str(train["reportedAt"])),
            step=int(train["step"]),
            batch_size=_int_or_none(train.get("batchSize")),
            gpus=_int_or_none(train.get("gpus")),
            samples_per_s=_float_or_none(train.get("samplesPerSecond")),
            throughput=tuple(
                (int(t["gpus"]), int(t["batchSize"]), float(t["samplesPerSecond"]))
                for t in train.get("throughput") or ()
            ),
            losses=tuple((int(k), float(v)) for k, v in train.get("loss") or ()),
            grad_sqr=_float_or_none(train.get("gradSqr")),
            grad_var=_float_or_none(train.get("gradVar")),
            epoch_steps=_int_or_none(train.get("epochSteps")),
        )
    except (KeyError, TypeError, ValueError):
        return None


def sustained_samples_per_s(measured: Measured) -> float:
    """The job's throughput at the size it runs at now: the mean of its last windows
    there (the API keeps it per size), else its last window alone."""
    for gpus, batch, samples_per_s in measured.throughput:
        if gpus == measured.gpus and batch == measured.batch_size:
            return samples_per_s
    return measured.samples_per_s or 0.0


def _int_or_none(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]


def _float_or_none(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def allocation_of(shares: tuple[ShareRecord, ...], view: ClusterView) -> Allocation | None:
    """The model's allocation of a job's pods' shares; None if a node left or is down."""
    index = view.uuid_index()
    out = []
    for s in shares:
        where = index.get(s.uuid)
        if where is None or where[0] in view.down_nodes:
            return None
        out.append(GpuShare(where[0], where[1], s.fraction))
    return Allocation(tuple(out)) if out else None
