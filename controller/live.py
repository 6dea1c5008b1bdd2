"""Local mode's backend: the simulator driven by the wall clock.

`gpuflow serve` (api/) keeps one `LiveCluster`: jobs submitted over REST arrive at
the current scaled time, the same policies and placement schedule them, and they
run and finish on the simulator's performance model, with no Kubernetes. Every
call first advances the simulation to "now" (wall seconds since start times the time
scale). Thread-safe: calls are serialised by a lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from controller.model import (
    Allocation,
    Cluster,
    JobSpec,
    JobStatus,
    JobView,
    Placer,
    Policy,
    Reason,
)
from controller.records import JobOutcome
from controller.sim import SimConfig, Simulator


@dataclass(frozen=True)
class JobState:
    """What local mode reports of one job."""

    job_id: str
    status: JobStatus
    submit_s: float
    allocation: Allocation | None
    reason: Reason | None
    progress: float  # 0..1
    attained_gpu_s: float
    restarts: int
    first_start_s: float | None
    finish_s: float | None


class LiveCluster:
    def __init__(
        self,
        cluster: Cluster,
        policy: Policy,
        placer: Placer,
        *,
        time_scale: float = 1.0,
        round_interval_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not time_scale > 0:
            raise ValueError("time_scale must be > 0")
        self.cluster = cluster
        self.time_scale = time_scale
        self._clock = clock
        self._t0 = clock()
        self._lock = threading.Lock()
        self._sim = Simulator(
            cluster, [], policy, placer, SimConfig(round_interval_s=round_interval_s)
        )
        self._done: dict[str, JobOutcome] = {}
        self._seen_outcomes = 0

    @property
    def policy_name(self) -> str:
        return self._sim.policy.name

    def now_s(self) -> float:
        return (self._clock() - self._t0) * self.time_scale

    def sync(self) -> float:
        """Advance the simulation to now; returns now (simulated seconds)."""
        with self._lock:
            return self._sync()

    def _sync(self) -> float:
        now = max(self.now_s(), self._sim.now)
        self._sim.advance(now)
        outcomes = self._sim.outcomes
        for outcome in outcomes[self._seen_outcomes :]:
            self._done[outcome.job_id] = outcome
        self._seen_outcomes = len(outcomes)
        return now

    def submit(self, spec: JobSpec) -> JobSpec:
        """Submit a job now (its submit_s is replaced by the current time)."""
        with self._lock:
            now = self._sync()
            placed = replace(spec, submit_s=now)
            self._sim.submit(placed)
            self._sync()
            return placed

    def cancel(self, job_id: str) -> bool:
        with self._lock:
            self._sync()
            done = self._sim.cancel(job_id)
            self._sync()
            return done

    def set_policy(self, policy: Policy) -> None:
        """Switch policy; the next round decides with it, from a fresh state."""
        with self._lock:
            self._sync()
            self._sim.controller.set_policy(policy)
            self._sim._dirty()

    def job(self, job_id: str) -> JobState | None:
        with self._lock:
            self._sync()
            return self._state(job_id, {v.job_id: v for v in self._sim.views()})

    def jobs(self) -> list[JobState]:
        with self._lock:
            self._sync()
            views = {v.job_id: v for v in self._sim.views()}
            states = [self._state(i, views) for i in [*views, *self._done]]
            return sorted((s for s in states if s is not None), key=lambda s: s.submit_s)

    def _state(self, job_id: str, views: dict[str, JobView]) -> JobState | None:
        sim = self._sim
        view = views.get(job_id)
        if view is not None:
            now = sim.now
            return JobState(
                job_id=job_id,
                status=view.status,
                submit_s=view.spec.submit_s,
                allocation=view.allocation,
                reason=sim.reason_for(job_id),
                progress=view.progress_at(now),
                attained_gpu_s=view.attained_gpu_s_at(now),
                restarts=view.restarts,
                first_start_s=view.first_start_s,
                finish_s=None,
            )
        out = self._done.get(job_id)
        if out is None:
            return None
        status = JobStatus.SUCCEEDED if out.finish_s is not None else JobStatus.CANCELLED
        return JobState(
            job_id=job_id,
            status=status,
            submit_s=out.submit_s,
            allocation=None,
            reason=None,
            progress=1.0 if out.finish_s is not None else 0.0,
            attained_gpu_s=out.attained_gpu_s,
            restarts=out.restarts,
            first_start_s=out.first_start_s,
            finish_s=out.finish_s,
        )
