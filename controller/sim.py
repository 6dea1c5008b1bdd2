"""The simulator backend: a trace replayed on a virtual clock.

Called by the CLI (`gpuflow replay`, `compare`) and, later, by replay tasks. It is
event-driven: between events every running job progresses at a constant rate, so
progress is advanced analytically and nothing is stepped in small increments.

Events: job arrivals, job completions, node failures and recoveries (from a
schedule), and scheduling rounds. A round runs at the first multiple of
`round_interval_s` at or after anything changed (an arrival, a completion, a
failure, the end of a restart, or the time the last plan asked to be woken at);
with an interval of 0 it runs at once. Applying a plan stops jobs, then starts
jobs, each gang whole; a job that (re)starts pays its restart overhead before it
progresses, a suspended one the (smaller) resume overhead.

A failed node kills its jobs: they roll back to their last checkpoint, taken
every `checkpoint_interval_s` of running time, and wait to restart.

With `SimConfig.network` other than "dedicated", running multi-node jobs share NICs
and rack uplinks: whenever that set of jobs changes (and after each round for the
time-dependent policies), `controller.network.jobs.job_rates` gives each an
inter-node rate and every job whose rate changed is re-rated (docs/network.md).

The result is deterministic for a given trace, cluster, policy and seed.
"""

from __future__ import annotations

import bisect
import heapq
import math
import time
from collections import ChainMap
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from controller.actions import JobAction, compile_plan
from controller.loop import Controller
from controller.maintenance import MaintenanceEvent, NodeAction, drained_reason
from controller.model import (
    STOPPING,
    WAITING,
    Action,
    Allocation,
    Cluster,
    GpuPool,
    JobSpec,
    JobStatus,
    JobView,
    Placer,
    Plan,
    PlanError,
    Policy,
    Reason,
    Snapshot,
)
from controller.placement import unallocatable_idle_gpus
from controller.rates import RateModel
from controller.records import JobOutcome, ReplayResult, TimelineSample


@dataclass(frozen=True, slots=True)
class NodeEvent:
    """A node going down (`up=False`) or coming back at `time_s`."""

    time_s: float
    node: str
    up: bool


@dataclass(frozen=True)
class SimConfig:
    round_interval_s: float = 60.0
    seed: int = 0
    # Gandiva (Xiao et al., OSDI 2018, §4.1) suspends and resumes a job at
    # mini-batch boundaries in well under a second for most jobs; 1 s is our bound.
    suspend_resume_s: float = 1.0
    checkpoint_interval_s: float = 1800.0
    # The node schedule: failures and recoveries, and admins' cordons and drains.
    failures: tuple[NodeEvent | MaintenanceEvent, ...] = ()
    max_time_s: float | None = None  # stop the clock here (unfinished jobs stay so)
    validate_reasons: bool = True
    # Check every plan in full against the invariants (tests; costs O(cluster) a round).
    check_plans: bool = False
    # How multi-node jobs share NICs and rack uplinks: "dedicated" (no sharing, the
    # perf model's default) or a network allocator (controller.network.POLICIES).
    network: str = "dedicated"


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


# Event kinds, in the order events at one instant are handled.
_FINISH, _NODE, _WAKE, _RERATE = 0, 1, 2, 3

# A job whose speed depends on its progress (its batch is not its work batch, so each
# step earns the statistical gain at its progress) is re-rated each time it has done
# this fraction of its work more: the measured runs behind the gain have at most 100
# epochs (rows), so a step of 1 % follows them row by row.
GAIN_STEP = 0.01


class _Job:
    """The simulator's mutable record of one job; `view()` is its frozen face."""

    __slots__ = (
        "act_mark",
        "activity",
        "alloc",
        "attained",
        "batch",
        "contention_at_submit",
        "done",
        "executed",
        "finish_s",
        "first_start",
        "mark",
        "nominal_rate",
        "preemptions",
        "rate",
        "restarts",
        "resume",
        "spec",
        "started_at",
        "status",
        "total",
        "version",
        "view_cache",
        "waiting_since",
    )

    def __init__(self, spec: JobSpec, total: float, nominal_rate: float, now: float) -> None:
        self.spec = spec
        self.total = total
        self.nominal_rate = nominal_rate
        self.status = JobStatus.QUEUED
        self.alloc: Allocation | None = None
        self.mark = now
        self.attained = 0.0
        self.executed = 0.0
        self.done = 0.0
        self.rate = 0.0
        self.resume = now
        self.started_at = now
        self.activity = 0.0  # GPUs' worth of compute in use while it progresses
        self.act_mark = now
        self.first_start: float | None = None
        self.finish_s: float | None = None
        self.waiting_since = now
        self.restarts = 0
        self.preemptions = 0
        self.version = 0
        self.batch: int | None = spec.batch_size
        self.contention_at_submit = 0.0
        self.view_cache: JobView | None = None

    def view(self) -> JobView:
        if self.view_cache is None:
            self.view_cache = JobView(
                job_id=self.spec.job_id,
                spec=self.spec,
                status=self.status,
                allocation=self.alloc,
                mark_s=self.mark,
                attained_gpu_s=self.attained,
                executed_s=self.executed,
                done_iters=self.done,
                total_iters=self.total,
                rate_ips=self.rate,
                resume_s=self.resume,
                nominal_rate_ips=self.nominal_rate,
                first_start_s=self.first_start,
                waiting_since_s=self.waiting_since,
                restarts=self.restarts,
                batch_size=self.batch,
            )
        return self.view_cache

    def advance(self, now: float) -> None:
        """Bring the accumulated quantities up to `now` (running jobs only)."""
        if self.status is JobStatus.RUNNING and self.alloc is not None and now > self.mark:
            dt = now - self.mark
            self.attained += self.alloc.gpu_weight * dt
            self.executed += dt
            start = max(self.mark, self.resume)
            if now > start:
                self.done = min(self.total, self.done + self.rate * (now - start))
            self.mark = now

    def finish_time(self) -> float:
        start = max(self.mark, self.resume)
        return start + max(0.0, self.total - self.done) / self.rate


class Simulator:
    """Replays `jobs` on `cluster` under `policy`; `run()` returns the result."""

    def __init__(
        self,
        cluster: Cluster,
        jobs: Iterable[JobSpec],
        policy: Policy,
        placer: Placer,
        config: SimConfig | None = None,
        *,
        trace_name: str = "",
        rates: RateModel | None = None,
    ) -> None:
        self.cluster = cluster
        self.placer = placer
        self.config = config or SimConfig()
        self.controller = Controller(policy, check_plans=self.config.check_plans)
        self.trace_name = trace_name
        self.rates = rates or RateModel(cluster)
        self.pending = sorted(jobs, key=_arrival_key)
        self._ids = {s.job_id for s in self.pending}
        if len(self._ids) != len(self.pending):
            raise ValueError("job ids must be unique")
        self._next_arrival = 0
        self.now = 0.0
        self.active: dict[str, _Job] = {}
        # Frozen views of the active jobs by state, refreshed for the jobs in `_stale`
        # only, so that a round costs little for jobs that did not change.
        self._views_run: dict[str, JobView] = {}
        self._views_wait: dict[str, JobView] = {}
        self._stale: dict[str, None] = {}
        self._num_running = 0
        self._allocs: dict[str, Allocation] = {}  # running job -> its allocation
        self._last_snapshot: Snapshot | None = None
        self._last_stopped: list[str] = []
        self.pool = GpuPool(cluster.gpus_per_node, (n.gpu_type.mem_mib for n in cluster.nodes))
        self.down: set[int] = set()
        self.cordoned: set[int] = set()
        self.events: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self.next_round: float | None = None
        self.outcomes: list[JobOutcome] = []
        self.timeline: list[TimelineSample] = []
        self.rounds = 0
        self.last_reasons: dict[str, Reason] = {}
        self.last_default_reason: Reason | None = None
        # Shared GPUs: who is on each, to slow packed jobs by their neighbours' load.
        self.sharers: dict[tuple[int, int], set[str]] = {}
        self._alive_gpus = cluster.num_gpus
        self._allocated = 0.0
        self._in_overhead: dict[str, float] = {}  # job id -> resume_s
        self._activity = 0.0  # sum of the running jobs' activity
        self._cap_s = 0.0
        self._alloc_s = 0.0
        self._busy_s = 0.0
        self._active_integral = 0.0
        self._last_t = 0.0
        for ev in self.config.failures:
            self._push(ev.time_s, _NODE, ev)
        # The network: running multi-node jobs, their allocated inter-node Gbit/s, and
        # whether the set changed since the rates were last computed.
        self._network: str | None = None
        self._net_time_dependent = False
        if self.config.network != "dedicated":
            from controller.network.jobs import TIME_DEPENDENT, network_names

            if self.config.network not in network_names():
                known = ", ".join(network_names())
                raise ValueError(f"unknown network {self.config.network!r} (known: {known})")
            self._network = self.config.network
            self._net_time_dependent = self._network in TIME_DEPENDENT
        self._net_jobs: dict[str, None] = {}
        self._net_gbps: dict[str, float] = {}
        self._net_dirty = False
        self.net_updates = 0  # how many times rates were recomputed

    # -- the loop -----------------------------------------------------------------

    def run(self, progress: Callable[[int, int], None] | None = None) -> ReplayResult:
        """Run to the end of the trace (or `max_time_s`); `progress(done, total)`
        is called now and then."""
        started = time.perf_counter()
        stop_at = self.config.max_time_s if self.config.max_time_s is not None else math.inf
        self.advance(stop_at, progress)
        for job in list(self.active.values()):
            job.advance(self.now)
            self._account_stop(job)
            self.outcomes.append(self._outcome(job))
        if progress is not None:
            progress(len(self.outcomes), len(self.pending))
        return ReplayResult(
            policy=self.policy.name,
            cluster=self.cluster.name,
            trace=self.trace_name,
            jobs=sorted(self.outcomes, key=lambda o: (o.submit_s, o.job_id)),
            timeline=self.timeline,
            wall_s=time.perf_counter() - started,
            rounds=self.rounds,
            gpu_s_capacity=self._cap_s,
            gpu_s_allocated=self._alloc_s,
            gpu_s_busy=self._busy_s,
            params={
                "round_interval_s": self.config.round_interval_s,
                "seed": self.config.seed,
                "network": self.config.network,
            },
        )

    def advance(self, until_s: float, progress: Callable[[int, int], None] | None = None) -> None:
        """Process every event up to `until_s` and move the clock there (if finite).

        A replay advances to infinity once; local mode advances in small steps of
        wall-clock-scaled time and submits jobs in between.
        """
        tick = 0
        while True:
            if self._net_dirty:
                self._renet()
            t = math.inf
            if self._next_arrival < len(self.pending):
                t = self.pending[self._next_arrival].submit_s
            self._drop_stale_events()
            if self.events and self.events[0][0] < t:
                t = self.events[0][0]
            if self.next_round is not None and self.next_round < t:
                t = self.next_round
            if t == math.inf or t > until_s:
                break
            self._advance_clock(t)
            pending = self.pending
            while self._next_arrival < len(pending) and pending[self._next_arrival].submit_s <= t:
                self._arrive(pending[self._next_arrival])
                self._next_arrival += 1
            while self.events and self.events[0][0] <= t:
                _, kind, _, data = heapq.heappop(self.events)
                self._handle(kind, data)
            if self.next_round is not None and self.next_round <= t:
                self.next_round = None
                self._round()
                # Attained bytes and remaining work move the allocation of some policies.
                self._net_dirty |= self._net_time_dependent and bool(self._net_jobs)
            tick += 1
            if progress is not None and tick % 2048 == 0:
                progress(len(self.outcomes), len(pending))
        if until_s != math.inf and until_s > self.now:
            self._advance_clock(until_s)

    def submit(self, spec: JobSpec) -> None:
        """Add a job arriving at `spec.submit_s` (not before the clock)."""
        if spec.submit_s < self.now:
            raise ValueError(f"job {spec.job_id}: submit_s {spec.submit_s} is in the past")
        if spec.job_id in self._ids:
            raise ValueError(f"job {spec.job_id}: id already used")
        self._ids.add(spec.job_id)
        bisect.insort(self.pending, spec, lo=self._next_arrival, key=_arrival_key)

    def resume(self, resumed: ResumedJob) -> None:
        """Add a job already under way, as of the clock: it keeps its progress, service
        and history, and a running one keeps its GPUs with no restart overhead.
        ValueError if its id is used, it was submitted after the clock, its fraction
        done is outside [0, 1], or its GPUs are not free."""
        spec = resumed.spec
        if spec.job_id in self._ids:
            raise ValueError(f"job {spec.job_id}: id already used")
        if spec.submit_s > self.now:
            raise ValueError(f"job {spec.job_id}: submit_s {spec.submit_s} is after the clock")
        if not 0.0 <= resumed.done_fraction <= 1.0:
            raise ValueError(f"job {spec.job_id}: done_fraction must be in [0, 1]")
        running = resumed.status is JobStatus.RUNNING
        alloc = resumed.allocation if running else None
        if running and (alloc is None or not self.pool.fits(alloc, spec.gpu_mem_mib)):
            raise ValueError(f"job {spec.job_id}: its GPUs are not free")
        self._ids.add(spec.job_id)
        self._arrive(spec)
        job = self.active.get(spec.job_id)
        if job is None:
            return  # larger than the cluster: recorded as never run
        job.done = job.total * resumed.done_fraction
        job.attained = resumed.attained_gpu_s
        job.executed = resumed.executed_s
        if resumed.waiting_since_s is not None:
            job.waiting_since = resumed.waiting_since_s
        if resumed.status in WAITING:
            job.status = resumed.status  # a preempted job pays its restart when started
        if alloc is not None:
            self.pool.take(alloc, spec.gpu_mem_mib)
            job.batch = resumed.batch_size or spec.batch_size
            self._start(job, alloc)  # from QUEUED: in place, no overhead
        if resumed.first_start_s is not None:
            job.first_start = resumed.first_start_s
        job.restarts = resumed.restarts
        self._touch(job)

    def cancel(self, job_id: str) -> bool:
        """Withdraw a job that has not finished; False if there is none such."""
        job = self.active.get(job_id)
        if job is None:
            for i in range(self._next_arrival, len(self.pending)):
                if self.pending[i].job_id == job_id:
                    spec = self.pending.pop(i)
                    self.outcomes.append(_rejected(spec))
                    return True
            return False
        if job.status is JobStatus.RUNNING:
            self._stop(job, JobStatus.PREEMPTED)
        job.status = JobStatus.CANCELLED
        self._touch(job)
        del self.active[job_id]
        self.outcomes.append(self._outcome(job))
        self._dirty()
        return True

    def reason_for(self, job_id: str) -> Reason | None:
        """Why an active job waits, as the last round said (None if running)."""
        job = self.active.get(job_id)
        if job is None or job.status is JobStatus.RUNNING:
            return None
        return self.last_reasons.get(job_id, self.last_default_reason)

    def views(self) -> list[JobView]:
        """The active jobs as of now."""
        out = []
        for job in self.active.values():
            job.advance(self.now)
            self._touch(job)
            out.append(job.view())
        return out

    def _drop_stale_events(self) -> None:
        """Pop finish and re-rate events that a later change of their job has
        outdated, so that they never move the clock."""
        events = self.events
        while events and events[0][1] in (_FINISH, _RERATE):
            job_id, version = events[0][3]
            job = self.active.get(job_id)
            if job is not None and job.version == version:
                return
            heapq.heappop(events)

    def _push(self, t: float, kind: int, data: Any) -> None:
        self._seq += 1
        heapq.heappush(self.events, (t, kind, self._seq, data))

    def _advance_clock(self, t: float) -> None:
        dt = t - self._last_t
        if dt > 0:
            self._cap_s += self._alive_gpus * dt
            self._active_integral += len(self.active) * dt
            self._last_t = t
        self.now = t

    def _dirty(self) -> None:
        """Something changed: make sure a round comes."""
        interval = self.config.round_interval_s
        at = self.now if interval <= 0 else math.ceil(self.now / interval - 1e-9) * interval
        if self.next_round is None or at < self.next_round:
            self.next_round = at

    # -- events -------------------------------------------------------------------

    def _arrive(self, spec: JobSpec) -> None:
        try:
            nominal = self.rates.nominal_rate_ips(spec)
        except ValueError:
            # Larger than the whole cluster: it can never run; it stays unfinished.
            self.outcomes.append(_rejected(spec))
            return
        total = spec.iterations if spec.iterations is not None else nominal * (spec.duration_s or 0)
        job = _Job(spec, total, nominal, self.now)
        job.contention_at_submit = self._active_integral
        self.active[spec.job_id] = job
        self._touch(job)
        self._dirty()

    def _handle(self, kind: int, data: Any) -> None:
        if kind == _FINISH:
            job_id, version = data
            job = self.active.get(job_id)
            if job is not None and job.version == version:
                self._finish(job)
        elif kind == _NODE:
            self._node_event(data)
        elif kind == _RERATE:
            job_id, version = data
            job = self.active.get(job_id)
            if job is not None and job.version == version and job.status is JobStatus.RUNNING:
                self._rerate(job)
        else:
            self._dirty()

    def _finish(self, job: _Job) -> None:
        job.advance(self.now)
        job.done = job.total
        job.finish_s = self.now
        self._release(job)
        self._account_stop(job)
        job.status = JobStatus.SUCCEEDED
        job.alloc = None
        self._num_running -= 1
        self._activity -= job.activity
        job.activity = 0.0
        del self._allocs[job.spec.job_id]
        self._net_leave(job)
        self._touch(job)
        del self.active[job.spec.job_id]
        self.outcomes.append(self._outcome(job))
        self._dirty()

    def maintain(self, node: int, action: NodeAction, by: str) -> list[str]:
        """Cordon, drain or uncordon a node now (controller.maintenance); the ids of
        the jobs a drain preempted, gracefully (their progress is kept)."""
        preempted: list[str] = []
        if action is NodeAction.UNCORDON:
            self.cordoned.discard(node)
            self.pool.uncordon(node)
        else:
            self.cordoned.add(node)
            self.pool.cordon(node)
        if action is NodeAction.DRAIN:
            reason = drained_reason(self.cluster.nodes[node].name, by)
            for job in sorted(self.active.values(), key=lambda j: j.spec.job_id):
                if job.alloc is not None and node in job.alloc.nodes:
                    self._stop(job, JobStatus.PREEMPTED)
                    self.last_reasons[job.spec.job_id] = reason
                    preempted.append(job.spec.job_id)
        self._dirty()
        return preempted

    def _node_event(self, ev: NodeEvent | MaintenanceEvent) -> None:
        if isinstance(ev, MaintenanceEvent):
            self.maintain(self.cluster.node_index(ev.node), ev.action, ev.by)
            return
        node = self.cluster.node_index(ev.node)
        if ev.up and node in self.down:
            self.down.discard(node)
            self._alive_gpus += self.cluster.nodes[node].num_gpus
            self.pool.node_up(node, self.cluster.nodes[node].num_gpus)
        elif not ev.up and node not in self.down:
            for job in sorted(self.active.values(), key=lambda j: j.spec.job_id):
                if job.alloc is not None and node in job.alloc.nodes:
                    self._stop(job, JobStatus.PREEMPTED, failed=True)
            self.down.add(node)
            self._alive_gpus -= self.cluster.nodes[node].num_gpus
            self.pool.node_down(node)
        self._dirty()

    # -- rounds -------------------------------------------------------------------

    def _touch(self, job: _Job) -> None:
        job.view_cache = None
        self._stale[job.spec.job_id] = None

    def _refresh_views(self) -> None:
        for job_id in self._stale:
            self._views_run.pop(job_id, None)
            self._views_wait.pop(job_id, None)
            job = self.active.get(job_id)
            if job is not None:
                views = self._views_run if job.status is JobStatus.RUNNING else self._views_wait
                views[job_id] = job.view()
        self._stale.clear()

    def observe(self) -> Snapshot:
        """The snapshot a policy decides on (Backend protocol)."""
        self._refresh_views()
        running = tuple(self._views_run.values())
        waiting = tuple(self._views_wait.values())
        self._last_snapshot = Snapshot(
            now_s=self.now,
            cluster=self.cluster,
            jobs=running + waiting,
            placer=self.placer,
            down_nodes=frozenset(self.down),
            cordoned_nodes=frozenset(self.cordoned),
            pool=self.pool,
            running_jobs=running,
            waiting_jobs=waiting,
            current=self._allocs,
            index=ChainMap(self._views_run, self._views_wait),
        )
        return self._last_snapshot

    def apply(self, plan: Plan) -> None:
        """Carry out a plan (Backend protocol): the actions `compile_plan` names, every
        stop before every start, gangs whole; an invalid plan changes nothing."""
        snapshot = self._last_snapshot
        if snapshot is None:
            raise RuntimeError("apply before observe")
        if self.config.validate_reasons and plan.default_reason is None:
            unexplained = self.active.keys() - plan.run.keys() - plan.reasons.keys()
            if unexplained:
                job_id = min(unexplained)
                raise PlanError(f"{self.policy.name}: job {job_id} waits, no reason")
        try:
            actions = compile_plan(snapshot, plan, self.pool)
        except PlanError as exc:
            raise PlanError(f"{self.policy.name}: {exc}") from None
        self._carry_out(actions)
        self.last_reasons = dict(plan.reasons)
        self.last_default_reason = plan.default_reason
        if plan.wake_s is not None and plan.wake_s > self.now:
            self._push(plan.wake_s, _WAKE, None)

    @property
    def policy(self) -> Policy:
        return self.controller.policy

    def _round(self) -> None:
        self.rounds += 1
        for job_id, resume in list(self._in_overhead.items()):
            if resume <= self.now:
                del self._in_overhead[job_id]
        plan = self.controller.decide(self)
        idle = sum(
            self.active[job_id].activity
            for job_id, resume in self._in_overhead.items()
            if resume > self.now and job_id in self.active
        )
        self.timeline.append(
            TimelineSample(
                t_s=self.now,
                gpus_total=self._alive_gpus,
                gpus_allocated=self._allocated,
                gpus_busy=max(0.0, self._activity - idle),
                queued=len(self.active) - self._num_running,
                running=self._num_running,
                gpus_unallocatable=self._unallocatable(plan),
            )
        )

    def _unallocatable(self, plan: Plan) -> int:
        """Idle whole GPUs that no job left waiting after the round could use."""
        snapshot = self._last_snapshot
        if snapshot is None or self.pool.total_free == 0:
            return 0
        sizes = [j.spec.num_gpus for j in snapshot.waiting() if j.job_id not in plan.run]
        sizes += [self.active[i].spec.num_gpus for i in self._last_stopped if i in self.active]
        return unallocatable_idle_gpus(self.pool, self.cluster, sizes)

    def _carry_out(self, actions: list[JobAction]) -> None:
        self._last_stopped = [a.job_id for a in actions if a.action in STOPPING]
        for a in actions:
            job = self.active[a.job_id]
            if a.action in STOPPING:
                suspended = a.action is Action.SUSPEND
                self._stop(job, JobStatus.SUSPENDED if suspended else JobStatus.PREEMPTED)
            elif a.stops:  # resize, migrate, re-share: a restart on the new GPUs
                self._stop(job, JobStatus.PREEMPTED, moving=True)
            elif a.action is Action.REBATCH:
                # A new batch size on the same GPUs needs no restart (AdaptDL rescales
                # the batch between steps); only the speed changes.
                job.advance(self.now)
                job.batch = a.batch_size
                self._rerate(job)
        for a in actions:
            if a.starts:
                assert a.allocation is not None
                job = self.active[a.job_id]
                self.pool.take(a.allocation, job.spec.gpu_mem_mib)
                job.batch = a.batch_size
                self._start(job, a.allocation)

    def _start(self, job: _Job, alloc: Allocation) -> None:
        prev = job.status
        job.mark = self.now
        if prev is JobStatus.QUEUED:
            overhead = 0.0
            job.first_start = self.now
        elif prev is JobStatus.SUSPENDED:
            overhead = self.config.suspend_resume_s
            job.restarts += 1
        else:
            overhead = self.rates.restart_s(job.spec)
            job.restarts += 1
        job.status = JobStatus.RUNNING
        self._num_running += 1
        self._allocs[job.spec.job_id] = alloc
        job.alloc = alloc
        job.started_at = self.now
        job.resume = self.now + overhead
        self._allocated += alloc.gpu_weight
        if overhead > 0:
            self._in_overhead[job.spec.job_id] = job.resume
        job.act_mark = self.now
        if self._network is not None and len(alloc.nodes) > 1:
            self._net_jobs[job.spec.job_id] = None
            self._net_dirty = True
        if alloc.shared:
            touched = self._join_shared(job, alloc)
            for other in touched:
                self._rerate(other)
        self._rerate(job)

    def _rerate(self, job: _Job) -> None:
        """Recompute a running job's speed (its neighbours changed) and its finish."""
        assert job.alloc is not None
        job.advance(self.now)
        load = self._neighbour_load(job) if job.alloc.shared else 0.0
        gbps = self._net_gbps.get(job.spec.job_id) if self._net_gbps else None
        rate = self.rates.rate_ips(
            job.spec, job.alloc, batch_size=job.batch, gpu_load=load, inter_node_gbps=gbps
        )
        adaptive = job.batch is not None and job.batch != self.rates.reference_batch(job.spec)
        if adaptive:
            # Progress is counted in reference-batch iterations (see RateModel).
            rate *= self.rates.goodput_factor(job.spec, job.batch, job.done / job.total)
        job.rate = rate
        self._set_activity(job, load, gbps)
        job.version += 1
        self._touch(job)
        finish = job.finish_time()
        self._push(finish, _FINISH, (job.spec.job_id, job.version))
        if adaptive:
            step_s = GAIN_STEP * job.total / rate
            at = max(self.now, job.resume) + step_s
            if at < finish:
                self._push(at, _RERATE, (job.spec.job_id, job.version))

    def _set_activity(self, job: _Job, load: float, gbps: float | None = None) -> None:
        """How much GPU compute the job keeps busy: on each of its GPUs, its model's
        utilisation alone, scaled by its speed against the same GPUs unshared (so two
        packed jobs add up to at most one GPU, and a capped MPS share counts as its
        cap). This is what `gpu_utilization` integrates."""
        assert job.alloc is not None
        self._close_activity(job)
        alloc = job.alloc
        util = self.rates.utilization(job.spec)
        if alloc.shared or load > 0:
            whole = self.rates.rate_ips(
                job.spec, Allocation.whole(alloc.gpus()), batch_size=job.batch, inter_node_gbps=gbps
            )
            shared = self.rates.rate_ips(
                job.spec, alloc, batch_size=job.batch, gpu_load=load, inter_node_gbps=gbps
            )
            util *= min(1.0, shared / whole)
        activity = alloc.num_gpus * util
        self._activity += activity - job.activity
        job.activity = activity

    def _close_activity(self, job: _Job) -> None:
        """Add the job's compute GPU-seconds since its last mark to the total."""
        start = max(job.act_mark, job.resume)
        if self.now > start:
            self._busy_s += job.activity * (self.now - start)
        job.act_mark = self.now

    def _stop(
        self, job: _Job, status: JobStatus, *, failed: bool = False, moving: bool = False
    ) -> None:
        job.advance(self.now)
        if failed and job.alloc is not None:
            job.done = self._last_checkpoint(job)
        self._release(job)
        self._account_stop(job)
        job.status = status
        self._num_running -= 1
        self._activity -= job.activity
        job.activity = 0.0
        del self._allocs[job.spec.job_id]
        self._net_leave(job)
        job.alloc = None
        job.rate = 0.0
        job.version += 1
        self._touch(job)
        if not moving:
            job.waiting_since = self.now
            job.preemptions += 1

    def _last_checkpoint(self, job: _Job) -> float:
        """Iterations done at the job's last checkpoint before now."""
        ran = self.now - job.resume
        if ran <= 0:
            return job.done
        lost_s = ran % self.config.checkpoint_interval_s
        return max(0.0, job.done - job.rate * lost_s)

    def _release(self, job: _Job) -> None:
        alloc = job.alloc
        if alloc is None:
            return
        self.pool.release(alloc, job.spec.gpu_mem_mib)
        self._allocated -= alloc.gpu_weight
        self._in_overhead.pop(job.spec.job_id, None)
        if alloc.shared:
            for other in self._leave_shared(job, alloc):
                self._rerate(other)

    def _account_stop(self, job: _Job) -> None:
        """Add a running stretch's allocated and busy GPU-seconds to the totals."""
        if job.alloc is None or job.status is not JobStatus.RUNNING:
            return
        self._alloc_s += job.alloc.gpu_weight * (self.now - job.started_at)
        self._close_activity(job)

    # -- the network ----------------------------------------------------------------

    def _net_leave(self, job: _Job) -> None:
        if job.spec.job_id in self._net_jobs:
            del self._net_jobs[job.spec.job_id]
            self._net_gbps.pop(job.spec.job_id, None)
            self._net_dirty = True

    def _renet(self) -> None:
        """Recompute every running multi-node job's inter-node rate under the network
        policy and re-rate the jobs whose rate changed."""
        from controller.network.jobs import NetJob, job_rates

        self._net_dirty = False
        assert self._network is not None
        ids = sorted(self._net_jobs)
        jobs = []
        for job_id in ids:
            job = self.active[job_id]
            assert job.alloc is not None
            start = max(job.mark, job.resume)
            done = job.done
            if self.now > start:
                done = min(job.total, done + job.rate * (self.now - start))
            jobs.append(
                NetJob(
                    job_id,
                    job.alloc.nodes,
                    self.rates.profile(job.spec).grad_mib,
                    arrival_s=job.spec.submit_s,
                    done_iters=done,
                    remaining_s=(job.total - done) / job.nominal_rate,
                )
            )
        gbps = job_rates(self._network, self.cluster, jobs, self._iteration_s)
        self.net_updates += 1
        for job_id in ids:
            new = gbps[job_id]
            old = self._net_gbps.get(job_id)
            if old is None or abs(new - old) > 1e-9 * new:
                self._net_gbps[job_id] = new
                self._rerate(self.active[job_id])

    def _iteration_s(self, job_id: str, gbps: float) -> float:
        """Seconds per iteration of a running job at `gbps` between its nodes."""
        job = self.active[job_id]
        assert job.alloc is not None
        load = self._neighbour_load(job) if job.alloc.shared else 0.0
        rate = self.rates.rate_ips(
            job.spec, job.alloc, batch_size=job.batch, gpu_load=load, inter_node_gbps=gbps
        )
        return 1.0 / rate

    # -- shared GPUs ----------------------------------------------------------------

    def _join_shared(self, job: _Job, alloc: Allocation) -> set[_Job]:
        touched: set[str] = set()
        for s in alloc.shares:
            if s.fraction < 1.0:
                ids = self.sharers.setdefault((s.node, s.gpu), set())
                touched |= ids
                ids.add(job.spec.job_id)
        return {self.active[i] for i in touched if i in self.active}

    def _leave_shared(self, job: _Job, alloc: Allocation) -> list[_Job]:
        touched: set[str] = set()
        for s in alloc.shares:
            ids = self.sharers.get((s.node, s.gpu))
            if ids is None:
                continue
            ids.discard(job.spec.job_id)
            touched |= ids
            if not ids:
                del self.sharers[(s.node, s.gpu)]
        others = [self.active[i] for i in sorted(touched) if i in self.active]
        return [o for o in others if o.status is JobStatus.RUNNING and o is not job]

    def _neighbour_load(self, job: _Job) -> float:
        assert job.alloc is not None
        worst = 0.0
        for s in job.alloc.shares:
            ids = self.sharers.get((s.node, s.gpu), ())
            load = sum(
                self.rates.utilization(self.active[i].spec)
                for i in ids
                if i != job.spec.job_id and i in self.active
            )
            worst = max(worst, load)
        return worst

    # -- results ----------------------------------------------------------------------

    def _outcome(self, job: _Job) -> JobOutcome:
        end = job.finish_s if job.finish_s is not None else self.now
        span = end - job.spec.submit_s
        contention = (self._active_integral - job.contention_at_submit) / span if span > 0 else 1.0
        return JobOutcome(
            job_id=job.spec.job_id,
            tenant=job.spec.tenant,
            model=job.spec.model,
            num_gpus=job.spec.num_gpus,
            submit_s=job.spec.submit_s,
            first_start_s=job.first_start,
            finish_s=job.finish_s,
            attained_gpu_s=job.attained,
            executed_s=job.executed,
            nominal_s=job.total / job.nominal_rate,
            restarts=job.restarts,
            preemptions=job.preemptions,
            contention_avg=max(1.0, contention),
        )


def _arrival_key(spec: JobSpec) -> tuple[float, str]:
    return (spec.submit_s, spec.job_id)


def _rejected(spec: JobSpec) -> JobOutcome:
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
    )
