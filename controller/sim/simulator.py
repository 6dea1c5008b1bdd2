"""The simulator backend: a trace replayed on a virtual clock.

Called by the CLI (`gpuflow replay`, `compare`), api/replays/run.py (replay tasks),
controller.whatif (forecasts from a live state, `resume`) and controller.live (local
mode, `advance` in wall-clock steps). It is event-driven: between events every running
job progresses at a constant rate, so progress is advanced analytically and nothing is
stepped in small increments.

`Simulator` runs the loop over its parts, one responsibility each:

- controller.sim.events: arrivals, timed events and the clock (when rounds run);
- controller.sim.job and controller.sim.table: each active job's record, its
  progress, and the frozen views a snapshot is made of;
- controller.sim.speed: job speeds (rate model, GPU neighbours, network share);
- controller.sim.sharing: who is packed on each shared GPU;
- controller.sim.bandwidth: running multi-node jobs' inter-node rates;
- controller.sim.runs: applying actions: starts, stops and finishes of runs;
- controller.sim.nodes: failures, recoveries and maintenance of nodes;
- controller.sim.rounds: a round's snapshot, its plan carried out, its reasons;
- controller.sim.accounting: GPU-second integrals, timeline and job outcomes.

Local mode (controller.live) reads it through the public surface at the end of the
class (`views`, `running_usage`, `outcomes`, ...), never through its parts.

The result is deterministic for a given trace, cluster, policy and seed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from controller.actions import JobAction
from controller.loop import Controller
from controller.maintenance import MaintenanceEvent, NodeAction, drained_reason
from controller.model import (
    Cluster,
    GpuPool,
    JobSpec,
    JobStatus,
    JobView,
    Placer,
    Plan,
    Policy,
    Reason,
    Snapshot,
)
from controller.placement import host_never_fits, unallocatable_idle_gpus
from controller.quotas.admission import Quotas
from controller.rates import RateModel
from controller.records import JobOutcome, ReplayResult
from controller.sim.accounting import Accounts
from controller.sim.bandwidth import InterNodeRates
from controller.sim.config import ROUND_ANCHORS, NodeEvent, ResumedJob, SimConfig
from controller.sim.events import FINISH, NODE, RERATE, WAKE, Arrivals, Clock, EventQueue
from controller.sim.job import SimJob
from controller.sim.nodes import NodeStates
from controller.sim.parts import SimParts
from controller.sim.rounds import Rounds
from controller.sim.runs import JobRuns
from controller.sim.sharing import GpuSharers
from controller.sim.speed import Speeds
from controller.sim.table import JobTable, RunningUsage


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
        quotas = Quotas(self.config.queues, record=True) if self.config.queues else None
        self.controller = Controller(policy, check_plans=self.config.check_plans, quotas=quotas)
        self.trace_name = trace_name
        self.rates = rates or RateModel(cluster)
        self._arrivals = Arrivals(jobs)
        if self.config.round_anchor not in ROUND_ANCHORS:
            raise ValueError(
                f"round_anchor must be one of {', '.join(ROUND_ANCHORS)}, "
                f"not {self.config.round_anchor!r}"
            )
        parts = SimParts(
            cluster=cluster,
            config=self.config,
            rates=self.rates,
            clock=Clock(self.config.round_interval_s, self.config.round_anchor),
            events=EventQueue(),
            table=JobTable(),
            pool=GpuPool.of_cluster(cluster),
            accounts=Accounts(cluster.num_gpus),
            sharers=GpuSharers(),
            network=InterNodeRates(self.config.network, self.config.network_model),
        )
        self._clock, self._events, self._table = parts.clock, parts.events, parts.table
        self._pool, self._accounts, self._network = parts.pool, parts.accounts, parts.network
        self._speeds = Speeds(parts)
        self._runs = JobRuns(parts, self._speeds)
        self._nodes = NodeStates(parts, self._runs)
        self._rounds = Rounds(parts, self.controller, placer, self._nodes, self._runs)
        for ev in self.config.failures:
            self._events.push(ev.time_s, NODE, ev)

    # -- the loop -----------------------------------------------------------------

    def run(self, progress: Callable[[int, int], None] | None = None) -> ReplayResult:
        """Run to the end of the trace (or `max_time_s`); `progress(done, total)`
        is called now and then."""
        started = time.perf_counter()
        stop_at = self.config.max_time_s if self.config.max_time_s is not None else math.inf
        self.advance(stop_at, progress)
        now, acc = self._clock.now_s, self._accounts
        for job in list(self._table.active.values()):
            job.advance(now)
            acc.close_run(job, now)
            acc.leave(job, now)
        if progress is not None:
            progress(len(acc.outcomes), self._arrivals.count)
        return ReplayResult(
            policy=self.policy.name,
            cluster=self.cluster.name,
            trace=self.trace_name,
            jobs=sorted(acc.outcomes, key=lambda o: (o.submit_s, o.job_id)),
            timeline=acc.timeline,
            wall_s=time.perf_counter() - started,
            rounds=self._rounds.count,
            gpu_s_capacity=acc.capacity_gpu_s,
            gpu_s_allocated=acc.allocated_gpu_s,
            gpu_s_busy=acc.busy_gpu_s,
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
        arrivals, events, clock, network = self._arrivals, self._events, self._clock, self._network
        active = self._table.active
        tick = 0
        while True:
            if network.dirty:
                self._renet()
            t = min(arrivals.next_s(), events.next_s(active))
            if clock.next_round_s is not None and clock.next_round_s < t:
                t = clock.next_round_s
            if t == math.inf or t > until_s:
                break
            self._advance_clock(t)
            for spec in arrivals.due(t):
                self._arrive(spec)
            for kind, data in events.pop_due(t):
                self._handle(kind, data)
            if clock.take_round(t):
                self._rounds.run_round()
                network.after_round()
            tick += 1
            if progress is not None and tick % 2048 == 0:
                progress(len(self._accounts.outcomes), arrivals.count)
        if until_s != math.inf and until_s > clock.now_s:
            self._advance_clock(until_s)

    def _advance_clock(self, t_s: float) -> None:
        self._accounts.advance(t_s, len(self._table.active))
        self._clock.now_s = t_s

    def _arrive(self, spec: JobSpec) -> None:
        never = host_never_fits(spec, self.cluster)
        try:
            nominal = self.rates.nominal_rate_ips(spec)
        except ValueError:  # larger than the whole cluster
            never = f"needs {spec.num_gpus} GPUs; the cluster has {self.cluster.num_gpus}"
        if never is not None:  # it can never run; it stays unfinished
            self._accounts.reject(spec, Reason("Unschedulable", never))
            return
        total = spec.iterations if spec.iterations is not None else nominal * (spec.duration_s or 0)
        job = SimJob(spec, total, nominal, self._clock.now_s)
        job.active_job_s_at_submit = self._accounts.active_job_s
        self._table.active[spec.job_id] = job
        self._table.touch(job)
        self._clock.request_round()

    def _handle(self, kind: int, data: Any) -> None:
        if kind == FINISH:
            job_id, version = data
            job = self._table.active.get(job_id)
            if job is not None and job.version == version:
                self._runs.finish(job)
                self._accounts.leave(job, self._clock.now_s)
                self._clock.request_round()
        elif kind == NODE:
            self._node_event(data)
        elif kind == RERATE:
            job_id, version = data
            job = self._table.active.get(job_id)
            if job is not None and job.version == version and job.status is JobStatus.RUNNING:
                self._speeds.rerate(job)
        else:
            assert kind == WAKE
            self._clock.request_round()

    def _node_event(self, ev: NodeEvent | MaintenanceEvent) -> None:
        if isinstance(ev, MaintenanceEvent):
            self.maintain(self.cluster.node_index(ev.node), ev.action, ev.by)
            return
        node = self.cluster.node_index(ev.node)
        if ev.up:
            self._nodes.recover(node)
        else:
            self._nodes.fail(node)
        self._clock.request_round()

    def _renet(self) -> None:
        """Recompute the network's rates and re-rate the jobs whose rate changed."""
        active = self._table.active
        changed = self._network.recompute(
            self.cluster, active, self._clock.now_s, self.rates, self._speeds.iteration_s
        )
        for job_id in changed:
            self._speeds.rerate(active[job_id])

    # -- the Backend protocol, for a round run from outside (tests) ------------------

    def observe(self) -> Snapshot:
        """The snapshot a policy decides on (controller.sim.rounds)."""
        return self._rounds.observe()

    def apply(self, plan: Plan) -> list[JobAction]:
        """Carry out a plan; an invalid one raises PlanError and changes nothing.
        Returns the actions carried out."""
        return self._rounds.apply(plan)

    # -- jobs and nodes from outside: local mode, what-if, admins ----------------------

    def add_arrival(self, spec: JobSpec) -> None:
        """Add a job arriving at `spec.submit_s` (not before the clock); ValueError if
        its id is used or its time has passed."""
        self._arrivals.add(spec, self._clock.now_s)

    def id_used(self, job_id: str) -> bool:
        """Whether a job of this id was ever in the simulation (trace, add_arrival, resume)."""
        return self._arrivals.used(job_id)

    def resume(self, resumed: ResumedJob) -> None:
        """Add a job already under way, as of the clock: it keeps its progress, service
        and history, and a running one keeps its GPUs with no restart overhead.
        ValueError if its id is used, it was submitted after the clock, its fraction
        done is outside [0, 1], or its GPUs are not free."""
        spec = resumed.spec
        if self._arrivals.used(spec.job_id):
            raise ValueError(f"job {spec.job_id}: id already used")
        if spec.submit_s > self._clock.now_s:
            raise ValueError(f"job {spec.job_id}: submit_s {spec.submit_s} is after the clock")
        if not 0.0 <= resumed.done_fraction <= 1.0:
            raise ValueError(f"job {spec.job_id}: done_fraction must be in [0, 1]")
        running = resumed.status is JobStatus.RUNNING
        alloc = resumed.allocation.with_host(spec.host) if running and resumed.allocation else None
        if running and (alloc is None or not self._pool.fits(alloc, spec.gpu_mem_mib)):
            raise ValueError(f"job {spec.job_id}: its GPUs are not free")
        self._arrivals.claim(spec.job_id)
        self._arrive(spec)
        job = self._table.active.get(spec.job_id)
        if job is not None:  # None: larger than the cluster, recorded as never run
            self._runs.resume(job, resumed)

    def cancel(self, job_id: str) -> bool:
        """Withdraw a job that has not finished; False if there is none such."""
        job = self._table.active.get(job_id)
        if job is None:
            spec = self._arrivals.withdraw(job_id)
            if spec is None:
                return False
            self._accounts.reject(spec)
            return True
        if job.status is JobStatus.RUNNING:
            self._runs.stop(job, JobStatus.PREEMPTED)
        job.status = JobStatus.CANCELLED
        self._table.touch(job)
        del self._table.active[job_id]
        self._accounts.leave(job, self._clock.now_s)
        self._clock.request_round()
        return True

    def maintain(self, node: int, action: NodeAction, by: str) -> list[str]:
        """Cordon, drain or uncordon a node now (controller.maintenance); the ids of
        the jobs a drain preempted, gracefully (their progress is kept)."""
        preempted = [job.spec.job_id for job in self._nodes.maintain(node, action)]
        if preempted:
            reason = drained_reason(self.cluster.nodes[node].name, by)
            self._rounds.reasons.update(dict.fromkeys(preempted, reason))
        self._clock.request_round()
        return preempted

    def set_policy(self, policy: Policy) -> None:
        """Switch policy; a round comes at once (at the next round boundary) and decides
        with it, from a fresh state."""
        self.controller.set_policy(policy)
        self._clock.request_round()

    def set_quotas(self, quotas: Quotas | None) -> None:
        """Admission and reclaim by another queue tree (None: none); a round comes at
        once (at the next round boundary) and decides with it."""
        self.controller.quotas = quotas
        self._clock.request_round()

    # -- what it reads: local mode, tests, benchmarks ------------------------------------

    @property
    def policy(self) -> Policy:
        return self.controller.policy

    @property
    def rounds(self) -> int:
        """How many rounds have run."""
        return self._rounds.count

    @property
    def now_s(self) -> float:
        """The virtual clock, in seconds since the simulation's start."""
        return self._clock.now_s

    @property
    def outcomes(self) -> Sequence[JobOutcome]:
        """The jobs that left (finished, cancelled, never runnable), in that order;
        only ever appended to, so a caller may keep a cursor into it."""
        return self._accounts.outcomes

    @property
    def down_nodes(self) -> frozenset[int]:
        return frozenset(self._nodes.down)

    @property
    def cordoned_nodes(self) -> frozenset[int]:
        return frozenset(self._nodes.cordoned)

    @property
    def active(self) -> Mapping[str, SimJob]:
        """The active jobs' records by id, in arrival order: read only (tests read
        counters such as `preemptions` that no view carries)."""
        return self._table.active

    @property
    def network_updates(self) -> int:
        """How many times the network's rates were recomputed."""
        return self._network.updates

    @property
    def free_gpus(self) -> int:
        """Whole GPUs free for new jobs (not on down or cordoned nodes)."""
        return self._pool.total_free

    def unallocatable_gpus(self, sizes: Sequence[int]) -> int:
        """Idle whole GPUs that no job asking for one of `sizes` GPUs could use."""
        return unallocatable_idle_gpus(self._pool, self.cluster, list(sizes))

    def reason_for(self, job_id: str) -> Reason | None:
        """Why an active job waits, as the last round said (None if running), or why
        one never could run."""
        job = self._table.active.get(job_id)
        if job is None or job.status is JobStatus.RUNNING:
            return self._accounts.never_reasons.get(job_id)
        return self._rounds.reasons.get(job_id, self._rounds.default_reason)

    def views(self, wanted: Callable[[str, JobStatus, int], bool] | None = None) -> list[JobView]:
        """The active jobs as of now, in arrival order; `wanted(job_id, status,
        restarts)` picks some (default: all) before any view is built."""
        return self._table.views(self._clock.now_s, wanted)

    def running_usage(self) -> list[RunningUsage]:
        """Each running job's GPUs, busy compute and inter-node rate now, in arrival
        order (nothing is advanced)."""
        return self._table.running_usage(self._clock.now_s, self._network.gbps)

    def waiting_gpus(self) -> list[int]:
        """The GPUs each waiting job asks for, in arrival order."""
        return self._table.waiting_gpus()
