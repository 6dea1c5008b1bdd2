"""Applying actions: the starts, stops and finishes of job runs in a simulation.

`carry_out` applies the actions `controller.actions.compile_plan` named for a plan
(called by `Simulator.apply`): every stop before every start, each gang whole. A
job that (re)starts pays its restart overhead (`RateModel.restart_s`: checkpoint and
restore, or `SimConfig.restart_s` when set) before it progresses, holding its GPUs;
a suspended one the smaller `SimConfig.suspend_resume_s`; a first start nothing. A
resize, migration or re-share is a restart on the new GPUs; a new batch on the same
GPUs needs none (AdaptDL rescales the batch between steps), only its speed changes.

With `SimConfig.event_overhead`, controller.sim.rounds calls `charge_event` after
every round: every running job is held for ElasticFlow's per-event overhead
(`event_overhead_s`), as ElasticFlow's simulator charges it.

controller.sim.simulator also calls `stop` for node failures (the job rolls back to
its last checkpoint), drains and cancels, and `finish` on completion events. Each
keeps the pool, the accounts, GPU sharing and the network in step.
"""

from __future__ import annotations

import math

from controller.actions import STARTING, JobAction
from controller.model import RESTARTING, STOPPING, WAITING, Action, Allocation, JobStatus
from controller.sim.config import ResumedJob
from controller.sim.job import SimJob
from controller.sim.parts import SimParts
from controller.sim.speed import Speeds

# ElasticFlow's simulator (github.com/pkusys/ElasticFlow at 04a0109) charges every
# running job at every scheduling event (scheduler.py, `estimate_overhead` in utils.py):
# 2 s, 7 s on clusters of 256 GPUs or more, plus 2 (log2 n + 1) s on n GPUs; at every
# 60th event (its slot length reused as a count, from the second on) a restart's 27 s
# more, 47 s on 256 GPUs or more.
EVENT_RESTART_EVERY = 60
LARGE_CLUSTER_GPUS = 256


def event_overhead_s(num_gpus: int, cluster_gpus: int, restart: bool) -> float:
    """ElasticFlow's per-event overhead of a job on `num_gpus` GPUs (see above)."""
    large = cluster_gpus >= LARGE_CLUSTER_GPUS
    overhead_s = 7.0 if large else 2.0
    if restart:
        overhead_s += 47.0 if large else 27.0
    return overhead_s + 2.0 * (math.log2(num_gpus) + 1.0)


# Membership by identity, not by Enum hash (a Python call).
_STOPPING = tuple(STOPPING)
_RESTARTING = tuple(RESTARTING)
_STARTING = tuple(STARTING)


class JobRuns:
    """Starts and ends job runs on the pool, keeping every other part in step."""

    __slots__ = (
        "accounts",
        "clock",
        "config",
        "last_stopped",
        "network",
        "pool",
        "rates",
        "sharers",
        "speeds",
        "table",
    )

    def __init__(self, parts: SimParts, speeds: Speeds) -> None:
        self.config = parts.config
        self.rates = parts.rates
        self.clock = parts.clock
        self.pool = parts.pool
        self.table = parts.table
        self.accounts = parts.accounts
        self.sharers = parts.sharers
        self.network = parts.network
        self.speeds = speeds
        self.last_stopped: list[str] = []  # the jobs the last plan stopped

    def carry_out(self, actions: list[JobAction]) -> None:
        """Apply a plan's actions: stops (and restarts' stops, and re-batches) first,
        then starts.

        A start on the very allocation (of whole GPUs) a stop of the plan gives up
        (a time-slice swap) takes those GPUs straight over: the pool would get them
        back and lose them again, ending as it was, so it is left alone."""
        stopping = _STOPPING
        stops = [a for a in actions if a.action in stopping]
        self.last_stopped = [a.job.job_id for a in stops]
        starts = [a for a in actions if a.action in _STARTING]
        handed = _handed_over(stops, starts)
        active = self.table.active
        for a in actions:
            action = a.action
            job = active[a.job.job_id]
            if action in stopping:
                status = JobStatus.SUSPENDED if action is Action.SUSPEND else JobStatus.PREEMPTED
                self.stop(job, status, release=id(a.job.allocation) not in handed)
            elif action in _RESTARTING:  # resize, migrate, re-share: a restart elsewhere
                self.stop(job, JobStatus.PREEMPTED, moving=True)
            elif action is Action.REBATCH:
                job.advance(self.clock.now_s)
                job.batch_size = a.batch_size
                self.speeds.rerate(job)
        for a in starts:
            alloc = a.allocation
            assert alloc is not None
            job = active[a.job.job_id]
            if id(alloc) not in handed:
                # compile_plan checked it against this pool, every stop released.
                self.pool.claim(alloc, job.spec.gpu_mem_mib)
            job.batch_size = a.batch_size
            self.start(job, alloc)

    def start(self, job: SimJob, alloc: Allocation) -> None:
        """Run the job on `alloc`, already taken from the pool; its overhead depends
        on how it last stopped (none for a first start)."""
        now = self.clock.now_s
        prev = job.status
        job.mark_s = now
        if prev is JobStatus.QUEUED:
            overhead_s = 0.0
            job.first_start_s = now
        elif prev is JobStatus.SUSPENDED:
            overhead_s = self.config.suspend_resume_s
            job.restarts += 1
        else:
            fixed = self.config.restart_s
            overhead_s = self.rates.restart_s(job.spec) if fixed is None else fixed
            job.restarts += 1
        job_id = job.spec.job_id
        job.status = JobStatus.RUNNING
        self.table.num_running += 1
        self.table.allocations[job_id] = alloc
        job.allocation = alloc
        job.run_start_s = now
        job.resume_s = now + overhead_s
        self.accounts.allocated_gpus += alloc.gpu_weight
        if overhead_s > 0:
            self.accounts.overhead_until_s[job_id] = job.resume_s
        job.busy_mark_s = now
        self.network.join(job_id, alloc)
        if alloc.shared:
            for other in self.sharers.join(job, alloc, self.table.active):
                self.speeds.rerate(other)
        self.speeds.rerate(job)

    def charge_event(self, round_count: int, cluster_gpus: int) -> None:
        """ElasticFlow's per-event overhead after round `round_count` (from 1): every
        running job keeps its GPUs and makes no progress for `event_overhead_s` more,
        added to any overhead it is in."""
        now = self.clock.now_s
        restart = round_count > 1 and (round_count - 1) % EVENT_RESTART_EVERY == 0
        for job in list(self.table.active.values()):
            alloc = job.allocation
            if job.status is not JobStatus.RUNNING or alloc is None or alloc.num_gpus == 0:
                continue
            job.advance(now)
            self.accounts.close_busy(job, now)
            job.resume_s = max(job.resume_s, now) + event_overhead_s(
                alloc.num_gpus, cluster_gpus, restart
            )
            self.accounts.overhead_until_s[job.spec.job_id] = job.resume_s
            self.speeds.rerate(job)

    def resume(self, job: SimJob, resumed: ResumedJob) -> None:
        """Give a job just arrived the progress, service and history it had under way;
        a running one starts in place on its GPUs (checked free), with no overhead."""
        job.done_iters = job.total_iters * resumed.done_fraction
        job.attained_gpu_s = resumed.attained_gpu_s
        job.executed_s = resumed.executed_s
        if resumed.waiting_since_s is not None:
            job.waiting_since_s = resumed.waiting_since_s
        if resumed.status in WAITING:
            job.status = resumed.status  # a preempted job pays its restart when started
        alloc = resumed.allocation if resumed.status is JobStatus.RUNNING else None
        if alloc is not None:
            alloc = alloc.with_host(job.spec.host)  # its pods' CPU and memory too
            self.pool.take(alloc, job.spec.gpu_mem_mib)
            job.batch_size = resumed.batch_size or job.spec.batch_size
            self.start(job, alloc)  # from QUEUED: in place, no overhead
        if resumed.first_start_s is not None:
            job.first_start_s = resumed.first_start_s
        job.restarts = resumed.restarts
        self.table.touch(job)

    def stop(
        self,
        job: SimJob,
        status: JobStatus,
        *,
        failed: bool = False,
        moving: bool = False,
        release: bool = True,
    ) -> None:
        """End the job's run with `status`. `failed`: its node died, it rolls back to its
        last checkpoint; `moving`: it restarts at once elsewhere (no new wait, no
        preemption counted); `release` False: its GPUs stay out of the pool, for the
        job that starts on them (`carry_out`)."""
        now = self.clock.now_s
        job.advance(now)
        if failed and job.allocation is not None:
            job.done_iters = job.checkpoint_iters(now, self.config.checkpoint_interval_s)
        self._end_run(job, release)
        job.status = status
        job.rate_ips = 0.0
        job.version += 1
        self.table.touch(job)
        if not moving:
            job.waiting_since_s = now
            job.preemptions += 1

    def finish(self, job: SimJob) -> None:
        """The job completed its work now; it leaves the active jobs."""
        now = self.clock.now_s
        job.advance(now)
        job.done_iters = job.total_iters
        job.finish_s = now
        self._end_run(job)
        job.status = JobStatus.SUCCEEDED
        self.table.touch(job)
        del self.table.active[job.spec.job_id]

    def _end_run(self, job: SimJob, release: bool = True) -> None:
        """Give back the GPUs (unless not to `release` them) and close the run's
        accounts (status still RUNNING)."""
        now = self.clock.now_s
        alloc = job.allocation
        job_id = job.spec.job_id
        if alloc is not None:
            if release:
                self.pool.release(alloc, job.spec.gpu_mem_mib)
            self.accounts.allocated_gpus -= alloc.gpu_weight
            self.accounts.overhead_until_s.pop(job_id, None)
            if alloc.shared:
                for other in self.sharers.leave(job, alloc, self.table.active):
                    self.speeds.rerate(other)
        self.accounts.close_run(job, now)
        self.table.num_running -= 1
        self.accounts.busy_gpus -= job.busy_gpus
        job.busy_gpus = 0.0
        del self.table.allocations[job_id]
        self.network.leave(job_id)
        job.allocation = None


def _handed_over(stops: list[JobAction], starts: list[JobAction]) -> set[int]:
    """The ids of the whole-GPU allocations that a stop gives up and a start takes,
    the very object (compile_plan let each GPU be claimed once)."""
    if not stops or not starts:
        return set()
    given = {id(a.job.allocation) for a in stops}
    handed = set()
    for a in starts:
        alloc = a.allocation
        if id(alloc) in given and alloc is not None and not alloc.shared:
            handed.add(id(alloc))
    return handed
