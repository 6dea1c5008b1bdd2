"""Where jobs run: the `JobBackend` that accepts the routes' jobs, cancels and describes.

Two implementations, chosen by `api.backend_factory.make_backend` from the settings:

- `LocalBackend` (local mode, api.local_mode.backend): the simulator on the wall clock;
- `ClusterModeBackend` (cluster mode, api.cluster_mode.backend, with GPUFLOW_KUBECONFIG or
  GPUFLOW_IN_CLUSTER): each job is a DLJob the operator schedules, followed to
  record its history.

Reads (job lists, events, reasons) come from the job database in both modes; only
accepting a job (`accept`), cancel, the cluster view (`describe`), a worker's logs
(`worker_logs`), a job's speed on each GPU type (`type_throughput`) and an admin's
cordon, drain and uncordon of a node (`maintain_node`) differ.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import TypeAdapter
from sqlalchemy.orm import Session

from api.cluster_view import gpu_rows, link_loads_public, topology_of
from api.jobs.type_throughput import type_throughput_public
from api.local_mode.backend import LocalMode
from api.schemas.cluster import ClusterPublic, NodePublic, TopologyPublic
from api.schemas.job_logs import JobLogsPublic
from api.schemas.jobs import JobCreate, TypeThroughputPublic
from api.store.group_commit import WriterStopped
from api.store.models import Job
from controller.maintenance import NodeAction
from controller.model import JobStatus


class BackendUnavailable(RuntimeError):
    """The backend cannot take the request now (503 with this message)."""


class UnknownNode(LookupError):
    """No node of that name (404 naming it)."""


class UnknownWorker(LookupError):
    """The job has no worker of that rank (404 with this message)."""


# LocalBackend.describe's nodes, validated in one call (api.cluster_view.gpu_rows).
NODES = TypeAdapter(list[NodePublic])

# Local mode simulates jobs: no worker process runs, so there is no log to read.
LOCAL_LOGS_NOTE = "local mode simulates jobs: no worker process runs, so there are no logs"


@dataclass(frozen=True)
class ClusterDescription:
    nodes: list[NodePublic]
    summary: ClusterPublic
    # `JobBackend.nodes_version` of the state the nodes were built from (None: not known).
    version: int | None = None


class JobBackend(Protocol):
    mode: str  # "local" | "cluster"

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def gpu_capacity(self) -> int | None:
        """The most GPUs a job may ask for (None: not known yet)."""
        ...

    def now_s(self) -> float:
        """The backend's clock, for submit_s and event times."""
        ...

    async def accept(
        self,
        job: dict[str, Any],
        event: dict[str, Any],
        body: JobCreate,
        metrics_token: str,
        claim: dict[str, Any] | None = None,
    ) -> None:
        """Accept a new job: store it (Job column values, which it may complete) and its
        "submitted" event durably, with its idempotency key's `claim`
        (api.store.idempotency.job_claim) in the same transaction, then hand it to the
        cluster (with the job's metrics token, for its workers). Raises
        BackendUnavailable, or KeyTaken (api.store.idempotency) or IntegrityError when
        the key was claimed first: nothing stored."""
        ...

    def metrics_reported(self, job_id: str) -> None:
        """The job's report rows were committed (cluster mode: its DLJob's status.train
        is written, later and throttled; local mode: nothing more)."""
        ...

    def cancel(self, session: Session, job: Job) -> bool:
        """Record the cancel in `session`, commit it, then stop the job; False if already
        over. Local mode's scheduler drops the job after the commit; cluster mode deletes
        its DLJob after it (api.cluster_mode.reaper retrying a delete Kubernetes refused)."""
        ...

    def type_throughput(self, job: Job) -> list[TypeThroughputPublic]:
        """The job's speed on each GPU type it has run on (cluster mode: its DLJob's
        status.typeThroughput, from its reports; local mode: the simulator's)."""
        ...

    def describe(self, *, gpus: bool = True) -> ClusterDescription:
        """Nodes and summary; `gpus` False leaves each node's gpu_list empty (the
        summary alone is wanted: 8,000 GPU entries cost ~0.1 s to build at 1,000x8)."""
        ...

    def nodes_version(self) -> int | None:
        """A number that stays the same while `describe()`'s nodes would (local mode:
        LiveCluster.occupancy's version), so that GET /nodes may answer again what it
        answered; None: not known, describe each time (cluster mode)."""
        ...

    def topology(self) -> TopologyPublic:
        """Each node type's GPU link matrix and the racks (api.cluster_view.topology_of)."""
        ...

    def worker_logs(self, job: Job, worker: int, tail_lines: int) -> JobLogsPublic:
        """The last `tail_lines` lines of worker `worker`'s output in the job's latest
        attempt (cluster mode: its pod's log, api.cluster_mode.worker_logs; local mode: a note that
        simulated jobs have none). Raises UnknownWorker, or BackendUnavailable."""
        ...

    def maintain_node(self, name: str, action: NodeAction, by: str) -> NodePublic:
        """Cordon, drain or uncordon the node `name` as admin `by` (controller.maintenance);
        the node afterwards. Raises UnknownNode, or BackendUnavailable."""
        ...


class LocalBackend:
    """Local mode: api.local_mode.backend.LocalMode's LiveCluster behind the JobBackend
    interface."""

    mode = "local"

    def __init__(self, local: LocalMode) -> None:
        self.local = local

    def start(self) -> None:
        self.local.start()

    def stop(self) -> None:
        self.local.stop()

    def gpu_capacity(self) -> int | None:
        return self.local.live.cluster.num_gpus

    def now_s(self) -> float:
        return self.local.live.now_s()

    async def accept(
        self,
        job: dict[str, Any],
        event: dict[str, Any],
        body: JobCreate,
        metrics_token: str,
        claim: dict[str, Any] | None = None,
    ) -> None:
        try:
            await self.local.accept(job, event, claim)
        except WriterStopped as exc:
            raise BackendUnavailable(str(exc)) from None

    def metrics_reported(self, job_id: str) -> None:
        pass  # the simulated cluster has no DLJobs: the rows are all there is

    def type_throughput(self, job: Job) -> list[TypeThroughputPublic]:
        return type_throughput_public(self.local.live.type_throughput(job.id), "simulated")

    def cancel(self, session: Session, job: Job) -> bool:
        return self.local.cancel(session, job)

    def worker_logs(self, job: Job, worker: int, tail_lines: int) -> JobLogsPublic:
        return JobLogsPublic(
            job_id=job.id, worker=worker, workers=0, lines=[], note=LOCAL_LOGS_NOTE
        )

    def maintain_node(self, name: str, action: NodeAction, by: str) -> NodePublic:
        try:
            self.local.maintain(name, action, by)
        except KeyError:
            raise UnknownNode(name) from None
        return next(n for n in self.describe().nodes if n.name == name)

    def topology(self) -> TopologyPublic:
        return topology_of(self.local.live.cluster)

    def nodes_version(self) -> int | None:
        return self.local.live.occupancy().version

    def describe(self, *, gpus: bool = True) -> ClusterDescription:
        live = self.local.live
        occupancy = live.occupancy()
        usage = live.usage()
        allocated: dict[int, float] = defaultdict(float)
        jobs: dict[int, list[str]] = defaultdict(list)
        shares: dict[int, dict[int, list[tuple[str, float]]]] = defaultdict(dict)
        util: dict[int, dict[int, float]] = defaultdict(dict)
        for run in occupancy.running:
            alloc = run.allocation
            per_gpu = run.busy_gpus / alloc.num_gpus
            for share in alloc:
                allocated[share.node] += share.fraction
                on = shares[share.node].setdefault(share.gpu, [])
                on.append((run.job_id, share.fraction))
                busy = util[share.node]
                busy[share.gpu] = min(1.0, busy.get(share.gpu, 0.0) + per_gpu)
            for node in alloc.nodes:
                jobs[node].append(run.job_id)
        down, cordoned = occupancy.down, occupancy.cordoned
        rows = [
            {
                "name": node.name,
                "rack": node.rack,
                "gpu_type": node.gpu_type.name,
                "gpus": node.num_gpus,
                "gpus_allocated": allocated[i],
                "jobs": jobs[i],
                "state": "down" if i in down else "cordoned" if i in cordoned else "ready",
                "gpu_list": gpu_rows(node.num_gpus, shares[i], util[i]) if gpus else [],
            }
            for i, node in enumerate(live.cluster.nodes)
        ]
        nodes = NODES.validate_python(rows)  # one call for every node and GPU
        summary = ClusterPublic(
            name=live.cluster.name,
            nodes=len(live.cluster.nodes),
            gpus=live.cluster.num_gpus,
            gpus_allocated=sum(r.allocation.gpu_weight for r in occupancy.running),
            running=len(occupancy.running),
            waiting=occupancy.waiting,
            finished=live.done_counts().get(JobStatus.SUCCEEDED, 0),
            policy=live.policy_name,
            clock="simulated",
            now_s=live.now_s(),
            time_scale=live.time_scale,
            gpus_free=usage.free_gpus,
            fragmentation=usage.fragmented_gpus,
            link_loads=link_loads_public(usage.link_loads),
        )
        return ClusterDescription(nodes, summary, occupancy.version)
