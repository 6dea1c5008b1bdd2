"""What if: the live cluster replayed from now under each policy.

Called by the API's what-if endpoint (api/whatif/forecast.py), in local mode with the state
`controller.live.LiveCluster.live_state()` reads and in cluster mode with one built
from the DLJobs the API follows. `forecast(state, names)` takes that state (the
cluster, its down, cordoned and draining nodes, every active job with its progress,
service and, if it runs, its GPUs), starts one simulator per policy from it
(`Simulator.resume`: the same simulator, placement and policies as a replay, see
api/replays/run.py) and runs each to the end. Each forecast gives every job's
predicted finish, in seconds from now, the jobs it never starts and why (no set of
the cluster's nodes could ever hold one, or it still waits when the simulation
stops), and the mean, median and 95th percentile of the jobs' completion times
measured from their original submit times.

The frame: the simulator's clock starts at 0, so times are shifted by a `base` at or
before the earliest submit; `now` lands on a round boundary of the live cluster's
interval, so the first round runs now. Jobs keep their order of submission.

Cost is bounded (`Limits`): more active jobs than `max_jobs` is refused
(`WhatIfTooLarge`); each simulation stops `horizon_s` of simulated time after now
(jobs unfinished then have no predicted finish: `stopped="horizon"`); all the
simulations together get `wall_budget_s` of wall time, shared out among the policies
still to run, and a policy whose share runs out stops at its next round
(`stopped="wall-time"`).

Approximations (deviations from the live cluster; the API repeats the ones that
apply in its response):

- Every policy starts from a fresh state, as after a policy switch: Tiresias' and
  Gandiva's round-to-round memory, Optimus' loss and speed fits and Pollux's
  gradient statistics are re-learned from the simulated runs, which follow the
  performance model (a live job's measured speed is not carried over).
- What a job's view carries is carried: progress (fraction of the work done),
  attained GPU-seconds (Tiresias' LAS), executed seconds, restarts, first start and
  time waiting since; a running job resumes in place with no restart overhead,
  even if it was inside one.
- The remaining work runs at the performance model's rate, so a job whose live rate
  differs finishes at a different time than predicted.
- No new arrivals and no node failures, recoveries or uncordons after now. A
  cordoned node keeps its running jobs and takes no new ones; a draining node's jobs
  are preempted at once (gracefully, progress kept), as the operator's drain does.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from controller.maintenance import NodeAction
from controller.model import Cluster, JobStatus, Plan, Policy, Snapshot
from controller.placement import make_placer
from controller.sim import NodeEvent, ResumedJob, SimConfig, Simulator
from policies.registry import make_policy

DAY_S = 86400.0


@dataclass(frozen=True)
class Limits:
    """What one what-if may cost."""

    # A few hundred jobs replay in well under a second a policy (FIFO, SRTF,
    # Tiresias); Pollux's search is the slowest and the wall budget bounds it.
    max_jobs: int = 1000
    horizon_s: float = 30 * DAY_S  # simulated time after now
    wall_budget_s: float = 30.0  # all the policies together


@dataclass(frozen=True)
class LiveState:
    """The live cluster at one instant, as a what-if starts from it. Times are on the
    live cluster's clock (local mode's simulated seconds, cluster mode's epoch)."""

    now_s: float
    cluster: Cluster
    jobs: tuple[ResumedJob, ...]
    down_nodes: frozenset[int] = frozenset()
    cordoned_nodes: frozenset[int] = frozenset()  # no new GPUs there
    draining_nodes: frozenset[int] = frozenset()  # being drained: cordoned, jobs to move
    round_interval_s: float = 5.0
    placement: str = "consolidated"


@dataclass(frozen=True)
class Forecast:
    """One policy's replay from now. Finishes are seconds from now (None: not within
    the simulation); completion times count from each job's submit time, over the
    jobs that finished (`unfinished` says how many did not)."""

    policy: str
    finish_s: dict[str, float | None]
    mean_jct_s: float | None
    median_jct_s: float | None
    p95_jct_s: float | None
    makespan_s: float | None  # until the last job finished; None if any did not
    unfinished: int
    wall_s: float
    stopped: str | None = None  # None | "horizon" | "wall-time"
    notes: tuple[str, ...] = field(default=())
    # Jobs the simulation never started (no predicted finish): job id -> why.
    not_started: dict[str, str] = field(default_factory=dict)


class WhatIfTooLarge(ValueError):
    """More active jobs than a what-if may replay."""


class OutOfWallTime(RuntimeError):
    """A simulation's share of the wall budget ran out (raised inside a round)."""


@dataclass
class _Deadline:
    """A policy that stops its simulation once a wall-clock deadline has passed."""

    policy: Policy
    deadline: float

    @property
    def name(self) -> str:
        return self.policy.name

    def schedule(self, snapshot: Snapshot, state: Any) -> Plan:
        if time.perf_counter() > self.deadline:
            raise OutOfWallTime(self.policy.name)
        return self.policy.schedule(snapshot, state)


def forecast(
    state: LiveState, policies: Sequence[str], limits: Limits | None = None
) -> dict[str, Forecast]:
    """Every named policy's forecast, in the order given. WhatIfTooLarge if the state
    has more jobs than `limits.max_jobs`; an unknown name raises
    policies.registry.UnknownPolicyError before anything runs."""
    limits = limits or Limits()
    if len(state.jobs) > limits.max_jobs:
        raise WhatIfTooLarge(
            f"{len(state.jobs)} active jobs; a what-if replays at most {limits.max_jobs}"
        )
    made = {name: make_policy(name) for name in policies}
    out: dict[str, Forecast] = {}
    end = time.perf_counter() + limits.wall_budget_s
    for i, (name, policy) in enumerate(made.items()):
        share_s = max(0.0, end - time.perf_counter()) / (len(made) - i)
        out[name] = _forecast_one(state, policy, limits.horizon_s, share_s)
    return out


def _forecast_one(state: LiveState, policy: Policy, horizon_s: float, wall_s: float) -> Forecast:
    started = time.perf_counter()
    frame = _Frame.of(state)
    cluster = state.cluster
    sim = Simulator(
        cluster,
        [],
        _Deadline(policy, started + wall_s),
        make_placer(state.placement, cluster),
        SimConfig(
            round_interval_s=state.round_interval_s,
            max_time_s=frame.now + horizon_s,
            failures=tuple(
                NodeEvent(0.0, cluster.nodes[n].name, up=False) for n in sorted(state.down_nodes)
            ),
        ),
        trace_name="what-if",
    )
    notes: list[str] = []
    stopped = None
    try:
        sim.advance(frame.now)  # down nodes go down at 0
        _resume_all(sim, state.jobs, frame, notes)
        _maintain_all(sim, state)
        result = sim.run()
        outcomes = result.jobs
        if sim.views() and sim.now_s >= frame.now + horizon_s:
            stopped = "horizon"  # jobs still active (not those that never could run)
    except OutOfWallTime:
        outcomes = list(sim.outcomes)
        stopped = "wall-time"
    finish = {j.spec.job_id: None for j in state.jobs} | {
        o.job_id: o.finish_s - frame.now for o in outcomes if o.finish_s is not None
    }
    not_started = _not_started(sim, finish, stopped, horizon_s)
    jcts = [o.finish_s - o.submit_s for o in outcomes if o.finish_s is not None]
    unfinished = sum(1 for f in finish.values() if f is None)
    mean, median, p95 = _distribution(jcts)
    done = [f for f in finish.values() if f is not None]
    return Forecast(
        policy=policy.name,
        finish_s=finish,
        mean_jct_s=mean,
        median_jct_s=median,
        p95_jct_s=p95,
        makespan_s=max(done, default=0.0) if unfinished == 0 else None,
        unfinished=unfinished,
        wall_s=time.perf_counter() - started,
        stopped=stopped,
        notes=tuple(notes),
        not_started=not_started,
    )


def _not_started(
    sim: Simulator, finish: dict[str, float | None], stopped: str | None, horizon_s: float
) -> dict[str, str]:
    """Why each job with no predicted finish never started: it never could on this
    cluster (the simulator's reason), or it still waited when the simulation stopped
    (the last round's reason). A job that started and had not finished is not here."""
    active = {v.job_id: v for v in sim.views()}
    out: dict[str, str] = {}
    for job_id, finished in finish.items():
        if finished is not None:
            continue
        view = active.get(job_id)
        if view is not None and view.first_start_s is not None:
            continue  # it ran: unfinished, not unstarted
        reason = sim.reason_for(job_id)
        why = "" if reason is None else f"{reason.code}: {reason.message}".rstrip(": ")
        if view is None:
            out[job_id] = f"can never start on this cluster ({why or 'no reason given'})"
        else:
            span = f"{horizon_s / DAY_S:g} days" if horizon_s >= DAY_S else f"{horizon_s:g} s"
            cap = f"the horizon ({span})" if stopped == "horizon" else "the wall-time cap"
            out[job_id] = f"still waits at {cap}" + (f" ({why})" if why else "")
    return out


@dataclass(frozen=True)
class _Frame:
    """The simulator's clock: live time minus `base`; `now` on a round boundary."""

    base: float
    now: float

    @staticmethod
    def of(state: LiveState) -> _Frame:
        earliest = min((j.spec.submit_s for j in state.jobs), default=state.now_s)
        span = max(0.0, state.now_s - min(earliest, state.now_s))
        interval = state.round_interval_s
        now = math.ceil(span / interval) * interval if interval > 0 else span
        return _Frame(base=state.now_s - now, now=now)

    def at(self, t: float) -> float:
        """A live time on the simulator's clock (never after now, never before 0)."""
        return min(self.now, max(0.0, t - self.base))

    def at_or_none(self, t: float | None) -> float | None:
        return None if t is None else self.at(t)


def _resume_all(
    sim: Simulator, jobs: Sequence[ResumedJob], frame: _Frame, notes: list[str]
) -> None:
    """Resume the running jobs first (their GPUs), then the waiting ones; a running job
    whose GPUs are not free (a down node, an overlap in what was read) waits instead,
    with a note."""
    ordered = sorted(jobs, key=lambda j: (j.allocation is None, j.spec.submit_s, j.spec.job_id))
    for job in ordered:
        shifted = replace(
            job,
            spec=replace(job.spec, submit_s=frame.at(job.spec.submit_s)),
            first_start_s=frame.at_or_none(job.first_start_s),
            waiting_since_s=frame.at_or_none(job.waiting_since_s),
        )
        try:
            sim.resume(shifted)
        except ValueError as exc:
            if shifted.allocation is None:
                raise
            notes.append(f"{exc}: it waits instead")
            sim.resume(replace(shifted, status=JobStatus.PREEMPTED, allocation=None))


def _distribution(values: Sequence[float]) -> tuple[float | None, float | None, float | None]:
    """Mean, median and 95th percentile (linear, as controller.metrics), or None."""
    if not values:
        return None, None, None
    x = np.asarray(values, dtype=float)
    median, p95 = np.percentile(x, [50.0, 95.0], method="linear")
    return float(np.mean(x)), float(median), float(p95)


def _maintain_all(sim: Simulator, state: LiveState) -> None:
    """Cordon and drain as the live cluster does, once its running jobs hold their GPUs
    (a cordon fences only free GPUs: the jobs on the node run on)."""
    for node in sorted((state.cordoned_nodes | state.draining_nodes) - state.down_nodes):
        action = NodeAction.DRAIN if node in state.draining_nodes else NodeAction.CORDON
        sim.maintain(node, action, by="what-if")
