"""Accounting: the GPU-second integrals, the per-round timeline and each job's outcome.

The figures of a `ReplayResult` (controller.records): capacity (alive GPUs over
time), allocated and busy GPU-seconds, exact between events; a `TimelineSample` per
round; a `JobOutcome` per job when it leaves. Kept by controller.sim.simulator and
updated by controller.sim.runs (a run's start and end) and controller.sim.speed (a
job's busy GPUs change with its speed).

Busy GPUs are each running job's compute in GPUs' worth (`SimJob.busy_gpus`), counted
from the end of its (re)start overhead.
"""

from __future__ import annotations

from controller.model import JobSpec, JobStatus, Reason
from controller.records import JobOutcome, TimelineSample
from controller.sim.job import SimJob


class Accounts:
    """Running totals of the cluster's use and their integrals over time."""

    __slots__ = (
        "active_job_s",
        "alive_gpus",
        "allocated_gpu_s",
        "allocated_gpus",
        "busy_gpu_s",
        "busy_gpus",
        "capacity_gpu_s",
        "last_s",
        "never_reasons",
        "outcomes",
        "overhead_until_s",
        "timeline",
    )

    def __init__(self, alive_gpus: int) -> None:
        self.alive_gpus = alive_gpus  # GPUs on nodes that are up
        self.allocated_gpus = 0.0  # the running jobs' GPUs (shares weighted)
        self.busy_gpus = 0.0  # the running jobs' busy GPUs, overheads included
        # Running job -> when its (re)start overhead ends, while it pays one.
        self.overhead_until_s: dict[str, float] = {}
        self.capacity_gpu_s = 0.0
        self.allocated_gpu_s = 0.0
        self.busy_gpu_s = 0.0
        self.active_job_s = 0.0  # the integral of the number of active jobs
        self.last_s = 0.0
        # The jobs that left (finished, cancelled, never runnable), in that order, and
        # a sample of the cluster after each round.
        self.outcomes: list[JobOutcome] = []
        self.never_reasons: dict[str, Reason] = {}  # jobs no node could ever hold
        self.timeline: list[TimelineSample] = []

    def advance(self, t_s: float, num_active: int) -> None:
        """Integrate capacity and active jobs up to `t_s`."""
        dt = t_s - self.last_s
        if dt > 0:
            self.capacity_gpu_s += self.alive_gpus * dt
            self.active_job_s += num_active * dt
            self.last_s = t_s

    def set_busy(self, job: SimJob, busy_gpus: float, now_s: float) -> None:
        """The job's busy GPUs from now on (its stretch so far is counted first)."""
        self.close_busy(job, now_s)
        self.busy_gpus += busy_gpus - job.busy_gpus
        job.busy_gpus = busy_gpus

    def close_busy(self, job: SimJob, now_s: float) -> None:
        """Add the job's busy GPU-seconds since its last mark to the total."""
        start = max(job.busy_mark_s, job.resume_s)
        if now_s > start:
            self.busy_gpu_s += job.busy_gpus * (now_s - start)
        job.busy_mark_s = now_s

    def close_run(self, job: SimJob, now_s: float) -> None:
        """Add a running stretch's allocated and busy GPU-seconds to the totals."""
        if job.allocation is None or job.status is not JobStatus.RUNNING:
            return
        self.allocated_gpu_s += job.allocation.gpu_weight * (now_s - job.run_start_s)
        self.close_busy(job, now_s)

    def expire_overheads(self, now_s: float) -> None:
        for job_id, resume_s in list(self.overhead_until_s.items()):
            if resume_s <= now_s:
                del self.overhead_until_s[job_id]

    def sample(
        self,
        now_s: float,
        active: dict[str, SimJob],
        num_running: int,
        unallocatable_gpus: int,
    ) -> None:
        """Record the cluster after a round: busy GPUs leave out jobs still in an
        overhead."""
        idle = sum(
            active[job_id].busy_gpus
            for job_id, resume_s in self.overhead_until_s.items()
            if resume_s > now_s and job_id in active
        )
        sample = TimelineSample(
            t_s=now_s,
            gpus_total=self.alive_gpus,
            gpus_allocated=self.allocated_gpus,
            gpus_busy=max(0.0, self.busy_gpus - idle),
            queued=len(active) - num_running,
            running=num_running,
            gpus_unallocatable=unallocatable_gpus,
        )
        self.timeline.append(sample)

    def leave(self, job: SimJob, now_s: float) -> None:
        """Record the outcome of a job that leaves (or is still there at the end)."""
        self.outcomes.append(self.outcome(job, now_s))

    def reject(self, spec: JobSpec, why: Reason | None = None) -> None:
        """Record a job that never ran (see `rejected`), and why if it could not."""
        self.outcomes.append(rejected(spec, why))
        if why is not None:
            self.never_reasons[spec.job_id] = why

    def outcome(self, job: SimJob, now_s: float) -> JobOutcome:
        """What the job's stay came to, as of its finish or now."""
        end = job.finish_s if job.finish_s is not None else now_s
        span = end - job.spec.submit_s
        contention = (self.active_job_s - job.active_job_s_at_submit) / span if span > 0 else 1.0
        return JobOutcome(
            job_id=job.spec.job_id,
            tenant=job.spec.tenant,
            model=job.spec.model,
            num_gpus=job.spec.num_gpus,
            submit_s=job.spec.submit_s,
            first_start_s=job.first_start_s,
            finish_s=job.finish_s,
            attained_gpu_s=job.attained_gpu_s,
            executed_s=job.executed_s,
            nominal_s=job.total_iters / job.nominal_rate_ips,
            restarts=job.restarts,
            preemptions=job.preemptions,
            contention_avg=max(1.0, contention),
            deadline_s=job.spec.due_s,
            refused=job.refused,
        )


def rejected(spec: JobSpec, why: Reason | None = None) -> JobOutcome:
    """The outcome of a job that never ran: cancelled before arriving, or larger than
    the whole cluster (`why`, recorded as its refusal)."""
    return JobOutcome(
        job_id=spec.job_id,
        tenant=spec.tenant,
        model=spec.model,
        num_gpus=spec.num_gpus,
        submit_s=spec.submit_s,
        first_start_s=None,
        finish_s=None,
        attained_gpu_s=0.0,
        executed_s=0.0,
        nominal_s=spec.duration_s or 0.0,
        restarts=0,
        preemptions=0,
        contention_avg=1.0,
        deadline_s=spec.due_s,
        refused=None if why is None else why.message,
    )
