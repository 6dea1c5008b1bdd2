"""What a replay records: one outcome per job and a timeline of the cluster.

Written by the simulator (controller.sim), read by controller.metrics and
controller.report.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# A job that finishes within this of its deadline met it: finish times are sums of
# float rates and spans, and a job planned to end at its deadline must not miss it
# by a rounding error.
DEADLINE_SLACK_S = 1e-6


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """One job's life in a replay. Times are seconds on the replay's clock."""

    job_id: str
    tenant: str
    model: str
    num_gpus: int  # gang size asked for
    submit_s: float
    first_start_s: float | None  # None: never started
    finish_s: float | None  # None: not finished when the replay stopped
    attained_gpu_s: float  # GPU-seconds held while running (shares by fraction)
    executed_s: float  # wall seconds spent running, restart overheads included
    nominal_s: float  # run time alone on num_gpus GPUs, best placement, no overheads
    restarts: int  # (re)starts after the first: preemptions, resizes, migrations
    preemptions: int
    contention_avg: float  # time-average number of active jobs while this one was active
    # When it had to finish (JobSpec.due_s) and why it never ran, if it was refused
    # at admission; None: best-effort, or not refused.
    deadline_s: float | None = None
    refused: str | None = None

    @property
    def deadline_met(self) -> bool | None:
        """Whether it finished by its deadline (None: it had none); a job refused or
        unfinished missed it."""
        if self.deadline_s is None:
            return None
        return self.finish_s is not None and self.finish_s <= self.deadline_s + DEADLINE_SLACK_S

    @property
    def jct_s(self) -> float | None:
        return None if self.finish_s is None else self.finish_s - self.submit_s

    @property
    def queueing_s(self) -> float | None:
        return None if self.first_start_s is None else self.first_start_s - self.submit_s


@dataclass(frozen=True, slots=True)
class TimelineSample:
    """The cluster at one instant (taken after each scheduling round)."""

    t_s: float
    gpus_total: int  # GPUs on nodes that are up
    gpus_allocated: float  # held by running jobs (shares by fraction)
    # GPUs' worth of compute in use: each running job past its restart overhead counts
    # its model's utilisation alone on each of its GPUs, scaled down when packed.
    gpus_busy: float
    queued: int  # active jobs not running
    running: int
    # Fragmentation: idle whole GPUs that none of the waiting jobs' sizes can use.
    gpus_unallocatable: int = 0


@dataclass
class ReplayResult:
    policy: str
    cluster: str
    trace: str
    jobs: list[JobOutcome]
    timeline: list[TimelineSample]
    wall_s: float = 0.0
    rounds: int = 0
    # Integrals over the replay, exact (not from the sampled timeline).
    gpu_s_capacity: float = 0.0  # GPU-seconds of nodes that were up
    gpu_s_allocated: float = 0.0
    gpu_s_busy: float = 0.0  # integral of gpus_busy (see TimelineSample)
    params: dict[str, object] = field(default_factory=dict)
