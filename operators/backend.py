"""KubeBackend: the controller's Backend on a live Kubernetes cluster.

The twin of controller.sim.Simulator: `observe()` builds the Snapshot from the
informers' caches (Nodes -> Cluster, DLJobs + pods -> JobViews, every unfinished pod
-> the GPUs it holds), `apply(plan)` carries a plan out with pods, services, status
writes and events. `sync()` runs first each round and settles what needs no policy
(finalizers, finished, failed or broken gangs, deletions): operators/lifecycle.py.

Safety: a pod is created only if its GPU shares fit next to every unfinished pod
(terminating ones included) in the pod cache, which holds the operator's own writes
at once. The caches come from a fresh list after a restart, so a GPU is never
given twice, whatever the policy asked.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from controller.actions import compile_plan
from controller.decisions import RoundRecord
from controller.model import (
    NO_HOST,
    Action,
    Allocation,
    GpuPool,
    GpuShare,
    HostRequest,
    JobView,
    Placer,
    Plan,
    PlanError,
    Reason,
    Snapshot,
)
from controller.placement import make_placer
from controller.rates import RateModel
from operators import crd
from operators.drain import Drainer
from operators.informer import Caches
from operators.jobs import JobRecord, RecordCache, State
from operators.kube import KubeApi
from operators.lifecycle import Lifecycle
from operators.nodes import ClusterView, build_cluster
from operators.pods import Occupancy, ShareRecord, WorkerSpec, finished, pod_mem_mib, pod_shares
from operators.queue_status import (
    PREEMPTED_BY,
    QUEUE_POSITION,
    PositionThrottle,
    position_mutator,
    preempted_by,
    takers,
    without_position,
)
from operators.requests import Requests
from operators.resources import (
    ADMITTED,
    PREEMPTED,
    QUEUED,
    SUSPENDED,
    UNSCHEDULABLE,
    Reasoned,
    fields_mutator,
    format_time,
    micro_time,
    phase_of,
    status_mutator,
)
from operators.template import pod_requests
from operators.views import arrival_times, job_view, unschedulable_reason
from operators.writer import Writer

log = logging.getLogger(__name__)
# The reason controller.queues.reclaim gives a job it preempts for another queue's
# guarantee: its Event says so (PreemptedForReclaim), not that the policy chose it.
RECLAIMED = "Reclaimed"


@dataclass
class Round:
    """What observe() saw, for apply() to act on."""

    snapshot: Snapshot
    records: dict[str, JobRecord]
    view: ClusterView
    occupancy: Occupancy
    plan_pool: GpuPool
    uuid_mem: dict[str, int] = field(default_factory=dict)


class KubeBackend:
    def __init__(
        self,
        api: KubeApi,
        caches: Caches,
        *,
        placement: str = "consolidated",
        policy_name: Callable[[], str] = lambda: "",
        leading: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.time,
        writer: Writer | None = None,
    ) -> None:
        self.api = api
        self.caches = caches
        self.placement = placement
        self.policy_name = policy_name
        self.clock = clock
        self.writer = writer or Writer(api, caches, leading)
        self.lifecycle = Lifecycle(self.writer, clock)
        self.drainer = Drainer(api, self.lifecycle)
        self._view: ClusterView | None = None
        self._placer: Placer | None = None
        self._rates: RateModel | None = None
        self._round: Round | None = None
        self._plan_wake_s: float | None = None
        self._last_snapshot: Snapshot | None = None
        # The round about to be applied, as controller.decisions records it (the
        # operator's Controller.on_round hands it over): queue positions, preemptors.
        self.round_record: RoundRecord | None = None
        self.positions = PositionThrottle()
        self._records = RecordCache()
        self.cluster_changed = False

    @property
    def last_snapshot(self) -> Snapshot | None:
        """The snapshot of the last observe() (for the operator's gauges), or None."""
        return self._last_snapshot

    def next_wake_s(self) -> float | None:
        """When the next round must run although nothing changes (wall-clock s): the
        last plan's `wake_s`, or a back-off or start timeout ending; None: no deadline.
        The operator's loop waits no longer than this."""
        times = [t for t in (self._plan_wake_s, self.lifecycle.next_check_s) if t is not None]
        return min(times) if times else None

    # -- sync: everything that needs no policy ----------------------------------------

    def records(self) -> dict[str, JobRecord]:
        return self._records.records(self.caches.dljobs.items(), self.caches.pods.items())

    def sync(self) -> None:
        view = self._cluster_view()
        records = self.records()
        self.lifecycle.settle(records, view)
        pods = self.caches.pods.items()
        self.drainer.drain(records, view, pods, self.clock(), self.writer.leading())

    # -- observe ----------------------------------------------------------------------

    def _cluster_view(self) -> ClusterView:
        view = build_cluster(self.caches.nodes.items(), self._view)
        if self._view is None or view.cluster is not self._view.cluster:
            self._placer = make_placer(self.placement, view.cluster)
            self._rates = RateModel(view.cluster)
            self.cluster_changed = self._view is not None
        self._view = view
        return view

    def observe(self) -> Snapshot:
        view = self._cluster_view()
        cluster = view.cluster
        assert self._placer is not None and self._rates is not None
        records = self.records()
        now = self.clock()
        pool = GpuPool(
            cluster.gpus_per_node,
            (n.gpu_type.mem_mib for n in cluster.nodes),
            host_capacity=(_host(view.allocatable.get(n.name)) for n in cluster.nodes),
        )
        for node in sorted(view.down_nodes):
            pool.node_down(node)
        for node in sorted(view.cordoned_nodes):
            pool.cordon(node)  # its running jobs are taken below, from the fenced GPUs
        jobs: list[JobView] = []
        running_ids: set[str] = set()
        arrivals = self._record_arrivals(records.values(), now)
        for rec in sorted(records.values(), key=lambda r: r.key):
            if rec.state is State.WAITING and not self._schedulable(rec, view, now):
                continue
            job = job_view(rec, view, self._rates, now, arrivals.get(rec.key, now))
            if job is None:
                continue
            if job.allocation is not None:
                # Its pods run: their GPUs must be theirs alone, their CPU and memory
                # count even past a node's allocatable (which may have shrunk).
                gpus_only = job.allocation.with_host(NO_HOST)
                if pool.fits(gpus_only, rec.spec.gpu_mem_mib if rec.spec else None):
                    pool.take(gpus_only, job.spec.gpu_mem_mib)
                    pool.hold_host(job.allocation)
                    running_ids.add(rec.key)
                else:
                    log.error("job %s: its pods overlap others' GPUs; left out", rec.key)
                    continue
            jobs.append(job)
        for node, gpu in view.unhealthy:
            _hold(pool, node, gpu, 1.0, 0)
        # What a plan is checked against, as in the simulator: free unless a running
        # job holds it. The policy's pool also leaves out what stopping pods still hold.
        plan_pool = pool.copy()
        self._hold_others(pool, view, records, running_ids)
        snapshot = Snapshot(
            now_s=now,
            cluster=cluster,
            jobs=tuple(jobs),
            placer=self._placer,
            down_nodes=view.down_nodes,
            cordoned_nodes=view.cordoned_nodes,
            pool=pool,
        )
        self._last_snapshot = snapshot
        pods = self.caches.pods.items()
        uuid_mem = {g.uuid: n.gpu_type.mem_mib for n in cluster.nodes for g in n.gpus}
        occupancy = Occupancy(pods, view.allocatable)
        self._round = Round(snapshot, records, view, occupancy, plan_pool, uuid_mem)
        return snapshot

    def _record_arrivals(self, records: Iterable[JobRecord], now: float) -> dict[str, float]:
        arrivals, new = arrival_times(records, now)
        for rec in new:  # goes out with the job's start or reason to wait, in one request
            stamp = {"arrivalTime": micro_time(arrivals[rec.key])}
            self.writer.stage(rec.obj, fields_mutator(stamp))
        return arrivals

    def _schedulable(self, rec: JobRecord, view: ClusterView, now: float) -> bool:
        """Whether a waiting job goes to the policy this round: not if no set of the
        cluster's nodes could ever hold it, which is marked Unschedulable (and looked
        at again each round, so that it queues once the cluster grows)."""
        never = unschedulable_reason(rec, view)
        if never is None:
            return True
        why = Reasoned("Unschedulable", never)
        self.writer.status(rec.obj, status_mutator(UNSCHEDULABLE, why, now_s=now))
        if phase_of(rec.obj) != UNSCHEDULABLE:
            self.writer.event(rec.obj, why.reason, why.message, "Warning")
        return False

    def _hold_others(
        self,
        pool: GpuPool,
        view: ClusterView,
        records: Mapping[str, JobRecord],
        running: set[str],
    ) -> None:
        """Take out of the pool the GPUs held by unfinished pods of jobs that do not
        run (terminating after a stop, orphans, deleted jobs)."""
        index = view.uuid_index()
        skip = {name for key in running for p in records[key].pods for name in [_name(p)]}
        for pod in self.caches.pods.items():
            if finished(pod) or _name(pod) in skip:
                continue
            for s in pod_shares(pod):
                if s.uuid in index:
                    _hold(pool, *index[s.uuid], s.fraction, pod_mem_mib(pod))

    # -- apply ------------------------------------------------------------------------

    def apply(self, plan: Plan) -> None:
        """Carry out the actions `compile_plan` names for this plan, as the simulator
        does: every stop before every start, a new batch size in place. An invalid
        plan raises PlanError before anything is written."""
        rnd = self._round
        if rnd is None:
            raise RuntimeError("apply before observe")
        self._round = None
        self._plan_wake_s = plan.wake_s
        now = self.clock()
        record, self.round_record = self.round_record, None
        try:
            actions = compile_plan(rnd.snapshot, plan, rnd.plan_pool)
        except PlanError as exc:
            log.error("plan refused policy=%s error=%s", self.policy_name(), exc)
            raise
        for a in actions:
            rec = rnd.records[a.job_id]
            if a.stops:
                suspend = a.action is Action.SUSPEND
                by = takers(record, a.job_id, rnd.records)
                why = self._stop_reason(a.action, by, plan.reason_for(a.job_id))
                phase = SUSPENDED if suspend else PREEMPTED
                self.lifecycle.stop(rec, why, phase, plan, now, fields={PREEMPTED_BY: by})
            elif a.action is Action.REBATCH:
                self._rebatch(rec, a.batch_size)
        for a in actions:
            if a.starts:
                assert a.allocation is not None
                self._start(rnd, rnd.records[a.job_id], a.allocation, a.batch_size, now)
        started = {a.job_id for a in actions if a.starts}
        if record is not None:
            # Staged: each goes out with the job's reason to wait, in one request.
            written = {k: _position(rnd.records[k].obj) for k in record.positions}
            for key, position in self.positions.due(record.positions, written, now):
                self.writer.stage(rnd.records[key].obj, position_mutator(position))
        for job in rnd.snapshot.waiting():
            if job.job_id not in started:
                self._report_waiting(rnd.records[job.job_id], plan, now)
        self.writer.flush()

    def _rebatch(self, rec: JobRecord, batch: int | None) -> None:
        """A new batch size for a running job, without a restart: its pods' annotation
        (the job reads it through the downward API at a step boundary) and status."""
        if batch is None:
            return
        self.writer.annotate_pods(rec.live, {crd.ANN_BATCH_SIZE: str(batch)})
        self.writer.status(rec.obj, fields_mutator({"batchSize": batch}))
        msg = f"batch size {batch} by the {self.policy_name()} policy"
        self.writer.event(rec.obj, "Rebatched", msg)

    def _stop_reason(self, action: Action, by: list[str], planned: Reason | None) -> Reasoned:
        if action is Action.PREEMPT and planned is not None and planned.code == RECLAIMED:
            # Not the policy's choice: the queues' reclaim (controller.queues.reclaim).
            return Reasoned("PreemptedForReclaim", planned.message)
        name = self.policy_name()
        what = {
            Action.SUSPEND: "suspended",
            Action.RESIZE: "resized",
            Action.MIGRATE: "migrated",
            Action.RESHARE: "reshared",
        }
        verb = what.get(action, "preempted")
        message = f"{verb} by the {name} policy{preempted_by(by)}"
        return Reasoned(f"{verb.capitalize()}ByPolicy", message)

    def _start(
        self, rnd: Round, rec: JobRecord, alloc: Allocation, batch: int | None, now: float
    ) -> None:
        cluster = rnd.view.cluster
        shares = tuple(
            ShareRecord(
                cluster.nodes[s.node].name,
                s.gpu,
                cluster.nodes[s.node].gpus[s.gpu].uuid,
                s.fraction,
            )
            for s in alloc.shares
        )
        mem = (rec.spec.gpu_mem_mib or 0) if rec.spec else 0
        requests = pod_requests(rec.obj)
        busy = rnd.occupancy.conflict(shares, mem, rnd.uuid_mem, requests)
        if busy is not None:
            pending = Reasoned(busy.reason, f"admitted; waits: {busy.message}")
            phase = phase_of(rec.obj) if phase_of(rec.obj) in (PREEMPTED, SUSPENDED) else QUEUED
            self.writer.status(rec.obj, status_mutator(phase, pending, pending=pending, now_s=now))
            return
        rnd.occupancy.add(shares, mem, rec.name, requests)
        attempt = rec.attempt + 1
        self.writer.start(rec, WorkerSpec(rec.obj, shares, attempt, batch, format_time(now)))
        nodes = sorted({s.node for s in shares})
        fields = {
            "attempt": attempt,
            "restarts": attempt - 1,
            "nodes": ",".join(nodes),
            "startTime": format_time(now),
            "allocation": {"nodes": nodes, "shares": [s.to_json() for s in shares]},
            "bandwidthGbps": min(cluster.nodes[cluster.node_index(n)].nic_gbps for n in nodes)
            if len(nodes) > 1
            else 0.0,
        }
        if batch is not None:
            fields["batchSize"] = batch
        if not (rec.obj.get("status") or {}).get("firstStartTime"):
            fields["firstStartTime"] = micro_time(now)
        why = Reasoned("Scheduled", f"{len(shares)} GPU(s) on {', '.join(nodes)}")
        mutate = status_mutator(ADMITTED, why, fields=fields, now_s=now)
        self.writer.status(rec.obj, without_position(mutate))
        self.writer.event(rec.obj, "Scheduled", f"attempt {attempt}: {why.message}")

    def _report_waiting(self, rec: JobRecord, plan: Plan, now: float) -> None:
        reason = plan.reason_for(rec.key)
        pending = Reasoned(reason.code, reason.message) if reason else Reasoned("Waiting", "")
        phase = phase_of(rec.obj)
        if phase not in (PREEMPTED, SUSPENDED):
            phase = QUEUED
        self.writer.status_throttled(rec.obj, pending.reason, phase, pending, now)


def _name(pod: dict[str, object]) -> str:
    meta = pod["metadata"]
    assert isinstance(meta, dict)
    return str(meta["name"])


def _position(obj: dict[str, object]) -> int | None:
    status = obj.get("status")
    position = status.get(QUEUE_POSITION) if isinstance(status, dict) else None
    return position if isinstance(position, int) else None


def _host(allocatable: Requests | None) -> HostRequest | None:
    """A node's allocatable CPU and memory for the pool (None: unconstrained)."""
    return None if allocatable is None else HostRequest(allocatable.cpu_milli, allocatable.mem_mib)


def _hold(pool: GpuPool, node: int, gpu: int, fraction: float, mem_mib: int) -> None:
    """Take a share out of the pool, or the whole GPU if the share does not fit."""
    for share in (GpuShare(node, gpu, fraction), GpuShare(node, gpu, 1.0)):
        alloc = Allocation((share,))
        if pool.fits(alloc, mem_mib):
            pool.take(alloc, mem_mib)
            return
