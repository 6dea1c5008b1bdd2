"""One job's mutable record in the simulator: its progress, integrated between events.

Between two events a running job progresses at a constant rate, so its quantities
(attained service, executed time, iterations done) are kept as of `mark_s` and
brought up to a later time analytically (`advance`); a run pays its (re)start
overhead until `resume_s`, holding its GPUs without progress. `view()` is the frozen
`JobView` the policies see, cached until the record changes.

Created on arrival by controller.sim.simulator; changed by controller.sim.runs (starts
and stops) and controller.sim.speed (its rate); read by the rest of the package.
"""

from __future__ import annotations

from controller.model import Allocation, JobSpec, JobStatus, JobView
from controller.model.job import model_view


class SimJob:
    """The simulator's record of one active job (read only outside controller.sim)."""

    __slots__ = (
        "active_job_s_at_submit",
        "allocation",
        "attained_gpu_s",
        "batch_size",
        "busy_gpus",
        "busy_mark_s",
        "done_iters",
        "executed_s",
        "finish_s",
        "first_start_s",
        "mark_s",
        "nominal_rate_ips",
        "preemptions",
        "rate_ips",
        "refused",
        "restarts",
        "resume_s",
        "run_start_s",
        "spec",
        "status",
        "total_iters",
        "version",
        "view_cache",
        "waiting_since_s",
    )

    def __init__(
        self, spec: JobSpec, total_iters: float, nominal_rate_ips: float, now_s: float
    ) -> None:
        self.spec = spec
        self.total_iters = total_iters
        self.nominal_rate_ips = nominal_rate_ips
        self.status = JobStatus.QUEUED
        self.allocation: Allocation | None = None
        self.mark_s = now_s  # the time the quantities below are as of
        self.attained_gpu_s = 0.0
        self.executed_s = 0.0
        self.done_iters = 0.0
        self.rate_ips = 0.0
        self.resume_s = now_s  # progress resumes here, after a (re)start's overhead
        self.run_start_s = now_s  # the current run's start
        # GPUs' worth of compute kept busy while it progresses, and since when counted.
        self.busy_gpus = 0.0
        self.busy_mark_s = now_s
        self.first_start_s: float | None = None
        self.finish_s: float | None = None
        self.waiting_since_s = now_s
        self.restarts = 0
        self.preemptions = 0
        self.version = 0  # bumped at each change that outdates its pending events
        self.batch_size: int | None = spec.batch_size
        # The integral of the number of active jobs over time when it arrived, so that
        # its mean contention is (integral at its end - this) / its time in the system.
        self.active_job_s_at_submit = 0.0
        self.view_cache: JobView | None = None
        # Why a plan refused it (controller.model.job.REFUSED), if one did.
        self.refused: str | None = None

    def view(self) -> JobView:
        if self.view_cache is None:
            self.view_cache = model_view(
                self.spec,
                self.status,
                self.allocation,
                self.mark_s,
                self.attained_gpu_s,
                self.executed_s,
                self.done_iters,
                self.total_iters,
                self.rate_ips,
                self.resume_s,
                self.nominal_rate_ips,
                self.first_start_s,
                self.waiting_since_s,
                self.restarts,
                self.batch_size,
            )
        return self.view_cache

    def advance(self, now_s: float) -> None:
        """Bring the accumulated quantities up to `now_s` (running jobs only)."""
        if self.status is JobStatus.RUNNING and self.allocation is not None and now_s > self.mark_s:
            dt = now_s - self.mark_s
            self.attained_gpu_s += self.allocation.gpu_weight * dt
            self.executed_s += dt
            start = max(self.mark_s, self.resume_s)
            if now_s > start:
                self.done_iters = min(
                    self.total_iters, self.done_iters + self.rate_ips * (now_s - start)
                )
            self.mark_s = now_s

    def done_iters_at(self, now_s: float) -> float:
        """Iterations done by `now_s`, without moving the mark."""
        start = max(self.mark_s, self.resume_s)
        done = self.done_iters
        if now_s > start:
            done = min(self.total_iters, done + self.rate_ips * (now_s - start))
        return done

    def finish_time_s(self) -> float:
        """When it finishes at its current rate (running jobs only)."""
        start = max(self.mark_s, self.resume_s)
        return start + max(0.0, self.total_iters - self.done_iters) / self.rate_ips

    def checkpoint_iters(self, now_s: float, checkpoint_interval_s: float) -> float:
        """Iterations done at its last checkpoint before `now_s` (one every
        `checkpoint_interval_s` of progress since the run resumed)."""
        ran = now_s - self.resume_s
        if ran <= 0:
            return self.done_iters
        lost_s = ran % checkpoint_interval_s
        return max(0.0, self.done_iters - self.rate_ips * lost_s)
