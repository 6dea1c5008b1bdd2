"""KubeBackend: the controller's Backend on a live Kubernetes cluster.

The twin of controller.sim.Simulator: `observe()` builds the Snapshot from the
informers' caches (Nodes -> Cluster, DLJobs + pods -> JobViews, every unfinished pod
-> the GPUs it holds), `apply(plan)` carries a plan out with pods, services, status
writes and events (operators/applier.py, on the `Round` observe() saw). `sync()`
runs first each round and settles what needs no policy (finalizers, finished, failed
or broken gangs, deletions): operators/lifecycle.py.

Safety: a pod is created only if its GPU shares fit next to every unfinished pod
(terminating ones included) in the pod cache, which holds the operator's own writes
at once. The caches come from a fresh list after a restart, so a GPU is never
given twice, whatever the policy asked.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping

from controller.actions import JobAction, compile_plan
from controller.decisions import RoundRecord
from controller.model import (
    NO_HOST,
    Allocation,
    Cluster,
    GpuPool,
    GpuShare,
    HostRequest,
    JobView,
    Placer,
    Plan,
    PlanError,
    Snapshot,
)
from controller.model.perf.matrix import ThroughputMatrix
from controller.model.type_throughput import TypeThroughput
from controller.placement import make_placer
from controller.rates import RateModel
from operators.applier import PlanApplier, Round
from operators.dljobs.requests import Requests
from operators.dljobs.resources import (
    UNSCHEDULABLE,
    Reasoned,
    fields_mutator,
    phase_of,
    status_mutator,
)
from operators.dljobs.type_throughput import (
    MeasuredTypeRates,
    merged,
    observed,
    recorded,
    status_fields,
)
from operators.drain import Drainer
from operators.jobs import JobRecord, RecordCache, State
from operators.kube import KubeApi
from operators.kube.informer import Caches
from operators.kube.times import micro_time
from operators.lifecycle import Lifecycle
from operators.nodes import ClusterView, build_cluster
from operators.pods import Occupancy, finished, pod_mem_mib, pod_shares
from operators.views import arrival_times, job_view, unschedulable_reason
from operators.writer import Writer

log = logging.getLogger(__name__)


class KubeBackend:
    """The controller's Backend on Kubernetes (see the module's docstring); made and
    driven by the Operator (operators/operator.py)."""

    def __init__(
        self,
        api: KubeApi,
        caches: Caches,
        *,
        placement: str = "consolidated",
        matrix: ThroughputMatrix | None = None,
        policy_name: Callable[[], str] = lambda: "",
        leading: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.time,
        writer: Writer | None = None,
    ) -> None:
        self.api = api
        self.caches = caches
        self.placement = placement
        self.matrix = matrix
        self.policy_name = policy_name
        self.clock = clock
        self.writer = writer or Writer(api, caches, leading)
        self.lifecycle = Lifecycle(self.writer, clock)
        self.drainer = Drainer(api, self.lifecycle)
        self.applier = PlanApplier(self.writer, self.lifecycle, policy_name)
        self._view: ClusterView | None = None
        self._placer: Placer | None = None
        self._rates: RateModel | None = None
        self._round: Round | None = None
        self._plan_wake_s: float | None = None
        self._last_snapshot: Snapshot | None = None
        # The round about to be applied, as controller.decisions records it (the
        # operator's Controller.on_round hands it over): queue positions, preemptors.
        self.round_record: RoundRecord | None = None
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
            self._rates = RateModel(view.cluster, self.matrix)
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
        measured: dict[str, dict[str, TypeThroughput]] = {}
        arrivals = self._record_arrivals(records.values(), now)
        for rec in sorted(records.values(), key=lambda r: r.key):
            if rec.state is State.WAITING and not self._schedulable(rec, view, now):
                continue
            job = job_view(rec, view, self._rates, now, arrivals.get(rec.key, now))
            if job is None:
                continue
            measured[rec.key] = self._type_throughput(rec, job, cluster)
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
            type_rates=MeasuredTypeRates(self._rates, measured),
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

    def _type_throughput(
        self, rec: JobRecord, job: JobView, cluster: Cluster
    ) -> dict[str, TypeThroughput]:
        """The job's measured speed on each GPU type it ran on, its latest report
        taken in (operators/dljobs/type_throughput.py); a changed record goes out with the
        job's next status write."""
        record = recorded(rec.obj.get("status") or {})
        # A job given GPUs that leaving pods hold (STARTING) keeps its last attempt's
        # running_s: only the gang running now on its own GPUs says when it started.
        running_s = rec.running_s if rec.state is State.RUNNING else None
        new = merged(record, observed(job, cluster, running_s))
        if new is None:
            return record
        self.writer.stage(rec.obj, fields_mutator(status_fields(new)))
        return new

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
        """Take out of the pool the GPUs held by unfinished pods other than the live
        ones of running jobs (terminating after a stop, orphans, deleted jobs), where
        no job holds or was given them: a starting job's GPUs are its own already."""
        index = view.uuid_index()
        skip = {_name(p) for key in running for p in records[key].live}
        for pod in self.caches.pods.items():
            if finished(pod) or _name(pod) in skip:
                continue
            for s in pod_shares(pod):
                if s.uuid in index:
                    _hold(pool, *index[s.uuid], s.fraction, pod_mem_mib(pod))

    # -- apply ------------------------------------------------------------------------

    def apply(self, plan: Plan) -> list[JobAction]:
        """Carry out the actions `compile_plan` names for this plan, as the simulator
        does: every stop before every start, a new batch size in place
        (operators/applier.py), and return them. An invalid plan raises PlanError
        before anything is written."""
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
        self.applier.apply(rnd, plan, actions, record, now)
        return actions


def _name(pod: dict[str, object]) -> str:
    meta = pod["metadata"]
    assert isinstance(meta, dict)
    return str(meta["name"])


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
