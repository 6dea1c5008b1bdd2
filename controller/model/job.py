"""Jobs: what a user asked for (`JobSpec`) and what the scheduler knows of it (`JobView`).

Trace loaders, the API and the operator (from each DLJob) build `JobSpec`s; a backend
(the simulator, the API's local mode, the Kubernetes operator) turns each active job
into a `JobView` for every snapshot it hands a policy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from controller.model.allocation import Allocation
from controller.model.cluster import NO_HOST, HostRequest
from controller.model.precision import DEFAULT_PRECISION, Precision, parse_precision

# One GPU in milli-GPUs: the unit of a GPU share request (Alibaba open-gpu-share's
# `alibabacloud.com/gpu-milli`, which the openb trace uses).
MILLI_PER_GPU = 1000


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job as submitted.

    `num_gpus` is the gang size asked for; an elastic job also gives `min_gpus` and
    `max_gpus` (both default to `num_gpus`). The work is `iterations` if known, else
    `duration_s`: the run time the trace recorded at `num_gpus` GPUs, which the
    backend converts to iterations with the performance model. Iterations are counted
    at `work_batch` (default: the job's own `batch_size`); when the two differ, a step
    at the job's batch is worth its statistical gain in work-batch steps (Pollux's
    progress, §3.1), so a job run at a large, inefficient batch needs more steps than
    the work says. `gpu_mem_mib` set
    means the job may share a GPU with others when their memory fits; None means it
    wants its GPUs to itself.

    Besides GPUs, each worker pod (one per node the job spans) asks `cpu_milli`
    milli-cores and `host_mem_mib` MiB of host memory (0: nothing, every trace before
    them). `gpu_milli` between 1 and 999 asks a share of one GPU of that many milli-GPUs
    (a 1-GPU job only; 0 or 1000: whole GPUs). `gpu_models` names the GPU models
    (`GpuType.name`) the job accepts; empty accepts any. `precision` is what it trains
    in (controller.model.precision; default TF32, the precision the catalogue's figures
    assume), which sets its speed on a GPU where no rate was measured for it.

    `gpu_util` is how busy the job keeps a GPU alone (0..1], where this job's own
    figure is known: a trace's (openb's GPU share: controller.traces.formats.alibaba) or what
    the node agent measured of it live (operators/views.py puts it here). None: its
    model's catalogue figure. Packing and the sharing model read it through
    `controller.model.catalog.gpu_util_of`, in replays and live alike.

    `deadline_s` is how long after its submission the job must finish (ElasticFlow's
    and the deadline schedulers' "deadline"); None: best-effort, no deadline. `due_s`
    is the same deadline on the clock of `submit_s`.
    """

    job_id: str
    submit_s: float
    num_gpus: int
    model: str = ""
    duration_s: float | None = None
    iterations: float | None = None
    min_gpus: int = 0
    max_gpus: int = 0
    batch_size: int | None = None
    work_batch: int | None = None
    gpu_mem_mib: int | None = None
    cpu_milli: int = 0
    host_mem_mib: int = 0
    gpu_milli: int = 0
    gpu_models: frozenset[str] = frozenset()
    tenant: str = "default"
    user: str = ""
    priority: int = 0
    # The leaf queue the job asks for; "" means the queue of its tenant
    # (controller.model.quotas.QuotaTree.leaf_of).
    queue: str = ""
    precision: Precision = DEFAULT_PRECISION
    gpu_util: float | None = None
    deadline_s: float | None = None

    def __post_init__(self) -> None:
        if self.num_gpus < 1:
            raise ValueError(f"job {self.job_id}: num_gpus must be >= 1, got {self.num_gpus}")
        if self.min_gpus == 0:
            object.__setattr__(self, "min_gpus", self.num_gpus)
        if self.max_gpus == 0:
            object.__setattr__(self, "max_gpus", self.num_gpus)
        if not self.min_gpus <= self.num_gpus <= self.max_gpus:
            raise ValueError(
                f"job {self.job_id}: need min_gpus <= num_gpus <= max_gpus, got "
                f"{self.min_gpus} <= {self.num_gpus} <= {self.max_gpus}"
            )
        if self.duration_s is None and self.iterations is None:
            raise ValueError(f"job {self.job_id}: give duration_s or iterations")
        if self.duration_s is not None and not self.duration_s > 0:
            raise ValueError(f"job {self.job_id}: duration_s must be > 0")
        if self.iterations is not None and not self.iterations > 0:
            raise ValueError(f"job {self.job_id}: iterations must be > 0")
        for name in ("batch_size", "work_batch"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"job {self.job_id}: {name} must be >= 1, got {value}")
        if self.submit_s < 0:
            raise ValueError(f"job {self.job_id}: submit_s must be >= 0")
        if self.cpu_milli < 0 or self.host_mem_mib < 0:
            raise ValueError(f"job {self.job_id}: cpu_milli and host_mem_mib must be >= 0")
        if not 0 <= self.gpu_milli <= MILLI_PER_GPU:
            raise ValueError(f"job {self.job_id}: gpu_milli must be in 0..{MILLI_PER_GPU}")
        if not isinstance(self.precision, Precision):
            try:
                object.__setattr__(self, "precision", parse_precision(self.precision))
            except ValueError as e:
                raise ValueError(f"job {self.job_id}: precision {e}") from None
        if self.is_share and self.max_gpus != 1:
            raise ValueError(f"job {self.job_id}: a GPU share (gpu_milli) needs 1 GPU")
        if self.gpu_util is not None and not 0.0 < self.gpu_util <= 1.0:
            raise ValueError(f"job {self.job_id}: gpu_util must be in (0, 1], got {self.gpu_util}")
        if self.deadline_s is not None and not 0.0 < self.deadline_s < math.inf:
            raise ValueError(
                f"job {self.job_id}: deadline_s must be a finite number > 0, got {self.deadline_s}"
            )

    @property
    def due_s(self) -> float | None:
        """When the job must have finished, on the clock of `submit_s` (None: never)."""
        return None if self.deadline_s is None else self.submit_s + self.deadline_s

    @property
    def is_share(self) -> bool:
        """Whether the job asks a share of one GPU in milli-GPUs."""
        return 0 < self.gpu_milli < MILLI_PER_GPU

    @property
    def host(self) -> HostRequest:
        """What each of the job's worker pods asks besides GPUs."""
        if not self.cpu_milli and not self.host_mem_mib:
            return NO_HOST
        return HostRequest(self.cpu_milli, self.host_mem_mib)

    def accepts(self, gpu_model: str) -> bool:
        """Whether the job may run on GPUs of `gpu_model`."""
        return not self.gpu_models or gpu_model in self.gpu_models

    @property
    def elastic(self) -> bool:
        return self.min_gpus < self.max_gpus


class JobStatus(Enum):
    QUEUED = "Queued"  # arrived, never ran
    RUNNING = "Running"
    PREEMPTED = "Preempted"  # stopped to a checkpoint, waits to restart
    SUSPENDED = "Suspended"  # time-sliced out, state kept in host memory
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"


WAITING = frozenset({JobStatus.QUEUED, JobStatus.PREEMPTED, JobStatus.SUSPENDED})


@dataclass(frozen=True, slots=True)
class Reason:
    """Why a job is not running: a CamelCase code for machines, a sentence for people."""

    code: str
    message: str


# The reason code that refuses a waiting job rather than keeping it waiting: a plan
# that gives it withdraws the job, which never runs (deadline admission,
# policies.elasticflow; controller.sim.rounds carries it out).
REFUSED = "Refused"

# The reason codes of a job that does not fit, given by the policies.
INSUFFICIENT_GPUS = "InsufficientGpus"  # fewer GPUs free (or up) than the job needs
FRAGMENTED = "Fragmented"  # enough GPUs free, but no placement of them fits the job


def does_not_fit(need: int, why: str, code: str = INSUFFICIENT_GPUS, where: str = "") -> Reason:
    """Why a job of `need` GPUs does not fit: "needs N GPUs; <why>", the one form of that
    message in every policy (`where` goes before it: Tiresias's queue, "Q1: ")."""
    return Reason(code, f"{where}needs {need} GPUs; {why}")


def short_of_gpus(need: int, free: int, unplaced: str) -> Reason:
    """A job of `need` GPUs that the `free` free GPUs do not take: too few of them
    (InsufficientGpus), or enough but no placement fits (Fragmented: `unplaced` says
    how, as " but scattered")."""
    if free >= need:
        return does_not_fit(need, f"{free} are free{unplaced}", FRAGMENTED)
    return does_not_fit(need, f"{free} are free")


@dataclass(frozen=True, slots=True)
class Measured:
    """What a live job reported about itself (gpuflow.train through the API); replays
    have none. Steps are the job's own optimiser steps; rates are over its last
    reporting window."""

    reported_s: float  # when the last report arrived
    step: int  # the last step reported
    batch_size: int | None  # global batch in use then
    gpus: int | None  # world size in GPUs then
    samples_per_s: float | None  # global throughput over the last window
    # (GPUs, global batch, samples per second) for each size the job has run at.
    throughput: tuple[tuple[int, int, float], ...] = ()
    losses: tuple[tuple[int, float], ...] = ()  # (step, loss), in step order
    grad_sqr: float | None = None  # Pollux's |G|^2 estimate, per sample
    grad_var: float | None = None  # Pollux's tr(Sigma) estimate, per sample
    epoch_steps: int | None = None  # steps in one pass over the job's data, if known


@dataclass(frozen=True, slots=True)
class GpuUse:
    """What the node agents measured of a live job's processes on its GPUs (NVML's
    per-process samples; operators/agent/gpu_use.py): `util`, its mean utilisation of
    a GPU (0..1] when it last ran alone on its GPUs (a figure taken beside other jobs'
    processes is its share of a contended GPU, not what the sharing model means; None:
    never measured alone); `mem_mib`, its memory on its fullest GPU; `alone`, whether
    it is alone on its GPUs now; `reported_s`, when the figures were reported."""

    util: float | None
    mem_mib: int
    alone: bool
    reported_s: float


# Where a job's GPU utilisation comes from (`JobView.util_source`).
UTIL_MEASURED = "measured"  # the node agent's, of this job alone on its GPUs
UTIL_TRACE = "trace"  # the job's own figure in its trace (JobSpec.gpu_util)
UTIL_CATALOGUE = "catalogue"  # its model's figure in the catalogue


@dataclass(frozen=True, slots=True)
class JobView:
    """One active job as a policy sees it at a snapshot.

    Quantities that grow while a job runs are kept at `mark_s`, the time of the job's
    last change, with their rates, so a view stays valid for any later `now_s` until
    the job changes again; read them with the `*_at` methods.
    """

    job_id: str  # spec.job_id, kept flat: policies read it in their inner loops
    spec: JobSpec
    status: JobStatus
    allocation: Allocation | None
    mark_s: float
    attained_gpu_s: float  # GPU-seconds of service received up to mark_s
    executed_s: float  # wall seconds spent running up to mark_s
    done_iters: float  # iterations done up to mark_s
    total_iters: float  # the job's whole work; known to oracle policies only
    rate_ips: float  # iterations per second now (0 unless running)
    resume_s: float  # progress resumes here after a (re)start overhead
    nominal_rate_ips: float  # iterations per second on num_gpus, best placement
    first_start_s: float | None = None
    waiting_since_s: float = 0.0  # last time it entered the queue
    restarts: int = 0
    batch_size: int | None = None
    # Where rate_ips comes from: "model" (the performance model: replays, and live
    # jobs that report nothing yet) or "measured" (what the running job reported).
    rate_source: str = "model"
    measured: Measured | None = None  # live jobs that report (gpuflow.train)
    # Live jobs the node agents measured: fresh reports of a running job's pods, or
    # what was recorded when it last stopped (operators/views.py).
    gpu_use: GpuUse | None = None

    @property
    def util_source(self) -> str:
        """Where `spec.gpu_util`, the utilisation packing and the sharing model use,
        comes from: UTIL_MEASURED, UTIL_TRACE or UTIL_CATALOGUE."""
        if self.gpu_use is not None and self.gpu_use.util is not None:
            return UTIL_MEASURED
        return UTIL_CATALOGUE if self.spec.gpu_util is None else UTIL_TRACE

    @property
    def num_gpus(self) -> int:
        """GPUs held now, or the gang size asked for when waiting."""
        if self.allocation is None:
            return self.spec.num_gpus
        return self.allocation.num_gpus

    @property
    def running(self) -> bool:
        return self.status is JobStatus.RUNNING

    def attained_gpu_s_at(self, now_s: float) -> float:
        if self.allocation is None or self.status is not JobStatus.RUNNING:
            return self.attained_gpu_s
        return self.attained_gpu_s + self.allocation.gpu_weight * (now_s - self.mark_s)

    def executed_s_at(self, now_s: float) -> float:
        if self.status is not JobStatus.RUNNING:
            return self.executed_s
        return self.executed_s + (now_s - self.mark_s)

    def done_iters_at(self, now_s: float) -> float:
        if self.status is not JobStatus.RUNNING:
            return self.done_iters
        start = max(self.mark_s, self.resume_s)
        return min(self.total_iters, self.done_iters + self.rate_ips * max(0.0, now_s - start))

    def remaining_iters_at(self, now_s: float) -> float:
        return max(0.0, self.total_iters - self.done_iters_at(now_s))

    def remaining_s_at(self, now_s: float) -> float:
        """Oracle estimate of the remaining run time on its requested GPUs."""
        done = self.done_iters
        if self.status is JobStatus.RUNNING and now_s > self.resume_s:
            done += self.rate_ips * (now_s - max(self.mark_s, self.resume_s))
        return max(0.0, self.total_iters - done) / self.nominal_rate_ips

    def progress_at(self, now_s: float) -> float:
        return self.done_iters_at(now_s) / self.total_iters


_new = object.__new__


class _JobViewDraft:
    """JobView's slots, writable: `model_view` fills one with plain attribute stores
    and then makes it a JobView (`__class__` assignment, allowed between classes of
    the same slots). Nothing else ever sees one."""

    __slots__ = JobView.__slots__
    job_id: str
    spec: JobSpec
    status: JobStatus
    allocation: Allocation | None
    mark_s: float
    attained_gpu_s: float
    executed_s: float
    done_iters: float
    total_iters: float
    rate_ips: float
    resume_s: float
    nominal_rate_ips: float
    first_start_s: float | None
    waiting_since_s: float
    restarts: int
    batch_size: int | None
    rate_source: str
    measured: Measured | None
    gpu_use: GpuUse | None


def model_view(
    spec: JobSpec,
    status: JobStatus,
    allocation: Allocation | None,
    mark_s: float,
    attained_gpu_s: float,
    executed_s: float,
    done_iters: float,
    total_iters: float,
    rate_ips: float,
    resume_s: float,
    nominal_rate_ips: float,
    first_start_s: float | None,
    waiting_since_s: float,
    restarts: int,
    batch_size: int | None,
) -> JobView:
    """`JobView(job_id=spec.job_id, ...)` with its rates from the performance model
    and nothing measured, at about a fifth of the cost: the simulator builds one for
    every job that starts, stops or is re-rated (controller.sim.job), two for each
    swap of Gandiva's time-slicing, and a frozen dataclass sets each of its 19 fields
    through `object.__setattr__`, where a draft's slots take plain stores.
    tests/controller/test_model_view.py checks it against the constructor."""
    view = _new(_JobViewDraft)
    view.job_id = spec.job_id
    view.spec = spec
    view.status = status
    view.allocation = allocation
    view.mark_s = mark_s
    view.attained_gpu_s = attained_gpu_s
    view.executed_s = executed_s
    view.done_iters = done_iters
    view.total_iters = total_iters
    view.rate_ips = rate_ips
    view.resume_s = resume_s
    view.nominal_rate_ips = nominal_rate_ips
    view.first_start_s = first_start_s
    view.waiting_since_s = waiting_since_s
    view.restarts = restarts
    view.batch_size = batch_size
    view.rate_source = "model"
    view.measured = None
    view.gpu_use = None
    view.__class__ = JobView  # type: ignore[assignment]
    return view  # type: ignore[return-value]
