"""Local mode's backend: the simulator driven by the wall clock.

`gpuflow serve` (api/) keeps one `LiveCluster`: jobs submitted over REST arrive at
the current scaled time, the same policies and placement schedule them, and they
run and finish on the simulator's performance model, with no Kubernetes. Every
call first advances the simulation to "now" (wall seconds since start times the time
scale). Thread-safe: calls are serialised by a lock.

Cost stays with the jobs that are alive: `jobs(active_only=True)`, `poll` (the active
jobs plus those finished since a cursor, for local mode's ticker) and `done_counts`
never walk the finished history; `add_jobs` places a batch under one lock.
`occupancy` is who holds which GPUs, read from the running jobs alone and numbered by
version, so that the cluster view (api.backends.LocalBackend) is built once per change
rather than once per request.
`type_throughput` is each job's simulated speed on each GPU type it ran on (the job
page's table, as a live cluster's measured one).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from controller.decisions import Displacement, record_round
from controller.maintenance import NodeAction
from controller.model import (
    WAITING,
    Allocation,
    Cluster,
    JobSpec,
    JobStatus,
    JobView,
    Placer,
    Plan,
    Policy,
    Reason,
    Snapshot,
)
from controller.model.type_throughput import TypeThroughput
from controller.network.loads import JobTraffic, LinkLoad, link_loads
from controller.quotas.admission import Quotas
from controller.records import JobOutcome
from controller.sim import ResumedJob, SimConfig, Simulator
from controller.whatif import LiveState


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
    queue_position: int | None = None  # 1-based, in the policy's order; None unless waiting


@dataclass(frozen=True)
class ClusterUsage:
    """What local mode's cluster view shows besides the allocations (`LiveCluster.usage`).

    `gpu_util`: each GPU in use, (node, GPU) -> the busy part of its compute, 0..1 (the
    simulator's model: each job on it counts its model's utilisation alone, scaled
    down when packed, and nothing while it pays a restart); `free_gpus`: whole GPUs
    offered to new jobs (not on down or cordoned nodes); `fragmented_gpus`: those of
    them that no waiting job can use (`controller.placement.unallocatable_idle_gpus`);
    `link_loads`: None unless the simulator runs a network allocator."""

    gpu_util: dict[tuple[int, int], float]
    free_gpus: int
    fragmented_gpus: int
    link_loads: tuple[LinkLoad, ...] | None


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A running job's GPUs and the compute it keeps busy now (`Occupancy.running`)."""

    job_id: str
    allocation: Allocation
    busy_gpus: float  # GPUs' worth of compute (0 while it pays a restart)


@dataclass(frozen=True)
class Occupancy:
    """Who holds which GPUs now (`LiveCluster.occupancy`): what the cluster view's nodes
    are made of, read without a JobState for each of thousands of waiting jobs.

    `running`: by submit time (as `jobs()` orders them); `waiting`: how many wait;
    `down`, `cordoned`: nodes by index; `version`: the same number while running, down
    and cordoned stay as they were, another once any of them changed, so that a caller
    may keep what it built from an occupancy until the version moves."""

    version: int
    running: tuple[RunningJob, ...]
    waiting: int
    down: frozenset[int]
    cordoned: frozenset[int]


# Which active jobs `LiveCluster.poll` reports: (job id, status, restarts, the reason the
# last round gave it) -> report it.
Wanted = Callable[[str, JobStatus, int, Reason | None], bool]


class LiveCluster:
    def __init__(
        self,
        cluster: Cluster,
        policy: Policy,
        placer: Placer,
        *,
        time_scale: float = 1.0,
        round_interval_s: float = 5.0,
        network: str = "dedicated",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not time_scale > 0:
            raise ValueError("time_scale must be > 0")
        self.cluster = cluster
        self.time_scale = time_scale
        self._clock = clock
        self._t0 = clock()
        self._start_s = 0.0  # the simulated time at _t0 (resume_at)
        self._lock = threading.Lock()
        self._sim = Simulator(
            cluster,
            [],
            policy,
            placer,
            SimConfig(round_interval_s=round_interval_s, network=network),
        )
        self._done: dict[str, JobOutcome] = {}
        self._done_counts: Counter[JobStatus] = Counter()
        self._seen_outcomes = 0
        # The last round's queue positions, and the jobs stopped, shrunk or moved since
        # the caller last took them (controller.decisions).
        self._positions: Mapping[str, int] = {}
        self._displaced: dict[str, Displacement] = {}
        # Each job's simulated speed on each GPU type it ran on (`type_throughput`), and
        # the (allocation, batch) each running job was last rated at.
        self._type_rates: dict[str, dict[str, TypeThroughput]] = {}
        self._rated: dict[str, tuple[Allocation, int | None]] = {}
        self._occupancy = Occupancy(0, (), 0, frozenset(), frozenset())
        self._sim.controller.on_round = self._on_round

    @property
    def policy_name(self) -> str:
        return self._sim.policy.name

    def now_s(self) -> float:
        return self._start_s + (self._clock() - self._t0) * self.time_scale

    def resume_at(self, sim_s: float) -> None:
        """Go on from simulated time `sim_s` (where a previous run of the service
        stopped), so that times recorded after a restart never come before those
        recorded before it. Called before any job is submitted; never goes back."""
        with self._lock:
            if sim_s > self.now_s():
                self._start_s, self._t0 = sim_s, self._clock()
            self._sync()

    def sync(self) -> float:
        """Advance the simulation to now; returns now (simulated seconds)."""
        with self._lock:
            return self._sync()

    def _sync(self) -> float:
        now = max(self.now_s(), self._sim.now_s)
        self._sim.advance(now)
        outcomes = self._sim.outcomes
        for outcome in outcomes[self._seen_outcomes :]:
            self._done[outcome.job_id] = outcome
            self._rated.pop(outcome.job_id, None)
            self._done_counts[_done_status(outcome)] += 1
        self._seen_outcomes = len(outcomes)
        return now

    def _on_round(self, snapshot: Snapshot, plan: Plan) -> None:
        """Controller.on_round, called inside `_sync` (the lock held)."""
        record = record_round(self._sim.policy, snapshot, plan, plan.state)
        self._positions = record.positions
        self._displaced.update(record.displaced)
        self._rate_types(snapshot, plan)

    def _rate_types(self, snapshot: Snapshot, plan: Plan) -> None:
        """Record the speed of each job the plan runs on whole GPUs of one type, alone
        on them at its batch (the rate model's: what its reports would say on a live
        cluster), where its GPUs or batch changed since it was last rated."""
        nodes = self.cluster.nodes
        for job_id, alloc in plan.run.items():
            job = snapshot.job(job_id)
            if job is None:
                continue
            batch = plan.batch_sizes.get(job_id, job.batch_size)
            if self._rated.get(job_id) == (alloc, batch):
                continue
            self._rated[job_id] = (alloc, batch)
            types = {nodes[s.node].gpu_type.name for s in alloc.shares}
            if len(types) != 1 or any(s.fraction < 1.0 for s in alloc.shares):
                continue
            gpu = types.pop()
            rate = self._sim.rates.rate_ips(job.spec, alloc, batch_size=batch)
            record = self._type_rates.setdefault(job_id, {})
            record[gpu] = TypeThroughput(gpu, rate, alloc.num_gpus, batch, snapshot.now_s)

    def type_throughput(self, job_id: str) -> list[TypeThroughput]:
        """The job's simulated speed on each GPU type it has run on, types by name."""
        with self._lock:
            self._sync()
            record = self._type_rates.get(job_id, {})
            return [record[t] for t in sorted(record)]

    def queue_positions(self) -> dict[str, int]:
        """Waiting job -> its 1-based position in the active policy's order, now."""
        with self._lock:
            self._sync()
            return dict(self._positions)

    def take_displacements(self, job_ids: Iterable[str]) -> dict[str, Displacement]:
        """The last stop, shrink or move of each of `job_ids` not taken yet (who took
        its GPUs, and why); each is handed out once."""
        with self._lock:
            found = (self._displaced.pop(j, None) for j in job_ids)
            return {d.job_id: d for d in found if d is not None}

    def set_quotas(self, quotas: Quotas | None) -> None:
        """Admission and reclaim by a queue tree from the next round on, as a replay's
        `--queues` and the operator's Queue resources give them (None: no quotas)."""
        with self._lock:
            self._sync()
            self._sim.set_quotas(quotas)

    def add_job(self, spec: JobSpec) -> JobSpec:
        """Add a job arriving now (its submit_s is replaced by the current time)."""
        return self.add_jobs([spec])[0]

    def add_jobs(self, specs: Sequence[JobSpec]) -> list[JobSpec]:
        """Add jobs arriving now, in order, under one lock; returns them as placed.

        All or nothing: a spec the simulator refuses (an id already used) raises
        ValueError before any of the batch is added.
        """
        with self._lock:
            now = self._sync()
            placed = [replace(spec, submit_s=now) for spec in specs]
            ids = [p.job_id for p in placed]
            used = [i for i in ids if self._sim.id_used(i)]
            if used or len(set(ids)) != len(ids):
                raise ValueError(f"job ids already used: {sorted(set(used)) or ids}")
            for spec in placed:
                self._sim.add_arrival(spec)
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
            self._sim.set_policy(policy)

    def maintain(self, node: str, action: NodeAction, by: str) -> list[str]:
        """Cordon, drain or uncordon the node named `node` now, as admin `by`; the ids
        of the jobs a drain preempted. KeyError if there is no such node."""
        index = self.cluster.node_index(node)
        with self._lock:
            self._sync()
            preempted = self._sim.maintain(index, action, by)
            self._sync()
            return preempted

    def node_states(self) -> tuple[frozenset[int], frozenset[int]]:
        """(down nodes, cordoned nodes) now, by index."""
        with self._lock:
            self._sync()
            return self._sim.down_nodes, self._sim.cordoned_nodes

    def occupancy(self) -> Occupancy:
        """The running jobs' GPUs and busy compute, the waiting count and the down and
        cordoned nodes now, under one lock; its version moves only when they changed.
        Costs the running jobs (no view is built or touched, so the next round has
        none to rebuild): ~2,900 at 1,000x8 in a few milliseconds."""
        with self._lock:
            self._sync()
            sim = self._sim
            runs = sorted(sim.running_usage(), key=lambda r: r.submit_s)
            running = tuple(RunningJob(r.job_id, r.allocation, r.busy_gpus) for r in runs)
            last = self._occupancy
            down, cordoned = sim.down_nodes, sim.cordoned_nodes
            same = (running, down, cordoned) == (last.running, last.down, last.cordoned)
            version = last.version if same else last.version + 1
            waiting = len(sim.waiting_gpus())
            self._occupancy = Occupancy(version, running, waiting, down, cordoned)
            return self._occupancy

    def job(self, job_id: str) -> JobState | None:
        with self._lock:
            self._sync()
            return self._state(job_id, {v.job_id: v for v in self._sim.views()})

    def jobs(self, *, active_only: bool = False) -> list[JobState]:
        """Every job ever submitted, by submit time; `active_only`: the unfinished ones."""
        with self._lock:
            self._sync()
            views = {v.job_id: v for v in self._sim.views()}
            ids = [*views] if active_only else [*views, *self._done]
            states = [self._state(i, views) for i in ids]
            return sorted((s for s in states if s is not None), key=lambda s: s.submit_s)

    def poll(self, cursor: int = 0, wanted: Wanted | None = None) -> tuple[list[JobState], int]:
        """The active jobs plus the jobs that finished since `cursor`, and the next cursor.

        Start with 0 (every finished job); pass the returned cursor next time to see
        each finished job once. `wanted(job_id, status, restarts, reason)` picks the
        active jobs to report (default: all), so that a caller who only cares about
        changes skips the unchanged ones cheaply (`reason`: why the job waits, as the
        last round said). The cost is that of the active jobs and the new finishers
        only, however long the history.
        """
        with self._lock:
            self._sync()
            sim = self._sim
            pick = None
            if wanted is not None:
                want = wanted

                def pick(job_id: str, status: JobStatus, restarts: int) -> bool:
                    return want(job_id, status, restarts, sim.reason_for(job_id))

            views = {v.job_id: v for v in sim.views(pick)}
            outcomes = sim.outcomes
            ids = [*views, *(o.job_id for o in outcomes[cursor:])]
            states = [self._state(i, views) for i in ids]
            found = sorted((s for s in states if s is not None), key=lambda s: s.submit_s)
            return found, len(outcomes)

    def done_counts(self) -> dict[JobStatus, int]:
        """How many jobs finished, by final status (Succeeded, Cancelled)."""
        with self._lock:
            self._sync()
            return dict(self._done_counts)

    def usage(self) -> ClusterUsage:
        """GPU utilisation, free and fragmented GPUs and link loads now (see ClusterUsage)."""
        with self._lock:
            self._sync()
            sim = self._sim
            util: dict[tuple[int, int], float] = {}
            traffic: list[JobTraffic] = []
            for run in sim.running_usage():
                alloc = run.allocation
                per_gpu = run.busy_gpus / alloc.num_gpus
                for share in alloc.shares:
                    key = (share.node, share.gpu)
                    util[key] = min(1.0, util.get(key, 0.0) + per_gpu)
                if run.inter_node_gbps is not None:
                    traffic.append(JobTraffic(run.job_id, alloc.nodes, run.inter_node_gbps))
            networked = sim.config.network != "dedicated"
            return ClusterUsage(
                gpu_util=util,
                free_gpus=sim.free_gpus,
                fragmented_gpus=sim.unallocatable_gpus(sim.waiting_gpus()),
                link_loads=tuple(link_loads(self.cluster, traffic)) if networked else None,
            )

    def live_state(self) -> LiveState:
        """Now and every active job as a simulator can resume it, read under the lock:
        what controller.whatif replays from now under other policies (the caller, who
        chose the placer, names its placement)."""
        with self._lock:
            self._sync()
            sim, now = self._sim, self._sim.now_s
            jobs = tuple(
                ResumedJob(
                    spec=v.spec,
                    status=v.status,
                    done_fraction=v.progress_at(now),
                    attained_gpu_s=v.attained_gpu_s_at(now),
                    executed_s=v.executed_s_at(now),
                    restarts=v.restarts,
                    first_start_s=v.first_start_s,
                    waiting_since_s=v.waiting_since_s,
                    allocation=v.allocation,
                    batch_size=v.batch_size,
                )
                for v in sim.views()
            )
            return LiveState(
                now_s=now,
                cluster=self.cluster,
                jobs=jobs,
                down_nodes=sim.down_nodes,
                cordoned_nodes=sim.cordoned_nodes,
                round_interval_s=sim.config.round_interval_s,
            )

    def _state(self, job_id: str, views: dict[str, JobView]) -> JobState | None:
        sim = self._sim
        view = views.get(job_id)
        if view is not None:
            now = sim.now_s
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
                queue_position=self._positions.get(job_id) if view.status in WAITING else None,
            )
        out = self._done.get(job_id)
        if out is None:
            return None
        return JobState(
            job_id=job_id,
            status=_done_status(out),
            submit_s=out.submit_s,
            allocation=None,
            # Why it never ran, if it could not or a plan refused it (REFUSED).
            reason=sim.reason_for(job_id) if out.first_start_s is None else None,
            progress=1.0 if out.finish_s is not None else 0.0,
            attained_gpu_s=out.attained_gpu_s,
            restarts=out.restarts,
            first_start_s=out.first_start_s,
            finish_s=out.finish_s,
        )


def _done_status(outcome: JobOutcome) -> JobStatus:
    return JobStatus.SUCCEEDED if outcome.finish_s is not None else JobStatus.CANCELLED
