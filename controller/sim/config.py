"""What a simulation is given: its configuration, node events, and jobs already under way.

Built by the callers of `controller.sim.Simulator` (the CLI's `gpuflow replay`,
api/replays/run.py, controller.whatif, controller.live, bench/) and read by the
simulator's parts; frozen, stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.maintenance import MaintenanceEvent
from controller.model import Allocation, JobSpec, JobStatus
from controller.model.quotas import QuotaTree


@dataclass(frozen=True, slots=True)
class NodeEvent:
    """A node going down (`up=False`) or coming back at `time_s`."""

    time_s: float
    node: str
    up: bool


# A round interval is 0 (a round at every change) or in this range: the clock divides
# times by it (controller.sim.events.Clock), so a subnormal one (5e-324) overflows;
# 1 ms is finer than any trace's timestamps, and 1e6 s (11.6 days) the coarsest used.
MIN_ROUND_INTERVAL_S = 1e-3
MAX_ROUND_INTERVAL_S = 1e6
# When rounds run (controller.sim.events.Clock): "grid", at multiples of the interval;
# "event", at a change, at least an interval after the last round (ElasticFlow's
# simulator's scheduling slots: its evaluation setting, bench/deadlines.py).
ROUND_ANCHORS = ("grid", "event")


@dataclass(frozen=True)
class SimConfig:
    round_interval_s: float = 60.0
    round_anchor: str = "grid"  # one of ROUND_ANCHORS
    seed: int = 0
    # Gandiva (Xiao et al., OSDI 2018, §4.1) suspends and resumes a job at
    # mini-batch boundaries in well under a second for most jobs; 1 s is our bound.
    suspend_resume_s: float = 1.0
    # Every (re)start's overhead after a preemption, resize or migration; None: the
    # job's model's `restart_s` (checkpoint and restart, ~10 s). Set to compare with a
    # live run whose test pods restart at once (tests/operators/test_live_replay.py).
    restart_s: float | None = None
    checkpoint_interval_s: float = 1800.0
    # The node schedule: failures and recoveries, and admins' cordons and drains.
    failures: tuple[NodeEvent | MaintenanceEvent, ...] = ()
    max_time_s: float | None = None  # stop the clock here (unfinished jobs stay so)
    validate_reasons: bool = True
    # Check every plan in full against the invariants (tests; costs O(cluster) a round).
    check_plans: bool = False
    # How multi-node jobs share NICs and rack uplinks: "dedicated" (no sharing, the
    # perf model's default) or a network of controller.network.registry.
    network: str = "dedicated"
    # Queues with quotas around the policy (controller.quotas; `--queues FILE`).
    queues: QuotaTree | None = None
    # How shared links slow jobs: "steady" (one rate per job) or "phases" (compute
    # phases and all-reduce bursts; controller.network.registry.MODELS, docs/network.md).
    network_model: str = "steady"
    # ElasticFlow's simulator's overhead (its evaluation setting, bench/deadlines.py):
    # after every round every running job, resized or not, holds its GPUs without
    # progress for controller.sim.runs.event_overhead_s; False charges a job only when
    # it (re)starts.
    event_overhead: bool = False


@dataclass(frozen=True)
class ResumedJob:
    """A job already under way when a simulation starts from a live cluster's state
    (`Simulator.resume`, called by controller.whatif): its spec (submitted at or before
    the clock), the fraction of its work done, its service and history, and the GPUs
    it holds when it runs."""

    spec: JobSpec
    status: JobStatus = JobStatus.QUEUED  # a waiting status, or RUNNING
    done_fraction: float = 0.0
    attained_gpu_s: float = 0.0
    executed_s: float = 0.0
    restarts: int = 0
    first_start_s: float | None = None
    waiting_since_s: float | None = None  # None: the clock
    allocation: Allocation | None = None  # RUNNING only
    batch_size: int | None = None  # None: the spec's
