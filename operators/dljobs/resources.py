"""DLJob objects to and from the controller's model: `JobSpec`s in, statuses out.

The backend calls `job_spec` for every DLJob it shows a policy, and `status_mutator`
to build each status write (applied by `KubeApi.update_status`, which retries on
conflicts with a fresh object). Conditions follow the Kubernetes convention: one per
type, `status` "True"/"False", `lastTransitionTime` moved only when `status` flips.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from controller.model import JobSpec
from controller.model.precision import DEFAULT_PRECISION, Precision, parse_precision
from operators import crd
from operators.dljobs.template import check_template, pod_requests
from operators.kube import Obj
from operators.kube.times import format_time, micro_time, parse_time

# A job without an expected duration is shown to policies as one hour long: only
# oracle policies (SRTF) read it, and they need some figure.
DEFAULT_DURATION_S = 3600.0
DEFAULT_GRACE_S = 30
DEFAULT_BACKOFF_LIMIT = 3
# Longest DLJob name: pods are named <job>-<attempt>-<rank> and pod hostnames, like
# the job label and service names, may have at most 63 characters.
MAX_NAME_LEN = 50

# Labels the API service puts on the DLJobs it creates for REST submissions: the
# submitter's tenant and the job's id in the job database (api/cluster_mode/backend.py).
LABEL_TENANT = f"{crd.GROUP}/tenant"
LABEL_JOB_ID = f"{crd.GROUP}/job-id"
JOB_DB_ID = re.compile(r"[0-9a-f]{32}")  # a job database id: 32 lowercase hex digits
# The Secret holding a job's metrics token (key `token`), made by the API in the
# DLJob's namespace and owned by the DLJob; its worker pods read it into
# GPUFLOW_METRICS_TOKEN (operators/pods/__init__.py).
METRICS_SECRET_SUFFIX = "-gpuflow-metrics"
METRICS_SECRET_KEY = "token"

QUEUED, ADMITTED, RUNNING = "Queued", "Admitted", "Running"
PREEMPTED, SUSPENDED, SUCCEEDED, FAILED = "Preempted", "Suspended", "Succeeded", "Failed"
# A counted failure of a worker: the job waits out its back-off (status.restartAfter),
# then for GPUs, to restart; Preempted is for a job whose GPUs a policy or an admin's
# drain took.
BACKOFF = "BackOff"
# Not terminal: the operator looks at the spec again every round, and a fixed spec
# (kubectl apply) queues the job.
INVALID = "Invalid"
# Why a job is Invalid whose worker pod the API server refused as malformed (400, 422:
# the template passes the DLJob's schema but not the Pod's); it stays Invalid while
# metadata.generation is the one refused (status.observedGeneration), and an edited
# spec is tried again (operators/writer.py, operators/jobs.py).
INVALID_POD_TEMPLATE = "InvalidPodTemplate"
# Not terminal either: no set of the cluster's nodes could ever hold the job; looked at
# again every round, so that it queues once the cluster grows.
UNSCHEDULABLE = "Unschedulable"
# The phases a DLJob never leaves.
TERMINAL_PHASES = frozenset({SUCCEEDED, FAILED})
# Phases in which a job waits in the queue: entering one from any other sets
# status.waitingSince (the policies' `waiting_since_s`).
WAITING_PHASES = frozenset({QUEUED, PREEMPTED, SUSPENDED, BACKOFF})
# Phases of a job that ran and was stopped, waiting to run again: its True Queued
# condition says why it still waits.
STOPPED_PHASES = frozenset({PREEMPTED, SUSPENDED, BACKOFF})
# status.pendingStart: the GPUs an admitted job waits for, while pods that are leaving
# (its own previous attempt's, or other jobs') still hold them (operators/applier.py).
PENDING_START = "pendingStart"
# status.allocatedGpus: the GPUs its pods hold (`kubectl get dljobs` ALLOCATED), kept
# only in the phases in which it holds them.
ALLOCATED_GPUS = "allocatedGpus"
HOLDING_PHASES = frozenset({ADMITTED, RUNNING})
CONDITION_TYPES = (
    QUEUED,
    ADMITTED,
    RUNNING,
    PREEMPTED,
    SUSPENDED,
    BACKOFF,
    SUCCEEDED,
    FAILED,
    INVALID,
    UNSCHEDULABLE,
)


def job_id(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}"


def foreign_id(uid: str) -> str:
    """The database id of a DLJob the API did not create: its uid's 32 hex digits."""
    hexed = uid.replace("-", "").lower()
    if JOB_DB_ID.fullmatch(hexed):
        return hexed
    return hashlib.sha256(uid.encode()).hexdigest()[:32]


def database_id(obj: Obj) -> str:
    """A DLJob's id in the API's job database: its job-id label (REST jobs), else the
    id derived from its uid (jobs made with kubectl, adopted by the API)."""
    meta = obj["metadata"]
    label = (meta.get("labels") or {}).get(LABEL_JOB_ID)
    return str(label) if label and JOB_DB_ID.fullmatch(label) else foreign_id(meta["uid"])


def metrics_secret_name(job_name: str) -> str:
    return f"{job_name}{METRICS_SECRET_SUFFIX}"


def job_spec(obj: Obj) -> JobSpec:
    """The model's view of a DLJob; ValueError, its message starting with the field's
    path, for what the CRD schema cannot refuse (or a cluster without CEL rules lets
    through): `spec.minGpus: must be <= spec.gpus (4)`."""
    meta, spec = obj["metadata"], obj.get("spec") or {}
    if len(meta["name"]) > MAX_NAME_LEN:
        raise ValueError(f"metadata.name: longer than {MAX_NAME_LEN} characters")
    check_template(spec)
    gpus = _check_gpus(spec)
    mem = spec.get("gpuMemMib")
    pod = pod_requests(obj)  # each worker pod's, one pod per node the job spans
    return JobSpec(
        job_id=job_id(obj),
        submit_s=parse_time(meta["creationTimestamp"]),
        num_gpus=gpus,
        model=str(spec.get("model") or ""),
        duration_s=float(spec.get("expectedDurationSeconds") or DEFAULT_DURATION_S),
        min_gpus=int(spec.get("minGpus") or 0),
        max_gpus=int(spec.get("maxGpus") or 0),
        batch_size=spec.get("batchSize"),
        gpu_mem_mib=int(mem) if mem else None,
        cpu_milli=pod.cpu_milli,
        host_mem_mib=pod.mem_mib,
        tenant=str(spec.get("queue") or spec.get("tenant") or "default"),
        # A leaf Queue it names (controller.model.quotas.QuotaTree.leaf_of); the same
        # field has long stood for the tenant when none is given, hence both.
        queue=str(spec.get("queue") or ""),
        priority=int(spec.get("priority") or 0),
        gpu_models=_gpu_models(spec),
        precision=_precision(spec),
        deadline_s=_deadline_s(spec),
    )


def _deadline_s(spec: Obj) -> float | None:
    """spec.deadlineSeconds: how long after its creation the job must finish; absent:
    best-effort. The CRD schema refuses a value <= 0 too; this is for objects that did
    not pass through it."""
    value = spec.get("deadlineSeconds")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e12:
        raise ValueError(f"spec.deadlineSeconds: must be a number of seconds > 0, not {value!r}")
    return float(value)


def _precision(spec: Obj) -> Precision:
    """spec.precision: what the job trains in (controller.model.precision); absent:
    the default, TF32. The CRD schema's enum refuses other values too; this is for
    objects that did not pass through it (the API's manifests, tests)."""
    value = spec.get("precision")
    if value is None:
        return DEFAULT_PRECISION
    try:
        return parse_precision(value)
    except ValueError as e:
        raise ValueError(f"spec.precision: {e}") from None


def _gpu_models(spec: Obj) -> frozenset[str]:
    """spec.gpuModels: the GPU models (as the node agent names them, the Nodes'
    `gpu_type`) the job accepts; empty or absent accepts any."""
    value = spec.get("gpuModels")
    if value is None:
        return frozenset()
    if not isinstance(value, list):
        raise ValueError(f"spec.gpuModels: must be a list of GPU model names, not {value!r}")
    for i, name in enumerate(value):
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"spec.gpuModels[{i}]: must be a non-empty string, not {name!r}")
    return frozenset(value)


def _positive_int(spec: Obj, field: str) -> int | None:
    value = spec.get(field)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"spec.{field}: must be a positive integer, not {value!r}")
    return value


def _check_gpus(spec: Obj) -> int:
    """spec.gpus, checked with the elastic bounds: minGpus <= gpus <= maxGpus."""
    gpus = _positive_int(spec, "gpus")
    if gpus is None:
        raise ValueError("spec.gpus: required")
    low, high = _positive_int(spec, "minGpus"), _positive_int(spec, "maxGpus")
    if low is not None and low > gpus:
        raise ValueError(f"spec.minGpus: must be <= spec.gpus ({gpus})")
    if high is not None and high < gpus:
        raise ValueError(f"spec.maxGpus: must be >= spec.gpus ({gpus})")
    for field in ("gpuMemMib", "batchSize"):
        _positive_int(spec, field)
    return gpus


def restart_point(obj: Obj) -> str:
    """Where a restarted job resumes, as status messages say it: the operator cannot
    see the checkpoint volume, so a job with spec.checkpoint.path resumes from its
    newest checkpoint if it wrote one (gpuflow.train keeps one per attempt), and one
    without starts over."""
    ckpt = (obj.get("spec") or {}).get("checkpoint") or {}
    if ckpt.get("path"):
        return "from its newest checkpoint (from the beginning if it wrote none)"
    return "from the beginning (no spec.checkpoint.path)"


def grace_period_s(obj: Obj) -> int:
    ckpt = (obj.get("spec") or {}).get("checkpoint") or {}
    return int(ckpt.get("gracePeriodSeconds", DEFAULT_GRACE_S))


def backoff_limit(obj: Obj) -> int:
    return int((obj.get("spec") or {}).get("backoffLimit", DEFAULT_BACKOFF_LIMIT))


def phase_of(obj: Obj) -> str:
    return str((obj.get("status") or {}).get("phase") or "")


@dataclass(frozen=True)
class Reasoned:
    reason: str
    message: str


def conditions_for(phase: str, why: Reasoned, pending: Reasoned | None) -> dict[str, Reasoned]:
    """The conditions that are True in `phase`: the phase's own (with `why`), plus
    Queued with the why-pending reason for a job that waits after a stop, and
    Admitted under Running."""
    true = {phase: why}
    if phase in STOPPED_PHASES and pending is not None:
        true[QUEUED] = pending
    if phase == RUNNING:
        true[ADMITTED] = Reasoned("Admitted", "the scheduler gave the job its GPUs")
    return true


def status_mutator(
    phase: str,
    why: Reasoned,
    *,
    pending: Reasoned | None = None,
    fields: Mapping[str, Any] | None = None,
    add: Mapping[str, float] | None = None,
    now_s: float,
) -> Callable[[Obj], Obj | None]:
    """A function from a DLJob to it with the new status (None: nothing changes).

    `fields` are set, `add` added to numeric fields (attained service on a stop), so
    that a retry after a conflict adds to the fresh value, never twice."""
    true = conditions_for(phase, why, pending)

    def mutate(obj: Obj) -> Obj | None:
        old = obj.get("status") or {}
        if phase_of(obj) in TERMINAL_PHASES and phase not in TERMINAL_PHASES:
            return None  # a finished job stays finished
        status = dict(old)
        # A reservation lasts only until the job's next status change that does not
        # restate it: its pods made, or the job stopped, requeued or finished.
        status.pop(PENDING_START, None)
        if phase not in HOLDING_PHASES:
            status.pop(ALLOCATED_GPUS, None)
        status.update(fields or {})
        for name, delta in (add or {}).items():
            status[name] = round(float(old.get(name) or 0.0) + delta, 3)
        if phase in WAITING_PHASES and phase_of(obj) not in WAITING_PHASES:
            status["waitingSince"] = micro_time(now_s)
        status["phase"] = phase
        shown = true.get(QUEUED, why) if phase in STOPPED_PHASES else why
        status["reason"], status["message"] = shown.reason, shown.message
        status["conditions"] = _conditions(old.get("conditions") or [], true, now_s)
        if status == old:
            return None
        new = copy.copy(obj)
        new["status"] = status
        return new

    return mutate


def fields_mutator(fields: Mapping[str, Any]) -> Callable[[Obj], Obj | None]:
    """A function from a DLJob to it with these status fields set (None: all are set
    already); phase and conditions untouched."""

    def mutate(obj: Obj) -> Obj | None:
        old = obj.get("status") or {}
        if all(old.get(k) == v for k, v in fields.items()):
            return None
        new = copy.copy(obj)
        new["status"] = {**old, **fields}
        return new

    return mutate


def _conditions(old: list[Obj], true: Mapping[str, Reasoned], now_s: float) -> list[Obj]:
    by_type = {c["type"]: c for c in old}
    out = []
    for ctype in CONDITION_TYPES:
        prev = by_type.get(ctype)
        if ctype in true:
            r = true[ctype]
            kept = prev is not None and prev.get("status") == "True"
            when = prev["lastTransitionTime"] if prev and kept else format_time(now_s)
            out.append(_condition(ctype, "True", r.reason, r.message, when))
        elif prev is not None:
            if prev.get("status") == "False":
                out.append(prev)
            else:
                when = format_time(now_s)
                out.append(_condition(ctype, "False", prev["reason"], prev["message"], when))
    return out


def _condition(ctype: str, status: str, reason: str, message: str, when: str) -> Obj:
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": when,
    }
