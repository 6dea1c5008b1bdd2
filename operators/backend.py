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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from controller.model import (
    Allocation,
    GpuPool,
    GpuShare,
    JobStatus,
    JobView,
    Placer,
    Plan,
    Snapshot,
)
from controller.model.snapshot import Action
from controller.placement import make_placer
from controller.rates import RateModel
from operators.informer import Informer
from operators.jobs import JobRecord, State, classify, pods_by_job
from operators.kube import KubeApi
from operators.lifecycle import Lifecycle
from operators.nodes import ClusterView, build_cluster
from operators.pods import Occupancy, ShareRecord, WorkerSpec, finished, pod_mem_mib, pod_shares
from operators.resources import (
    ADMITTED,
    PREEMPTED,
    QUEUED,
    SUSPENDED,
    Reasoned,
    format_time,
    phase_of,
    status_mutator,
)
from operators.writer import Writer

log = logging.getLogger(__name__)

WAITING_STATUS = {PREEMPTED: JobStatus.PREEMPTED, SUSPENDED: JobStatus.SUSPENDED}


@dataclass
class Caches:
    dljobs: Informer
    pods: Informer
    nodes: Informer

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in (self.dljobs, self.pods, self.nodes))


@dataclass
class Round:
    """What observe() saw, for apply() to act on."""

    snapshot: Snapshot
    records: dict[str, JobRecord]
    view: ClusterView
    occupancy: Occupancy
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
        self._view: ClusterView | None = None
        self._placer: Placer | None = None
        self._rates: RateModel | None = None
        self._round: Round | None = None
        self.cluster_changed = False

    # -- sync: everything that needs no policy ----------------------------------------

    def records(self) -> dict[str, JobRecord]:
        by_job = pods_by_job(self.caches.pods.items())
        out = {}
        for obj in self.caches.dljobs.items():
            meta = obj["metadata"]
            rec = classify(obj, by_job.get((meta["namespace"], meta["name"]), []))
            out[rec.key] = rec
        return out

    def sync(self) -> None:
        view = self._cluster_view()
        self.lifecycle.settle(self.records(), view)

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
        pool = GpuPool(cluster.gpus_per_node, (n.gpu_type.mem_mib for n in cluster.nodes))
        for node in sorted(view.down_nodes):
            pool.node_down(node)
        jobs: list[JobView] = []
        running_ids: set[str] = set()
        for rec in sorted(records.values(), key=lambda r: r.key):
            job = self._view_of(rec, view, now)
            if job is None:
                continue
            if job.allocation is not None:
                if pool.fits(job.allocation, rec.spec.gpu_mem_mib if rec.spec else None):
                    pool.take(job.allocation, job.spec.gpu_mem_mib)
                    running_ids.add(rec.key)
                else:
                    log.error("job %s: its pods overlap others' GPUs; left out", rec.key)
                    continue
            jobs.append(job)
        self._hold_others(pool, view, records, running_ids)
        snapshot = Snapshot(
            now_s=now,
            cluster=cluster,
            jobs=tuple(jobs),
            placer=self._placer,
            down_nodes=view.down_nodes,
            pool=pool,
        )
        pods = self.caches.pods.items()
        uuid_mem = {g.uuid: n.gpu_type.mem_mib for n in cluster.nodes for g in n.gpus}
        self._round = Round(snapshot, records, view, Occupancy(pods), uuid_mem)
        return snapshot

    def _view_of(self, rec: JobRecord, view: ClusterView, now: float) -> JobView | None:
        if rec.spec is None or rec.state not in (State.WAITING, State.RUNNING):
            return None
        assert self._rates is not None
        spec = rec.spec
        status = rec.obj.get("status") or {}
        try:
            nominal = self._rates.nominal_rate_ips(spec)
        except ValueError:
            nominal = 1.0  # larger than the cluster now; the policy says why it waits
        alloc = None
        job_status = WAITING_STATUS.get(phase_of(rec.obj), JobStatus.QUEUED)
        mark = now
        if rec.state is State.RUNNING:
            alloc = _allocation(rec.shares, view)
            if alloc is None:
                return None  # on a node that left: settled by the lifecycle
            job_status = JobStatus.RUNNING
            mark = rec.started_s if rec.started_s is not None else now
        executed = float(status.get("executedSeconds") or 0.0)
        total = nominal * (spec.duration_s or 0.0)
        return JobView(
            job_id=rec.key,
            spec=spec,
            status=job_status,
            allocation=alloc,
            mark_s=mark,
            attained_gpu_s=float(status.get("attainedGpuSeconds") or 0.0),
            executed_s=executed,
            done_iters=min(total, executed * nominal),
            total_iters=total,
            rate_ips=nominal if alloc is not None else 0.0,
            resume_s=mark,
            nominal_rate_ips=nominal,
            first_start_s=spec.submit_s if rec.attempt else None,
            waiting_since_s=spec.submit_s,
            restarts=max(0, rec.attempt - 1),
            batch_size=spec.batch_size,
        )

    def _hold_others(
        self,
        pool: GpuPool,
        view: ClusterView,
        records: Mapping[str, JobRecord],
        running: set[str],
    ) -> None:
        """Take out of the pool the GPUs held by unfinished pods of jobs that do not
        run (terminating after a stop, orphans, deleted jobs) and unhealthy GPUs."""
        index = view.uuid_index()
        skip = {name for key in running for p in records[key].pods for name in [_name(p)]}
        for pod in self.caches.pods.items():
            if finished(pod) or _name(pod) in skip:
                continue
            for s in pod_shares(pod):
                if s.uuid in index:
                    _hold(pool, *index[s.uuid], s.fraction, pod_mem_mib(pod))
        for node, gpu in view.unhealthy:
            _hold(pool, node, gpu, 1.0, 0)

    # -- apply ------------------------------------------------------------------------

    def apply(self, plan: Plan) -> None:
        rnd = self._round
        if rnd is None:
            raise RuntimeError("apply before observe")
        self._round = None
        now = self.clock()
        actions = plan.actions(rnd.snapshot)
        starts: list[tuple[JobRecord, Allocation]] = []
        for job_id, action in sorted(actions.items()):
            rec = rnd.records[job_id]
            if action is Action.KEEP:
                continue
            if action in (Action.PREEMPT, Action.SUSPEND, Action.RESIZE, Action.MIGRATE):
                suspend = action is Action.SUSPEND
                why = self._stop_reason(action)
                self.lifecycle.stop(rec, why, SUSPENDED if suspend else PREEMPTED, plan, now)
            if action is not Action.PREEMPT and action is not Action.SUSPEND:
                starts.append((rec, plan.run[job_id]))
        for rec, alloc in starts:
            self._start(rnd, rec, alloc, plan.batch_sizes.get(rec.key), now)
        started = {rec.key for rec, _ in starts}
        for job in rnd.snapshot.waiting():
            if job.job_id not in started:
                self._report_waiting(rnd.records[job.job_id], plan, now)
        self.writer.flush()

    def _stop_reason(self, action: Action) -> Reasoned:
        name = self.policy_name()
        what = {Action.SUSPEND: "suspended", Action.RESIZE: "resized", Action.MIGRATE: "migrated"}
        verb = what.get(action, "preempted")
        return Reasoned(f"{verb.capitalize()}ByPolicy", f"{verb} by the {name} policy")

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
        busy = rnd.occupancy.conflict(shares, mem, rnd.uuid_mem)
        if busy:
            holders = ", ".join(sorted(rnd.occupancy.holders.get(busy, ())))
            msg = f"admitted; waits for {busy} held by terminating pod(s) {holders}"
            pending = Reasoned("WaitingForGpus", msg)
            phase = phase_of(rec.obj) if phase_of(rec.obj) in (PREEMPTED, SUSPENDED) else QUEUED
            self.writer.status(rec.obj, status_mutator(phase, pending, pending=pending, now_s=now))
            return
        rnd.occupancy.add(shares, mem, rec.name)
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
        why = Reasoned("Scheduled", f"{len(shares)} GPU(s) on {', '.join(nodes)}")
        self.writer.status(rec.obj, status_mutator(ADMITTED, why, fields=fields, now_s=now))
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


def _allocation(shares: tuple[ShareRecord, ...], view: ClusterView) -> Allocation | None:
    index = view.uuid_index()
    out = []
    for s in shares:
        where = index.get(s.uuid)
        if where is None or where[0] in view.down_nodes:
            return None
        out.append(GpuShare(where[0], where[1], s.fraction))
    return Allocation(tuple(out)) if out else None


def _hold(pool: GpuPool, node: int, gpu: int, fraction: float, mem_mib: int) -> None:
    """Take a share out of the pool, or the whole GPU if the share does not fit."""
    for share in (GpuShare(node, gpu, fraction), GpuShare(node, gpu, 1.0)):
        alloc = Allocation((share,))
        if pool.fits(alloc, mem_mib):
            pool.take(alloc, mem_mib)
            return
